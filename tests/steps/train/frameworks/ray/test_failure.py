"""A Ray host's failure is on record before its Ray node is stopped: a driver whose raylet is killed can be ended by
Ray's C++ at once, with no Python unwinding left to write it (the run's stop: tests/e2e/test_run_command.py)."""

from types import SimpleNamespace

import pytest

from steps.common.errors import FAILURE_FILE, Terminated, UserError


@pytest.mark.parametrize("error", [Terminated(), UserError("no shards in s3://bucket/x: run Shard first")])
def test_a_failed_ray_host_has_its_failure_file_before_its_node_is_stopped(tmp_path, monkeypatch, error):
    from steps.train.frameworks.ray import trainer

    on_record = []

    def follow(cfg, cluster, node):
        raise error

    def end(node, completed):
        on_record.append((completed, (tmp_path / FAILURE_FILE).read_text() if (tmp_path / FAILURE_FILE).is_file() else None))

    monkeypatch.setattr(trainer, "RayNode", lambda cfg, cluster: SimpleNamespace(is_head=False))
    monkeypatch.setattr(trainer, "follow", follow)
    monkeypatch.setattr(trainer, "_end", end)
    with pytest.raises(type(error)):
        trainer.run_trainer(None, SimpleNamespace(role="data", output_dir=tmp_path), None)
    assert on_record == [(False, error.one_line() + "\n")]


def test_a_completed_ray_host_writes_no_failure(tmp_path, monkeypatch):
    from steps.train.frameworks.ray import trainer

    ended = []
    monkeypatch.setattr(trainer, "RayNode", lambda cfg, cluster: SimpleNamespace(is_head=False))
    monkeypatch.setattr(trainer, "follow", lambda cfg, cluster, node: None)
    monkeypatch.setattr(trainer, "_end", lambda node, completed: ended.append(completed))
    trainer.run_trainer(None, SimpleNamespace(role="data", output_dir=tmp_path), None)
    assert ended == [True] and not (tmp_path / FAILURE_FILE).exists()

"""The cluster a host belongs to: its role comes from its instance group, and every host name resolves before a role
starts, waiting with a deadline as the sagemaker-training toolkit does."""

from __future__ import annotations

import pytest

from steps.common.errors import UserError
from steps.contract import HOSTS_FILE_ENV
from steps.train.core.cluster import DATA, RESOLVE_MAX_WAIT_S, TRAINER, Cluster, resolve, wait_for_host_names
from steps.train.core.config import TrainConfig
from tests.support.environment import FakeEnv

HOSTS = ("algo-1", "algo-2", "algo-3")


class FakeTime:
    """A clock that only moves when the code under test sleeps; ``at``: what happens once it reaches a time."""

    def __init__(self, at: dict | None = None):
        self.now, self.slept, self.at = 100.0, [], sorted((at or {}).items())

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.slept.append(seconds)
        self.now += seconds
        while self.at and self.at[0][0] <= self.now - 100.0:
            self.at.pop(0)[1]()


@pytest.fixture
def hosts_file(tmp_path, monkeypatch):
    path = tmp_path / "hosts"
    monkeypatch.setenv(HOSTS_FILE_ENV, str(path))
    return path


def write(path, *hosts) -> None:
    path.write_text("".join(f"127.9.9.{h[-1]} {h}\n" for h in hosts))


def test_names_that_resolve_at_once_cost_no_wait_and_no_line(hosts_file):
    write(hosts_file, *HOSTS)
    time, lines = FakeTime(), []
    found = wait_for_host_names(HOSTS, 600, clock=time.clock, sleep=time.sleep, log=lines.append)
    assert found == {"algo-1": "127.9.9.1", "algo-2": "127.9.9.2", "algo-3": "127.9.9.3"}
    assert time.slept == [] and lines == []


def test_a_late_name_is_waited_for_with_one_line_per_wait_naming_it(hosts_file):
    write(hosts_file, "algo-1", "algo-3")
    time, lines = FakeTime(at={20.0: lambda: write(hosts_file, *HOSTS)}), []
    found = wait_for_host_names(HOSTS, 600, clock=time.clock, sleep=time.sleep, log=lines.append)
    assert found["algo-2"] == "127.9.9.2"
    assert 20.0 <= sum(time.slept) <= 20.0 + RESOLVE_MAX_WAIT_S  # a name that appears costs at most one more pause
    assert time.slept[:4] == [0.25, 0.5, 1.0, 2.0] and max(time.slept) == RESOLVE_MAX_WAIT_S  # backs off, capped
    waits = lines[:-1]
    assert len(waits) == len(time.slept)
    assert all("waiting for host algo-2 to resolve" in line and "of 600 s (connect_timeout_s)" in line for line in waits)
    assert "0.0 s so far" in waits[0] and "0.2 s so far" in waits[1]  # how long so far
    assert lines[-1].startswith("[cluster] every host name resolves, after 2")


def test_a_missing_hosts_file_is_a_name_not_up_yet(hosts_file):
    time, lines = FakeTime(at={3.0: lambda: write(hosts_file, *HOSTS)}), []
    wait_for_host_names(HOSTS, 600, clock=time.clock, sleep=time.sleep, log=lines.append)
    assert "algo-1" in lines[0] and "does not exist yet" in lines[0]


def test_a_name_that_never_resolves_fails_at_the_deadline_naming_host_and_deadline(hosts_file):
    write(hosts_file, "algo-1", "algo-2")
    time, lines = FakeTime(), []
    with pytest.raises(
        UserError,
        match=r"host name 'algo-3' did not resolve within connect_timeout_s=30 s .*"
        r"not in HETERO_HOSTS_FILE.*raise the connect_timeout_s hyperparameter",
    ) as caught:
        wait_for_host_names(HOSTS, 30, clock=time.clock, sleep=time.sleep, log=lines.append)
    assert caught.value.headline == "host name does not resolve"
    assert sum(time.slept) == pytest.approx(30)  # waited the whole deadline, never past it
    assert all("algo-3" in line for line in lines)


def test_a_hosts_file_is_the_only_name_service_when_set(hosts_file):
    write(hosts_file, "algo-1")
    with pytest.raises(UserError, match="cannot resolve host 'localhost': not in HETERO_HOSTS_FILE"):
        resolve("localhost")  # no fallback to the machine's own resolver: an emulated host has only the cluster's names


def test_every_host_of_the_cluster_is_waited_for_this_one_first():
    groups = {"data_group": ("ml.c5.18xlarge", ["algo-10", "algo-2"]), "dnn_group": ("ml.p4d.24xlarge", ["algo-3", "algo-1"])}
    cluster = Cluster.from_environment(FakeEnv("algo-3", groups, "dnn_group"), TrainConfig())
    assert cluster.hosts == ("algo-3", "algo-1", "algo-2", "algo-10")


def test_role_comes_from_the_group_not_the_host_name():
    groups = {"data_group": ("ml.c5.18xlarge", ["algo-3", "algo-1"]), "dnn_group": ("ml.p4d.24xlarge", ["algo-2"])}
    data = Cluster.from_environment(FakeEnv("algo-1", groups, "data_group"), TrainConfig())
    trainer = Cluster.from_environment(FakeEnv("algo-2", groups, "dnn_group"), TrainConfig())
    assert data.role == DATA and trainer.role == TRAINER and data.heterogeneous
    assert data.data_hosts == ("algo-1", "algo-3") and trainer.trainer_hosts == ("algo-2",)
    single = Cluster.from_environment(FakeEnv("algo-1", {"train": ("ml.g5.xlarge", ["algo-1", "algo-2"])}), TrainConfig())
    assert single.role == TRAINER and not single.heterogeneous and single.world_size == 2


def test_unknown_group_names_say_which_hyperparameters_to_set():
    groups = {"cpu": ("ml.c5.18xlarge", ["algo-1"]), "gpu": ("ml.p4d.24xlarge", ["algo-2"])}
    with pytest.raises(UserError, match=r"\['cpu', 'gpu'\].*data_group='data_group'.*set those hyperparameters"):
        Cluster.from_environment(FakeEnv("algo-1", groups, "cpu"), TrainConfig())
    renamed = Cluster.from_environment(FakeEnv("algo-1", groups, "cpu"), TrainConfig(data_group="cpu", dnn_group="gpu"))
    assert renamed.role == DATA

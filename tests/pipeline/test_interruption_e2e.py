"""A spot interruption on the emulated cluster: SIGTERM to every host mid-training, a restart from the
checkpoints, and the same accounting as an uninterrupted run (each sample once per epoch)."""

from __future__ import annotations

import json

import pytest

from pipeline.graph import resolve_parameters
from pipeline.harness import listeners_on
from pipeline.local import LocalOptions, LocalRunner

pytestmark = pytest.mark.e2e


def _metrics(result, step: str) -> dict:
    return json.loads((result.jobs[step].model_dir / "metrics.json").read_text())


def _attempt_logs(result, step: str) -> str:
    job_dir = result.jobs[step].job_dir
    return "".join(p.read_text() for p in job_dir.with_name(f"{job_dir.name}.attempt-1").glob("algo-*/output/host.log"))


def test_pytorch_jobs_resume_mid_epoch_and_consume_each_sample_once_per_epoch(tmp_path, tiny_images, no_leftovers):
    params = resolve_parameters({"InputData": str(tiny_images), "DataInstanceCount": 2, "Epochs": 2, "BatchSize": 8,
                                 "ShardSizeMB": 1, "WorkloadOptions": '{"blur_passes": 1}'})
    lines = []
    result = LocalRunner(params, LocalOptions(work_dir=tmp_path, grace_s=10, step_timeout_s=300, echo=lines.append,
                                              spot=True, interrupt_after_steps=10)).run()

    train_samples = json.loads((result.outputs["Shard"] / "manifest.json").read_text())["splits"]["train"]["samples"]
    for step in ("TrainBaseline", "TrainHeterogeneous"):
        job = result.jobs[step]
        assert job.interruptions == 1
        assert "[checkpoint] saved (SIGTERM): epoch 0" in _attempt_logs(result, step)
        metrics = _metrics(result, step)
        ledger = metrics["sample_ledger"]
        assert ledger["resumes"] == 1 and ledger["partial_epoch"] is None
        assert [(e["epoch"], e["samples"], e["distinct"], e["duplicates"]) for e in ledger["epochs"]] == [
            (0, train_samples, train_samples, 0), (1, train_samples, train_samples, 0)]
        assert ledger["epochs"][0]["digest"] == ledger["epochs"][1]["digest"]  # the same samples, each epoch
        assert metrics["samples_seen"] == 2 * train_samples  # the same accounting as an uninterrupted run
        assert all(h.exit_code == 0 for h in job.hosts)
    # the data hosts started the interrupted epoch without what was already trained on
    assert any("resuming at epoch 0" in line for line in lines)
    assert result.price_performance["runs"]["heterogeneous"]
    assert not listeners_on(result.jobs.values())


def test_tensorflow_job_resumes_at_the_epoch_boundary_and_says_what_it_redoes(tmp_path, tiny_images, no_leftovers):
    params = resolve_parameters({"InputData": str(tiny_images), "Epochs": 2, "BatchSize": 8, "ShardSizeMB": 1,
                                 "RunBaseline": False, "WorkloadOptions": '{"blur_passes": 1}'})
    result = LocalRunner(params, LocalOptions(work_dir=tmp_path, framework="tensorflow", grace_s=10, step_timeout_s=300,
                                              echo=lambda line: None, interrupt_after_steps=40)).run()

    job = result.jobs["TrainHeterogeneous"]
    assert job.interruptions == 1
    failure = next(h.base_dir for h in job.hosts if h.role == "trainer")  # the final attempt's trainer
    logs = _attempt_logs(result, "TrainHeterogeneous")
    assert "interrupted: SIGTERM" in logs and "step(s) of epoch 1 done so far are redone" in logs
    metrics = _metrics(result, "TrainHeterogeneous")
    train = json.loads((result.outputs["Shard"] / "manifest.json").read_text())["splits"]["train"]["samples"]
    assert metrics["resumes"] == 1
    assert [(a["epoch"], a["distinct"], a["missing"]) for a in metrics["epoch_accounting"]] == [(e, train, 0) for e in range(2)]
    assert metrics["samples_seen"] == 2 * train
    assert not (failure / "output" / "failure").exists()
    assert all(h.exit_code == 0 for h in job.hosts)

"""Hybrid decode on the emulated cluster: the trainer hosts' spare vCPUs decode a share of every epoch
beside the data hosts, each sample once per epoch, and a failure anywhere still ends every host."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest

from pipeline.emulator.job import EmulatedJob
from tests.support.harness import by_role, listeners_on, start_training_job, tiny_pipeline, two_group_request

pytestmark = pytest.mark.e2e

HYBRID = {"trainer_cpus": "1"}  # the emulated hosts are not pinned: each sees this machine's 2 CPUs, 1 decodes


def _train_samples(shards) -> int:
    return json.loads((shards / "manifest.json").read_text())["splits"]["train"]["samples"]


def _exact_ledger(metrics: dict, samples: int, epochs: int) -> None:
    assert [(e["epoch"], e["samples"], e["distinct"], e["duplicates"]) for e in metrics["sample_ledger"]["epochs"]] == [
        (e, samples, samples, 0) for e in range(epochs)
    ]


def test_the_pipeline_trains_hybrid_one_data_host_one_trainer(tmp_path, tiny_images, no_leftovers):
    # Precision bf16: autocast on the CPU (this test asserts the data accounting, not bit-identical weights)
    runner, lines = tiny_pipeline(
        tmp_path,
        tiny_images,
        {"BatchSize": 8, "TrainerCpus": "1", "RunBaseline": False, "Precision": "bf16"},
        pin_cpus=False,
    )
    result = runner.run()
    job = result.jobs["TrainHeterogeneous"]
    metrics = json.loads((job.model_dir / "metrics.json").read_text())
    samples = _train_samples(result.outputs["Shard"])
    _exact_ledger(metrics, samples, 2)
    (local,) = metrics["local_decode"]
    data_sent = sum(h["samples_sent"] for h in metrics["data_hosts"])
    assert local["workers"] == 1 and local["kept_cpus"] == 1 and local["split"]["trainers"] == [1]
    assert local["samples"] > 0 and local["samples"] + data_sent == 2 * samples  # local and remote, each sample once
    assert local["decode_cpu_s_per_sample"] > 0
    # each decoding host's retune history: the trainer's one spare worker has nothing to retune, the data host's pool
    # (this machine's 2 CPUs) stays within its bounds, every change recorded as it was made
    assert local["decode_workers"] == {
        "start": 1,
        "end": 1,
        "changed": 0,
        "changes": [],
        "off": "one decode worker: nothing to retune",
    }
    (host,) = metrics["data_hosts"]
    workers = host["decode_workers"]
    assert workers["start"] == 2 and workers["bounds"] == [1, 2] and 1 <= workers["end"] <= 2
    assert workers["changed"] == len(workers["changes"]) and all(abs(c["to"] - c["from"]) == 1 for c in workers["changes"])
    assert any("the trainers decode 1 of every" in line for line in lines)
    assert metrics["gpus"] == {"per_host": 0, "used_per_host": 0, "idle": None}  # this machine has no GPU
    assert metrics["precision"] == {"requested": "bf16", "used": "bf16"} and metrics["config"]["precision"] == "bf16"
    assert any(line.endswith(": precision bf16") for line in lines)  # the trainer's start line
    assert all(h.exit_code == 0 for h in job.hosts)
    assert not listeners_on(result.jobs.values())


def test_two_data_hosts_and_two_hybrid_trainers_consume_each_sample_once(tmp_path, shards, code_uri, no_leftovers):
    samples = _train_samples(shards)
    request = two_group_request(
        tmp_path,
        shards,
        code_uri,
        data=2,
        dnn=2,
        hyperparameters={
            "epochs": 2,
            "batch_size": 8,
            "workload_options": {"blur_passes": 1},
            "connect_timeout_s": 60,
            "streams_per_flow": 2,
            **HYBRID,
        },
    )
    with EmulatedJob(name="job", request=request, job_dir=tmp_path / "job", grace_s=30, timeout_s=300) as job:
        job.start()
        result = job.wait()
    assert result.ok, result.failure
    trainers = by_role(job, "trainer")
    metrics = json.loads((result.model_dir / "metrics.json").read_text())
    _exact_ledger(metrics, samples, 2)  # over two connections per data host and trainer
    assert metrics["data_hosts"] and {h["streams"] for h in metrics["data_hosts"]} == {2}
    assert sorted(m["host"] for m in metrics["local_decode"]) == sorted(t.name for t in trainers)
    assert {tuple(m["split"]["trainers"]) for m in metrics["local_decode"]} == {(1, 1)}
    assert all(m["samples"] > 0 for m in metrics["local_decode"])
    assert all(h.exit_code == 0 for h in job.hosts)


def test_a_killed_hybrid_trainer_takes_every_data_host_down(tmp_path, shards, code_uri, no_leftovers):
    job = start_training_job(tmp_path, shards, code_uri, hyperparameters=HYBRID)
    with job:
        trainer = by_role(job, "trainer")[0]
        workers = psutil.Process(trainer.process.pid).children(recursive=True)
        assert workers, "the hybrid trainer runs no decode workers"
        killed_at = time.monotonic()
        os.killpg(trainer.process.pid, signal.SIGKILL)  # the host with its decode workers: a lost instance
        result = job.wait()
    assert not result.ok and trainer.name in result.failure
    for host in by_role(job, "data"):
        assert not host.stopped_by_emulator and host.exit_code != 0
        assert host.ended_at - killed_at < 30
        assert trainer.name in host.failure


def test_a_killed_data_host_ends_a_hybrid_trainer_that_names_it(tmp_path, shards, code_uri, no_leftovers):
    job = start_training_job(tmp_path, shards, code_uri, hyperparameters=HYBRID)
    with job:
        victim = by_role(job, "data")[0]
        os.killpg(victim.process.pid, signal.SIGKILL)
        result = job.wait()
    trainer = by_role(job, "trainer")[0]
    assert not result.ok and not trainer.stopped_by_emulator and trainer.exit_code != 0
    assert victim.name in trainer.failure and "lost" in trainer.failure
    assert all(not h.stopped_by_emulator for h in job.hosts)


def test_a_killed_local_decode_worker_ends_the_job_and_says_so(tmp_path, shards, code_uri, no_leftovers):
    job = start_training_job(tmp_path, shards, code_uri, hyperparameters=HYBRID)
    with job:
        trainer = by_role(job, "trainer")[0]
        (worker, *_) = psutil.Process(trainer.process.pid).children(recursive=True)
        # its one worker runs on the trainer host's last vCPU: the loop keeps the first
        assert worker.cpu_affinity() == sorted(psutil.Process(trainer.process.pid).cpu_affinity())[-1:]
        worker.kill()
        result = job.wait()
    assert not result.ok and not trainer.stopped_by_emulator and trainer.exit_code != 0
    assert "local decode failed" in trainer.failure and trainer.name in trainer.failure
    for host in by_role(job, "data"):
        assert not host.stopped_by_emulator and host.exit_code != 0
        assert trainer.name in host.failure

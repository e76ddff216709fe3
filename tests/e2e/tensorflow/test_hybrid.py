"""Hybrid decode with TensorFlow on the emulated cluster: a tf.data.service worker on the trainer host serves a share of
every epoch beside the data hosts, each sample once per epoch, and a failure of either ends every host."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest

from pipeline.emulator.job import EmulatedJob
from tests.support.harness import by_role, confinement_breaches, start_training_job, two_group_request

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.e2e

HYBRID = {"trainer_cpus": "1"}  # the emulated hosts are not pinned: each sees this machine's 2 CPUs, 1 decodes


def _train_samples(shards) -> int:
    return json.loads((shards / "manifest.json").read_text())["splits"]["train"]["samples"]


def _local_worker(trainer) -> psutil.Process:
    (worker,) = [
        p
        for p in psutil.Process(trainer.process.pid).children(recursive=True)
        if any("frameworks.tensorflow.local_decode" in part for part in p.cmdline())
    ]
    return worker


def test_a_tensorflow_trainer_host_serves_its_share_and_every_sample_arrives_once(tmp_path, tf_shards, code_uri, no_leftovers):
    """One data host, ShardedByS3Key; FullyReplicated over two data hosts with a corrupt sample runs in
    test_pipeline.py's channel-layout test."""
    data_hosts, distribution = 1, "ShardedByS3Key"
    samples = _train_samples(tf_shards)
    request = two_group_request(
        tmp_path,
        tf_shards,
        code_uri,
        data=data_hosts,
        distribution=distribution,
        hyperparameters={
            "framework": "tensorflow",
            "epochs": 2,
            "batch_size": 16,
            "workload_options": {"blur_passes": 0},
            **HYBRID,
        },
    )
    with EmulatedJob(name="job", request=request, job_dir=tmp_path / "job", grace_s=10, timeout_s=300) as job:
        job.start()
        result = job.wait()
    assert result.ok, result.failure
    metrics = json.loads((result.model_dir / "metrics.json").read_text())
    assert [(a["epoch"], a["received"], a["distinct"], a["missing"]) for a in metrics["epoch_accounting"]] == [
        (e, samples, samples, 0) for e in range(2)
    ]
    (local,) = metrics["local_decode"]
    assert local["workers"] == 1 and local["split"]["trainers"] == [1] and local["split"]["period"] == 1 + 2 * data_hosts
    assert 0 < local["samples_per_epoch"] < samples and local["samples"] == 2 * local["samples_per_epoch"]
    assert metrics["gpus"] == {"per_host": 0, "used_per_host": 0, "idle": None}  # this machine has no GPU
    assert all(h.exit_code == 0 for h in job.hosts)


def test_a_killed_tensorflow_local_worker_ends_the_job_and_says_so(tmp_path, tf_shards, code_uri, no_leftovers):
    job = start_training_job(tmp_path, tf_shards, code_uri, hyperparameters={"framework": "tensorflow", **HYBRID})
    with job:
        trainer = by_role(job, "trainer")[0]
        assert not confinement_breaches(job)  # the local worker too: it inherits the trainer's bind_guard
        _local_worker(trainer).kill()
        result = job.wait()
    assert not result.ok and not trainer.stopped_by_emulator and trainer.exit_code != 0
    assert "local decode failed" in trainer.failure and "tf.data.service worker" in trainer.failure
    for host in by_role(job, "data"):
        assert not host.stopped_by_emulator and host.exit_code != 0 and trainer.name in host.failure


def test_a_killed_tensorflow_trainer_takes_its_local_worker_and_the_data_hosts_down(tmp_path, tf_shards, code_uri, no_leftovers):
    job = start_training_job(tmp_path, tf_shards, code_uri, hyperparameters={"framework": "tensorflow", **HYBRID})
    with job:
        trainer = by_role(job, "trainer")[0]
        worker = _local_worker(trainer)
        os.kill(trainer.process.pid, signal.SIGKILL)  # the trainer process alone: its worker must not outlive it
        result = job.wait()
        worker.wait(timeout=10)
    assert not result.ok and trainer.name in result.failure
    for host in by_role(job, "data"):
        assert not host.stopped_by_emulator and host.exit_code != 0 and trainer.name in host.failure

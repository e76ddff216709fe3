"""The TensorFlow path on an emulated cluster: tf.data.service end to end, and hosts that die."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import pytest

from pipeline.emulator.hosts import HOST_NAME
from pipeline.emulator.job import EmulatedJob
from pipeline.errors import StepFailed
from pipeline.graph import resolve_parameters
from pipeline.local.runner import LocalRunner
from pipeline.local.settings import LocalOptions
from tests.support.harness import (
    by_role,
    confinement_breaches,
    fault,
    start_training_job,
    two_group_request,
)

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "data_hosts,distribution,max_corrupt_share,trainer_cpus",
    [(1, "ShardedByS3Key", 0.0, None), (2, "FullyReplicated", 0.05, "1")],
)
def test_a_tensorflow_job_serves_every_sample_once_whatever_the_channel_layout(
    tmp_path, tf_shards_with_a_corrupt_sample, code_uri, no_leftovers, data_hosts, distribution, max_corrupt_share, trainer_cpus
):
    """FullyReplicated: every data host sees every shard and must serve only its share, beside the trainer host's own
    tf.data.service worker (hybrid decode, trainer_cpus=1: the emulated hosts are not pinned, each sees this machine's 2
    CPUs, 1 decodes). One sample does not decode: within max_corrupt_share it is counted and named once per epoch (by
    whichever host owns it), never served; over it (0: none may fail), the first epoch's accounting ends the job as a
    user error naming it."""
    shards = tf_shards_with_a_corrupt_sample
    request = two_group_request(
        tmp_path,
        shards,
        code_uri,
        data=data_hosts,
        distribution=distribution,
        hyperparameters={
            "framework": "tensorflow",
            "epochs": 2,
            "batch_size": 16,
            "workload_options": {"blur_passes": 0},
            "max_corrupt_share": max_corrupt_share,
            **({"trainer_cpus": trainer_cpus} if trainer_cpus else {}),
        },
    )
    with EmulatedJob(name="job", request=request, job_dir=tmp_path / "job", grace_s=10, timeout_s=300) as job:
        job.start()
        result = job.wait()
    samples = json.loads((shards / "manifest.json").read_text())["splits"]["train"]["samples"]
    if max_corrupt_share == 0:
        assert not result.ok  # whichever host the emulator saw exit first, the reason is the trainer's
        assert f"corrupt data: epoch 0: 1 of its {samples} samples" in result.failure
        assert f"sample {CORRUPT_ID}: " in result.failure and "raise MaxCorruptShare" in result.failure
        assert [h.exit_code for h in result.hosts if h.role == "trainer"] == [2]
        assert all(h.exit_code != 0 and not h.stopped_by_emulator for h in result.hosts)
        return
    assert result.ok, result.failure
    metrics = json.loads((result.model_dir / "metrics.json").read_text())
    assert [(a["epoch"], a["received"], a["distinct"], a["missing"]) for a in metrics["epoch_accounting"]] == [
        (e, samples - 1, samples - 1, 1) for e in range(2)
    ]
    assert metrics["corrupt_samples"]["count"] == 2
    assert [c[0] for c in metrics["corrupt_samples"]["examples"]] == [CORRUPT_ID]
    (local,) = metrics["local_decode"]  # the trainer host's worker served a share of every epoch
    assert local["workers"] == 1 and local["split"]["trainers"] == [1] and local["split"]["period"] == 1 + 2 * data_hosts
    assert 0 < local["samples_per_epoch"] < samples and local["samples"] > 0


def test_tensorflow_path_says_it_trains_on_one_host(tmp_path, tiny_images, no_leftovers):
    params = resolve_parameters(
        {"InputData": str(tiny_images), "DnnInstanceCount": 2, "RunBaseline": False, "Epochs": 1, "ShardSizeMB": 1}
    )
    runner = LocalRunner(params, LocalOptions(work_dir=tmp_path, framework="tensorflow", grace_s=10, echo=lambda _: None))
    with pytest.raises(
        StepFailed, match="step InvalidParameters:.*DnnInstanceCount=2 .the tensorflow path trains on at most 1 dnn host"
    ):
        runner.run()
    assert runner.result.skipped[:1] == ["Shard"] and not runner.result.jobs  # refused before any job


# --- hosts that die or freeze --------------------------------------------------------------------

CORRUPT_ID = 999_999


@pytest.fixture(scope="module")
def tf_shards_with_a_corrupt_sample(tmp_path_factory, tf_shards):
    """The TFRecord shards plus one sample in the first training shard whose bytes are not an image."""
    from steps.formats.tfrecord import iter_tfrecord_shard, write_tfrecord_shard

    shards = tmp_path_factory.mktemp("tf-shards-corrupt") / "shards"
    shutil.copytree(tf_shards, shards)
    manifest = json.loads((shards / "manifest.json").read_text())
    entry = manifest["splits"]["train"]["shards"][0]
    path = shards / entry["name"]
    samples = [(s.sample_id, s.label, s.ext, s.raw) for s in iter_tfrecord_shard(path)]
    write_tfrecord_shard(path, [*samples, (CORRUPT_ID, 0, "jpg", b"\xff\xd8 not really a jpeg")])
    entry["samples"] += 1
    manifest["splits"]["train"]["samples"] += 1
    (shards / "manifest.json").write_text(json.dumps(manifest))
    return shards


def start_job(tmp_path, shards, code_uri, *, silence_timeout_s=30.0, grace_s=120.0):
    return start_training_job(
        tmp_path,
        shards,
        code_uri,
        silence_timeout_s=silence_timeout_s,
        grace_s=grace_s,
        hyperparameters={"framework": "tensorflow"},
    )


def test_killed_trainer_takes_every_tf_worker_down(tmp_path, tf_shards, code_uri, no_leftovers):
    job = start_job(tmp_path, tf_shards, code_uri)
    with job:
        assert not confinement_breaches(job)
        trainer = by_role(job, "trainer")[0]
        os.kill(trainer.process.pid, signal.SIGKILL)  # dispatcher and trainer go together
        result = job.wait()
    assert not result.ok and trainer.name in result.failure
    for host in by_role(job, "data"):
        assert not host.stopped_by_emulator, f"{host.name} had to be stopped by the emulator"
        assert host.exit_code != 0 and trainer.name in host.failure and "without STOP" in host.failure
    for host in job.hosts:  # nothing logs the environment (AutoGraph did, converting a call to os.environ.setdefault)
        assert "environ(" not in (host.base_dir / "output" / "host.log").read_text(), host.name


def test_frozen_trainer_is_noticed_by_the_tf_workers_and_named_first_by_the_job(tmp_path, tf_shards, code_uri, no_leftovers):
    job = start_job(tmp_path, tf_shards, code_uri, silence_timeout_s=3, grace_s=20)
    with job:
        trainer = by_role(job, "trainer")[0]
        fault(trainer, signal.SIGSTOP)  # the trainer and its dispatcher, alive but silent
        result = job.wait()  # the frozen trainer never exits: the emulator ends it, grace_s after the first data host
    for host in by_role(job, "data"):  # each out by itself (a worker draining the frozen trainer's calls took 20-60 s)
        assert not host.stopped_by_emulator, f"{host.name} had to be stopped by the emulator"
        assert host.exit_code != 0 and ("silent" in host.failure or "sent nothing" in host.failure), host.failure
        assert HOST_NAME.search(host.failure).group() == trainer.name, host.failure
    assert HOST_NAME.search(result.failure).group() == trainer.name, result.failure  # not the data host that noticed
    assert trainer.stopped_by_emulator


def test_killed_data_host_fails_the_trainer_naming_it(tmp_path, tf_shards, code_uri, no_leftovers):
    job = start_job(tmp_path, tf_shards, code_uri)
    with job:
        victim = by_role(job, "data")[0]
        os.killpg(victim.process.pid, signal.SIGKILL)
        result = job.wait()
    trainer = by_role(job, "trainer")[0]
    assert not trainer.stopped_by_emulator, "the trainer hung and had to be stopped"
    assert trainer.exit_code != 0 and victim.name in trainer.failure and "lost" in trainer.failure
    survivor = by_role(job, "data")[1]
    assert not survivor.stopped_by_emulator and survivor.exit_code != 0
    assert survivor.failure.startswith(f"job stopped: data host lost: data host {victim.name} ")  # the failed host first
    assert not result.ok


def test_losing_the_only_data_host_ends_a_trainer_blocked_in_tensorflow(tmp_path, tf_shards, code_uri, no_leftovers):
    job = start_training_job(
        tmp_path, tf_shards, code_uri, silence_timeout_s=5, data=1, hyperparameters={"framework": "tensorflow"}
    )
    with job:
        (victim,) = by_role(job, "data")
        killed_at = time.monotonic()
        os.killpg(victim.process.pid, signal.SIGKILL)  # nothing else can feed the trainer: its next batch never comes
        result = job.wait()
    (trainer,) = by_role(job, "trainer")
    assert not trainer.stopped_by_emulator, "the trainer hung and had to be stopped"
    assert trainer.ended_at - killed_at < 60
    assert trainer.exit_code != 0 and victim.name in trainer.failure and "lost" in trainer.failure
    assert not result.ok

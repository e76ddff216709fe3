"""Hosts that die or freeze: every other host exits by itself, and says why, naming the host that failed first (as does
the job's failure, its first error line). How fast is the fault bench's to measure (bench/faults.py)."""

from __future__ import annotations

import os
import signal

import pytest

from pipeline.emulator.hosts import HOST_NAME
from pipeline.emulator.job import EmulatedJob
from steps.contract import DNN_GROUP
from tests.support.harness import by_role, fault, start_training_job, two_group_request

pytestmark = pytest.mark.e2e

LATE_S = 20  # the late resolution a run must survive (host names may resolve late on SageMaker)


def test_killed_trainer_takes_every_data_host_down_by_itself(tmp_path, shards, code_uri, no_leftovers):
    job = start_training_job(tmp_path, shards, code_uri)
    with job:
        trainer = by_role(job, "trainer")[0]
        os.kill(trainer.process.pid, signal.SIGKILL)
        result = job.wait()
    assert not result.ok and trainer.name in result.failure and "signal 9" in result.failure
    for host in by_role(job, "data"):
        assert not host.stopped_by_emulator, f"{host.name} had to be stopped by the emulator"
        assert host.exit_code != 0
        assert trainer.name in host.failure and "without STOP" in host.failure
        log = (host.base_dir / "output" / "host.log").read_text()  # the trainer's end, in one line: no stack of its own
        assert "Traceback" not in log and log.rstrip().splitlines()[-1] == f"ERROR {host.failure}", log[-3000:]


def test_frozen_trainer_is_noticed_by_every_data_host_and_named_first_by_the_job(tmp_path, shards, code_uri, no_leftovers):
    job = start_training_job(tmp_path, shards, code_uri, silence_timeout_s=3, grace_s=10)  # both data hosts notice within 1-2 s
    with job:
        trainer = by_role(job, "trainer")[0]
        fault(trainer, signal.SIGSTOP)  # alive but silent: no FIN ever reaches the data hosts
        result = job.wait()  # the frozen trainer never exits: the emulator ends it, grace_s after the first data host
    for host in by_role(job, "data"):
        assert not host.stopped_by_emulator, f"{host.name} had to be stopped by the emulator"
        assert host.exit_code != 0 and ("silent" in host.failure or "sent nothing" in host.failure), host.failure
        assert HOST_NAME.search(host.failure).group() == trainer.name, host.failure
    # a data host failed first, yet the job's failure leads with the host that froze
    assert result.failure.startswith(f"step job: host {trainer.name} ({DNN_GROUP}, trainer) failed, as host algo-"), (
        result.failure
    )
    assert trainer.stopped_by_emulator and not trainer.failure


def test_killed_data_host_is_named_with_the_samples_lost(tmp_path, shards, code_uri, no_leftovers):
    job = start_training_job(tmp_path, shards, code_uri)
    with job:
        victim = by_role(job, "data")[0]
        os.killpg(victim.process.pid, signal.SIGKILL)  # the host and its decode workers: a lost instance
        result = job.wait()
    trainer = by_role(job, "trainer")[0]
    assert not trainer.stopped_by_emulator, "the trainer hung and had to be stopped"
    assert trainer.exit_code != 0
    assert victim.name in trainer.failure and "samples" in trainer.failure and "lost" in trainer.failure
    survivor = by_role(job, "data")[1]
    assert not survivor.stopped_by_emulator and survivor.exit_code != 0
    # the survivor's failure leads with the host that failed, then who stopped the job
    assert survivor.failure.startswith(f"job stopped: data host lost: data host {victim.name} ")
    assert f"(STOP from trainer {trainer.name})" in survivor.failure
    assert not result.ok


def test_host_names_that_resolve_late_delay_the_start_not_the_run(tmp_path, shards, code_uri, no_leftovers):
    request = two_group_request(
        tmp_path,
        shards,
        code_uri,
        data=2,
        hyperparameters={
            "epochs": 1,
            "max_steps": 4,
            "batch_size": 8,
            "workload_options": {"blur_passes": 0},
            "heartbeat_s": 0.5,
            "silence_timeout_s": 10,
            "connect_timeout_s": 60,
        },
    )
    job = EmulatedJob(name="job", request=request, job_dir=tmp_path / "job", grace_s=20, timeout_s=240, late_hostnames_s=LATE_S)
    with job:
        job.start()
        result = job.wait()
    assert result.ok, result.failure
    resolved_after = []
    for host in job.hosts:
        lines = (host.base_dir / "output" / "host.log").read_text().splitlines()
        waits = [i for i, line in enumerate(lines) if line.startswith("[cluster] waiting for host ")]
        done = next(i for i, line in enumerate(lines) if line.startswith("[cluster] every host name resolves, after "))
        role = next(i for i, line in enumerate(lines) if line.startswith("[launcher] host="))
        assert waits and max(waits) < done < role, lines[:20]  # one line per wait, all before the role starts
        resolved_after.append(float(lines[done].rsplit("after ", 1)[1].split()[0]))
    # Every host waited for a name that was not there yet (the last one appears LATE_S after the hosts start); how long
    # each waited depends on its own start-up time, so only that it waited is asserted, not for how long.
    assert all(after > 0 for after in resolved_after), resolved_after

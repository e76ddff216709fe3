"""The emulator's progress watchdog: a job none of whose hosts reports progress (a status or metric line of the step
code) for ``progress_timeout_s`` fails naming the hosts still running, the one silent longest first, instead of hanging;
a framework's own output (a progress bar redrawn while nothing advances) is no progress; a job that keeps reporting runs
past the deadline. Tiny entry points in the job's code folder: no framework, seconds each."""

from __future__ import annotations

import time

import pytest

from pipeline import storage
from pipeline.emulator.failures import PROGRESS_LINE
from pipeline.emulator.job import EmulatedJob
from pipeline.emulator.sessions import session_members
from steps.contract import DATA_GROUP, DNN_GROUP
from tests.support.harness import training_request

HOST = """
import json, os, sys, time
config = json.load(open(os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "input", "config", "resourceconfig.json")))
me = config["current_host"]
"""

# the trainer logs a few steps and ends; the data host said it serves, then prints only what a framework prints while
# nothing advances (Ray Data's progress bar of a read that never starts)
STUCK = (
    HOST
    + """
if config["current_group_name"] == "dnn_group":
    for step in range(1, 4):
        print(f"[metrics] epoch=0 step={step} step_time_ms=100.0", flush=True)
        time.sleep(0.1)
    sys.exit(0)
print(f"[data] {me}: serving", flush=True)
while True:
    print("Running Dataset: dataset_0. Active & requested resources: 1/0 CPU: : 0.00 row [00:01, ? row/s]", flush=True)
    time.sleep(0.1)
"""
)

# both hosts report every 0.4 s for 2 s, longer than the deadline
STEADY = (
    HOST
    + """
for i in range(1, 6):
    print(f"[metrics] epoch=0 step={i} step_time_ms=400.0" if config["current_group_name"] == "dnn_group" else f"[data] {me}: {i}",
          flush=True)
    time.sleep(0.4)
"""
)


def _job(tmp_path, program: str, progress_timeout_s: float) -> EmulatedJob:
    code = tmp_path / "code"
    code.mkdir()
    (code / "entry.py").write_text(program)
    request = training_request(
        code_uri=storage.uri(code),
        output=tmp_path / "output",
        channels=[],
        hyperparameters={},
        groups=[(DATA_GROUP, "ml.c5.4xlarge", 1), (DNN_GROUP, "ml.g5.xlarge", 1)],
    )
    del request["AlgorithmSpecification"]["ContainerEntrypoint"]  # script mode: the toolkit runs entry.py
    request["HyperParameters"]["sagemaker_program"] = "entry.py"
    return EmulatedJob(
        name="job", request=request, job_dir=tmp_path / "job", grace_s=5, timeout_s=120, progress_timeout_s=progress_timeout_s
    )


@pytest.mark.slow
def test_a_job_whose_hosts_stop_reporting_progress_fails_naming_the_stuck_host(tmp_path, no_leftovers):
    started = time.monotonic()
    with _job(tmp_path, STUCK, progress_timeout_s=2) as job:
        job.start()
        result = job.wait()
    elapsed = time.monotonic() - started
    data = next(h for h in job.hosts if h.role == "data")
    trainer = next(h for h in job.hosts if h.role == "trainer")
    assert not result.ok
    assert "no host reported progress" in result.failure and "for 2 s" in result.failure, result.failure
    assert f"host {data.name} ({DATA_GROUP}, data) silent" in result.failure
    assert f"'[data] {data.name}: serving'" in result.failure  # the last progress it reported
    assert trainer.name not in result.failure  # it had ended: not stuck
    assert data.stopped_by_emulator and trainer.exit_code == 0
    assert elapsed < 2 + 1 + 5 + 10  # the deadline after the trainer's end, the emulator's stop, start-up
    assert "row/s" in (data.base_dir / "output" / "host.log").read_text()  # it printed all along: no progress
    assert not any(session_members(h.process.pid) for h in job.hosts)


@pytest.mark.slow
def test_a_job_that_keeps_reporting_progress_runs_past_the_deadline(tmp_path, no_leftovers):
    with _job(tmp_path, STEADY, progress_timeout_s=1.5) as job:
        job.start()
        result = job.wait()
    assert result.ok, result.failure
    assert all(h.exit_code == 0 and not h.stopped_by_emulator for h in job.hosts)


def test_progress_lines_are_the_step_codes_own_not_a_frameworks():
    assert PROGRESS_LINE.match("[metrics] epoch=0 step=10 step_time_ms=80.1")
    assert PROGRESS_LINE.match("[data] algo-2: 4 shards, 2696 samples")
    assert PROGRESS_LINE.match("(RayTrainWorker pid=5311) [metrics] epoch=2 step=110 step_time_ms=70.0")
    assert PROGRESS_LINE.match("(Results pid=4892, ip=127.9.9.1) [checkpoint] saved (end of epoch): epoch 3")
    assert not PROGRESS_LINE.match("(pid=6912) Running Dataset: dataset_0. Active & requested resources: 1/0 CPU")
    assert not PROGRESS_LINE.match("(TrainController pid=5091) [2026-11-25 16:18:14,993 E 5091 5121] core_worker.cc:2465: ...")
    assert not PROGRESS_LINE.match("2026-11-25 16:17:52,402\tINFO usage_lib.py:448 -- Usage stats collection is disabled.")
    assert not PROGRESS_LINE.match("W0000 00:00:1764087472.1 123 tensorflow/core/...")

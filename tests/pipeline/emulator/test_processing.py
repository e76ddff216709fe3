"""An emulated processing job runs its entry point as its container would, and goes with a stop of the run."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

import pytest

from pipeline.emulator.container_env import TWIN, image_env
from pipeline.emulator.processing import run_processing_job
from pipeline.sagemaker.images import default_processing_image
from pipeline.stop import STOP, Signalled
from tests.support.stop import run_stop, signal_when  # noqa: F401 - fixture

DUMP_ENVIRONMENT = "import json, os; open('environment.json', 'w').write(json.dumps(dict(os.environ)))"


@pytest.mark.slow  # starts a processing container (0.7-1 s)
def test_a_processing_job_starts_with_its_containers_environment_and_nothing_of_the_callers(tmp_path, monkeypatch):
    """The caller's shell reaches no processing job; it has its image's ENV (the TensorFlow CPU image here), the
    request's Environment and the twin's own, and no training job's variables."""
    monkeypatch.setenv("HETERO_CALLER_ONLY", "1")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    image = default_processing_image("us-east-1", "tensorflow")
    request = {
        "AppSpecification": {"ImageUri": image, "ContainerEntrypoint": ["python3", "-c", DUMP_ENVIRONMENT]},
        "Environment": {"FROM_REQUEST": "yes"},
    }
    job_dir = tmp_path / "job"
    result = run_processing_job(
        name="p", request=request, job_dir=job_dir, step="Probe", echo=lambda line: None, extra_env={"HETERO_TWIN_EXTRA": "x"}
    )
    assert result.ok, result.failure
    env = json.loads((job_dir / "environment.json").read_text())
    assert "HETERO_CALLER_ONLY" not in env and "AWS_REGION" not in env and "TRAINING_JOB_NAME" not in env
    container = image_env(image)
    shell = {"PWD"}  # set by the shell of the `python3` shim, as by a container's /bin/sh entry point
    assert set(env) <= set(container) | {"FROM_REQUEST", "HETERO_TWIN_EXTRA"} | {a.name for a in TWIN} | shell
    assert {k: env[k] for k in ("SAGEMAKER_TRAINING_MODULE", "KMP_BLOCKTIME", "LANG")} == {
        "SAGEMAKER_TRAINING_MODULE": "sagemaker_tensorflow_container.training:main",
        "KMP_BLOCKTIME": "1",
        "LANG": "C.UTF-8",
    }
    assert env["FROM_REQUEST"] == "yes" and env["HETERO_TWIN_EXTRA"] == "x"
    # `python3` is the shim for this interpreter, then this machine's Python, then the image's PATH
    assert env["PATH"] == f"{job_dir / 'bin'}:{Path(sys.executable).parent}:{container['PATH']}"
    assert env["PYTHONPATH"] == str(job_dir / ".image") and "LD_LIBRARY_PATH" not in env


CHATTY = "import itertools\nfor i in itertools.count():\n    print(i, flush=True)"


def _chatty_job(tmp_path, lines: list) -> dict:
    return dict(
        name="p",
        request={"AppSpecification": {"ImageUri": "", "ContainerEntrypoint": ["python3", "-c", CHATTY]}},
        job_dir=tmp_path / "job",
        step="Shard",
        echo=lines.append,
        guard_imports=False,
    )


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.usefixtures("run_stop")
def test_a_stop_of_the_run_ends_a_processing_job_and_its_output_reader_cleanly(tmp_path, no_leftovers):
    """Ctrl-C (or SIGTERM, SIGHUP) while a job prints: the job and all it started go, and the thread that reads its
    output ends before the job's log closes (no "I/O operation on closed file" from it)."""
    lines: list[str] = []
    printing = threading.Event()
    sender = signal_when(printing, signal.SIGINT)
    job = _chatty_job(tmp_path, lines)
    job["echo"] = lambda line: (lines.append(line), len(lines) > 100 and printing.set())
    with pytest.raises(Signalled):
        run_processing_job(**job)
    sender.join()
    log = (tmp_path / "job" / "job.log").read_text().splitlines()
    assert len(log) > 100 and log == lines[: len(log)]


@pytest.mark.usefixtures("run_stop")
def test_a_stop_whose_raise_was_lost_ends_a_processing_job_at_its_next_wait(tmp_path, monkeypatch, no_leftovers):
    """A stop came and a finalizer dropped its raise: the job's wait raises it again, and the job goes."""
    monkeypatch.setattr(STOP, "signals", [signal.SIGTERM])
    with pytest.raises(Signalled) as raised:
        run_processing_job(**_chatty_job(tmp_path, []))
    assert raised.value.args == (signal.SIGTERM,)

"""A SageMaker processing job emulated on one machine from its CreateProcessingJob request.

The container's ``/opt/ml`` is a folder of the job (``<job_dir>/opt/ml``): each
``ProcessingInputs[].S3Input`` is provisioned at its ``LocalPath`` there, the
``AppSpecification`` entry point and arguments run with ``/opt/ml`` pointing at it and
``s3://local/...`` arguments as the paths they name, ``python3`` is this interpreter,
and each output's ``LocalPath`` is uploaded to its ``S3Uri`` when the job succeeds
(``S3UploadMode=EndOfJob``). A request with ``NetworkConfig.EnableNetworkIsolation`` whose
entry point, arguments or environment name an s3:// location (which the script would fetch
itself) is refused before the job starts (`pipeline.emulator.isolation`). The job's process starts with the environment its
container would have and none of the caller's (`pipeline.emulator.container_env`: the image's ENV, the request's ``Environment``,
then the twin's own and ``extra_env``).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline import storage
from pipeline.emulator import image_guard
from pipeline.emulator.container_env import processing_env
from pipeline.emulator.isolation import refuse_s3_fetches
from pipeline.emulator.sessions import kill_session, start_session
from pipeline.stop import STOP
from steps.contract import FAILURE_FILE

CONTAINER_ROOT = "/opt/ml"
POLL_S = 0.1  # how often the wait for a job looks for a stop of the run


@dataclass
class ProcessingResult:
    name: str
    job_dir: Path
    exit_code: int
    failure: str | None
    log: Path

    @property
    def ok(self) -> bool:
        return self.failure is None


def run_processing_job(
    *,
    name: str,
    request: dict,
    job_dir: Path,
    step: str,
    echo: Callable[[str], None] = print,
    timeout_s: float | None = None,
    guard_imports: bool = True,
    extra_env: dict | None = None,
) -> ProcessingResult:
    """``extra_env``: variables the twin gives the job for itself (the call ledger's notes file)."""
    if request.get("NetworkConfig", {}).get("EnableNetworkIsolation"):
        app = request.get("AppSpecification", {})
        refuse_s3_fetches(
            step=step,
            job="processing job",
            fields={
                **{f"AppSpecification.{k}": app[k] for k in ("ContainerEntrypoint", "ContainerArguments") if k in app},
                **{f"Environment.{k}": v for k, v in request.get("Environment", {}).items()},
            },
            fix="Pass what the script reads as a ProcessingInput (SageMaker downloads it to its LocalPath before the script "
            "starts) and the path as the argument, or run the step without network isolation",
        )
    root = job_dir / "opt" / "ml"
    for item in request.get("ProcessingInputs", []):
        s3 = item["S3Input"]
        storage.link_objects(storage.objects(s3["S3Uri"]), _local(root, s3["LocalPath"]))
    outputs = [o["S3Output"] for o in request.get("ProcessingOutputConfig", {}).get("Outputs", [])]
    for s3 in outputs:
        _local(root, s3["LocalPath"]).mkdir(parents=True, exist_ok=True)
    app = request["AppSpecification"]
    command = [_bind(a, root) for a in (app.get("ContainerEntrypoint") or []) + (app.get("ContainerArguments") or [])]
    bin_dir = job_dir / "bin"  # `python3` in the container: this interpreter
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "python3"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')  # keeps a virtualenv's packages
    shim.chmod(0o755)
    guard = image_guard.guard_path(app.get("ImageUri", ""), job_dir / ".image", enabled=guard_imports, echo=echo)
    env = processing_env(request=request, bin_dir=bin_dir, guard=guard, extra_env=extra_env)
    limit = request.get("StoppingCondition", {}).get("MaxRuntimeInSeconds")
    log = job_dir / "job.log"
    code = _run(command, cwd=job_dir, env=env, log=log, echo=echo, timeout_s=min(filter(None, [limit, timeout_s]), default=None))
    failure = None
    if code != 0:
        reason = _failure_reason(outputs, root, log)
        how = "was stopped after its MaxRuntimeInSeconds" if code is None else f"exited with code {code}"
        image = image_guard.explain(reason, guard)
        failure = f"step {step}: processing job {name} {how}: {reason}{' ' + image if image else ''} [log: {log}]"
    else:
        for s3 in outputs:
            storage.upload(_local(root, s3["LocalPath"]), s3["S3Uri"])
    return ProcessingResult(name, job_dir, code if code is not None else -9, failure, log)


def _local(root: Path, container_path: str) -> Path:
    return root / Path(container_path).relative_to(CONTAINER_ROOT)


def _bind(arg: str, root: Path) -> str:
    """A container argument as this machine reads it: /opt/ml is the job's folder, s3://local/ a path."""
    if arg.startswith(storage.SCHEME):
        return str(storage.path(arg))
    return arg.replace(CONTAINER_ROOT, str(root))


def _run(command: list[str], *, cwd: Path, env: dict, log: Path, echo, timeout_s: float | None) -> int | None:
    with log.open("w") as out:
        proc, reader, ended = None, None, False
        try:
            with STOP.deferred():  # a stop now is raised once the job's handle is kept: the job goes with it below
                proc = start_session(command, cwd=cwd, env=env)
                reader = threading.Thread(target=_pump, args=(proc.stdout, out, echo), daemon=True)
                reader.start()
            ended = _wait(proc, timeout_s)
        finally:
            if proc is not None:
                _kill_group(proc.pid)  # the job and anything it left running
                proc.wait()
                if reader is not None:
                    reader.join(timeout=5)  # the job's last lines, read before its log closes
                if proc.stdout:
                    proc.stdout.close()
        return proc.returncode if ended else None


def _wait(proc: subprocess.Popen, timeout_s: float | None) -> bool:
    """Whether the job ended within ``timeout_s``; the run's stop, if its raise was lost, is raised here."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        STOP.check()
        try:
            proc.wait(timeout=POLL_S)
            return True
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() > deadline:
                return False


def _pump(stream, out, echo) -> None:
    """The job's output to its log and ``echo``, line by line, until it ends (or its pipe or log is closed under it)."""
    try:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            out.write(line + "\n")
            echo(line)
    except (ValueError, OSError):  # closed: the job was stopped and the reader given up on
        pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill_session(pid)  # what left the job's process group (it runs in a session of its own)


def _failure_reason(outputs: list[dict], root: Path, log: Path) -> str:
    for s3 in outputs:
        failure = _local(root, s3["LocalPath"]) / FAILURE_FILE
        if failure.is_file():
            return failure.read_text().strip()
    tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.is_file() else []
    return " | ".join(tail) or "no failure file; see its log"

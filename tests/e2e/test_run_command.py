"""`hetero run` as a user runs it, in a process of its own: the quick start's commands (docs/quickstart.md) with their defaults end with exit 0
and leave no process behind, for each framework; SIGTERM, SIGINT or SIGHUP stop a run, and every process it started
(emulated hosts, TensorFlow servers, Ray's daemons and its workers, which move to process groups of their own and
rename themselves ``ray::<Actor>``), within 30 s.

Processes are told apart by a marker in the run's environment, which every process it starts inherits: a search by
command line would miss Ray's renamed workers, and one by process group the workers that left it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.support.harness import marked_processes

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MARKER = "HETERO_TEST_RUN"
STOPPED_WITHIN_S = 30


def _marked(token: str) -> list[psutil.Process]:
    """Live processes whose environment carries this run's marker."""
    return marked_processes(f"{MARKER}={token}")


def _names(processes: list[psutil.Process]) -> list[str]:
    named = []
    for process in processes:
        try:
            named.append(f"{process.pid} {' '.join(process.cmdline())[:100]}")
        except psutil.Error:
            continue
    return named


class Run:
    """``hetero run <args>`` (``python -m pipeline.cli``: the console script's main) in a session of its own, its
    output collected line by line."""

    def __init__(self, work_dir: Path, *args: str):
        self.token = uuid.uuid4().hex
        self.lines: list[str] = []
        self.started = time.monotonic()
        env = {**os.environ, MARKER: self.token}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "run", "--work-dir", str(work_dir), *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.new_line = threading.Condition()
        self.ended = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self.new_line:
                self.lines.append(line.rstrip("\n"))
                self.new_line.notify_all()
        with self.new_line:  # the output ended: the run did
            self.ended = True
            self.new_line.notify_all()

    def wait_for(self, text: str, timeout_s: float) -> bool:
        """Whether a line with ``text`` came within ``timeout_s`` (woken by each line, not polling)."""
        with self.new_line:
            return self.new_line.wait_for(lambda: any(text in line for line in self.lines) or self.ended, timeout_s) and any(
                text in line for line in self.lines
            )

    def leftovers(self, within_s: float) -> list[str]:
        """Processes of the run still there after ``within_s`` (waiting for them to go until then), then killed."""
        deadline = time.monotonic() + within_s
        while (left := _marked(self.token)) and time.monotonic() < deadline:
            time.sleep(0.2)
        named = _names(left)
        for process in left:
            try:
                process.kill()
            except psutil.Error:
                pass
        return named

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.lines[-lines:])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.leftovers(0)
        self.reader.join(timeout=10)
        self.process.stdout.close()


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "ray"])
def test_the_readme_run_with_its_defaults_ends_with_exit_0_and_leaves_no_process(tmp_path, framework):
    """`make run ARGS="--framework <framework>"`: sample data, a 1-vCPU baseline, then 1 data host + 1 trainer pinned to
    the machine's CPUs; only the work folder differs. Each takes minutes on 2 cores."""
    run = Run(tmp_path / "runs", "--framework", framework)
    try:
        code = run.process.wait(timeout=900)
        wall = time.monotonic() - run.started
        run.reader.join(timeout=10)
        left = run.leftovers(within_s=5)
    finally:
        run.close()
    print(
        f"hetero run --framework {framework}: exit {code} in {wall:.0f} s, {len(run.lines)} lines, {len(left)} process(es) left"
    )
    assert code == 0, run.tail()
    assert not left, left
    assert any(line.startswith("speedup ") for line in run.lines), run.tail()
    # progress is the step code's metric lines; no framework redraws a progress bar into the log
    assert not [line for line in run.lines if "row/s" in line or "Running Dataset" in line][:3]
    assert len(run.lines) < 1000, f"{len(run.lines)} lines"


@pytest.mark.parametrize(
    "framework,sig",
    [
        ("pytorch", signal.SIGTERM),
        ("pytorch", signal.SIGINT),
        ("pytorch", signal.SIGHUP),
        ("tensorflow", signal.SIGTERM),
        ("ray", signal.SIGTERM),
    ],
)
def test_a_signal_stops_hetero_run_and_every_process_it_started_within_30_s(tmp_path, framework, sig):
    run = Run(tmp_path / "runs", "--framework", framework, "--sample-images", "300", "--epochs", "100")
    try:
        assert run.wait_for("step_time_ms=", timeout_s=300), run.tail()
        started = _names(_marked(run.token))
        assert len(started) > 2, started  # the run and its hosts carry the marker
        if framework == "ray":  # Ray's workers, renamed and in groups of their own, inherit it too
            assert any(" ray::" in f" {name.split(' ', 1)[1]}" for name in started), started
        signalled = time.monotonic()
        run.process.send_signal(sig)
        code = run.process.wait(timeout=STOPPED_WITHIN_S)
        left = run.leftovers(within_s=max(0.0, signalled + STOPPED_WITHIN_S - time.monotonic()))
        took = time.monotonic() - signalled
    finally:
        run.close()
    print(f"hetero run --framework {framework}: {signal.Signals(sig).name} -> exit {code}, all gone in {took:.1f} s")
    assert not left, left
    assert code == 128 + sig, run.tail()
    assert any(f"interrupted ({signal.Signals(sig).name}); all hosts stopped" in line for line in run.lines), run.tail()

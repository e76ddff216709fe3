"""`hetero run` as a user runs it, in a process of its own, and stopped by a signal at a moment of its run: what the
end-to-end tests of `hetero run` share (tests/e2e/test_run_command.py, tests/e2e/test_run_stops_early.py).

Processes are told apart by their environment: the CLI's carries a marker, which what it starts with the caller's
environment inherits, and the emulated hosts' (which start from the service's environment, as a container does) name
the run's work folder; a search by command line would miss Ray's renamed workers, and one by process group the workers
that left it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.support.harness import marked_processes

ROOT = Path(__file__).resolve().parents[2]
MARKER = "HETERO_TEST_RUN"
STOPPED_WITHIN_S = 30


def marked(token: str, work_dir: Path) -> list[psutil.Process]:
    """Live processes whose environment carries this run's marker (the CLI and what it starts with the caller's
    environment) or names its work folder (emulated hosts and processing jobs, which start from the service's)."""
    return marked_processes(f"{MARKER}={token}", mentioning=(f"={work_dir}/", f":{work_dir}/"))


def names(processes: list[psutil.Process]) -> list[str]:
    named = []
    for process in processes:
        try:
            named.append(f"{process.pid} {' '.join(process.cmdline())[:100]}")
        except psutil.Error:
            continue
    return named


class Run:
    """``hetero run <args>`` (``python -m pipeline``: the console script's main) in a session of its own, its
    output collected line by line (``stderr``: its stderr to that file instead); ``temp_dir``: its TMPDIR, where every
    temp folder of the run (each host's) is made."""

    def __init__(self, work_dir: Path, *args: str, stderr: Path | None = None, temp_dir: Path | None = None):
        self.token = uuid.uuid4().hex
        self.work_dir = Path(work_dir).resolve()
        self.lines: list[str] = []
        self.started = time.monotonic()
        env = {**os.environ, MARKER: self.token, **({"TMPDIR": str(temp_dir)} if temp_dir else {})}
        self.stderr = stderr.open("w") if stderr else None
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "run", "--work-dir", str(work_dir), *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.stderr or subprocess.STDOUT,
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

    def stop(self, sig: int) -> tuple[int, list[str], float]:
        """Signal the CLI: its exit code, what it left after `STOPPED_WITHIN_S` from the signal, and how long that took."""
        signalled = time.monotonic()
        self.process.send_signal(sig)
        code = self.process.wait(timeout=STOPPED_WITHIN_S)
        left = self.leftovers(within_s=max(0.0, signalled + STOPPED_WITHIN_S - time.monotonic()))
        return code, left, time.monotonic() - signalled

    def leftovers(self, within_s: float) -> list[str]:
        """Processes of the run still there after ``within_s`` (waiting for them to go until then), then killed."""
        deadline = time.monotonic() + within_s
        while (left := marked(self.token, self.work_dir)) and time.monotonic() < deadline:
            time.sleep(0.2)
        named = names(left)
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
        if self.stderr:
            self.stderr.close()


SMALL = ("--sample-images", "300", "--epochs", "1")  # every step of a default run, each short
TRAINING = ("--sample-images", "300", "--epochs", "100")  # a training that lasts


@dataclass(frozen=True)
class Moment:
    """When a test stops a run (``hetero run`` with ``args``): once a line with ``line`` came (None: the run's start),
    ``after_s`` later. ``hosts``: every host of the job then runs the step code, so each says how it ended."""

    line: str | None = None
    after_s: float = 0.0
    hosts: bool = False
    args: tuple[str, ...] = SMALL


# moments spread over a default run, in its order (1 data host + 1 trainer, then the baseline, Evaluate, RegisterModel)
MOMENTS = {
    "loading": Moment(after_s=0.8),  # the CLI's modules load
    "compiling": Moment(after_s=3.0),  # the definition compiles (the SageMaker SDK's objects, their finalizers)
    "sample-data": Moment("[Shard] no InputData"),
    "shard+0.1s": Moment("[Shard] --output", 0.1),
    "shard+0.3s": Moment("[Shard] --output", 0.3),
    "shard+1s": Moment("[Shard] --output", 1.0),
    "between-steps": Moment("[Shard] done in"),
    "hosts-starting": Moment("heterogeneous cluster:"),
    "hosts-up": Moment("[launcher] host="),
    "mid-training": Moment("step_time_ms=", hosts=True, args=TRAINING),
    "baseline-starting": Moment("[TrainBaseline] homogeneous cluster"),
    "evaluate": Moment("[Evaluate] --output", 0.3),
    "register": Moment("[RegisterModel]"),
}
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# each framework's run is stopped early many times (cheap) and late once or twice (a run nearly whole: minutes)
_STOPS = [
    *(("pytorch", m) for m in MOMENTS),
    *(("tensorflow", m) for m in ("loading", "shard+0.3s", "hosts-starting", "hosts-up", "mid-training", "evaluate")),
    *(("ray", m) for m in ("compiling", "shard+0.1s", "hosts-starting", "hosts-up", "mid-training", "baseline-starting")),
]
STOPS = [(f, m, SIGNALS[i % len(SIGNALS)]) for i, (f, m) in enumerate(_STOPS)]  # (framework, moment, the signal)
# the moments before any job starts its hosts: the CLI alone, or a processing job's one host (Shard): light enough to run
# beside a cluster (tests/conftest.py ONE_HOST_TESTS)
EARLY = ("loading", "compiling", "sample-data", "shard+0.1s", "shard+0.3s", "shard+1s")


def stops(early: bool) -> dict:
    """pytest.mark.parametrize's arguments for the stops at the early moments, or at the others."""
    chosen = [(f, m, s) for f, m, s in STOPS if (m in EARLY) == early]
    return {"argnames": "framework,moment,sig", "argvalues": chosen, "ids": [f"{f}-{m}-{s.name}" for f, m, s in chosen]}


def reach(run: Run, moment: Moment) -> None:
    if moment.line is not None:
        assert run.wait_for(moment.line, timeout_s=600), f"no line {moment.line!r}:\n{run.tail()}"
        time.sleep(moment.after_s)
    else:
        time.sleep(max(0.0, run.started + moment.after_s - time.monotonic()))
    assert run.process.poll() is None, f"the run ended before the moment:\n{run.tail()}"


def run_hosts(run: Run) -> list[psutil.Process]:
    """The run's emulated hosts and every process they started: they name its work folder, without its marker."""
    own = f"{MARKER}={run.token}\0".encode()
    hosts = []
    for process in marked(run.token, run.work_dir):
        try:
            if own not in Path(f"/proc/{process.pid}/environ").read_bytes():
                hosts.append(process)
        except OSError:
            continue
    return hosts


@contextlib.contextmanager
def temp_dir():
    """A TMPDIR for a run, short as /tmp is (hosts put unix sockets under theirs, made in it), gone afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="h", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def host_ends(work_dir: Path) -> dict[str, str]:
    """Each host's log that reports an internal error, and each failure file that does not say the host was stopped by
    SIGTERM (terminated; a trainer mid-training: interrupted, with its checkpoint). What the hosts printed once the
    stop came, stacks included, is in the run's own output."""
    wrong = {}
    for host in sorted(work_dir.glob("local-*/jobs/*/algo-*")):
        log = (host / "output" / "host.log").read_text(errors="replace") if (host / "output" / "host.log").is_file() else ""
        if "internal error" in log:
            wrong[str(host)] = log[-3000:]
        failure = host / "output" / "failure"
        if failure.is_file() and not failure.read_text().startswith(("terminated: SIGTERM", "interrupted: SIGTERM")):
            wrong[str(failure)] = failure.read_text()
    return wrong


def stop_at(tmp_path: Path, framework: str, moment: str, sig: signal.Signals) -> None:
    """SIGINT, SIGTERM or SIGHUP at moments spread over a whole run (the CLI loading, the definition compiling, the
    sample data, inside Shard, between steps, a job starting its hosts, mid-training, Evaluate, RegisterModel): exit
    128 + the signal, one line on stderr, no stack in what the run and its hosts print from then on, each host the stop
    ended saying terminated (not an internal error), no process and no temp folder left. Mid-training, the run and
    its hosts carry the marker first (Ray's workers too, renamed and in process groups of their own), so "no process
    left" counts them."""
    with temp_dir() as temp:
        run = Run(tmp_path / "runs", "--framework", framework, *MOMENTS[moment].args, stderr=tmp_path / "stderr", temp_dir=temp)
        try:
            reach(run, MOMENTS[moment])
            if MOMENTS[moment].hosts:
                started = names(marked(run.token, run.work_dir))
                assert len(started) > 2, started  # the run and its hosts carry the marker
                if framework == "ray":  # Ray's workers, renamed and in groups of their own, inherit it too
                    assert any(" ray::" in f" {name.split(' ', 1)[1]}" for name in started), started
            signalled, before = time.monotonic(), len(run.lines)
            code, left, took = run.stop(sig)
        finally:
            run.close()
        temp_left = list(temp.iterdir())
    errors = (tmp_path / "stderr").read_text().splitlines()
    print(f"{framework} {moment}: {sig.name} at {signalled - run.started:.1f} s -> exit {code} in {took:.1f} s: {errors}")
    assert code == 128 + sig, (errors, run.tail())
    assert errors == [f"interrupted ({sig.name}); all hosts stopped"], (errors, run.tail())
    # the stop's output, the hosts' last lines included (under load Ray prints stacks of its own as it trains)
    assert not [line for line in run.lines[before:] if "Traceback" in line or "Exception ignored" in line], run.tail()
    assert not left, left
    assert not temp_left, temp_left
    assert not host_ends(run.work_dir), host_ends(run.work_dir)
    if MOMENTS[moment].hosts:  # every host ran the step code: each wrote how it ended
        hosts = list(run.work_dir.glob("local-*/jobs/TrainHeterogeneous/algo-*"))
        silent = {h.name: _last_lines(h / "output" / "host.log") for h in hosts if not (h / "output" / "failure").is_file()}
        assert len(hosts) == 2 and not silent, (hosts, silent)


def _last_lines(log: Path, count: int = 15) -> list[str]:
    return log.read_text(errors="replace").splitlines()[-count:] if log.is_file() else ["(no host.log)"]

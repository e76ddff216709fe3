"""`hetero run` as a user runs it, in a process of its own: the quick start's commands (docs/quickstart.md) with their defaults end with exit 0
and leave no process behind, for each framework, and the same run is each framework's end-to-end check of the default
layout (1 data host + 1 trainer, then the baseline, the evaluation and the plan); SIGTERM, SIGINT or SIGHUP stop a run, and every process it started
(emulated hosts, TensorFlow servers, Ray's daemons and its workers, which move to process groups of their own and
rename themselves ``ray::<Actor>``), within 30 s.

Processes are told apart by their environment: the CLI's carries a marker, which what it starts with the caller's
environment inherits, and the emulated hosts' (which start from the service's environment, as a container does) name
the run's work folder; a search by command line would miss Ray's renamed workers, and one by process group the workers
that left it."""

from __future__ import annotations

import contextlib
import json
import os
import re
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
import pytest

from pipeline.cli import main
from pipeline.graph import resolve_parameters
from pipeline.iam.judge import deployed_for, judge_files
from pipeline.iam.permissions import BEGIN, END, markdown
from pipeline.local.settings import local_training_image
from steps.frameworks import framework as framework_row
from tests.support.harness import marked_processes
from tests.support.metrics import (
    PIXEL_BYTES,
    assert_data_hosts_measured_themselves,
    assert_every_sample_once_per_epoch,
    assert_the_evaluation_and_the_plan,
)
from tests.support.stacks import synthesised_once

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MARKER = "HETERO_TEST_RUN"
STOPPED_WITHIN_S = 30


def _marked(token: str, work_dir: Path) -> list[psutil.Process]:
    """Live processes whose environment carries this run's marker (the CLI and what it starts with the caller's
    environment) or names its work folder (emulated hosts and processing jobs, which start from the service's)."""
    return marked_processes(f"{MARKER}={token}", mentioning=(f"={work_dir}/", f":{work_dir}/"))


def _names(processes: list[psutil.Process]) -> list[str]:
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
        while (left := _marked(self.token, self.work_dir)) and time.monotonic() < deadline:
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
        if self.stderr:
            self.stderr.close()


@dataclass
class ReadmeRun:
    """One `hetero run --framework <framework>` with every default, ended: what the tests below read."""

    framework: str
    code: int
    wall_s: float
    lines: list[str]
    left: list[str]
    tail: str
    execution_dir: Path
    store_dir: Path

    def metrics(self, step: str) -> dict:
        return json.loads((self.execution_dir / "jobs" / step / "model" / "metrics.json").read_text())

    def host_dirs(self, step: str) -> list[Path]:
        return sorted((self.execution_dir / "jobs" / step).glob("algo-*"))


@pytest.fixture(scope="module", params=["pytorch", "tensorflow", "ray"])
def readme_run(request, tmp_path_factory, cluster_lock) -> ReadmeRun:
    """`make run ARGS="--framework <framework>"`: sample data, a 1-vCPU baseline, then 1 data host + 1 trainer pinned to
    the machine's CPUs; only the work folder differs. Each takes minutes on 2 cores, so it runs once per framework and
    every test below reads the same run."""
    framework = request.param
    work_dir = tmp_path_factory.mktemp(f"readme-{framework}") / "runs"
    with cluster_lock():
        run = Run(work_dir, "--framework", framework)
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
    executions = sorted(work_dir.glob("local-*"))
    execution = executions[0] if executions else work_dir / "no-execution"
    return ReadmeRun(framework, code, wall, run.lines, left, run.tail(), execution, work_dir / "results" / execution.name)


def test_the_readme_run_with_its_defaults_ends_with_exit_0_and_leaves_no_process(readme_run):
    assert readme_run.code == 0, readme_run.tail
    assert not readme_run.left, readme_run.left
    assert any(line.startswith("speedup ") for line in readme_run.lines), readme_run.tail
    # progress is the step code's metric lines; no framework redraws a progress bar into the log
    assert not [line for line in readme_run.lines if "row/s" in line or "Running Dataset" in line][:3]
    assert len(readme_run.lines) < 1000, f"{len(readme_run.lines)} lines"
    assert any("step_time_ms=" in line for line in readme_run.lines)  # metric lines streamed while it ran


def test_the_readme_run_trains_each_sample_once_per_epoch_on_both_layouts_and_keeps_every_output(readme_run):
    """Both training jobs of the default run: the framework's own accounting of every sample once per epoch, a model,
    the data host's own measurements, the results on every host that SageMaker may pack; then the evaluation, the plan
    for the next run (made from this run's measurements, so it predicts this run too) and the report."""
    assert readme_run.code == 0, readme_run.tail
    defaults = resolve_parameters({})
    epochs, batch = defaults["Epochs"], defaults["BatchSize"]
    manifest = json.loads((readme_run.execution_dir / "Shard" / "manifest.json").read_text())
    train_samples = manifest["splits"]["train"]["samples"]
    assert manifest["format"] == ("tfrecord" if readme_run.framework == "tensorflow" else "webdataset")
    model_file = {"pytorch": "model.pt", "tensorflow": "model.keras", "ray": "model.pt"}[readme_run.framework]
    for step, mode in (("TrainBaseline", "homogeneous"), ("TrainHeterogeneous", "heterogeneous")):
        metrics = readme_run.metrics(step)
        assert (metrics["framework"], metrics["mode"], metrics["config"]["epochs"]) == (readme_run.framework, mode, epochs)
        assert metrics["samples_seen"] == epochs * train_samples
        if readme_run.framework == "tensorflow":
            assert_every_sample_once_per_epoch(metrics, train_samples, epochs=epochs)
        if readme_run.framework == "ray":
            ledger = [(e["epoch"], e["samples"], e["distinct"], e["duplicates"]) for e in metrics["sample_ledger"]["epochs"]]
            assert ledger == [(e, train_samples, train_samples, 0) for e in range(epochs)]
            assert metrics["gpus"] == {"per_host": 0, "used_per_host": 0, "idle": None}  # this machine has no GPU
        assert metrics["corrupt_samples"]["count"] == 0
        assert metrics["accuracy"] is not None and 0 <= metrics["accuracy"] <= 1
        assert metrics["global_batch_size"] == batch and metrics["model_parameters"] > 0
        assert (readme_run.execution_dir / "jobs" / step / "model" / model_file).stat().st_size > 0
        if readme_run.framework != "ray":  # Ray Data moves the samples as objects: no bytes of ours to count
            assert_data_hosts_measured_themselves(metrics, 1 if mode == "heterogeneous" else 0)
        groups = {g["name"]: g for g in metrics["instance_groups"]}
        assert groups["dnn_group"]["count"] == 1
        if mode == "heterogeneous":
            assert groups["data_group"] == {"name": "data_group", "instance_type": "ml.c5.4xlarge", "count": 1, "role": "data"}
    hetero = readme_run.metrics("TrainHeterogeneous")
    roles = {host.name: _role(host) for host in readme_run.host_dirs("TrainHeterogeneous")}
    if readme_run.framework == "pytorch":
        assert {t for h in hetero["data_hosts"] for t in h["batches_sent"]} == {n for n, r in roles.items() if r == "trainer"}
    if readme_run.framework == "tensorflow":  # the tensors of a sample: uint8 pixels, int64 label and id
        assert hetero["bytes_received_per_sample"] == PIXEL_BYTES + 16
        assert sum("worker registered with dispatcher" in line for line in readme_run.lines) == 1
    if readme_run.framework == "ray":
        decoded = sum(h["samples_sent"] for h in hetero["data_hosts"]) + sum(m["samples"] for m in hetero["local_decode"])
        assert decoded == epochs * train_samples  # every sample, from whichever node decoded it
        assert any("[ray] head: 2 node(s)" in line for line in readme_run.lines)
    # every host of the heterogeneous job holds the results (the trainer the original, the data host a copy), so algo-1
    # has them whatever its role, whichever host's model dir SageMaker packs
    trainer_metrics = (readme_run.execution_dir / "jobs" / "TrainHeterogeneous" / "model" / "metrics.json").read_bytes()
    for host in readme_run.host_dirs("TrainHeterogeneous"):
        assert (host / "model" / "metrics.json").read_bytes() == trainer_metrics, host.name
        assert (host / "model" / model_file).is_file(), host.name
        log = (host / "output" / "host.log").read_text()
        assert "Traceback" not in log, log[-3000:]
        if readme_run.framework == "pytorch" and roles[host.name] == "data":  # the trainers' end is no error
            assert log.rstrip().endswith(f"[data] {host.name}: all trainers stopped; exiting"), log[-3000:]
    assert_the_evaluation_and_the_plan(readme_run.execution_dir / "Evaluate", hetero, readme_run.execution_dir.name)
    assert (readme_run.store_dir / "price_performance.json").is_file()


# the deploy options that change IAM: each framework's run is judged under its stack as cdk.json deploys it, and with
# every one of these at once (each adds or changes grants; with none, cdk.json's stack is the tightest)
IAM_OPTIONS = {
    "hetero:fsx": True,
    "hetero:networkIsolation": True,
    "hetero:retrainAdoptsPlan": True,
    "hetero:notifyEmail": "ops@example.com",
    "hetero:codeDirs": ["tests/fixtures"],
}


@pytest.fixture(scope="module")
def iam_templates(tmp_path_factory, readme_run) -> dict[str, Path]:
    """The run's framework's stack, synthesized once per session: as cdk.json deploys it, and with every IAM option.
    A framework without an AWS image deploys the image its Dockerfile builds (the one the local run names)."""
    framework = {"hetero:framework": readme_run.framework} if readme_run.framework != "pytorch" else {}
    if not framework_row(readme_run.framework).aws_image:
        framework["hetero:trainingImage"] = local_training_image(readme_run.framework)
    folder = tmp_path_factory.mktemp(f"iam-templates-{readme_run.framework}")
    templates = {}
    for name, overrides in {"cdk.json": framework, "every IAM option": {**framework, **IAM_OPTIONS}}.items():
        path = folder / f"{name.replace(' ', '-')}.template.json"
        path.write_text(json.dumps(synthesised_once(tmp_path_factory, **overrides).template_json))
        templates[name] = path
    return templates


def test_every_aws_call_of_the_readme_run_is_allowed_by_each_deployed_stack(readme_run, iam_templates, capsys):
    """The run's call ledger (every call the deployed pipeline would make, by principal) judged by `hetero iam`
    against its framework's stack as cdk.json deploys it and with every deploy option that changes IAM: nothing
    denied."""
    assert readme_run.code == 0, readme_run.tail
    ledger = json.loads((readme_run.execution_dir / "aws_calls.json").read_text())
    by_principal = {}
    for call in ledger["calls"]:
        by_principal[call["principal"]] = by_principal.get(call["principal"], 0) + 1
    print(f"{readme_run.framework}: calls per principal {by_principal}")
    actions = {(c["principal"], c["action"]) for c in ledger["calls"]}
    for expected in (
        ("pipeline_role", "sagemaker:CreateTrainingJob"),
        ("pipeline_role", "sagemaker:CreateProcessingJob"),
        ("pipeline_role", "iam:PassRole"),
        ("pipeline_role", "sagemaker:CreateModelPackage"),
        ("pipeline_role", "s3:GetObject"),  # the property files Std:JsonGet reads
        ("job_role", "s3:GetObject"),
        ("job_role", "s3:PutObject"),
        ("job_role", "ecr:BatchGetImage"),
        ("job_role", "logs:PutLogEvents"),
        ("events", "sns:Publish"),
    ):
        assert expected in actions, expected
    for name, template in iam_templates.items():
        assert main(["iam", str(readme_run.execution_dir), "--template", str(template)]) == 0, (name, capsys.readouterr().out)
        last = capsys.readouterr().out.strip().splitlines()[-1]
        assert re.fullmatch(r"\d+ calls, 0 denied", last), (name, last)


def test_the_permissions_page_is_generated_from_the_stack_and_the_readme_run(readme_run, iam_templates):
    """docs/deploy.md's Permissions section: what `hetero iam --markdown` makes of cdk.json's stack and the default
    PyTorch run."""
    if readme_run.framework != "pytorch":
        pytest.skip("the page is made from the default framework's run")
    ledger = readme_run.execution_dir / "aws_calls.json"
    made = markdown(deployed_for(ledger, iam_templates["cdk.json"]), judge_files(ledger, iam_templates["cdk.json"]))
    page = (ROOT / "docs" / "deploy.md").read_text()
    begin, end = page.index(BEGIN), page.index(END) + len(END)
    assert page[begin:end] == made, (
        "docs/deploy.md's Permissions differ from the stack: run `make run`, `npx cdk synth -q` and paste "
        "`hetero iam runs/<execution> --template cdk.out/HeteroTraining.template.json --markdown` over the section"
    )


def _role(host_dir: Path) -> str:
    """The role the launcher gave a host, from the first line of its log ("[launcher] host=... role=data ...")."""
    return re.search(r"role=(\w+)", (host_dir / "output" / "host.log").read_text()).group(1)


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
        started = _names(_marked(run.token, run.work_dir))
        assert len(started) > 2, started  # the run and its hosts carry the marker
        if framework == "ray":  # Ray's workers, renamed and in groups of their own, inherit it too
            assert any(" ray::" in f" {name.split(' ', 1)[1]}" for name in started), started
        code, left, took = run.stop(sig)
    finally:
        run.close()
    print(f"hetero run --framework {framework}: {signal.Signals(sig).name} -> exit {code}, all gone in {took:.1f} s")
    assert not left, left
    assert code == 128 + sig, run.tail()
    assert any(f"interrupted ({signal.Signals(sig).name}); all hosts stopped" in line for line in run.lines), run.tail()


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
STOPS = [
    *(("pytorch", m) for m in MOMENTS),
    *(("tensorflow", m) for m in ("loading", "shard+0.3s", "hosts-starting", "hosts-up", "mid-training", "evaluate")),
    *(("ray", m) for m in ("compiling", "shard+0.1s", "hosts-starting", "hosts-up", "mid-training", "baseline-starting")),
]


def _reach(run: Run, moment: Moment) -> None:
    if moment.line is not None:
        assert run.wait_for(moment.line, timeout_s=600), f"no line {moment.line!r}:\n{run.tail()}"
        time.sleep(moment.after_s)
    else:
        time.sleep(max(0.0, run.started + moment.after_s - time.monotonic()))
    assert run.process.poll() is None, f"the run ended before the moment:\n{run.tail()}"


def _hosts(run: Run) -> list[psutil.Process]:
    """The run's emulated hosts and every process they started: they name its work folder, without its marker."""
    own = f"{MARKER}={run.token}\0".encode()
    hosts = []
    for process in _marked(run.token, run.work_dir):
        try:
            if own not in Path(f"/proc/{process.pid}/environ").read_bytes():
                hosts.append(process)
        except OSError:
            continue
    return hosts


@contextlib.contextmanager
def _temp_dir():
    """A TMPDIR for a run, short as /tmp is (hosts put unix sockets under theirs, made in it), gone afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="h", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _host_ends(work_dir: Path) -> dict[str, str]:
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


@pytest.mark.parametrize(
    "framework,moment,sig",
    [(f, m, SIGNALS[i % len(SIGNALS)]) for i, (f, m) in enumerate(STOPS)],
    ids=[f"{f}-{m}-{SIGNALS[i % len(SIGNALS)].name}" for i, (f, m) in enumerate(STOPS)],
)
def test_a_signal_at_any_moment_ends_the_run_in_one_line_leaving_nothing(tmp_path, framework, moment, sig):
    """SIGINT, SIGTERM or SIGHUP at moments spread over a whole run (the CLI loading, the definition compiling, the
    sample data, inside Shard, between steps, a job starting its hosts, mid-training, Evaluate, RegisterModel): exit
    128 + the signal, one line on stderr, no stack in what the run and its hosts print from then on, each host the stop
    ended saying terminated (not an internal error), no process and no temp folder left."""
    with _temp_dir() as temp:
        run = Run(tmp_path / "runs", "--framework", framework, *MOMENTS[moment].args, stderr=tmp_path / "stderr", temp_dir=temp)
        try:
            _reach(run, MOMENTS[moment])
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
    assert not _host_ends(run.work_dir), _host_ends(run.work_dir)
    if MOMENTS[moment].hosts:  # every host ran the step code: each wrote how it ended
        hosts = list(run.work_dir.glob("local-*/jobs/TrainHeterogeneous/algo-*"))
        assert len(hosts) == 2 and all((h / "output" / "failure").is_file() for h in hosts), hosts


def test_a_second_signal_during_the_stop_kills_what_is_left_at_once(tmp_path):
    """The stop gives each host seconds to exit after its SIGTERM; hosts that cannot (frozen here) keep it waiting, and a
    second signal, never ignored, kills them at once: exit 128 + the first signal, one line naming both."""
    with _temp_dir() as temp:
        run = Run(tmp_path / "runs", *TRAINING, stderr=tmp_path / "stderr", temp_dir=temp)
        try:
            _reach(run, MOMENTS["mid-training"])
            hosts = _hosts(run)
            assert len(hosts) >= 2, _names(hosts)
            for host in hosts:
                host.suspend()
            before = len(run.lines)
            run.process.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            assert run.process.poll() is None, run.tail()  # waiting for the frozen hosts: seconds
            run.process.send_signal(signal.SIGINT)
            code = run.process.wait(timeout=STOPPED_WITHIN_S)
            left = run.leftovers(within_s=STOPPED_WITHIN_S)
        finally:
            run.close()
        temp_left = list(temp.iterdir())
    errors = (tmp_path / "stderr").read_text().splitlines()
    assert code == 128 + signal.SIGTERM, (errors, run.tail())
    assert errors == ["interrupted (SIGTERM, then SIGINT: what was left killed at once); all hosts stopped"], errors
    assert not [line for line in run.lines[before:] if "Traceback" in line or "Exception ignored" in line], run.tail()
    assert not left, left
    assert not temp_left, temp_left

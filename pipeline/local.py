"""The local runner: executes the pipeline graph on this machine, no AWS account needed.

Processing steps run their script as a subprocess with local folders for
inputs and outputs; training steps run on an `EmulatedJob` cluster. Every
step's files land under ``<work_dir>/<execution_id>/<step>/``, and the
evaluation is also put in the embedded results store, a folder
(``<work_dir>/results/<execution_id>/``) read by the same code that reads
the S3 store in the cloud.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipeline.emulator import REPO_ROOT, Channel, EmulatedJob, InstanceGroup, StepFailed, free_port
from pipeline.graph import DNN_GROUP, CheckStep, ExecutionId, Graph, Output, Param, ProcessingStep, TrainingStep
from pipeline.sample_data import generate
from steps.common.errors import UserError
from steps.train.auth import SECRET_ENV


@dataclass(frozen=True)
class LocalOptions:
    work_dir: Path = Path("runs")
    sample_images: int = 3000
    pin_cpus: bool = True
    grace_s: float = 30.0
    step_timeout_s: float | None = 1800.0
    silence_timeout_s: float = 30.0
    cpus: dict | None = None  # {"dnn_group": (...), "data": (...)}: overrides cpu_plan()
    prices_file: Path | None = None  # overrides/extends the bundled price table
    echo: Callable[[str], None] = print


@dataclass
class RunResult:
    execution_id: str
    run_dir: Path
    outputs: dict = field(default_factory=dict)  # (step, output) -> Path
    skipped: list = field(default_factory=list)
    jobs: dict = field(default_factory=dict)  # step -> JobResult
    price_performance: dict | None = None
    store_uri: str | None = None


def cpu_plan(pin: bool) -> dict[str, tuple[int, ...]] | None:
    """Trainer hosts get a quarter of the CPUs (at least one), data hosts the rest: a scarce-CPU
    GPU host next to CPU-rich data hosts. The baseline's trainer gets the same CPUs as before."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None
    if not pin or len(cpus) < 2:
        return None
    k = max(1, len(cpus) // 4)
    return {DNN_GROUP: tuple(cpus[:k]), "data": tuple(cpus[k:])}


class LocalRunner:
    def __init__(self, graph: Graph, parameters: dict, options: LocalOptions = LocalOptions()):
        self.graph = graph
        self.params = parameters
        self.options = options
        self.execution_id = f"local-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        self.run_dir = Path(options.work_dir).resolve() / self.execution_id
        self.result = RunResult(self.execution_id, self.run_dir)

    def value(self, v):
        if isinstance(v, Param):
            return self.params[v.name]
        if isinstance(v, Output):
            return self.result.outputs.get((v.step, v.name))
        if isinstance(v, ExecutionId):
            return self.execution_id
        return v

    def run(self) -> RunResult:
        self.graph.check_parameters(self.params)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "parameters.json").write_text(json.dumps(self.params, indent=2, sort_keys=True))
        self.options.echo(f"execution {self.execution_id}  ({self.run_dir})")
        for step in self.graph.steps:
            started = time.monotonic()
            if isinstance(step, ProcessingStep):
                self._processing(step)
            elif isinstance(step, TrainingStep):
                if step.condition is not None and not self.value(step.condition):
                    self.result.skipped.append(step.name)
                    self.options.echo(f"[{step.name}] skipped ({step.condition.name}=false)")
                    continue
                self._training(step)
            elif isinstance(step, CheckStep):
                self._check(step)
            self.options.echo(f"[{step.name}] done in {time.monotonic() - started:.1f} s")
        return self.result

    # -- processing ----------------------------------------------------------
    def _input_path(self, step: ProcessingStep, ref) -> Path | None:
        value = self.value(ref)
        if ref == Param("InputData") and not value:  # the local default: a generated dataset
            folder = self.options.work_dir / "sample-data"
            self.options.echo(f"[{step.name}] no InputData: generating {self.options.sample_images} sample images in {folder}")
            return generate(folder, samples=self.options.sample_images)
        return Path(value) if value else None

    def _processing(self, step: ProcessingStep) -> None:
        out = self.run_dir / step.name
        args = [sys.executable, str(REPO_ROOT / step.script), "--output", str(out)]
        for name, ref in step.inputs.items():
            path = self._input_path(step, ref)
            if path is not None:
                args += [f"--{name}", str(path)]
        for flag, ref in step.arguments.items():
            args += [flag, str(self.value(ref))]
        if step.name == "Evaluate":
            self.result.store_uri = str((self.options.work_dir / "results").resolve())
            args += ["--store", self.result.store_uri]
            if self.options.prices_file:
                args += ["--prices", str(Path(self.options.prices_file).resolve())]
        self.options.echo(f"[{step.name}] {' '.join(Path(a).name if a.startswith('/') else a for a in args[1:])}")
        proc = subprocess.run(args, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=self.options.step_timeout_s)
        for line in proc.stdout.splitlines():
            self.options.echo(f"  {step.name:<18} {line}")
        if proc.returncode != 0:
            failure = (out / "failure").read_text().strip() if (out / "failure").is_file() else proc.stdout.strip()[-500:]
            raise StepFailed(f"step {step.name} exited with code {proc.returncode}: {failure}")
        for name, rel in step.outputs.items():
            self.result.outputs[(step.name, name)] = (out / rel).resolve()
        if step.name == "Evaluate":
            self.result.price_performance = json.loads((out / "price_performance.json").read_text())

    # -- training ------------------------------------------------------------
    def _training(self, step: TrainingStep) -> None:
        plan = self.options.cpus or cpu_plan(self.options.pin_cpus)
        heterogeneous = len(step.groups) > 1
        groups = [
            InstanceGroup(g.name, str(self.value(g.instance_type)), int(self.value(g.count)),
                          (plan[DNN_GROUP] if g.name == DNN_GROUP else plan["data"]) if plan else None)
            for g in step.groups
        ]
        channels = [
            Channel(c.name, Path(self.value(c.source)), str(self.value(c.distribution)), c.instance_groups, str(self.value(c.input_mode)))
            for c in step.channels
        ]
        hyperparameters = {k: self.value(v) for k, v in step.hyperparameters.items()}
        hyperparameters.update(data_port=free_port(), dist_port=free_port(), heartbeat_s=1.0,
                               silence_timeout_s=self.options.silence_timeout_s, connect_timeout_s=120.0)
        shape = " + ".join(f"{g.count} x {g.instance_type} ({g.name}{', CPUs ' + ','.join(map(str, g.cpus)) if g.cpus else ''})" for g in groups)
        self.options.echo(f"[{step.name}] {'heterogeneous' if heterogeneous else 'homogeneous'} cluster: {shape}")

        def on_line(host, line):
            self.options.echo(f"  {step.name:<18} {host.name:<7} {host.group.name:<10} {line}")

        job = EmulatedJob(name=step.name, groups=groups, channels=channels, hyperparameters=hyperparameters,
                          work_dir=self.run_dir, entry_point=step.entry_point, on_line=on_line,
                          environment={SECRET_ENV: secrets.token_hex(32)}, grace_s=self.options.grace_s,
                          timeout_s=self.options.step_timeout_s)
        with job:
            job.start()
            result = job.wait()
        self.result.jobs[step.name] = result
        if not result.ok:
            raise StepFailed(result.failure)
        self.result.outputs[(step.name, "model")] = result.model_dir

    # -- check ---------------------------------------------------------------
    def _check(self, step: CheckStep) -> None:
        threshold = self.value(step.threshold)
        folder = self.value(step.source)
        doc = json.loads((Path(folder) / step.file).read_text())
        value = doc.get(step.field)
        if threshold <= -1:
            return
        if value is None or value < threshold:
            shown = "not measured (no baseline)" if value is None else f"{value:.1%}"
            raise StepFailed(f"step {step.name}: {step.message}: {step.field} {shown} < {step.threshold.name} {threshold:.1%}")


def check_input_folder(value: str) -> None:
    if value and not Path(value).is_dir():
        raise UserError(f"--input {value!r} is not a folder; pass a folder of images laid out as <folder>/<class>/<image>.jpg",
                        headline="missing input")

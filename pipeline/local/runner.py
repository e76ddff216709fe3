"""The local runner: executes the compiled pipeline definition on this machine, no AWS account needed.

It compiles the pipeline with the same compiler as the cloud (`pipeline.sagemaker.definition`), bound to
local storage (`pipeline.storage`: ``s3://local/<path>`` is that path), then runs the definition
as the service would: parameters, conditions and fail steps evaluated from the JSON, every
CreateTrainingJob / CreateProcessingJob request checked like the service (`pipeline.sagemaker.validation`)
and then executed, training jobs on an emulated cluster (`pipeline.emulator.job`), processing jobs in
a local container folder (`pipeline.emulator.processing`). Steps run one at a time, each once the steps it depends on have
ended (the service runs independent steps side by side; here they would share the CPUs being measured): by default
the first ready step in definition order, with ``LocalOptions.order="reversed"`` the last. The service may take any
such order, so an order the code relies on is a dependency in the definition: CheckImprovement, whose failure ends
the execution, lists RegisterModel in its DependsOn, so the model is registered whatever the check finds.

Files: ``<work_dir>/<execution_id>/<step>/`` holds what each step wrote to "S3", and
``<work_dir>/<execution_id>/jobs/<step>/`` the emulated instances; the evaluation also lands in
the embedded results store ``<work_dir>/results/<execution_id>/``, and the register step files the model in the
local model registry, ``<work_dir>/registry/<model package group>/<version>.json`` (`steps.evaluate.registry`).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import expressions, storage
from pipeline.emulator.job import EmulatedJob
from pipeline.emulator.processing import run_processing_job
from pipeline.errors import StepFailed
from pipeline.graph import PIPELINE_NAME
from pipeline.iam.calls import LocalCalls
from pipeline.local.sample_data import generate
from pipeline.local.settings import LOCAL_ACCOUNT, LOCAL_REGION, LocalOptions, compile_local, cpu_plan, local_registry
from pipeline.sagemaker.validation import OPERATIONS, validate_execution, validate_request
from pipeline.stop import STOP
from steps.common.errors import EXIT_USER_ERROR, InternalError, UserError
from steps.contract import PRICE_PERFORMANCE_FILE
from steps.evaluate.registry import LocalRegistry


@dataclass
class RunResult:
    execution_id: str
    run_dir: Path
    definition: dict
    requests: dict = field(default_factory=dict)  # step -> the request it executed (evaluated, bound)
    properties: dict = field(default_factory=dict)  # step -> its Describe* properties
    outputs: dict = field(default_factory=dict)  # step -> local folder of its processing output
    skipped: list = field(default_factory=list)
    jobs: dict = field(default_factory=dict)  # step -> JobResult
    price_performance: dict | None = None
    evaluation_dir: Path | None = None
    store_uri: str | None = None
    model_package: dict | None = None  # what the register step filed (DescribeModelPackage's fields)


class LocalRunner:
    def __init__(self, parameters: dict, options: LocalOptions = LocalOptions()) -> None:  # noqa: B008 - frozen
        self.options = options
        self.work_dir = Path(options.work_dir).resolve()
        self.execution_id = f"local-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
        self.run_dir = self.work_dir / self.execution_id
        _check_input(parameters.get("InputData") or "")
        _check_prices(parameters.get("PriceOverrides") or "")
        self.definition = compile_local(
            self.work_dir,
            options.framework,
            spot=options.spot,
            network_isolation=options.network_isolation,
            code_dirs=options.code_dirs,
        )
        self.params = self._bind_parameters(parameters)
        self.result = RunResult(self.execution_id, self.run_dir, self.definition)
        self._current_step = ""  # the step being executed: who reads a property file
        self.scope = expressions.Scope(
            parameters=self.params,
            execution={
                "PipelineExecutionId": self.execution_id,
                "PipelineName": self.definition.get("Metadata", {}).get("Name", PIPELINE_NAME),
                "PipelineExecutionArn": f"arn:aws:sagemaker:{LOCAL_REGION}:{LOCAL_ACCOUNT}:pipeline/{PIPELINE_NAME.lower()}"
                f"/execution/{self.execution_id}",
            },
            read_json=self._read_property_file,
        )
        self.calls = LocalCalls(self.execution_id, self.run_dir, self.definition, self.params)
        # every request of the run, as the steps will send it, before any step (or the sample data) starts
        validate_execution(self.definition, self.params, self.scope.execution)
        STOP.check()  # a stop whose raise a finalizer lost while the definition compiled
        if self._sample_data is not None:
            self.options.echo(
                f"[Shard] no InputData: generating {self.options.sample_images} sample images in {self._sample_data}"
            )
            generate(self._sample_data, samples=self.options.sample_images)

    def _bind_parameters(self, parameters: dict) -> dict:
        """Declared defaults, the caller's values, and the input folder as a local location."""
        declared = {p["Name"]: p.get("DefaultValue") for p in self.definition["Parameters"]}
        unknown = set(parameters) - set(declared)
        if unknown:
            raise InternalError(f"parameters {sorted(unknown)} are not in the compiled pipeline")
        bound = {**declared, **parameters}
        folder = parameters.get("InputData") or ""
        self._sample_data = None
        if not folder:  # the local default: a generated dataset (generated once the run's requests are checked)
            folder = self._sample_data = self.work_dir / "sample-data"
        bound["InputData"] = storage.uri(folder) + "/"
        prices = parameters.get("PriceOverrides") or ""
        bound["PriceOverrides"] = storage.uri(prices) if prices else declared["PriceOverrides"]  # a file, or the {} object
        return bound

    def _read_property_file(self, uri: str) -> dict:
        """Std:JsonGet: the service reads the property file with the pipeline's role."""
        self.calls.property_file(uri, self._current_step)
        return json.loads(storage.path(uri).read_text())

    # -- the execution -------------------------------------------------------
    def run(self) -> RunResult:
        """The execution; its call ledger (`pipeline.iam`) is written whatever the outcome."""
        try:
            result = self._run()
        except BaseException:
            with contextlib.suppress(Exception):  # the ledger never hides why the run ended
                self.calls.finish(failed=True)
            raise
        self.calls.finish(failed=False)
        return result

    def _run(self) -> RunResult:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "parameters.json").write_text(json.dumps(self.params, indent=2, sort_keys=True))
        (self.run_dir / "definition.json").write_text(json.dumps(self.definition, indent=2, sort_keys=True))
        self.options.echo(f"execution {self.execution_id}  ({self.run_dir})")
        steps, parents = _flatten(self.definition["Steps"])
        done: set[str] = set()
        reached = {s["Name"] for s in self.definition["Steps"]}
        pending = list(steps)
        while pending:
            STOP.check()  # before each step: a stop whose raise was lost ends the run here
            step = next_ready(pending, lambda s: _ready(s, parents, done, self.result.skipped), self.options.order)
            if step is None:
                raise InternalError(f"steps {[s['Name'] for s in pending]} can never run: a dependency cycle")
            pending.remove(step)
            name = step["Name"]
            if name not in reached or _reads_skipped(step, parents, self.result.skipped):
                self.result.skipped.append(name)
                continue
            started = time.monotonic()
            reached |= self._execute(step)
            done.add(name)
            if step["Type"] in ("Training", "Processing"):
                self.options.echo(f"[{name}] done in {time.monotonic() - started:.1f} s")
        return self.result

    def _execute(self, step: dict) -> set[str]:
        """Run one step; returns the names of the branch steps it lets run."""
        kind, name = step["Type"], step["Name"]
        self._current_step = name
        if kind == "Condition":
            args = step["Arguments"]
            taken = all(expressions.holds(c, self.scope) for c in args["Conditions"])
            self.options.echo(f"[{name}] {'true' if taken else 'false'}")
            return {s["Name"] for s in args["IfSteps" if taken else "ElseSteps"]}
        if kind == "Fail":
            raise StepFailed(
                f"step {name}: {expressions.evaluate(step['Arguments'].get('ErrorMessage', ''), self.scope)}", user_error=True
            )
        operation = OPERATIONS.get(kind)
        if operation is None:
            raise UserError(f"step {name} is a {kind} step, which the local runner does not run", headline="unsupported step")
        request = expressions.evaluate(step["Arguments"], self.scope)
        self.result.requests[name] = request
        job_name = self._job_name(name)
        validate_request(operation, request, step=name, job_name=job_name)
        try:
            if kind == "Training":
                self._training(name, job_name, request)
            elif kind == "RegisterModel":
                self._register(name, request)
            else:
                self._processing(step, job_name, request)
        except UserError as exc:  # accepted by the service, failed when the job ran (no objects under a prefix, ...)
            raise StepFailed(f"step {name}: {exc.one_line()}", user_error=True) from None
        return set()

    def _degrade(self, job: EmulatedJob) -> None:
        """The first data host's link, as ``link_fault`` says, before the hosts start; a job without data hosts runs
        as it is."""
        job.prepare()
        data_hosts = [h for h in job.hosts if h.role == "data"]
        if data_hosts:
            job.degrade(data_hosts[0], self.options.link_fault)
        else:
            job.echo(f"network: no data host to degrade ({self.options.link_fault})")

    def _job_name(self, step: str) -> str:
        return f"pipelines-{self.execution_id[-8:]}-{step}-{secrets.token_hex(3)}"[:63]

    def _training(self, name: str, job_name: str, request: dict) -> None:
        plan = self.options.cpus or cpu_plan(self.options.pin_cpus)

        def on_line(host, line):
            self.options.echo(f"  {name:<18} {host.name:<7} {host.group.name:<10} {line}")

        job = EmulatedJob(
            name=job_name,
            request=request,
            job_dir=self.run_dir / "jobs" / name,
            step=name,
            cpus=plan,
            on_line=on_line,
            grace_s=self.options.grace_s,
            interrupt_after_steps=self.options.interrupt_after_steps,
            progress_timeout_s=self.options.progress_timeout_s,
            volume_scale=self.options.volume_scale,
            echo=lambda line: self.options.echo(f"[{name}] {line}"),
            extra_env=self.calls.environment(name),
            network_faults=self.options.link_fault is not None,
        )
        if self.options.step_timeout_s is not None:
            job.timeout_s = min(filter(None, [job.timeout_s, self.options.step_timeout_s]))
        shape = " + ".join(
            f"{g.count} x {g.instance_type} ({g.name}{', CPUs ' + ','.join(map(str, g.cpus)) if g.cpus else ''})"
            for g in job.groups
        )
        self.options.echo(f"[{name}] {'heterogeneous' if len(job.groups) > 1 else 'homogeneous'} cluster: {shape}")
        try:
            with job:
                if self.options.link_fault:
                    self._degrade(job)
                job.start()
                result = job.wait()
        finally:
            self.calls.training_job(request, job.name, name)
        self.result.jobs[name] = result
        if result.interruptions:
            self.options.echo(f"[{name}] interrupted {result.interruptions} time(s) and resumed from its checkpoints")
        if result.failure is not None:
            raise StepFailed(result.failure, user_error=any(h.exit_code == EXIT_USER_ERROR for h in result.hosts))
        seconds = max(1, round(result.wall_s))  # no spot market here: billable time is the training time
        self.scope.steps[name] = {
            "TrainingJobName": job.name,
            "TrainingJobStatus": "Completed",
            "ModelArtifacts": {"S3ModelArtifacts": result.model_artifacts},
            "TrainingTimeInSeconds": seconds,
            "BillableTimeInSeconds": seconds,
            **request,
        }

    def _register(self, name: str, request: dict) -> None:
        """CreateModelPackage into the local registry (the group's folder: created here, as the stack creates the group)."""
        registry = LocalRegistry(local_registry(self.work_dir))
        if request["ModelPackageGroupName"] != registry.group:
            raise InternalError(
                f"step {name} registers in {request['ModelPackageGroupName']!r}, the local group is {registry.group!r}"
            )
        package = registry.create(request, arn_prefix=f"arn:aws:sagemaker:{LOCAL_REGION}:{LOCAL_ACCOUNT}")
        self.calls.register(package["ModelPackageVersion"], request, name)
        self.scope.steps[name] = package
        self.result.model_package = package
        self.options.echo(
            f"[{name}] model package {package['ModelPackageVersion']} of {registry.group}: {package['ModelApprovalStatus']} "
            f"({registry.folder / str(package['ModelPackageVersion'])}.json)"
        )

    def _processing(self, step: dict, job_name: str, request: dict) -> None:
        name = step["Name"]
        args = request["AppSpecification"].get("ContainerArguments", [])
        self.options.echo(f"[{name}] {' '.join(a.rsplit('/', 1)[-1] if a.startswith(('/', 's3://')) else a for a in args)}")
        try:
            result = run_processing_job(
                name=job_name,
                request=request,
                job_dir=self.run_dir / "jobs" / name,
                step=name,
                echo=lambda line: self.options.echo(f"  {name:<18} {line}"),
                timeout_s=self.options.step_timeout_s,
                extra_env=self.calls.environment(name),
            )
        finally:
            self.calls.processing_job(request, job_name, name)
        if result.failure is not None:
            raise StepFailed(result.failure, user_error=result.exit_code == EXIT_USER_ERROR)
        self.scope.steps[name] = {"ProcessingJobName": job_name, "ProcessingJobStatus": "Completed", **request}
        self.scope.property_files[name] = {f["PropertyFileName"]: f for f in step.get("PropertyFiles", [])}
        for output in request.get("ProcessingOutputConfig", {}).get("Outputs", []):
            folder = storage.path(output["S3Output"]["S3Uri"])
            self.result.outputs[name] = folder
            if (folder / PRICE_PERFORMANCE_FILE).is_file():
                self.result.evaluation_dir = folder
                self.result.price_performance = json.loads((folder / PRICE_PERFORMANCE_FILE).read_text())
        store = _argument(args, "--store")
        if store:
            self.result.store_uri = str(storage.path(store))


def _check_input(folder: str) -> None:
    if folder and not Path(folder).is_dir():
        raise UserError(
            f"InputData {folder!r} (--input) is not a folder; pass a folder of images laid out as <folder>/<class>/<image>.jpg",
            headline="missing input",
        )


def _check_prices(file: str) -> None:
    if file and not Path(file).is_file():
        raise UserError(
            f"PriceOverrides {file!r} (--prices) is not a file; the local runner reads a local JSON price file "
            "(schema: steps/evaluate/prices.py; `hetero prices refresh` writes one)",
            headline="missing price file",
        )


def _argument(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def _flatten(steps: list, parent: str | None = None, parents: dict | None = None) -> tuple[list, dict]:
    """Every step, condition branches included, depth first; and step -> the condition step holding it."""
    parents = {} if parents is None else parents
    found = []
    for step in steps:
        found.append(step)
        if parent:
            parents[step["Name"]] = parent
        if step["Type"] == "Condition":
            args = step["Arguments"]
            found += _flatten(args.get("IfSteps", []) + args.get("ElseSteps", []), step["Name"], parents)[0]
    return found, parents


def _upstream(step: dict, parents: dict) -> set[str]:
    args = step.get("Arguments", {})
    own = args.get("Conditions", []) if step["Type"] == "Condition" else args  # a condition's branches are not its inputs
    deps = expressions.reads(own) | set(step.get("DependsOn", []))
    if step["Name"] in parents:
        deps.add(parents[step["Name"]])
    return deps


def _ready(step: dict, parents: dict, done: set, skipped: list) -> bool:
    return all(d in done or d in skipped for d in _upstream(step, parents))


def _reads_skipped(step: dict, parents: dict, skipped: list) -> bool:
    """A step whose upstream step did not run does not run either (the service blocks that sub-graph)."""
    return bool(_upstream(step, parents) & set(skipped))


def next_ready(pending: list, ready: Callable[[dict], bool], order: str = "definition") -> dict | None:
    """The step of ``pending`` (in definition order) that runs next: the first ``ready`` one, or with ``order``
    "reversed" the last. The service starts every ready step at once, so either is an order it may take."""
    return next((s for s in (reversed(pending) if order == "reversed" else pending) if ready(s)), None)

"""Requests checked the way SageMaker checks them, before anything runs.

Two layers, both offline:

* the service model botocore ships for the operation: required members, types and ``min``
  (botocore's own `ParamValidator`), plus what botocore leaves to the service: ``max``
  lengths and sizes, ``enum`` values and ``pattern``s (matched whole, as the service does);
* the cross-field rules CreateTrainingJob / CreateProcessingJob enforce that a model cannot
  express (`TRAINING_RULES`, `PROCESSING_RULES`): each one found against the real service.

A rejected request raises `RequestRejected`, worded like the service's ValidationException and
naming the step and the member or rule.

`validate_execution` checks every job request of an execution at once, when it starts: each request
as the service will receive it after parameter substitution, so a value over a length or size limit
(a ContainerArguments item over 256 characters, an Environment value over 512 or 256, a hyperparameter
over 2,500, more than 100 hyperparameters) fails before the first step runs, naming the parameter it
came from, its length, the limit and the fix.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pipeline.errors import RequestRejected
from pipeline.sagemaker.dependencies import as_text, member_name, steps_in_order
from steps.contract import LONG_VALUE_FIX, LONG_VALUE_FIXES
from steps.evaluate.registration import STAND_IN as PROPERTY_FILE_STAND_IN

MAX_INSTANCE_GROUPS = 5


JOB_NAME_MEMBER = {"CreateTrainingJob": "TrainingJobName", "CreateProcessingJob": "ProcessingJobName"}
# pipeline step type -> the request it sends
OPERATIONS = {"Training": "CreateTrainingJob", "Processing": "CreateProcessingJob", "RegisterModel": "CreateModelPackage"}


@dataclass(frozen=True)
class Problem:
    """One reason the service would reject a request; ``where``: the member's path from the request's top (keys and
    list indexes), ``size`` and ``limit`` for a length or size over its maximum."""

    text: str
    where: tuple = ()
    size: int | None = None
    limit: int | None = None
    unit: str = ""  # of size and limit: characters, items or entries; "value" for a number over its maximum


def validate_request(operation: str, request: dict, *, step: str, job_name: str | None = None) -> None:
    """Raise `RequestRejected` if SageMaker would reject ``request`` for ``operation``. A pipeline
    step's arguments carry no job name (the service names the job): ``job_name`` stands in for it."""
    problems = request_problems(operation, request, step=step, job_name=job_name)
    if problems:
        raise RequestRejected(_rejection(step, operation, [p.text for p in problems]))


def _rejection(step: str, operation: str, problems: list[str]) -> str:
    return f"step {step}: An error occurred (ValidationException) when calling the {operation} operation: " + "; ".join(problems)


def request_problems(operation: str, request: dict, *, step: str, job_name: str | None = None) -> list[Problem]:
    member = JOB_NAME_MEMBER.get(operation)
    if member and member not in request:
        request = {**request, member: job_name or f"pipelines-0123456789ab-{step}"[:63]}
    problems = model_problems(operation, request)
    if not problems:
        rules = {"CreateTrainingJob": TRAINING_RULES, "CreateProcessingJob": PROCESSING_RULES}.get(operation, ())
        problems = [Problem(p) for rule in rules for p in rule(request)]
    return problems


# -- every request of an execution, when it starts -----------------------------------------------


def validate_execution(definition: dict, parameters: dict, execution: dict) -> None:
    """Raise `RequestRejected` if any job step of ``definition`` would be rejected when an execution with
    ``parameters`` (every declared parameter, typed) reaches it. ``execution``: PipelineExecutionId,
    PipelineExecutionArn and PipelineName as the steps will see them. Properties of steps that have not run
    yet (a model's S3 URI, billed seconds) are stand-ins as long as the service's own; every branch's steps
    are checked, whichever the conditions will take."""
    from pipeline import expressions

    steps = steps_in_order(definition.get("Steps", []))
    scope = expressions.Scope(
        parameters=parameters,
        execution=execution,
        # a property file read into a request (the register step's metadata) is the longest its step writes
        property_files={s["Name"]: {f["PropertyFileName"]: f for f in s["PropertyFiles"]} for s in steps if "PropertyFiles" in s},
        read_json=lambda uri: PROPERTY_FILE_STAND_IN,
    )
    pending = [s for s in steps if s.get("Type") in OPERATIONS]
    messages = []
    while pending:
        step = next((s for s in pending if expressions.reads(s["Arguments"]) <= set(scope.steps)), None)
        if step is None:  # reads a step that is not a job (nothing to stand in for): left to the run itself
            break
        pending.remove(step)
        name, operation = step["Name"], OPERATIONS[step["Type"]]
        request = expressions.evaluate(step["Arguments"], scope)
        job_name = f"pipelines-{execution['PipelineExecutionId']}-{name}-0123456789"[:63]
        scope.steps[name] = _stand_in_properties(request, job_name)
        problems = request_problems(operation, request, step=name, job_name=job_name)
        if problems:
            messages.append(
                _rejection(name, operation, [_explain(p, step["Arguments"], parameters, operation) for p in problems])
            )
    if messages:
        raise RequestRejected("; ".join(messages))


def _stand_in_properties(request: dict, job_name: str) -> dict:
    """What DescribeTrainingJob / DescribeProcessingJob will answer, as long as the service makes it."""
    output = request.get("OutputDataConfig", {}).get("S3OutputPath", "s3://bucket")
    return {
        **request,
        "TrainingJobName": job_name,
        "ProcessingJobName": job_name,
        "ModelArtifacts": {"S3ModelArtifacts": f"{output.rstrip('/')}/{job_name}/output/model.tar.gz"},
        "TrainingTimeInSeconds": 8_640_000,
        "BillableTimeInSeconds": 8_640_000,
    }


def _explain(problem: Problem, compiled: dict, parameters: dict, operation: str) -> str:
    """A length or size over the limit that a parameter's value makes: named with the parameter and the fix."""
    names = sorted(_parameters_at(compiled, problem.where)) if problem.where and problem.unit in ("characters", "value") else []
    if not names:
        return problem.text
    member = member_name(problem.where)
    if problem.unit == "value":
        return (
            f"{member} would be {problem.size}, from parameter {', '.join(f'{n}={parameters.get(n)}' for n in names)}; "
            f"{operation} allows at most {problem.limit}: lower {' or '.join(names)}"
        )
    lengths = ", ".join(f"{n} ({len(as_text(parameters.get(n)))} characters)" for n in names)
    fixes = "; ".join(
        f"{n}: {LONG_VALUE_FIXES.get(n, LONG_VALUE_FIX)}" if len(names) > 1 else LONG_VALUE_FIXES.get(n, LONG_VALUE_FIX)
        for n in names
    )
    return (
        f"{member} would be {problem.size} characters long, from parameter {lengths}; {operation} allows at most "
        f"{problem.limit}: {fixes}"
    )


def _parameters_at(compiled, where: tuple) -> set[str]:
    """The parameters the expression that produces the member at ``where`` reads."""
    node = compiled
    for key in where:
        if isinstance(node, dict) and len(node) == 1 and next(iter(node)) in ("Get", "Std:Join", "Std:JsonGet"):
            break  # this expression produces everything below it
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return set()
    return _parameters_read(node)


def _parameters_read(node) -> set[str]:
    if isinstance(node, list):
        return set().union(*map(_parameters_read, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    target = node.get("Get")
    found = {target.split(".", 1)[1]} if isinstance(target, str) and target.startswith("Parameters.") else set()
    return found.union(*map(_parameters_read, node.values()))


# -- the service model -------------------------------------------------------------------------


@functools.cache
def _input_shape(operation: str):
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker").operation_model(operation).input_shape


def model_problems(operation: str, request: dict) -> list[Problem]:
    from botocore.validate import ParamValidator

    shape = _input_shape(operation)
    report = ParamValidator().validate(request, shape)
    if report.has_errors():
        lines = [line.strip() for line in report.generate_report().splitlines() if line.strip()]
        return [Problem(line) for line in (lines[1:] if lines[0].startswith("Parameter validation failed") else lines)]
    return list(_constraints(request, shape, "request", ()))


def _constraints(value, shape, path: str, where: tuple) -> Iterator[Problem]:
    """What botocore does not check client-side: max, enum, pattern."""
    meta = shape.metadata
    kind = shape.type_name.lower()
    if kind == "structure":
        for name, member in shape.members.items():
            if name in value:
                yield from _constraints(value[name], member, f"{path}.{name}", (*where, name))
        return
    if kind == "list":
        yield from _size(len(value), meta, path, "items", where)
        for i, item in enumerate(value):
            yield from _constraints(item, shape.member, f"{path}[{i}]", (*where, i))
        return
    if kind == "map":
        yield from _size(len(value), meta, path, "entries", where)
        for key, item in value.items():
            yield from _constraints(key, shape.key, f"{path} key {key[:40]!r}", ())  # a key's origin is not traced
            yield from _constraints(item, shape.value, f"{path}[{key[:40]!r}]", (*where, key))
        return
    if kind == "string":
        yield from _size(len(value), meta, path, "characters", where)
        if shape.enum and value not in shape.enum:
            yield Problem(f"Invalid value {value!r} for {path}, valid values: {', '.join(shape.enum)}", where)
        pattern = _pattern(meta.get("pattern"))
        if pattern is not None and not pattern.fullmatch(value):
            yield Problem(
                f"Value {value[:80]!r} at {path} failed to satisfy constraint: Member must satisfy regular expression "
                f"pattern: {meta['pattern']}",
                where,
            )
    elif kind in ("integer", "long", "float", "double") and "max" in meta and value > meta["max"]:
        yield Problem(
            f"Value {value} at {path} failed to satisfy constraint: Member must have value less than or equal to {meta['max']}",
            where,
            value,
            meta["max"],
            "value",
        )


def _size(size: int, meta: dict, path: str, unit: str, where: tuple) -> Iterator[Problem]:
    if "max" in meta and size > meta["max"]:
        yield Problem(
            f"Value at {path} failed to satisfy constraint: Member must have length less than or equal to "
            f"{meta['max']} (has {size} {unit})",
            where,
            size,
            meta["max"],
            unit,
        )


@functools.cache
def _pattern(text: str | None):
    if not text:
        return None
    try:
        return re.compile(text, re.DOTALL)
    except re.error:  # a Java-only construct: the service checks it, we cannot
        return None


# -- cross-field rules: CreateTrainingJob ------------------------------------------------------


def _groups(request: dict) -> list[dict]:
    return request.get("ResourceConfig", {}).get("InstanceGroups") or []


def instance_groups_unique_and_few(request: dict) -> Iterator[str]:
    names = [g["InstanceGroupName"] for g in _groups(request)]
    if len(names) > MAX_INSTANCE_GROUPS:
        yield f"ResourceConfig.InstanceGroups has {len(names)} groups; at most {MAX_INSTANCE_GROUPS} are allowed"
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        yield f"instance group names must be unique: {', '.join(repeated)} appear more than once"
    rc = request.get("ResourceConfig", {})
    if names and ("InstanceType" in rc or "InstanceCount" in rc):
        yield "ResourceConfig takes InstanceGroups or InstanceType/InstanceCount, not both"


def channel_names_unique(request: dict) -> Iterator[str]:
    names = [c["ChannelName"] for c in request.get("InputDataConfig", [])]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        yield f"channel names must be unique: {', '.join(repeated)} appear more than once"


def _assigned(channel: dict) -> list[str] | None:
    return channel.get("DataSource", {}).get("S3DataSource", {}).get("InstanceGroupNames")


def channel_groups_all_or_nothing(request: dict) -> Iterator[str]:
    channels = request.get("InputDataConfig", [])
    assigned = [c["ChannelName"] for c in channels if _assigned(c)]
    others = [c["ChannelName"] for c in channels if not _assigned(c)]
    if assigned and others:
        yield (
            f"Some channels have assigned instance groups: {assigned} while others not: {others}. Assign instance "
            "groups (InstanceGroupNames) to every channel or to none"
        )


def file_system_channels_assign_no_group(request: dict) -> Iterator[str]:
    channels = request.get("InputDataConfig", [])
    on_fs = [c["ChannelName"] for c in channels if "FileSystemDataSource" in c.get("DataSource", {})]
    assigned = [c["ChannelName"] for c in channels if _assigned(c)]
    if on_fs and assigned:
        yield (
            f"channels {on_fs} read a FileSystemDataSource, which mounts on every instance group and cannot be "
            f"assigned to groups, so no channel may assign instance groups: remove InstanceGroupNames from {assigned}"
        )
    if on_fs and not request.get("VpcConfig"):
        yield f"channels {on_fs} read a FileSystemDataSource: the job needs a VpcConfig (subnets and security groups of the file system)"


def channel_groups_exist(request: dict) -> Iterator[str]:
    known = {g["InstanceGroupName"] for g in _groups(request)}
    for channel in request.get("InputDataConfig", []):
        names = _assigned(channel) or []
        if names and not known:
            yield f"channel {channel['ChannelName']} assigns instance groups {names} but the job has no InstanceGroups"
        elif unknown := sorted(set(names) - known):
            yield f"channel {channel['ChannelName']} names instance group(s) {unknown} that ResourceConfig.InstanceGroups does not have ({sorted(known)})"


def hyperparameter_sizes(request: dict) -> Iterator[str]:
    for key, value in request.get("HyperParameters", {}).items():
        if len(key) > 256:
            yield f"hyperparameter key {key[:40]!r}... is {len(key)} characters; at most 256 are allowed"
        if len(value) > 2500:
            yield f"hyperparameter {key!r} is {len(value)} characters long; at most 2500 are allowed"


def spot_wait(request: dict) -> Iterator[str]:
    stopping = request.get("StoppingCondition", {})
    wait, runtime = stopping.get("MaxWaitTimeInSeconds"), stopping.get("MaxRuntimeInSeconds")
    if wait is not None and not request.get("EnableManagedSpotTraining"):
        yield "Invalid MaxWaitTimeInSeconds. It is only supported when EnableManagedSpotTraining is set to true"
    if wait is not None and runtime is not None and wait < runtime:
        yield f"MaxWaitTimeInSeconds ({wait}) must be greater than or equal to MaxRuntimeInSeconds ({runtime})"


TRAINING_RULES: tuple[Callable[[dict], Iterator[str]], ...] = (
    instance_groups_unique_and_few,
    channel_names_unique,
    channel_groups_all_or_nothing,
    file_system_channels_assign_no_group,
    channel_groups_exist,
    hyperparameter_sizes,
    spot_wait,
)


# -- cross-field rules: CreateProcessingJob ----------------------------------------------------

PROCESSING_ROOT = "/opt/ml/processing/"


def processing_names_unique(request: dict) -> Iterator[str]:
    for what, items, key in (
        ("input", request.get("ProcessingInputs", []), "InputName"),
        ("output", request.get("ProcessingOutputConfig", {}).get("Outputs", []), "OutputName"),
    ):
        names = [i[key] for i in items]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            yield f"processing {what} names must be unique: {', '.join(repeated)} appear more than once"


def processing_local_paths(request: dict) -> Iterator[str]:
    paths = [i["S3Input"]["LocalPath"] for i in request.get("ProcessingInputs", []) if "S3Input" in i]
    paths += [o["S3Output"]["LocalPath"] for o in request.get("ProcessingOutputConfig", {}).get("Outputs", []) if "S3Output" in o]
    for path in paths:
        if not path.startswith(PROCESSING_ROOT):
            yield f"LocalPath {path!r} must be under {PROCESSING_ROOT}"
    repeated = sorted({p for p in paths if paths.count(p) > 1})
    if repeated:
        yield f"LocalPath values must be distinct: {', '.join(repeated)} used more than once"


def processing_volume_fits_instance_storage(request: dict) -> Iterator[str]:
    """A processing instance with NVMe instance storage mounts that instead of an EBS volume, and the request may not ask
    for more (API ProcessingClusterConfig.VolumeSizeInGB). Training differs: it ignores VolumeSizeInGB on such types."""
    from pipeline.sagemaker.instances import instance_storage_gb

    cluster = request.get("ProcessingResources", {}).get("ClusterConfig", {})
    store = instance_storage_gb(cluster.get("InstanceType", ""))
    size = cluster.get("VolumeSizeInGB")
    if store and isinstance(size, int) and size > store:
        yield (
            f"ProcessingResources.ClusterConfig.VolumeSizeInGB {size} is more than the {store} GB of local instance storage "
            f"of {cluster['InstanceType']}: request at most {store}, or an instance type without instance storage"
        )


PROCESSING_RULES: tuple[Callable[[dict], Iterator[str]], ...] = (
    processing_names_unique,
    processing_local_paths,
    processing_volume_fits_instance_storage,
)

"""Requests checked the way SageMaker checks them, before anything runs.

Two layers, both offline:

* the service model botocore ships for the operation: required members, types and ``min``
  (botocore's own `ParamValidator`), plus what botocore leaves to the service: ``max``
  lengths and sizes, ``enum`` values and ``pattern``s (matched whole, as the service does);
* the cross-field rules CreateTrainingJob / CreateProcessingJob enforce that a model cannot
  express (`TRAINING_RULES`, `PROCESSING_RULES`): each one found against the real service.

A rejected request raises `RequestRejected`, worded like the service's ValidationException and
naming the step and the member or rule.
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Iterator

from steps.common.errors import UserError

MAX_INSTANCE_GROUPS = 5


class RequestRejected(UserError):
    headline = "ValidationException"


JOB_NAME_MEMBER = {"CreateTrainingJob": "TrainingJobName", "CreateProcessingJob": "ProcessingJobName"}


def validate_request(operation: str, request: dict, *, step: str, job_name: str | None = None) -> None:
    """Raise `RequestRejected` if SageMaker would reject ``request`` for ``operation``. A pipeline
    step's arguments carry no job name (the service names the job): ``job_name`` stands in for it."""
    member = JOB_NAME_MEMBER.get(operation)
    if member and member not in request:
        request = {**request, member: job_name or f"pipelines-0123456789ab-{step}"[:63]}
    problems = list(model_problems(operation, request))
    if not problems:
        rules = {"CreateTrainingJob": TRAINING_RULES, "CreateProcessingJob": PROCESSING_RULES}.get(operation, ())
        problems = [p for rule in rules for p in rule(request)]
    if problems:
        raise RequestRejected(f"step {step}: An error occurred (ValidationException) when calling the {operation} operation: "
                              + "; ".join(problems))


# -- the service model -------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _input_shape(operation: str):
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker").operation_model(operation).input_shape


def model_problems(operation: str, request: dict) -> list[str]:
    from botocore.validate import ParamValidator

    shape = _input_shape(operation)
    report = ParamValidator().validate(request, shape)
    if report.has_errors():
        lines = [line.strip() for line in report.generate_report().splitlines() if line.strip()]
        return lines[1:] if lines[0].startswith("Parameter validation failed") else lines
    return list(_constraints(request, shape, "request"))


def _constraints(value, shape, path: str) -> Iterator[str]:
    """What botocore does not check client-side: max, enum, pattern."""
    meta = shape.metadata
    kind = shape.type_name.lower()
    if kind == "structure":
        for name, member in shape.members.items():
            if name in value:
                yield from _constraints(value[name], member, f"{path}.{name}")
        return
    if kind == "list":
        yield from _size(len(value), meta, path, "items")
        for i, item in enumerate(value):
            yield from _constraints(item, shape.member, f"{path}[{i}]")
        return
    if kind == "map":
        yield from _size(len(value), meta, path, "entries")
        for key, item in value.items():
            yield from _constraints(key, shape.key, f"{path} key {key[:40]!r}")
            yield from _constraints(item, shape.value, f"{path}[{key[:40]!r}]")
        return
    if kind == "string":
        yield from _size(len(value), meta, path, "characters")
        if shape.enum and value not in shape.enum:
            yield f"Invalid value {value!r} for {path}, valid values: {', '.join(shape.enum)}"
        pattern = _pattern(meta.get("pattern"))
        if pattern is not None and not pattern.fullmatch(value):
            yield f"Value {value[:80]!r} at {path} failed to satisfy constraint: Member must satisfy regular expression pattern: {meta['pattern']}"
    elif kind in ("integer", "long", "float", "double") and "max" in meta and value > meta["max"]:
        yield f"Value {value} at {path} failed to satisfy constraint: Member must have value less than or equal to {meta['max']}"


def _size(size: int, meta: dict, path: str, unit: str) -> Iterator[str]:
    if "max" in meta and size > meta["max"]:
        yield f"Value at {path} failed to satisfy constraint: Member must have length less than or equal to {meta['max']} (has {size} {unit})"


@functools.lru_cache(maxsize=None)
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
        yield (f"Some channels have assigned instance groups: {assigned} while others not: {others}. Assign instance "
               "groups (InstanceGroupNames) to every channel or to none")


def file_system_channels_assign_no_group(request: dict) -> Iterator[str]:
    channels = request.get("InputDataConfig", [])
    on_fs = [c["ChannelName"] for c in channels if "FileSystemDataSource" in c.get("DataSource", {})]
    assigned = [c["ChannelName"] for c in channels if _assigned(c)]
    if on_fs and assigned:
        yield (f"channels {on_fs} read a FileSystemDataSource, which mounts on every instance group and cannot be "
               f"assigned to groups, so no channel may assign instance groups: remove InstanceGroupNames from {assigned}")
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
    instance_groups_unique_and_few, channel_names_unique, channel_groups_all_or_nothing, file_system_channels_assign_no_group,
    channel_groups_exist, hyperparameter_sizes, spot_wait,
)


# -- cross-field rules: CreateProcessingJob ----------------------------------------------------

PROCESSING_ROOT = "/opt/ml/processing/"


def processing_names_unique(request: dict) -> Iterator[str]:
    for what, items, key in (("input", request.get("ProcessingInputs", []), "InputName"),
                             ("output", request.get("ProcessingOutputConfig", {}).get("Outputs", []), "OutputName")):
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


PROCESSING_RULES: tuple[Callable[[dict], Iterator[str]], ...] = (processing_names_unique, processing_local_paths)

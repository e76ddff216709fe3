"""``metrics.json``, declared once: a class per section, as `steps.train.dataplane.messages` declares the wire's frames.

Every trainer (PyTorch, TensorFlow, Ray) builds a `Metrics` (`steps.train.core.metrics.training_metrics`) and writes
`Metrics.as_dict` (`steps.train.core.outputs`); every reader (Evaluate, its planner and registry, ``hetero plan``, the
run summary) takes a document read from a file through `check`, which holds it against these classes for the version
it names: a field of the wrong type or out of range, or missing where its version has it, is a `UserError` that names
the file and the field. Sections other modules own in full (``config``, ``isolated_costs``, ``local_decode``,
``checkpoints``, ``epoch_accounting``) are declared as plain objects, each with the module that writes it.

Versions: 1 the first; 2 ``data_hosts`` (each data host's own measurements) and ``bytes_received_per_sample``; 3 every
framework records its resumes in ``sample_ledger`` (TensorFlow wrote ``resumes`` at the top level; `resumes` reads both).
"""

from __future__ import annotations

import math
import typing
from dataclasses import Field, dataclass, field, fields, is_dataclass
from functools import cache
from types import NoneType, UnionType

from steps.common.errors import UserError

VERSION = 3  # what this release writes (module doc: what each version changed)
READABLE_VERSIONS = (1, 2, 3)  # Evaluate reads runs trained by earlier releases too


def _bounds(low: float | None = None, high: float | None = None, *, low_open: bool = False, since: int = 1) -> dict:
    """A field's metadata: its range, and the version from which a document must hold it (0: never required)."""
    return {"low": low, "high": high, "low_open": low_open, "since": since}


OPTIONAL = _bounds(since=0)  # absent in older documents, or only some frameworks write it
ABSENT_IF_NONE = {**OPTIONAL, "omit_none": True}  # written only by the frameworks that have it


class Section:
    """A declared object of metrics.json: `as_dict` writes it, `check` holds a read one against the declaration."""

    __dataclass_fields__: typing.ClassVar[dict[str, Field[typing.Any]]]  # every section is a dataclass

    def as_dict(self) -> dict:
        doc = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            doc[f.name] = _plain(value)
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> typing.Self:
        """A section from the plain object a writer's helper builds (`steps.train.dataplane.meter`, `gpus`, ...): a key
        this class does not declare, or one it lacks, is a TypeError."""
        values = {}
        for name, value in doc.items():
            # a class is hashable; mypy takes type[X] for an instance of X here (python/mypy#11470)
            nested = _section_of(cls, name) if name in _types(cls) else None  # type: ignore[arg-type]
            if nested and isinstance(value, dict):
                value = nested.from_dict(value)
            elif nested and isinstance(value, list):
                value = [nested.from_dict(v) for v in value]
            values[name] = value
        return cls(**values)


def _plain(value):
    if isinstance(value, Section):
        return value.as_dict()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class InstanceGroup(Section):
    name: str
    instance_type: str
    count: int = field(metadata=_bounds(1))
    role: str


@dataclass(frozen=True)
class StepTime(Section):
    """Seconds per step over the measured steps (warm-up left out)."""

    mean: float = field(metadata=_bounds(0, low_open=True))
    p50: float = field(metadata=OPTIONAL)
    p90: float = field(metadata=OPTIONAL)


@dataclass(frozen=True)
class StepSeries(Section):
    """Step and data-wait times over the whole run, each the mean of ``window_steps`` steps: the report's charts."""

    window_steps: int
    step_time_s: list[float]
    data_wait_s: list[float]


@dataclass(frozen=True)
class CorruptSamples(Section):
    count: int
    examples: list  # [id, reason], the first 20


@dataclass(frozen=True)
class DataHost(Section):
    """What one data host measured of itself (`steps.train.dataplane.meter.data_host_metrics`), per sample."""

    host: str
    cpus: int = field(metadata=_bounds(1))
    samples_sent: int = field(metadata=_bounds(0))
    batches_sent: dict = field(metadata=OPTIONAL)  # per trainer
    streams: int = field(metadata=OPTIONAL)  # connections to each trainer (streams per flow)
    decode_cpu_s_per_sample: float = field(metadata=_bounds(0))
    service_cpu_s_per_sample: float = field(metadata=_bounds(0))
    busy_share: float = field(metadata=_bounds(0))
    bytes_sent_per_sample: float = field(metadata=_bounds(0))
    samples_per_second: float = field(metadata=OPTIONAL)
    measured_over_s: float = field(metadata=OPTIONAL)
    decode_workers: dict | None = field(default=None, metadata=ABSENT_IF_NONE)  # `steps.train.core.retune`


@dataclass(frozen=True)
class Precision(Section):
    """The arithmetic asked for (the Precision parameter) and the one used (`steps.train.core.precision.choose`)."""

    requested: str
    used: str

    @property
    def label(self) -> str:
        """The one used, and what was asked where it differs (auto)."""
        return self.used if self.requested == self.used else f"{self.used} ({self.requested})"


@dataclass(frozen=True)
class Gpus(Section):
    """The GPUs each trainer host has and uses (`steps.train.core.gpus.gpu_use`); ``idle`` says why some sit idle."""

    per_host: int
    used_per_host: int
    idle: str | None


@dataclass(frozen=True)
class SampleLedger(Section):
    """Which samples the trainers consumed, per epoch (`steps.train.core.ledger`), and how often the run resumed."""

    epochs: list  # per epoch: epoch, samples, distinct, duplicates, digest (none where a framework keeps no ledger)
    resumes: int
    partial_epoch: dict | None  # the epoch a run ended inside: its number and the samples so far


@dataclass(frozen=True)
class Metrics(Section):
    """The whole document, in the order it is written."""

    schema_version: int
    framework: str = field(metadata=OPTIONAL)
    mode: str
    instance_groups: list[InstanceGroup]
    global_batch_size: int = field(metadata=OPTIONAL)
    steps: int = field(metadata=OPTIONAL)
    warmup_steps: int = field(metadata=OPTIONAL)
    measured_steps: int = field(metadata=OPTIONAL)
    step_time_s: StepTime
    data_wait_share: float = field(metadata=_bounds(0, 1))
    data_wait_s_per_step: float = field(metadata=OPTIONAL)
    compute_s_per_step: float = field(metadata=OPTIONAL)
    samples_per_second: float = field(metadata=_bounds(0, low_open=True))
    accuracy: float | None = field(metadata=_bounds(0, 1))  # null: a throughput-only run
    epochs: int = field(metadata=OPTIONAL)
    samples_seen: int = field(metadata=OPTIONAL)  # all trainer hosts, warm-up included: epochs x dataset when complete
    corrupt_samples: CorruptSamples = field(metadata=OPTIONAL)
    classes: list[str] = field(metadata=OPTIONAL)
    step_series: StepSeries | None = field(metadata=OPTIONAL)
    data_hosts: list[DataHost] = field(metadata=_bounds(since=2))
    bytes_received: int = field(metadata=OPTIONAL)
    bytes_received_per_sample: float = field(metadata=_bounds(0, since=2))
    compile: str = field(metadata=OPTIONAL)
    isolated_costs: dict | None = field(metadata=OPTIONAL)  # decode alone and the step alone (`steps.train.core.cost_document`)
    model_parameters: int = field(metadata=OPTIONAL)  # the planner's all-reduce model
    sample_ledger: SampleLedger = field(metadata=_bounds(since=3))
    local_decode: list | None = field(
        metadata=ABSENT_IF_NONE
    )  # each trainer host's own decode (hybrid); none in a homogeneous TensorFlow run
    gpus: Gpus = field(metadata=OPTIONAL)
    precision: Precision = field(metadata=OPTIONAL)
    checkpoints: dict | None = field(default=None, metadata=ABSENT_IF_NONE)  # PyTorch: saves and their seconds
    epoch_accounting: list | None = field(default=None, metadata=ABSENT_IF_NONE)  # TensorFlow: per epoch, what arrived
    config: dict = field(default_factory=dict, metadata=OPTIONAL)  # the resolved TrainConfig


def check(doc: object, source: str) -> dict:
    """``doc`` (a metrics.json read from ``source``) held against the declaration for the version it names; returns it."""
    if not isinstance(doc, dict):
        raise UserError(f"{source}: top level must be a JSON object")
    version = _value(doc, "schema_version", (int,), source, "schema_version", {})
    if version not in READABLE_VERSIONS:
        *earlier, last = READABLE_VERSIONS
        readable = f"{', '.join(map(str, earlier))} and {last}"
        raise UserError(
            f"{source}: field 'schema_version' is {version}; this evaluator reads versions {readable}: "
            "evaluate with the release that trained it, or retrain"
        )
    mode = doc.get("mode")
    if "mode" in doc and mode not in ("heterogeneous", "homogeneous"):
        raise UserError(f"{source}: field 'mode' must be 'heterogeneous' or 'homogeneous', got {mode!r}")
    if not doc.get("instance_groups", [None]):
        raise UserError(f"{source}: field 'instance_groups' must list at least one group")
    check_section(Metrics, doc, source, "", version=version)
    costs = doc.get("isolated_costs")
    if costs:
        for name in ("decode_s_per_batch", "step_s_per_batch"):
            _value(costs, name, (float, int), source, f"isolated_costs.{name}", _bounds(0, low_open=True))
    return doc


def resumes(doc: dict) -> int:
    """How many times the run resumed from a checkpoint, from either layout (module doc: version 3)."""
    return int((doc.get("sample_ledger") or {}).get("resumes", doc.get("resumes", 0)))


def precision_label(document: dict | None) -> str:
    """A run's precision in a summary (`Precision.label`); ``-`` for a run whose metrics.json predates the record."""
    return Precision(**document).label if document else "-"


def check_section(cls: type, doc: object, source: str, label: str, *, version: int) -> None:
    if not isinstance(doc, dict):
        raise UserError(f"{source}: field {label.rstrip('.')!r} must be an object, got {doc!r}")
    for f in fields(cls):
        since = f.metadata.get("since", 1)
        required = since and version >= since
        if f.name not in doc:
            if required:
                raise UserError(f"{source}: required field {label + f.name!r} is missing")
            continue
        value = _value(doc, f.name, _types(cls)[f.name], source, label + f.name, f.metadata)
        nested = _section_of(cls, f.name)
        if nested and isinstance(value, dict):
            check_section(nested, value, source, f"{label}{f.name}.", version=version)
        elif nested and isinstance(value, list):
            for i, item in enumerate(value):
                check_section(nested, item, source, f"{label}{f.name}[{i}].", version=version)


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}


def _value(doc: dict, key: str, types: tuple, source: str, label: str, meta: typing.Mapping):
    if key not in doc:
        raise UserError(f"{source}: required field {label!r} is missing")
    value = doc[key]
    if value is None and NoneType in types:
        return value
    ok = isinstance(value, types) and not isinstance(value, bool)
    low, high, low_open = meta.get("low"), meta.get("high"), meta.get("low_open", False)
    if ok and isinstance(value, int | float):
        ok = math.isfinite(value) and (low is None or value > low or (value == low and not low_open))
        ok = ok and (high is None or value <= high)
    if not ok:
        kind = next(t for t in types if t is not NoneType)
        bounds = "" if low is None else f" {'>' if low_open else '>='} {low}"
        bounds += "" if high is None else f" and <= {high}"
        raise UserError(f"{source}: field {label!r} must be {_TYPE_NAMES[kind]}{bounds}, got {value!r}")
    return value


@cache
def _types(cls: type) -> dict[str, tuple[type, ...]]:
    """Each field's accepted JSON types: a section is an object, a list of anything a list; a float takes an int."""
    hints = typing.get_type_hints(cls)
    accepted = {}
    for f in fields(cls):
        hint = hints[f.name]
        options = typing.get_args(hint) if isinstance(hint, UnionType) else (hint,)
        types = tuple(dict if is_dataclass(t) else (typing.get_origin(t) or t) for t in options)
        accepted[f.name] = (*types, int) if float in types else types
    return accepted


@cache
def _section_of(cls: type, name: str) -> type[Section] | None:
    """The `Section` a field holds, alone or as a list's items, else None."""
    hint = typing.get_type_hints(cls)[name]
    for option in typing.get_args(hint) if isinstance(hint, UnionType) else (hint,):
        inner = typing.get_args(option)[0] if typing.get_origin(option) is list and typing.get_args(option) else option
        if isinstance(inner, type) and issubclass(inner, Section):
            return inner
    return None

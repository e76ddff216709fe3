"""Training configuration: every hyperparameter, declared once with default and help.

SageMaker hands hyperparameters to the container as strings in
``input/config/hyperparameters.json``; the toolkit JSON-decodes what it can.
`TrainConfig.from_hyperparameters` parses them at the edge into a frozen
dataclass: unknown keys and ill-typed values are errors that name the key.
Keys starting with ``sagemaker_`` belong to the toolkit and are ignored here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from steps.common.errors import UserError
from steps.contract import DATA_GROUP, DNN_GROUP, FRAMEWORKS, TUNABLES_BY_HYPERPARAMETER


def _param(default, help: str, **extra):
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata={"help": help, **extra})
    return field(default=default, metadata={"help": help, **extra})


def _tunable(name: str):
    """A hyperparameter that a pipeline parameter sets: default, bounds and help come from its declaration."""
    t = TUNABLES_BY_HYPERPARAMETER[name]
    default = json.loads(t.default) if t.json_object else t.default
    bounds = {k: v for k, v in (("minimum", t.minimum), ("maximum", t.maximum)) if v is not None}
    return _param(default, f"{t.help} [pipeline parameter {t.name}]", **bounds, **({"choices": t.choices} if t.choices else {}))


@dataclass(frozen=True)
class TrainConfig:
    framework: str = _param("pytorch", "Training framework.", choices=FRAMEWORKS)
    workload: str = _tunable("workload")
    workload_options: dict = _tunable("workload_options")
    data_group: str = _param(DATA_GROUP, "Instance group that runs the data service.")
    dnn_group: str = _param(DNN_GROUP, "Instance group that trains.")
    trainer_cpus: str = _tunable("trainer_cpus")
    retune: str = _tunable("retune")
    epochs: int = _tunable("epochs")
    max_steps: int = _tunable("max_steps")
    batch_size: int = _tunable("batch_size")
    precision: str = _tunable("precision")
    compile: str = _tunable("compile")
    streams_per_flow: int = _tunable("streams_per_flow")
    max_corrupt_share: float = _tunable("max_corrupt_share")
    learning_rate: float = _param(0.003, "Optimiser learning rate (AdamW unless the workload says otherwise).", minimum=0.0)
    warmup_steps: int = _param(5, "Steps left out of step-time statistics.", minimum=0)
    num_workers: int = _param(0, "Decode processes per host (0: one per available CPU).", minimum=0)
    prefetch_batches: int = _param(4, "Batches buffered per data host on the trainer.", minimum=1)
    data_port: int = _param(9400, "TCP port of the data service on data hosts.", minimum=1, maximum=65535)
    dist_port: int = _param(29500, "TCP port of torch.distributed rendezvous on the first trainer.", minimum=1, maximum=65535)
    ray_port: int = _param(
        0,
        "Ray path: TCP port of the Ray head (its GCS) on the first trainer (0: a free port, which the "
        "head tells the other hosts).",
        minimum=0,
        maximum=65535,
    )
    tf_compression: str = _param(
        "none",
        "TensorFlow path: tf.data.service compression of batches on the wire, none or auto "
        "(snappy: costs CPU on both ends; augmented uint8 pixels barely shrink).",
        choices=("none", "auto"),
    )
    bind_guard: str = _param(
        "on",
        "TensorFlow and Ray paths: confine every listener of a host (tf.data.service, which has no "
        "authentication; Ray's GCS, raylet and workers) to the host's cluster address (on; needs a C "
        "compiler in the image), or accept that they listen on every interface (off).",
        choices=("on", "off"),
    )
    shard_wait_s: float = _param(
        600.0,
        "How long hosts wait for every shard of a channel they see whole (FSx, FullyReplicated) to be visible.",
        minimum=0.0,
    )
    connect_timeout_s: float = _param(
        600.0,
        "How long hosts wait for their peers to come up: every host name of "
        "the cluster to resolve, then each peer's service to answer.",
        minimum=1.0,
    )
    silence_timeout_s: float = _param(60.0, "A peer silent this long is taken as gone.", minimum=1.0)
    heartbeat_s: float = _param(2.0, "Interval of keep-alive frames between peers.", minimum=0.05)
    checkpoint_every_steps: int = _param(
        0,
        "PyTorch path: write a checkpoint every N training steps (0: not by step count). "
        "Checkpoints are also written at the end of every epoch and on SIGTERM (TensorFlow and "
        "Ray: at epoch ends only).",
        minimum=0,
    )
    checkpoint_every_s: float = _param(
        600.0,
        "PyTorch path: write a checkpoint when this many seconds have passed since the last one (0: not by time).",
        minimum=0.0,
    )
    log_every: int = _param(10, "Print a metric line every N steps.", minimum=1)
    seed: int = _param(0, "Seed for shuffling and initialisation.")

    def __post_init__(self) -> None:
        if self.trainer_cpus not in ("auto", "all") and not (self.trainer_cpus.isdigit() and int(self.trainer_cpus) >= 1):
            raise UserError(
                f"hyperparameter trainer_cpus={self.trainer_cpus!r}: use auto, all, or a whole number of vCPUs "
                "(1 or more) to keep for the training loop",
                headline="bad hyperparameter",
            )

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata["help"] for f in dataclasses.fields(cls)}

    @classmethod
    def from_hyperparameters(cls, hyperparameters: dict[str, Any]) -> TrainConfig:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in hyperparameters.items():
            if key.startswith("sagemaker_"):
                continue
            if key not in fields:
                raise UserError(
                    f"unknown hyperparameter {key!r}; known: {', '.join(sorted(fields))}",
                    headline="bad hyperparameter",
                )
            values[key] = _coerce(fields[key], raw)
        return cls(**values)

    def to_hyperparameters(self) -> dict[str, str]:
        """The strings SageMaker expects in hyperparameters.json."""
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in dataclasses.asdict(self).items()}

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _coerce(f: dataclasses.Field, raw: Any) -> Any:
    want = {"str": str, "int": int, "float": float, "dict": dict}[f.type if isinstance(f.type, str) else f.type.__name__]
    value = raw
    if isinstance(raw, str) and want is not str:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, an over-long int literal, deep nesting
            value = raw
    if want is str and isinstance(value, (int, float)):
        value = json.dumps(value)  # the toolkit JSON-decodes every hyperparameter: "123" arrives as 123
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value) if abs(value) < 2**1024 else math.inf  # float() raises OverflowError past that
    if want is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, want) or isinstance(value, bool):
        raise UserError(
            f"hyperparameter {f.name}={raw!r} is not a {want.__name__}: {f.metadata['help']}",
            headline="bad hyperparameter",
        )
    if isinstance(value, float) and not math.isfinite(value):  # NaN slips past every bound; inf overflows socket timeouts
        raise UserError(
            f"hyperparameter {f.name}={raw!r} must be a finite number: {f.metadata['help']}", headline="bad hyperparameter"
        )
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        raise UserError(
            f"hyperparameter {f.name}={value!r}: allowed values are {', '.join(choices)}", headline="bad hyperparameter"
        )
    lo, hi = f.metadata.get("minimum"), f.metadata.get("maximum")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f">= {lo}" if hi is None else f"between {lo} and {hi}"
        raise UserError(f"hyperparameter {f.name}={value!r} must be {bounds}", headline="bad hyperparameter")
    return value

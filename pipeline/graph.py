"""The one logical pipeline graph: parameters, steps, inputs and outputs.

Nothing here knows how a step runs. The local runner (`pipeline.local`)
executes this graph on an emulated cluster; a SageMaker compiler turns the
same graph into a pipeline definition. Step fields are literals, `Param`
references to pipeline parameters, or `Output` references to what an
earlier step produced, so each backend can map them to its own terms.

    Shard ──> TrainBaseline (homogeneous, skippable) ──┐
      └─────> TrainHeterogeneous (data + dnn groups) ──┴─> Evaluate ──> CheckImprovement
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Union

from steps.common.errors import UserError
from steps.train.config import FRAMEWORKS, MAX_TRAINER_HOSTS, TrainConfig

SHARDED, REPLICATED = "ShardedByS3Key", "FullyReplicated"
DATA_GROUP, DNN_GROUP = TrainConfig().data_group, TrainConfig().dnn_group
TRAIN_ENTRY_POINT = "steps/train/launcher.py"
PIPELINE_NAME = "HeteroTraining"  # the deployed pipeline's default name
# The shard format each framework's input pipeline reads. The framework is fixed when the graph is
# built (it picks the container image), not a run-time parameter.
SHARD_FORMATS = {"pytorch": "webdataset", "tensorflow": "tfrecord"}


@dataclass(frozen=True)
class Parameter:
    name: str
    type: type
    default: Any
    help: str
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    json_object: bool = False  # a str parameter that must hold a JSON object

    def parse(self, raw: Any) -> Any:
        """A user-supplied value (string from a CLI/env, or typed) -> checked value."""
        value = raw
        try:
            if self.type is bool and isinstance(raw, str):
                if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(raw)
                value = raw.lower() in ("true", "1", "yes")
            elif not isinstance(raw, self.type) or isinstance(raw, bool) != (self.type is bool):
                value = self.type(raw)
        except (TypeError, ValueError):
            raise UserError(f"parameter {self.name}={raw!r} is not a {self.type.__name__}: {self.help}", headline="bad parameter") from None
        if self.choices and value not in self.choices:
            raise UserError(f"parameter {self.name}={value!r}: allowed values are {', '.join(map(str, self.choices))}",
                            headline="bad parameter")
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            bounds = f">= {self.minimum:g}" if self.maximum is None else f"between {self.minimum:g} and {self.maximum:g}"
            raise UserError(f"parameter {self.name}={value!r} must be {bounds}", headline="bad parameter")
        if self.json_object:
            self._check_json_object(value)
        return value

    def _check_json_object(self, value: str) -> None:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise UserError(f"parameter {self.name}={value!r} is not JSON ({exc}); write a JSON object, "
                            "e.g. '{\"blur_passes\": 4}'", headline="bad parameter") from None
        if not isinstance(parsed, dict):
            raise UserError(f"parameter {self.name}={value!r} must be a JSON object, e.g. '{{\"blur_passes\": 4}}'",
                            headline="bad parameter")


PARAMETERS: tuple[Parameter, ...] = (
    Parameter("InputData", str, "", "Raw images, class-per-folder: an s3:// prefix in the cloud, a folder locally (empty: generated sample data)."),
    Parameter("Workload", str, TrainConfig().workload, "Module defining WORKLOAD (decode/augment, model)."),
    Parameter("WorkloadOptions", str, "{}", "JSON object of workload options, e.g. {\"blur_passes\": 4}.", json_object=True),
    Parameter("DataInstanceType", str, "ml.c5.9xlarge", "Instance type of the data (CPU) group."),
    Parameter("DataInstanceCount", int, 1, "Hosts in the data group.", minimum=1, maximum=64),
    Parameter("DnnInstanceType", str, "ml.p3.2xlarge", "Instance type of the dnn (GPU) group."),
    Parameter("DnnInstanceCount", int, 1, "Hosts in the dnn group.", minimum=1, maximum=64),
    Parameter("DataDistribution", str, SHARDED, "How training shards reach the data hosts.", choices=(SHARDED, REPLICATED)),
    Parameter("InputMode", str, "File", "SageMaker input mode of the training channel.", choices=("File", "FastFile", "Pipe")),
    Parameter("DataSource", str, "S3", "Where training reads shards from.", choices=("S3", "FSx")),
    Parameter("ShardSizeMB", float, 64.0, "Target shard size; 1-128 MB objects transfer best.", minimum=1, maximum=128),
    Parameter("Epochs", int, TrainConfig().epochs, "Passes over the training shards.", minimum=1),
    Parameter("MaxSteps", int, 0, "Stop each trainer after this many steps (0: no limit).", minimum=0),
    Parameter("BatchSize", int, TrainConfig().batch_size, "Samples per step per trainer host.", minimum=1),
    Parameter("RunBaseline", bool, True, "Also train homogeneously (dnn group alone) for the price-performance comparison."),
    Parameter("ImprovementThreshold", float, -1.0, "Fail the execution when price-performance improvement is below this (-1: never).",
              minimum=-1, maximum=1),
)
PARAMETERS_BY_NAME = {p.name: p for p in PARAMETERS}


def parse_overrides(overrides: dict) -> dict:
    """Just the given parameters, checked: unknown names and bad values are errors."""
    for name in overrides:
        if name not in PARAMETERS_BY_NAME:
            raise UserError(f"unknown parameter {name!r}; known: {', '.join(PARAMETERS_BY_NAME)}", headline="bad parameter")
    return {name: PARAMETERS_BY_NAME[name].parse(raw) for name, raw in overrides.items()}


def resolve_parameters(*layers: dict) -> dict:
    """Defaults, then each layer in order (later wins), then validation of what won:
    a value overridden by a later layer is never judged."""
    merged: dict = {}
    for layer in layers:
        merged.update(layer)
    return {**{p.name: p.default for p in PARAMETERS}, **parse_overrides(merged)}


@dataclass(frozen=True)
class Param:
    name: str

    def __post_init__(self):
        assert self.name in PARAMETERS_BY_NAME, self.name


@dataclass(frozen=True)
class Output:
    step: str
    name: str


@dataclass(frozen=True)
class ExecutionId:
    """The execution's id (SageMaker: ExecutionVariables.PIPELINE_EXECUTION_ID)."""


Value = Union[str, int, float, bool, Param, Output, ExecutionId]


@dataclass(frozen=True)
class ProcessingStep:
    name: str
    script: str
    inputs: dict  # name -> Value (a folder); handed to the script as --<name>; absent when None
    outputs: dict  # name -> path relative to the script's --output folder
    arguments: dict  # --flag -> Value
    instance_type: str = "ml.m5.xlarge"
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class Group:
    name: str
    instance_type: Value
    count: Value


@dataclass(frozen=True)
class TrainChannel:
    name: str
    source: Value
    distribution: Value = REPLICATED
    instance_groups: tuple[str, ...] | None = None
    input_mode: Value = "File"


@dataclass(frozen=True)
class TrainingStep:
    name: str
    groups: tuple[Group, ...]
    channels: tuple[TrainChannel, ...]
    hyperparameters: dict
    entry_point: str = TRAIN_ENTRY_POINT
    condition: Param | None = None  # skipped when this boolean parameter is false
    outputs: tuple[str, ...] = ("model",)


@dataclass(frozen=True)
class CheckStep:
    """Fails the execution when a number in an earlier step's JSON output is below a parameter."""

    name: str
    source: Output
    file: str
    field: str
    threshold: Param
    message: str


@dataclass(frozen=True)
class Graph:
    name: str
    parameters: tuple[Parameter, ...]
    steps: tuple = field(default_factory=tuple)
    framework: str = "pytorch"

    def step(self, name: str):
        return next(s for s in self.steps if s.name == name)

    @property
    def max_dnn_hosts(self) -> int | None:
        return MAX_TRAINER_HOSTS[self.framework]

    def check_parameters(self, params: dict) -> None:
        """What this graph cannot run, said before any step starts (the SageMaker backend checks it in CheckParameters)."""
        limit = self.max_dnn_hosts
        if limit is not None and params["DnnInstanceCount"] > limit:
            raise UserError(f"DnnInstanceCount={params['DnnInstanceCount']}: the {self.framework} path trains on {limit} dnn host "
                            "(every GPU of it); use DnnInstanceCount=1 (--dnn-hosts 1), or the pytorch framework for several "
                            "trainer hosts", headline="bad parameter")


def _hyperparameters(framework: str) -> dict:
    return {"framework": framework, "workload": Param("Workload"), "workload_options": Param("WorkloadOptions"), "epochs": Param("Epochs"), "max_steps": Param("MaxSteps"),
            "batch_size": Param("BatchSize"), "data_group": DATA_GROUP, "dnn_group": DNN_GROUP}


def _eval_channels(group: str) -> tuple[TrainChannel, ...]:
    return (TrainChannel("validation", Output("Shard", "validation"), REPLICATED, (group,)),
            TrainChannel("manifest", Output("Shard", "manifest"), REPLICATED))


def build_graph(framework: str = "pytorch") -> Graph:
    if framework not in FRAMEWORKS:
        raise UserError(f"framework {framework!r} is not supported; use one of {', '.join(FRAMEWORKS)}", headline="bad framework")
    dnn = Group(DNN_GROUP, Param("DnnInstanceType"), Param("DnnInstanceCount"))
    data = Group(DATA_GROUP, Param("DataInstanceType"), Param("DataInstanceCount"))
    shard = ProcessingStep(
        "Shard", "steps/shard/shard.py",
        inputs={"input": Param("InputData")},
        outputs={"train": "train", "validation": "validation", "manifest": "manifest.json"},
        arguments={"--target-shard-mb": Param("ShardSizeMB"), "--data-hosts": Param("DataInstanceCount"),
                   "--format": SHARD_FORMATS[framework]},
    )
    baseline = TrainingStep(
        "TrainBaseline", groups=(dnn,),
        # every dnn host sees all shards and takes its share by sample index: shard counts need not divide
        channels=(TrainChannel("train", Output("Shard", "train"), REPLICATED, (DNN_GROUP,), Param("InputMode")), *_eval_channels(DNN_GROUP)),
        hyperparameters=_hyperparameters(framework), condition=Param("RunBaseline"),
    )
    hetero = TrainingStep(
        "TrainHeterogeneous", groups=(data, dnn),
        channels=(TrainChannel("train", Output("Shard", "train"), Param("DataDistribution"), (DATA_GROUP,), Param("InputMode")),
                  *_eval_channels(DNN_GROUP)),
        hyperparameters=_hyperparameters(framework),
    )
    evaluate = ProcessingStep(
        "Evaluate", "steps/evaluate/evaluate.py",
        inputs={"heterogeneous": Output("TrainHeterogeneous", "model"), "baseline": Output("TrainBaseline", "model")},
        outputs={"evaluation": "."},
        arguments={"--execution-id": ExecutionId()},
        depends_on=("TrainBaseline", "TrainHeterogeneous"),
    )
    check = CheckStep(
        "CheckImprovement", Output("Evaluate", "evaluation"), "price_performance.json", "improvement",
        Param("ImprovementThreshold"),
        "price-performance improvement of the heterogeneous cluster is below ImprovementThreshold",
    )
    return Graph(PIPELINE_NAME, PARAMETERS, (shard, baseline, hetero, evaluate, check), framework)

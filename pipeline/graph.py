"""The one logical pipeline graph: parameters, steps, inputs and outputs.

Nothing here knows how a step runs. The local runner (`pipeline.local.runner`)
executes this graph on an emulated cluster; a SageMaker compiler turns the
same graph into a pipeline definition. Step fields are literals, `Param`
references to pipeline parameters, or `Output` references to what an
earlier step produced, so each backend can map them to its own terms.

    Shard ──> TrainBaseline (homogeneous, skippable) ──┐
      └─────> TrainHeterogeneous (data + dnn groups) ──┴─> Evaluate ──> RegisterModel ──> CheckImprovement

SageMaker starts every step whose dependencies are met, side by side: an order the code relies on is a
dependency of the graph (an input read from a step, or ``depends_on``), never the order the steps are listed in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from steps.common.errors import VOLUME_PARAMETER, UserError
from steps.contract import (
    DATA_GROUP,
    DNN_GROUP,
    EVALUATE_SCRIPT,
    HYBRID_CHANNEL,
    MANIFEST_FILE,
    MODEL_METRICS_FILE,
    PRICE_PERFORMANCE_FILE,
    REPLICATED,
    SECRET_CHANNEL,
    SHARD_SCRIPT,
    TRAIN_ENTRY_POINT,
    TUNABLES,
    TUNABLES_BY_NAME,
    Tunable,
)
from steps.frameworks import framework as framework_row

PIPELINE_NAME = "HeteroTraining"  # the deployed pipeline's default name
# a model package group name: 1-63 letters, digits and single hyphens inside (botocore: EntityName, CreateModelPackageGroup)
MODEL_PACKAGE_GROUP_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
MAX_MODEL_PACKAGE_GROUP_NAME = 63
HYBRID_INPUT_MODE = "FastFile"  # the dnn group's view of the training shards (hybrid decode)


def default_model_package_group(pipeline_name: str) -> str:
    """``<pipeline name>-models``, the pipeline name cut to fit the group name's 63 characters."""
    suffix = "-models"
    return pipeline_name[: MAX_MODEL_PACKAGE_GROUP_NAME - len(suffix)].rstrip("-") + suffix


def parse_overrides(overrides: dict) -> dict:
    """Just the given parameters, checked: unknown names and bad values are errors."""
    for name in overrides:
        if name not in TUNABLES_BY_NAME:
            raise UserError(f"unknown parameter {name!r}; known: {', '.join(TUNABLES_BY_NAME)}", headline="bad parameter")
    return {name: TUNABLES_BY_NAME[name].parse(raw) for name, raw in overrides.items()}


def resolve_parameters(*layers: dict) -> dict:
    """Defaults, then each layer in order (later wins), then validation of what won:
    a value overridden by a later layer is never judged."""
    merged: dict = {}
    for layer in layers:
        merged.update(layer)
    return {**{p.name: p.default for p in TUNABLES}, **parse_overrides(merged)}


@dataclass(frozen=True)
class Param:
    name: str

    def __post_init__(self) -> None:
        assert self.name in TUNABLES_BY_NAME, self.name


@dataclass(frozen=True)
class Output:
    step: str
    name: str


@dataclass(frozen=True)
class Billing:
    """A training step's ``BillableTimeInSeconds/TrainingTimeInSeconds`` as text: what a managed spot job was
    billed for against how long it trained (SageMaker's own measure of the spot saving)."""

    step: str


@dataclass(frozen=True)
class ExecutionId:
    """The execution's id (SageMaker: ExecutionVariables.PIPELINE_EXECUTION_ID)."""


@dataclass(frozen=True)
class PipelineName:
    """The name the pipeline was deployed under (SageMaker: ExecutionVariables.PIPELINE_NAME)."""


Value = str | int | float | bool | Param | Output | Billing | ExecutionId | PipelineName


@dataclass(frozen=True)
class ProcessingStep:
    name: str
    script: str
    inputs: dict  # name -> Value (a folder); handed to the script as --<name>; absent when None
    outputs: dict  # name -> path relative to the script's --output folder
    arguments: dict  # --flag -> Value
    instance_type: str = "ml.m5.xlarge"
    depends_on: tuple[str, ...] = ()
    results_store: bool = False  # the script also gets --store <the results store>
    registry: bool = False  # the script also gets --registry <the model registry>
    volume_gb: Value = Param(VOLUME_PARAMETER)  # ProcessingResources.ClusterConfig.VolumeSizeInGB


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
    file_system: bool = False  # read from the file system (FSx) instead of S3 when the pipeline is deployed with one


@dataclass(frozen=True)
class TrainingStep:
    name: str
    groups: tuple[Group, ...]
    channels: tuple[TrainChannel, ...]
    hyperparameters: dict
    entry_point: str = TRAIN_ENTRY_POINT
    condition: Param | None = None  # skipped when this boolean parameter is false
    outputs: tuple[str, ...] = ("model",)
    volume_gb: Value = Param(VOLUME_PARAMETER)  # ResourceConfig.VolumeSizeInGB: one size for every group of the job


@dataclass(frozen=True)
class CheckStep:
    """Fails the execution when a number in an earlier step's JSON output is below a parameter."""

    name: str
    source: Output
    file: str
    field: str
    threshold: Param
    message: str
    depends_on: tuple[str, ...] = ()  # steps that must end first though the check reads nothing of theirs


@dataclass(frozen=True)
class RegisterStep:
    """Registers a training step's model as the next version of the model package group: approval status,
    metrics and metadata come from the JSON document ``file`` in an earlier step's output."""

    name: str
    model: Output
    metrics: Output
    file: str


@dataclass(frozen=True)
class Graph:
    name: str
    parameters: tuple[Tunable, ...]
    steps: tuple = field(default_factory=tuple)
    framework: str = "pytorch"

    def step(self, name: str) -> ProcessingStep | TrainingStep | CheckStep | RegisterStep:
        return next(s for s in self.steps if s.name == name)

    @property
    def max_dnn_hosts(self) -> int | None:
        return framework_row(self.framework).max_trainer_hosts


def _hyperparameters(framework: str) -> dict:
    tuned = {p.hyperparameter: Param(p.name) for p in TUNABLES if p.hyperparameter}
    return {"framework": framework, **tuned, "data_group": DATA_GROUP, "dnn_group": DNN_GROUP}


def build_graph(framework: str = "pytorch") -> Graph:
    """Every channel of a training step names its instance groups (CreateTrainingJob takes all or none):
    the data group reads the training shards, the dnn group the validation split, both the manifest and
    the job secret Shard draws for the execution (a file: never in a job's Environment)."""
    fw = framework_row(framework)  # an unknown name is refused here
    baseline, hetero = _training_steps(framework, fw.every_host_reads_every_shard)
    register = RegisterStep(
        "RegisterModel", Output("TrainHeterogeneous", "model"), Output("Evaluate", "evaluation"), MODEL_METRICS_FILE
    )
    check = CheckStep(
        "CheckImprovement",
        Output("Evaluate", "evaluation"),
        PRICE_PERFORMANCE_FILE,
        "improvement",
        Param("ImprovementThreshold"),
        "price-performance improvement of the heterogeneous cluster is below ImprovementThreshold",
        # a failing check ends the execution: a model whose improvement falls short must be registered (left pending
        # approval) by then, and nothing the check reads says so
        depends_on=(register.name,),
    )
    steps = (_shard_step(fw.shard_format), baseline, hetero, _evaluate_step(), register, check)
    return Graph(PIPELINE_NAME, TUNABLES, steps, framework)


def _shard_step(shard_format: str) -> ProcessingStep:
    return ProcessingStep(
        "Shard",
        SHARD_SCRIPT,
        inputs={"input": Param("InputData")},
        outputs={"train": "train", "validation": "validation", "manifest": MANIFEST_FILE, "secret": SECRET_CHANNEL},
        # --input-source: the input as the user named it, for messages (the step reads its container copy)
        arguments={
            "--target-shard-mb": Param("ShardSizeMB"),
            "--data-hosts": Param("DataInstanceCount"),
            "--format": shard_format,
            "--input-source": Param("InputData"),
        },
    )


def _training_steps(framework: str, every_host_reads_every_shard: bool) -> tuple[TrainingStep, TrainingStep]:
    """The homogeneous baseline (skippable) and the heterogeneous run, each channel naming its instance groups."""
    dnn = Group(DNN_GROUP, Param("DnnInstanceType"), Param("DnnInstanceCount"))
    data = Group(DATA_GROUP, Param("DataInstanceType"), Param("DataInstanceCount"))
    train = Output("Shard", "train")
    validation = TrainChannel("validation", Output("Shard", "validation"), REPLICATED, (DNN_GROUP,))
    baseline = TrainingStep(
        "TrainBaseline",
        groups=(dnn,),
        # every dnn host sees all shards and takes its share by sample index: shard counts need not divide
        channels=(
            TrainChannel("train", train, REPLICATED, (DNN_GROUP,), Param("InputMode"), file_system=True),
            validation,
            TrainChannel("manifest", Output("Shard", "manifest"), REPLICATED, (DNN_GROUP,)),
            TrainChannel(SECRET_CHANNEL, Output("Shard", "secret"), REPLICATED, (DNN_GROUP,)),
        ),
        hyperparameters=_hyperparameters(framework),
        condition=Param("RunBaseline"),
    )
    if every_host_reads_every_shard:
        # Ray Data's read tasks run on any node and open the files the driver listed: every host sees every shard
        shards: tuple[TrainChannel, ...] = (
            TrainChannel("train", train, REPLICATED, (DATA_GROUP, DNN_GROUP), Param("InputMode"), file_system=True),
        )
    else:
        shards = (
            TrainChannel("train", train, Param("DataDistribution"), (DATA_GROUP,), Param("InputMode"), file_system=True),
            # the dnn hosts' own decode workers take their share of every shard (steps/train/core/split.py). FastFile: whether
            # they decode is known only at run time (TrainerCpus=auto measures it, and a definition's channels are fixed
            # for every execution), so the shards stream to them as they read; with TrainerCpus=all nothing moves and no
            # copy of the training set lands on their volume
            TrainChannel(HYBRID_CHANNEL, train, REPLICATED, (DNN_GROUP,), HYBRID_INPUT_MODE, file_system=True),
        )
    hetero = TrainingStep(
        "TrainHeterogeneous",
        groups=(data, dnn),
        channels=(
            *shards,
            validation,
            TrainChannel("manifest", Output("Shard", "manifest"), REPLICATED, (DATA_GROUP, DNN_GROUP)),
            TrainChannel(SECRET_CHANNEL, Output("Shard", "secret"), REPLICATED, (DATA_GROUP, DNN_GROUP)),
        ),
        hyperparameters=_hyperparameters(framework),
    )
    return baseline, hetero


def _evaluate_step() -> ProcessingStep:
    return ProcessingStep(
        "Evaluate",
        EVALUATE_SCRIPT,
        # the price file is an input, never an argument: a refreshed table is several KB, an argument at most 256 characters
        inputs={
            "heterogeneous": Output("TrainHeterogeneous", "model"),
            "baseline": Output("TrainBaseline", "model"),
            "prices": Param("PriceOverrides"),
        },
        outputs={"evaluation": "."},
        arguments={
            "--execution-id": ExecutionId(),
            "--pipeline-name": PipelineName(),  # the dimension of the figures Evaluate publishes (steps/evaluate/emf.py)
            "--billing-heterogeneous": Billing("TrainHeterogeneous"),
            "--billing-baseline": Billing("TrainBaseline"),
            "--improvement-threshold": Param("ImprovementThreshold"),
            "--approve-margin": Param("AutoApproveMargin"),
        },
        depends_on=("TrainBaseline", "TrainHeterogeneous"),
        results_store=True,
        registry=True,
    )

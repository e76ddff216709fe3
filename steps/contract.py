"""What crosses a process boundary, declared once: read by `pipeline/` (which builds and runs jobs)
and by the step code (which runs inside them). Nothing here imports a framework.

* Tunables: every pipeline parameter with its type, default, bounds or choices, help, command-line
  flag and hyperparameter name. The pipeline graph, the CLI, the CDK settings and the training
  config all read these declarations.
* Names: environment variables, files, instance groups, entry points, frameworks, metric
  definitions (the metrics.json schema: steps/common/metrics_json.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from steps.common.errors import FAILURE_FILE, VOLUME_PARAMETER, UserError  # noqa: F401 - FAILURE_FILE: the failure-file contract lives with run_step
from steps.frameworks import FRAMEWORKS  # noqa: F401 - declared in the frameworks' table

# -- environment variables -------------------------------------------------------------------------
HOSTS_FILE_ENV = "HETERO_HOSTS_FILE"  # emulated cluster DNS: lines "<address> <host>"
EMULATED_HOST_ENV = "HETERO_EMULATED_HOST"  # set on every emulated host: its instance type's GPUs are not there
BIND_ADDRESS_ENV = (
    "HETERO_BIND_ADDRESS"  # the one address a guarded TensorFlow host listens on (steps/train/dataplane/bind_guard.c)
)

# -- files -----------------------------------------------------------------------------------------
METRICS_FILE = "metrics.json"  # written by trainers into model/ and output/data/
# a served model package (steps/serve): the request bodies it takes (the encoded image as is) and the response it writes;
# the model package's SupportedContentTypes and SupportedResponseMIMETypes (pipeline/sagemaker/serving.py)
SERVING_CONTENT_TYPES = ("application/x-image", "image/jpeg", "image/png")
SERVING_ACCEPT = "application/json"
MANIFEST_FILE = "manifest.json"  # written by the Shard step
SHARD_REPORT_FILE = (
    "report.json"  # written by the Shard step beside the manifest: per-class counts, quarantined and skipped files
)
HYBRID_CHANNEL = "train_local"  # the training shards as the dnn group sees them: what its own decode workers read (hybrid decode)
PRICE_PERFORMANCE_FILE = "price_performance.json"  # written by the Evaluate step
RESULTS_FOLDER = "results"  # the results store of a deployed pipeline: s3://<bucket>/<prefix>/results/<execution id>/
PLAN_FILE = "plan.json"
MODEL_METRICS_FILE = "model_metrics.json"  # written by the Evaluate step: the register step's metrics, approval and metadata
# The data plane's secret, drawn per execution by the Shard step (steps/shard/job_secret.py): <Shard output>/secret/job-secret,
# the training jobs' `secret` input channel (never their Environment, which DescribeTrainingJob shows)
SECRET_CHANNEL = "secret"
SECRET_FILE = "job-secret"
CODE_CHANNEL = (
    "code"  # under network isolation the code reaches training jobs as this input channel, as the SageMaker SDK ships it
)
CHECKPOINT_FOLDER = "checkpoints"  # CheckpointConfig.LocalPath is /opt/ml/<this>; SageMaker syncs it with CheckpointConfig.S3Uri
CHECKPOINT_LOCAL_PATH = f"/opt/ml/{CHECKPOINT_FOLDER}"
HETEROGENEOUS_METRICS_FILE = "heterogeneous_metrics.json"  # in the results store: the runs' metrics beside the verdict
BASELINE_METRICS_FILE = (
    "baseline_metrics.json"  # written by the Evaluate step beside price_performance.json: the next run's data group
)
PRICE_PERFORMANCE_SCHEMA_VERSION = 2  # 2: each run's bottleneck (steps/evaluate/diagnosis.py)

# -- the job's shape -------------------------------------------------------------------------------
DATA_GROUP, DNN_GROUP = "data_group", "dnn_group"
SHARDED, REPLICATED = "ShardedByS3Key", "FullyReplicated"
INPUT_MODES = ("File", "FastFile")  # what the step code reads: folders of files (Pipe would deliver FIFOs)
PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # the training step's arithmetic (steps/train/core/precision.py)
COMPILES = ("off", "on")  # the training step's forward: eager, or compiled (torch.compile, XLA for TensorFlow)
TRAIN_ENTRY_POINT = "steps/train/launcher.py"
SHARD_SCRIPT = "steps/shard/shard.py"
EVALUATE_SCRIPT = "steps/evaluate/evaluate.py"

# -- metrics SageMaker scrapes from the training log (MetricDefinitions) --------------------------
METRIC_DEFINITIONS = [
    {"Name": name, "Regex": rf"{key}=([0-9.eE+-]+)"}
    for name, key in (
        ("train:step_time_ms", "step_time_ms"),
        ("train:samples_per_sec", "samples_per_sec"),
        ("train:data_wait_pct", "data_wait_pct"),
        ("train:loss", "loss"),
        ("validation:accuracy", "accuracy"),
    )
]


# -- tunables --------------------------------------------------------------------------------------
MAX_PARAMETER_CHARS = 1024  # StartPipelineExecution: PipelineParameters[].Value
# what to do with a value too long for the request member it ends up in (or for a pipeline parameter)
LONG_VALUE_FIX = "put it in a file (an S3 object in the cloud) and pass the file's location instead"
LONG_VALUE_FIXES = {
    "InputData": "use a shorter S3 prefix (or local folder path) for the raw images",
    "Workload": "use a shorter module path for the workload",
    "WorkloadOptions": "keep long or fixed options in the workload module itself (its defaults) and pass only the ones "
    "that change per run",
    "PriceOverrides": "it names the price file, it does not hold it: pass the file (--prices FILE) or its s3:// URI",
}


# VolumeSizeInGB: CreateProcessingJob takes 1-16384 (botocore's ProcessingVolumeSizeInGB: min 1, max 16384);
# CreateTrainingJob's ResourceConfig takes 0 and up (OptionalVolumeSizeInGB: min 0), and an EBS volume is at most
# 16 TiB. One parameter sizes both, so it takes what both accept.
MIN_VOLUME_GB, MAX_VOLUME_GB = 1, 16384
DEFAULT_VOLUME_GB = 100


@dataclass(frozen=True)
class Tunable:
    """One pipeline parameter. ``flag``: its `hetero run` option (without dashes); ``hyperparameter``:
    the training hyperparameter it becomes (None: it shapes the job instead)."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    json_object: bool = False  # a str parameter that must hold a JSON object
    flag: str | None = None
    hyperparameter: str | None = None

    def parse(self, raw: Any, *, what: str = "parameter") -> Any:
        """A user-supplied value (a string from a CLI/env, or typed) -> the checked value."""
        value = self._typed(raw, what)
        if self.type is str and len(value) > MAX_PARAMETER_CHARS:
            raise UserError(
                f"{what} {self.name} is {len(value)} characters long; a SageMaker pipeline parameter value may have "
                f"at most {MAX_PARAMETER_CHARS}: {LONG_VALUE_FIXES.get(self.name, LONG_VALUE_FIX)}",
                headline=f"bad {what}",
            )
        if self.choices and value not in self.choices:
            raise UserError(
                f"{what} {self.name}={value!r}: allowed values are {', '.join(map(str, self.choices))}", headline=f"bad {what}"
            )
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            bounds = f">= {self.minimum:g}" if self.maximum is None else f"between {self.minimum:g} and {self.maximum:g}"
            raise UserError(f"{what} {self.name}={value!r} must be {bounds}", headline=f"bad {what}")
        if self.json_object:
            self._check_json_object(value, what)
        return value

    def _typed(self, raw: Any, what: str) -> Any:
        try:
            if self.type is bool and isinstance(raw, str):
                if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(raw)
                return raw.lower() in ("true", "1", "yes")
            if self.type is int and isinstance(raw, float) and not raw.is_integer():
                raise ValueError(raw)
            if not isinstance(raw, self.type) or isinstance(raw, bool) != (self.type is bool):
                return self.type(raw)
            return raw
        except (TypeError, ValueError, OverflowError):
            raise UserError(
                f"{what} {self.name}={raw!r} is not a{'n' if self.type is int else ''} {self.type.__name__}: {self.help}",
                headline=f"bad {what}",
            ) from None

    def _check_json_object(self, value: str, what: str) -> None:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{what} {self.name}={value!r} is not JSON ({exc}); write a JSON object, e.g. '{{\"blur_passes\": 4}}'",
                headline=f"bad {what}",
            ) from None
        if not isinstance(parsed, dict):
            raise UserError(
                f"{what} {self.name}={value!r} must be a JSON object, e.g. '{{\"blur_passes\": 4}}'", headline=f"bad {what}"
            )


MAX_STREAMS_PER_FLOW = 16  # connections between one data host and one trainer (StreamsPerFlow)

TUNABLES: tuple[Tunable, ...] = (
    Tunable(
        "InputData",
        str,
        "",
        "Raw images, class-per-folder: an s3:// prefix in the cloud, a folder locally "
        "(empty: generated sample data; deployed default: s3://<bucket>/<prefix>/raw/).",
        flag="input",
    ),
    Tunable(
        "Workload",
        str,
        "steps.train.workloads.shapes",
        "Module defining WORKLOAD (decode/augment, model).",
        flag="workload",
        hyperparameter="workload",
    ),
    Tunable(
        "WorkloadOptions",
        str,
        "{}",
        'JSON object of workload options, e.g. {"blur_passes": 4}.',
        json_object=True,
        flag="workload-options",
        hyperparameter="workload_options",
    ),
    # g5.xlarge (1 x A10G, 4 vCPUs) + c5.4xlarge (16 vCPUs): the published Ray-on-SageMaker pair. Not p3: the default
    # PyTorch image (CUDA 13, see pipeline/images.py) has no kernels for its V100s.
    Tunable("DataInstanceType", str, "ml.c5.4xlarge", "Instance type of the data (CPU) group.", flag="data-instance-type"),
    Tunable(
        "DataInstanceCount",
        int,
        1,
        "Hosts in the data group; the train shard count is a multiple of it.",
        minimum=1,
        maximum=64,
        flag="data-hosts",
    ),
    Tunable(
        "DnnInstanceType",
        str,
        "ml.g5.xlarge",
        "Instance type of the dnn (GPU) group, also used by the baseline. "
        "TensorFlow splits each step over every GPU of a host (MirroredStrategy); PyTorch and Ray run one training process "
        "per host, on one GPU, so for them prefer more one-GPU hosts (a multi-GPU type leaves the rest idle: the trainer's "
        "log, metrics.json gpus and the report say so).",
        flag="dnn-instance-type",
    ),
    Tunable("DnnInstanceCount", int, 1, "Hosts in the dnn group.", minimum=1, maximum=64, flag="dnn-hosts"),
    Tunable("DataDistribution", str, SHARDED, "How training shards reach the data hosts.", choices=(SHARDED, REPLICATED)),
    Tunable(
        "InputMode",
        str,
        "File",
        "SageMaker input mode of the S3 training channel (FSx is always File). Not Pipe: "
        "it delivers FIFOs (<channel>_<epoch>), and the step code reads folders of shards.",
        choices=INPUT_MODES,
    ),
    Tunable(
        "DataSource",
        str,
        "S3",
        "Where training reads shards from: fixed when deployed (FSx with hetero:fsx=true, else "
        "S3); a mismatching value fails the execution at CheckParameters.",
        choices=("S3", "FSx"),
    ),
    Tunable(
        VOLUME_PARAMETER,
        int,
        DEFAULT_VOLUME_GB,
        "Storage volume of every job's hosts, in GB: a data host holds its "
        "share of the training shards, a baseline trainer all of them, Shard the raw input and its shards. Instance "
        "types with NVMe instance storage (g4dn, g5, g6, p4d, p5) use that instead.",
        minimum=MIN_VOLUME_GB,
        maximum=MAX_VOLUME_GB,
        flag="volume-gb",
    ),
    # S3 moves 1-128 MB objects best; outside that range either request overhead or per-host imbalance dominates
    Tunable(
        "ShardSizeMB",
        float,
        64.0,
        "Target shard size; 1-128 MB objects transfer best.",
        minimum=1,
        maximum=128,
        flag="shard-size-mb",
    ),
    Tunable(
        "TrainerCpus",
        str,
        "auto",
        "vCPUs of each dnn host kept for the training loop in a heterogeneous run; the "
        "others decode a share of the data beside the data hosts (hybrid decode). auto: what a training step is measured "
        "to keep busy (a few steps on a synthetic batch at the start), plus one for the data plane; all: the dnn hosts "
        "decode nothing; or a number.",
        flag="trainer-cpus",
        hyperparameter="trainer_cpus",
    ),
    Tunable(
        "Retune",
        str,
        "on",
        "PyTorch path: each host adjusts its active decode workers while it trains, one at a time (add while the "
        "consumer waits for data and the last addition helped; remove while it never waits and the last removal did "
        "not hurt), between 1 and the workers it started with; off: the workers it starts with, throughout.",
        choices=("on", "off"),
        flag="retune",
        hyperparameter="retune",
    ),
    Tunable("Epochs", int, 3, "Passes over the training shards.", minimum=1, flag="epochs", hyperparameter="epochs"),
    Tunable(
        "MaxSteps",
        int,
        0,
        "Stop each trainer after this many steps (0: no limit).",
        minimum=0,
        flag="max-steps",
        hyperparameter="max_steps",
    ),
    Tunable(
        "BatchSize", int, 64, "Samples per step per trainer host.", minimum=1, flag="batch-size", hyperparameter="batch_size"
    ),
    Tunable(
        "Precision",
        str,
        "auto",
        "Arithmetic of the training step: fp32; bf16 (autocast to bfloat16); fp16 (autocast to float16 with loss "
        "scaling); auto: bf16 where the GPU supports it, else fp16 on a GPU, fp32 on a CPU. metrics.json and the run "
        "summary say which one was used.",
        choices=PRECISIONS,
        flag="precision",
        hyperparameter="precision",
    ),
    Tunable(
        "Compile",
        str,
        COMPILES[0],
        "Compile the training step: on: torch.compile of the model's forward (PyTorch, Ray), XLA (jit_compile) for "
        "the forward, loss and gradients (TensorFlow); off: eager. 1.45x for ResNet-50 bf16 on one H200, after ~35 s "
        "of compilation at each start (docs/frameworks.md#compile): on for long GPU runs. metrics.json and the run "
        "summary say which.",
        choices=COMPILES,
        flag="compile",
        hyperparameter="compile",
    ),
    # One TCP flow between two EC2 instances carries at most 5 Gbps outside a cluster placement group (10 inside; EC2
    # User Guide, "Amazon EC2 instance network bandwidth"), while one H100 at published ResNet-50 speed takes ~8.3 Gbps
    # of uint8 224 px images: a data host may need several connections to each trainer.
    Tunable(
        "StreamsPerFlow",
        int,
        0,
        "TCP connections between each data host and each trainer (PyTorch); batches are spread over them. 0 (auto): "
        "ceil(needed Gbps / 5), 5 Gbps being EC2's per-flow limit, from the bytes per sample and the trainer's target "
        "rate when known, else 1 (docs/dataplane.md#streams-per-flow). metrics.json says how many each data host used.",
        minimum=0,
        maximum=MAX_STREAMS_PER_FLOW,
        flag="streams-per-flow",
        hyperparameter="streams_per_flow",
    ),
    Tunable(
        "MaxCorruptShare",
        float,
        0.01,
        "Fail training when more than this share of an epoch's samples does not "
        "decode, naming the count and examples (0: none may; 1: never fail on corrupt data).",
        minimum=0,
        maximum=1,
        flag="max-corrupt-share",
        hyperparameter="max_corrupt_share",
    ),
    Tunable(
        "PriceOverrides",
        str,
        "",
        "A JSON price file replacing or extending the bundled on-demand prices (schema: "
        "steps/evaluate/prices.py; `hetero prices refresh` writes one): an s3:// URI in the cloud (hetero start --prices FILE "
        "uploads it to s3://<ArtifactBucket>/<prefix>/price-overrides/<sha256>.json), a file locally (hetero run --prices FILE); "
        "Evaluate reads it as a processing input; empty: none (the deployed default is a CDK asset holding {}, which "
        "overrides nothing).",
    ),
    Tunable(
        "RunBaseline",
        bool,
        True,
        "Also train homogeneously (dnn group alone) for the price-performance comparison (hetero run --no-baseline: false).",
    ),
    Tunable(
        "ImprovementThreshold",
        float,
        -1.0,
        "Fail the execution when price-performance improvement is below this (-1: never; above -1 needs RunBaseline=true).",
        minimum=-1,
        maximum=1,
        flag="threshold",
    ),
    Tunable(
        "AutoApproveMargin",
        float,
        -1.0,
        "Register the heterogeneous run's model as Approved when its accuracy is at most this below the latest approved "
        "package's and ImprovementThreshold is met (-1: never; every package waits for manual approval).",
        minimum=-1,
        maximum=1,
        flag="approve-margin",
    ),
)
TUNABLES_BY_NAME = {t.name: t for t in TUNABLES}
TUNABLES_BY_HYPERPARAMETER = {t.hyperparameter: t for t in TUNABLES if t.hyperparameter}

"""The one table of training frameworks: what a host of each runs, what Shard writes for it, which image family runs it,
and what the compiler and the evaluation must know about it. The launcher, the pipeline graph, the images and the
evaluation read this table; nothing else branches on a framework's name. A new framework is a row here and a package
under ``steps/train/frameworks/``.

Framework-free and import-free (the entry points are ``module:function`` names), so the CLI, the compiler and every
host read it without importing torch, TensorFlow or Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from steps.common.errors import UserError


@dataclass(frozen=True)
class Framework:
    name: str
    summary: str
    shard_format: str  # what its input pipeline reads (steps/formats/registry.py)
    trainer: str  # "module:function(cfg, cluster, workload)" a trainer host runs
    data_host: str | None  # the same for a data host; None: every host runs `trainer` (Ray: one cluster of every host)
    max_trainer_hosts: int | None = None  # None: any number
    # its servers (tf.data.service, Ray) listen on every interface: the bind guard re-executes the host first
    # (steps/train/dataplane/bind_guard.py), and without it this is what the host warns
    unguarded_listeners: str = ""
    quiet_env: dict[str, str] = field(default_factory=dict)  # defaults that keep the framework's own INFO lines out of the log
    aws_image: bool = True  # AWS publishes a training image with it; False: the user builds one (images/<name>/)
    processing_images_of: str = ""  # whose CPU image runs Shard and Evaluate ("": its own)
    every_host_reads_every_shard: bool = False  # Ray Data's read tasks run on any node and open any shard
    measures_wire_bytes: bool = True  # its data hosts count bytes per sample (Ray moves blocks through its object store)
    # the handler its model package is served by (steps/serve/<name>.py: every host writes code/ for it into its model
    # folder, steps/train/core/model_package.py); "": none yet
    serves_as: str = ""
    # "module:function(model_dir, workload)" every host runs after code/ is written: the model's serving form where the
    # host holds only what its trainer handed over (plain files), so whichever host's folder SageMaker packs serves
    serving_model: str = ""

    @property
    def image_family(self) -> str:
        """The framework whose images run this one's processing steps (and its training base image)."""
        return self.processing_images_of or self.name


_TABLE = (
    Framework(
        "pytorch",
        "the project's own data plane: data hosts stream decoded batches to DDP trainers",
        shard_format="webdataset",
        trainer="steps.train.frameworks.pytorch.trainer:run_trainer",
        data_host="steps.train.frameworks.pytorch.data_host:run_data_service",
        serves_as="pytorch",
    ),
    Framework(
        "tensorflow",
        "tf.data.service: a dispatcher on the trainer host, a worker on every data host",
        shard_format="tfrecord",
        trainer="steps.train.frameworks.tensorflow.trainer:run_trainer",
        data_host="steps.train.frameworks.tensorflow.data_host:run_data_service",
        max_trainer_hosts=1,  # one trainer host, every GPU of it (MirroredStrategy)
        unguarded_listeners="tf.data.service listens on every interface without authentication",
        quiet_env={"TF_CPP_MIN_LOG_LEVEL": "1"},  # C++ INFO lines (CPU features, oneDNN); warnings still show
        serves_as="tensorflow",  # TF Serving on the SavedModel in 1/ (steps/train/frameworks/tensorflow/serving.py)
        serving_model="steps.train.frameworks.tensorflow.serving:ensure_serving_model",
    ),
    Framework(
        "ray",
        "Ray Data decodes on every CPU of the cluster, Ray Train's TorchTrainer trains on the GPUs",
        shard_format="webdataset",
        trainer="steps.train.frameworks.ray.trainer:run_trainer",
        data_host=None,
        unguarded_listeners="Ray listens on every interface (its token still applies)",
        aws_image=False,
        processing_images_of="pytorch",
        every_host_reads_every_shard=True,
        measures_wire_bytes=False,
        serves_as="pytorch",  # Ray Train trains the workload's PyTorch model: it serves as PyTorch's does
    ),
)
TABLE = {f.name: f for f in _TABLE}
FRAMEWORKS = tuple(TABLE)


def framework(name: str) -> Framework:
    try:
        return TABLE[name]
    except KeyError:
        raise UserError(
            f"framework {name!r} is not supported; use one of {', '.join(FRAMEWORKS)}", headline="bad framework"
        ) from None

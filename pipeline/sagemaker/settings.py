"""What a compiled pipeline is bound to: names, role, bucket, code, images, FSx (``DeploySettings``)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.graph import MODEL_PACKAGE_GROUP_NAME, default_model_package_group
from pipeline.sagemaker.images import REGION
from steps.common.errors import UserError
from steps.contract import CODE_CHANNEL, FRAMEWORKS
from steps.evaluate.registry import SCHEME as REGISTRY_SCHEME

MAX_RUNTIME_S = 6 * 3600  # a stuck job bills every host of the cluster until this cap
# Training jobs start the entry point through this, not through the toolkit's script-mode runner: it fetches the code
# and installs it as script mode would (the toolkit's own download_and_extract, skipped when /opt/ml/code already holds
# it, and entry_point.install, which pip-installs the code's requirements.txt), then becomes the entry point (exec: the
# same process, the container's first), so SIGTERM from StopTrainingJob or a spot interruption reaches the trainer.
# Script mode runs the entry point as a child that never gets the signal (aws/sagemaker-training-toolkit#125), and the
# trainer could not save its checkpoint in the notice period. One ContainerEntrypoint item: at most 256 characters.
TRAINING_BOOTSTRAP = (
    "import os,sys;from sagemaker_training import environment as e,files as f,entry_point as p;v=e.Environment();"
    "c=e.code_dir;u=v.user_entry_point;f.download_and_extract(v.module_dir,c);os.chdir(c);p.install(u,c);"
    "x=sys.executable;os.execv(x,[x,u])"
)
TRAINING_ENTRYPOINT = ["python3", "-c", TRAINING_BOOTSTRAP]
# Under network isolation nothing in the container reaches S3: the code tar.gz arrives as the `code` channel and
# sagemaker_submit_directory names the file there (the toolkit's download_and_extract unpacks a local tar.gz path)
CODE_CHANNEL_DIR = f"/opt/ml/input/data/{CODE_CHANNEL}"
MAX_WAIT_S = 2 * MAX_RUNTIME_S  # managed spot: running plus waiting for capacity, interruptions included
TRAINING_RETRY_ATTEMPTS = 3  # a training step started again on capacity and SageMaker-internal errors
PROCESSING_ROOT = "/opt/ml/processing"
CODE_DIR = f"{PROCESSING_ROOT}/input/code"
PROPERTY_FILE = "PricePerformance"
MODEL_METRICS_PROPERTY_FILE = "ModelMetrics"  # Evaluate's model_metrics.json, which the register step reads


@dataclass(frozen=True)
class FsxSettings:
    """An FSx for Lustre file system whose ``directory_path`` mirrors ``s3://<bucket>/<prefix>/``
    (a data repository association), so an execution's shards appear under
    ``<directory_path>/<execution id>/Shard/train``. Jobs that mount it run in the VPC."""

    file_system_id: str
    directory_path: str  # /<mount name>/<association's file system path>
    subnets: tuple[str, ...]
    security_group_ids: tuple[str, ...]


@dataclass(frozen=True)
class DeploySettings:
    pipeline_name: str
    region: str
    role_arn: str  # the jobs' role: every step's RoleArn (the pipeline's own role is given where the pipeline is created)
    bucket: str  # artifact bucket name
    code_uri: str  # s3 URI of the code tar.gz (steps/ at its root)
    prefix: str = "hetero"  # key prefix for everything the pipeline writes
    framework: str = "pytorch"  # one of FRAMEWORKS: picks the graph and the default images
    training_image: str | None = None  # default: the AWS GPU training image of the framework in the region
    processing_image: str | None = None  # default: the CPU variant of the same image
    # what a registered model package names to serve; default: the AWS inference image (CPU variant) of the framework's
    # serving form in the region (pipeline/sagemaker/images.py SERVING_TAGS)
    serving_image: str | None = None
    fsx: FsxSettings | None = None
    # training jobs only (Shard and Evaluate call S3 themselves): SageMaker encrypts traffic between the
    # cluster's hosts (slower steps, see docs/deploy.md), and gives the containers no network beyond the cluster
    # (code, shards and the job secret then arrive as input channels: code_uri's object name must be concrete)
    inter_container_encryption: bool = False
    network_isolation: bool = False
    # training jobs on managed spot capacity (up to 90% cheaper, may be interrupted: they resume from their checkpoint)
    spot: bool = False
    # the PriceOverrides parameter's default: an S3 object holding {} (no overrides; the CDK app deploys one as an asset).
    # None: s3://<bucket>/<prefix>/price-overrides/none.json, which whoever deploys the definition otherwise uploads
    price_overrides_uri: str | None = None
    # the model package group the register step files the heterogeneous run's model in (None: `model_package_group`)
    model_package_group: str | None = None
    # the registry Evaluate reads the latest approved package from (None: sagemaker://<the group>; the local runner: a folder)
    model_registry: str | None = None


PRICE_OVERRIDES_FOLDER = "price-overrides"  # under s3://<bucket>/<prefix>/: price files `hetero start --prices FILE` uploads


def default_price_overrides_uri(settings: DeploySettings) -> str:
    return f"s3://{settings.bucket}/{settings.prefix}/{PRICE_OVERRIDES_FOLDER}/none.json"


def model_package_group(settings: DeploySettings) -> str:
    return settings.model_package_group or default_model_package_group(settings.pipeline_name)


def model_registry(settings: DeploySettings) -> str:
    return settings.model_registry or f"{REGISTRY_SCHEME}://{model_package_group(settings)}"


def check(settings: DeploySettings) -> None:
    for name in ("pipeline_name", "region", "role_arn", "bucket", "code_uri"):
        if not getattr(settings, name):
            raise UserError(f"DeploySettings.{name} is empty; pass the {name.replace('_', ' ')}", headline="bad deploy settings")
    if settings.framework not in FRAMEWORKS:
        raise UserError(
            f"DeploySettings.framework {settings.framework!r} is not supported; use one of {', '.join(FRAMEWORKS)}",
            headline="bad deploy settings",
        )
    if settings.prefix.strip("/") != settings.prefix or not settings.prefix:
        raise UserError(
            f"DeploySettings.prefix {settings.prefix!r} must be a key prefix without leading or trailing '/'",
            headline="bad deploy settings",
        )
    if not REGION.fullmatch(settings.region) and not (settings.training_image and settings.processing_image):
        raise UserError(
            f"region {settings.region!r} is not a region name (a CloudFormation token?), so the default images "
            "cannot be looked up: pass training_image and processing_image, or a concrete region",
            headline="bad deploy settings",
        )
    if not REGION.fullmatch(settings.region) and not settings.serving_image:  # a package must name an image that serves
        raise UserError(
            f"region {settings.region!r} is not a region name (a CloudFormation token?), so the default serving image "
            "cannot be looked up: pass serving_image too (npx cdk deploy -c hetero:servingImage=<uri>), or a concrete "
            "region",
            headline="bad deploy settings",
        )
    if not MODEL_PACKAGE_GROUP_NAME.fullmatch(model_package_group(settings)):
        raise UserError(
            f"model package group {model_package_group(settings)!r}: use 1-63 letters, digits and hyphens, starting and "
            "ending with a letter or digit",
            headline="bad deploy settings",
        )
    if settings.network_isolation:
        code_file(settings.code_uri)
    if settings.fsx and not (settings.fsx.subnets and settings.fsx.security_group_ids):
        raise UserError(
            "FsxSettings needs subnets and security_group_ids: jobs that mount FSx run in its VPC", headline="bad deploy settings"
        )


def code_file(code_uri: str) -> str:
    """The object name of the code tar.gz: its file in the ``code`` channel of an isolated training job."""
    name = code_uri.rsplit("/", 1)[-1]
    if not code_uri.startswith("s3://") or code_uri.count("/") < 3 or not name or "${Token[" in name:
        raise UserError(
            f"DeploySettings.code_uri {code_uri!r}: with network isolation the code reaches the training jobs as "
            f"the {CODE_CHANNEL!r} channel and sagemaker_submit_directory names its file, so the URI must be "
            "s3://<bucket>/<key> with the key's last part known when compiling (CDK: "
            'f"s3://{asset.s3_bucket_name}/{asset.s3_object_key}", not asset.s3_object_url)',
            headline="bad deploy settings",
        )
    return name

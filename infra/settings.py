"""Deployment settings: every `cdk.json` context key, declared once with its default and help.

Parsed at the edge (`StackSettings.from_context`) into a frozen dataclass. Context values
given on the command line (`cdk deploy -c hetero:fsx=true`) arrive as strings and are
converted here; unknown `hetero:` keys and ill-typed values are errors that name the key.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from pipeline.graph import MODEL_PACKAGE_GROUP_NAME, PIPELINE_NAME, default_model_package_group, resolve_parameters
from pipeline.sagemaker.images import ecr_repository, require_image_region
from pipeline.sagemaker.job_access import INPUT_PREFIX_SETTING
from steps.common.errors import UserError
from steps.frameworks import FRAMEWORKS, framework

PREFIX = "hetero:"
# one address: no spaces, one @, a dot in the domain (SNS confirms the address itself by mail)
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")


def _key(default, help: str):
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class StackSettings:
    stack_name: str = _key("HeteroTraining", "CloudFormation stack name.")
    pipeline_name: str = _key(PIPELINE_NAME, "SageMaker pipeline name.")
    region: str = _key("us-east-1", "Region to deploy to (the account comes from your AWS credentials).")
    prefix: str = _key("hetero", "Key prefix in the artifact bucket for pipeline outputs and checkpoints.")
    input_prefix: str = _key(
        "hetero/raw/",
        "Key prefix in the artifact bucket where raw training data lands "
        "(the pipeline's InputData default is s3://<bucket>/<prefix>/raw/).",
    )
    schedule: str = _key("rate(7 days)", "EventBridge Scheduler expression for retraining ('' for no schedule).")
    schedule_timezone: str = _key("UTC", "Time zone of a cron() schedule.")
    retrain_parameters: dict = _key(
        {"RunBaseline": False}, "Pipeline parameter overrides for scheduled and triggered executions."
    )
    retrain_adopts_plan: bool = _key(
        False,
        "Scheduled retraining runs with the data group (DataInstanceType, DataInstanceCount) "
        "the latest execution's plan.json recommends, when CreateTrainingJob would accept "
        "it; a function started by the schedule reads it (docs/planner.md).",
    )
    new_data_trigger: bool = _key(True, "Start the pipeline when the new-data marker object lands under inputPrefix.")
    new_data_marker: str = _key(
        "_READY",
        "Object name (after inputPrefix) that starts a triggered execution; "
        "'' starts one per object created (one execution per uploaded file!).",
    )
    instance_defaults: dict = _key(
        {},
        "Instance types and counts for scheduled and triggered executions (pipeline parameters, "
        'e.g. {"DnnInstanceType": "ml.g5.2xlarge"}; {}: the pipeline\'s declared defaults).',
    )
    fsx: bool = _key(
        False,
        "Create a VPC and an FSx for Lustre file system (PERSISTENT_2) linked to s3://<bucket>/<prefix>/; "
        "training then reads shards from it (DataSource=FSx).",
    )
    fsx_storage_gib: int = _key(1200, "FSx for Lustre capacity: 1200, 2400 or a multiple of 2400 GiB.")
    fsx_throughput_per_tib: int = _key(125, "FSx PERSISTENT_2 throughput per TiB (125, 250, 500 or 1000 MB/s).")
    inter_container_encryption: bool = _key(
        False,
        "Encrypt traffic between the hosts of each training job "
        "(EnableInterContainerTrafficEncryption): batches cross the network encrypted, "
        "at a cost in step time (docs/deploy.md: Isolation and encryption).",
    )
    network_isolation: bool = _key(
        False,
        "Training containers get no network beyond their own cluster "
        "(EnableNetworkIsolation): a workload cannot send data out (docs/deploy.md: Isolation and encryption).",
    )
    spot: bool = _key(
        False,
        "Training jobs on managed spot capacity (EnableManagedSpotTraining, MaxWaitTimeInSeconds twice the "
        "runtime cap): cheaper, may be interrupted; an interrupted job resumes from its checkpoint "
        "(docs/checkpoints.md).",
    )
    framework: str = _key(
        "pytorch",
        f"Training framework, one of {', '.join(FRAMEWORKS)}: picks the shard format and "
        "the default images (AWS Deep Learning Containers of that framework).",
    )
    code_dirs: list = _key(
        [],
        "Folders whose contents ship with the step code, at its root (like the SageMaker SDK's "
        "source_dir): your workload package, and a requirements.txt the training hosts pip-install "
        "before the entry point (README: Using your own data and model).",
    )
    training_image: str = _key(
        "",
        "Training image, an ECR image URI ('' for the framework's AWS DLC, GPU variant, in the "
        "stack's region); the role may pull from its repository only.",
    )
    processing_image: str = _key(
        "", "Processing image, an ECR image URI ('' for the CPU variant of that DLC); the role may pull from its repository only."
    )
    serving_image: str = _key(
        "",
        "Serving image the registered model packages name, an ECR image URI ('' for the framework's AWS inference DLC, "
        "CPU variant, in the stack's region; docs/models.md: Serving). The jobs never pull it: an endpoint's role does.",
    )
    notify_email: str = _key(
        "",
        "E-mail address subscribed to the stack's notification topic (failed or stopped executions, registered "
        "models); '' for none. AWS sends a confirmation mail first (docs/deploy.md: Notifications).",
    )
    model_package_group: str = _key(
        "",
        "Model package group the stack creates and each execution registers its heterogeneous model in "
        "('' for <pipelineName>-models; docs/models.md).",
    )

    @staticmethod
    def context_key(name: str) -> str:
        head, *rest = name.split("_")
        return PREFIX + head + "".join(part.title() for part in rest).replace("Gib", "GiB").replace("Tib", "TiB")

    @classmethod
    def help(cls) -> dict[str, tuple[Any, str]]:
        return {cls.context_key(f.name): (getattr(cls(), f.name), f.metadata["help"]) for f in dataclasses.fields(cls)}

    @classmethod
    def from_context(cls, context: dict[str, Any]) -> StackSettings:
        """`context`: every context key (others than `hetero:` ones are ignored)."""
        fields = {cls.context_key(f.name): f for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in context if k.startswith(PREFIX) and k not in fields)
        if unknown:
            raise UserError(f"unknown context key {unknown[0]!r}; known: {', '.join(fields)}", headline="bad cdk.json context")
        defaults = cls()
        values = {
            f.name: _convert(key, context[key], type(getattr(defaults, f.name)))
            for key, f in fields.items()
            if key in context and context[key] is not None
        }
        settings = cls(**values)
        settings.scheduled_parameters(bucket="example")  # names and types checked now, not at deploy time
        if settings.fsx_storage_gib not in (1200,) and settings.fsx_storage_gib % 2400:
            raise UserError(
                f"{cls.context_key('fsx_storage_gib')}={settings.fsx_storage_gib}: use 1200, 2400 or a multiple of 2400",
                headline="bad cdk.json context",
            )
        if not settings.prefix or settings.prefix.strip("/") != settings.prefix:
            raise UserError(
                f"{cls.context_key('prefix')}={settings.prefix!r}: a key prefix without leading or trailing '/'",
                headline="bad cdk.json context",
            )
        if settings.input_prefix.startswith("/") or not settings.input_prefix.endswith("/"):
            raise UserError(
                f"{cls.context_key('input_prefix')}={settings.input_prefix!r}: a key prefix ending in '/', without a leading '/'",
                headline="bad cdk.json context",
            )
        if f"{settings.prefix}/".startswith(settings.input_prefix):
            raise UserError(
                f"{cls.context_key('input_prefix')}={settings.input_prefix!r} holds the pipeline's artifacts "
                f"({cls.context_key('prefix')}={settings.prefix!r}), which its jobs write, while they may only read "
                f"the inputs: use a prefix inside or beside it, e.g. {settings.prefix + '/raw/'!r}",
                headline="bad cdk.json context",
            )
        if settings.framework not in FRAMEWORKS:
            raise UserError(
                f"{cls.context_key('framework')}={settings.framework!r}: use one of {', '.join(FRAMEWORKS)}",
                headline="bad cdk.json context",
            )
        for name in ("training_image", "processing_image", "serving_image"):
            if getattr(settings, name):
                try:
                    ecr_repository(getattr(settings, name))  # the role's ECR pull permission is derived from it
                except UserError as exc:
                    raise UserError(f"{cls.context_key(name)}: {exc.message}", headline="bad cdk.json context") from exc
        settings._check_region()
        if settings.notify_email and not EMAIL.fullmatch(settings.notify_email):
            raise UserError(
                f"{cls.context_key('notify_email')}={settings.notify_email!r}: an e-mail address (name@example.com), "
                "or '' for no subscription",
                headline="bad cdk.json context",
            )
        if not re.fullmatch(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,255}", settings.pipeline_name):
            raise UserError(
                f"{cls.context_key('pipeline_name')}={settings.pipeline_name!r}: letters, digits and hyphens only",
                headline="bad cdk.json context",
            )
        if settings.model_package_group and not MODEL_PACKAGE_GROUP_NAME.fullmatch(settings.model_package_group):
            raise UserError(
                f"{cls.context_key('model_package_group')}={settings.model_package_group!r}: 1-63 letters, digits and "
                "hyphens, starting and ending with a letter or digit",
                headline="bad cdk.json context",
            )
        return settings

    @property
    def model_package_group_name(self) -> str:
        return self.model_package_group or default_model_package_group(self.pipeline_name)

    def _check_region(self) -> None:
        """A default image must exist in the region (a Ray stack's processing image is the PyTorch one)."""
        if self.training_image and self.processing_image:
            return
        try:
            require_image_region(self.region, framework(self.framework).image_family)
        except UserError as exc:
            raise UserError(
                f"{self.context_key('region')}: {exc.message} ({self.context_key('training_image')}, "
                f"{self.context_key('processing_image')})",
                headline="bad cdk.json context",
            ) from None

    def scheduled_parameters(self, *, bucket: str) -> dict[str, str]:
        """Parameter overrides (as strings) for scheduled and triggered executions."""
        from pipeline.sagemaker.executions import pipeline_parameters

        for key, layer in (
            (self.context_key("retrain_parameters"), self.retrain_parameters),
            (self.context_key("instance_defaults"), self.instance_defaults),
        ):
            if (
                "InputData" in layer
            ):  # the jobs may read the input prefix of the stack's bucket only (pipeline.sagemaker.job_access)
                raise UserError(
                    f"{key} sets InputData={layer['InputData']!r}: scheduled and triggered runs read "
                    f"s3://<ArtifactBucket>/{self.input_prefix}; set {INPUT_PREFIX_SETTING} instead",
                    headline="bad cdk.json context",
                )
        layer = {"InputData": f"s3://{bucket}/{self.input_prefix}", **self.instance_defaults, **self.retrain_parameters}
        resolved = resolve_parameters(layer)  # rejects unknown names and ill-typed values, naming them
        sent = {
            p["Name"] for p in pipeline_parameters({name: resolved[name] for name in layer})
        }  # S3 URIs where the cloud needs them
        return {name: _as_parameter_string(resolved[name]) for name in layer if name in sent}


def _as_parameter_string(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _convert(key: str, value: Any, kind: type) -> Any:
    if kind is list and isinstance(value, list):
        if all(isinstance(item, str) and item for item in value):
            return value
        raise UserError(f"context {key}={value!r} is not a list of folder paths (strings)", headline="bad cdk.json context")
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    if isinstance(value, str):
        try:
            if kind is bool and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if kind is int:
                return int(value)
            if kind in (dict, list):
                parsed = json.loads(value)
                if isinstance(parsed, kind):
                    return _convert(key, parsed, kind)
        except ValueError:
            pass
    raise UserError(f"context {key}={value!r} is not a {kind.__name__}", headline="bad cdk.json context")

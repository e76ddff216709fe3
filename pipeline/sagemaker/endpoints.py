"""``hetero models deploy``: an approved model package behind a SageMaker endpoint, real-time or serverless.

Three requests, each checked against botocore's model of SageMaker before any is sent: CreateModel (the package by its
ARN: SageMaker takes the image and the artefact from it; on a GPU type, from the package's GPU specification, by its
name), CreateEndpointConfig (one variant, ``AllTraffic``: an
instance type the package lists, one instance, or serverless memory) and CreateEndpoint, or UpdateEndpoint where the
endpoint exists (its traffic moves to the new configuration once it is in service). A package that is not Approved is
refused. A request SageMaker refuses is one line with its reason, and the model and configuration this deploy created
are deleted again (what cannot be is named, with the command that deletes it). What the caller and the endpoint's role
need: docs/models.md, Deploy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pipeline.sagemaker.validation import model_problems
from steps.common.errors import UserError

APPROVED = "Approved"
VARIANT = "AllTraffic"
SERVERLESS_STEP_MB = 1024  # serverless memory comes in 1 GB steps, 1024-6144 MB (botocore: ServerlessMemorySizeInMB)
SERVERLESS_CONCURRENCY = 5  # concurrent invocations a serverless endpoint takes before throttling (at most 200)
NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")  # an endpoint's (and its configuration's) name


@dataclass(frozen=True)
class Deployment:
    """What to deploy: a package (its DescribeModelPackage response), where, and on what."""

    package: dict
    endpoint: str
    role_arn: str
    instance_type: str | None = None  # a real-time endpoint on one instance of this type
    serverless_mb: int | None = None  # a serverless endpoint with this much memory
    at: datetime = field(default_factory=lambda: datetime.now(UTC))  # names the model and configuration: one per deploy

    def requests(self) -> dict[str, dict]:
        """Operation -> request, each held against botocore's model; a bad choice is a `UserError` naming the fix."""
        self._check()
        suffix = f"-v{self.package.get('ModelPackageVersion', 'x')}-{self.at:%Y%m%d%H%M%S}"
        name = f"{self.endpoint[: 63 - len(suffix)]}{suffix}"
        variant: dict = {"VariantName": VARIANT, "ModelName": name}
        if self.serverless_mb is not None:
            variant["ServerlessConfig"] = {"MemorySizeInMB": self.serverless_mb, "MaxConcurrency": SERVERLESS_CONCURRENCY}
        else:
            variant.update(InstanceType=self.instance_type, InitialInstanceCount=1)
        container = {"ModelPackageName": self.package["ModelPackageArn"]}
        if (specification := self.specification()) is not None:
            container["InferenceSpecificationName"] = specification
        requests: dict[str, dict] = {
            "CreateModel": {"ModelName": name, "ExecutionRoleArn": self.role_arn, "PrimaryContainer": container},
            "CreateEndpointConfig": {"EndpointConfigName": name, "ProductionVariants": [variant]},
            "CreateEndpoint": {"EndpointName": self.endpoint, "EndpointConfigName": name},
        }
        for operation, request in requests.items():
            problems = model_problems(operation, request)
            if problems:
                raise UserError(f"{operation} would be rejected: {problems[0].text}", headline="bad deploy request")
        return requests

    def _check(self) -> None:
        version, status = self.package.get("ModelPackageVersion"), self.package.get("ModelApprovalStatus")
        if status != APPROVED:
            raise UserError(
                f"model package {version} is {status}, not Approved: approve it first (hetero models approve {version})",
                headline="not approved",
            )
        if not NAME.fullmatch(self.endpoint):
            raise UserError(
                f"endpoint name {self.endpoint!r}: 1-63 letters, digits and hyphens, starting and ending with a letter or digit",
                headline="bad arguments",
            )
        if (self.instance_type is None) == (self.serverless_mb is None):
            raise UserError("deploy needs one of --instance-type T or --serverless MEMORY_MB", headline="bad arguments")
        if self.serverless_mb is not None and (
            self.serverless_mb % SERVERLESS_STEP_MB or not SERVERLESS_STEP_MB <= self.serverless_mb <= 6 * SERVERLESS_STEP_MB
        ):
            raise UserError(
                f"--serverless {self.serverless_mb}: serverless memory is 1024, 2048, 3072, 4096, 5120 or 6144 MB",
                headline="bad arguments",
            )

    def specification(self) -> str | None:
        """The package's inference specification that serves on ``instance_type``: None for the primary (a serverless
        endpoint's too: it has no GPU), else the name of the additional one that lists the type (the GPU image's:
        `pipeline.sagemaker.serving.gpu_specification`). A type no specification lists is a `UserError` naming them."""
        primary = self.package.get("InferenceSpecification", {}).get("SupportedRealtimeInferenceInstanceTypes") or []
        if self.instance_type is None or not primary or self.instance_type in primary:
            return None
        others = self.package.get("AdditionalInferenceSpecifications") or []
        for spec in others:
            if self.instance_type in (spec.get("SupportedRealtimeInferenceInstanceTypes") or []):
                return spec["Name"]
        listed = [*primary, *(t for spec in others for t in spec.get("SupportedRealtimeInferenceInstanceTypes") or [])]
        raise UserError(
            f"--instance-type {self.instance_type}: model package {self.package.get('ModelPackageVersion')} is registered "
            f"for {', '.join(listed[:8])}{', ...' if len(listed) > 8 else ''} ({len(listed)} types)",
            headline="bad arguments",
        )


def deploy(deployment: Deployment, client) -> str:  # noqa: ANN001 - a boto3 SageMaker client
    """Send the requests (UpdateEndpoint where the endpoint exists); returns the one line saying what happened. A request
    SageMaker refuses is one line (`UserError`), and what this deploy created before it is deleted again."""
    from botocore.exceptions import BotoCoreError, ClientError

    requests = deployment.requests()
    endpoint = requests["CreateEndpoint"]
    model, config = requests["CreateModel"]["ModelName"], endpoint["EndpointConfigName"]
    with _refused("CreateModel"):
        client.create_model(**requests["CreateModel"])
    created = [_Created("model", model, client.delete_model, {"ModelName": model})]
    try:
        with _refused("CreateEndpointConfig"):
            client.create_endpoint_config(**requests["CreateEndpointConfig"])
        created.insert(0, _Created("endpoint config", config, client.delete_endpoint_config, {"EndpointConfigName": config}))
        try:
            with _denied("DescribeEndpoint"):
                client.describe_endpoint(EndpointName=endpoint["EndpointName"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ValidationException":  # not "Could not find endpoint"
                raise _refusal("DescribeEndpoint", exc) from None
            with _refused("CreateEndpoint"):
                client.create_endpoint(**endpoint)
            how = "creating"
        except BotoCoreError as exc:  # no answer at all (the endpoint URL unreachable, credentials gone)
            raise _refusal("DescribeEndpoint", exc) from None
        else:
            with _refused("UpdateEndpoint"):
                client.update_endpoint(**endpoint)
            how = "updating to it"
    except UserError as exc:
        raise UserError(f"{exc.message}; {_roll_back(created)}", headline=exc.headline) from None
    variant = requests["CreateEndpointConfig"]["ProductionVariants"][0]
    on = (
        f"serverless, {variant['ServerlessConfig']['MemorySizeInMB']} MB"
        if "ServerlessConfig" in variant
        else f"1 x {variant['InstanceType']}"
    )
    return (
        f"endpoint {endpoint['EndpointName']}: {how} (model and endpoint config {config}, {on}); "
        f"aws sagemaker wait endpoint-in-service --endpoint-name {endpoint['EndpointName']}"
    )


@dataclass(frozen=True)
class _Created:
    """A resource this deploy created, and the request that deletes it."""

    kind: str  # "model", "endpoint config"
    name: str
    delete: Callable[..., object]
    request: dict

    @property
    def command(self) -> str:
        flag = self.kind.replace(" ", "-")
        return f"aws sagemaker delete-{flag} --{flag}-name {self.name}"


def _roll_back(created: list[_Created]) -> str:
    """Delete what this deploy created, newest first; says what went, and what is left with the command that deletes it."""
    from botocore.exceptions import BotoCoreError, ClientError

    removed, left = [], []
    for resource in created:
        try:
            resource.delete(**resource.request)
            removed.append(f"{resource.kind} {resource.name}")
        except (ClientError, BotoCoreError) as exc:
            left.append(f"{resource.kind} {resource.name} ({exc}; `{resource.command}`)")
    said = [f"removed {' and '.join(removed)} again"] if removed else []
    return ", ".join(said + ([f"left behind: {', '.join(left)}"] if left else []))


def _refusal(operation: str, exc: Exception) -> UserError:
    from botocore.exceptions import ClientError

    error = exc.response.get("Error", {}) if isinstance(exc, ClientError) else {}
    why = f"{error.get('Code')}: {error.get('Message', '')}" if error else str(exc)
    return UserError(f"SageMaker refused {operation} ({why})", headline="deploy refused")


@contextmanager
def _refused(operation: str) -> Iterator[None]:
    """``operation`` as one line when SageMaker refuses it: access (what the caller needs), or its own reason."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        with _denied(operation):
            yield
    except (ClientError, BotoCoreError) as exc:
        raise _refusal(operation, exc) from None


@contextmanager
def _denied(operation: str) -> Iterator[None]:
    """An AccessDenied of ``operation`` as one line naming what the caller needs."""
    from botocore.exceptions import ClientError

    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") in ("AccessDeniedException", "AccessDenied"):
            raise UserError(
                f"{operation} was denied ({error.get('Message', '')}): deploying needs sagemaker:CreateModel, "
                "CreateEndpointConfig, DescribeEndpoint, CreateEndpoint and UpdateEndpoint (DeleteModel and "
                "DeleteEndpointConfig to undo a refused deploy), and iam:PassRole on the endpoint's role (docs/models.md: Deploy)",
                headline="access denied",
            ) from None
        raise

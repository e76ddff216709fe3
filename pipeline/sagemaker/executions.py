"""Start and watch executions of the deployed SageMaker pipeline (boto3).

    hetero start --param Epochs=3 --param DnnInstanceCount=2
    hetero executions --results s3://my-bucket/results     # status, and the summary once finished
    hetero executions --results s3://my-bucket/results --details <execution-id>

Overrides are checked against `steps.contract.TUNABLES` before any AWS call:
an unknown name or a value of the wrong type, outside its bounds or not among
its choices fails here, not minutes later in a SageMaker step. Parameters
left out take the defaults compiled into the deployed definition. Before the
execution starts, every job request of the deployed definition (DescribePipeline)
is checked with these parameters as the service will check it when the step is
reached (`pipeline.sagemaker.validation.validate_execution`: lengths and sizes included);
an S3 URI the jobs' role may not read (``pipeline.sagemaker.job_access``, from the pipeline's
description) and an AWS image in a region where AWS does not publish it are refused.

PriceOverrides names a JSON price file: an s3:// URI (read and checked here), or a
local file, which is checked and uploaded beside the pipeline's artifacts
(``s3://<bucket>/<prefix>/price-overrides/<sha256 of the content>.json``, where the
pipeline's role may read) and passed as that URI.

Clients are built on first use from the standard AWS environment (credentials,
``AWS_REGION``, ``AWS_ENDPOINT_URL`` for a local server such as moto).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from pipeline.graph import PIPELINE_NAME, parse_overrides
from pipeline.sagemaker.images import dlc_framework, ecr_repository, require_image_region
from pipeline.sagemaker.job_access import JobAccess
from pipeline.sagemaker.validation import validate_execution
from steps.common.errors import UserError
from steps.contract import PRICE_PERFORMANCE_FILE, RESULTS_FOLDER
from steps.evaluate.errors import DocumentNotFound
from steps.evaluate.prices import load_prices
from steps.evaluate.store import Store, open_store, validate_execution_id

if TYPE_CHECKING:
    from botocore.client import BaseClient

DEFAULT_PIPELINE_NAME = PIPELINE_NAME  # what `cdk deploy` names it by default
# Evaluate runs before CheckImprovement, so a Failed execution may still hold its verdict.
FINISHED = ("Succeeded", "Failed", "Stopped")
MAX_LIST = 100  # ListPipelineExecutions' MaxResults ceiling


def pipeline_parameters(overrides: dict[str, str]) -> list[dict[str, str]]:
    """Checked overrides as StartPipelineExecution's PipelineParameters (Name/Value strings)."""
    out = []
    for name, value in parse_overrides(overrides).items():
        if name == "InputData" and not value.startswith("s3://"):
            # a local folder means nothing to a SageMaker Processing job
            raise UserError(
                f"parameter InputData={value!r}: in the cloud it must be an s3://bucket/prefix URI", headline="bad parameter"
            )
        if name == "PriceOverrides":
            if not value:
                continue  # none: the deployed default (an object that overrides nothing)
            if not value.startswith("s3://"):
                raise UserError(
                    f"parameter PriceOverrides={value!r}: in the cloud it must be the s3:// URI of a JSON price file "
                    "(hetero start --prices FILE uploads a local file)",
                    headline="bad parameter",
                )
        out.append({"Name": name, "Value": _wire(value)})
    return out


def _wire(value) -> str:
    # SageMaker parses ParameterBoolean values "true"/"false" only; numbers as their decimal text.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def start_execution(
    *,
    pipeline_name: str,
    overrides: dict[str, str],
    client: BaseClient | None = None,
    display_name: str | None = None,
    s3: BaseClient | None = None,
) -> tuple[str, list[dict]]:
    """Start one execution with the given overrides; returns its ARN and the PipelineParameters sent. A local
    PriceOverrides file is uploaded (``s3``: the S3 client for that, and for reading an s3:// one)."""
    overrides = dict(overrides)
    prices = str(overrides.get("PriceOverrides") or "")
    local_prices = Path(prices) if prices and not prices.startswith("s3://") else None
    if local_prices is not None:
        _check_price_file(local_prices, f"PriceOverrides {prices!r} (--prices)")
        del overrides["PriceOverrides"]  # checked now; its S3 URI is known once the pipeline is
    pipeline_parameters(overrides)  # before any client exists: bad input never reaches AWS
    client = client or _client("sagemaker")
    with sagemaker_errors(pipeline_name, client.meta.region_name):
        described = client.describe_pipeline(PipelineName=pipeline_name)
    definition = json.loads(described["PipelineDefinition"])
    _check_images(definition, pipeline_name)
    if local_prices is not None:
        overrides["PriceOverrides"] = _price_file_uri(definition, pipeline_name, local_prices.read_bytes())
    parameters = pipeline_parameters(overrides)
    typed = parse_overrides(overrides)
    _check_readable(JobAccess.from_description(described.get("PipelineDescription")), typed)
    declared = {p["Name"]: p.get("DefaultValue") for p in definition.get("Parameters", [])}
    stand_in = "0123456789ab"  # the service's execution ids are 12 characters
    validate_execution(
        definition,
        {**declared, **typed},
        {
            "PipelineExecutionId": stand_in,
            "PipelineName": pipeline_name,
            "PipelineExecutionArn": f"arn:aws:sagemaker:{client.meta.region_name}:000000000000:pipeline/{pipeline_name.lower()}"
            f"/execution/{stand_in}",
        },
    )
    if prices and s3 is None:
        s3 = _client("s3")
    if local_prices is not None:
        _upload(s3, overrides["PriceOverrides"], local_prices.read_bytes())
    elif prices:
        _check_price_object(s3, prices)
    request = {"PipelineName": pipeline_name, "PipelineParameters": parameters}
    if display_name:
        request["PipelineExecutionDisplayName"] = display_name
    with sagemaker_errors(pipeline_name, client.meta.region_name):
        return client.start_pipeline_execution(**request)["PipelineExecutionArn"], parameters


def _check_readable(access: JobAccess | None, typed: dict) -> None:
    """The S3 objects the jobs read must lie where their role may read (unknown when the description does not say)."""
    for name in ("InputData", "PriceOverrides"):
        if access and typed.get(name):
            access.require_readable(name, str(typed[name]))


def _check_images(definition: dict, pipeline_name: str) -> None:
    """An AWS Deep Learning Container the deployed definition runs must exist in its region (a custom image is its owner's)."""

    def images(node):
        if isinstance(node, dict):
            yield from (v for k, v in node.items() if k in ("TrainingImage", "ImageUri") and isinstance(v, str))
            for v in node.values():
                yield from images(v)
        elif isinstance(node, list):
            for v in node:
                yield from images(v)

    for image in sorted(set(images(definition))):
        try:
            framework = dlc_framework(image)
        except UserError:
            continue  # not an ECR URI: CreateTrainingJob's own validation names it
        if framework:
            try:
                require_image_region(ecr_repository(image)[1], framework)
            except UserError as exc:
                raise UserError(f"pipeline {pipeline_name!r} runs {image}: {exc.message}", headline="bad region") from None


def _check_price_file(path: Path, what: str) -> None:
    if not path.is_file():
        raise UserError(
            f"{what}: no such file; pass a JSON price file (`hetero prices refresh` writes one) or the s3:// URI of one",
            headline="bad price file",
        )
    load_prices(path)  # a bad file fails here, naming the schema, not in the Evaluate step after training


def _price_file_uri(definition: dict, pipeline_name: str, content: bytes) -> str:
    """Where a price file is uploaded: beside the pipeline's artifacts (its results store's parent), which its role may read."""
    root = artifact_root(definition)
    if root is None:
        raise UserError(
            f"the definition of pipeline {pipeline_name!r} names no results store (--store), so where its role "
            "may read a price file is unknown: upload the file under s3://<ArtifactBucket>/<prefix>/ yourself and "
            "pass --prices s3://...",
            headline="bad price file",
        )
    return f"{root}/price-overrides/{hashlib.sha256(content).hexdigest()[:16]}.json"


def artifact_root(definition: dict) -> str | None:
    """s3://<bucket>/<prefix> of a deployed definition: the parent of the results store its Evaluate step writes to."""

    def walk(steps):
        for step in steps:
            args = step.get("Arguments", {})
            yield from walk(args.get("IfSteps", []) + args.get("ElseSteps", []) if step.get("Type") == "Condition" else [])
            items = args.get("AppSpecification", {}).get("ContainerArguments", []) if isinstance(args, dict) else []
            for flag, value in zip(items, items[1:]):
                if flag == "--store" and isinstance(value, str) and value.rstrip("/").endswith(f"/{RESULTS_FOLDER}"):
                    yield value.rstrip("/")[: -len(RESULTS_FOLDER) - 1]

    return next(walk(definition.get("Steps", [])), None)


def _split(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


def _upload(s3, uri: str, content: bytes) -> None:
    bucket, key = _split(uri)
    with _s3_errors(uri, "upload the price file to"):
        s3.put_object(Bucket=bucket, Key=key, Body=content, ContentType="application/json")


def _check_price_object(s3, uri: str) -> None:
    """An s3:// price file must exist and be a valid table now, not when Evaluate reads it after training."""
    bucket, key = _split(uri)
    if not bucket or not key or key.endswith("/"):
        raise UserError(f"PriceOverrides {uri!r}: name one object, s3://bucket/key.json", headline="bad price file")
    with _s3_errors(uri, "read the price file"):
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / Path(key).name
        path.write_bytes(body)
        try:
            load_prices(path)
        except UserError as exc:
            raise UserError(exc.message.replace(str(path), uri), headline="bad price file") from None


@contextmanager
def _s3_errors(uri: str, action: str):
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise UserError(
            f"cannot {action} {uri}: {error.get('Code', '')} {error.get('Message', '')}".rstrip() + " (check the "
            "bucket and key, and that your credentials may s3:GetObject / s3:PutObject there)",
            headline="bad price file",
        ) from None
    except BotoCoreError as exc:
        raise UserError(f"cannot {action} {uri}: {exc}", headline="bad price file") from None


def list_executions(
    *, pipeline_name: str, results_uri: str | None, limit: int = 10, client: BaseClient | None = None
) -> list[dict]:
    """The newest ``limit`` executions: arn, id, status, start time, failure reason and, once
    finished, the price-performance document from the results store (None while absent)."""
    if not 1 <= limit <= MAX_LIST:
        raise UserError(f"--limit {limit}: use 1 to {MAX_LIST}", headline="bad option")
    store = open_store(results_uri) if results_uri else None
    client = client or _client("sagemaker")
    with sagemaker_errors(pipeline_name, client.meta.region_name):
        summaries = client.list_pipeline_executions(
            PipelineName=pipeline_name,
            SortBy="CreationTime",
            SortOrder="Descending",
            MaxResults=limit,
        )["PipelineExecutionSummaries"]
    # Sorted here too: the API's order is a request, and local servers (moto) ignore it.
    summaries = sorted(summaries, key=lambda s: s["StartTime"], reverse=True)[:limit]
    executions = []
    for s in summaries:
        status = s["PipelineExecutionStatus"]
        execution = {
            "arn": s["PipelineExecutionArn"],
            "id": execution_id(s["PipelineExecutionArn"]),
            "status": status,
            "start_time": s["StartTime"].astimezone(UTC),
            "display_name": s.get("PipelineExecutionDisplayName"),
            "failure_reason": s.get("PipelineExecutionFailureReason") if status == "Failed" else None,
            "price_performance": None,
        }
        if store is not None and status in FINISHED:
            execution["price_performance"] = read_price_performance(store, execution["id"])
        executions.append(execution)
    return executions


def price_performance_of(results_uri: str, execution_id_: str) -> dict:
    """One execution's price_performance.json; UserError naming where it was looked for."""
    store = open_store(results_uri)
    try:
        return store.get_json(validate_execution_id(execution_id_), PRICE_PERFORMANCE_FILE)
    except DocumentNotFound as exc:
        raise UserError(
            f"no {PRICE_PERFORMANCE_FILE} for execution {execution_id_!r} ({exc.message}): Evaluate writes it when the "
            "execution gets that far; check the id with `hetero executions` and --results",
            headline="no results",
        ) from None


def read_price_performance(store: Store, execution_id_: str) -> dict | None:
    try:
        return store.get_json(execution_id_, PRICE_PERFORMANCE_FILE)
    except DocumentNotFound:
        return None  # the execution stopped before Evaluate, or the results live elsewhere


def execution_id(arn: str) -> str:
    """arn:aws:sagemaker:<region>:<account>:pipeline/<name>/execution/<id> -> <id>
    (the value steps see as ExecutionVariables.PIPELINE_EXECUTION_ID)."""
    return arn.rsplit("/", 1)[-1]


def _client(service: str):
    import boto3  # only cloud commands pay for the import, and never at module import
    from botocore.exceptions import NoRegionError

    try:
        return boto3.client(service)
    except NoRegionError:
        raise UserError("no AWS region: set AWS_REGION to the region you deployed to", headline="no region") from None


@contextmanager
def sagemaker_errors(pipeline_name: str, region: str) -> Iterator[None]:
    """AWS failures the user can fix -> UserError saying what to do; anything else propagates."""
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError, PartialCredentialsError

    try:
        yield
    except (NoCredentialsError, PartialCredentialsError):
        raise UserError(
            "no AWS credentials found: run `aws configure`, set AWS_PROFILE, or export AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY",
            headline="no credentials",
        ) from None
    except EndpointConnectionError as exc:
        raise UserError(
            f"cannot reach SageMaker at {exc.kwargs.get('endpoint_url')}: check AWS_REGION ({region}), "
            "AWS_ENDPOINT_URL and your network",
            headline="no connection",
        ) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", ""), error.get("Message", "")
        if code == "ResourceNotFound" or (code == "ValidationException" and _says_pipeline_missing(message)):
            raise UserError(
                f"no pipeline {pipeline_name!r} in {region}: deploy it with `cdk deploy` first, or check "
                "--pipeline-name (env HETERO_PIPELINE_NAME) and AWS_REGION",
                headline="pipeline not found",
            ) from None
        if code in ("AccessDeniedException", "AccessDenied"):
            raise UserError(
                f"{exc.operation_name} on pipeline {pipeline_name!r} in {region} was denied: {message} (the identity "
                f"needs sagemaker:{exc.operation_name} on the pipeline)",
                headline="access denied",
            ) from None
        if code in ("UnrecognizedClientException", "InvalidClientTokenId", "InvalidSignatureException", "ExpiredTokenException"):
            raise UserError(
                f"AWS rejected the credentials ({code}: {message}): refresh them or pick another AWS_PROFILE",
                headline="bad credentials",
            ) from None
        if code == "ValidationException":
            raise UserError(
                f"SageMaker rejected the request for pipeline {pipeline_name!r}: {message}", headline="rejected by SageMaker"
            ) from None
        raise


def _says_pipeline_missing(message: str) -> bool:
    # AWS answers ResourceNotFound ("Pipeline ... does not exist"); moto a ValidationException ("Could not find pipeline").
    text = message.lower()
    return "pipeline" in text and ("could not find" in text or "does not exist" in text)

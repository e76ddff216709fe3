"""Scheduled retraining that adopts the latest plan: start the pipeline with the data group the newest
plan.json recommends (`steps/evaluate/plan.py`; Evaluate writes one per execution to the results store).

The EventBridge schedule invokes this function instead of starting the pipeline itself when the CDK
context key ``hetero:retrainAdoptsPlan`` is true. It runs in the Lambda Python runtime with boto3 only
(no project code). A plan is applied only in a form CreateTrainingJob accepts: its DataInstanceType must
be one of the service's training instance types (botocore's own model of the API) and its
DataInstanceCount within the pipeline parameter's bounds. A plan that fails those checks, says to stay
homogeneous, or is missing leaves the schedule's own parameters in force: retraining still runs, and
the result says why the plan was not used.

Environment: PIPELINE_NAME, RESULTS_BUCKET, RESULTS_PREFIX (the store's key prefix, e.g. hetero/results),
PARAMETERS (JSON object of the schedule's fixed overrides), MIN_DATA_INSTANCE_COUNT, MAX_DATA_INSTANCE_COUNT.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the Lambda runtime has boto3; it is imported where used
    from botocore.client import BaseClient
    from botocore.model import ServiceModel

PLAN_FILE = "plan.json"


def handler(event: dict[str, Any], context: object) -> dict:
    import boto3

    return start_with_latest_plan(
        s3=boto3.client("s3"),
        sagemaker=boto3.client("sagemaker"),
        pipeline=os.environ["PIPELINE_NAME"],
        bucket=os.environ["RESULTS_BUCKET"],
        prefix=os.environ["RESULTS_PREFIX"],
        parameters=json.loads(os.environ["PARAMETERS"]),
        count_bounds=(int(os.environ["MIN_DATA_INSTANCE_COUNT"]), int(os.environ["MAX_DATA_INSTANCE_COUNT"])),
    )


def start_with_latest_plan(
    *,
    s3: BaseClient,
    sagemaker: BaseClient,
    pipeline: str,
    bucket: str,
    prefix: str,
    parameters: dict,
    count_bounds: tuple[int, int],
) -> dict:
    key, plan = latest_plan(s3, bucket, prefix)
    applied, reason = {}, "no plan.json in the results store yet"
    if plan is not None:
        applied, reason = plan_parameters(plan, sagemaker.meta.service_model, count_bounds)
    chosen = {**parameters, **applied}
    arn = sagemaker.start_pipeline_execution(
        PipelineName=pipeline,
        PipelineParameters=[{"Name": name, "Value": str(value)} for name, value in sorted(chosen.items())],
        PipelineExecutionDescription=(
            f"scheduled retraining with the plan of {key}" if applied else f"scheduled retraining, no plan applied: {reason}"
        )[:3072],
    )["PipelineExecutionArn"]
    result = {
        "execution_arn": arn,
        "plan": f"s3://{bucket}/{key}" if key else None,
        "applied": applied,
        "reason": reason,
        "parameters": chosen,
    }
    print(json.dumps(result))  # the function's log: which plan each scheduled execution ran with, and why
    return result


def latest_plan(s3: BaseClient, bucket: str, prefix: str) -> tuple[str | None, dict | None]:
    """The newest ``<prefix>/<execution id>/plan.json`` and its document."""
    newest = None
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/"):
        for item in page.get("Contents", []):
            if item["Key"].endswith("/" + PLAN_FILE) and (newest is None or item["LastModified"] > newest["LastModified"]):
                newest = item
    if newest is None:
        return None, None
    body = s3.get_object(Bucket=bucket, Key=newest["Key"])["Body"].read()
    return newest["Key"], json.loads(body)


def plan_parameters(plan: dict, service_model: ServiceModel, count_bounds: tuple[int, int]) -> tuple[dict, str]:
    """The plan's pipeline parameters if CreateTrainingJob would accept them, else none and why."""
    params = plan.get("parameters")
    if not params:
        return {}, f"the plan recommends no data group: {plan.get('reason') or 'no reason given'}"
    instance_type, count = params.get("DataInstanceType"), params.get("DataInstanceCount")
    allowed = service_model.shape_for("TrainingInstanceType").enum
    if instance_type not in allowed:
        return {}, f"the plan's DataInstanceType {instance_type!r} is not a SageMaker training instance type"
    low, high = count_bounds
    if not isinstance(count, int) or isinstance(count, bool) or not low <= count <= high:
        return {}, f"the plan's DataInstanceCount {count!r} is not an integer within {low}..{high}"
    return {"DataInstanceType": instance_type, "DataInstanceCount": count}, f"plan: {plan.get('reason', '')}"

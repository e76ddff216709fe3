"""Scheduled retraining that adopts the latest plan: start the pipeline with the data group the newest
plan.json recommends (`steps/evaluate/plan.py`; Evaluate writes one per execution to the results store).

The EventBridge schedule invokes this function instead of starting the pipeline itself when the CDK
context key ``hetero:retrainAdoptsPlan`` is true. It runs in the Lambda Python runtime with boto3 only
(no project code). A plan is applied only in a form CreateTrainingJob accepts: its DataInstanceType must
be one of the service's training instance types (botocore's own model of the API) and its
DataInstanceCount within the pipeline parameter's bounds. A plan that fails those checks, says to stay
homogeneous, or is missing leaves the schedule's own parameters in force: retraining still runs, and
the result says why the plan was not used.

Capacity fallback: a plan lists its candidates in order in ``fallbacks`` (the recommendation first, then
the next cheapest adequate ones of another instance type; a plan without the field has its
recommendation only). CreateTrainingJob does not refuse a type that has no capacity: the training job
fails with a FailureReason starting "CapacityError" (the SageMaker Python SDK tests for that word,
sagemaker.core.common_utils; EC2's own wording is InsufficientInstanceCapacity), after the pipeline's
training steps have retried SageMaker.CAPACITY_ERROR themselves. A type the account has no quota for is
refused by CreateTrainingJob itself, and the step fails with ResourceLimitExceeded ("The account-level
service limit 'ml.p3.2xlarge for training job usage' is 0 Instances, ...": a new account's usual first
failure); retrying it on schedule fails the same way until the quota is raised. So the function looks at
the pipeline's newest execution: when it failed either way and ran one of the plan's candidates, the next
candidate is started (after the last, the recommendation again: capacity comes back, quotas are raised);
otherwise the recommendation.

Only a plan on one basis is applied (schema version 3, ``APPLICABLE_PLAN_VERSIONS``): every candidate at
the instance types' own vCPUs, never a row an emulated run measured on fewer CPUs. An older plan does not
state its basis; the schedule's own parameters stay in force and the result says so, until the next
execution's Evaluate writes a current one.

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
# FailureReason words of a training step whose instance type found no capacity, or no quota (see above): the API's
# error code, and the quota's name in its message where the reason quotes the message alone
CAPACITY_FAILURES = ("CapacityError", "InsufficientInstanceCapacity", "ResourceLimitExceeded", "for training job usage")
RECENT_EXECUTIONS = 10  # read to find the newest: local servers do not sort ListPipelineExecutions
# steps/evaluate/plan.py's: the plans whose every candidate is at the types' own vCPUs (their "basis")
APPLICABLE_PLAN_VERSIONS = (3,)
REAL_VCPUS = "real_vcpus"


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
    applied, reason, index = {}, "no plan.json in the results store yet", 0
    if plan is not None and plan.get("schema_version") not in APPLICABLE_PLAN_VERSIONS:
        reason = (
            f"the newest plan.json has schema version {plan.get('schema_version')}, not "
            f"{' or '.join(map(str, APPLICABLE_PLAN_VERSIONS))}: it does not state its basis (its rows may compare an "
            "emulated measurement with predictions at the types' vCPUs), so it is not applied; the next execution's "
            "Evaluate writes a current one"
        )
    elif plan is not None:
        candidates = plan_candidates(plan)
        index, why = pick_candidate(candidates, previous_capacity_failure(sagemaker, pipeline))
        applied, reason = check_parameters(candidates[index], sagemaker.meta.service_model, count_bounds)
        if applied:
            reason = f"plan: {plan.get('reason', '')}"
        elif candidates[index] is None:
            reason = f"{reason}: {plan.get('reason') or 'no reason given'}"
        if why:
            reason = f"candidate {index + 1} of {len(candidates)}, as {why}; {reason}"
    chosen = {**parameters, **applied}
    if not applied:
        description = f"scheduled retraining, no plan applied: {reason}"
    elif index:
        description = f"scheduled retraining with candidate {index + 1} of the plan of {key}: {reason}"
    else:
        description = f"scheduled retraining with the plan of {key}"
    arn = sagemaker.start_pipeline_execution(
        PipelineName=pipeline,
        PipelineParameters=[{"Name": name, "Value": str(value)} for name, value in sorted(chosen.items())],
        PipelineExecutionDescription=description[:3072],  # the API's maximum length
    )["PipelineExecutionArn"]
    result = {
        "execution_arn": arn,
        "candidate": index,
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


def plan_candidates(plan: dict) -> list[dict | None]:
    """The pipeline parameters of each of the plan's candidates at the types' own vCPUs, in order (None: a candidate
    with no data group)."""
    fallbacks = [c for c in plan.get("fallbacks") or [] if c.get("basis", REAL_VCPUS) == REAL_VCPUS]
    if not fallbacks:
        return [plan.get("parameters")]
    return [candidate_parameters(plan, candidate) for candidate in fallbacks]


def candidate_parameters(plan: dict, candidate: dict) -> dict | None:
    """A candidate's own ``parameters``, or those of its data group (and trainer group, where it is not the plan's)."""
    if "parameters" in candidate:
        return candidate["parameters"]
    if candidate.get("data") is None:
        return None
    params = {"DataInstanceType": candidate["data"], "DataInstanceCount": candidate.get("data_count")}
    trainer = plan.get("trainer") or {}
    if candidate.get("trainer") and (candidate["trainer"], candidate.get("trainers")) != (
        trainer.get("instance_type"),
        trainer.get("count"),
    ):
        params.update(DnnInstanceType=candidate["trainer"], DnnInstanceCount=candidate.get("trainers"))
    return params


def previous_capacity_failure(sagemaker: BaseClient, pipeline: str) -> tuple[dict, str] | None:
    """(parameters, failure) of the pipeline's newest execution when it failed for want of capacity or quota, else
    None (also when it cannot be read: retraining runs with the recommendation rather than not at all)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return _previous_capacity_failure(sagemaker, pipeline)
    except (BotoCoreError, ClientError) as exc:
        print(json.dumps({"previous_execution_unread": str(exc)}))
        return None


def _previous_capacity_failure(sagemaker: BaseClient, pipeline: str) -> tuple[dict, str] | None:
    summaries = sagemaker.list_pipeline_executions(
        PipelineName=pipeline, SortBy="CreationTime", SortOrder="Descending", MaxResults=RECENT_EXECUTIONS
    )["PipelineExecutionSummaries"]
    if not summaries:
        return None
    newest = max(summaries, key=lambda s: s["StartTime"])
    if newest["PipelineExecutionStatus"] != "Failed":
        return None
    arn = newest["PipelineExecutionArn"]
    steps = []
    if not is_capacity_failure(newest.get("PipelineExecutionFailureReason")):
        # the execution's reason names a failed step, not why: the step's own reason is the training job's
        for page in sagemaker.get_paginator("list_pipeline_execution_steps").paginate(PipelineExecutionArn=arn):
            steps += page["PipelineExecutionSteps"]
    failure = capacity_failure(newest, steps)
    if failure is None:
        return None
    sent = {}  # the API answers in pages (NextToken), like the steps above
    for page in sagemaker.get_paginator("list_pipeline_parameters_for_execution").paginate(PipelineExecutionArn=arn):
        sent.update((p["Name"], p["Value"]) for p in page["PipelineParameters"])
    return sent, failure


def is_capacity_failure(reason: str | None) -> bool:
    return bool(reason) and any(word in reason for word in CAPACITY_FAILURES)


def capacity_failure(summary: dict, steps: list[dict]) -> str | None:
    """Why a failed execution (a ListPipelineExecutions summary and its ListPipelineExecutionSteps) found no
    capacity or quota, or None when it failed for another reason."""
    execution_id = summary["PipelineExecutionArn"].rsplit("/", 1)[-1]
    if is_capacity_failure(summary.get("PipelineExecutionFailureReason")):
        return f"execution {execution_id}: {summary['PipelineExecutionFailureReason']}"
    for step in steps:
        if step.get("StepStatus") == "Failed" and is_capacity_failure(step.get("FailureReason")):
            return f"execution {execution_id}, step {step['StepName']}: {step['FailureReason']}"
    return None


def pick_candidate(candidates: list, failed: tuple[dict, str] | None) -> tuple[int, str]:
    """The index of the candidate to start, and why when it is not the recommendation's first turn."""
    if failed is None:
        return 0, ""
    sent, failure = failed
    ran = next(
        (i for i, c in enumerate(candidates) if c and all(str(sent.get(k)) == str(v) for k, v in c.items())),
        None,
    )
    if ran is None:
        return 0, f"the newest execution found no capacity or quota but ran none of the plan's candidates ({failure})"
    if ran + 1 < len(candidates):
        return ran + 1, f"candidate {ran + 1} found no capacity or quota ({failure})"
    return 0, f"every candidate of the plan found no capacity or quota, the last: {failure}; the recommendation again"


def check_parameters(params: dict | None, service_model: ServiceModel, count_bounds: tuple[int, int]) -> tuple[dict, str]:
    """A candidate's pipeline parameters if CreateTrainingJob would accept them, else none and why."""
    if not params:
        return {}, "the plan recommends no data group"
    allowed = service_model.shape_for("TrainingInstanceType").enum
    low, high = count_bounds
    for name, value in params.items():
        if name.endswith("InstanceType") and value not in allowed:
            return {}, f"the plan's {name} {value!r} is not a SageMaker training instance type"
        if name.endswith("InstanceCount") and (not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high):
            return {}, f"the plan's {name} {value!r} is not an integer within {low}..{high}"
    return dict(params), ""

"""The plan-adopting function (infra/functions/adopt_plan) over HTTP against a moto S3 and SageMaker:
the newest plan.json is applied when CreateTrainingJob would accept it, and retraining runs either way."""

import importlib.util
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest

from pipeline.commands import plan_view
from steps.common.errors import UserError
from steps.contract import TUNABLES

HANDLER = Path(__file__).resolve().parents[2] / "infra" / "functions" / "adopt_plan" / "handler.py"
spec = importlib.util.spec_from_file_location("adopt_plan_handler", HANDLER)
adopt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(adopt)

PIPELINE, BUCKET, PREFIX = "HeteroTraining", "artifacts", "hetero/results"
FIXED = {"RunBaseline": "false", "InputData": "s3://artifacts/hetero/raw/"}


@pytest.fixture
def aws(aws_env):
    s3, sagemaker = boto3.client("s3"), boto3.client("sagemaker")
    s3.create_bucket(Bucket=BUCKET)
    definition = {
        "Version": "2020-12-01",
        "Steps": [],
        "Parameters": [
            {
                "Name": p.name,
                "Type": {int: "Integer", float: "Float", bool: "Boolean"}.get(p.type, "String"),
                "DefaultValue": p.default,
            }
            for p in TUNABLES
        ],
    }
    sagemaker.create_pipeline(
        PipelineName=PIPELINE, PipelineDefinition=json.dumps(definition), RoleArn="arn:aws:iam::123456789012:role/hetero-pipeline"
    )
    return s3, sagemaker


def _plan(s3, execution: str, parameters: dict | None, reason: str = "3 x ml.c5.xlarge: ...") -> None:
    doc = {"schema_version": 3, "recommendation": {} if parameters else None, "parameters": parameters, "reason": reason}
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{execution}/plan.json", Body=json.dumps(doc).encode())


def _start(s3, sagemaker) -> tuple[dict, dict]:
    result = adopt.start_with_latest_plan(
        s3=s3, sagemaker=sagemaker, pipeline=PIPELINE, bucket=BUCKET, prefix=PREFIX, parameters=FIXED, count_bounds=(1, 64)
    )
    sent = sagemaker.list_pipeline_parameters_for_execution(PipelineExecutionArn=result["execution_arn"])["PipelineParameters"]
    return result, {p["Name"]: p["Value"] for p in sent}


@pytest.mark.slow
def test_the_newest_plan_is_applied_over_the_schedules_parameters(aws, capsys):
    s3, sagemaker = aws
    _plan(s3, "older", {"DataInstanceType": "ml.m5.xlarge", "DataInstanceCount": 9})
    time.sleep(1.1)  # S3 list times have one-second resolution
    _plan(s3, "newer", {"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 3})
    result, sent = _start(s3, sagemaker)
    assert sent == {**FIXED, "DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": "3"}
    assert result["plan"] == f"s3://{BUCKET}/{PREFIX}/newer/plan.json"
    described = sagemaker.describe_pipeline_execution(PipelineExecutionArn=result["execution_arn"])
    assert described["PipelineExecutionDescription"] == f"scheduled retraining with the plan of {PREFIX}/newer/plan.json"
    assert json.loads(capsys.readouterr().out)["applied"] == {"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 3}


@pytest.mark.slow
@pytest.mark.parametrize(
    "parameters,reason",
    [
        ({"DataInstanceType": "ml.c5.huge", "DataInstanceCount": 2}, "'ml.c5.huge' is not a SageMaker training instance type"),
        ({"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 65}, "DataInstanceCount 65 is not an integer within 1..64"),
        ({"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": "2"}, "DataInstanceCount '2' is not an integer"),
        (None, "the plan recommends no data group: stay homogeneous"),
    ],
)
def test_a_plan_the_service_would_refuse_is_not_applied_and_retraining_still_runs(aws, parameters, reason):
    s3, sagemaker = aws
    _plan(s3, "e1", parameters, reason="stay homogeneous: ...")
    result, sent = _start(s3, sagemaker)
    assert sent == FIXED and result["applied"] == {} and reason in result["reason"]
    described = sagemaker.describe_pipeline_execution(PipelineExecutionArn=result["execution_arn"])
    assert described["PipelineExecutionDescription"].startswith("scheduled retraining, no plan applied: ")


def test_a_plan_of_schema_version_2_is_not_applied_and_the_result_says_why(aws):
    """Version 2 plans do not state their basis: an emulated run's measured rate may have won against predictions at the
    types' vCPUs."""
    s3, sagemaker = aws
    doc = {"schema_version": 2, "recommendation": {}, "parameters": {"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 3}}
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/e1/plan.json", Body=json.dumps(doc).encode())
    result, sent = _start(s3, sagemaker)
    assert sent == FIXED and result["applied"] == {}
    assert result["reason"].startswith("the newest plan.json has schema version 2, not 3: it does not state its basis")
    with pytest.raises(UserError, match="schema version 2; plans of version 3 are applied"):
        plan_view.stored_plan_parameters(f"s3://{BUCKET}/{PREFIX}", "e1")


def test_a_candidate_at_an_emulated_runs_cpus_is_never_started():
    """Every fallback Evaluate writes is at the types' own vCPUs; a row stating another basis is skipped by both
    readers alike."""
    plan = {"trainer": {"instance_type": "ml.g5.xlarge", "count": 1}}
    plan["fallbacks"] = [
        {**_candidate("ml.c5.4xlarge", 1), "basis": "emulated_cpus"},
        {**_candidate("ml.c5.xlarge", 3), "basis": "real_vcpus"},
    ]
    expected = [{"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 3}]
    assert adopt.plan_candidates(plan) == plan_view.plan_candidates(plan) == expected


def test_no_plan_yet_starts_with_the_schedules_parameters(aws):
    result, sent = _start(*aws)
    assert sent == FIXED and result["plan"] is None and result["reason"] == "no plan.json in the results store yet"


def test_the_handler_reads_its_settings_from_the_environment(aws, monkeypatch):
    s3, sagemaker = aws
    _plan(s3, "e1", {"DataInstanceType": "ml.c5.2xlarge", "DataInstanceCount": 2})
    for name, value in {
        "PIPELINE_NAME": PIPELINE,
        "RESULTS_BUCKET": BUCKET,
        "RESULTS_PREFIX": PREFIX,
        "PARAMETERS": json.dumps(FIXED),
        "MIN_DATA_INSTANCE_COUNT": "1",
        "MAX_DATA_INSTANCE_COUNT": "64",
    }.items():
        monkeypatch.setenv(name, value)
    result = adopt.handler({}, None)
    assert result["parameters"] == {**FIXED, "DataInstanceType": "ml.c5.2xlarge", "DataInstanceCount": 2}


# Capacity fallback. The training job's FailureReason when its type has no capacity, as the service words it
# (the SageMaker Python SDK raises its CapacityError on this word: sagemaker.core.common_utils).
CAPACITY = "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type."
# CreateTrainingJob's refusal of a type the account has no quota for (a new account's usual first failure), as botocore
# words the error and as the service's message alone
QUOTA_MESSAGE = (
    "The account-level service limit 'ml.c5.xlarge for training job usage' is 0 Instances, with current utilization of "
    "0 Instances and a request delta of 3 Instances. Please use AWS Service Quotas to request an increase for this quota."
)
QUOTA = f"ClientError: An error occurred (ResourceLimitExceeded) when calling the CreateTrainingJob operation: {QUOTA_MESSAGE}"
ARN = "arn:aws:sagemaker:us-east-1:123456789012:pipeline/heterotraining/execution/abc123def456"


def _candidate(data: str, count: int, trainer: str = "ml.g5.xlarge", trainers: int = 1) -> dict:
    return {"trainer": trainer, "trainers": trainers, "data": data, "data_count": count, "cost_per_epoch": 0.1}


def _fallback_plan(s3, execution: str = "e1") -> None:
    doc = {
        "schema_version": 3,
        "trainer": {"instance_type": "ml.g5.xlarge", "count": 1},
        "recommendation": _candidate("ml.c5.xlarge", 3),
        "parameters": {"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 3},
        "fallbacks": [_candidate("ml.c5.xlarge", 3), _candidate("ml.m5.xlarge", 4), _candidate("ml.c6i.xlarge", 3)],
        "reason": "3 x ml.c5.xlarge: ...",
    }
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{execution}/plan.json", Body=json.dumps(doc).encode())


def _conforms(value, shape) -> None:
    """A hand-written service answer holds only what botocore's model of that answer declares."""
    if shape.type_name == "structure":
        assert set(value) <= set(shape.members), set(value) - set(shape.members)
        for key, item in value.items():
            _conforms(item, shape.members[key])
    elif shape.type_name == "list":
        for item in value:
            _conforms(item, shape.member)


def _answers(status: str, reason: str | None, steps: list[dict]) -> tuple[dict, list[dict]]:
    model = boto3.client("sagemaker", region_name="us-east-1").meta.service_model
    summary = {"PipelineExecutionArn": ARN, "PipelineExecutionStatus": status, "PipelineExecutionFailureReason": reason}
    _conforms({"PipelineExecutionSummaries": [summary]}, model.operation_model("ListPipelineExecutions").output_shape)
    _conforms({"PipelineExecutionSteps": steps}, model.operation_model("ListPipelineExecutionSteps").output_shape)
    return summary, steps


def test_a_plan_without_fallbacks_has_its_recommendation_as_its_only_candidate():
    plan = {"parameters": {"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 3}}
    assert adopt.plan_candidates(plan) == [plan["parameters"]]
    assert adopt.plan_candidates({"parameters": None}) == [None]


def test_the_candidates_are_the_fallbacks_in_order_with_the_trainer_only_where_it_changes():
    plan = {"trainer": {"instance_type": "ml.g5.xlarge", "count": 1}}
    plan["fallbacks"] = [_candidate("ml.c5.xlarge", 3), _candidate("ml.m5.xlarge", 2, "ml.g6.xlarge"), {"data": None}]
    assert adopt.plan_candidates(plan) == [
        {"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 3},
        {"DataInstanceType": "ml.m5.xlarge", "DataInstanceCount": 2, "DnnInstanceType": "ml.g6.xlarge", "DnnInstanceCount": 1},
        None,
    ]


def test_the_function_reads_a_plans_candidates_as_hetero_start_does():
    """The function ships without the project's code, so it carries its own copy of `plan_candidates`: the two must read
    every form of plan alike (with fallbacks, with a candidate's own parameters, without fallbacks)."""
    trainer = {"instance_type": "ml.g5.xlarge", "count": 1}
    own = {"data": "ml.c5.xlarge", "parameters": {"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 4}}
    plans = [
        {"trainer": trainer, "fallbacks": [_candidate("ml.c5.xlarge", 3), _candidate("ml.m5.xlarge", 2, "ml.g6.xlarge")]},
        {"trainer": trainer, "fallbacks": [own, {"data": None}]},
        {"parameters": {"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 3}},
        {"parameters": None},
    ]
    for plan in plans:
        assert adopt.plan_candidates(plan) == plan_view.plan_candidates(plan), plan


@pytest.mark.parametrize(
    "reason,steps,found",
    [
        (
            "Step failure: One or multiple steps failed.",
            [{"StepName": "TrainHetero", "StepStatus": "Failed", "FailureReason": CAPACITY}],
            "execution abc123def456, step TrainHetero: CapacityError",
        ),
        (f"Step TrainHetero failed: {CAPACITY}", [], "execution abc123def456: Step TrainHetero failed: CapacityError"),
        (
            "Step failure: One or multiple steps failed.",
            [{"StepName": "TrainHetero", "StepStatus": "Failed", "FailureReason": "AlgorithmError: exit 1"}],
            None,
        ),
        ("Step failure: One or multiple steps failed.", [{"StepName": "Evaluate", "StepStatus": "Succeeded"}], None),
        (
            "Step failure: One or multiple steps failed.",
            [{"StepName": "TrainHetero", "StepStatus": "Failed", "FailureReason": QUOTA}],
            "execution abc123def456, step TrainHetero: ClientError: An error occurred (ResourceLimitExceeded)",
        ),
        (
            "Step failure: One or multiple steps failed.",
            [{"StepName": "TrainBaseline", "StepStatus": "Failed", "FailureReason": QUOTA_MESSAGE}],
            "execution abc123def456, step TrainBaseline: The account-level service limit",
        ),
        (f"Step TrainHetero failed: {QUOTA}", [], "execution abc123def456: Step TrainHetero failed: ClientError"),
    ],
)
def test_a_capacity_or_quota_failure_is_found_in_the_execution_or_its_failed_step(reason, steps, found):
    summary, steps = _answers("Failed", reason, steps)
    failure = adopt.capacity_failure(summary, steps)
    assert failure is None if found is None else failure.startswith(found)


def test_a_capacity_failure_moves_to_the_next_candidate_and_after_the_last_back_to_the_first():
    first, second, third = (
        {"DataInstanceType": t, "DataInstanceCount": 3} for t in ("ml.c5.xlarge", "ml.m5.xlarge", "ml.c6i.xlarge")
    )
    candidates = [first, second, third]
    sent = {**FIXED, "DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": "3"}  # parameter values come back as text
    assert adopt.pick_candidate(candidates, None) == (0, "")
    assert adopt.pick_candidate(candidates, (sent, "no capacity"))[0] == 1
    assert adopt.pick_candidate(candidates, ({**sent, "DataInstanceType": "ml.m5.xlarge"}, "no capacity"))[0] == 2
    index, why = adopt.pick_candidate(candidates, ({**sent, "DataInstanceType": "ml.c6i.xlarge"}, "no capacity"))
    assert index == 0 and "every candidate" in why
    index, why = adopt.pick_candidate(candidates, ({**sent, "DataInstanceType": "ml.c5.2xlarge"}, "no capacity"))
    assert index == 0 and "none of the plan's candidates" in why
    assert adopt.pick_candidate([first], (sent, "no capacity"))[0] == 0  # no fallbacks: the recommendation again


def test_after_a_succeeded_execution_the_recommendation_of_a_plan_with_fallbacks_is_started(aws, capsys):
    s3, sagemaker = aws
    _fallback_plan(s3)
    first, sent = _start(s3, sagemaker)  # no execution yet
    assert first["candidate"] == 0 and sent == {**FIXED, "DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": "3"}
    second, sent = _start(s3, sagemaker)  # the newest execution (moto's finish at once) succeeded: no fallback
    assert second["candidate"] == 0 and sent["DataInstanceType"] == "ml.c5.xlarge"
    assert adopt._previous_capacity_failure(sagemaker, PIPELINE) is None  # read, not unreadable
    assert "previous_execution_unread" not in capsys.readouterr().out


@pytest.mark.parametrize("reason", [CAPACITY, QUOTA], ids=["capacity", "quota"])
def test_after_a_failure_the_next_candidate_starts_with_the_parameters_read_from_every_page(reason):
    """ListPipelineParametersForExecution answers in pages: the candidate that ran is told from all of them (here its
    DataInstanceType on the first page, its DataInstanceCount on the second)."""
    from botocore.stub import Stubber

    sagemaker = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
    failed = {
        "PipelineExecutionArn": ARN,
        "PipelineExecutionStatus": "Failed",
        "PipelineExecutionFailureReason": "Step failure: One or multiple steps failed.",
        "StartTime": datetime(2026, 11, 23, 3, 0, tzinfo=UTC),
    }
    step = {"StepName": "TrainHetero", "StepStatus": "Failed", "FailureReason": reason}
    with Stubber(sagemaker) as stub:
        stub.add_response(
            "list_pipeline_executions",
            {"PipelineExecutionSummaries": [failed]},
            {
                "PipelineName": PIPELINE,
                "SortBy": "CreationTime",
                "SortOrder": "Descending",
                "MaxResults": adopt.RECENT_EXECUTIONS,
            },
        )
        stub.add_response("list_pipeline_execution_steps", {"PipelineExecutionSteps": [step]}, {"PipelineExecutionArn": ARN})
        stub.add_response(
            "list_pipeline_parameters_for_execution",
            {"PipelineParameters": [{"Name": "DataInstanceType", "Value": "ml.c5.xlarge"}], "NextToken": "page-2"},
            {"PipelineExecutionArn": ARN},
        )
        stub.add_response(
            "list_pipeline_parameters_for_execution",
            {"PipelineParameters": [{"Name": "DataInstanceCount", "Value": "3"}]},
            {"PipelineExecutionArn": ARN, "NextToken": "page-2"},
        )
        failure = adopt.previous_capacity_failure(sagemaker, PIPELINE)
        stub.assert_no_pending_responses()
    sent, why = failure
    assert sent == {"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": "3"}
    assert why == f"execution abc123def456, step TrainHetero: {reason}"
    candidates = [
        {"DataInstanceType": "ml.c5.xlarge", "DataInstanceCount": 3},
        {"DataInstanceType": "ml.m5.xlarge", "DataInstanceCount": 4},
    ]
    index, reason = adopt.pick_candidate(candidates, failure)
    assert index == 1 and reason.startswith("candidate 1 found no capacity or quota (execution abc123def456")

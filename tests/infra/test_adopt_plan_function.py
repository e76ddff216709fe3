"""The plan-adopting function (infra/functions/adopt_plan) over HTTP against a moto S3 and SageMaker:
the newest plan.json is applied when CreateTrainingJob would accept it, and retraining runs either way."""

import importlib.util
import json
import time
from pathlib import Path

import boto3
import pytest

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
    doc = {"schema_version": 1, "recommendation": {} if parameters else None, "parameters": parameters, "reason": reason}
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{execution}/plan.json", Body=json.dumps(doc).encode())


def _start(s3, sagemaker) -> tuple[dict, dict]:
    result = adopt.start_with_latest_plan(
        s3=s3, sagemaker=sagemaker, pipeline=PIPELINE, bucket=BUCKET, prefix=PREFIX, parameters=FIXED, count_bounds=(1, 64)
    )
    sent = sagemaker.list_pipeline_parameters_for_execution(PipelineExecutionArn=result["execution_arn"])["PipelineParameters"]
    return result, {p["Name"]: p["Value"] for p in sent}


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

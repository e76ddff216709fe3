"""Scheduled retraining that adopts the latest plan: the function, its rights, and the schedule's target."""

import json

import pytest
from aws_cdk.assertions import Match

from tests.support.stacks import resources, synthesised_once


@pytest.fixture(scope="module")
def adopting(tmp_path_factory):
    return synthesised_once(tmp_path_factory, **{"hetero:retrainAdoptsPlan": True})


def test_the_schedule_invokes_the_function_which_starts_the_pipeline_with_its_parameters(adopting):
    adopting.template.has_resource_properties(
        "AWS::Scheduler::Schedule",
        {
            "Target": {
                "Arn": {"Fn::GetAtt": [Match.string_like_regexp("PlanAdoptionFunction"), "Arn"]},
                "RetryPolicy": {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 3},
            }
        },
    )
    (function,) = resources(adopting, "AWS::Lambda::Function")
    env = function["Properties"]["Environment"]["Variables"]
    assert env["PIPELINE_NAME"] == "HeteroTraining" and env["RESULTS_PREFIX"] == "hetero/results"
    assert (env["MIN_DATA_INSTANCE_COUNT"], env["MAX_DATA_INSTANCE_COUNT"]) == ("1", "64")  # the parameter's bounds
    assert function["Properties"]["Handler"] == "handler.handler" and function["Properties"]["Runtime"].startswith("python3.")
    assert adopting.validation_error is None  # cdk-nag (AwsSolutions) passes


def test_the_function_may_read_the_results_and_start_this_pipeline_only(adopting):
    (policy,) = [
        p
        for p in resources(adopting, "AWS::IAM::Policy")
        if any(s.get("Sid") == "StartPipeline" for s in p["Properties"]["PolicyDocument"]["Statement"])
    ]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert set(statements) == {"ListResults", "ReadResults", "StartPipeline", "ListExecutions", "ReadExecutions", "Log"}
    assert statements["ListResults"]["Condition"] == {"StringLike": {"s3:prefix": ["hetero/results/*"]}}
    assert statements["ReadResults"]["Action"] == "s3:GetObject" and "hetero/results/*" in json.dumps(statements["ReadResults"])
    assert ":pipeline/heterotraining" in json.dumps(statements["StartPipeline"]["Resource"])
    # to move to the plan's next candidate after a capacity failure: this pipeline's executions, read only
    assert statements["ListExecutions"]["Action"] == "sagemaker:ListPipelineExecutions"
    assert statements["ListExecutions"]["Resource"] == statements["StartPipeline"]["Resource"]
    assert sorted(statements["ReadExecutions"]["Action"]) == [
        "sagemaker:ListPipelineExecutionSteps",
        "sagemaker:ListPipelineParametersForExecution",
    ]
    assert ":pipeline/heterotraining/execution/*" in json.dumps(statements["ReadExecutions"]["Resource"])


def test_without_the_key_the_schedule_starts_the_pipeline_itself(synth_default):
    synth_default.template.resource_count_is("AWS::Lambda::Function", 0)

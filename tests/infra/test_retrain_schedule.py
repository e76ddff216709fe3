import json

import pytest
from aws_cdk.assertions import Match

from tests.support.stacks import PIPELINE_ARN, resources, synthesise


def test_schedule_starts_the_pipeline_with_overrides(synth_any):
    synth_any.template.has_resource_properties(
        "AWS::Scheduler::Schedule",
        {
            "ScheduleExpression": "rate(7 days)",
            "State": "ENABLED",
            "Target": {
                "Arn": PIPELINE_ARN,
                "RoleArn": Match.any_value(),
                "RetryPolicy": {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 3},
                "SageMakerPipelineParameters": {
                    "PipelineParameterList": [
                        {"Name": "InputData", "Value": {"Fn::Join": ["", ["s3://", Match.any_value(), "/hetero/raw/"]]}},
                        {"Name": "RunBaseline", "Value": "false"},
                    ]
                },
            },
        },
    )


def test_schedule_role_may_only_start_this_pipeline(synth_default):
    synth_default.template.has_resource_properties(
        "AWS::IAM::Role",
        {"AssumeRolePolicyDocument": {"Statement": [Match.object_like({"Principal": {"Service": "scheduler.amazonaws.com"}})]}},
    )
    synth_default.template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [{"Action": "sagemaker:StartPipelineExecution", "Effect": "Allow", "Resource": PIPELINE_ARN}]
            }
        },
    )


@pytest.mark.slow
def test_cron_schedule_has_its_time_zone_and_empty_schedule_means_none(tmp_path):
    cron = synthesise(tmp_path / "cron", **{"hetero:schedule": "cron(0 3 ? * SUN *)", "hetero:scheduleTimezone": "Europe/Berlin"})
    cron.template.has_resource_properties(
        "AWS::Scheduler::Schedule", {"ScheduleExpression": "cron(0 3 ? * SUN *)", "ScheduleExpressionTimezone": "Europe/Berlin"}
    )
    none = synthesise(
        tmp_path / "none", **{"hetero:schedule": "", "hetero:newDataTrigger": False, "hetero:retrainParameters": {"Epochs": 10}}
    )
    none.template.resource_count_is("AWS::Scheduler::Schedule", 0)
    # no S3 rule starts the pipeline; the SageMaker ones tell the notification topic
    assert [r["Properties"]["EventPattern"]["source"] for r in resources(none, "AWS::Events::Rule")] == [["aws.sagemaker"]] * 2
    assert "NotificationConfiguration" not in json.dumps(resources(none, "AWS::S3::Bucket"))
    assert none.validation_error is None

import pytest
from aws_cdk.assertions import Match

from tests.support.stacks import PIPELINE_ARN, synthesise


def test_rule_matches_the_marker_under_the_input_prefix_of_this_bucket(synth_any):
    synth_any.template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "State": "ENABLED",
            "EventPattern": {
                "source": ["aws.s3"],
                "detail-type": ["Object Created"],
                "detail": {
                    "bucket": {"name": [{"Ref": Match.any_value()}]},
                    "object": {"key": [{"wildcard": "hetero/raw/*_READY"}]},
                },
            },
            "Targets": [
                {
                    "Id": "Pipeline",
                    "Arn": PIPELINE_ARN,
                    "RoleArn": {"Fn::GetAtt": [Match.any_value(), "Arn"]},
                    "SageMakerPipelineParameters": {
                        "PipelineParameterList": Match.array_with(
                            [{"Name": "InputData", "Value": {"Fn::Join": ["", ["s3://", Match.any_value(), "/hetero/raw/"]]}}]
                        )
                    },
                }
            ],
        },
    )


def test_rule_role_may_only_start_this_pipeline(synth_default):
    synth_default.template.has_resource_properties(
        "AWS::IAM::Role",
        {"AssumeRolePolicyDocument": {"Statement": [Match.object_like({"Principal": {"Service": "events.amazonaws.com"}})]}},
    )
    synth_default.template.resource_properties_count_is(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [{"Action": "sagemaker:StartPipelineExecution", "Effect": "Allow", "Resource": PIPELINE_ARN}]
            }
        },
        2,
    )  # schedule + rule


@pytest.mark.slow
def test_without_a_marker_every_object_under_the_prefix_starts_it(tmp_path):
    synth = synthesise(tmp_path, **{"hetero:newDataMarker": "", "hetero:inputPrefix": "incoming/"})
    synth.template.has_resource_properties(
        "AWS::Events::Rule", {"EventPattern": {"detail": {"object": {"key": [{"prefix": "incoming/"}]}}}}
    )
    assert synth.validation_error is None

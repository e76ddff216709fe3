from aws_cdk.assertions import Match

from infra.notifications import MODEL_PACKAGE_EVENT, PIPELINE_EVENT
from tests.support.stacks import PIPELINE_ARN, resources, synthesise

TOPIC = {"Ref": Match.string_like_regexp("^NotificationsTopic")}


def test_the_topic_is_encrypted_with_a_rotated_key_and_refuses_plain_http(synth_any):
    synth_any.template.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [Match.string_like_regexp("^NotificationsKey"), "Arn"]}}
    )
    synth_any.template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    synth_any.template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Effect": "Deny", "Action": "sns:Publish", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                )
            }
        },
    )


def test_eventbridge_may_publish_for_the_two_rules_only_and_use_the_key(synth_default):
    events_principal = {"Service": "events.amazonaws.com"}
    rule_arns = [
        {"Fn::GetAtt": [Match.string_like_regexp(f"^Notifications{rule}"), "Arn"]}
        for rule in ("ExecutionEnded", "ModelRegistered")
    ]
    synth_default.template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Allow",
                                "Action": "sns:Publish",
                                "Principal": events_principal,
                                "Resource": TOPIC,
                                "Condition": {"ArnEquals": {"aws:SourceArn": rule_arns}},
                            }
                        )
                    ]
                )
            }
        },
    )
    # and no statement lets EventBridge publish for any other rule (aws_events_targets.SnsTopic adds one without a condition)
    statements = [
        s for p in resources(synth_default, "AWS::SNS::TopicPolicy") for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert [s for s in statements if s.get("Principal") == events_principal and "Condition" not in s] == []
    synth_default.template.has_resource_properties(
        "AWS::KMS::Key",
        {
            "KeyPolicy": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Effect": "Allow", "Principal": events_principal, "Action": ["kms:Decrypt", "kms:GenerateDataKey*"]}
                        )
                    ]
                )
            }
        },
    )
    # no aws:SourceArn/aws:SourceAccount on the key: the SNS Developer Guide says KMS does not support them for
    # EventBridge-to-encrypted-topic delivery, and with one every notification is dropped
    keys = resources(synth_default, "AWS::KMS::Key")
    events_key = [s for k in keys for s in k["Properties"]["KeyPolicy"]["Statement"] if s.get("Principal") == events_principal]
    assert len(events_key) == 1 and "Condition" not in events_key[0]


def test_failed_and_stopped_executions_of_this_pipeline_reach_the_topic_as_a_sentence(synth_any):
    synth_any.template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "State": "ENABLED",
            "EventPattern": {
                "source": ["aws.sagemaker"],
                "detail-type": [PIPELINE_EVENT],
                "detail": {
                    "currentPipelineExecutionStatus": ["Failed", "Stopped"],
                    "pipelineArn": [{"equals-ignore-case": PIPELINE_ARN}],
                },
            },
            "Targets": [
                {
                    "Arn": TOPIC,
                    "Id": Match.any_value(),
                    "InputTransformer": {
                        "InputPathsMap": Match.object_like(
                            {
                                "detail-currentPipelineExecutionStatus": "$.detail.currentPipelineExecutionStatus",
                                "detail-pipelineExecutionArn": "$.detail.pipelineExecutionArn",
                            }
                        ),
                        "InputTemplate": Match.string_like_regexp(
                            "SageMaker pipeline HeteroTraining: execution .* <detail-currentPipelineExecutionStatus> at <time>"
                        ),
                    },
                }
            ],
        },
    )


def test_model_versions_of_the_group_reach_the_topic_as_a_sentence(synth_any):
    synth_any.template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": {
                "source": ["aws.sagemaker"],
                "detail-type": [MODEL_PACKAGE_EVENT],
                "detail": {"ModelPackageGroupName": ["HeteroTraining-models"]},
            },
            "Targets": [
                {
                    "Arn": TOPIC,
                    "Id": Match.any_value(),
                    "InputTransformer": {
                        "InputPathsMap": Match.object_like({"detail-ModelPackageVersion": "$.detail.ModelPackageVersion"}),
                        "InputTemplate": Match.string_like_regexp(
                            "Model group HeteroTraining-models: version <detail-ModelPackageVersion> is "
                            "<detail-ModelPackageStatus>, approval <detail-ModelApprovalStatus>"
                        ),
                    },
                }
            ],
        },
    )


def test_an_email_address_subscribes_and_none_is_the_default(synth_default, tmp_path):
    synth_default.template.resource_count_is("AWS::SNS::Subscription", 0)
    mailed = synthesise(tmp_path, **{"hetero:notifyEmail": "ml-ops@example.com", "hetero:pipelineName": "Vision"})
    mailed.template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ml-ops@example.com", "TopicArn": TOPIC}
    )
    # another pipeline name: its own ARN and model group in the patterns
    patterns = [r["Properties"]["EventPattern"] for r in resources(mailed, "AWS::Events::Rule")]
    assert {"ModelPackageGroupName": ["Vision-models"]} in [p["detail"] for p in patterns]
    assert any("pipeline/vision" in str(p["detail"].get("pipelineArn")) for p in patterns)
    assert mailed.validation_error is None

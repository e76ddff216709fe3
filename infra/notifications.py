"""An encrypted SNS topic told of this pipeline's failed and stopped executions and of models registered in its group.

Two EventBridge rules on SageMaker's own events (source ``aws.sagemaker``; shapes in the SageMaker Developer
Guide, "Events that Amazon SageMaker AI sends to Amazon EventBridge") publish to the topic through an input
transformer, so a subscriber reads a sentence, not the raw event. The topic's policy lets EventBridge publish for
these two rules only (``aws:SourceArn``); the topic's KMS key lets EventBridge encrypt what it publishes. An optional
e-mail subscription needs the recipient's confirmation before the first message.
"""

from __future__ import annotations

import jsii
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

PIPELINE_EVENT = "SageMaker Model Building Pipeline Execution Status Change"
MODEL_PACKAGE_EVENT = "SageMaker Model Package State Change"
# Executing and Succeeded need nobody's attention; Stopping is followed by Stopped
NOTIFIED_STATUSES = ("Failed", "Stopped")


class Notifications(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline_name: str,
        pipeline_arn: str,
        model_package_group_name: str,
        email: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        self.key, self.topic = self._encrypted_topic(pipeline_name=pipeline_name, email=email)
        self.execution_rule = self._execution_rule(pipeline_name=pipeline_name, pipeline_arn=pipeline_arn)
        self.model_rule = self._model_rule(model_package_group_name=model_package_group_name)
        # EventBridge publishes under the topic's policy (a target of SNS takes no role: EventBridge User Guide,
        # "Using resource-based policies for Amazon EventBridge", Amazon SNS permissions), scoped to these two rules
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={"ArnEquals": {"aws:SourceArn": [self.execution_rule.rule_arn, self.model_rule.rule_arn]}},
            )
        )

    def _encrypted_topic(self, *, pipeline_name: str, email: str) -> tuple[kms.Key, sns.Topic]:
        key = kms.Key(
            self, "Key", enable_key_rotation=True, description=f"Encrypts the notifications of pipeline {pipeline_name}"
        )
        topic = sns.Topic(
            self,
            "Topic",
            # the mail sender's name: at most 100 characters (SNS CreateTopic, DisplayName); a pipeline name may have 256
            display_name=f"{pipeline_name} pipeline"[:100],
            master_key=key,
            enforce_ssl=True,
        )
        # EventBridge encrypts each message with the topic's key: without these the publish fails silently. No
        # aws:SourceArn/aws:SourceAccount condition here: the SNS Developer Guide ("Managing Amazon SNS encryption keys
        # and costs", sns-key-management.html) says they are not supported in a KMS key policy for EventBridge-to-
        # encrypted-topic delivery, and with one every notification is dropped (awslabs/landing-zone-accelerator-on-aws
        # issue 407, awslabs/aws-deployment-framework issue 769). The key encrypts this topic and nothing else; which
        # rules may publish is scoped by the topic's policy below.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
            )
        )
        if email:
            topic.add_subscription(subscriptions.EmailSubscription(email))
        return key, topic

    def _execution_rule(self, *, pipeline_name: str, pipeline_arn: str) -> events.Rule:
        status = events.EventField.from_path("$.detail.currentPipelineExecutionStatus")
        execution = events.EventField.from_path("$.detail.pipelineExecutionArn")
        return events.Rule(
            self,
            "ExecutionEnded",
            description=f"Tell the topic when an execution of {pipeline_name} fails or is stopped",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=[PIPELINE_EVENT],
                detail={
                    "currentPipelineExecutionStatus": list(NOTIFIED_STATUSES),
                    # the service lower-cases the name in a pipeline's ARN; the pattern need not care
                    "pipelineArn": [{"equals-ignore-case": pipeline_arn}],
                },
            ),
            targets=[
                _TopicTarget(
                    self.topic,
                    message=events.RuleTargetInput.from_text(
                        f"SageMaker pipeline {pipeline_name}: execution "
                        f"{events.EventField.from_path('$.detail.pipelineExecutionDisplayName')} {status} at "
                        f"{events.EventField.time} (started {events.EventField.from_path('$.detail.executionStartTime')}). "
                        f"Why: aws sagemaker list-pipeline-execution-steps --pipeline-execution-arn {execution}"
                    ),
                )
            ],
        )

    def _model_rule(self, *, model_package_group_name: str) -> events.Rule:
        return events.Rule(
            self,
            "ModelRegistered",
            description=f"Tell the topic when a model version in {model_package_group_name} is registered or changes approval",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=[MODEL_PACKAGE_EVENT],
                detail={"ModelPackageGroupName": [model_package_group_name]},
            ),
            targets=[
                _TopicTarget(
                    self.topic,
                    message=events.RuleTargetInput.from_text(
                        f"Model group {model_package_group_name}: version "
                        f"{events.EventField.from_path('$.detail.ModelPackageVersion')} is "
                        f"{events.EventField.from_path('$.detail.ModelPackageStatus')}, approval "
                        f"{events.EventField.from_path('$.detail.ModelApprovalStatus')} "
                        f"({events.EventField.from_path('$.detail.ModelPackageArn')})."
                    ),
                )
            ],
        )


@jsii.implements(events.IRuleTarget)
class _TopicTarget:
    """The topic as a rule's target, with the rule's message. Not `aws_events_targets.SnsTopic`: its `bind` grants
    events.amazonaws.com sns:Publish on the topic for any rule of any account (`topic.grantPublish`, no condition;
    aws-cdk-lib 2.275), which a condition cannot narrow, so the topic's policy statement is added by `Notifications`."""

    def __init__(self, topic: sns.ITopic, *, message: events.RuleTargetInput) -> None:
        self.topic, self.message = topic, message

    def bind(self, rule: events.IRule, id: str | None = None) -> events.RuleTargetConfig:
        return events.RuleTargetConfig(arn=self.topic.topic_arn, input=self.message, target_resource=self.topic)

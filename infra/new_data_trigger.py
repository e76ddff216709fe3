"""Starts the pipeline when new data lands under the input prefix (EventBridge rule on S3 "Object Created").

By default the rule matches one marker object (`<inputPrefix>..._READY`), not every
object: an upload of 3,000 images would otherwise start 3,000 executions. Upload
the data, then the marker.
"""

from __future__ import annotations

from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct


class NewDataTrigger(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        input_prefix: str,
        marker: str,
        pipeline_arn: str,
        parameters: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        key = [{"wildcard": f"{input_prefix}*{marker}"}] if marker else [{"prefix": input_prefix}]
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("events.amazonaws.com"),
            description="Lets EventBridge start the pipeline when new data lands",
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sagemaker:StartPipelineExecution"], resources=[pipeline_arn])
        )
        # no L2 EventBridge target for SageMaker pipelines: the rule is declared at the CloudFormation level
        self.rule = events.CfnRule(
            self,
            "Rule",
            description="Start the pipeline when new training data lands",
            state="ENABLED",
            event_pattern={
                "source": ["aws.s3"],
                "detail-type": ["Object Created"],
                "detail": {"bucket": {"name": [bucket.bucket_name]}, "object": {"key": key}},
            },
            targets=[
                events.CfnRule.TargetProperty(
                    id="Pipeline",
                    arn=pipeline_arn,
                    role_arn=self.role.role_arn,
                    sage_maker_pipeline_parameters=events.CfnRule.SageMakerPipelineParametersProperty(
                        pipeline_parameter_list=[
                            events.CfnRule.SageMakerPipelineParameterProperty(name=name, value=value)
                            for name, value in sorted(parameters.items())
                        ]
                    ),
                )
            ],
        )

"""The function scheduled retraining invokes when it adopts the latest plan (`infra/functions/adopt_plan`).

It may read only the results store (``<prefix>/results/``, where Evaluate writes plan.json), write only
its own log group, start only this pipeline, and read only this pipeline's executions (their status, failed
steps and parameters: a newest execution that found no capacity moves it to the plan's next candidate). The instance-count bounds it checks a plan against
come from the pipeline parameter's declaration (`steps.contract`), so the function and the compiled
pipeline agree.
"""

from __future__ import annotations

import json
from pathlib import Path

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.nag import acknowledge_wildcards
from steps.contract import TUNABLES_BY_NAME

FUNCTION_CODE = Path(__file__).with_name("functions") / "adopt_plan"


class PlanAdoption(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline_name: str,
        pipeline_arn: str,
        bucket: s3.IBucket,
        results_prefix: str,
        parameters: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        # one pair of bounds for the data and the trainer counts a candidate may set: those both parameters accept
        counts = [TUNABLES_BY_NAME[name] for name in ("DataInstanceCount", "DnnInstanceCount")]
        low, high = max(c.minimum for c in counts), min(c.maximum for c in counts)
        executions = _executions(pipeline_arn)
        log = self.log_group = logs.LogGroup(self, "Log", retention=logs.RetentionDays.ONE_YEAR)
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Reads plan.json from the results store and starts the pipeline",
        )
        self.policy = iam.Policy(
            self,
            "Policy",
            roles=[role],
            statements=_statements(bucket, results_prefix=results_prefix, pipeline_arn=pipeline_arn, log=log),
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="handler.handler",
            code=lambda_.Code.from_asset(str(FUNCTION_CODE)),
            timeout=Duration.seconds(60),
            memory_size=256,
            role=role,
            description="Start the pipeline with the data group the latest plan.json recommends",
            log_group=log,
            environment={
                "PIPELINE_NAME": pipeline_name,
                "RESULTS_BUCKET": bucket.bucket_name,
                "RESULTS_PREFIX": results_prefix,
                "PARAMETERS": json.dumps(parameters, sort_keys=True),
                "MIN_DATA_INSTANCE_COUNT": str(low),
                "MAX_DATA_INSTANCE_COUNT": str(high),
            },
        )
        self.function.node.add_dependency(self.policy)
        acknowledge_wildcards(
            Stack.of(self),
            {
                bucket.arn_for_objects(f"{results_prefix}/*"): "Evaluate writes one plan.json per execution under the results "
                "prefix: the prefix is all that is known",
                executions: "The function reads the newest execution of this pipeline, whose id the service assigns",
                f"{log.log_group_arn}:*": "Lambda names the log streams of its own log group",
                f"{self.function.function_arn}:*": "The schedule may invoke this function's versions (the scheduler target grants "
                "the function and its qualifiers)",
            },
        )


def _statements(bucket: s3.IBucket, *, results_prefix: str, pipeline_arn: str, log: logs.LogGroup) -> list[iam.PolicyStatement]:
    """Read the results store, start this pipeline, read its executions, write the function's own log group."""
    return [
        iam.PolicyStatement(
            sid="ListResults",
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{results_prefix}/*"]}},
        ),
        iam.PolicyStatement(
            sid="ReadResults", actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{results_prefix}/*")]
        ),
        iam.PolicyStatement(sid="StartPipeline", actions=["sagemaker:StartPipelineExecution"], resources=[pipeline_arn]),
        iam.PolicyStatement(sid="ListExecutions", actions=["sagemaker:ListPipelineExecutions"], resources=[pipeline_arn]),
        iam.PolicyStatement(
            sid="ReadExecutions",
            actions=["sagemaker:ListPipelineExecutionSteps", "sagemaker:ListPipelineParametersForExecution"],
            resources=[_executions(pipeline_arn)],
        ),
        iam.PolicyStatement(
            sid="Log", actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[f"{log.log_group_arn}:*"]
        ),
    ]


def _executions(pipeline_arn: str) -> str:
    return f"{pipeline_arn}/execution/*"

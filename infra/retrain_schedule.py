"""An EventBridge Scheduler schedule that starts the pipeline for retraining, with parameter overrides."""

from __future__ import annotations

from aws_cdk import Duration, TimeZone
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from constructs import Construct


class RetrainSchedule(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline: sagemaker.IPipeline,
        expression: str,
        time_zone: str,
        parameters: dict[str, str],
        adopt_plan: lambda_.IFunction | None = None,
    ) -> None:
        """``adopt_plan``: a function that starts the pipeline itself with the latest plan (`infra.plan_adoption`)."""
        super().__init__(scope, construct_id)
        if expression.startswith("cron("):
            schedule_expression = scheduler.ScheduleExpression.expression(expression, TimeZone.of(time_zone))
        else:
            schedule_expression = scheduler.ScheduleExpression.expression(expression)
        # a missed start is retried for an hour, not the default day (a late retrain would overlap the next)
        retry = {"retry_attempts": 3, "max_event_age": Duration.hours(1)}
        if adopt_plan is not None:  # the target's own role may invoke that function only
            target = targets.LambdaInvoke(adopt_plan, **retry)
        else:  # the target creates its own role, allowed sagemaker:StartPipelineExecution on this pipeline only
            target = targets.SageMakerStartPipelineExecution(
                pipeline,
                **retry,
                pipeline_parameter_list=[
                    targets.SageMakerPipelineParameter(name=name, value=value) for name, value in sorted(parameters.items())
                ],
            )
        self.schedule = scheduler.Schedule(
            self,
            "Schedule",
            schedule=schedule_expression,
            description="Retrain the heterogeneous-cluster pipeline",
            target=target,
        )

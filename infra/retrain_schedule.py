"""An EventBridge Scheduler schedule that starts the pipeline for retraining, with parameter overrides."""

from __future__ import annotations

from aws_cdk import Duration, TimeZone
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from constructs import Construct


class RetrainSchedule(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, pipeline: sagemaker.IPipeline, expression: str,
                 time_zone: str, parameters: dict[str, str]) -> None:
        super().__init__(scope, construct_id)
        if expression.startswith("cron("):
            schedule_expression = scheduler.ScheduleExpression.expression(expression, TimeZone.of(time_zone))
        else:
            schedule_expression = scheduler.ScheduleExpression.expression(expression)
        # the target creates its own role, allowed sagemaker:StartPipelineExecution on this pipeline only
        self.schedule = scheduler.Schedule(
            self, "Schedule", schedule=schedule_expression, description="Retrain the heterogeneous-cluster pipeline",
            # a missed start is retried for an hour, not the default day (a late retrain would overlap the next)
            target=targets.SageMakerStartPipelineExecution(
                pipeline, retry_attempts=3, max_event_age=Duration.hours(1),
                pipeline_parameter_list=[targets.SageMakerPipelineParameter(name=name, value=value)
                                         for name, value in sorted(parameters.items())]))

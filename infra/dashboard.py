"""A CloudWatch dashboard of the pipeline over its executions: the figures Evaluate publishes (embedded metric format,
`steps.evaluate.emf`) and SageMaker's own count of succeeded and failed executions.

SageMaker publishes ExecutionSucceeded, ExecutionFailed (and ExecutionStarted, ExecutionStopped) per pipeline
in namespace ``AWS/Sagemaker/ModelBuildingPipeline``, dimension PipelineName (SageMaker Developer Guide,
"SageMaker pipelines metrics").
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from steps.evaluate.emf import DIMENSION, METRICS_NAMESPACE, PIPELINE_METRICS

SAGEMAKER_NAMESPACE = "AWS/Sagemaker/ModelBuildingPipeline"
EXECUTION_OUTCOMES = ("ExecutionSucceeded", "ExecutionFailed", "ExecutionStopped")
# one point per day: executions are days apart (a weekly schedule, new data), and a figure is published once per run
PERIOD = Duration.days(1)
WEEKS_SHOWN = 12
SUFFIX = "-pipeline"
# CloudWatch PutDashboard: a name of at most 255 characters; a pipeline name may have 256
MAX_DASHBOARD_NAME = 255


def dashboard_name(pipeline_name: str) -> str:
    return pipeline_name[: MAX_DASHBOARD_NAME - len(SUFFIX)] + SUFFIX


class PipelineDashboard(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, pipeline_name: str) -> None:
        super().__init__(scope, construct_id)
        figures = [
            cloudwatch.GraphWidget(
                title=metric.label,
                left=[
                    cloudwatch.Metric(
                        namespace=METRICS_NAMESPACE,
                        metric_name=metric.name,
                        dimensions_map={DIMENSION: pipeline_name},
                        statistic=cloudwatch.Stats.AVERAGE,
                        period=PERIOD,
                        label=metric.name,
                    )
                ],
                width=8,
            )
            for metric in PIPELINE_METRICS
        ]
        outcomes = cloudwatch.GraphWidget(
            title="Executions by outcome",
            left=[
                cloudwatch.Metric(
                    namespace=SAGEMAKER_NAMESPACE,
                    metric_name=name,
                    dimensions_map={"PipelineName": pipeline_name},
                    statistic=cloudwatch.Stats.SUM,
                    period=PERIOD,
                    label=name.removeprefix("Execution"),
                )
                for name in EXECUTION_OUTCOMES
            ],
            stacked=True,
            width=8,
        )
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=dashboard_name(pipeline_name),
            default_interval=Duration.days(7 * WEEKS_SHOWN),
            widgets=[[outcomes, *figures[:2]], figures[2:]],
        )

import json

from infra.dashboard import dashboard_name
from steps.evaluate.emf import METRICS_NAMESPACE, PIPELINE_METRICS
from tests.support.stacks import resources


def dashboard_body(synth) -> tuple[str, list[dict]]:
    (dashboard,) = resources(synth, "AWS::CloudWatch::Dashboard")
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    # the only tokens are the stack's region: put a region back to read the JSON
    body = json.loads("".join(p if isinstance(p, str) else "us-east-1" for p in parts))
    return dashboard["Properties"]["DashboardName"], body["widgets"]


def test_every_figure_evaluate_publishes_has_a_graph_for_this_pipeline(synth_any):
    name, widgets = dashboard_body(synth_any)
    assert name == "HeteroTraining-pipeline"
    graphed = {tuple(m[:4]) for w in widgets for m in w["properties"]["metrics"]}
    for metric in PIPELINE_METRICS:
        assert (METRICS_NAMESPACE, metric.name, "PipelineName", "HeteroTraining") in graphed, metric.name
    titles = {w["properties"]["title"] for w in widgets}
    assert {m.label for m in PIPELINE_METRICS} <= titles


def test_succeeded_and_failed_executions_are_counted_from_sagemakers_own_metrics(synth_default):
    _, widgets = dashboard_body(synth_default)
    (outcomes,) = [w for w in widgets if w["properties"]["title"] == "Executions by outcome"]
    rows = outcomes["properties"]["metrics"]
    assert [r[:4] for r in rows][:2] == [
        ["AWS/Sagemaker/ModelBuildingPipeline", "ExecutionSucceeded", "PipelineName", "HeteroTraining"],
        ["AWS/Sagemaker/ModelBuildingPipeline", "ExecutionFailed", "PipelineName", "HeteroTraining"],
    ]
    assert all(r[4]["stat"] == "Sum" for r in rows)
    assert sum(w["width"] for w in widgets) == 24 * 2  # two full rows of the 24-column grid


def test_the_longest_pipeline_name_still_makes_a_valid_dashboard_name():
    assert dashboard_name("HeteroTraining") == "HeteroTraining-pipeline"
    assert len(dashboard_name("p" * 256)) == 255 and dashboard_name("p" * 256).endswith("-pipeline")

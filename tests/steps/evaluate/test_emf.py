"""The embedded-metric-format document Evaluate prints, checked against the EMF specification (CloudWatch User
Guide, "Specification: Embedded metric format") and CloudWatch's own unit list (botocore's service model)."""

import json
import math

import botocore.session
import pytest

from steps.evaluate import evaluate as ev
from steps.evaluate import pricing
from steps.evaluate.emf import DIMENSION, METRICS_NAMESPACE, PIPELINE_METRICS, emf_document
from steps.evaluate.prices import load_prices
from tests.support.metrics import metrics, write_json

STANDARD_UNITS = set(botocore.session.get_session().get_service_model("cloudwatch").shape_for("StandardUnit").enum)


def check_emf(doc: dict) -> list[dict]:
    """Every rule of the specification a document can break by itself; returns its metric directives' metrics."""
    meta = doc["_aws"]
    assert isinstance(meta["Timestamp"], int) and not isinstance(meta["Timestamp"], bool) and meta["Timestamp"] > 0
    assert set(meta) <= {"Timestamp", "CloudWatchMetrics", "LogGroupName"}
    published = []
    for directive in meta["CloudWatchMetrics"]:
        assert set(directive) == {"Namespace", "Dimensions", "Metrics"}
        assert 1 <= len(directive["Namespace"]) <= 255 and directive["Namespace"].strip()
        for dimension_set in directive["Dimensions"]:
            assert 1 <= len(dimension_set) <= 30
            for name in dimension_set:  # a dimension refers to a string member of the root
                assert isinstance(doc[name], str) and 1 <= len(doc[name]) <= 1024
        assert 1 <= len(directive["Metrics"]) <= 100
        for metric in directive["Metrics"]:
            assert 1 <= len(metric["Name"]) <= 1024 and metric["Unit"] in STANDARD_UNITS
            value = doc[metric["Name"]]  # a metric refers to a number member of the root
            assert isinstance(value, float) and math.isfinite(value)
            published.append(metric)
    return published


def test_a_run_with_a_baseline_publishes_every_figure():
    doc = pricing.price_performance(metrics("pt_heterogeneous"), metrics("pt_homogeneous"), load_prices(), execution_id="e1")
    emf = emf_document(doc, pipeline_name="HeteroTraining", timestamp_ms=1_764_115_200_000)
    published = check_emf(emf)
    assert [m["Name"] for m in published] == [m.name for m in PIPELINE_METRICS]
    assert emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == METRICS_NAMESPACE
    assert emf["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[DIMENSION]]
    assert emf[DIMENSION] == "HeteroTraining" and emf["ExecutionId"] == "e1"
    assert round(emf["ImprovementPercent"]) == 77  # the AWS blog's PyTorch MNIST + blur table
    hetero = doc["runs"]["heterogeneous"]
    assert emf["SamplesPerSecond"] == hetero["samples_per_second"]
    assert emf["DataWaitPercent"] == pytest.approx(100 * hetero["data_wait_share"])


def test_figures_an_execution_has_none_of_are_left_out():
    doc = pricing.price_performance(metrics(accuracy=None), None, load_prices())
    emf = emf_document(doc, pipeline_name="p", timestamp_ms=1)
    names = [m["Name"] for m in check_emf(emf)]
    assert "ImprovementPercent" not in names and "Accuracy" not in names and "SamplesPerDollar" in names
    assert "ImprovementPercent" not in emf and "ExecutionId" not in emf


def test_metric_names_are_unique_and_leave_the_dimension_alone():
    names = [m.name for m in PIPELINE_METRICS]
    assert len(set(names)) == len(names) and DIMENSION not in names and "ExecutionId" not in names


def test_evaluate_prints_one_emf_line_only_when_given_the_pipeline_name(tmp_path, capsys):
    write_json(tmp_path / "h" / "metrics.json", metrics("pt_heterogeneous"))
    ev.evaluate(heterogeneous=tmp_path / "h", baseline=None, output=tmp_path / "a", execution_id="e1")
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    ev.evaluate(heterogeneous=tmp_path / "h", baseline=None, output=tmp_path / "b", execution_id="e1", pipeline_name="Mine")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(lines) == 1 and lines[0][DIMENSION] == "Mine"
    check_emf(lines[0])

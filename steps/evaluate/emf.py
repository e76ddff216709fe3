"""The pipeline's figures as one CloudWatch embedded metric format (EMF) document, printed by Evaluate.

A processing job's standard output goes to CloudWatch Logs (``/aws/sagemaker/ProcessingJobs``), which
extracts the metrics of every EMF line it receives: the job publishes them without a network call of its
own and without ``cloudwatch:PutMetricData`` (the log agent's PutLogEvents is enough; the
``x-amzn-logs-format: json/emf`` header is optional, CloudWatch User Guide, "Using the PutLogEvents API
to send manually-created embedded metric format logs"). The stack's dashboard (`infra.dashboard`) reads
the names declared here.

    >>> doc = emf_document(price_performance_doc, pipeline_name="HeteroTraining", timestamp_ms=1764115200000)
    >>> print(json.dumps(doc))  # one line: one log event
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

METRICS_NAMESPACE = "Hetero/Pipeline"
DIMENSION = "PipelineName"
# EMF: at most 100 metrics per directive; units are CloudWatch's StandardUnit values
# (CloudWatch User Guide, "Specification: Embedded metric format").
MAX_METRICS = 100


@dataclass(frozen=True)
class PipelineMetric:
    name: str
    unit: str
    label: str  # the dashboard widget's title
    value: Callable[[dict], float | None]  # from price_performance.json; None: nothing to publish this execution


def _hetero(key: str) -> Callable[[dict], float | None]:
    return lambda doc: doc["runs"]["heterogeneous"][key]


def _percent(read: Callable[[dict], float | None]) -> Callable[[dict], float | None]:
    return lambda doc: None if (value := read(doc)) is None else 100 * value


PIPELINE_METRICS = (
    PipelineMetric("SamplesPerSecond", "Count/Second", "Samples/s (heterogeneous run)", _hetero("samples_per_second")),
    PipelineMetric("DataWaitPercent", "Percent", "Data wait, % of step time", _percent(_hetero("data_wait_share"))),
    PipelineMetric("SamplesPerDollar", "None", "Samples per dollar", _hetero("samples_per_dollar")),
    PipelineMetric(
        "ImprovementPercent", "Percent", "Cost per step below the baseline, %", _percent(lambda doc: doc["improvement"])
    ),
    PipelineMetric("Accuracy", "None", "Validation accuracy", _hetero("accuracy")),
)
assert len(PIPELINE_METRICS) <= MAX_METRICS


def emf_document(price_performance: dict, *, pipeline_name: str, timestamp_ms: int) -> dict:
    """The EMF document of one execution's price_performance.json. A figure the execution has none of (no baseline:
    no improvement; a throughput-only run: no accuracy) is left out: EMF values must be numbers."""
    values = {}
    for metric in PIPELINE_METRICS:
        value = metric.value(price_performance)
        if value is not None and math.isfinite(value):
            values[metric.name] = float(value)
    published = [m for m in PIPELINE_METRICS if m.name in values]
    document = {
        "_aws": {
            "Timestamp": int(timestamp_ms),
            "CloudWatchMetrics": [
                {
                    "Namespace": METRICS_NAMESPACE,
                    "Dimensions": [[DIMENSION]],
                    "Metrics": [{"Name": m.name, "Unit": m.unit} for m in published],
                }
            ],
        },
        DIMENSION: pipeline_name,
        **values,
    }
    if price_performance.get("execution_id"):  # a log field, not a dimension: one series per pipeline, not per execution
        document["ExecutionId"] = price_performance["execution_id"]
    return document

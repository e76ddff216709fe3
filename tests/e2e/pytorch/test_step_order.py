"""The whole pipeline in another order the graph allows (the last ready step first), as the service, which starts every
ready step at once, may take it: it ends as the definition order does, with the same outputs."""

from __future__ import annotations

import json

import pytest

from pipeline.graph import resolve_parameters
from pipeline.local.runner import LocalRunner
from pipeline.local.settings import LocalOptions, local_registry

pytestmark = pytest.mark.e2e

# the definition order's run of the same graph (tests/e2e/pytorch/test_pipeline.py)
DEFINITION_ORDER = ["Shard", "TrainHeterogeneous", "TrainBaseline", "Evaluate", "RegisterModel"]
NOT_RUN = {"InvalidParameters", "CheckImprovementFailed", "EvaluateWithoutBaseline", "RegisterModelWithoutBaseline"}


def _first_line(lines: list[str], prefix: str) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith(prefix))


def test_the_pipeline_in_the_reversed_order_ends_with_the_same_outputs(tmp_path, no_leftovers):
    lines: list[str] = []
    params = resolve_parameters({"Epochs": 1, "BatchSize": 32, "ShardSizeMB": 1})
    options = LocalOptions(
        work_dir=tmp_path, sample_images=80, grace_s=10, step_timeout_s=300, order="reversed", echo=lines.append
    )
    result = LocalRunner(params, options).run()

    assert list(result.requests) == ["Shard", "TrainBaseline", "TrainHeterogeneous", "Evaluate", "RegisterModel"]
    assert list(result.requests) != DEFINITION_ORDER and sorted(result.requests) == sorted(DEFINITION_ORDER)
    assert _first_line(lines, "[RunBaselineGate] true") < _first_line(lines, "[CheckParameters] true")
    assert _first_line(lines, "[RegisterModel] model package 1") < _first_line(lines, "[CheckImprovement] false")
    assert set(result.skipped) == NOT_RUN
    assert set(result.outputs) == {"Shard", "Evaluate"} and set(result.jobs) == {"TrainBaseline", "TrainHeterogeneous"}
    assert all(h.exit_code == 0 for job in result.jobs.values() for h in job.hosts)
    runs = result.price_performance["runs"]
    assert runs["baseline"]["samples_per_second"] > 0 and runs["heterogeneous"]["samples_per_second"] > 0
    assert result.price_performance["execution_id"] == result.execution_id
    package = json.loads((local_registry(tmp_path) / "1.json").read_text())
    assert package == result.model_package and package["ModelApprovalStatus"] == "PendingManualApproval"
    assert package["CustomerMetadataProperties"]["execution_id"] == result.execution_id
    (container,) = package["InferenceSpecification"]["Containers"]
    assert container["ModelDataUrl"] == result.jobs["TrainHeterogeneous"].model_artifacts

"""model_metrics.json: what Evaluate hands the register step, and its approval decision."""

from __future__ import annotations

import json

import pytest

from pipeline.sagemaker.validation import validate_request
from steps.evaluate.registration import (
    MAX_METADATA_VALUE,
    STAND_IN,
    approval,
    metadata_value,
    model_metrics_document,
    write_model_metrics,
)
from steps.evaluate.registry import APPROVED, PENDING, LocalRegistry


def package(accuracy: str | None) -> dict:
    return {
        "ModelPackageArn": "arn:aws:sagemaker:us-east-1:1:model-package/g/1",
        "CustomerMetadataProperties": {"accuracy": accuracy},
    }


def price_performance(accuracy=0.9, improvement=0.4) -> dict:
    hetero = {
        "accuracy": accuracy,
        "samples_per_second": 812.5,
        "samples_per_dollar": 1.2e6,
        "bottleneck": {"label": "input-bound"},
    }
    return {"execution_id": "exec-1", "improvement": improvement, "runs": {"heterogeneous": hetero, "baseline": None}}


@pytest.mark.parametrize(
    "accuracy, improvement, threshold, margin, latest, expected, why",
    [
        (0.9, 0.4, -1, -1, None, PENDING, "automatic approval is off"),
        (0.9, 0.4, -1, 0.01, None, APPROVED, "no approved package"),
        (0.9, 0.4, -1, 0.01, package("0.905"), APPROVED, "within 0.01 of the approved 0.9050"),
        (0.9, 0.4, -1, 0.01, package("0.92"), PENDING, "below the approved 0.9200 by more than 0.01"),
        (0.9, 0.1, 0.2, 0.5, None, PENDING, "improvement 0.1 is below ImprovementThreshold 0.2"),
        (0.9, None, 0.2, 0.5, None, PENDING, "improvement none is below ImprovementThreshold 0.2"),
        (0.9, None, -1, 0.5, None, APPROVED, "no approved package"),  # no threshold: nothing to meet
        (None, 0.4, -1, 0.5, None, PENDING, "measured no accuracy"),
        (0.9, 0.4, -1, 0.5, package(None), PENDING, "records no accuracy"),
    ],
)
def test_approval(accuracy, improvement, threshold, margin, latest, expected, why):
    status, reason = approval(accuracy=accuracy, improvement=improvement, threshold=threshold, margin=margin, latest=latest)
    assert status == expected and why in reason


def test_metadata_values_fit_customer_metadata():
    assert metadata_value(None) == "none" and metadata_value(0.123456789) == "0.123457"
    assert metadata_value("accuracy 0.9 (below, 5%)") == "accuracy 0.9  below  5  "
    assert len(metadata_value("x" * 1000)) == MAX_METADATA_VALUE


def test_the_request_it_makes_passes_botocores_model():
    doc = model_metrics_document(
        price_performance(), {"parameters": {"DataInstanceCount": 2}}, status=APPROVED, reason="r", compared_with=None
    )
    assert doc["multiclass_classification_metrics"] == {"accuracy": {"value": 0.9}}
    assert doc["metadata"]["recommendation"] == "DataInstanceCount=2" and doc["metadata"]["bottleneck"] == "input-bound"
    for metadata in (doc["metadata"], STAND_IN["metadata"]):
        validate_request(
            "CreateModelPackage",
            {
                "ModelPackageGroupName": "g",
                "InferenceSpecification": {"Containers": [{"Image": "i", "ModelDataUrl": "s3://b/m.tar.gz"}]},
                "ModelApprovalStatus": doc["approval"]["status"],
                "CustomerMetadataProperties": {**metadata, "execution_id": "exec-1"},
            },
            step="RegisterModel",
        )


def test_a_value_over_the_limit_is_rejected():
    with pytest.raises(Exception, match="CustomerMetadataProperties"):
        validate_request(
            "CreateModelPackage",
            {"ModelPackageGroupName": "g", "CustomerMetadataProperties": {"accuracy": "x" * (MAX_METADATA_VALUE + 1)}},
            step="RegisterModel",
        )


def test_evaluate_compares_with_the_latest_approved_package(tmp_path):
    registry = LocalRegistry(tmp_path / "registry" / "g")
    registry.create(
        {"CustomerMetadataProperties": {"accuracy": "0.95"}, "ModelApprovalStatus": APPROVED}, arn_prefix="arn:aws:sagemaker:r:1"
    )
    registry.create({"CustomerMetadataProperties": {"accuracy": "0.99"}}, arn_prefix="arn:aws:sagemaker:r:1")  # pending: ignored
    out = tmp_path / "out"
    out.mkdir()
    doc = write_model_metrics(out, price_performance(accuracy=0.94), {}, registry=str(registry.folder), threshold=-1, margin=0.02)
    assert doc["approval"] == {
        "status": APPROVED,
        "reason": "accuracy 0.9400 is within 0.02 of the approved 0.9500",
        "compared_with": "arn:aws:sagemaker:r:1:model-package/g/1",
    }
    assert json.loads((out / "model_metrics.json").read_text()) == doc
    strict = write_model_metrics(
        out, price_performance(accuracy=0.94), {}, registry=str(registry.folder), threshold=-1, margin=0.005
    )
    assert strict["approval"]["status"] == PENDING


def test_a_first_local_run_has_no_registry_yet(tmp_path):
    doc = write_model_metrics(tmp_path, price_performance(), {}, registry=str(tmp_path / "none" / "g"), threshold=-1, margin=0)
    assert doc["approval"]["status"] == APPROVED and doc["approval"]["compared_with"] is None

"""What the register step files for the heterogeneous run's model: `model_metrics.json`, written by Evaluate.

The register step (CreateModelPackage) takes its ModelApprovalStatus and CustomerMetadataProperties from
this file (Std:JsonGet), and points ModelMetrics.ModelQuality.Statistics at it. Accuracy sits where
SageMaker Studio's model-quality view looks for it (``multiclass_classification_metrics``).

Approval: PendingManualApproval unless automatic approval is on (AutoApproveMargin >= 0), the improvement
condition holds (improvement >= ImprovementThreshold, or the threshold is -1) and the accuracy is not below
the latest approved package's by more than the margin (the first package of a group has none to be below).
"""

from __future__ import annotations

import re
from pathlib import Path

from steps.common.files import write_json_atomic
from steps.contract import MODEL_METRICS_FILE
from steps.evaluate.registry import APPROVED, EXECUTION_KEY, PENDING, metric, open_registry

# CustomerMetadataProperties values: 1-256 characters of letters, spaces, digits and _.:/=+-@ (botocore's
# CreateModelPackage model, CustomerMetadataValue)
MAX_METADATA_VALUE = 256
_NOT_ALLOWED = re.compile(r"[^\w\s.:/=+\-@]")
NONE = "none"  # a value the run did not measure (a value may not be empty)
METADATA_KEYS = (
    "accuracy",
    "samples_per_second",
    "samples_per_dollar",
    "improvement",
    "bottleneck",
    "recommendation",
)


def metadata_value(value) -> str:
    if value is None:
        return NONE
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return _NOT_ALLOWED.sub(" ", text)[:MAX_METADATA_VALUE] or NONE


def approval(
    *, accuracy: float | None, improvement: float | None, threshold: float, margin: float, latest: dict | None
) -> tuple[str, str]:
    """(ModelApprovalStatus, why) for a new package; ``latest``: the group's latest approved package, if any."""
    if margin < 0:
        return PENDING, "automatic approval is off (AutoApproveMargin -1)"
    if threshold > -1 and (improvement is None or improvement < threshold):
        return PENDING, f"improvement {metadata_value(improvement)} is below ImprovementThreshold {threshold:g}"
    if accuracy is None:
        return PENDING, "the run measured no accuracy"
    if latest is None:
        return APPROVED, "no approved package to compare with"
    try:
        approved = float(metric(latest, "accuracy") or "")
    except ValueError:
        return PENDING, f"the latest approved package {latest.get('ModelPackageArn')} records no accuracy"
    if accuracy < approved - margin:
        return PENDING, f"accuracy {accuracy:.4f} is below the approved {approved:.4f} by more than {margin:g}"
    return APPROVED, f"accuracy {accuracy:.4f} is within {margin:g} of the approved {approved:.4f}"


def model_metrics_document(price_performance: dict, plan: dict, *, status: str, reason: str, compared_with: str | None) -> dict:
    hetero = price_performance["runs"]["heterogeneous"]
    parameters = plan.get("parameters") or {}
    figures = {
        "accuracy": hetero.get("accuracy"),
        "samples_per_second": hetero["samples_per_second"],
        "samples_per_dollar": hetero["samples_per_dollar"],
        "improvement": price_performance.get("improvement"),
        "bottleneck": (hetero.get("bottleneck") or {}).get("label") or None,
        "recommendation": " ".join(f"{k}={v}" for k, v in parameters.items()) or None,
    }
    metadata = {key: metadata_value(figures[key]) for key in METADATA_KEYS}
    metadata[EXECUTION_KEY] = metadata_value(price_performance.get("execution_id"))
    metadata["approval"] = metadata_value(reason)
    return {
        "multiclass_classification_metrics": {"accuracy": {"value": figures["accuracy"]}},
        "price_performance": figures,
        "approval": {"status": status, "reason": reason, "compared_with": compared_with},
        "metadata": metadata,
    }


# What the register step reads before Evaluate has run (request validation when an execution starts):
# every value at its longest.
STAND_IN = {
    "approval": {"status": PENDING, "reason": "", "compared_with": None},
    "metadata": {key: "x" * MAX_METADATA_VALUE for key in (*METADATA_KEYS, EXECUTION_KEY, "approval")},
}


def write_model_metrics(
    output: Path,
    price_performance: dict,
    plan: dict,
    *,
    registry: str | None,
    threshold: float,
    margin: float,
    region: str | None = None,
) -> dict:
    """Decide the approval (reading the registry, in ``region``, only when automatic approval is on) and write
    MODEL_METRICS_FILE."""
    latest = open_registry(registry, region=region).latest_approved() if registry and margin >= 0 else None
    status, reason = approval(
        accuracy=price_performance["runs"]["heterogeneous"].get("accuracy"),
        improvement=price_performance.get("improvement"),
        threshold=threshold,
        margin=margin,
        latest=latest,
    )
    doc = model_metrics_document(
        price_performance, plan, status=status, reason=reason, compared_with=latest.get("ModelPackageArn") if latest else None
    )
    write_json_atomic(Path(output) / MODEL_METRICS_FILE, doc)
    print(f"model approval: {status} ({reason})", flush=True)
    return doc

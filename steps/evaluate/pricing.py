"""price_performance.json's arithmetic: each run's cluster priced by the hour, its cost per 100 steps and samples per
dollar, the speedup and improvement over the baseline, and the one-line summary (checked against the AWS blog tables
in the tests). "Cost per 100 steps" is the figure the AWS heterogeneous-clusters blog tables call cost per step.
Evaluate (`steps.evaluate.evaluate`) writes the document.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from steps.common.errors import UserError
from steps.contract import PRICE_PERFORMANCE_SCHEMA_VERSION
from steps.evaluate.bounds import speedup_bound
from steps.evaluate.diagnosis import diagnose
from steps.evaluate.metrics import validate_metrics
from steps.evaluate.prices import PriceTable


def cluster_price_per_hour(instance_groups: Iterable[Mapping[str, Any]], prices: PriceTable) -> float:
    """On-demand USD/hour of the whole cluster: every instance bills while the job runs."""
    total = math.fsum(g["count"] * prices.hourly(g["instance_type"]) for g in instance_groups)
    # List prices carry at most 4 decimals: this drops float noise (45.032000000000004), not cents.
    return round(total, 9)


def cost_per_100_steps(price_per_hour: float, step_seconds: float) -> float:
    return price_per_hour * step_seconds / 3600 * 100


def samples_per_dollar(samples_per_second: float, price_per_hour: float) -> float:
    return samples_per_second * 3600 / price_per_hour


def parse_billing(text: str | None, label: str) -> dict | None:
    """``BILLABLE/TRAINING`` seconds (DescribeTrainingJob's BillableTimeInSeconds and TrainingTimeInSeconds) -> what
    share of the on-demand price the job paid: below 1 on managed spot, 1 on demand."""
    if not text:
        return None
    try:
        billable, training = (int(float(part)) for part in text.split("/"))
    except ValueError:
        raise UserError(
            f"--billing-{label} {text!r} is not BILLABLE/TRAINING seconds, e.g. 1800/3600", headline="bad argument"
        ) from None
    if training <= 0 or not 0 <= billable:
        raise UserError(f"--billing-{label} {text!r}: training seconds must be > 0 and billable >= 0", headline="bad argument")
    share = min(billable / training, 1.0)
    return {"billable_s": billable, "training_s": training, "billed_share": share, "spot_saving": 1 - share}


def run_summary(metrics: dict, prices: PriceTable, billing: dict | None = None) -> dict:
    """One RUN entry of price_performance.json from one validated metrics document. ``billing`` (`parse_billing`):
    the cluster's price is what the job paid per hour it trained, so a managed spot run is priced at its discount."""
    usd_per_hour = cluster_price_per_hour(metrics["instance_groups"], prices) * (billing["billed_share"] if billing else 1.0)
    step_s = metrics["step_time_s"]["mean"]
    sps = metrics["samples_per_second"]
    groups = [
        {
            "name": g["name"],
            "instance_type": g["instance_type"],
            "count": g["count"],
            "role": g["role"],
            "instance_usd_per_hour": prices.hourly(g["instance_type"]),
        }
        for g in metrics["instance_groups"]
    ]
    return {
        "instance_groups": groups,
        "cluster_usd_per_hour": usd_per_hour,
        "step_time_s": step_s,
        "samples_per_second": sps,
        "cost_per_100_steps": cost_per_100_steps(usd_per_hour, step_s),
        "samples_per_dollar": samples_per_dollar(sps, usd_per_hour),
        "data_wait_share": metrics["data_wait_share"],
        "accuracy": metrics["accuracy"],
        "bottleneck": diagnose(metrics),
        "billing": billing,
        "gpus": metrics.get("gpus"),  # per trainer host: how many it has and used (older metrics: absent)
        "precision": metrics.get("precision"),  # requested and used (steps/train/core/precision.py; older metrics: absent)
        "compile": metrics.get("compile"),  # the Compile parameter, off or on (older metrics: absent)
        "decode_workers": decode_workers(metrics),
    }


def decode_workers(metrics: dict) -> list[dict]:
    """Each decoding host's workers at the start and the end, and how often the retune changed them
    (steps/train/core/retune.py; hosts whose metrics carry no history are left out)."""
    hosts = [*(metrics.get("data_hosts") or []), *(metrics.get("local_decode") or [])]
    return [
        {
            "host": h["host"],
            "start": h["decode_workers"]["start"],
            "end": h["decode_workers"]["end"],
            "changed": h["decode_workers"]["changed"],
            "off": h["decode_workers"].get("off"),
        }
        for h in hosts
        if isinstance(h, dict) and isinstance(h.get("decode_workers"), dict)
    ]


def price_performance(
    hetero_metrics: dict,
    baseline_metrics: dict | None,
    prices: PriceTable,
    *,
    execution_id: str | None = None,
    billing: dict | None = None,
) -> dict:
    """The price_performance.json document; speedup and improvement are null without a baseline.
    ``billing``: run ("heterogeneous", "baseline") -> `parse_billing`, where SageMaker reported it."""
    billing = billing or {}
    hetero = _priced(
        validate_metrics(hetero_metrics, "heterogeneous metrics"), prices, "heterogeneous run", billing.get("heterogeneous")
    )
    baseline = None
    if baseline_metrics is not None:
        baseline = _priced(
            validate_metrics(baseline_metrics, "baseline metrics"), prices, "baseline run", billing.get("baseline")
        )
    speedup = baseline["step_time_s"] / hetero["step_time_s"] if baseline else None
    return {
        "schema_version": PRICE_PERFORMANCE_SCHEMA_VERSION,
        "execution_id": execution_id,
        "evaluated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "prices": prices.describe(),
        "runs": {"heterogeneous": hetero, "baseline": baseline},
        "speedup": speedup,
        "improvement": 1 - hetero["cost_per_100_steps"] / baseline["cost_per_100_steps"] if baseline else None,
        "bound": speedup_bound(baseline_metrics, hetero_metrics, speedup),
    }


def _priced(metrics: dict, prices: PriceTable, label: str, billing: dict | None) -> dict:
    try:
        return run_summary(metrics, prices, billing)
    except UserError as exc:
        raise UserError(f"{label}: {exc.message}") from None


def summary_line(doc: dict) -> str:
    def describe(run):
        cluster = " + ".join(f"{g['count']}x {g['instance_type']}" for g in run["instance_groups"])
        billing = run.get("billing") or {}
        spot = f" (billed {billing['billed_share']:.0%} of on-demand: spot)" if billing.get("spot_saving") else ""
        return (
            f"{cluster} ${run['cluster_usd_per_hour']:.3f}/h{spot}, {run['step_time_s'] * 1000:.0f} ms/step, "
            f"${run['cost_per_100_steps']:.3f}/100 steps"
        )

    line = f"heterogeneous: {describe(doc['runs']['heterogeneous'])}, {doc['runs']['heterogeneous']['bottleneck']['label']}"
    if doc["runs"]["baseline"] is None:
        return line + "; no baseline"
    line = (
        f"{line}; baseline: {describe(doc['runs']['baseline'])}; "
        f"speedup {doc['speedup']:.2f}x, cost per step {abs(doc['improvement']):.0%} "
        f"{'lower' if doc['improvement'] >= 0 else 'higher'}"
    )
    bound = doc.get("bound")
    if bound:
        line += (
            f"; bound {bound['ideal_speedup']:.2f}x from decode {bound['decode_s_per_batch'] * 1e3:.0f} ms + step "
            f"{bound['step_s_per_batch'] * 1e3:.0f} ms alone, {bound['speedup_over_back_to_back']:.2f}x over them back to back"
            f"{' - ABOVE THE BOUND, not a result' if bound['over_bound'] else ''}"
        )
    return line

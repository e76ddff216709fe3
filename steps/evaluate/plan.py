"""plan.json: the data group the next run should use, from this run's measurements, in one step.

Evaluate writes it beside price_performance.json; ``hetero plan`` prints it for any run. The model is
`steps.evaluate.planner`'s (the minimum of compute, input and transport rates), profiled from the
heterogeneous run's metrics.json; the candidates are every CPU instance type of the catalogue that has
a price, at 1..`MAX_DATA_HOSTS` hosts, and staying homogeneous. The recommendation is the cheapest per
epoch among those within 95% of the best predicted rate; ``parameters`` are the pipeline parameters
that start it (``hetero start --apply-plan``). The plan also predicts the run it was made from, so
the model's error on a configuration it has seen is stated beside its advice.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from steps.common.errors import UserError
from steps.evaluate.catalogue import Catalogue
from steps.evaluate.diagnosis import diagnose
from steps.evaluate.planner import ENOUGH_THROUGHPUT, candidates, frontier, measured, predict, profile_from_metrics, recommend
from steps.evaluate.prices import PriceTable

PLAN_SCHEMA_VERSION = 1
MEASURED_BASELINE = "measured: this execution's baseline trained on the same trainer group"
MAX_DATA_HOSTS = 16
FILL_PRICES = "`hetero prices refresh` writes a price file with every training type's price; pass it with --prices FILE"


def plan_document(
    metrics: dict, prices: PriceTable, catalogue: Catalogue, *, execution_id: str | None = None, baseline: dict | None = None
) -> dict:
    """The plan for the run ``metrics`` describes; ``recommendation`` None (with ``reason``) when it cannot plan.
    ``baseline``: the same execution's homogeneous run, whose measured rate replaces the model's for staying
    homogeneous when it trained on the same trainer group."""
    doc = {
        "schema_version": PLAN_SCHEMA_VERSION,
        "execution_id": execution_id,
        "prices": prices.describe(),
        "catalogue": catalogue.describe(),
        "enough_throughput": ENOUGH_THROUGHPUT,
        "recommendation": None,
        "parameters": None,
        "reason": None,
        "unpriced": unpriced_types(prices, catalogue),
    }
    try:
        return {**doc, **_plan(metrics, prices, catalogue, baseline)}
    except UserError as exc:
        return {**doc, "reason": exc.message}


def _plan(metrics: dict, prices: PriceTable, catalogue: Catalogue, baseline: dict | None) -> dict:
    if metrics["mode"] != "heterogeneous":
        raise UserError("the plan is made from a heterogeneous run, whose data hosts measure themselves")
    profile = profile_from_metrics(metrics)
    dnn, data = _group(metrics, "trainer"), _group(metrics, "data")
    if dnn is None or data is None:
        raise UserError(f"instance_groups {[g['name'] for g in metrics['instance_groups']]} lack a trainer or a data group")
    trainer = catalogue.priced(dnn["instance_type"], prices)
    if trainer is None:
        raise UserError(f"no price for the trainer type {dnn['instance_type']}: {FILL_PRICES}")
    epoch_samples = max(1, round(metrics.get("samples_seen", 0) / max(metrics.get("epochs", 1), 1)))
    priced = [t for t in (catalogue.priced(s.name, prices) for s in catalogue.cpu_types()) if t is not None]
    found = candidates(profile, trainer, dnn["count"], priced, max_count=MAX_DATA_HOSTS, epoch_samples=epoch_samples)
    same = ("instance_type", "count")  # the same trainer group, whatever its name
    base = _group(baseline, "trainer") if baseline is not None else None
    if base is not None and [base[k] for k in same] == [dnn[k] for k in same]:
        found[0] = measured(
            trainer,
            dnn["count"],
            baseline["samples_per_second"],
            baseline["data_wait_share"],
            diagnose(baseline)["label"].split("-")[0],
            epoch_samples,
            MEASURED_BASELINE,
        )
    pick = recommend(found)
    current_type = catalogue.priced(data["instance_type"], prices)
    current, notes = None, []
    ran_on = sorted({h["cpus"] for h in metrics.get("data_hosts") or []})
    if current_type is not None and ran_on and ran_on != [current_type.vcpus]:
        # an emulated run: its hosts had fewer CPUs than the type; the model predicts the run as it ran
        notes.append(
            f"the data hosts ran on {'/'.join(map(str, ran_on))} CPU(s), not the {current_type.vcpus} vCPUs of "
            f"{current_type.name} (an emulated run): candidates scale the measured per-CPU rate to each type's vCPUs"
        )
        current_type = replace(current_type, vcpus=ran_on[0])
    if current_type is not None:
        # as it ran: with the decode workers its trainers ran beside their loop (hybrid decode), if any
        predicted = predict(
            profile, trainer, dnn["count"], current_type, data["count"], epoch_samples, spare=profile.local_workers
        )
        current = {
            **predicted.as_dict(),
            "measured_samples_per_second": metrics["samples_per_second"],
            "model_error": predicted.samples_per_second / metrics["samples_per_second"] - 1,
        }
    return {
        "profile": asdict(profile),
        "epoch_samples": epoch_samples,
        "trainer": {"instance_type": trainer.name, "count": dnn["count"]},
        "current": current,
        "recommendation": pick.as_dict(),
        "parameters": _parameters(pick),
        "reason": _reason(pick, current),
        "frontier": [p.as_dict() for p in frontier(found)],
        "candidates": [p.as_dict() for p in found],
        "notes": notes,
    }


def unpriced_types(prices: PriceTable, catalogue: Catalogue) -> list[str]:
    """Every catalogue type (CPU and GPU) the price table has no price for: known hardware the plan cannot cost."""
    return sorted(name for name in catalogue.specs if name not in prices.usd_per_hour)


def _group(metrics: dict, role: str) -> dict | None:
    return next((g for g in metrics["instance_groups"] if g["role"] == role), None)


def _parameters(pick) -> dict | None:
    """Pipeline parameters that run the recommendation (the heterogeneous step needs a data host)."""
    if pick.data is None:
        return None
    return {"DataInstanceType": pick.data, "DataInstanceCount": pick.data_count}


def _reason(pick, current: dict | None) -> str:
    if pick.data is not None:
        what = f"{pick.data_count} x {pick.data}"
    elif MEASURED_BASELINE in pick.notes:
        what = "stay homogeneous: the measured baseline is the cheapest configuration fast enough"
    else:
        what = "stay homogeneous: the trainers' own vCPUs decode fast enough"
    line = (
        f"{what}: {pick.samples_per_second:,.0f} samples/s predicted ({pick.bottleneck}-bound), "
        f"${pick.cluster_price_per_hour:.3f}/h, ${pick.cost_per_epoch:.4f} per epoch"
    )
    if current:
        line += (
            f"; this run: {current['data_count']} x {current['data']}, {current['measured_samples_per_second']:,.0f} "
            f"samples/s measured, {current['samples_per_second']:,.0f} predicted ({current['model_error']:+.1%})"
        )
    return line

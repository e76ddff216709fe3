"""plan.json: the cluster the next run should use, from one or several measured runs of one workload, in one step.

Evaluate writes it beside price_performance.json; ``hetero plan`` prints it for any run or runs. The model is
`steps.evaluate.planner`'s (the minimum of its stage rates), profiled from each run's metrics.json; the
candidates (`steps.evaluate.space`) are, for each GPU model a run measured, every priced type with that
GPU at 1..`MAX_TRAINERS` hosts, homogeneous or fed by 1..`MAX_DATA_HOSTS` hosts of each priced CPU type.
The recommendation is the cheapest per epoch among those within 95% of the best rate; ``fallbacks`` are it
and the next two on another instance type; ``parameters`` are the pipeline parameters that start it
(``hetero start --apply-plan``). The plan also predicts the run it was made from, so the model's error on
a configuration it has seen is stated beside its advice.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from steps.common.errors import UserError
from steps.evaluate.catalogue import Catalogue
from steps.evaluate.planner import (
    ENOUGH_THROUGHPUT,
    AllReduce,
    Inputs,
    fallbacks,
    frontier,
    predict,
    profile_from_metrics,
    recommend,
)
from steps.evaluate.prices import PriceTable
from steps.evaluate.space import Run, check_one_workload, plan_space

PLAN_SCHEMA_VERSION = 2
MEASURED_BASELINE = "measured: this execution's baseline trained on the same trainer group"
MAX_DATA_HOSTS = 16
FILL_PRICES = "`hetero prices refresh` writes a price file with every training type's price; pass it with --prices FILE"
MAX_TRAINERS = 4


def plan_document(
    metrics: dict,
    prices: PriceTable,
    catalogue: Catalogue,
    *,
    execution_id: str | None = None,
    baseline: dict | None = None,
    others: list[Run] = (),
    inputs: Inputs | None = None,
    max_trainers: int = MAX_TRAINERS,
    source: str | None = None,
) -> dict:
    """The plan for the run ``metrics`` describes; ``recommendation`` None (with ``reason``) when it cannot plan.
    ``baseline``: the same execution's homogeneous run, whose measured rate replaces the model's for its cluster;
    ``others``: runs of the same workload on other clusters (other GPU types: each predicts within its GPU model);
    ``source``: what names ``metrics`` in the plan (default the execution id)."""
    inputs = inputs or Inputs()
    doc = {
        "schema_version": PLAN_SCHEMA_VERSION,
        "execution_id": execution_id,
        "prices": prices.describe(),
        "catalogue": catalogue.describe(),
        "enough_throughput": ENOUGH_THROUGHPUT,
        "inputs": asdict(inputs),
        "recommendation": None,
        "parameters": None,
        "reason": None,
        "unpriced": unpriced_types(prices, catalogue),
    }
    name = source or execution_id or "this run"
    runs = [Run(name, metrics)] + ([Run(f"{name}'s baseline", baseline, MEASURED_BASELINE)] if baseline else [])
    try:
        return {**doc, **_plan(runs + list(others), prices, catalogue, inputs, max_trainers)}
    except UserError as exc:
        return {**doc, "reason": exc.message}


def _plan(runs: list[Run], prices: PriceTable, catalogue: Catalogue, inputs: Inputs, max_trainers: int) -> dict:
    check_one_workload(runs)
    first = next((r for r in runs if r.metrics["mode"] == "heterogeneous"), None)
    if first is None:
        raise UserError("the plan is made from a heterogeneous run, whose data hosts measure themselves")
    metrics = first.metrics
    profile = profile_from_metrics(metrics, first.source)
    dnn, data = first.group("trainer"), first.group("data")
    if dnn is None or data is None:
        raise UserError(f"instance_groups {[g['name'] for g in metrics['instance_groups']]} lack a trainer or a data group")
    trainer = catalogue.priced(dnn["instance_type"], prices)
    if trainer is None:
        raise UserError(f"no price for the trainer type {dnn['instance_type']}: {FILL_PRICES}")
    epoch_samples = max(1, round(metrics.get("samples_seen", 0) / max(metrics.get("epochs", 1), 1)))
    found, skipped = plan_space(
        runs, catalogue, prices, epoch_samples=epoch_samples, max_trainers=max_trainers, max_data=MAX_DATA_HOSTS, inputs=inputs
    )
    # adequate: what the measured trainer group would do fed well enough; any cluster that reaches it may be cheaper
    own = [p.samples_per_second for p in found if (p.trainer, p.trainers) == (trainer.name, dnn["count"])]
    target = ENOUGH_THROUGHPUT * max(own)
    pick = recommend(found, target)
    current, notes = _current(metrics, profile, trainer, dnn, data, catalogue, prices, epoch_samples, inputs)
    notes += skipped
    return {
        "profile": asdict(profile),
        "runs": [{"source": r.source, "cluster": list(r.cluster)} for r in runs],
        "epoch_samples": epoch_samples,
        "trainer": {"instance_type": trainer.name, "count": dnn["count"]},
        "current": current,
        "recommendation": pick.as_dict(),
        "parameters": _parameters(pick),
        "reason": _reason(pick, current),
        "target_samples_per_second": target,
        "fallbacks": [{**p.as_dict(), "parameters": _parameters(p)} for p in fallbacks(found, target)],
        "frontier": [p.as_dict() for p in frontier(found)],
        "candidates": [p.as_dict() for p in found],
        "notes": notes,
    }


def _current(metrics, profile, trainer, dnn, data, catalogue, prices, epoch_samples, inputs) -> tuple[dict | None, list]:
    """The run as it ran, predicted, beside what it measured: the model's error on a cluster it has seen."""
    current_type = catalogue.priced(data["instance_type"], prices)
    notes = []
    ran_on = sorted({h["cpus"] for h in metrics.get("data_hosts") or []})
    if current_type is not None and ran_on and ran_on != [current_type.vcpus]:
        # an emulated run: its hosts had fewer CPUs than the type; the model predicts the run as it ran
        notes.append(
            f"the data hosts ran on {'/'.join(map(str, ran_on))} CPU(s), not the {current_type.vcpus} vCPUs of "
            f"{current_type.name} (an emulated run): candidates scale the measured per-CPU rate to each type's vCPUs"
        )
        current_type = replace(current_type, vcpus=ran_on[0])
    if current_type is None:
        return None, notes
    # as it ran: with the decode workers its trainers ran beside their loop (hybrid decode), if any
    predicted = predict(
        replace(profile, trainers=1, trainer_gpus=trainer.gpus or 1),
        trainer,
        dnn["count"],
        current_type,
        data["count"],
        epoch_samples,
        spare=profile.local_workers,
        inputs=inputs,
        allreduce=AllReduce(0.0, max(dnn["count"], 2), "all-reduce as measured in this run's step"),
    )
    current = {
        **predicted.as_dict(),
        "measured_samples_per_second": metrics["samples_per_second"],
        "model_error": predicted.samples_per_second / metrics["samples_per_second"] - 1,
    }
    return current, notes


def unpriced_types(prices: PriceTable, catalogue: Catalogue) -> list[str]:
    """Every catalogue type (CPU and GPU) the price table has no price for: known hardware the plan cannot cost."""
    return sorted(name for name in catalogue.specs if name not in prices.usd_per_hour)


def _parameters(pick) -> dict | None:
    """Pipeline parameters that run the recommendation (the heterogeneous step needs a data host)."""
    if pick.data is None:
        return None
    return {
        "DnnInstanceType": pick.trainer,
        "DnnInstanceCount": pick.trainers,
        "DataInstanceType": pick.data,
        "DataInstanceCount": pick.data_count,
    }


def _reason(pick, current: dict | None) -> str:
    if pick.data is not None:
        what = f"{pick.trainers} x {pick.trainer} fed by {pick.data_count} x {pick.data}"
    elif MEASURED_BASELINE in pick.notes:
        what = "stay homogeneous: the measured baseline is the cheapest configuration fast enough"
    else:
        what = f"stay homogeneous on {pick.trainers} x {pick.trainer}: the trainers' own vCPUs decode fast enough"
    line = (
        f"{what}: {pick.samples_per_second:,.0f} samples/s {pick.rate_source} ({pick.bottleneck}-bound), "
        f"${pick.cluster_price_per_hour:.3f}/h, ${pick.cost_per_epoch:.4f} per epoch"
    )
    if current:
        line += (
            f"; this run: {current['data_count']} x {current['data']}, {current['measured_samples_per_second']:,.0f} "
            f"samples/s measured, {current['samples_per_second']:,.0f} predicted ({current['model_error']:+.1%})"
        )
    return line

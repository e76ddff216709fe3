"""plan.json: the cluster the next run should use, from one or several measured runs of one workload, in one step.

Evaluate writes it beside price_performance.json; ``hetero plan`` prints it for any run or runs. The model is
`steps.evaluate.planner`'s (the minimum of its stage rates), profiled from each run's metrics.json; the
candidates (`steps.evaluate.space`) are, for each GPU model a run measured, every priced type with that
GPU at 1..`MAX_TRAINERS` hosts, homogeneous or fed by 1..`MAX_DATA_HOSTS` hosts of each priced CPU type.
The recommendation is the cheapest per epoch among those within 95% of the best rate; ``fallbacks`` are it
and the next two on another instance type; ``parameters`` are the pipeline parameters that start it
(``hetero start --apply-plan``). The plan also predicts each run it was made from as it ran (``measured``;
``current`` is the first), so the model's error on a configuration it has seen is stated beside its advice.

One basis per table (``basis``): every candidate, the pick, the fallbacks and the frontier are at the
instance types' own vCPUs. A run emulated on fewer CPUs (the local runner) measured another machine: its
cluster is predicted at the types' vCPUs like every other, and only its ``measured`` row is at the CPUs
it ran on. Each price's source and date are in ``prices`` (each row: ``price_as_of``, its oldest).

Schema versions: 3 states the basis, ``measured``, each row's ``basis``, ``measured_gap`` and
``price_as_of``, and the prices' sources; a plan of version 2 is shown but not applied (its rows may
compare an emulated measurement with real-vCPU predictions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from steps.common.errors import UserError
from steps.evaluate.catalogue import Catalogue
from steps.evaluate.choice import ENOUGH_THROUGHPUT, TIE_SHARE, fallbacks, frontier, recommend
from steps.evaluate.planner import (
    MEASURED,
    REAL_VCPUS,
    STAGE_MATCH,
    Inputs,
    profile_from_metrics,
)
from steps.evaluate.prices import PriceTable
from steps.evaluate.space import Run, check_one_workload, plan_space

PLAN_SCHEMA_VERSION = 3  # 3: one basis (``basis``), ``measured``, rows' basis/measured_gap/price_as_of, price sources
APPLICABLE_PLAN_VERSIONS = (3,)  # a plan of another version is shown, never applied (pipeline/plan_view.py, adopt_plan)
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
    others: Sequence[Run] = (),
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
        "tie_share": TIE_SHARE,
        "stage_match": STAGE_MATCH,
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
    found, notes, ran = plan_space(
        runs, catalogue, prices, epoch_samples=epoch_samples, max_trainers=max_trainers, max_data=MAX_DATA_HOSTS, inputs=inputs
    )
    # adequate: what the measured trainer group would do fed well enough; any cluster that reaches it may be cheaper
    own = [p.samples_per_second for p in found if (p.trainer, p.trainers) == (trainer.name, dnn["count"])]
    target = ENOUGH_THROUGHPUT * max(own)
    pick = recommend(found, target)
    current = ran.get(first.source)
    return {
        "basis": _basis(runs, catalogue),
        "profile": asdict(profile),
        "runs": [{"source": r.source, "cluster": list(r.cluster), "cpus": r.ran_on()} for r in runs],
        "epoch_samples": epoch_samples,
        "trainer": {"instance_type": trainer.name, "count": dnn["count"]},
        "current": current,
        "measured": [ran[r.source] for r in runs if r.source in ran],
        "recommendation": pick.as_dict(),
        "parameters": _parameters(pick),
        "reason": _reason(pick, current),
        "target_samples_per_second": target,
        "fallbacks": [{**p.as_dict(), "parameters": _parameters(p)} for p in fallbacks(found, target)],
        "frontier": [p.as_dict() for p in frontier(found)],
        "candidates": [p.as_dict() for p in found],
        "notes": notes,
    }


def _basis(runs: list[Run], catalogue: Catalogue) -> dict:
    """What every row's rate is for, stated once: the types' own vCPUs; which runs were emulated, and where they
    show as they ran."""
    emulated = [r for r in runs if r.emulated(catalogue)]
    text = "every row at the instance types' own vCPUs"
    if emulated:
        names = " and ".join(r.source for r in emulated)
        text += (
            f", predicted: {names} ran emulated on fewer CPUs (notes), so their clusters are predicted there like every "
            "other; as they ran, they are shown under measured only, beside what they measured (the model's error)"
        )
    else:
        text += ": the runs' own clusters as measured, the rest predicted"
    return {"rows": REAL_VCPUS, "emulated_runs": [r.source for r in emulated], "text": text}


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


def bound_text(p: dict) -> str:
    """What sets a row's rate: its stage, or for a measured rate no stage explains, the gap to the slowest."""
    if p["bottleneck"] != MEASURED:
        return p["bottleneck"]
    slowest = min(p["stage_rates"], key=p["stage_rates"].get)
    return f"measured, {p['measured_gap']:+.0%} vs {slowest}"


def ran_on_text(row: dict) -> str:
    """The CPUs a ``measured`` row is predicted for: its types' vCPUs, or an emulated run's, e.g. ``trainer 1 CPU,
    data 1 CPU``; ``not stated`` in a plan of schema version 2."""
    if "basis" not in row:
        return "not stated"
    if row["basis"] == REAL_VCPUS:
        return "its vCPUs"
    return ", ".join(f"{role} {n} CPU" for role, n in (row.get("cpus") or {}).items())


def _reason(pick, current: dict | None) -> str:
    if pick.data is not None:
        what = f"{pick.trainers} x {pick.trainer} fed by {pick.data_count} x {pick.data}"
    elif MEASURED_BASELINE in pick.notes:
        what = "stay homogeneous: the measured baseline is the cheapest configuration fast enough"
    else:
        what = f"stay homogeneous on {pick.trainers} x {pick.trainer}: the trainers' own vCPUs decode fast enough"
    bound = bound_text(pick.as_dict()) + ("" if pick.bottleneck == MEASURED else "-bound")
    line = (
        f"{what}: {pick.samples_per_second:,.0f} samples/s {pick.rate_source} at the types' vCPUs ({bound}), "
        f"${pick.cluster_price_per_hour:.3f}/h, ${pick.cost_per_epoch:.4f} per epoch"
    )
    if current:
        where = _cpus_text(current) if current["basis"] != REAL_VCPUS else "its vCPUs"
        line += (
            f"; this run: {current['data_count']} x {current['data']}, {current['measured_samples_per_second']:,.0f} "
            f"samples/s measured on {where}, {current['samples_per_second']:,.0f} predicted there "
            f"({current['model_error']:+.1%})"
        )
    return line


def _cpus_text(row: dict) -> str:
    cpus = row.get("cpus") or {}
    parts = [f"{n} CPU(s) per {'trainer' if role == 'trainer' else 'data host'}" for role, n in cpus.items()]
    return " and ".join(parts) or "its hosts' CPUs"

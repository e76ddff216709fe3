"""`hetero plan`: a run's plan.json (steps/evaluate/plan.py) as text, and reading it back for `hetero start --apply-plan`."""

from __future__ import annotations

from pathlib import Path

from steps.common.errors import UserError
from steps.contract import BASELINE_METRICS_FILE, HETEROGENEOUS_METRICS_FILE, PLAN_FILE, PRICE_PERFORMANCE_FILE
from steps.evaluate.catalogue import load_catalogue
from steps.evaluate.errors import DocumentNotFound
from steps.evaluate.evaluate import history
from steps.evaluate.metrics import load_metrics, validate_metrics
from steps.evaluate.plan import FILL_PRICES, plan_document
from steps.evaluate.prices import load_prices
from steps.evaluate.report import report_html
from steps.evaluate.store import open_store, validate_execution_id


def plan_for(
    *,
    execution_id: str | None,
    results: str,
    metrics_path: str | None = None,
    baseline_path: str | None = None,
    prices_file: str | Path | None = None,
) -> dict:
    """The plan of an execution (from the metrics Evaluate stored) or of a metrics.json (and the baseline run's, whose
    measured rate then stands for staying homogeneous), with today's prices."""
    baseline = None
    if baseline_path and not metrics_path:
        raise UserError("--baseline goes with --metrics (an execution's plan reads its own baseline run)", headline="bad option")
    if metrics_path:
        metrics = load_metrics(metrics_path)
        baseline = load_metrics(baseline_path) if baseline_path else None
    else:
        if not execution_id:
            raise UserError("name an execution id (see `hetero executions`) or pass --metrics PATH", headline="bad option")
        store = open_store(results)
        try:
            metrics = store.get_json(validate_execution_id(execution_id), HETEROGENEOUS_METRICS_FILE)
        except DocumentNotFound as exc:
            raise UserError(
                f"no {HETEROGENEOUS_METRICS_FILE} for execution {execution_id!r} in {results} ({exc.message}): "
                "Evaluate stores it when the execution gets that far",
                headline="no results",
            ) from None
        metrics = validate_metrics(metrics, f"{results}/{execution_id}/{HETEROGENEOUS_METRICS_FILE}")
        baseline = _optional(store, execution_id, BASELINE_METRICS_FILE)  # none: staying homogeneous is modelled
        if baseline is not None:
            baseline = validate_metrics(baseline, f"{results}/{execution_id}/{BASELINE_METRICS_FILE}")
    return plan_document(metrics, load_prices(prices_file), load_catalogue(), execution_id=execution_id, baseline=baseline)


def stored_plan_parameters(results: str, execution_id: str, fallback: int = 0) -> dict:
    """The pipeline parameters of candidate ``fallback`` (0: the recommendation) of the plan Evaluate stored for
    ``execution_id``, for `hetero start --apply-plan [--fallback N]`."""
    try:
        plan = open_store(results).get_json(validate_execution_id(execution_id), PLAN_FILE)
    except DocumentNotFound as exc:
        raise UserError(
            f"no {PLAN_FILE} for execution {execution_id!r} in {results} ({exc.message}): Evaluate writes it; "
            "check the id with `hetero executions`",
            headline="no plan",
        ) from None
    if plan.get("recommendation") is None:
        raise UserError(f"execution {execution_id} has no plan to apply: {plan.get('reason')}", headline="no plan")
    candidates = plan_candidates(plan)
    if not 0 <= fallback < len(candidates):
        shown = "; ".join(f"{i}: {_candidate_text(c)}" for i, c in enumerate(candidates))
        raise UserError(
            f"--fallback {fallback}: execution {execution_id}'s plan has {len(candidates)} candidate(s) ({shown}); "
            f"pick 0 to {len(candidates) - 1}",
            headline="bad option",
        )
    params = candidates[fallback]
    if params is None:
        which = "the plan is to stay homogeneous" if fallback == 0 else f"its candidate {fallback} stays homogeneous"
        raise UserError(
            f"execution {execution_id}'s {which} ({plan['reason']}): there is no data group to apply; run the baseline alone",
            headline="no plan",
        )
    return {k: str(v) for k, v in params.items()}


def plan_candidates(plan: dict) -> list[dict | None]:
    """The pipeline parameters of the plan's candidates in order: its ``fallbacks`` (the recommendation first, then
    the next cheapest adequate ones of another type), or the recommendation alone; None: a candidate with no data
    group. The plan-adopting function (infra/functions/adopt_plan, which runs without this package) reads them alike."""
    fallbacks = plan.get("fallbacks")
    if not fallbacks:
        return [plan.get("parameters")]
    return [_candidate_parameters(plan, c) for c in fallbacks]


def _candidate_parameters(plan: dict, candidate: dict) -> dict | None:
    if "parameters" in candidate:
        return candidate["parameters"]
    if candidate.get("data") is None:
        return None
    params = {"DataInstanceType": candidate["data"], "DataInstanceCount": candidate.get("data_count")}
    trainer = plan.get("trainer") or {}
    if candidate.get("trainer") and (candidate["trainer"], candidate.get("trainers")) != (
        trainer.get("instance_type"),
        trainer.get("count"),
    ):
        params.update(DnnInstanceType=candidate["trainer"], DnnInstanceCount=candidate.get("trainers"))
    return params


def _candidate_text(params: dict | None) -> str:
    return "stay homogeneous" if params is None else " ".join(f"{k}={v}" for k, v in params.items())


def render_plan(plan: dict) -> str:
    if plan.get("recommendation") is None:
        return "\n".join([f"no plan: {plan['reason']}", *_unpriced_lines(plan)])
    rows = [("data group", "samples/s", "bound by", "GPU busy", "$/h", "$/epoch", "samples per $")]
    shown = plan["frontier"] + ([{**plan["current"], "this_run": True}] if plan.get("current") else [])
    for p in shown:
        group = "none (homogeneous)" if p["data"] is None else f"{p['data_count']} x {p['data']}"
        group += " (this run)" if p.get("this_run") else ""
        rows.append(
            (
                group,
                f"{p['samples_per_second']:,.0f}",
                p["bottleneck"],
                f"{p['gpu_busy_share']:.0%}",
                f"{p['cluster_price_per_hour']:.3f}",
                f"{p['cost_per_epoch']:.4f}",
                f"{p['samples_per_dollar']:,.0f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    table.insert(1, "  ".join("-" * w for w in widths))
    lines = [
        f"plan: {plan['reason']}",
        f"cost/throughput frontier ({plan['epoch_samples']:,} samples per epoch, "
        f"{plan['trainer']['count']} x {plan['trainer']['instance_type']} training):",
        *table,
    ]
    notes = list(plan.get("notes", [])) + sorted({n for p in plan["frontier"] for n in p.get("notes", [])})
    lines += [f"note: {n}" for n in notes]
    if plan.get("parameters"):
        lines.append("apply: " + " ".join(f"--param {k}={v}" for k, v in plan["parameters"].items()))
    return "\n".join(lines + _unpriced_lines(plan))


def _unpriced_lines(plan: dict) -> list[str]:
    """The catalogue types the plan could not cost, by name, and what prices them (never dropped unseen)."""
    unpriced = plan.get("unpriced") or []
    if not unpriced:
        return []
    return [
        f"unpriced ({len(unpriced)} types, known hardware, no price, never recommended): {', '.join(unpriced)}",
        f"  {FILL_PRICES}",
    ]


def execution_report(*, results: str, execution_id: str | None) -> tuple[str, str]:
    """(execution id, report.html) of ``execution_id``, or of the newest execution, with the history of all of them."""
    store = open_store(results)
    past = history(store, {})  # every stored verdict, oldest first: read once, for the page and to find the newest
    if execution_id is None:
        if not past:
            raise UserError(
                f"no executions with results in {results}: run `hetero run` (or give --results)", headline="no results"
            )
        execution_id = past[-1]["execution_id"]
    validate_execution_id(execution_id)
    doc = next((d for d in past if d.get("execution_id") == execution_id), None)
    if doc is None:
        raise UserError(f"no {PRICE_PERFORMANCE_FILE} for execution {execution_id!r} in {results}", headline="no results")
    page = report_html(
        execution_id=execution_id,
        price_performance=doc,
        plan=_optional(store, execution_id, PLAN_FILE),
        heterogeneous=_optional(store, execution_id, HETEROGENEOUS_METRICS_FILE),
        baseline=_optional(store, execution_id, BASELINE_METRICS_FILE),
        history=past,
    )
    return execution_id, page


def _optional(store, execution_id: str, name: str) -> dict | None:
    try:
        return store.get_json(execution_id, name)
    except DocumentNotFound:
        return None

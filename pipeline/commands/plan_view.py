"""`hetero plan`: a run's plan.json (steps/evaluate/plan.py) as text, and reading it back for `hetero start --apply-plan`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.local.settings import local_registry
from steps.common.errors import UserError
from steps.contract import BASELINE_METRICS_FILE, HETEROGENEOUS_METRICS_FILE, PLAN_FILE, PRICE_PERFORMANCE_FILE
from steps.evaluate.catalogue import load_catalogue
from steps.evaluate.errors import DocumentNotFound
from steps.evaluate.evaluate import history
from steps.evaluate.metrics import load_metrics, validate_metrics
from steps.evaluate.plan import (
    APPLICABLE_PLAN_VERSIONS,
    FILL_PRICES,
    MAX_TRAINERS,
    bound_text,
    plan_document,
    ran_on_text,
)
from steps.evaluate.planner import REAL_VCPUS, Inputs
from steps.evaluate.prices import load_prices, price_lines
from steps.evaluate.registry import EXECUTION_KEY, LocalRegistry, metric, open_registry
from steps.evaluate.report import report_html
from steps.evaluate.space import Run, check_one_workload
from steps.evaluate.store import open_store, validate_execution_id


def plan_for(
    *,
    execution_ids: list[str],
    results: str,
    metrics_paths: Sequence[str] = (),
    baseline_path: str | None = None,
    prices_file: str | Path | None = None,
    inputs: Inputs | None = None,
    max_trainers: int = MAX_TRAINERS,
) -> dict:
    """The plan of one or several executions (from the metrics Evaluate stored, each with its baseline run) or of one
    or several metrics.json (the first with ``baseline_path``, whose measured rate then stands for its cluster), with
    today's prices. Runs of different workloads are refused."""
    if baseline_path and not metrics_paths:
        raise UserError("--baseline goes with --metrics (an execution's plan reads its own baseline run)", headline="bad option")
    if metrics_paths and execution_ids:
        raise UserError("give execution ids or --metrics files, not both", headline="bad option")
    if metrics_paths:
        runs = [Run(str(path), load_metrics(path)) for path in metrics_paths]
        baseline = load_metrics(baseline_path) if baseline_path else None
        if baseline is not None:
            runs.insert(1, Run(str(baseline_path), baseline))
    else:
        if not execution_ids:
            raise UserError("name an execution id (see `hetero executions`) or pass --metrics PATH", headline="bad option")
        runs = _stored_runs(open_store(results), results, execution_ids)
        baseline = next((r.metrics for r in runs[1:2] if r.source == f"{execution_ids[0]}'s baseline"), None)
    check_one_workload(runs)
    first, others = runs[0], [r for r in runs[1:] if r.metrics is not baseline]
    return plan_document(
        first.metrics,
        load_prices(prices_file),
        load_catalogue(),
        execution_id=execution_ids[0] if execution_ids else None,
        source=first.source,
        baseline=baseline,
        others=others,
        inputs=inputs,
        max_trainers=max_trainers,
    )


def _stored_runs(store, results: str, execution_ids: list[str]) -> list[Run]:
    """Each execution's heterogeneous run, then its baseline run when it has one."""
    runs = []
    for execution_id in execution_ids:
        try:
            doc = store.get_json(validate_execution_id(execution_id), HETEROGENEOUS_METRICS_FILE)
        except DocumentNotFound as exc:
            raise UserError(
                f"no {HETEROGENEOUS_METRICS_FILE} for execution {execution_id!r} in {results} ({exc.message}): "
                "Evaluate stores it when the execution gets that far",
                headline="no results",
            ) from None
        runs.append(Run(execution_id, validate_metrics(doc, f"{results}/{execution_id}/{HETEROGENEOUS_METRICS_FILE}")))
        baseline = _optional(store, execution_id, BASELINE_METRICS_FILE)  # none: its homogeneous cluster is modelled
        if baseline is not None:
            source = f"{results}/{execution_id}/{BASELINE_METRICS_FILE}"
            runs.append(Run(f"{execution_id}'s baseline", validate_metrics(baseline, source)))
    return runs


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
    if plan.get("schema_version") not in APPLICABLE_PLAN_VERSIONS:
        raise UserError(
            f"execution {execution_id}'s {PLAN_FILE} has schema version {plan.get('schema_version')}; plans of version "
            f"{' and '.join(map(str, APPLICABLE_PLAN_VERSIONS))} are applied (an older one does not state its basis: its "
            "rows may compare an emulated run's measurement with predictions at the types' vCPUs); run the pipeline "
            "again for a current plan, or pass the parameters with --param",
            headline="old plan",
        )
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
    the next cheapest adequate ones of another type) at the types' own vCPUs, or the recommendation alone; None: a
    candidate with no data group. The plan-adopting function (infra/functions/adopt_plan, which runs without this
    package) reads them alike."""
    fallbacks = [c for c in plan.get("fallbacks") or [] if c.get("basis", REAL_VCPUS) == REAL_VCPUS]
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
    """The basis, the prices' sources and dates, the frontier (most samples per dollar first, each row's rate measured
    by which run or predicted), each run as it ran beside its measurement, and the fallbacks."""
    if plan.get("recommendation") is None:
        return "\n".join([f"no plan: {plan['reason']}", *_unpriced_lines(plan)])
    shown = sorted(plan["frontier"], key=lambda p: -p["samples_per_dollar"])
    dated = len({p.get("price_as_of") for p in shown}) > 1
    head: tuple[str, ...] = ("cluster", "samples/s", "rate", "bound by", "GPU busy", "$/h", "$/epoch", "samples per $")
    rows = []
    for p in shown:
        rate = f"{p.get('rate_source', 'predicted')} ({p['run']})" if p.get("run") else p.get("rate_source", "predicted")
        row: tuple[str, ...] = (_cluster(p), f"{p['samples_per_second']:,.0f}", rate, bound_text(p), f"{p['gpu_busy_share']:.0%}")
        row += (f"{p['cluster_price_per_hour']:.3f}", f"{p['cost_per_epoch']:.4f}", f"{p['samples_per_dollar']:,.0f}")
        rows.append(row + ((p.get("price_as_of") or "undated",) if dated else ()))
    lines = [
        f"plan: {plan['reason']}",
        f"basis: {_basis_text(plan)}",
        *_price_lines(plan),
        f"cost/throughput frontier ({plan['epoch_samples']:,} samples per epoch; runs: "
        f"{', '.join(r['source'] for r in plan.get('runs', []))}):",
        *_table([head + (("prices as of",) if dated else ()), *rows], left=(0, 2, 3)),
    ]
    ran = plan.get("measured") or ([plan["current"]] if plan.get("current") else [])
    if ran:
        lines.append("as the runs ran (the model against each measurement; not candidates):")
        head = ("cluster", "run", "on", "predicted", "bound by", "measured", "error")
        lines += _table([head, *(_ran_row(r) for r in ran)], left=(0, 1, 2, 4))
    notes = list(plan.get("notes", [])) + sorted({n for p in plan["frontier"] for n in p.get("notes", [])})
    lines += [f"note: {n}" for n in notes]
    lines += [f"fallback {i}: {_cluster(p)}" for i, p in enumerate(plan.get("fallbacks", [])[1:], 1)]
    if plan.get("parameters"):
        lines.append("apply: " + " ".join(f"--param {k}={v}" for k, v in plan["parameters"].items()))
    return "\n".join(lines + _unpriced_lines(plan))


def _table(rows: list[tuple], left: tuple[int, ...]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = ["  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    table.insert(1, "  ".join("-" * w for w in widths))
    return table


def _ran_row(r: dict) -> tuple:
    return (
        _cluster(r),
        r.get("run", ""),
        ran_on_text(r),
        f"{r['samples_per_second']:,.0f}",
        r["bottleneck"],
        f"{r['measured_samples_per_second']:,.0f}",
        f"{r['model_error']:+.1%}",
    )


def _basis_text(plan: dict) -> str:
    basis = plan.get("basis")
    if basis is None:
        return (
            f"not stated (a plan of schema version {plan.get('schema_version')}: a run's measured rate may stand beside "
            "predictions at the types' vCPUs; `hetero plan` of its execution makes a current one)"
        )
    return basis["text"]


def _price_lines(plan: dict) -> list[str]:
    """Each price source with its date and the plan's types it priced; one warning when a price is over a year old."""
    used = {t for c in plan.get("candidates", []) for t in (c["trainer"], c["data"]) if t}
    return price_lines(plan.get("prices") or {}, used or None)


def _unpriced_lines(plan: dict) -> list[str]:
    """The catalogue types the plan could not cost, by name, and what prices them (never dropped unseen)."""
    unpriced = plan.get("unpriced") or []
    if not unpriced:
        return []
    return [
        f"unpriced ({len(unpriced)} types, known hardware, no price, never recommended): {', '.join(unpriced)}",
        f"  {FILL_PRICES}",
    ]


def _cluster(p: dict) -> str:
    trainers = f"{p['trainers']} x {p['trainer']}"
    return trainers if p["data"] is None else f"{trainers} + {p['data_count']} x {p['data']}"


def execution_report(*, results: str, execution_id: str | None, registry: str | None = None) -> tuple[str, str]:
    """(execution id, report.html) of ``execution_id``, or of the newest execution, with the history of all of them and
    the model package each registered in ``registry`` (a local store's own registry when None; none for an S3 store)."""
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
        packages=registered_packages(results, registry),
    )
    return execution_id, page


def registered_packages(results: str, registry: str | None) -> dict[str, dict] | None:
    """Execution id -> its model package; a local package links to its document. None: no registry to read."""
    if registry is None:
        if results.startswith("s3://"):
            return None
        local = local_registry(Path(results).parent)  # the results store of a work dir, <work_dir>/results
        if not local.is_dir():
            return None
        registry = str(local)
    opened = open_registry(registry)
    found = {}
    for package in reversed(opened.packages()):  # oldest first: a re-registered execution shows its newest package
        href = None
        if isinstance(opened, LocalRegistry):
            href = (opened.folder / f"{package['ModelPackageVersion']}.json").as_uri()
        execution = metric(package, EXECUTION_KEY)
        if execution is not None:  # a package registered by other means names no execution: no row shows it
            found[execution] = {**package, "href": href}
    return found


def _optional(store, execution_id: str, name: str) -> dict | None:
    try:
        return store.get_json(execution_id, name)
    except DocumentNotFound:
        return None

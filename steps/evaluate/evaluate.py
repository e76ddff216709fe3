"""Evaluation step: price-performance of a heterogeneous run against a baseline.

Reads the ``metrics.json`` the trainer writes (a file, a directory holding
one, or SageMaker's ``model.tar.gz``; checked by `steps.evaluate.metrics`),
prices each cluster with the on-demand table in ``prices.py`` (`steps.evaluate.pricing`) and writes
``price_performance.json``, and beside it ``plan.json``, the data group the next run should use
(`steps.evaluate.plan`). "Cost per 100 steps" is the figure the AWS
heterogeneous-clusters blog tables call cost per step.

Locally::

    python steps/evaluate/evaluate.py --heterogeneous runs/hetero/metrics.json \\
        --baseline runs/homog/model.tar.gz --output runs/eval \\
        --execution-id local-1 --store runs/store

In SageMaker Processing (inputs mounted at the defaults)::

    python3 steps/evaluate/evaluate.py --execution-id <PipelineExecutionId> --store s3://bucket/results \\
        --pipeline-name <PipelineName>

Defaults: ``--heterogeneous /opt/ml/processing/input/heterogeneous``,
``--baseline /opt/ml/processing/input/baseline`` (skipped when that folder is
absent or empty; an explicit ``--baseline`` must hold metrics), ``--output
/opt/ml/processing/output/evaluation``. On failure, a bad argument included
(`steps.common.cli`), the one-line reason goes to ``<output>/failure`` (and,
in a Processing container, to ``/opt/ml/output/message``, shown as
ExitMessage) and the exit code is non-zero.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

if not __package__:
    # SageMaker Processing runs this file by path, so the repository root (two
    # levels up) is not on sys.path and the `steps.` imports below would fail.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from steps.common.cli import StepArgumentParser, run_step_cli  # noqa: E402
from steps.common.errors import UserError  # noqa: E402
from steps.common.files import write_json_atomic  # noqa: E402
from steps.contract import (  # noqa: E402
    BASELINE_METRICS_FILE,
    HETEROGENEOUS_METRICS_FILE,
    MODEL_METRICS_FILE,
    PLAN_FILE,
    PRICE_PERFORMANCE_FILE,
)
from steps.evaluate.catalogue import load_catalogue  # noqa: E402
from steps.evaluate.emf import emf_document  # noqa: E402
from steps.evaluate.errors import DocumentNotFound  # noqa: E402
from steps.evaluate.metrics import load_metrics  # noqa: E402
from steps.evaluate.plan import plan_document  # noqa: E402
from steps.evaluate.prices import load_prices  # noqa: E402
from steps.evaluate.pricing import parse_billing, price_performance, summary_line  # noqa: E402
from steps.evaluate.registration import write_model_metrics  # noqa: E402
from steps.evaluate.report import REPORT_CONTENT_TYPE, REPORT_FILE, report_html  # noqa: E402
from steps.evaluate.store import Store, open_store, validate_execution_id  # noqa: E402

DEFAULT_HETEROGENEOUS = "/opt/ml/processing/input/heterogeneous"
DEFAULT_BASELINE = "/opt/ml/processing/input/baseline"
DEFAULT_OUTPUT = "/opt/ml/processing/output/evaluation"


# --- the step ---


def evaluate(
    *,
    heterogeneous: str | Path,
    baseline: str | Path | None,
    output: str | Path,
    prices_file: str | Path | None = None,
    execution_id: str | None = None,
    store_uri: str | None = None,
    billing: dict | None = None,
    pipeline_name: str | None = None,
    registry: str | None = None,
    improvement_threshold: float = -1.0,
    approve_margin: float = -1.0,
    region: str | None = None,
) -> dict:
    """Write price_performance.json to ``output`` (and to the store if given), and the register step's
    model_metrics.json (`steps.evaluate.registration`: ``registry`` is read for automatic approval); return the first.
    With ``pipeline_name``, also print its figures as one embedded-metric-format line (`steps.evaluate.emf`):
    CloudWatch metrics of that pipeline once the line reaches CloudWatch Logs. ``region``: where the S3 store and the
    SageMaker registry are (the pipeline's region; None: the AWS environment's)."""
    if execution_id is not None:
        validate_execution_id(execution_id)
    if store_uri and execution_id is None:
        raise UserError("--store needs --execution-id: results are keyed by pipeline execution id")
    prices = load_prices(prices_file)
    hetero_metrics = load_metrics(heterogeneous)
    baseline_metrics = load_metrics(baseline) if baseline is not None else None
    doc = price_performance(hetero_metrics, baseline_metrics, prices, execution_id=execution_id, billing=billing)
    plan = plan_document(hetero_metrics, prices, load_catalogue(), execution_id=execution_id, baseline=baseline_metrics)
    write_json_atomic(Path(output) / PLAN_FILE, plan)
    write_json_atomic(Path(output) / PRICE_PERFORMANCE_FILE, doc)
    model_metrics = write_model_metrics(
        Path(output), doc, plan, registry=registry, threshold=improvement_threshold, margin=approve_margin, region=region
    )
    print(summary_line(doc), flush=True)
    print(f"plan for the next run: {plan['reason']}", flush=True)
    if pipeline_name:
        evaluated_ms = int(datetime.fromisoformat(doc["evaluated_at"]).timestamp() * 1000)
        print(json.dumps(emf_document(doc, pipeline_name=pipeline_name, timestamp_ms=evaluated_ms)), flush=True)
    store = open_store(store_uri, region=region) if store_uri else None
    report = _report(doc, plan, hetero_metrics, baseline_metrics, history(store, doc) if store else [doc])
    if report is not None:
        (Path(output) / REPORT_FILE).write_text(report, encoding="utf-8")
    if store:
        assert execution_id is not None  # --store needs --execution-id (checked above)
        # Metrics and config sit next to the verdict so a result can be audited later.
        store.put_json(execution_id, HETEROGENEOUS_METRICS_FILE, hetero_metrics)
        if baseline_metrics is not None:
            store.put_json(execution_id, BASELINE_METRICS_FILE, baseline_metrics)
        if "config" in hetero_metrics:
            store.put_json(execution_id, "config.json", hetero_metrics["config"])
        store.put_json(execution_id, PLAN_FILE, plan)
        store.put_json(execution_id, MODEL_METRICS_FILE, model_metrics)
        if report is not None:
            store.put_text(execution_id, REPORT_FILE, report, REPORT_CONTENT_TYPE)
        # Written last: its presence means the whole set is there.
        print(f"stored {store.put_json(execution_id, PRICE_PERFORMANCE_FILE, doc)}", flush=True)
    return doc


def history(store: Store, current: dict) -> list[dict]:
    """Every execution's price_performance.json in ``store`` (``current`` in place of its own), oldest first."""
    docs: dict[str | None, dict] = {}
    for execution in store.list_executions():
        try:
            docs[execution] = store.get_json(execution, PRICE_PERFORMANCE_FILE)
        except DocumentNotFound:
            continue  # an execution that stopped before Evaluate
    if current:
        docs[current.get("execution_id")] = current
    return sorted(docs.values(), key=lambda d: (d.get("evaluated_at") or "", str(d.get("execution_id"))))


def _report(doc, plan, hetero_metrics, baseline_metrics, past: list[dict]) -> str | None:
    try:
        import matplotlib  # noqa: F401 - the report's charts
    except ImportError:
        print(f"{REPORT_FILE} not written: this image has no matplotlib (pip install matplotlib)", flush=True)
        return None
    return report_html(
        execution_id=doc.get("execution_id"),
        price_performance=doc,
        plan=plan,
        heterogeneous=hetero_metrics,
        baseline=baseline_metrics,
        history=past,
    )


def resolve_baseline(arg: str | None) -> Path | None:
    """An explicit --baseline must exist; the default folder may be absent or empty (no baseline run)."""
    if arg is not None:
        return Path(arg)
    default = Path(DEFAULT_BASELINE)
    if default.is_dir() and any(default.iterdir()):
        return default
    return None


def build_parser() -> StepArgumentParser:
    parser = StepArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--heterogeneous",
        default=DEFAULT_HETEROGENEOUS,
        help="metrics.json, a directory holding one, or model.tar.gz (default: %(default)s)",
    )
    parser.add_argument("--baseline", default=None, help=f"same forms; default {DEFAULT_BASELINE} if present, else no baseline")
    parser.add_argument(
        "--prices",
        default=None,
        help="JSON price override file, or a folder holding one (the PriceOverrides "
        "input); {} overrides nothing (schema: steps/evaluate/prices.py)",
    )
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="where price_performance.json goes (default: %(default)s)")
    parser.add_argument("--execution-id", default=None, help="pipeline execution id; required with --store")
    parser.add_argument("--store", default=None, help="results store: s3://bucket/prefix, file:///dir or a path")
    parser.add_argument(
        "--pipeline-name",
        default=None,
        help="print the figures as one CloudWatch embedded-metric-format line with this PipelineName dimension",
    )
    parser.add_argument(
        "--registry",
        default=None,
        help="model registry read for automatic approval: sagemaker://<model package group>, file:///dir or a path",
    )
    parser.add_argument(
        "--region",
        default=None,
        help="AWS region of an s3:// store and a sagemaker:// registry: the pipeline's (a processing container's "
        "environment names none); default: the AWS environment's",
    )
    parser.add_argument(
        "--improvement-threshold", type=float, default=-1.0, help="ImprovementThreshold: approval needs it met (-1: none)"
    )
    parser.add_argument(
        "--approve-margin",
        type=float,
        default=-1.0,
        help="AutoApproveMargin: approve when accuracy is within this of the latest approved model's (-1: never)",
    )
    for run in ("heterogeneous", "baseline"):
        parser.add_argument(
            f"--billing-{run}",
            default=None,
            metavar="BILLABLE/TRAINING",
            help=f"the {run} job's BillableTimeInSeconds/TrainingTimeInSeconds: a managed spot run is priced at "
            "what it was billed",
        )
    return parser


def _step(args) -> None:
    evaluate(
        heterogeneous=args.heterogeneous,
        baseline=resolve_baseline(args.baseline),
        output=args.output,
        prices_file=args.prices,
        execution_id=args.execution_id,
        store_uri=args.store,
        billing={run: parse_billing(getattr(args, f"billing_{run}"), run) for run in ("heterogeneous", "baseline")},
        pipeline_name=args.pipeline_name,
        registry=args.registry,
        improvement_threshold=args.improvement_threshold,
        approve_margin=args.approve_margin,
        region=args.region,
    )


def main(argv: list[str] | None = None) -> int:
    return run_step_cli(build_parser(), _step, argv)


if __name__ == "__main__":
    sys.exit(main())

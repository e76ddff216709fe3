"""`hetero plan`: what the cluster runs' measurements recommend (`pipeline.commands.plan_view`).

hetero plan <execution id>
hetero plan --metrics runs/<execution>/jobs/TrainHeterogeneous/model/metrics.json --json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pipeline.commands.plan_view import plan_for, render_plan
from steps.common.errors import UserError
from steps.evaluate.planner import Inputs


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    plan = sub.add_parser(
        "plan", help="the cluster runs' measurements recommend: trainer type and count, data group, rate, $/h, cost per epoch"
    )
    plan.add_argument(
        "execution_ids",
        nargs="*",
        metavar="EXECUTION_ID",
        help="a local run's or a deployed execution's id; several: runs of one workload on other GPU types",
    )
    plan.add_argument(
        "--results",
        default=os.environ.get("HETERO_RESULTS_URI") or "runs/results",
        help="results store: s3://bucket/prefix or a local folder (default: env HETERO_RESULTS_URI, else runs/results)",
    )
    plan.add_argument(
        "--metrics",
        metavar="PATH",
        action="append",
        default=[],
        help="plan from this metrics.json (or folder, or model.tar.gz) instead; repeat for runs on other GPU types",
    )
    plan.add_argument(
        "--baseline",
        metavar="PATH",
        help="with --metrics: the homogeneous run's metrics.json, whose measured rate stands for its cluster (else the model's)",
    )
    plan.add_argument("--prices", type=Path, help="JSON price overrides (schema: steps/evaluate/prices.py)")
    plan.add_argument(
        "--streams", type=int, default=1, help="data plane connections per data host and trainer (default %(default)s)"
    )
    plan.add_argument("--max-trainers", type=int, default=4, help="trainer hosts to consider, 1..N (default %(default)s)")
    plan.add_argument("--json", action="store_true", help="print plan.json instead of the table")


def run(args: argparse.Namespace) -> int:
    if args.max_trainers < 1:
        raise UserError(f"--max-trainers {args.max_trainers}: give 1 or more", headline="bad option")
    plan = plan_for(
        execution_ids=args.execution_ids,
        results=args.results,
        metrics_paths=args.metrics,
        baseline_path=args.baseline,
        prices_file=args.prices,
        inputs=Inputs(streams=args.streams),
        max_trainers=args.max_trainers,
    )
    print(json.dumps(plan, indent=2) if args.json else render_plan(plan))
    return 0 if plan.get("recommendation") is not None else 2

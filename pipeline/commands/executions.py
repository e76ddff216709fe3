"""`hetero executions`: recent executions of the deployed pipeline with their price-performance (`pipeline.sagemaker.executions`).

hetero executions --results s3://bucket/results
hetero executions --results s3://bucket/results --details <execution id>
"""

from __future__ import annotations

import argparse
import os
import sys

from pipeline.commands.parameters import pipeline_name_option
from pipeline.commands.summary import render
from pipeline.sagemaker.executions import (
    FINISHED,
    list_executions,
    price_performance_of,
)
from steps.common.errors import UserError


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    executions = sub.add_parser("executions", help="recent executions of the deployed pipeline with their price-performance")
    executions.add_argument("--pipeline-name", **pipeline_name_option())
    executions.add_argument(
        "--results",
        default=os.environ.get("HETERO_RESULTS_URI"),
        help="results store the Evaluate step writes to, s3://bucket/prefix (default: env HETERO_RESULTS_URI)",
    )
    executions.add_argument("--limit", type=int, default=10, help="newest N executions (default %(default)s, at most 100)")
    executions.add_argument("--details", metavar="EXECUTION_ID", help="print the full price-performance table of one execution")


def run(args: argparse.Namespace) -> int:
    if args.details:
        if not args.results:
            raise UserError("--details needs --results s3://bucket/prefix (or env HETERO_RESULTS_URI)", headline="bad option")
        print(f"execution {args.details}")
        print(render(price_performance_of(args.results, args.details)))
        return 0
    executions = list_executions(pipeline_name=args.pipeline_name, results_uri=args.results, limit=args.limit)
    if not executions:
        print(f"no executions of {args.pipeline_name} yet: start one with `hetero start --pipeline-name {args.pipeline_name}`")
    for e in executions:
        print(
            f"{e['id']:<14} {e['status']:<10} {e['start_time']:%Y-%m-%d %H:%M:%SZ}  {_execution_summary(e, args.results)}".rstrip()
        )
    if not args.results:
        print("(no --results or HETERO_RESULTS_URI: price-performance not shown)", file=sys.stderr)
    return 0


def _execution_summary(e: dict, results: str | None) -> str:
    doc = e["price_performance"]
    if doc is None:
        if e["failure_reason"]:
            return e["failure_reason"]
        return "no price_performance.json" if results and e["status"] in FINISHED else ""
    cost = f"${doc['runs']['heterogeneous']['cost_per_100_steps']:.4f}/100 steps"
    if doc.get("speedup") is None:
        return f"no baseline, {cost}"
    return f"speedup {doc['speedup']:.2f}x, improvement {doc['improvement']:.1%}, {cost}"

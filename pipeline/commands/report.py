"""`hetero report`: one HTML page with charts, an execution's results, its plan and the history (`pipeline.commands.plan_view`).

hetero report <execution id> --results runs/results
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pipeline.commands.models import REGISTRY_ENV
from pipeline.commands.plan_view import execution_report


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    report = sub.add_parser("report", help="one HTML page with charts: an execution's results, its plan, and the history")
    report.add_argument("execution_id", nargs="?", metavar="EXECUTION_ID", help="(default: the newest execution in the store)")
    report.add_argument(
        "--results",
        default=os.environ.get("HETERO_RESULTS_URI") or "runs/results",
        help="results store: s3://bucket/prefix or a local folder (default: env HETERO_RESULTS_URI, else runs/results)",
    )
    report.add_argument("--output", type=Path, help="where to write it (default: hetero-report-<execution id>.html)")
    report.add_argument(
        "--registry",
        default=os.environ.get(REGISTRY_ENV),
        help="model registry whose packages the page links, a folder or sagemaker://<group> (default: env "
        f"{REGISTRY_ENV}, else a local results store's own, <work dir>/registry/<group>)",
    )


def run(args: argparse.Namespace) -> int:
    execution, page = execution_report(results=args.results, execution_id=args.execution_id, registry=args.registry)
    output = args.output or Path(f"hetero-report-{execution}.html")
    output.write_text(page, encoding="utf-8")
    print(f"report: {output.resolve()}")
    return 0

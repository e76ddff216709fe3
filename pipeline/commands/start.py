"""`hetero start`: an execution of the deployed pipeline (`pipeline.sagemaker.executions`), optionally with a plan's data group.

hetero start --param Epochs=3
hetero start --apply-plan <execution id> --results s3://bucket/results
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pipeline.commands.parameters import FLAGS, parameter_layers, pipeline_name_option
from pipeline.commands.plan_view import stored_plan_parameters
from pipeline.commands.workload import check_workload, deployed_code_dirs
from pipeline.sagemaker.executions import (
    execution_id,
    start_execution,
)
from steps.common.errors import UserError


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    start = sub.add_parser("start", help="start an execution of the deployed pipeline (parameters: as for run)")
    start.add_argument("--pipeline-name", **pipeline_name_option())
    start.add_argument(
        "--param", action="append", default=[], metavar="Name=Value", help="override a pipeline parameter (see `hetero params`)"
    )
    start.add_argument("--config", type=Path, help="JSON file of pipeline parameters")
    start.add_argument("--display-name", help="execution display name shown in SageMaker Studio")
    start.add_argument(
        "--prices",
        metavar="FILE_OR_S3_URI",
        help="JSON price file (uploaded beside the pipeline's artifacts) or the s3:// URI of one [PriceOverrides]",
    )
    start.set_defaults(no_baseline=False, **dict.fromkeys(FLAGS))  # so `parameter_layers` reads --param, env and --config alike
    start.add_argument(
        "--apply-plan",
        metavar="EXECUTION_ID",
        help="run with the data group the plan of that execution recommends (its plan.json in --results)",
    )
    start.add_argument(
        "--fallback",
        type=int,
        default=0,
        metavar="N",
        help="with --apply-plan: the plan's candidate N instead of its recommendation (0); when an execution failed "
        "for want of capacity (a step's FailureReason says CapacityError), start again with 1, then 2",
    )
    start.add_argument(
        "--results",
        default=os.environ.get("HETERO_RESULTS_URI"),
        help="results store, s3://bucket/prefix (default: env HETERO_RESULTS_URI)",
    )


def run(args: argparse.Namespace) -> int:
    overrides = {}
    for layer in parameter_layers(args):
        overrides.update(layer)
    if "Workload" in overrides:
        check_workload(str(overrides["Workload"]), code_dirs=deployed_code_dirs(), deployed=True)
    if args.fallback and not args.apply_plan:
        raise UserError(
            f"--fallback {args.fallback} picks a candidate of a plan: add --apply-plan EXECUTION_ID", headline="bad option"
        )
    if args.apply_plan:
        if not args.results:
            raise UserError("--apply-plan needs --results s3://bucket/prefix (or env HETERO_RESULTS_URI)", headline="bad option")
        planned = stored_plan_parameters(args.results, args.apply_plan, args.fallback)
        clash = {k for k in planned if k in overrides and str(overrides[k]) != planned[k]}
        if clash:
            raise UserError(f"--apply-plan sets {', '.join(sorted(clash))}, which you also set: drop one", headline="bad option")
        overrides.update(planned)
    arn, parameters = start_execution(pipeline_name=args.pipeline_name, overrides=overrides, display_name=args.display_name)
    print(f"started execution {execution_id(arn)} of {args.pipeline_name}")
    print(f"  arn:        {arn}")
    sent = ", ".join(f"{p['Name']}={p['Value']}" for p in parameters)
    print(f"  parameters: {sent or 'the deployed defaults'}")
    print(f"  watch:      hetero executions --pipeline-name {args.pipeline_name}")
    return 0

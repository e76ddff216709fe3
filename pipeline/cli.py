"""``hetero``: run the pipeline locally, and start and inspect it in AWS once deployed (``npx cdk deploy``, see docs/deploy.md).

    hetero run                                  # sample data, 1 data host + 1 trainer, baseline too
    hetero run --input ./my_images --data-hosts 2 --dnn-hosts 2
    hetero run --workload my_pkg.my_workload --code-dir . --workload-options '{"size": 128}'
    hetero params                               # every pipeline parameter with default and help
    hetero params --markdown                    # the same as docs/parameters.md
    hetero start --param Epochs=3               # an execution of the deployed pipeline (pipeline/sagemaker/executions.py)
    hetero executions --results s3://bucket/results   # recent executions, status and price-performance
    hetero models                               # registered models with their metrics; `hetero models approve 3`
    hetero definition --bucket my-bucket         # the SageMaker pipeline definition JSON (pipeline/sagemaker/)
    hetero iam runs/<execution> --template cdk.out/HeteroTraining.template.json   # a run's AWS calls vs the IAM policies

Parameter precedence: command line > environment (HETERO_PARAM_<Name>) > --config file (JSON) > default.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from pipeline.commands import definition, executions, iam, models, params, plan, prices, report, run, start
from pipeline.errors import StepFailed
from pipeline.stop import STOP
from steps.common.errors import HeteroError, UserError, storage_error

VERBS = (run, params, start, plan, prices, report, executions, definition, models, iam)  # in `hetero --help`'s order
VERBS_BY_NAME = {verb.__name__.rsplit(".", 1)[1]: verb for verb in VERBS}  # each module is named for its verb


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hetero", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for verb in VERBS:
        verb.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:  # Ctrl-C or a stop signal (`pipeline.stop`), also one while an error is reported
        print(STOP.line(exc), file=sys.stderr)
        return STOP.exit_code(exc)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with STOP.claiming_errors():  # an error a stop caused (a library's own, around the stop's raise) is the stop
            return VERBS_BY_NAME[args.command].run(args)
    except StepFailed as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2 if exc.user_error else 1
    except HeteroError as exc:
        if isinstance(exc, UserError):
            print(f"error: {exc.one_line()}", file=sys.stderr)
            return 2
        traceback.print_exc()
        return 1
    except OSError as exc:
        storage = storage_error(exc)
        if storage is None:
            raise
        print(f"error: {storage.one_line()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

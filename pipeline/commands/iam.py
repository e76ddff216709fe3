"""`hetero iam`: judge a local run's AWS calls against a synthesized template (`pipeline.iam.judge`).

    npx cdk synth -q                                   # cdk.out/HeteroTraining.template.json
    hetero iam runs/<execution id> --template cdk.out/HeteroTraining.template.json
    hetero iam <execution id> --template cdk.out/HeteroTraining.template.json --work-dir runs
    hetero iam runs/<execution id> --template cdk.out/HeteroTraining.template.json --json   # every call with its result
    hetero iam runs/<execution id> --template cdk.out/HeteroTraining.template.json --markdown   # docs/deploy.md's Permissions

One line per denied call (principal, action, resource, step, the closest statement), then ``N calls, M denied``;
exit status 1 when any call is denied.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline.iam.judge import deployed_for, judge_files, ledger_path
from pipeline.iam.permissions import markdown


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    p = sub.add_parser(
        "iam",
        help="judge a local run's AWS calls against a synthesized template's IAM policies",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", help="a local run's folder (runs/<execution id>) or its execution id")
    p.add_argument("--template", type=Path, required=True, help="a synthesized template (cdk.out/<stack>.template.json)")
    p.add_argument("--work-dir", type=Path, default=Path("runs"), help="where an execution id is looked up (default runs)")
    p.add_argument("--json", action="store_true", help="print every judged call with its result as JSON instead")
    p.add_argument(
        "--markdown",
        action="store_true",
        help="print docs/deploy.md's Permissions section instead: each principal's statements and the steps that use them",
    )


def run(args: argparse.Namespace) -> int:
    ledger = ledger_path(args.run, args.work_dir)
    deployed = deployed_for(ledger, args.template)
    verdict = judge_files(ledger, args.template)
    if args.markdown:
        print(markdown(deployed, verdict))
    elif args.json:
        json.dump(
            {"calls": verdict.judged, "denied": len(verdict.denials), "not_deployed": verdict.not_deployed}, sys.stdout, indent=1
        )
        sys.stdout.write("\n")
    else:
        print("\n".join(verdict.lines()))
    return 1 if verdict.denials else 0

"""``hetero models``: the registered model packages, with their metrics and approval status, and approving them.

    hetero models                                          # the local runs' packages (runs/registry/<group>/)
    hetero models approve 3                                # version 3 (or its ARN) -> Approved
    hetero models reject 3
    hetero models --registry sagemaker://HeteroTraining-models     # the deployed stack's group (boto3)

The registry is a folder or ``sagemaker://<model package group>`` (`steps.evaluate.registry`); against SageMaker
the commands call ListModelPackages, DescribeModelPackage and UpdateModelPackage.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pipeline.graph import PIPELINE_NAME, default_model_package_group
from pipeline.local.settings import local_registry
from steps.common.errors import UserError
from steps.evaluate.registry import APPROVED, EXECUTION_KEY, REJECTED, Registry, metric, open_registry

REGISTRY_ENV = "HETERO_MODEL_REGISTRY"
STATUS = {"approve": APPROVED, "reject": REJECTED}
DEPLOYED_EXAMPLE = f"sagemaker://{default_model_package_group(PIPELINE_NAME)}"
COLUMNS = ("accuracy", "samples_per_second", "samples_per_dollar", "improvement", "bottleneck")


def default_registry(work_dir: Path = Path("runs")) -> str:
    return str(local_registry(work_dir))


def package_lines(registry: Registry) -> list[str]:
    """One line per package, newest first: version, status, the metrics it was registered with, execution, ARN."""
    packages = registry.packages()
    if not packages:
        return [f"no model packages in {registry.group} yet: each pipeline execution registers its heterogeneous model"]
    header = f"{'version':>7}  {'status':<21} " + " ".join(f"{c:>18}" for c in COLUMNS) + "  execution / ARN"
    lines = [header]
    for p in packages:
        figures = " ".join(f"{metric(p, c) or '-':>18}" for c in COLUMNS)
        lines.append(
            f"{p.get('ModelPackageVersion', '-'):>7}  {p.get('ModelApprovalStatus', '-'):<21} {figures}  "
            f"{metric(p, EXECUTION_KEY) or '-'}  {p['ModelPackageArn']}"
        )
    return lines


def change_status(registry: Registry, ref: str, action: str) -> str:
    package = registry.set_status(ref, STATUS[action])
    return f"model package {package.get('ModelPackageVersion')} of {registry.group}: {package['ModelApprovalStatus']}"


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    models = sub.add_parser("models", help="registered model packages with their metrics and status; approve or reject one")
    models.add_argument("action", nargs="?", choices=("list", *STATUS), default="list", help="(default %(default)s)")
    models.add_argument("package", nargs="?", metavar="VERSION_OR_ARN", help="the package to approve or reject")
    models.add_argument(
        "--registry",
        default=os.environ.get(REGISTRY_ENV) or default_registry(),
        help=f"a local registry folder, or sagemaker://<model package group> for the deployed one (e.g. {DEPLOYED_EXAMPLE}) "
        f"(default: env {REGISTRY_ENV}, else the local runs' group under runs/registry/)",
    )


def run(args: argparse.Namespace) -> int:
    registry = open_registry(args.registry)
    if args.action == "list":
        if args.package:
            raise UserError(
                f"`hetero models {args.package}`: write `hetero models approve|reject {args.package}`", headline="bad arguments"
            )
        print("\n".join(package_lines(registry)))
        return 0
    if not args.package:
        raise UserError(
            f"`hetero models {args.action}` needs the package: its version or ARN (`hetero models` lists them)",
            headline="bad arguments",
        )
    print(change_status(registry, args.package, args.action))
    return 0

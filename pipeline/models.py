"""``hetero models``: the registered model packages, with their metrics and approval status, and approving them.

    hetero models                                          # the local runs' packages (runs/registry/<group>/)
    hetero models approve 3                                # version 3 (or its ARN) -> Approved
    hetero models reject 3
    hetero models --registry sagemaker://HeteroTraining-models     # the deployed stack's group (boto3)

The registry is a folder or ``sagemaker://<model package group>`` (`steps.evaluate.registry`); against SageMaker
the commands call ListModelPackages, DescribeModelPackage and UpdateModelPackage.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.graph import PIPELINE_NAME, default_model_package_group
from pipeline.local.settings import local_registry
from steps.evaluate.registry import APPROVED, EXECUTION_KEY, REJECTED, Registry, metric

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

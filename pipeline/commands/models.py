"""``hetero models``: the registered model packages, with their metrics and approval status, and approving them.

    hetero models                                          # the local runs' packages (runs/registry/<group>/)
    hetero models approve 3                                # version 3 (or its ARN) -> Approved
    hetero models reject 3
    hetero models serve 3 [--port 8080]                    # version 3 as its inference container serves it, until Ctrl-C
    hetero models predict 3 cat.jpg dog.png                # the top classes version 3's container answers for each image
    hetero models deploy 3 --endpoint shapes --serverless 2048 --role arn:aws:iam::...:role/endpoint \
        --registry sagemaker://HeteroTraining-models       # an Approved package behind a SageMaker endpoint
    hetero models --registry sagemaker://HeteroTraining-models     # the deployed stack's group (boto3)

The registry is a folder or ``sagemaker://<model package group>`` (`steps.evaluate.registry`); against SageMaker
the commands call ListModelPackages, DescribeModelPackage and UpdateModelPackage. ``serve`` and ``predict`` run the
package's container on this machine (`pipeline.emulator.serving`): its image's packages, its own server and handler.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from pipeline.graph import PIPELINE_NAME, default_model_package_group
from pipeline.local.settings import local_registry
from steps.common.errors import UserError
from steps.evaluate.registry import APPROVED, EXECUTION_KEY, REJECTED, Registry, SageMakerRegistry, metric, open_registry

REGISTRY_ENV = "HETERO_MODEL_REGISTRY"
STATUS = {"approve": APPROVED, "reject": REJECTED}
SERVING = ("serve", "predict")
ROLE_ENV = "HETERO_ENDPOINT_ROLE"
CONTENT_TYPE = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}  # else application/x-image
TOP = 3  # classes `predict` prints per image
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
    models.add_argument(
        "action", nargs="?", choices=("list", *STATUS, *SERVING, "deploy"), default="list", help="(default %(default)s)"
    )
    models.add_argument(
        "package", nargs="?", metavar="VERSION_OR_ARN", help="the package to approve, reject, serve or predict with"
    )
    models.add_argument("images", nargs="*", metavar="IMAGE", help="predict: image files (JPEG, PNG) to classify")
    models.add_argument("--port", type=int, default=8080, help="serve: the loopback port (default %(default)s)")
    models.add_argument("--endpoint", help="deploy: the endpoint's name (created, or updated where it exists)")
    models.add_argument("--serverless", type=int, metavar="MEMORY_MB", help="deploy: a serverless endpoint, 1024-6144 MB")
    models.add_argument(
        "--instance-type", help="deploy: a real-time endpoint on one instance of this type (the package lists them)"
    )
    models.add_argument(
        "--role",
        default=os.environ.get(ROLE_ENV),
        help=f"deploy: the endpoint's execution role ARN (pulls the image, reads the artefact; default: env {ROLE_ENV})",
    )
    models.add_argument(
        "--model-data",
        help="serve, predict: a local model.tar.gz instead of the package's ModelDataUrl (one in S3: download it first)",
    )
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
    if args.action in SERVING:
        return serve_or_predict(registry, args)
    if args.action == "deploy":
        return deploy_package(registry, args)
    print(change_status(registry, args.package, args.action))
    return 0


def deploy_package(registry: Registry, args: argparse.Namespace) -> int:
    from pipeline.sagemaker.endpoints import Deployment, deploy

    if not isinstance(registry, SageMakerRegistry):
        raise UserError(
            f"deploy sends the package to SageMaker, and {args.registry} is a local registry: pass the deployed one "
            f"(--registry {DEPLOYED_EXAMPLE}); here, `hetero models serve {args.package}` serves it",
            headline="bad arguments",
        )
    if not args.endpoint or not args.role:
        raise UserError(
            f"`hetero models deploy {args.package}` needs --endpoint NAME and --role ARN (or env {ROLE_ENV}): the endpoint's "
            "execution role, which pulls the image and reads the artefact (docs/models.md: Deploy)",
            headline="bad arguments",
        )
    package = registry.describe(args.package)
    deployment = Deployment(package, args.endpoint, args.role, instance_type=args.instance_type, serverless_mb=args.serverless)
    print(deploy(deployment, registry.client))
    return 0


def serve_or_predict(registry: Registry, args: argparse.Namespace) -> int:
    from pipeline.emulator.serving import serve_model

    package = registry.describe(args.package)
    container = dict((package.get("InferenceSpecification", {}).get("Containers") or [{}])[0])
    if args.model_data:
        container["ModelDataUrl"] = str(Path(args.model_data).resolve())
    if args.action == "predict" and not args.images:
        raise UserError("`hetero models predict VERSION IMAGE...` needs at least one image file", headline="bad arguments")
    for image in args.images:
        if not Path(image).is_file():
            raise UserError(f"image {image}: no such file", headline="bad arguments")
    name = f"model package {package['ModelPackageVersion']} of {registry.group}"
    with tempfile.TemporaryDirectory(prefix="hetero-serve-") as work:
        port = args.port if args.action == "serve" else 0
        # serve: the container's log on stderr as it answers (its requests, a refusal's traceback); predict: quiet
        echo = (lambda line: print(line, file=sys.stderr, flush=True)) if args.action == "serve" else (lambda line: None)
        with serve_model(container, work_dir=Path(work), port=port, echo=echo) as served:
            if args.action == "predict":
                return _predict(served.url, args.images)
            print(f"{name} ({container.get('Image')}) on {served.url}: POST an image to {served.url}/invocations; Ctrl-C stops")
            while served.process.poll() is None:
                time.sleep(0.2)
            raise UserError(
                f"{name}: its container exited with code {served.process.returncode} [log: {served.log}]",
                headline="model container ended",
            )
    return 0


def _predict(url: str, images: list[str]) -> int:
    """Each image POSTed as the container's clients send it; its top classes, or the container's one-line refusal."""
    code = 0
    for image in images:
        kind = CONTENT_TYPE.get(Path(image).suffix.lower(), "application/x-image")
        request = urllib.request.Request(
            f"{url}/invocations", data=Path(image).read_bytes(), headers={"Content-Type": kind, "Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - the local container's loopback URL
                ranked = json.loads(answer.read())["predictions"][:TOP]
            print(f"{image}  " + "  ".join(f"{p['class']} {p['score']:.3f}" for p in ranked))
        except urllib.error.HTTPError as refused:
            print(f"{image}  {refused.code} {refused.read().decode(errors='replace')}")
            code = 1
    return code

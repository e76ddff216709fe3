"""The pipeline's default container images (AWS Deep Learning Containers) and ECR image URIs.

Every job of a heterogeneous cluster runs one image: training jobs get the GPU
variant of the framework's SageMaker training container, processing jobs its CPU
variant. Both are looked up offline: the tags AWS's DLC release data lists
(``DLC_TAGS``), the regions from the tables bundled with the SageMaker Python SDK
(``sagemaker/core/image_uri_config/<framework>.json``, read as files) and AWS's list
of DLC regions (``pipeline.sagemaker.dlc_regions``), the registry host from botocore's endpoint
data: nothing here calls out. A region without the framework's image is refused,
naming the regions that have it (``image_regions``).

    >>> default_training_image("us-east-1", "pytorch")
    '763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker'
    >>> ecr_repository(default_processing_image("af-south-1", "tensorflow"))
    ('626614931356', 'af-south-1', 'tensorflow-training')

DLC images live in a registry account of their region (763104351884 in most
regions, 626614931356 in af-south-1, ...): ECR permissions are derived from the
image URI (``ecr_repository``), never from a fixed account.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from pathlib import Path

from pipeline.sagemaker.dlc_regions import DLC_REGISTRIES
from steps.common.errors import UserError
from steps.frameworks import framework as framework_row

# framework -> (name, version, py_version). Heterogeneous clusters need PyTorch >= 1.10, TensorFlow >= 2.6.
#
# PyTorch, chosen 2026-11-23: the newest SageMaker PyTorch training DLC whose torch minor is closest to the local
# pin (torch==2.13.0 in pyproject.toml) is 2.13.0 (GA 2026-07-20, supported until 2027-07-20), Python 3.12, a GPU
# (CUDA 13.3) and a CPU variant, both with the sagemaker-training toolkit (aws/deep-learning-containers:
# docs/src/data/pytorch/2.13-{cuda,cpu}-sagemaker.yml, .github/config/image/pytorch/2.13-sagemaker-{cuda,cpu}.yml,
# docs/pytorch/changelog/index.md). From 2.11 on, AWS publishes PyTorch DLCs on Amazon Linux 2023 in a new ECR
# repository, `pytorch`, tagged <version>-<cu133|cpu>-amzn2023-sagemaker; the SDK's `pytorch` table (sagemaker-core
# 2.27) stops at 2.10.0 in `pytorch-training`, and its `pytorch-amzn2023` table keys 2.13 by minor version (the
# floating 2.13-... tag), so the URI with the pinned 2.13.0 tag is built from the DLC registry-account table instead
# (DLC_TAGS below; the regions come from both tables). 2.5.1 (the previous default) left support on
# 2025-10-29. CUDA 13 has no Volta kernels: the GPU image needs ml.g4dn (Turing) or newer, not ml.p3.
# TensorFlow: 2.21.0 is the newest training version in the SDK's bundled table (image_uri_config/tensorflow.json),
# with GPU and CPU images, py312 only; AWS lists it as its newest TensorFlow training DLC too (GA 2026-07-10, supported
# until 2027-07-10), the first on Amazon Linux 2023: Python 3.12, a GPU (CUDA 12.9.1) and a CPU variant. The SDK builds
# the short tag 2.21.0-<gpu|cpu>-py312, which AWS's release data does not list; the tags it lists are
# 2.21.0-gpu-py312-cu129-amzn2023-sagemaker and 2.21.0-cpu-py312-amzn2023-sagemaker (aws/deep-learning-containers:
# docs/src/data/tensorflow-training/2.21-{gpu,cpu}-sagemaker.yml, docs/tensorflow/changelog/index.md), so the URI is
# built from DLC_TAGS like PyTorch's.
IMAGES = {"pytorch": ("pytorch", "2.13.0", "py312"), "tensorflow": ("tensorflow", "2.21.0", "py312")}
# The tags AWS's DLC release data lists: framework -> (ECR repository, tag of the GPU variant, tag of the CPU variant)
DLC_TAGS = {
    "pytorch": ("pytorch", "2.13.0-cu133-amzn2023-sagemaker", "2.13.0-cpu-amzn2023-sagemaker"),
    "tensorflow": ("tensorflow-training", "2.21.0-gpu-py312-cu129-amzn2023-sagemaker", "2.21.0-cpu-py312-amzn2023-sagemaker"),
}
# framework -> (the SDK's image table, the version's key there) that lists the regions of the images above: the
# amzn2023 PyTorch images have a table of their own, keyed by minor version
SDK_TABLES = {"pytorch": ("pytorch-amzn2023", "2.13"), "tensorflow": ("tensorflow", "2.21.0")}
# A framework without an AWS training image (steps/frameworks.py: aws_image=False; Ray: no DLC has Ray) is trained on an
# image the user builds from images/<framework>/Dockerfile (the DLC of its image family plus the framework, the version
# pinned in pyproject.toml) and passes as the training image; its Shard and Evaluate steps run on that family's CPU image.
# framework=ray's image: the repository and tag a user pushes it as, and the Ray it installs: images/ray/Dockerfile's
# RAY_VERSION default, the pin in pyproject.toml and constraints.txt (tests/pipeline/sagemaker/test_images.py checks they agree)
RAY_REPOSITORY, RAY_VERSION = "hetero-ray", "2.60.0"

# Serving: the inference DLC a model package names (RegisterModel), by the handler a framework's model is served with
# (steps/frameworks.py serves_as): handler -> (ECR repository, tag of the GPU variant, tag of the CPU variant), and the
# SDK's table and version that list its regions. PyTorch, chosen 2026-12-02: the one SageMaker PyTorch inference DLC
# AWS's release data lists is 2.6 (aws/deep-learning-containers: docs/src/data/pytorch-inference/2.6-{cpu,gpu}-
# sagemaker.yml: GA 2025-01-29, end of patches 2026-06-30, Python 3.12, Ubuntu 22.04, CUDA 12.4; the SDK's `pytorch`
# table, inference 2.6.0, 36 of the DLC regions, the same 36 as the training image above). Its PyTorch inference toolkit
# loads the package's code/inference.py and calls the handler (steps/serve/pytorch.py), which needs nothing of torch
# newer than 2.6; the weights are a state_dict of float tensors (expected to load in 2.6; no torch 2.6 here to test
# it). Patches have ended for it: where that matters,
# build images/pytorch-serve/Dockerfile (this project's training image, torch 2.13, plus the inference toolkit) and name it.
SERVING_TAGS = {
    "pytorch": ("pytorch-inference", "2.6.0-gpu-py312-cu124-ubuntu22.04-sagemaker", "2.6.0-cpu-py312-ubuntu22.04-sagemaker"),
    # TF Serving 2.20, the newest TensorFlow inference DLC (aws/deep-learning-containers
    # .github/config/image/tensorflow/2.20-inference-sagemaker-{cpu,cuda}.yml, prod_image); training runs TF 2.21:
    # the SavedModel's ops (decode, resize, convolutions, a map) are all older than both
    "tensorflow": ("tensorflow-inference", "2.20-gpu-py312-cu129-amzn2023-sagemaker-v1", "2.20-cpu-py312-amzn2023-sagemaker-v1"),
}
SERVING_TABLES = {"pytorch": ("pytorch", "2.6.0"), "tensorflow": ("tensorflow", "2.20.0")}

REGION = re.compile(r"[a-z]{2,4}(-[a-z]+)+-\d+")  # us-east-1, eusc-de-east-1; not a CDK token
# <account>.dkr.ecr.<region>.<DNS suffix of the partition>/<repository>[:tag|@digest]
_ECR_IMAGE = re.compile(
    r"(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z]{2,4}(?:-[a-z]+)+-\d+)\."
    r"(?:amazonaws\.com|amazonaws\.com\.cn|amazonaws\.eu|c2s\.ic\.gov|sc2s\.sgov\.gov|csp\.hci\.ic\.gov"
    r"|cloud\.adc-e\.uk)"
    r"/(?P<repository>[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)


def default_training_image(region: str, framework: str = "pytorch") -> str:
    """The framework's SageMaker training DLC, GPU variant, in ``region``."""
    fw = framework_row(framework)
    if not fw.aws_image:
        raise UserError(
            f"framework {framework} has no AWS training image (none has it installed): build "
            f"images/{framework}/Dockerfile (the {fw.image_family} training image plus {framework}), push it to ECR "
            "and pass its URI as the training image (npx cdk deploy -c hetero:trainingImage=<uri>; hetero "
            "definition --training-image <uri> for the definition alone)",
            headline="bad deploy settings",
        )
    return _image(region, framework, gpu=True)


def default_processing_image(region: str, framework: str = "pytorch") -> str:
    """The CPU variant of the image family (processing jobs run on CPU instances); Ray's shard and evaluate steps need no Ray."""
    return _image(region, framework_row(framework).image_family, gpu=False)


def pipeline_images(region: str, framework: str, *, training_image: str = "", processing_image: str = "") -> tuple[str, str]:
    """(training, processing) image URIs the pipeline runs: the ones given, else the defaults of ``region``."""
    return (
        training_image or default_training_image(region, framework),
        processing_image or default_processing_image(region, framework),
    )


def default_serving_image(region: str, framework: str, *, gpu: bool = False) -> str | None:
    """The inference DLC a model package of ``framework`` names in ``region`` (CPU variant unless ``gpu``); None for a
    framework whose model has no serving form yet (steps/frameworks.py serves_as). A region that is not one AWS lists
    (an environment-agnostic stack's token) has no default: the package would name an image that cannot serve."""
    handler = framework_row(framework).serves_as
    if not handler:
        return None
    if not isinstance(region, str) or region not in DLC_REGISTRIES:  # a token (its placeholder, in a definition)
        raise UserError(
            f"region {region!r} is not a region name (a CloudFormation token?), so the default serving image cannot be "
            "looked up: pass it with the training and processing images (npx cdk deploy -c hetero:servingImage=<uri>), "
            "or deploy to a concrete region",
            headline="bad deploy settings",
        )
    table, version = SERVING_TABLES[handler]
    listed = _sdk_table(table)["inference"]["versions"][version]["registries"]
    regions = sorted(r for r in DLC_REGISTRIES if r in listed)
    if region not in regions:
        raise UserError(
            f"region {region!r} has no AWS inference container for {handler} {version}: AWS publishes it in "
            f"{len(regions)} regions ({', '.join(regions)}); use one of them",
            headline="bad region",
        )
    repository, gpu_tag, cpu_tag = SERVING_TAGS[handler]
    return f"{DLC_REGISTRIES[region]}.dkr.{_ecr_host(region)}/{repository}:{gpu_tag if gpu else cpu_tag}"


def ecr_repository(image_uri: str) -> tuple[str, str, str]:
    """``<account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>[:tag|@digest]`` -> (account, region, repository)."""
    match = _ECR_IMAGE.fullmatch(image_uri) if isinstance(image_uri, str) else None
    if not match:
        raise UserError(
            f"image {image_uri!r} is not an ECR image URI: use "
            "<account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>[:<tag>|@sha256:<digest>] "
            "(SageMaker jobs pull their images from Amazon ECR)",
            headline="bad image URI",
        )
    return match["account"], match["region"], match["repository"]


def ecr_partition(region: str) -> str:
    """The AWS partition of ``region`` (aws, aws-cn, aws-us-gov, ...), from botocore's endpoint data."""
    import botocore.exceptions
    import botocore.session

    try:
        return botocore.session.get_session().get_partition_for_region(region)
    except botocore.exceptions.UnknownRegionError as exc:
        raise UserError(
            f"region {region!r} belongs to no AWS partition known to botocore: check the region", headline="bad region"
        ) from exc


def image_regions(framework: str) -> tuple[str, ...]:
    """The regions where AWS publishes ``framework``'s default images: the DLC regions the SDK's table lists for them."""
    listed = _sdk_version(framework)["registries"]
    return tuple(sorted(region for region in DLC_REGISTRIES if region in listed))


def require_image_region(region: str, framework: str) -> None:
    """UserError unless AWS publishes ``framework``'s default images in ``region``, naming the regions that have them."""
    regions = image_regions(framework)
    if region not in regions:
        raise UserError(
            f"region {region!r} has no AWS Deep Learning Container for {framework} {IMAGES[framework][1]}: AWS "
            f"publishes it in {len(regions)} regions ({', '.join(regions)}); use one of them, or your own "
            "images",
            headline="bad region",
        )


def dlc_framework(image_uri: str) -> str | None:
    """The framework whose default AWS DLC ``image_uri`` is (its repository, in a registry account the SDK's table
    names for that image), or None: a custom image, which exists wherever its owner pushed it."""
    account, _, repository = ecr_repository(image_uri)
    for framework in IMAGES:
        version = _sdk_version(framework)
        if repository == version["repository"] and account in version["registries"].values():
            return framework
    return None


def _sdk_version(framework: str) -> dict:
    table, version = SDK_TABLES[framework]
    return _sdk_table(table)["training"]["versions"][version]


@functools.cache
def _sdk_table(name: str) -> dict:
    """One of the SDK's bundled image tables, read as a file: importing the SDK takes seconds, `hetero start` needs none."""
    spec = importlib.util.find_spec("sagemaker")
    folders = [Path(p) / "core" / "image_uri_config" for p in (spec.submodule_search_locations or [])] if spec else []
    path = next((f / f"{name}.json" for f in folders if (f / f"{name}.json").is_file()), None)
    if path is None:
        raise RuntimeError(f"the SageMaker SDK's image table {name}.json is missing: is the sagemaker package installed?")
    return json.loads(path.read_text(encoding="utf-8"))


def _image(region: str, framework: str, *, gpu: bool) -> str:
    if not isinstance(region, str) or not REGION.fullmatch(region):
        raise UserError(
            f"region {region!r} is not a region name (a CloudFormation token?), so the default images "
            "cannot be looked up: pass training_image and processing_image, or a concrete region",
            headline="bad deploy settings",
        )
    if framework not in IMAGES:
        raise UserError(
            f"framework {framework!r} has no default image; use one of {', '.join(IMAGES)}", headline="bad deploy settings"
        )
    require_image_region(region, framework)
    repository, gpu_tag, cpu_tag = DLC_TAGS[framework]
    return f"{DLC_REGISTRIES[region]}.dkr.{_ecr_host(region)}/{repository}:{gpu_tag if gpu else cpu_tag}"


def _ecr_host(region: str) -> str:
    """ecr.<region>.<DNS suffix>, as the SageMaker SDK builds it (botocore's endpoint data)."""
    import botocore.loaders
    import botocore.regions

    resolver = botocore.regions.EndpointResolver(botocore.loaders.create_loader().load_data("endpoints"))
    endpoint = resolver.construct_endpoint("ecr", region) or {"hostname": f"ecr.{region}.amazonaws.com"}
    return endpoint["hostname"]

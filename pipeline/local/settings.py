"""What binds the local runner to this machine: its options (`LocalOptions`), the region, role and account it names,
the images a local run's definition names, the CPU sets of its hosts, the local model registry, and the definition it
compiles (`compile_local`, with the same compiler as the cloud, `pipeline.sagemaker.definition`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline import storage
from pipeline.code import build_code_tarball, requirements_file
from pipeline.emulator.failures import PROGRESS_TIMEOUT_S
from pipeline.emulator.links import LinkFault
from pipeline.graph import PIPELINE_NAME, default_model_package_group
from pipeline.local.requirements import image_python, refuse_networked
from pipeline.sagemaker.images import RAY_REPOSITORY, RAY_VERSION, default_training_image
from steps.common.errors import UserError
from steps.evaluate.prices import NO_OVERRIDES
from steps.frameworks import framework as framework_row

if TYPE_CHECKING:  # imported where used, as local_settings does
    from pipeline.sagemaker.settings import DeploySettings

LOCAL_REGION = "us-east-1"
LOCAL_ROLE = "arn:aws:iam::000000000000:role/hetero-local"

# A framework without an AWS image (steps/frameworks.py) runs locally under the name of the image a user builds from
# images/<framework>/Dockerfile (its manifest: pipeline/manifests/); the emulator runs the step code on this machine's
# interpreter, never the image
LOCAL_BUILT_IMAGES = {"ray": f"000000000000.dkr.ecr.{LOCAL_REGION}.amazonaws.com/{RAY_REPOSITORY}:{RAY_VERSION}"}


def local_training_image(framework: str) -> str:
    """The training image a local run's definition names for ``framework``."""
    if framework_row(framework).aws_image:
        return default_training_image(LOCAL_REGION, framework)
    return LOCAL_BUILT_IMAGES[framework]


LOCAL_ACCOUNT = "000000000000"
ORDERS = ("definition", "reversed")  # LocalOptions.order: the legal orders of a graph the local runner can take
REGISTRY_FOLDER = "registry"  # <work_dir>/registry/<model package group>/: the local model registry


def local_registry(work_dir: Path) -> Path:
    """The folder of the local runs' model package group."""
    return Path(work_dir).resolve() / REGISTRY_FOLDER / default_model_package_group(PIPELINE_NAME)


@dataclass(frozen=True)
class LocalOptions:
    work_dir: Path = Path("runs")
    framework: str = "pytorch"
    sample_images: int = 3000
    pin_cpus: bool = True
    grace_s: float = 30.0
    step_timeout_s: float | None = 1800.0  # besides each request's own MaxRuntimeInSeconds
    cpus: dict | None = None  # {"trainer": (...), "data": (...)}: overrides cpu_plan()
    spot: bool = False  # compile as deployed with managed spot (there is no spot market here: billable = training time)
    network_isolation: bool = False  # compile as deployed with network isolation: the emulator refuses s3:// fetched at run time
    interrupt_after_steps: int | None = None  # each training job is interrupted once, at this step, and restarted
    link_fault: LinkFault | None = None  # each training job's first data host's link, from its start (pipeline.emulator.links)
    progress_timeout_s: float | None = PROGRESS_TIMEOUT_S  # a training job none of whose hosts reports progress this long fails
    code_dirs: tuple[Path, ...] = ()  # folders whose contents ship with steps/ (pipeline.code): the user's workload, requirements
    volume_scale: float = 1.0  # a GB of an emulated host's volume is this many GiB (pipeline.emulator.volumes)
    order: str = "definition"  # which ready step runs next: the first in definition order, or "reversed": the last
    echo: Callable[[str], None] = print

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise UserError(f"order {self.order!r}: one of {', '.join(ORDERS)}", headline="bad option")


def cpu_plan(pin: bool) -> dict[str, tuple[int, ...]] | None:
    """Trainer hosts get a quarter of the CPUs (at least one), data hosts the rest: a scarce-CPU
    GPU host next to CPU-rich data hosts. The baseline's trainer gets the same CPUs as before."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None
    if not pin or len(cpus) < 2:
        return None
    k = max(1, len(cpus) // 4)
    return {"trainer": tuple(cpus[:k]), "data": tuple(cpus[k:])}


def local_settings(
    work_dir: Path, framework: str, code_uri: str, *, spot: bool = False, network_isolation: bool = False
) -> DeploySettings:
    """Deploy settings that bind the pipeline to this machine: the artifact "bucket" is the work folder."""
    from pipeline.sagemaker.settings import DeploySettings

    prefix = storage.uri(work_dir)[len(storage.SCHEME) :]
    return DeploySettings(
        pipeline_name=PIPELINE_NAME,
        region=LOCAL_REGION,
        role_arn=LOCAL_ROLE,
        bucket=storage.LOCAL_BUCKET,
        code_uri=code_uri,
        prefix=prefix,
        framework=framework,
        spot=spot,
        network_isolation=network_isolation,
        training_image=None if framework_row(framework).aws_image else local_training_image(framework),
        model_registry=storage.uri(local_registry(work_dir)),
    )


def compile_local(
    work_dir: Path, framework: str, *, spot: bool = False, network_isolation: bool = False, code_dirs: tuple[Path, ...] = ()
) -> dict:
    """The pipeline definition the local runner executes (the code, steps/ and ``code_dirs``, packed under
    ``<work_dir>/code/``, the PriceOverrides default object where the deployed pipeline has it:
    ``<work_dir>/price-overrides/none.json``). Isolated, code whose requirements.txt needs the network is refused."""
    from pipeline.sagemaker.definition import build_definition
    from pipeline.sagemaker.settings import default_price_overrides_uri

    work_dir = Path(work_dir).resolve()
    code = build_code_tarball(destination=work_dir / "code" / "code.tar.gz", code_dirs=code_dirs, exclude=[work_dir])
    settings = local_settings(work_dir, framework, storage.uri(code), spot=spot, network_isolation=network_isolation)
    if network_isolation and (requirements := requirements_file(code_dirs)):
        image = settings.training_image or default_training_image(LOCAL_REGION, framework)
        refuse_networked(code, python=image_python(image), origin=str(requirements))
    none = storage.path(default_price_overrides_uri(settings))
    none.parent.mkdir(parents=True, exist_ok=True)
    none.write_text(json.dumps(NO_OVERRIDES) + "\n")
    return build_definition(settings)

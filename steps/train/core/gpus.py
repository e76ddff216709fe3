"""How many of a trainer host's GPUs the training uses: said at the start, recorded in metrics.json (``gpus``).

``framework=tensorflow`` splits each step over every GPU of the host (MirroredStrategy).
``framework=pytorch`` and ``framework=ray`` run one training process per trainer host, on
one GPU: on an instance type with several (ml.p3.8xlarge: 4, ml.p4d.24xlarge: 8) the others
stay idle and the price per sample pays for them. That is said where a user looks: the
trainer's log, metrics.json and the evaluation report.

A trainer host whose instance type has GPUs but whose framework finds none usable fails at
start (`require_usable_gpus`): it would otherwise train on the CPU for hours, billed as a GPU
instance. An emulated host (``HETERO_EMULATED_HOST``) has no GPU to offer and says so in one line.
Nothing here imports a framework: each trainer counts its GPUs its own way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path

from steps.common.errors import UserError
from steps.contract import EMULATED_HOST_ENV

# the instance catalogue (hardware per SageMaker training type) that Evaluate plans with; read here as data only
CATALOGUE = Path(__file__).resolve().parents[2] / "evaluate" / "catalogue.json"
FINDER = {"pytorch": "PyTorch", "ray": "PyTorch (Ray Train)", "tensorflow": "TensorFlow"}
# framework -> what its default training image needs from the host (pipeline/images.py)
IMAGE_NEEDS = {
    "pytorch": "the PyTorch training image is built for CUDA 13, which needs an NVIDIA driver R580 or newer on the host",
    "ray": "the Ray training image is the PyTorch one plus Ray, built for CUDA 13, which needs an NVIDIA driver R580 or newer "
    "on the host",
    "tensorflow": "the TensorFlow training image needs CUDA 12.9, which the host's NVIDIA driver must support",
}


@cache
def _catalogue_gpus() -> dict[str, int]:
    return {name: spec["gpus"] for name, spec in json.loads(CATALOGUE.read_text(encoding="utf-8"))["instance_types"].items()}


def gpus_of(instance_type: str) -> int:
    """GPUs of ``instance_type`` in the instance catalogue; a size the catalogue lacks counts as GPU-equipped (1) when
    its family's listed sizes are (ml.g6e.*), and a family it does not list as having none."""
    known = _catalogue_gpus()
    if instance_type in known:
        return known[instance_type]
    family = instance_type.rsplit(".", 1)[0] + "."
    return int(any(gpus for name, gpus in known.items() if name.startswith(family)))


def require_usable_gpus(
    host: str, instance_type: str, usable: int, framework: str, *, how: str, log: Callable[[str], None] | None = None
) -> None:
    """Fail a trainer host whose instance type has GPUs when ``framework`` finds none usable (``how``: the call that
    said so); on an emulated host, say it in one line instead."""
    expected = gpus_of(instance_type)
    if not expected or usable:
        return
    if os.environ.get(EMULATED_HOST_ENV):
        (log or (lambda line: print(line, flush=True)))(
            f"[trainer] {host}: emulated {instance_type}: no GPU here ({how}), training on the CPU"
        )
        return
    raise UserError(
        f"trainer host {host} is a {instance_type}, a GPU instance type, but {FINDER[framework]} finds no usable GPU ({how}): "
        f"training would run on the CPU, billed as a GPU. Likely cause: {IMAGE_NEEDS[framework]} (or the training image is "
        "a CPU variant). Fix: pass a training image built for a CUDA version the instance's driver supports "
        "(npx cdk deploy -c hetero:trainingImage=<uri>), or a CPU instance type for the dnn group (DnnInstanceType) if "
        "CPU training is what you want",
        headline="no usable GPU",
    )


def gpu_use(used: int, per_host: int, framework: str) -> dict:
    """metrics.json's ``gpus``: the GPUs each trainer host has and uses; ``idle`` says why some sit idle."""
    doc: dict[str, int | str | None] = {"per_host": per_host, "used_per_host": used, "idle": None}
    if used < per_host:
        doc["idle"] = (
            f"framework={framework} trains one process per trainer host, on {used} of its {per_host} GPUs: "
            "use more trainer hosts of a one-GPU type (DnnInstanceCount), or framework=tensorflow, which "
            "splits each step over every GPU of the host"
        )
    return doc


def idle_gpus_line(host: str, use: dict) -> str | None:
    """The trainer's start-up warning when GPUs of its host will sit idle, else None."""
    return f"[trainer] {host}: WARNING {use['idle']}" if use["idle"] else None

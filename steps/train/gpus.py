"""How many of a trainer host's GPUs the training uses: said at the start, recorded in metrics.json (``gpus``).

``framework=tensorflow`` splits each step over every GPU of the host (MirroredStrategy).
``framework=pytorch`` and ``framework=ray`` run one training process per trainer host, on
one GPU: on an instance type with several (ml.p3.8xlarge: 4, ml.p4d.24xlarge: 8) the others
stay idle and the price per sample pays for them. That is said where a user looks: the
trainer's log, metrics.json and the evaluation report.
"""

from __future__ import annotations


def gpu_use(used: int, per_host: int, framework: str) -> dict:
    """metrics.json's ``gpus``: the GPUs each trainer host has and uses; ``idle`` says why some sit idle."""
    doc = {"per_host": per_host, "used_per_host": used, "idle": None}
    if used < per_host:
        doc["idle"] = (f"framework={framework} trains one process per trainer host, on {used} of its {per_host} GPUs: "
                       "use more trainer hosts of a one-GPU type (DnnInstanceCount), or framework=tensorflow, which "
                       "splits each step over every GPU of the host")
    return doc


def idle_gpus_line(host: str, use: dict) -> str | None:
    """The trainer's start-up warning when GPUs of its host will sit idle, else None."""
    return f"[trainer] {host}: WARNING {use['idle']}" if use["idle"] else None

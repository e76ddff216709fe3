"""The training step's arithmetic (the ``precision`` hyperparameter, pipeline parameter Precision), framework-free.

``fp32``: none; ``bf16``: the forward pass and the loss autocast to bfloat16; ``fp16``: to float16, with loss scaling
(float16's range underflows small gradients without it). ``auto`` resolves on each trainer host at its start: bf16
where its GPU computes in bfloat16 natively, fp16 on an older GPU, fp32 on a CPU (a CPU's bfloat16 and float16
kernels are slower than its float32 ones unless it has AMX/AVX512-BF16, which nothing here detects). Each framework
says what its host has (`choose`); the trainer prints the result at its start and records it in metrics.json.
"""

from __future__ import annotations

from steps.common.metrics_json import Precision
from steps.contract import PRECISIONS

AUTO = PRECISIONS[0]


def choose(requested: str, *, gpu: bool, gpu_bf16: bool) -> str:
    """The precision a host trains in: ``requested``, or for ``auto`` what its device does best (module doc)."""
    if requested != AUTO:
        return requested
    if not gpu:
        return "fp32"
    return "bf16" if gpu_bf16 else "fp16"


def precision_document(requested: str, used: str) -> dict:
    """metrics.json ``precision`` (`steps.common.metrics_json.Precision`, whose ``label`` the report and summary show)."""
    return Precision(requested=requested, used=used).as_dict()


def precision_line(host: str, requested: str, used: str, device: str) -> str:
    """The trainer's start line about its arithmetic."""
    how = f" (auto on {device})" if requested == AUTO else ""
    return f"[trainer] {host}: precision {used}{how}"

"""The one PyTorch training step and the one validation: the trainer and Ray Train train with `TrainStep`, and the cost
probe (`isolated_costs`) and the hybrid-decode sizing (`loop_cpus`) measure it, so what is measured is what is trained.

The cost probe is the bound a data host is judged by. A homogeneous host decodes a batch (``d`` seconds) and trains on
it (``s``) one after the other; a heterogeneous cluster overlaps the two on different hosts. No overlap of two stages
beats ``(d + s) / max(d, s)``, so a measured speedup above that bound means the baseline (or the measurement) is wrong,
not that the data host is worth more. After training, the trainer measures both on its own CPUs: decode in this process
on a few validation shards' samples with training augmentation (what a data host does per sample), then train steps
on those batches with a copy of the trained model and a fresh optimizer (so the model written is untouched). Evaluate
reads the result (``isolated_costs`` in metrics.json) and prints the bound beside the measured speedup.

Precision (`steps.train.core.precision`) is applied here and nowhere else: the forward pass and the loss under
``torch.autocast`` for bf16 and fp16, fp16's loss scaled by a ``GradScaler`` (whose state the checkpoints keep), and
the validation's forward under the same autocast.

The memory layout is chosen here too (`memory_format`): a model with 2-D convolutions and its input batches are
channels-last (NHWC in memory), the layout cuDNN's tensor-core convolutions and oneDNN's CPU ones work in, so no
convolution transposes its input. Compile (pipeline parameter) wraps the training forward in ``torch.compile``, once
per `TrainStep`; the probes' copies and the validation run eager (`TrainStep.on_copy`, `validate`).
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from steps.common.errors import UserError
from steps.train.core.cluster import available_cpus
from steps.train.core.cost_document import MEASURED_BATCHES, cost_document, timed_decode
from steps.train.core.precision import choose
from steps.train.core.spare_cpus import PROBE_STEPS
from steps.train.frameworks.pytorch.dataset import ShardDataset, batch_loader, collate
from steps.train.workload import Workload

# torch's CPU autocast runs float16 as well as bfloat16 (its linear and convolution kernels, checked with torch 2.13), so
# fp16 is allowed on a CPU host; only auto never picks it there
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def pick_device() -> torch.device:
    """The device this host trains on: its first GPU where torch sees one, else its CPUs."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def all_objects(value) -> list:
    """``value`` of every trainer, by rank (the trainers' process group: the PyTorch path's, or Ray Train's)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [value]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def resolve_precision(requested: str, device: torch.device) -> str:
    """The precision this host trains in (`steps.train.core.precision.choose`): bf16 on a GPU that has it natively
    (not emulated: a pre-Ampere GPU emulates bfloat16 slower than it runs float16)."""
    gpu = device.type == "cuda"
    return choose(requested, gpu=gpu, gpu_bf16=gpu and torch.cuda.is_bf16_supported(including_emulation=False))


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The forward pass's arithmetic: autocast to bf16 or fp16, or nothing for fp32."""
    if precision not in AUTOCAST_DTYPES:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AUTOCAST_DTYPES[precision])


# Channels-last where it is faster than NCHW for a convolutional model: on CUDA (cuDNN's tensor-core kernels are NHWC;
# an NCHW input is transposed around every convolution) and on a CPU (oneDNN: small_cnn's fp32 step 68-71 ms
# channels-last vs 88-96 ms NCHW on one thread, torch 2.13; the command is in docs/frameworks.md#compile).
# Other device types (mps, xpu) keep the default layout, their kernels' preference unmeasured here.
CHANNELS_LAST_DEVICES = ("cuda", "cpu")


def memory_format(model: torch.nn.Module, device_type: str) -> torch.memory_format:
    """The layout ``model`` and its input batches take on a ``device_type`` device: channels-last for a model with
    2-D convolutions where that is faster (`CHANNELS_LAST_DEVICES`), else the default (a model without convolutions
    gains nothing from it, and a Flatten or Linear over a channels-last batch would copy it back)."""
    convolutional = any(isinstance(m, torch.nn.Conv2d) for m in bare(model).modules())
    return torch.channels_last if convolutional and device_type in CHANNELS_LAST_DEVICES else torch.contiguous_format


def to_device(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model`` on ``device`` in its `memory_format`: done where the model is built, before DistributedDataParallel
    wraps it (its gradient buckets take the parameters' layout then)."""
    # Module.to takes memory_format (torch.nn.Module.to's documentation); torch's overloads of it leave the keyword out
    return model.to(device, memory_format=memory_format(model, device.type))  # type: ignore[call-overload]


def normalized(workload: Workload, pixels: torch.Tensor, layout: torch.memory_format) -> torch.Tensor:
    """A uint8 NHWC batch already on the device -> the model's float input there, in ``layout``."""
    return workload.normalize(pixels).contiguous(memory_format=layout)


def require_compiler(compile_: str, device: torch.device) -> None:
    """Refuse at a trainer's start what would fail at its first step: ``torch.compile``'s inductor backend builds
    C++ (CPU kernels, its wrappers) with ``$CXX`` or g++, and on a GPU Triton builds its kernel launchers with
    ``$CC``, gcc or clang. The PyTorch training DLCs install gcc and gcc-c++ in their final stage
    (aws/deep-learning-containers docker/pytorch/Dockerfile.cuda and Dockerfile.cpu)."""
    if compile_ != "on":
        return
    needed = [os.environ.get("CXX", "g++")]
    if device.type == "cuda":
        needed.append(os.environ.get("CC") or ("gcc" if shutil.which("gcc") else "clang"))
    missing = [c for c in needed if not shutil.which(c)]
    if missing:
        raise UserError(
            f"Compile=on: torch.compile needs a C/C++ compiler on the trainer host and {', '.join(missing)} is not on "
            "its PATH: use an image with gcc and g++ (the PyTorch training DLCs have them), or Compile=off",
            headline="no compiler for Compile=on",
        )


def bare(model: torch.nn.Module) -> torch.nn.Module:
    """The model itself, outside a DistributedDataParallel wrapper (whose forward would wait for the other trainers)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


class TrainStep:
    """One training step of ``model``: the batch normalised on ``device`` in the model's `memory_format`, forward and
    loss in ``precision`` (resolved: fp32, bf16 or fp16), the forward compiled with ``compile_`` (``on``: torch.compile,
    default mode), backward, optimizer step. Built once per model and optimizer, so the model compiles once (and again
    only for a new batch shape: a short last batch, then any size); building it puts the model in training mode."""

    def __init__(
        self,
        workload: Workload,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        precision: str = "fp32",
        compile_: str = "off",
    ) -> None:
        self.workload, self.model, self.optimizer, self.device = workload, model, optimizer, device
        self.precision = precision
        self.layout = memory_format(model, device.type)
        # a no-op where the model was built with `to_device` (memory_format: as in to_device, torch's overloads leave it out)
        bare(model).to(memory_format=self.layout)  # type: ignore[call-overload]
        # the model itself stays self.model: its state_dict keeps its keys (a compiled wrapper prefixes them), and
        # DistributedDataParallel's Join hooks see it; compiling the DDP wrapper lets dynamo split the graph at its
        # gradient buckets
        self.forward = torch.compile(model) if compile_ == "on" else model
        self.loss_fn = workload.loss().to(device)
        # float16's range loses small gradients: the loss is scaled up before backward and the gradients down before
        # the optimizer's step (a step whose gradients overflowed is skipped); a no-op unless fp16
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        model.train()

    @classmethod
    def on_copy(
        cls, workload: Workload, model: torch.nn.Module, device: torch.device, learning_rate: float, precision: str = "fp32"
    ) -> TrainStep:
        """The step on a copy of ``model`` with a fresh optimizer: what the probes measure, the model trained untouched.
        Eager whatever Compile says: compiling a copy for a few probe steps costs more than the steps (seconds to
        minutes, before training starts), and an eager step costs at least the compiled one's time and CPU, so the
        probes err on the safe side (a looser bound, more vCPUs kept for the loop)."""
        net = copy.deepcopy(bare(model)).to(device)
        return cls(workload, net, workload.optimizer(net.parameters(), learning_rate), device, precision)

    def inputs(self, pixels: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A host batch (uint8 NHWC pixels, int64 labels) on the device, normalised there. The copies are queued, not
        awaited: a pooled host buffer may be reused only once they are done."""
        x = normalized(self.workload, pixels.to(self.device, non_blocking=True), self.layout)
        return x, labels.to(self.device, non_blocking=True)

    def update(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """Forward, loss, backward and optimizer step on a batch from `inputs`; its loss."""
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.device, self.precision):
            loss = self.loss_fn(self.forward(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.item()  # also waits for the device, so a step timed around it is real

    def __call__(self, pixels: torch.Tensor, labels: torch.Tensor) -> float:
        return self.update(*self.inputs(pixels, labels))


def validate(
    workload: Workload,
    model: torch.nn.Module,
    device: torch.device,
    shards: list[Path],
    *,
    batch_size: int,
    num_workers: int,
    precision: str = "fp32",
) -> tuple[float | None, int]:
    """Accuracy of ``model`` on ``shards`` (None without a sample) and the samples it counted, its forward in the
    precision it trained in and its layout (`memory_format`). In eval mode and without autograd (no graph is built for
    outputs nobody differentiates); the model is back in its mode afterwards. Not inference mode: a model that caches
    a tensor in its forward would hand the probes an inference tensor to train on. Eager whatever Compile says: one
    pass does not repay compiling the eval-mode graph."""
    if not shards:
        return None, 0
    net = bare(model)
    training = net.training
    correct = total = 0
    layout = memory_format(net, device.type)
    net.eval()
    try:
        with torch.no_grad():
            loader = batch_loader(ShardDataset(shards, workload, train=False), batch_size=batch_size, num_workers=num_workers)
            for batch in loader:
                if len(batch):
                    x = normalized(workload, batch.pixels.to(device), layout)
                    with autocast(device, precision):
                        logits = net(x)
                    correct += int((logits.argmax(1).cpu() == batch.labels).sum())
                    total += len(batch)
    finally:
        net.train(training)
    return (correct / total if total else None), total


def isolated_costs(
    workload: Workload,
    model: torch.nn.Module,
    device: torch.device,
    shards: list[Path],
    *,
    batch_size: int,
    learning_rate: float,
    batches: int = MEASURED_BATCHES,
    precision: str = "fp32",
) -> dict | None:
    """Seconds per batch of decode (one process, this host's CPUs assumed to split it evenly) and of the train
    step (data resident), each the fastest of the measured batches: the stage's own cost with the least
    interference from anything else on the machine, so a bound built from them is a true best case.
    None when the shards hold fewer than two batches."""
    decode_s, decoded = timed_decode(workload, shards, batch_size=batch_size, batches=batches, collate=collate)
    if len(decoded) < 2:
        return None
    step = TrainStep.on_copy(workload, model, device, learning_rate, precision)
    step_s = []
    for batch in decoded:
        started = time.perf_counter()
        step(batch.pixels, batch.labels)
        step_s.append(time.perf_counter() - started)
    return cost_document(decode_s, step_s, batch_size=batch_size, device=device.type, decode_in_one_process=True)


def loop_cpus(
    workload: Workload,
    model: torch.nn.Module,
    device: torch.device,
    pixels: np.ndarray,
    batch_size: int,
    learning_rate: float,
    steps: int = PROBE_STEPS,
    precision: str = "fp32",
) -> float:
    """vCPUs this process keeps busy while training: CPU seconds over wall seconds of ``steps`` train steps on a
    synthetic batch of ``pixels`` (one sample's), with a copy of ``model`` and a fresh optimizer (the model trained is
    untouched)."""
    step = TrainStep.on_copy(workload, model, device, learning_rate, precision)
    x_host = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(pixels, (batch_size, *pixels.shape))))
    y_host = torch.zeros(batch_size, dtype=torch.int64)
    for _ in range(2):
        step(x_host, y_host)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(steps):
        step(x_host, y_host)
    wall = time.perf_counter() - wall
    return (time.process_time() - cpu) / wall if wall > 0 else float(available_cpus())

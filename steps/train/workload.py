"""The workload interface: what a user supplies, everything else is plumbing.

A workload module defines ``WORKLOAD``, a subclass of `Workload`. The data
hosts (or, in a homogeneous run, the trainer's DataLoader workers) call
`decode` once per sample; the trainer calls `build_model`, `loss`,
`optimizer` and `normalize`. Pixels cross the network as uint8 HWC arrays
of shape ``(image_size, image_size, 3)``; `normalize` runs on the trainer's
device, so the CPU hosts never touch float32. Minimal example::

    # my_pkg/my_workload.py
    import io, numpy as np, torch
    from PIL import Image
    from steps.train.workload import Workload

    class MyWorkload(Workload):
        image_size = 128
        def decode(self, raw, *, train, rng):
            im = Image.open(io.BytesIO(raw)).convert("RGB").resize((128, 128))
            return np.asarray(im)
        def build_model(self, num_classes):
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(num_classes))

    WORKLOAD = MyWorkload

For ``--framework tensorflow`` a workload also implements `tf_decode` (in TF
ops) and `build_keras_model`. Run it with ``hetero run --workload my_pkg.my_workload --code-dir DIR``, DIR
being the folder that holds ``my_pkg/``: it ships with the code, at its root (deployed: the ``hetero:codeDirs``
context key).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from steps.common.errors import UserError

if TYPE_CHECKING:  # each host imports only its framework: a TensorFlow container has no torch
    import keras
    import tensorflow as tf
    import torch


class Workload:
    image_size: int = 64
    mean: tuple[float, float, float] = (127.5, 127.5, 127.5)
    std: tuple[float, float, float] = (64.0, 64.0, 64.0)
    options_help: dict[str, str] = {}

    def __init__(self, options: dict | None = None) -> None:
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.options_help))
        if unknown:
            known = ", ".join(f"{k} ({v})" for k, v in self.options_help.items()) or "none"
            raise UserError(
                f"workload {type(self).__name__} has no option {', '.join(map(repr, unknown))}; known options: {known}",
                headline="bad workload option",
            )
        self.options = options

    def decode(self, raw: bytes, *, train: bool, rng: np.random.Generator) -> np.ndarray:
        """Encoded sample -> uint8 array (image_size, image_size, 3). Raise on corrupt input."""
        raise NotImplementedError

    def build_model(self, num_classes: int) -> torch.nn.Module:
        raise NotImplementedError

    def loss(self) -> torch.nn.Module:
        import torch

        return torch.nn.CrossEntropyLoss()

    def optimizer(self, parameters: Iterable[torch.nn.Parameter], learning_rate: float) -> torch.optim.Optimizer:
        import torch

        return torch.optim.AdamW(parameters, lr=learning_rate)

    def normalize(self, pixels: torch.Tensor) -> torch.Tensor:
        """uint8 NHWC on the training device -> float NCHW, normalised there (the train step puts it in the layout the
        model computes in: `steps.train.frameworks.pytorch.step.memory_format`)."""
        import torch

        x = pixels.permute(0, 3, 1, 2).float()
        mean = torch.tensor(self.mean, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, device=x.device).view(1, 3, 1, 1)
        return x.sub_(mean).div_(std)

    # -- TensorFlow: the same workload for the tf.data.service path --------------------
    # tf.data.service workers run the input pipeline as a TensorFlow graph, so decoding is
    # written in TF ops (no Python functions: they cannot travel to another process).

    def tf_decode(self, raw: tf.Tensor, *, train: bool, seed: tf.Tensor) -> tf.Tensor:
        """Encoded sample (scalar string tensor) -> uint8 tensor (image_size, image_size, 3), in TF ops.
        ``seed`` is a shape-[2] int64 tensor for `tf.random.stateless_*` ops, distinct per sample and epoch."""
        raise NotImplementedError(f"workload {type(self).__name__} has no tf_decode: it supports PyTorch only")

    def build_keras_model(self, num_classes: int) -> keras.Model:
        raise NotImplementedError(f"workload {type(self).__name__} has no build_keras_model: it supports PyTorch only")

    def keras_optimizer(self, learning_rate: float) -> keras.optimizers.Optimizer:
        import keras

        return keras.optimizers.AdamW(learning_rate=learning_rate)

    def tf_normalize(self, pixels: tf.Tensor) -> tf.Tensor:
        """uint8 NHWC on the training device -> float32 NHWC, normalised there."""
        import tensorflow as tf

        return (tf.cast(pixels, tf.float32) - tf.constant(self.mean)) / tf.constant(self.std)


def load_workload(module_name: str, options: dict) -> Workload:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(
            f"cannot import workload module {module_name!r} ({exc}); pass a module path importable on every host, "
            "e.g. --workload my_pkg.my_workload with the folder holding my_pkg/ shipped in the code (--code-dir DIR)",
            headline="bad workload",
        ) from None
    cls = getattr(module, "WORKLOAD", None)
    if not (isinstance(cls, type) and issubclass(cls, Workload)):
        raise UserError(
            f"workload module {module_name!r} must define WORKLOAD = <a subclass of steps.train.workload.Workload>",
            headline="bad workload",
        )
    return cls(options)

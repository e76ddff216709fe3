"""The default workload: coloured shapes, a CPU-heavy augmentation, a small CNN.

Decode plus augmentation (random resized crop, flip) and a repeated Gaussian blur
costs far more CPU than the small CNN's step, like the MNIST-with-heavy-blur
case in the AWS heterogeneous-cluster results: the input pipeline, not the
model, sets the pace on one host. ``blur_passes`` scales that cost.
``model=resnet50`` selects ResNet-50 for GPU hosts.
"""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image, ImageFilter
from torch import nn

from steps.common.errors import UserError
from steps.train.models import resnet50, small_cnn
from steps.train.workload import Workload


class Shapes(Workload):
    image_size = 64
    options_help = {
        "model": "small_cnn (default) or resnet50",
        "blur_passes": "Gaussian blur passes per training sample (default 6): the CPU cost knob",
        "blur_radius": "blur radius in pixels (default 1.0)",
    }

    def __init__(self, options=None):
        super().__init__(options)
        self.model_name = str(self.options.get("model", "small_cnn"))
        if self.model_name not in ("small_cnn", "resnet50"):
            raise UserError(f"workload option model={self.model_name!r}: use small_cnn or resnet50", headline="bad workload option")
        self.blur_passes = int(self.options.get("blur_passes", 6))
        self.blur_radius = float(self.options.get("blur_radius", 1.0))

    def decode(self, raw: bytes, *, train: bool, rng: np.random.Generator) -> np.ndarray:
        image = Image.open(io.BytesIO(raw))
        image = image.convert("RGB")
        size = self.image_size
        if train:
            w, h = image.size
            scale = rng.uniform(0.6, 1.0)
            cw, ch = max(1, int(w * scale)), max(1, int(h * scale))
            x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            image = image.resize((size, size), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
            if rng.random() < 0.5:
                image = image.transpose(Image.FLIP_LEFT_RIGHT)
        else:
            image = image.resize((size, size), Image.BILINEAR)
        for _ in range(self.blur_passes):  # part of preprocessing, so validation sees it too
            image = image.filter(ImageFilter.GaussianBlur(self.blur_radius))
        return np.asarray(image, dtype=np.uint8)

    def build_model(self, num_classes: int) -> nn.Module:
        model = resnet50(num_classes) if self.model_name == "resnet50" else small_cnn(num_classes)
        return model.to(memory_format=torch.channels_last)


WORKLOAD = Shapes

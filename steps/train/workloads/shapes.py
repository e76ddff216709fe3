"""The default workload: coloured shapes, a CPU-heavy augmentation, a small CNN.

Decode plus augmentation (random resized crop, flip) and a repeated Gaussian blur
costs far more CPU than the small CNN's step, like the MNIST-with-heavy-blur
case in the AWS heterogeneous-cluster results: the input pipeline, not the
model, sets the pace on one host. ``blur_passes`` scales that cost.
``model=resnet50`` selects ResNet-50 for GPU hosts.

`decode` (PIL, for PyTorch) and `tf_decode` (TF ops, for tf.data.service) apply
the same augmentation; the blur is a separable Gaussian of the same radius.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, ImageFilter

from steps.common.errors import UserError
from steps.train.workload import Workload

if TYPE_CHECKING:  # a host imports only its framework, where it is used
    import keras
    import tensorflow as tf
    import torch


class Shapes(Workload):
    image_size = 64
    options_help = {
        "model": "small_cnn (default) or resnet50",
        "blur_passes": "Gaussian blur passes per training sample (default 6): the CPU cost knob",
        "blur_radius": "blur radius in pixels (default 1.0)",
    }

    def __init__(self, options: dict | None = None) -> None:
        super().__init__(options)
        self.model_name = str(self.options.get("model", "small_cnn"))
        if self.model_name not in ("small_cnn", "resnet50"):
            raise UserError(
                f"workload option model={self.model_name!r}: use small_cnn or resnet50", headline="bad workload option"
            )
        self.blur_passes = int(self.options.get("blur_passes", 6))
        self.blur_radius = float(self.options.get("blur_radius", 1.0))

    def decode(self, raw: bytes, *, train: bool, rng: np.random.Generator) -> np.ndarray:
        image: Image.Image = Image.open(io.BytesIO(raw))
        image = image.convert("RGB")
        size = self.image_size
        if train:
            w, h = image.size
            scale = rng.uniform(0.6, 1.0)
            cw, ch = max(1, int(w * scale)), max(1, int(h * scale))
            x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            image = image.resize((size, size), Image.Resampling.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
            if rng.random() < 0.5:
                image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        else:
            image = image.resize((size, size), Image.Resampling.BILINEAR)
        for _ in range(self.blur_passes):  # part of preprocessing, so validation sees it too
            image = image.filter(ImageFilter.GaussianBlur(self.blur_radius))
        return np.asarray(image, dtype=np.uint8)

    def build_model(self, num_classes: int) -> torch.nn.Module:
        from steps.train.workloads.models import resnet50, small_cnn

        return resnet50(num_classes) if self.model_name == "resnet50" else small_cnn(num_classes)

    def tf_decode(self, raw: tf.Tensor, *, train: bool, seed: tf.Tensor) -> tf.Tensor:
        import tensorflow as tf

        image = tf.io.decode_image(raw, channels=3, expand_animations=False)
        size = self.image_size
        if train:
            crop_seed, x_seed, y_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 4))
            shape = tf.shape(image)
            h, w = shape[0], shape[1]
            scale = tf.random.stateless_uniform([], crop_seed, 0.6, 1.0)
            ch = tf.maximum(1, tf.cast(tf.cast(h, tf.float32) * scale, tf.int32))
            cw = tf.maximum(1, tf.cast(tf.cast(w, tf.float32) * scale, tf.int32))
            y0 = tf.random.stateless_uniform([], y_seed, 0, h - ch + 1, dtype=tf.int32)
            x0 = tf.random.stateless_uniform([], x_seed, 0, w - cw + 1, dtype=tf.int32)
            image = tf.image.crop_to_bounding_box(image, y0, x0, ch, cw)
            image = tf.image.resize(image, (size, size), method="bilinear")
            image = tf.image.stateless_random_flip_left_right(image, flip_seed)
        else:
            image = tf.image.resize(image, (size, size), method="bilinear")
        image = tf.cast(image, tf.float32)[tf.newaxis]
        row, column = _gaussian_kernels(self.blur_radius)
        for _ in range(self.blur_passes):  # part of preprocessing, so validation sees it too
            image = tf.nn.depthwise_conv2d(image, row, strides=[1, 1, 1, 1], padding="SAME")
            image = tf.nn.depthwise_conv2d(image, column, strides=[1, 1, 1, 1], padding="SAME")
        return tf.cast(tf.clip_by_value(tf.round(image[0]), 0, 255), tf.uint8)

    def build_keras_model(self, num_classes: int) -> keras.Model:
        from steps.train.workloads.keras_models import resnet50, small_cnn

        build = resnet50 if self.model_name == "resnet50" else small_cnn
        return build(num_classes, self.image_size)


def _gaussian_kernels(radius: float):
    """Row and column depthwise kernels of a Gaussian with sigma ``radius``, for 3 channels."""
    import tensorflow as tf

    half = max(1, math.ceil(3 * radius))
    taps = np.exp(-0.5 * (np.arange(-half, half + 1) / max(radius, 1e-3)) ** 2)
    taps = (taps / taps.sum()).astype(np.float32)
    row = np.repeat(taps.reshape(1, -1, 1, 1), 3, axis=2)
    return tf.constant(row), tf.constant(row.transpose(1, 0, 2, 3))


WORKLOAD = Shapes

"""Keras models for the bundled workloads (the TensorFlow path).

`small_cnn` is the layer-for-layer twin of `steps.train.workloads.models.small_cnn`;
ResNet-50 is Keras' own, untrained (``weights=None``: nothing is downloaded).
Both return logits.
"""

from __future__ import annotations

import keras
from keras import layers


def _conv_bn(x, filters: int, kernel: int = 3, stride: int = 1):
    x = layers.Conv2D(filters, kernel, stride, padding="same", use_bias=False)(x)
    # momentum 0.9, as torch's 0.1: Keras' 0.99 leaves the moving statistics that inference uses
    # far from the data after a short run
    x = layers.BatchNormalization(momentum=0.9)(x)
    return layers.ReLU()(x)


def small_cnn(num_classes: int, image_size: int) -> keras.Model:
    inputs = keras.Input((image_size, image_size, 3))
    x = _conv_bn(inputs, 16, 3, 2)
    x = layers.MaxPooling2D(2)(_conv_bn(x, 32))
    x = layers.MaxPooling2D(2)(_conv_bn(x, 64))
    x = _conv_bn(x, 64)
    # global max pooling, as in the PyTorch twin: "is there a corner anywhere" tells the shapes apart
    outputs = layers.Dense(num_classes)(layers.GlobalMaxPooling2D()(x))
    return keras.Model(inputs, outputs, name="small_cnn")


def resnet50(num_classes: int, image_size: int) -> keras.Model:
    return keras.applications.ResNet50(
        weights=None, input_shape=(image_size, image_size, 3), classes=num_classes, classifier_activation=None
    )

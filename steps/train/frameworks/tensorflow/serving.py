"""The trained Keras model as TensorFlow Serving loads it: a SavedModel in ``1/`` of the model folder (TF Serving serves
the highest numbered folder under the model's base path, /opt/ml/model in SageMaker's TensorFlow inference
container). The trainer exports it as it writes its outputs; a data host, which holds the trainer's plain files only
(model.keras among them), exports its own from model.keras (`ensure_serving_model`), so whichever host's model folder
SageMaker packs serves.

Its ``serving_default`` signature takes encoded images (a batch of strings: what the container's REST API receives as
``{"b64": ...}``) and answers every class's probability (``scores``, float32, in the order of metrics.json's
``classes``). Decoding is the workload's own `tf_decode` as evaluation runs it (no augmentation), in the graph: the
inference image has TensorFlow Serving but no TensorFlow Python, and no image library, so nothing outside the
SavedModel can decode. The handler around it: steps/serve/tensorflow.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras

    from steps.train.workload import Workload

KERAS_FILE = "model.keras"  # what the trainer saves beside it (steps/train/frameworks/tensorflow/trainer.py)
VERSION = "1"  # the SavedModel's folder: TF Serving's model version
SIGNATURE = "serving_default"  # what TF Serving's REST API calls when a request names no signature
INPUT = "images"  # the signature's input: encoded images, shape [batch]
OUTPUT = "scores"  # its output: class probabilities, shape [batch, classes]


def export_serving_model(model: keras.Model, workload: Workload, model_dir: Path) -> Path:
    """``model`` (trained on ``workload``) as a SavedModel in ``model_dir``/1, written whole or not at all."""
    import keras
    import tensorflow as tf

    size = workload.image_size
    seed = tf.constant([0, 0], tf.int64)  # evaluation decodes draw nothing at random (as validation_dataset decodes)

    def decode(raw: tf.Tensor) -> tf.Tensor:
        return workload.tf_decode(raw, train=False, seed=seed)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=INPUT)])
    def serve(images: tf.Tensor) -> dict[str, tf.Tensor]:
        pixels = tf.map_fn(decode, images, fn_output_signature=tf.TensorSpec([size, size, 3], tf.uint8))
        logits = model(workload.tf_normalize(pixels), training=False)
        return {OUTPUT: tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)}  # float32 whatever the training precision

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(SIGNATURE, serve)
    final, partial = model_dir / VERSION, model_dir / f".{VERSION}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    archive.write_out(str(partial), verbose=False)
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    return final


def ensure_serving_model(model_dir: Path, workload: Workload) -> Path | None:
    """The SavedModel in ``model_dir``/1, exported from ``model_dir``/model.keras where this host has the Keras model
    but no SavedModel (a data host after its trainer's STOP); None where it has neither (a failed or stopped job)."""
    if (model_dir / VERSION / "saved_model.pb").is_file():
        return model_dir / VERSION
    if not (model_dir / KERAS_FILE).is_file():
        return None
    import keras

    return export_serving_model(keras.saving.load_model(model_dir / KERAS_FILE), workload, model_dir)

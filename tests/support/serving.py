"""A model folder as the TensorFlow trainer leaves it, for the tests of its serving form: the SavedModel in 1/, metrics.json
naming the classes, code/ with the handlers; the workload's untrained Keras network, seeded."""

from __future__ import annotations

import json
from pathlib import Path


def tensorflow_model_folder(folder: Path, workload_module: str, classes: list[str]):  # noqa: ANN201 - (workload, keras.Model)
    """Fill ``folder``; returns the workload and the Keras model the SavedModel was exported from."""
    import keras

    from steps.contract import METRICS_FILE
    from steps.train.core.model_package import write_serving_code
    from steps.train.frameworks.tensorflow.serving import export_serving_model
    from steps.train.workload import load_workload

    keras.utils.set_random_seed(0)
    workload = load_workload(workload_module, {})
    model = workload.build_keras_model(len(classes))
    export_serving_model(model, workload, folder)
    (folder / METRICS_FILE).write_text(json.dumps({"classes": classes, "config": {"workload": workload_module}}))
    write_serving_code(folder, workload_module, serves_as="tensorflow")
    return workload, model

"""A TensorFlow model's serving form: the SavedModel the trainer exports into 1/ (TF Serving's layout) decodes encoded
images in its graph and answers what the trained model answers on them, and the handlers the TensorFlow Serving
container's Python service calls around it wrap the request as TF Serving's b64 and rank the reply by class name."""

from __future__ import annotations

import base64
import io
import json
from types import SimpleNamespace

import falcon
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from steps.contract import METRICS_FILE
from steps.serve import tensorflow as handler
from steps.train.frameworks.tensorflow.serving import (
    INPUT,
    KERAS_FILE,
    OUTPUT,
    SIGNATURE,
    VERSION,
    ensure_serving_model,
)
from tests.support.serving import tensorflow_model_folder

CLASSES = ["circle", "square", "triangle"]
WORKLOAD = "steps.train.workloads.shapes"


def _png(seed: int, size: int = 72) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)).save(out, format="PNG")
    return out.getvalue()


def _jpeg(seed: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (50, 90, 3), dtype=np.uint8)).save(out, format="JPEG")
    return out.getvalue()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A model folder as a TensorFlow trainer leaves it: the SavedModel in 1/, metrics.json, code/; and the model."""
    folder = tmp_path_factory.mktemp("model")
    workload, model = tensorflow_model_folder(folder, WORKLOAD, CLASSES)
    return folder, workload, model


@pytest.mark.slow  # builds, exports and loads a Keras model (seconds)
def test_the_savedmodel_decodes_and_scores_as_the_trained_model_does_and_refuses_bytes_that_are_no_image(exported):
    folder, workload, model = exported
    assert sorted(p.name for p in folder.iterdir()) == sorted([VERSION, METRICS_FILE, "code"])
    assert (folder / VERSION / "saved_model.pb").is_file() and not list(folder.glob(".*.tmp"))
    serve = tf.saved_model.load(str(folder / VERSION)).signatures[SIGNATURE]
    images = [_png(1), _jpeg(2), _png(3, size=31)]  # any size and either encoding: the graph resizes as evaluation does
    served = serve(**{INPUT: tf.constant(images)})[OUTPUT].numpy()
    seed = tf.constant([0, 0], tf.int64)
    pixels = tf.stack([workload.tf_decode(tf.constant(raw), train=False, seed=seed) for raw in images])
    direct = tf.nn.softmax(model(workload.tf_normalize(pixels), training=False)).numpy()
    assert served.shape == (3, len(CLASSES)) and served.dtype == np.float32
    np.testing.assert_allclose(served, direct, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(served.sum(axis=1), 1.0, rtol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError):  # TF Serving answers it 400, which the service passes on
        serve(**{INPUT: tf.constant([b"not an image"])})


@pytest.mark.slow
def test_a_host_with_the_trainers_keras_file_alone_exports_the_same_savedmodel_and_one_with_neither_none(exported, tmp_path):
    """A data host keeps the trainer's plain files (model.keras), not its 1/ folder: it exports its own, so whichever
    host's folder SageMaker packs serves; a host whose job failed has neither and exports nothing."""
    folder, workload, model = exported
    host = tmp_path / "data-host-model"
    host.mkdir()
    model.save(host / KERAS_FILE)
    assert ensure_serving_model(host, workload) == host / VERSION
    images = tf.constant([_png(5), _jpeg(6)])
    ours = tf.saved_model.load(str(host / VERSION)).signatures[SIGNATURE](**{INPUT: images})[OUTPUT].numpy()
    trainers = tf.saved_model.load(str(folder / VERSION)).signatures[SIGNATURE](**{INPUT: images})[OUTPUT].numpy()
    np.testing.assert_allclose(ours, trainers, rtol=1e-5, atol=1e-6)
    stamp = (folder / VERSION / "saved_model.pb").stat().st_mtime_ns
    assert ensure_serving_model(folder, workload) == folder / VERSION  # the trainer's own: kept as it is
    assert (folder / VERSION / "saved_model.pb").stat().st_mtime_ns == stamp
    assert ensure_serving_model(tmp_path / "failed", workload) is None


@pytest.mark.slow
def test_the_package_code_is_the_handler_alone_without_the_training_codes_requirements(exported, tmp_path):
    folder, _, _ = exported
    code = folder / "code"
    assert (code / "steps" / "serve" / "tensorflow.py").is_file()
    assert "from steps.serve.tensorflow import input_handler, output_handler" in (code / "inference.py").read_text()
    assert not (code / "requirements.txt").exists()


def _context(content_type: str = "image/png", accept: str = "application/json") -> SimpleNamespace:
    """What the service hands the handlers (tfs_utils.Context: the request's content type and accept header among others)."""
    return SimpleNamespace(request_content_type=content_type, accept_header=accept, rest_uri="http://localhost:8501")


def test_the_input_handler_sends_the_encoded_image_as_tf_servings_b64_to_the_serving_signature():
    image = _png(4)
    body = json.loads(handler.input_handler(io.BytesIO(image), _context("image/png; charset=binary")))
    assert body == {"signature_name": SIGNATURE, "instances": [{"b64": base64.b64encode(image).decode()}]}


def test_a_content_type_or_accept_not_served_is_the_services_4xx_with_one_line(monkeypatch, tmp_path):
    with pytest.raises(falcon.HTTPError) as refused:
        handler.input_handler(io.BytesIO(b"{}"), _context("application/json"))
    assert refused.value.status == falcon.HTTP_415
    assert refused.value.description.startswith("content type 'application/json' is not served: send the encoded image")
    reply = SimpleNamespace(content=json.dumps({"predictions": [[0.2, 0.5, 0.3]]}).encode())
    with pytest.raises(falcon.HTTPError) as refused:
        handler.output_handler(reply, _context(accept="text/csv"))
    assert refused.value.status == falcon.HTTP_406 and "ask for application/json" in refused.value.description


def test_the_output_handler_ranks_tf_servings_scores_by_the_models_class_names(monkeypatch, tmp_path):
    (tmp_path / METRICS_FILE).write_text(json.dumps({"classes": CLASSES}))
    monkeypatch.setattr(handler, "MODEL_DIR", tmp_path)
    handler.classes.cache_clear()
    try:
        for predictions in ([[0.2, 0.5, 0.3]], [{OUTPUT: [0.2, 0.5, 0.3]}]):  # one output, or outputs by name
            body, content_type = handler.output_handler(
                SimpleNamespace(content=json.dumps({"predictions": predictions}).encode()), _context(accept="*/*")
            )
            assert content_type == "application/json"
            assert json.loads(body) == {
                "predictions": [
                    {"class": "square", "score": 0.5},
                    {"class": "triangle", "score": 0.3},
                    {"class": "circle", "score": 0.2},
                ]
            }
    finally:
        handler.classes.cache_clear()


HANDLER_AS_THE_SERVICE_LOADS_IT = """
import importlib.util, json, sys
from types import SimpleNamespace
spec = importlib.util.spec_from_file_location("inference", sys.argv[1])
inference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(inference)
context = SimpleNamespace(request_content_type="image/jpeg", accept_header="application/json")
sent = json.loads(inference.input_handler(b"\\xff\\xd8 image bytes", context))
reply = SimpleNamespace(content=json.dumps({"predictions": [[0.1, 0.7, 0.2]]}).encode())
body, _ = inference.output_handler(reply, context)
print(json.dumps({"sent": sent, "top": json.loads(body)["predictions"][0],
                  "imported": sorted(m for m in ("PIL", "tensorflow", "torch", "keras") if m in sys.modules)}))
"""


@pytest.mark.slow
def test_the_packaged_handler_runs_from_code_as_the_service_loads_it_with_no_framework_or_image_library(exported):
    """The service execs code/inference.py by file with code/ on PYTHONPATH (the image has no TensorFlow Python and no
    image library): the handler needs the standard library alone (falcon only to refuse), and reads the class names
    from the model folder it is unpacked in."""
    import subprocess
    import sys

    folder, _, _ = exported
    code = folder / "code"
    done = subprocess.run(
        # -S: no site-packages (this project's editable install among them): the standard library and code/ only
        [sys.executable, "-S", "-c", HANDLER_AS_THE_SERVICE_LOADS_IT, str(code / "inference.py")],
        env={"PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"},
        cwd=folder,  # `python -c` puts its working folder first: not this checkout's
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["top"] == {"class": "square", "score": 0.7} and result["imported"] == []
    assert base64.b64decode(result["sent"]["instances"][0]["b64"]) == b"\xff\xd8 image bytes"

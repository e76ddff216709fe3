"""A TensorFlow model package served as SageMaker's TensorFlow Serving container serves it: TF Serving's stand-in on the
SavedModel in 1/, the container's Python service in front of it calling the package's handlers, confined to the
TensorFlow inference image's packages; its answers are the trained model's, a bad request is a 4xx and the next is
served. The model: a workload's untrained network as the TensorFlow trainer exports it."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request

import numpy as np
import pytest
from PIL import Image

from pipeline.emulator.results import pack_folder
from pipeline.emulator.serving import serve_model
from steps.common.errors import UserError
from tests.support.serving import tensorflow_model_folder

CLASSES = ["circle", "square", "triangle"]
WORKLOAD = "steps.train.workloads.shapes"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-inference:2.20-cpu-py312-amzn2023-sagemaker-v1"

pytestmark = pytest.mark.slow  # exports a SavedModel and starts a container (TensorFlow loads the model: seconds)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """model.tar.gz as SageMaker packs a TensorFlow trainer's model folder; and the Keras model and workload."""
    folder = tmp_path_factory.mktemp("model")
    workload, model = tensorflow_model_folder(folder, WORKLOAD, CLASSES)
    tar_path = folder.parent / "model.tar.gz"
    pack_folder(folder, tar_path)
    return tar_path, model, workload


def _png(seed: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (70, 70, 3), dtype=np.uint8)).save(out, format="PNG")
    return out.getvalue()


def _post(url: str, body: bytes, content_type: str = "image/png", accept: str = "application/json") -> tuple[int, bytes]:
    request = urllib.request.Request(f"{url}/invocations", data=body, headers={"Content-Type": content_type, "Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def test_a_tensorflow_package_answers_as_its_trained_model_refuses_bad_requests_and_goes_with_close(
    tmp_path, package, no_leftovers
):
    import tensorflow as tf

    tar_path, model, workload = package
    lines: list[str] = []
    with serve_model(
        {"Image": IMAGE, "ModelDataUrl": str(tar_path)}, work_dir=tmp_path / "c", port=0, echo=lines.append
    ) as served:
        with urllib.request.urlopen(f"{served.url}/ping", timeout=10) as ping:
            assert ping.status == 200
        for seed in (0, 1):
            body = _png(seed)
            status, answer = _post(served.url, body)
            assert status == 200, answer
            served_scores = {p["class"]: p["score"] for p in json.loads(answer)["predictions"]}
            pixels = workload.tf_decode(tf.constant(body), train=False, seed=tf.constant([0, 0], tf.int64))
            direct = tf.nn.softmax(model(workload.tf_normalize(tf.expand_dims(pixels, 0)), training=False)).numpy()[0]
            assert list(served_scores) == [CLASSES[i] for i in np.argsort(-direct, kind="stable")]
            np.testing.assert_allclose([served_scores[c] for c in CLASSES], direct, rtol=1e-5, atol=1e-6)
        status, answer = _post(served.url, b"\x89PNG not an image")
        assert status == 400 and len(answer.decode().strip().splitlines()) == 1, answer  # TF Serving's own refusal
        assert _post(served.url, _png(0), content_type="text/csv")[0] == 415
        assert _post(served.url, _png(0), accept="text/csv")[0] == 406
        assert _post(served.url, _png(2))[0] == 200  # still serving
    assert served.process.poll() is not None
    guard = json.loads((tmp_path / "c" / ".image" / "image_guard.json").read_text())
    assert guard["manifest"] == "pipeline/manifests/tensorflow-inference-cpu.json"
    assert {"tensorflow-cpu", "keras", "pillow", "torch"} <= set(guard["refused_distributions"])  # none in the service
    assert not any("has no package manifest" in line for line in lines)


def test_a_savedmodel_without_the_handlers_is_refused_naming_the_fix(tmp_path):
    folder = tmp_path / "model"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "saved_model.pb").write_bytes(b"")
    pack_folder(folder, tmp_path / "model.tar.gz")
    with pytest.raises(UserError, match=r"is a SavedModel without code/inference\.py: .* retrain it"):
        serve_model({"Image": IMAGE, "ModelDataUrl": str(tmp_path / "model.tar.gz")}, work_dir=tmp_path / "c")
    assert not list((tmp_path / "c").glob("serve.log"))  # no container was started

"""The PyTorch inference handler as the inference toolkit calls it: a model folder as training leaves it in, an image
in, every class's probability out (the trained model's own, on the same image); a request it cannot answer is the
toolkit's error with a 4xx status, and the handler answers the next one."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image
from sagemaker_inference.errors import BaseInferenceToolkitError

from steps.contract import METRICS_FILE
from steps.serve import pytorch as handler
from steps.train.workload import load_workload

CLASSES = ["circle", "square", "triangle"]
WORKLOAD = "steps.train.workloads.shapes"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """What a PyTorch trainer leaves in the model folder: the weights (a state_dict) and metrics.json."""
    folder = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    model = load_workload(WORKLOAD, {}).build_model(len(CLASSES))
    torch.save(model.state_dict(), folder / handler.MODEL_FILE)
    document = {"classes": CLASSES, "config": {"workload": WORKLOAD, "workload_options": {}}}
    (folder / METRICS_FILE).write_text(json.dumps(document))
    return folder


def _png(seed: int, size: int = 80) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def _serve(served, body: bytes, content_type: str = "image/png", accept: str = "application/json") -> dict:
    return json.loads(handler.output_fn(handler.predict_fn(handler.input_fn(body, content_type), served), accept))


def test_a_served_prediction_is_the_trained_models_on_the_same_image(model_dir):
    served = handler.model_fn(str(model_dir))
    trained = load_workload(WORKLOAD, {}).build_model(len(CLASSES))
    trained.load_state_dict(torch.load(model_dir / handler.MODEL_FILE, weights_only=True))
    trained.eval()
    for seed in range(3):
        image = _png(seed)
        predictions = _serve(served, image)["predictions"]
        pixels = served.workload.decode(image, train=False, rng=np.random.default_rng(1))
        with torch.no_grad():
            direct = torch.softmax(trained(served.workload.normalize(torch.from_numpy(np.array(pixels)).unsqueeze(0))), dim=1)[0]
        assert [p["class"] for p in predictions] == [CLASSES[i] for i in torch.argsort(direct, descending=True)]
        by_class = {p["class"]: p["score"] for p in predictions}
        assert by_class == pytest.approx(dict(zip(CLASSES, direct.tolist(), strict=True)), abs=1e-6)


@pytest.mark.parametrize(
    "body,content_type,accept,status,says",
    [
        (b"\x89PNG\r\n\x1a\n not an image", "image/png", "application/json", 400, "does not decode"),
        (b"", "application/x-image", "application/json", 400, "does not decode"),
        (_png(0), "application/json", "application/json", 415, "content type 'application/json' is not served"),
        (_png(0), "image/png", "text/csv", 406, "accept 'text/csv' is not written"),
    ],
)
def test_a_request_the_model_cannot_answer_is_a_4xx_and_the_next_one_is_answered(
    model_dir, body, content_type, accept, status, says
):
    served = handler.model_fn(str(model_dir))
    with pytest.raises(BaseInferenceToolkitError) as refused:
        _serve(served, body, content_type, accept)
    assert refused.value.status_code == status and says in refused.value.message
    assert "\n" not in refused.value.message
    assert len(_serve(served, _png(1))["predictions"]) == len(CLASSES)


def test_content_types_are_read_as_http_sends_them(model_dir):
    served = handler.model_fn(str(model_dir))
    for content_type in ("image/png", "IMAGE/JPEG", "application/x-image; charset=binary"):
        assert handler.input_fn(_png(2), content_type) == _png(2)
    assert _serve(served, _png(2), accept="application/json, */*;q=0.1")["predictions"]
    assert _serve(served, _png(2), accept="")["predictions"]  # no Accept header: JSON


def test_a_model_folder_without_its_workload_is_refused_naming_the_file(tmp_path):
    (tmp_path / METRICS_FILE).write_text(json.dumps({"classes": CLASSES}))
    with pytest.raises(ValueError, match=r"metrics\.json names no workload or no classes"):
        handler.model_fn(str(tmp_path))

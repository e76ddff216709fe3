"""A trained PyTorch (or Ray) model as SageMaker's PyTorch inference toolkit serves it: the four functions its
transformer looks for in the model package's ``code/inference.py``, called as it calls them.

``model_fn(model_dir)`` once, at start: the workload named in ``metrics.json`` (its module ships in ``code/``) builds
the model, the weights of ``model.pt`` go in. Per request, ``input_fn(body, content_type)`` takes the encoded image
(the toolkit gives it no model, so decoding waits for ``predict_fn``), ``predict_fn(image, served)`` decodes it as
evaluation decodes (no augmentation) and returns every class's probability, and ``output_fn(scores, accept)`` writes
them as JSON, the most likely class first. A request the model cannot answer (a content type it does not take, an
image that does not decode, a response type it does not write) raises `BadRequest`, which the toolkit answers with
its status and one line; the server keeps serving.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sagemaker_inference.errors import BaseInferenceToolkitError

from steps.contract import METRICS_FILE
from steps.serve.answer import accept_refusal, content_refusal, ranked
from steps.train.workload import Workload, load_workload

MODEL_FILE = "model.pt"  # the state_dict the PyTorch and Ray trainers write into the model folder
DECODE_SEED = 0  # evaluation decodes draw nothing at random; the generator is only the interface's


class BadRequest(BaseInferenceToolkitError):
    """A request this model cannot answer: its status (4xx) and the one line the client reads."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(status_code, message, message)


@dataclass(frozen=True)
class Served:
    """What `model_fn` loads: the workload (its decode and normalisation), the model, the class names."""

    workload: Workload
    model: torch.nn.Module
    classes: list[str]
    device: torch.device


def model_fn(model_dir: str) -> Served:
    folder = Path(model_dir)
    document = json.loads((folder / METRICS_FILE).read_text())
    config, classes = document.get("config") or {}, document.get("classes") or []
    if not config.get("workload") or not classes:
        raise ValueError(f"{folder / METRICS_FILE} names no workload or no classes: package a model trained by this release")
    workload = load_workload(config["workload"], config.get("workload_options") or {})
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = workload.build_model(len(classes))
    model.load_state_dict(torch.load(folder / MODEL_FILE, map_location=device, weights_only=True))
    return Served(workload, model.to(device).eval(), list(classes), device)


def input_fn(body: bytes | bytearray | str, content_type: str) -> bytes:
    if refused := content_refusal(content_type):
        raise BadRequest(415, refused)
    return body.encode("latin-1") if isinstance(body, str) else bytes(body)


def predict_fn(image: bytes, served: Served) -> dict[str, float]:
    try:
        pixels = served.workload.decode(image, train=False, rng=np.random.default_rng(DECODE_SEED))
    except Exception as exc:  # noqa: BLE001 - whatever the workload's decoder raises on bytes that are no image
        raise BadRequest(400, f"the image does not decode ({type(exc).__name__}: {exc}): send a JPEG or PNG") from None
    pixels = np.array(pixels, dtype=np.uint8)  # a copy: a decoded image may be read-only, which torch warns of
    batch = torch.from_numpy(pixels).unsqueeze(0).to(served.device)
    with torch.inference_mode():
        scores = torch.softmax(served.model(served.workload.normalize(batch)).float(), dim=1)[0].cpu()
    return dict(zip(served.classes, scores.tolist(), strict=True))


def output_fn(scores: dict[str, float], accept: str) -> str:
    if refused := accept_refusal(accept):
        raise BadRequest(406, refused)
    return ranked(scores.items())

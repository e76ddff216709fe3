"""A trained TensorFlow model as SageMaker's TensorFlow Serving container serves it: the two functions its Python
service looks for in the model package's ``code/inference.py``, called as it calls them.

The container runs TensorFlow Serving on the SavedModel in ``1/`` (steps/train/frameworks/tensorflow/serving.py: it
decodes the image itself) behind a Python service that, per request, calls ``input_handler(data, context)`` for the
body it sends to TF Serving's REST API and ``output_handler(response, context)`` for what the client gets. The image
has no TensorFlow Python and no image library: these handlers only wrap the encoded image as TF Serving's ``b64`` and
rank the scores by the class names of the model's metrics.json. A request they cannot pass on (a content type not
served, a response type not written) is a ``falcon.HTTPError`` with its status and one line, as the service answers
it; an image that does not decode is refused by TF Serving (400), which the service passes on as it came.
"""

from __future__ import annotations

import base64
import json
from functools import cache
from pathlib import Path

from steps.contract import METRICS_FILE, SERVING_ACCEPT
from steps.serve.answer import accept_refusal, content_refusal, ranked
from steps.train.frameworks.tensorflow.serving import OUTPUT, SIGNATURE  # the SavedModel's (standard library only)

# this file in the package: <model dir>/code/steps/serve/tensorflow.py; the model's metrics.json is in <model dir>
MODEL_DIR = Path(__file__).resolve().parents[3]


def input_handler(data, context) -> str:  # noqa: ANN001 - the service's request stream and its Context
    if refused := content_refusal(context.request_content_type):
        raise _refusal(415, refused)
    body = data.read() if hasattr(data, "read") else data
    return json.dumps({"signature_name": SIGNATURE, "instances": [{"b64": base64.b64encode(bytes(body)).decode("ascii")}]})


def output_handler(response, context) -> tuple[str, str]:  # noqa: ANN001 - TF Serving's requests.Response, the Context
    if refused := accept_refusal(context.accept_header):
        raise _refusal(406, refused)
    (scores,) = json.loads(response.content)["predictions"]  # one image per request
    if isinstance(scores, dict):  # a signature with several outputs answers each by name
        scores = scores[OUTPUT]
    return ranked(zip(classes(), scores, strict=True)), SERVING_ACCEPT


@cache
def classes() -> list[str]:
    """The model's class names, in the order of its scores."""
    document = json.loads((MODEL_DIR / METRICS_FILE).read_text())
    if not document.get("classes"):
        raise ValueError(f"{MODEL_DIR / METRICS_FILE} names no classes: package a model trained by this release")
    return list(document["classes"])


def _refusal(status: int, message: str) -> Exception:
    import falcon  # the TensorFlow inference image's web framework: the service answers its HTTPError as it says

    return falcon.HTTPError(falcon.code_to_http_status(status), description=message)

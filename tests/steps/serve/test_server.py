"""The serving container's HTTP side over a real socket: a model folder as training leaves it (weights, metrics.json,
the code every host writes), the inference toolkit's own Transformer behind GET /ping and POST /invocations; what it
cannot serve is a 4xx with one line, and the next request is served."""

from __future__ import annotations

import http.client
import io
import json
import sys
import threading

import numpy as np
import pytest
import torch
from PIL import Image

from steps.contract import METRICS_FILE
from steps.serve import pytorch as handler
from steps.serve.server import make_server
from steps.train.core.model_package import write_serving_code
from steps.train.workload import load_workload
from tests.support.threads import no_leaked_threads  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("no_leaked_threads")

CLASSES = ["circle", "square", "triangle"]
WORKLOAD = "steps.train.workloads.shapes"


def _png(seed: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (72, 72, 3), dtype=np.uint8)).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A model package unpacked as SageMaker hosting unpacks it, served on a free loopback port; yields a request
    function (method, path, body, headers) -> (status, content type, body)."""
    monkeypatch.setenv("SAGEMAKER_MAX_PAYLOAD_IN_MB", "0.5")
    monkeypatch.setattr(sys, "path", list(sys.path))  # the server puts the package's code/ first
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    torch.manual_seed(0)
    torch.save(load_workload(WORKLOAD, {}).build_model(len(CLASSES)).state_dict(), model_dir / handler.MODEL_FILE)
    (model_dir / METRICS_FILE).write_text(json.dumps({"classes": CLASSES, "config": {"workload": WORKLOAD}}))
    write_serving_code(model_dir, WORKLOAD)
    server = make_server(model_dir, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def request(method: str, path: str, body: bytes = b"", headers: dict | None = None):
        connection = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.getheader("Content-Type"), response.read()
        finally:
            connection.close()

    request.model_dir = model_dir
    try:
        yield request
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        sys.modules.pop("inference", None)  # the package's handler module, imported by name


def test_ping_and_an_invocation_answer_what_the_handler_answers(served):
    assert served("GET", "/ping")[0] == 200
    status, kind, body = served("POST", "/invocations", _png(0), {"Content-Type": "image/png", "Accept": "application/json"})
    assert (status, kind) == (200, "application/json")
    loaded = handler.model_fn(str(served.model_dir))
    assert json.loads(body) == json.loads(handler.output_fn(handler.predict_fn(_png(0), loaded), "application/json"))


@pytest.mark.parametrize(
    "body,headers,status,says",
    [
        (b"GIF89a not really", {"Content-Type": "image/png"}, 400, "the image does not decode"),
        (b'{"instances": []}', {"Content-Type": "application/json"}, 415, "content type 'application/json' is not served"),
        (_png(2), {"Content-Type": "image/png", "Accept": "text/csv"}, 406, "accept 'text/csv' is not written"),
        (b"\0" * (600 * 1024), {"Content-Type": "image/png"}, 413, "request of 614400 bytes is over 524288"),
    ],
)
def test_a_request_it_cannot_serve_is_a_4xx_with_one_line_and_the_next_is_served(served, body, headers, status, says):
    got, kind, text = served("POST", "/invocations", body, headers)
    assert (got, kind) == (status, "text/plain") and says in text.decode() and "\n" not in text.decode()
    assert served("POST", "/invocations", _png(1), {"Content-Type": "image/jpeg"})[0] == 200


def test_other_paths_are_404_naming_the_two_it_has(served):
    for method, path in (("GET", "/"), ("POST", "/predict")):
        status, _, text = served(method, path)
        assert status == 404 and "GET /ping, POST /invocations" in text.decode()


@pytest.mark.slow
def test_the_packages_own_server_file_serves_from_the_unpacked_package_and_a_sigterm_ends_it(served):
    """As the serving image's `serve` runs it: by path, from the package's code/, a process of its own."""
    import re
    import signal
    import subprocess

    script = served.model_dir / "code" / "steps" / "serve" / "server.py"
    args = [sys.executable, str(script), "--model-dir", str(served.model_dir), "--host", "127.0.0.1", "--port", "0"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=served.model_dir)
    try:
        line = process.stdout.readline()  # the ready line: the model loaded, the port bound
        port = int(re.search(r"http://127\.0\.0\.1:(\d+) ", line).group(1))
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("POST", "/invocations", body=_png(3), headers={"Content-Type": "image/png"})
        answer = connection.getresponse()
        assert answer.status == 200 and len(json.loads(answer.read())["predictions"]) == len(CLASSES)
        connection.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.wait()
        process.stdout.close()

"""SageMaker's TensorFlow Serving container emulated on one machine: the model server's REST API over the package's
SavedModel, and the container's Python service in front of it, confined to the inference image's packages.

In the container (aws/deep-learning-containers scripts/docker/tensorflow/inference/sagemaker: serve.py starts
``tensorflow_model_server`` on every SavedModel under /opt/ml/model, named after its folder, and, when the package
has ``code/inference.py``, the Python service, python_service.py, with ``code/`` on its PYTHONPATH). The model server
is a C++ binary that is not here; this process stands in for it with TensorFlow's Python on the same SavedModel,
answering the part of its REST API the service calls (``GET /v1/models/<name>``, ``POST
/v1/models/<name>[/versions/<n>]:predict`` in the row format, ``{"b64": ...}`` for a string input, an error as
``{"error": ...}`` with 400 for an input the model refuses). It then starts the service
(`pipeline.emulator.tf_service`) as the container would, and ends with it.

    python tf_serving.py --model-dir DIR --host 127.0.0.1 --port 8080 --service-path GUARD:DIR/code
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SERVICE = Path(__file__).with_name("tf_service.py")
_PREDICT = re.compile(r"/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?:predict")
_STATUS = re.compile(r"/v1/models/(?P<name>[^/:]+)/?")


class Models:
    """The SavedModel versions of one model folder (TF Serving's numbered sub-folders), loaded once."""

    def __init__(self, model_dir: Path) -> None:
        import tensorflow as tf

        self.name = model_dir.name  # serve.py: the model's name is its folder's
        versions = sorted(int(p.name) for p in model_dir.iterdir() if p.name.isdigit() and (p / "saved_model.pb").is_file())
        if not versions:
            raise SystemExit(f"no SavedModel bundles found under {model_dir} (<version>/saved_model.pb)")
        self.loaded = {v: tf.saved_model.load(str(model_dir / str(v))) for v in versions}
        self.latest = versions[-1]

    def predict(self, version: int | None, body: dict) -> dict:
        """TF Serving's predict in the row format: one output per instance, by name where the signature has several."""
        import tensorflow as tf

        model = self.loaded[version or self.latest]
        name = body.get("signature_name", "serving_default")
        if name not in model.signatures:
            raise LookupError(f'Serving signature name: "{name}" not found in signature def')
        signature = model.signatures[name]
        (_, specs) = signature.structured_input_signature
        instances = body.get("instances")
        if not isinstance(instances, list) or not instances:
            raise ValueError('Missing or empty "instances" in the request (the row format is the one served here)')
        columns: dict[str, list] = {key: [] for key in specs}
        only = next(iter(specs)) if len(specs) == 1 else None
        for instance in instances:  # by input name, or the one input's value itself
            row = instance if isinstance(instance, dict) and set(instance) == set(specs) else {only: instance} if only else None
            if row is None:
                raise ValueError(f"an instance names not each input of the signature: {sorted(specs)}")
            for key in specs:
                columns[key].append(_value(row[key]))
        inputs = {key: tf.constant(values, dtype=specs[key].dtype) for key, values in columns.items()}
        outputs = {key: value.numpy().tolist() for key, value in signature(**inputs).items()}
        if len(outputs) == 1:
            (only,) = outputs.values()
            return {"predictions": only}
        return {"predictions": [{k: v[i] for k, v in outputs.items()} for i in range(len(instances))]}


def _value(value):
    """An instance's value as TF Serving's REST API reads it: ``{"b64": ...}`` is a string tensor's bytes."""
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_value(v) for v in value]
    return value


def rest_server(models: Models, host: str) -> ThreadingHTTPServer:
    """The model server's REST API on a free port of ``host``."""
    import tensorflow as tf

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            match = _STATUS.fullmatch(self.path)
            if not match or match["name"] != models.name:
                return self._answer(404, {"error": f"Servable not found for request: {self.path}"})
            state = {"version": str(models.latest), "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
            self._answer(200, {"model_version_status": [state]})

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            match = _PREDICT.fullmatch(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not match or match["name"] != models.name:
                return self._answer(404, {"error": f"Servable not found for request: {self.path}"})
            version = int(match["version"]) if match["version"] else None
            if version is not None and version not in models.loaded:
                return self._answer(404, {"error": f"Servable not found for request: Specific({models.name}, {version})"})
            try:
                answer = models.predict(version, json.loads(body))
            except (ValueError, LookupError, tf.errors.InvalidArgumentError) as exc:
                message = exc.message if isinstance(exc, tf.errors.OpError) else str(exc)
                return self._answer(400, {"error": message.strip().splitlines()[0] if message.strip() else type(exc).__name__})
            self._answer(200, answer)

        def _answer(self, status: int, document: dict) -> None:
            payload = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
            pass  # TF Serving logs no requests

    return ThreadingHTTPServer((host, 0), Handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--service-path", default="", help="the service's PYTHONPATH (the import guard, then code/)")
    args = parser.parse_args(argv)
    models = Models(args.model_dir.resolve())
    server = rest_server(models, args.host)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    rest_port = server.server_address[1]
    print(f"[tfs] model {models.name} versions {sorted(models.loaded)} on http://{args.host}:{rest_port}", flush=True)
    env = {**os.environ, "PYTHONPATH": args.service_path, "TFS_REST_PORTS": str(rest_port), "TFS_DEFAULT_MODEL_NAME": models.name}
    service = subprocess.Popen(
        [sys.executable, str(SERVICE), "--model-dir", str(args.model_dir), "--host", args.host, "--port", str(args.port)],
        env=env,
    )
    signal.signal(signal.SIGTERM, lambda *_: service.terminate())
    try:
        return service.wait()
    except KeyboardInterrupt:
        service.terminate()
        return service.wait()
    finally:
        server.shutdown()


if __name__ == "__main__":
    sys.exit(main())

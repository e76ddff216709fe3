"""The Python service of SageMaker's TensorFlow Serving container, for a package with ``code/inference.py``: ``GET
/ping`` and ``POST /invocations``, each invocation passed through the package's handlers as the container's
python_service.py passes it (aws/deep-learning-containers scripts/docker/tensorflow/inference/sagemaker:
``PythonServiceResource._make_handler`` and ``tfs_utils.parse_request``):

* the handlers come from ``code/inference.py``, loaded by file; ``handler(data, context)`` if it has one, else
  ``input_handler`` -> ``POST context.rest_uri`` (TF Serving) -> ``output_handler``; a non-200 from TF Serving is a
  ``falcon.HTTPError`` with its status and body;
* ``data`` is the request's stream and ``context`` the service's ``Context`` (the request's content type and Accept,
  ``application/json`` when absent; ``tfs-model-name``, ``tfs-model-version`` and ``tfs-method`` from
  ``X-Amzn-SageMaker-Custom-Attributes``);
* a handler's ``falcon.HTTPError`` is the answer; any other exception is a 500 with ``{"error": ...}``.

The container runs it under gunicorn and gevent behind nginx; here the standard library's threading WSGI server
serves it, started by `pipeline.emulator.tf_serving` with the inference image's import guard and ``code/`` on
PYTHONPATH, so it imports what that image has (falcon, requests) and nothing of this machine's.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import re
import sys
from collections import namedtuple
from collections.abc import Callable
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import falcon
import requests

CUSTOM_ATTRIBUTES_HEADER = "X-Amzn-SageMaker-Custom-Attributes"
DEFAULT_CONTENT_TYPE = DEFAULT_ACCEPT_HEADER = "application/json"
WAIT_S = int(os.environ.get("SAGEMAKER_TFS_WAIT_TIME_SECONDS", "60"))
Context = namedtuple(
    "Context",
    "model_name, model_version, method, rest_uri, grpc_port, channel, "
    "custom_attributes, request_content_type, accept_header, content_length, timeout",
)


def load_handler(inference_script: Path) -> Callable[[object, Context], tuple[str, str]]:
    """The service's request handler from the package's ``inference.py``."""
    spec = importlib.util.spec_from_file_location("inference", inference_script)
    assert spec is not None and spec.loader is not None
    inference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(inference)
    if hasattr(inference, "handler"):
        return inference.handler
    input_handler, output_handler = inference.input_handler, inference.output_handler

    def handler(data, context):
        processed_input = input_handler(data, context)
        response = requests.post(context.rest_uri, data=processed_input, timeout=context.timeout)
        if response.status_code != 200:
            raise falcon.HTTPError(
                falcon.code_to_http_status(response.status_code), description=response.content.decode("utf-8", "replace")
            )
        return output_handler(response, context)

    return handler


def parse_request(req: falcon.Request, rest_port: str, default_model_name: str) -> tuple[object, Context]:
    header = req.get_header(CUSTOM_ATTRIBUTES_HEADER)
    attributes = dict(a.split("=", 1) for a in re.findall(r"(tfs-[a-z\-]+=[^,]+)", header)) if header else {}
    name = attributes.get("tfs-model-name") or default_model_name
    version, method = attributes.get("tfs-model-version"), attributes.get("tfs-method", "predict")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}", name):
        raise ValueError("invalid tfs-model-name")
    if version is not None and not re.fullmatch(r"\d+", version):
        raise ValueError("invalid tfs-model-version: must be a positive integer")
    if method not in ("predict", "classify", "regress"):
        raise ValueError("invalid tfs-method: must be one of predict|classify|regress")
    uri = f"http://localhost:{rest_port}/v1/models/{name}{f'/versions/{version}' if version else ''}:{method}"
    context = Context(
        attributes.get("tfs-model-name"),
        version,
        attributes.get("tfs-method"),
        uri,
        None,
        None,
        header,
        req.get_header("Content-Type") or DEFAULT_CONTENT_TYPE,
        req.get_header("Accept") or DEFAULT_ACCEPT_HEADER,
        req.content_length,
        WAIT_S,
    )
    return req.stream, context


class Invocations:
    def __init__(self, handler, rest_port: str, default_model_name: str) -> None:
        self.handler, self.rest_port, self.default_model_name = handler, rest_port, default_model_name

    def on_post(self, req: falcon.Request, res: falcon.Response) -> None:
        try:
            data, context = parse_request(req, self.rest_port, self.default_model_name)
        except ValueError as exc:
            res.status, res.text = falcon.HTTP_400, json.dumps({"error": str(exc)})
            return
        try:
            res.status = falcon.HTTP_200
            res.text, res.content_type = self.handler(data, context)
        except falcon.HTTPError:
            raise
        except Exception as exc:  # noqa: BLE001 - the service answers any handler failure with a 500
            print(f"[serve] exception handling request: {exc}", file=sys.stderr, flush=True)
            res.status, res.text = falcon.HTTP_500, json.dumps({"error": str(exc)})


class Ping:
    def on_get(self, req: falcon.Request, res: falcon.Response) -> None:
        res.status = falcon.HTTP_200


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def bounded(app: Callable) -> Callable:
    """``app`` with the request body gunicorn gives it: ``wsgi.input`` ends at Content-Length (wsgiref's is the socket,
    whose ``read()`` waits for the client to close)."""

    def wrapped(environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length) if length > 0 else b"")
        return app(environ, start_response)

    return wrapped


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        print(f"[serve] {self.address_string()} {format % args}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    handler = load_handler(args.model_dir / "code" / "inference.py")
    app = falcon.App()
    app.add_route("/ping", Ping())
    app.add_route("/invocations", Invocations(handler, os.environ["TFS_REST_PORTS"], os.environ["TFS_DEFAULT_MODEL_NAME"]))
    with make_server(args.host, args.port, bounded(app), server_class=_Server, handler_class=_Quiet) as server:
        print(
            f"[serve] model {args.model_dir} on http://{args.host}:{server.server_port} (GET /ping, POST /invocations)",
            flush=True,
        )
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

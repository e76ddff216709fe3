"""The inference container's HTTP side: ``GET /ping`` and ``POST /invocations`` on ``SAGEMAKER_BIND_TO_PORT``
(8080), as SageMaker hosting calls a container started with ``serve``, each request handed to the inference toolkit's
own `Transformer`, which calls the package's ``code/inference.py`` (`steps.serve.pytorch`) as it does behind its
Java model server.

In the serving image (images/pytorch-serve/Dockerfile)::

    serve  ->  python /opt/ml/model/code/steps/serve/server.py

Locally (`hetero models serve`), the same file of the unpacked package, with ``--model-dir`` and ``--port``.

The toolkit answers a request it cannot serve with the error's status and ``message\\ntraceback`` as the body; here
the client gets the status and the message, one line, and the traceback goes to the log. The server itself is the
standard library's threading HTTP server: the container needs nothing beyond the toolkit, and SageMaker's front end,
not this process, faces the clients.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

if __package__ in (None, ""):  # run by path from the unpacked package: code/ is what holds `steps`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

MODEL_DIR = "/opt/ml/model"  # where SageMaker hosting unpacks model.tar.gz
PORT_ENV, DEFAULT_PORT = "SAGEMAKER_BIND_TO_PORT", 8080
PAYLOAD_ENV, DEFAULT_PAYLOAD_MB = "SAGEMAKER_MAX_PAYLOAD_IN_MB", 6  # a real-time endpoint's request limit
DISCARD_LIMIT = 64 * 1024 * 1024  # what of a request over the limit is read before its 413 (SageMaker's front end caps it)


class _Request:
    """One request's headers as the toolkit reads them (its model server's request processor)."""

    def __init__(self, headers: dict[str, str]) -> None:
        self._headers = headers

    def get_request_properties(self) -> dict[str, str]:
        return self._headers


class _Context:
    """What `Transformer.transform` reads of a request and sets for its response (its model server's context)."""

    def __init__(self, model_dir: str, headers: dict[str, str]) -> None:
        self.system_properties = {"model_dir": model_dir}
        self.request_processor = [_Request(headers)]
        self.status, self.phrase, self.content_type = 200, "OK", "application/json"

    def set_response_status(self, code: int = 200, phrase: str = "") -> None:
        self.status, self.phrase = int(code), phrase

    def set_response_content_type(self, idx: int, value: str) -> None:
        self.content_type = value


def make_server(model_dir: Path, host: str = "0.0.0.0", port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    """The package in ``model_dir`` loaded (its ``code/`` on the import path, ``model_fn`` called once) behind a server
    bound to ``host``:``port`` (0: any free port), not yet serving."""
    from sagemaker_inference.transformer import Transformer

    code = model_dir / "code"
    if str(code) not in sys.path:
        sys.path.insert(0, str(code))
    transformer = Transformer()
    transformer.validate_and_initialize(model_dir=str(model_dir))
    limit = int(float(os.environ.get(PAYLOAD_ENV, DEFAULT_PAYLOAD_MB)) * 1024 * 1024)

    class Handler(BaseHTTPRequestHandler):
        server_version = "hetero-serve"
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path != "/ping":
                return self._reply(404, f"no {self.path}: GET /ping, POST /invocations")
            self._reply(200, "", "application/json")

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if self.path != "/invocations":
                return self._reply(404, f"no {self.path}: GET /ping, POST /invocations")
            length = int(self.headers.get("Content-Length") or 0)
            if length > limit:
                self._discard(length)  # a client still sending would see its connection reset, not the answer
                self.close_connection = True
                return self._reply(413, f"request of {length} bytes is over {limit} ({PAYLOAD_ENV}): send a smaller image")
            body = self.rfile.read(length)
            context = _Context(str(model_dir), dict(self.headers.items()))
            (response,) = transformer.transform([{"body": body}], context)
            if context.status >= 400:
                message, _, trace = str(response).partition("\n")
                print(f"[serve] {context.status} {message}\n{trace}", file=sys.stderr, flush=True)
                return self._reply(context.status, message)
            self._reply(context.status, response, context.content_type)

        def _discard(self, length: int) -> None:
            """Read and drop up to ``length`` bytes (at most DISCARD_LIMIT: beyond it the connection is closed unread)."""
            left = min(length, DISCARD_LIMIT)
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)

        def _reply(self, status: int, body: str | bytes, content_type: str = "text/plain") -> None:
            data = body.encode() if isinstance(body, str) else bytes(body)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
            print(f"[serve] {self.address_string()} {format % args}", file=sys.stderr, flush=True)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="serve a model package as SageMaker hosting calls its container")
    parser.add_argument("--model-dir", type=Path, default=Path(MODEL_DIR), help="the unpacked model package")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=int(os.environ.get(PORT_ENV, DEFAULT_PORT)))
    args = parser.parse_args(argv)
    server = make_server(args.model_dir, args.host, args.port)

    def stop(signum, frame) -> None:  # SageMaker stops a container with SIGTERM; shutdown() waits for serve_forever
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    print(f"[serve] model {args.model_dir} on http://{args.host}:{server.server_port} (GET /ping, POST /invocations)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

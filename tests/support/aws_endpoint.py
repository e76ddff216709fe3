"""A local HTTP endpoint standing where an AWS service's would, for what moto cannot answer (AWS's own refusals, the
Price List API, requests recorded as sent): boto3 reaches it through an ``AWS_ENDPOINT_URL*`` variable."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class JsonHandler(BaseHTTPRequestHandler):
    """Answers in the AWS JSON protocol; quiet."""

    def answer(self, status: int, document: object) -> None:
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextmanager
def aws_endpoint(
    handler: type[BaseHTTPRequestHandler], monkeypatch: pytest.MonkeyPatch, variable: str = "AWS_ENDPOINT_URL"
) -> Iterator[ThreadingHTTPServer]:
    """``handler`` serving on a local port that ``variable`` points at, until the block ends (server and thread gone)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    monkeypatch.setenv(variable, f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

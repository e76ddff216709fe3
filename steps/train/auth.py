"""Per-job secret and the mutual handshake that opens every data-plane connection.

Every host of a job gets the same secret in ``HETERO_JOB_SECRET`` (the local
runner draws a fresh one per job; the SageMaker pipeline passes one per
execution). A connection carries data, or a STOP, only after each side has
proved it knows the secret by an HMAC over the other side's fresh nonce, so
a port scan or a stray client can neither read batches nor stop a data host.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket

from steps.common.errors import UserError
from steps.contract import SECRET_ENV, SECRET_FD_ENV
from steps.train.wire import FrameReader, Kind, WireError, send_frame

MIN_SECRET_CHARS = 16


class AuthError(WireError):
    headline = "data plane authentication failed"


_from_pipe: bytes | None = None


def job_secret(environ: dict | None = None) -> bytes:
    """The job's secret: from ``HETERO_JOB_SECRET``, or, in a host that `steps.train.bind_guard` re-executed
    without it in its environment, read once from the pipe named by ``HETERO_JOB_SECRET_FD``."""
    environ = environ if environ is not None else os.environ
    value = environ.get(SECRET_ENV, "")
    if not value and environ.get(SECRET_FD_ENV):
        value = _read_secret_pipe(int(environ[SECRET_FD_ENV])).decode()
    if len(value) < MIN_SECRET_CHARS:
        raise UserError(
            f"{SECRET_ENV} must hold a secret of at least {MIN_SECRET_CHARS} characters shared by every host "
            f"of the job (got {len(value)}); the local runner and the pipeline set it per job",
            headline="missing job secret",
        )
    return value.encode()


def _read_secret_pipe(fd: int) -> bytes:
    global _from_pipe
    if _from_pipe is None:
        chunks = []
        try:
            while chunk := os.read(fd, 4096):
                chunks.append(chunk)
            os.close(fd)
        except OSError as exc:
            raise UserError(f"{SECRET_FD_ENV}={fd} names no readable pipe ({exc}); it is set only by the launcher "
                            "when it re-executes a TensorFlow host", headline="missing job secret") from None
        _from_pipe = b"".join(chunks)
    return _from_pipe


def new_secret() -> str:
    return secrets.token_hex(32)


def _mac(secret: bytes, role: str, nonce: str, host: str) -> str:
    return hmac.new(secret, f"{role}|{nonce}|{host}".encode(), hashlib.sha256).hexdigest()


def _read_small(reader: FrameReader, expected: Kind) -> dict:
    kind, meta, arrays = reader.read()
    if kind is Kind.ERROR:
        raise AuthError(f"peer refused the connection: {meta.get('reason', 'no reason given')}")
    if kind is not expected or arrays:
        raise AuthError(f"expected a {expected.name} frame during the handshake, got {kind.name}")
    return meta


def serve_handshake(sock: socket.socket, secret: bytes, *, host: str, info: dict) -> str:
    """Data-host side. Returns the authenticated trainer's host name."""
    reader = FrameReader(sock, max_body=0)
    nonce = secrets.token_hex(16)
    send_frame(sock, Kind.HELLO, {**info, "host": host, "nonce": nonce})
    meta = _read_small(reader, Kind.AUTH)
    peer, peer_nonce = str(meta.get("host", "")), str(meta.get("nonce", ""))
    if not hmac.compare_digest(str(meta.get("mac", "")), _mac(secret, "trainer", nonce, peer)):
        send_frame(sock, Kind.ERROR, {"reason": "authentication failed"})
        raise AuthError(f"a client claiming to be {peer!r} did not prove the job secret")
    send_frame(sock, Kind.AUTH, {"mac": _mac(secret, "data", peer_nonce, host)})
    return peer


def client_handshake(sock: socket.socket, secret: bytes, *, host: str) -> dict:
    """Trainer side. Returns the data host's HELLO metadata once it has proved the secret."""
    reader = FrameReader(sock, max_body=0)
    hello = _read_small(reader, Kind.HELLO)
    nonce = secrets.token_hex(16)
    send_frame(sock, Kind.AUTH, {"host": host, "nonce": nonce, "mac": _mac(secret, "trainer", str(hello.get("nonce", "")), host)})
    meta = _read_small(reader, Kind.AUTH)
    if not hmac.compare_digest(str(meta.get("mac", "")), _mac(secret, "data", nonce, str(hello.get("host", "")))):
        raise AuthError(f"data host {hello.get('host')!r} did not prove the job secret")
    return hello

"""Per-job secret and the mutual handshake that opens every data-plane connection.

Every host of a job reads the same secret from its ``secret`` input channel
(`steps.shard.job_secret`: the Shard step draws one per pipeline execution);
it is never in the environment. A connection carries data, or a STOP, only
after each side has proved it knows the secret by an HMAC over the other
side's fresh nonce, so a port scan or a stray client can neither read batches
nor stop a data host.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
from pathlib import Path

from steps.common.errors import UserError
from steps.contract import SECRET_CHANNEL, SECRET_FILE
from steps.train.dataplane.errors import AuthError
from steps.train.dataplane.messages import Auth, Error, Hello, Message
from steps.train.dataplane.wire import FrameReader, send_frame

MIN_SECRET_CHARS = 16


_loaded: bytes | None = None  # this process's job secret, once `load_job_secret` has read it


def load_job_secret(channel_dir: str | Path) -> bytes:
    """Read the job secret from the ``secret`` channel's folder, once per process (`job_secret` returns it after), and
    remove this host's copy of the file: a process that later runs code a peer sent it (a dataset graph tf.data.service
    runs, a Ray task) finds the secret neither in its environment nor on disk."""
    global _loaded
    path = Path(channel_dir) / SECRET_FILE
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise UserError(
            f"cannot read the job secret {path} ({exc.strerror or exc}): every training job gets the file the "
            f"pipeline's Shard step writes as its {SECRET_CHANNEL!r} input channel, on every instance group",
            headline="missing job secret",
        ) from None
    if len(value) < MIN_SECRET_CHARS:
        raise UserError(
            f"the job secret {path} holds {len(value)} characters; it must hold at least {MIN_SECRET_CHARS}, "
            "shared by every host of the job (steps/shard/job_secret.py writes one)",
            headline="missing job secret",
        )
    try:
        path.unlink()
    except OSError as exc:  # a read-only channel: the secret stays readable on this host's disk
        print(
            f"[auth] WARNING could not remove the job secret's file {path} after reading it ({exc.strerror or exc})", flush=True
        )
    _loaded = value.encode()
    return _loaded


def job_secret() -> bytes:
    """The job secret `load_job_secret` read (the launcher loads it before any server starts)."""
    if _loaded is None:
        raise UserError(
            f"this host has no job secret: the job needs the {SECRET_CHANNEL!r} input channel (the file "
            f"{SECRET_FILE} the pipeline's Shard step writes) on every instance group",
            headline="missing job secret",
        )
    return _loaded


def _mac(secret: bytes, role: str, nonce: str, host: str) -> str:
    return hmac.new(secret, f"{role}|{nonce}|{host}".encode(), hashlib.sha256).hexdigest()


def _read_small(reader: FrameReader, expected: type[Message]):
    kind, meta, arrays = reader.read()
    if kind is Error.KIND:
        raise AuthError(f"peer refused the connection: {Error.decode(meta, {}).reason}")
    if kind is not expected.KIND or arrays:
        raise AuthError(f"expected a {expected.KIND.name} frame during the handshake, got {kind.name}")
    return expected.decode(meta, {})


def _send(sock: socket.socket, message: Message) -> None:
    send_frame(sock, *message.encode())


def serve_handshake(sock: socket.socket, secret: bytes, *, host: str, info: dict) -> str:
    """Data-host side; ``info``: the rest of its `Hello`. Returns the authenticated trainer's host name."""
    reader = FrameReader(sock, max_body=0)
    nonce = secrets.token_hex(16)
    _send(sock, Hello(host=host, nonce=nonce, **info))
    auth = _read_small(reader, Auth)
    if not hmac.compare_digest(auth.mac, _mac(secret, "trainer", nonce, auth.host)):
        _send(sock, Error("authentication failed"))
        raise AuthError(f"a client claiming to be {auth.host!r} did not prove the job secret")
    _send(sock, Auth(mac=_mac(secret, "data", auth.nonce, host)))
    return auth.host


def client_handshake(sock: socket.socket, secret: bytes, *, host: str) -> Hello:
    """Trainer side. Returns the data host's `Hello` once it has proved the secret."""
    reader = FrameReader(sock, max_body=0)
    hello = _read_small(reader, Hello)
    nonce = secrets.token_hex(16)
    _send(sock, Auth(mac=_mac(secret, "trainer", hello.nonce, host), host=host, nonce=nonce))
    auth = _read_small(reader, Auth)
    if not hmac.compare_digest(auth.mac, _mac(secret, "data", nonce, hello.host)):
        raise AuthError(f"data host {hello.host!r} did not prove the job secret")
    return hello

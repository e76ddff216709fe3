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
from steps.train.dataplane.wire import FrameReader, Kind, WireError, send_frame

MIN_SECRET_CHARS = 16


class AuthError(WireError):
    headline = "data plane authentication failed"


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
        raise UserError(f"cannot read the job secret {path} ({exc.strerror or exc}): every training job gets the file the "
                        f"pipeline's Shard step writes as its {SECRET_CHANNEL!r} input channel, on every instance group",
                        headline="missing job secret") from None
    if len(value) < MIN_SECRET_CHARS:
        raise UserError(f"the job secret {path} holds {len(value)} characters; it must hold at least {MIN_SECRET_CHARS}, "
                        "shared by every host of the job (steps/shard/job_secret.py writes one)", headline="missing job secret")
    try:
        path.unlink()
    except OSError as exc:  # a read-only channel: the secret stays readable on this host's disk
        print(f"[auth] WARNING could not remove the job secret's file {path} after reading it ({exc.strerror or exc})", flush=True)
    _loaded = value.encode()
    return _loaded


def job_secret() -> bytes:
    """The job secret `load_job_secret` read (the launcher loads it before any server starts)."""
    if _loaded is None:
        raise UserError(f"this host has no job secret: the job needs the {SECRET_CHANNEL!r} input channel (the file "
                        f"{SECRET_FILE} the pipeline's Shard step writes) on every instance group", headline="missing job secret")
    return _loaded


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

"""The data plane's wire format: versioned frames over one TCP stream.

A frame is a fixed header, a small JSON metadata block and a body of raw
segments::

    header  <4sHHIQ>  magic b"HTRO", version, kind, meta length, body length
    meta    UTF-8 JSON, at most MAX_META_BYTES
    body    segments back to back, each described in meta["segments"] by
            name, dtype and shape (C order); no padding

Pixels travel as uint8 with their shape and dtype next to them, so the
receiver can land them straight in a (pinned) tensor with ``recv_into`` and
normalise on its own device: no pickle, no float32 on the wire. Every length
and shape is checked against limits before any allocation, so a truncated or
hostile frame ends in a `WireError` that says what was wrong, never in a huge
allocation or a hang.
"""

from __future__ import annotations

import errno
import json
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from math import prod

import numpy as np

from steps.train.dataplane.errors import PeerClosed, WireError

MAGIC = b"HTRO"
VERSION = 1
HEADER = struct.Struct("<4sHHIQ")
MAX_META_BYTES = 64 * 1024
MAX_BODY_BYTES = 2 * 1024**3
MAX_SEGMENTS = 16
MAX_DIMS = 8
DTYPES = {
    name: np.dtype(name) for name in ("uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64")
}


class Kind(IntEnum):
    HELLO = 1  # data host -> trainer: who I am, my nonce, samples per epoch
    AUTH = 2  # either way: HMAC over the peer's nonce
    BATCH = 3  # data host -> trainer: one ready batch
    END = 4  # data host -> trainer: end of an epoch, with its sample count
    PING = 5  # either way: keep-alive
    STOP = 6  # trainer -> data host: training is over (status, reason)
    ERROR = 7  # either way: the sender is failing, with a reason
    START = 8  # TensorFlow path: trainer -> data host: the dispatcher's address; data host -> trainer: worker up
    IDS = 9  # TensorFlow path: trainer -> data host: which sample ids do you serve? data host -> trainer: them
    REPORT = 10  # TensorFlow path: trainer -> data host: your own measurements? data host -> trainer: them
    RESUME = 11  # PyTorch path: trainer -> data host, first after the handshake: the epoch to start at and the ids it consumed


@dataclass(frozen=True)
class Segment:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(prod(self.shape)) * self.dtype.itemsize


@dataclass(frozen=True)
class Header:
    kind: Kind
    meta_len: int
    body_len: int


def encode_header(kind: Kind, meta: bytes, body_len: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, int(kind), len(meta), body_len)


def decode_header(raw: bytes | memoryview, *, max_body: int = MAX_BODY_BYTES) -> Header:
    magic, version, kind, meta_len, body_len = HEADER.unpack(raw)
    if magic != MAGIC:
        raise WireError(f"bad magic {bytes(magic)!r} (expected {MAGIC!r}): the peer is not a hetero data service")
    if version != VERSION:
        raise WireError(f"protocol version {version} not supported (this side speaks {VERSION}): run the same code on every host")
    try:
        kind = Kind(kind)
    except ValueError:
        raise WireError(f"unknown frame kind {kind}") from None
    if meta_len > MAX_META_BYTES:
        raise WireError(f"metadata of {meta_len} bytes exceeds the {MAX_META_BYTES}-byte limit")
    if body_len > max_body:
        raise WireError(f"body of {body_len} bytes exceeds the {max_body}-byte limit")
    return Header(kind, meta_len, body_len)


def parse_segments(meta: dict, body_len: int) -> list[Segment]:
    specs = meta.get("segments", [])
    if not isinstance(specs, list) or len(specs) > MAX_SEGMENTS:
        raise WireError(f"segments must be a list of at most {MAX_SEGMENTS} entries")
    segments = []
    for spec in specs:
        try:
            name, dtype, shape = spec["name"], spec["dtype"], spec["shape"]
        except (TypeError, KeyError):
            raise WireError(f"segment {spec!r} lacks name, dtype or shape") from None
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise WireError(f"segment {name!r} has unsupported dtype {dtype!r}")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_DIMS
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_BODY_BYTES for d in shape)
        ):
            raise WireError(f"segment {name!r} has invalid shape {shape!r}")
        segments.append(Segment(str(name), DTYPES[dtype], tuple(shape)))
    total = sum(s.nbytes for s in segments)
    if total != body_len:
        raise WireError(f"segments describe {total} bytes but the body holds {body_len}")
    return segments


def byte_view(array: np.ndarray) -> memoryview:
    """A flat byte view of a C-contiguous array, no copy. memoryview refuses to cast
    an empty multi-dimensional array (a batch whose samples were all corrupt), so
    those get an empty view of their own."""
    # an ndarray exports the buffer protocol; NumPy's stubs declare __buffer__ for Python 3.12+ only
    return memoryview(array).cast("B") if array.size else memoryview(b"")  # type: ignore[arg-type]


def encode_frame(kind: Kind, meta: dict | None = None, arrays: Sequence[tuple[str, np.ndarray]] = ()) -> list:
    """The buffers of one frame, ready for `send_buffers` (arrays are not copied)."""
    meta = dict(meta or {})
    views = []
    if arrays:
        meta["segments"] = []
        for name, array in arrays:
            array = np.ascontiguousarray(array)
            if not array.dtype.isnative:  # the dtype name carries no byte order: send native order
                array = array.astype(array.dtype.newbyteorder("="))
            meta["segments"].append({"name": name, "dtype": array.dtype.name, "shape": list(array.shape)})
            views.append(byte_view(array))
    meta_bytes = json.dumps(meta, separators=(",", ":")).encode()
    body_len = sum(v.nbytes for v in views)
    return [encode_header(kind, meta_bytes, body_len), meta_bytes, *views]


Stall = Callable[[], None]
# A timeout is TimeoutError on a socket with a Python timeout, and BlockingIOError (EAGAIN) on a
# blocking socket whose kernel timeout (SO_RCVTIMEO / SO_SNDTIMEO) expired.
TIMEOUTS = (TimeoutError, BlockingIOError)


def send_buffers(sock: socket.socket, buffers: list, on_stall: Stall | None = None) -> None:
    """sendmsg with partial-write handling: one syscall per frame in the usual case.

    On a socket with a timeout, a send that cannot progress calls ``on_stall``
    (which raises to give up) and retries; the frame is never half-sent and
    then abandoned by a timeout.
    """
    views = [memoryview(b).cast("B") for b in buffers if memoryview(b).nbytes]
    while views:
        try:
            sent = sock.sendmsg(views)
        except TIMEOUTS as exc:
            if on_stall is None or exc.errno == errno.ETIMEDOUT:  # the kernel gave the connection up (TCP_USER_TIMEOUT)
                raise
            on_stall()
            continue
        while sent and views:
            if sent >= views[0].nbytes:
                sent -= views[0].nbytes
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


def send_frame(
    sock: socket.socket,
    kind: Kind,
    meta: dict | None = None,
    arrays: Sequence[tuple[str, np.ndarray]] = (),
    on_stall: Stall | None = None,
) -> int:
    """Send one frame; returns its size in bytes."""
    buffers = encode_frame(kind, meta, arrays)
    send_buffers(sock, buffers, on_stall)
    return sum(memoryview(b).nbytes for b in buffers)


def recv_exact_into(
    sock: socket.socket, view: memoryview, on_stall: Stall | None = None, *, frame_start: bool = False, what: str = "a frame"
) -> None:
    """Fill ``view`` (``what``, for error messages) from the socket. A timeout before the
    first byte of a frame propagates (the peer is idle); a timeout inside a frame calls ``on_stall``."""
    got, total = 0, view.nbytes
    while got < total:
        try:
            n = sock.recv_into(view[got:], total - got)
        except TIMEOUTS as exc:
            if (frame_start and got == 0) or on_stall is None or exc.errno == errno.ETIMEDOUT:
                raise
            on_stall()
            continue
        if n == 0:
            if got == 0:
                raise PeerClosed("connection closed")
            raise WireError(f"connection closed mid-frame after {got} of the {total} bytes of {what}")
        got += n


Allocator = Callable[[Segment], np.ndarray]


def _numpy_allocator(segment: Segment) -> np.ndarray:
    return np.empty(segment.shape, dtype=segment.dtype)


class FrameReader:
    """Reads frames from one socket; bodies land in arrays from `allocator`."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        max_body: int = MAX_BODY_BYTES,
        allocator: Allocator = _numpy_allocator,
        on_stall: Stall | None = None,
    ) -> None:
        self.sock = sock
        self.on_stall = on_stall
        self.max_body = max_body
        self.allocator = allocator
        self.bytes_read = 0  # of whole frames
        self._header = bytearray(HEADER.size)

    def read(self) -> tuple[Kind, dict, dict[str, np.ndarray]]:
        """One whole frame. A timeout (see `TIMEOUTS`) only when the peer sent nothing at all."""
        view = memoryview(self._header)
        recv_exact_into(self.sock, view, self.on_stall, frame_start=True, what="a frame header")
        header = decode_header(view, max_body=self.max_body)
        meta_raw = bytearray(header.meta_len)
        try:
            recv_exact_into(self.sock, memoryview(meta_raw), self.on_stall, what=f"the metadata of a {header.kind.name} frame")
        except PeerClosed:
            raise WireError(
                f"connection closed before the {header.meta_len}-byte metadata of a {header.kind.name} frame"
            ) from None
        try:
            meta = json.loads(meta_raw) if meta_raw else {}
        except (ValueError, RecursionError) as exc:  # bad UTF-8/JSON, over-long int literals, deep nesting
            raise WireError(f"metadata of a {header.kind.name} frame is not JSON: {exc}") from None
        if not isinstance(meta, dict):
            raise WireError(f"metadata of a {header.kind.name} frame is not a JSON object")
        segments = parse_segments(meta, header.body_len)
        arrays = {}
        for segment in segments:
            array = self.allocator(segment)
            try:
                recv_exact_into(
                    self.sock, byte_view(array), self.on_stall, what=f"segment {segment.name!r} of a {header.kind.name} frame"
                )
            except PeerClosed:
                raise WireError(f"connection closed inside segment {segment.name!r} of a {header.kind.name} frame") from None
            arrays[segment.name] = array
        self.bytes_read += HEADER.size + header.meta_len + header.body_len
        return header.kind, meta, arrays

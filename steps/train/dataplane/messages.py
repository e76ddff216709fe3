"""Every frame's fields, declared once: a class per message of the wire protocol (`wire.Kind`).

A sender builds a message and `Link.send`s it; `Link.read` hands the receiver the message that the
frame's kind stands for in its direction (`FROM_TRAINER`, `FROM_DATA_HOST`: START, IDS and REPORT
ask one way and answer the other), its fields checked as it arrives: a frame that lacks a required
field, or holds one of the wrong type, is a `WireError` that names the field. Fields typed
``np.ndarray`` travel as body segments, the rest as JSON metadata. A kind a direction does not
declare reads as `Other`, which receivers ignore (or name, where only one kind may come next).
"""

from __future__ import annotations

import typing
from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from types import NoneType, UnionType
from typing import Any, ClassVar, Self

import numpy as np

from steps.train.dataplane.errors import WireError
from steps.train.dataplane.wire import Kind


@dataclass(frozen=True)
class Message:
    KIND: ClassVar[Kind]

    @property
    def kind(self) -> Kind:
        return self.KIND

    def encode(self) -> tuple[Kind, dict, list[tuple[str, np.ndarray]]]:
        """Kind, metadata and named arrays, for `wire.send_frame`; fields left None are not sent."""
        meta, arrays = {}, []
        # a class is hashable; mypy takes type[X] for an instance of X here (python/mypy#11470)
        for name, types in _fields(type(self)).items():  # type: ignore[arg-type]
            value = getattr(self, name)
            if value is None:
                continue
            if np.ndarray in types:
                arrays.append((name, value))
            else:
                meta[name] = value
        return self.KIND, meta, arrays

    @classmethod
    def decode(cls, meta: dict, arrays: dict[str, np.ndarray]) -> Self:
        values = {}
        for name, types in _fields(cls).items():  # type: ignore[arg-type]  # as in encode (python/mypy#11470)
            source = arrays if np.ndarray in types else meta
            if name not in source:
                if _required(cls, name):
                    raise WireError(f"a {cls.KIND.name} frame lacks its field {name!r}: run the same code on every host")
                continue
            value = source[name]
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                wanted = " or ".join(t.__name__ for t in types if t is not NoneType)
                raise WireError(
                    f"a {cls.KIND.name} frame's field {name!r} holds {type(value).__name__} {value!r:.60}, not {wanted}"
                )
            values[name] = value
        message = cls(**values)
        message.check()
        return message

    def check(self) -> None:
        """Checks across fields, beyond their types; raises `WireError`."""


@cache
def _fields(cls) -> dict[str, tuple[type, ...]]:
    """Each field's accepted types (``X | None`` -> (X, NoneType); float takes an int too)."""
    hints = typing.get_type_hints(cls, globalns={**globals(), "np": np})
    accepted = {}
    for f in fields(cls):
        hint = hints[f.name]
        types = typing.get_args(hint) if isinstance(hint, UnionType) else (hint,)
        types = tuple(typing.get_origin(t) or t for t in types)
        accepted[f.name] = (*types, int) if float in types else types
    return accepted


def _required(cls, name: str) -> bool:
    f = next(f for f in fields(cls) if f.name == name)
    return f.default is MISSING and f.default_factory is MISSING


@dataclass(frozen=True)
class Hello(Message):
    """Data host -> trainer, first: who it is, its nonce, and what the trainer plans by (its info)."""

    KIND = Kind.HELLO
    host: str
    nonce: str
    samples_per_epoch: int = 0  # this host's share of an epoch, before any decode split
    epochs: int = 0
    decode_workers: int = 1
    framework: str = ""
    streams: int = 1  # connections the trainer opens to this host (`steps.train.dataplane.streams`)


@dataclass(frozen=True)
class Auth(Message):
    """Either way: an HMAC over the peer's nonce; the trainer's also names it and brings its own nonce."""

    KIND = Kind.AUTH
    mac: str
    host: str = ""
    nonce: str = ""


@dataclass(frozen=True)
class Batch(Message):
    """Data host -> trainer: one ready batch, with the data host's running measurements (`ServiceMeter.report`)."""

    KIND = Kind.BATCH
    epoch: int
    pixels: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    corrupt: list = field(default_factory=list)  # [shard, member, reason] of each sample that would not decode
    host: dict = field(default_factory=dict)

    def check(self) -> None:
        n = self.pixels.shape[0] if self.pixels.ndim else -1
        if self.pixels.dtype != np.uint8 or self.pixels.ndim != 4 or self.labels.shape != (n,) or self.ids.shape != (n,):
            raise WireError(
                f"BATCH frame shapes disagree: pixels {self.pixels.dtype}{list(self.pixels.shape)}, "
                f"labels {list(self.labels.shape)}, ids {list(self.ids.shape)}"
            )


@dataclass(frozen=True)
class End(Message):
    """Data host -> trainer: the end of an epoch, with the samples sent to this trainer in it."""

    KIND = Kind.END
    epoch: int
    samples: int
    host: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Ping(Message):
    """Either way: keep-alive."""

    KIND = Kind.PING


@dataclass(frozen=True)
class Stop(Message):
    """Trainer -> data host: training is over (status, reason), with the files the trainer hands over (its outputs)."""

    KIND = Kind.STOP
    status: str
    reason: str = ""
    files: dict = field(default_factory=dict)  # name -> bytes (uint8 array once received), as body segments

    def encode(self) -> tuple[Kind, dict, list[tuple[str, np.ndarray]]]:
        arrays = [(name, np.frombuffer(data, dtype=np.uint8)) for name, data in self.files.items()]
        return self.KIND, {"status": self.status, "reason": self.reason, "files": list(self.files)}, arrays

    @classmethod
    def decode(cls, meta: dict, arrays: dict[str, np.ndarray]) -> Self:
        stop = super().decode({k: v for k, v in meta.items() if k != "files"}, {})
        return cls(stop.status, stop.reason, dict(arrays))


@dataclass(frozen=True)
class Error(Message):
    """Either way: the sender is failing, and why."""

    KIND = Kind.ERROR
    reason: str = "no reason given"


@dataclass(frozen=True)
class Start(Message):
    """Trainer -> data host: where to join. TensorFlow: the dispatcher's address and the decode split; Ray: the head's
    address. Each reader `require`s its own."""

    KIND = Kind.START
    dispatcher: str | None = None
    split: dict | None = None
    ray: str | None = None

    def require(self, name: str) -> Any:  # the field's value, of its declared type
        value = getattr(self, name)
        if value is None:
            raise WireError(f"a START frame lacks its field {name!r}: run the same code on every host")
        return value


@dataclass(frozen=True)
class WorkerUp(Message):
    """Data host -> trainer (START): its tf.data.service worker is up, serving this many samples per epoch."""

    KIND = Kind.START
    worker: str
    samples_per_epoch: int


@dataclass(frozen=True)
class IdsQuery(Message):
    """Trainer -> data host: which sample ids do you serve?"""

    KIND = Kind.IDS


@dataclass(frozen=True)
class Ids(Message):
    """Data host -> trainer: the sample ids it serves."""

    KIND = Kind.IDS
    ids: np.ndarray


@dataclass(frozen=True)
class ReportQuery(Message):
    """Trainer -> data host: what did you measure of yourself?"""

    KIND = Kind.REPORT


@dataclass(frozen=True)
class Report(Message):
    """Data host -> trainer: its own measurements (`ProcessMeter.report`)."""

    KIND = Kind.REPORT
    host: dict


@dataclass(frozen=True)
class Resume(Message):
    """Trainer -> data host, first after the handshake: the epoch to start at, the ids of it already consumed, the
    decode split (`steps.train.core.split.Split.as_meta`)."""

    KIND = Kind.RESUME
    epoch: int
    split: dict | None = None
    consumed: np.ndarray | None = None


@dataclass(frozen=True)
class Other:
    """A frame of a kind its direction does not declare."""

    kind: Kind


FROM_TRAINER: dict[Kind, type[Message]] = {m.KIND: m for m in (Auth, Ping, Stop, Error, Start, IdsQuery, ReportQuery, Resume)}
FROM_DATA_HOST: dict[Kind, type[Message]] = {m.KIND: m for m in (Hello, Auth, Batch, End, Ping, Error, WorkerUp, Ids, Report)}
Inbound = dict[Kind, type[Message]]


def decode(frame: tuple[Kind, dict, dict], inbound: Inbound) -> Message | Other:
    """The message a frame read by `wire.FrameReader` stands for, in the direction ``inbound`` declares."""
    kind, meta, arrays = frame
    cls = inbound.get(kind)
    return Other(kind) if cls is None else cls.decode(meta, arrays)

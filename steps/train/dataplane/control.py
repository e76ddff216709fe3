"""The control plane both frameworks share: who may connect, and how results travel home.

A data host accepts its trainers here (each proves the job secret, in its own
thread, so a stranger that connects and says nothing cannot hold up the real
trainers); a trainer dials its data hosts here. The PyTorch data service then
streams batches over the same links; the TensorFlow path uses them only for
control (dispatcher address, heartbeats, STOP) while tf.data.service moves
the data. Files a trainer hands over with its STOP (its metrics and model)
are written by `keep_results`, so every host of the job holds the results,
whichever host's model directory SageMaker packs.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from steps.common.errors import HeteroError, describe
from steps.train.core.config import TrainConfig
from steps.train.dataplane.auth import AuthError, client_handshake, serve_handshake
from steps.train.dataplane.link import Link, PeerSilent, Stopped
from steps.train.dataplane.wire import Kind, WireError

HANDSHAKE_TIMEOUT_S = 10.0  # in all, for a connection to prove the job secret
MAX_PENDING = 32  # connections at once that have not proved it yet
SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


class TrainerGone(HeteroError):
    headline = "trainer lost"
    peer_end = True  # a data host's end: the trainer's, told in one line


class DataHostLost(HeteroError):
    headline = "data host lost"


class LocalDecodeFailed(HeteroError):
    """A trainer host's own decode workers (hybrid decode) failed."""

    headline = "local decode failed"


class JobStopped(HeteroError):
    """A trainer ended the job because something failed; the message leads with what (and who) did."""

    headline = "job stopped"
    peer_end = True


def failure_reason(trainer: str, exc: BaseException) -> str:
    """What a trainer's STOP says failed: a lost data host by its own name, anything else as the trainer's."""
    return describe(exc) if isinstance(exc, DataHostLost) else f"trainer {trainer}: {describe(exc)}"


class DataHostUnreachable(HeteroError):
    headline = "data host unreachable"


@dataclass
class Trainer:
    host: str
    link: Link
    stopped: bool = False
    sent: dict = field(default_factory=dict)  # epoch -> samples sent to this trainer
    batches: int = 0  # sent to this trainer, all epochs


def accept_trainers(server: socket.socket, cfg: TrainConfig, me: str, trainer_hosts: tuple[str, ...], secret: bytes,
                    info: dict) -> list[Trainer]:
    """Accept on ``server`` until every expected trainer has proved the secret; ``info`` goes in the HELLO.

    Whoever reaches the port gets at most `HANDSHAKE_TIMEOUT_S` in all to prove the secret, and at most
    `MAX_PENDING` unproven connections are held at once (a new one cuts the oldest, so a flood cannot
    lock out a trainer, which proves the secret within a round trip): a flood or a slow client costs a
    few threads and file descriptors, never the host. Running out of descriptors
    (EMFILE) is waited out, not fatal. Refusals are logged at most once a second, with counts."""
    expected = set(trainer_hosts)
    trainers: dict[str, Trainer] = {}
    pending: dict[socket.socket, float] = {}  # unproven connection -> when its handshake must be over
    lock = threading.Lock()
    log = _RefusalLog(me)

    def handshake(sock: socket.socket, address) -> None:
        try:
            peer = serve_handshake(sock, secret, host=me, info=info)
        except (AuthError, WireError, OSError) as exc:
            log.refused(str(exc), address[0])
            peer = None
        with lock:
            pending.pop(sock, None)
            if peer in expected and peer not in trainers:
                trainers[peer] = Trainer(peer, Link(sock, f"trainer {peer}", heartbeat_s=cfg.heartbeat_s,
                                                    silence_timeout_s=cfg.silence_timeout_s))
                return
        sock.close()

    threads = []
    deadline = time.monotonic() + cfg.connect_timeout_s
    try:
        while True:
            now = time.monotonic()
            with lock:
                if set(trainers) == expected:
                    return list(trainers.values())
                for sock in [s for s, due in pending.items() if due < now]:  # too slow to prove the secret
                    _cut(sock)
                    pending[sock] = float("inf")  # its thread closes it
            remaining = deadline - now
            if remaining <= 0:
                missing = ", ".join(sorted(expected - set(trainers)))
                raise TrainerGone(f"trainer host(s) {missing} did not connect within connect_timeout_s={cfg.connect_timeout_s:g}")
            log.flush()
            server.settimeout(min(remaining, 0.2))
            try:
                sock, address = server.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    raise
                log.refused(f"cannot accept: {os.strerror(exc.errno)}")  # the connection waits in the backlog
                time.sleep(0.1)
                continue
            with lock:
                waiting = [s for s, due in pending.items() if due != float("inf")]
                if len(waiting) >= MAX_PENDING:  # the oldest goes: a real trainer proves the secret within a round trip
                    oldest = min(waiting, key=pending.__getitem__)
                    _cut(oldest)
                    pending[oldest] = float("inf")
                    log.refused(f"{MAX_PENDING} connections were waiting to prove the secret; cut the oldest", address[0])
                pending[sock] = time.monotonic() + HANDSHAKE_TIMEOUT_S
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            thread = threading.Thread(target=handshake, args=(sock, address), name="handshake", daemon=True)
            thread.start()
            threads.append(thread)
            threads = [t for t in threads if t.is_alive()]
    finally:
        with lock:
            for sock in pending:  # strangers still mid-handshake: cut them off (shutdown wakes their recv)
                _cut(sock)
        for thread in threads:
            thread.join(timeout=HANDSHAKE_TIMEOUT_S)
        log.flush(force=True)


def _cut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _RefusalLog:
    """Refused connections, counted by reason and printed at most once a second: a flood must not flood the log."""

    def __init__(self, me: str):
        self.me = me
        self.counts: dict[str, int] = {}
        self.last_peer = ""
        self.printed_at = 0.0
        self.lock = threading.Lock()

    def refused(self, reason: str, peer: str = "") -> None:
        with self.lock:
            self.counts[reason] = self.counts.get(reason, 0) + 1
            self.last_peer = peer or self.last_peer
        self.flush()

    def flush(self, force: bool = False) -> None:
        with self.lock:
            if not self.counts or (not force and time.monotonic() - self.printed_at < 1.0):
                return
            total = sum(self.counts.values())
            reasons = "; ".join(f"{n} x {reason}" for reason, n in sorted(self.counts.items(), key=lambda item: -item[1]))
            peer = f" (last from {self.last_peer})" if self.last_peer else ""
            print(f"[data] {self.me}: refused {total} connection(s){peer}: {reasons}", flush=True)
            self.counts, self.printed_at = {}, time.monotonic()


def dial(host: str, address: str, port: int, deadline: float, connect_timeout_s: float) -> socket.socket:
    """Connect to a data host, retrying until ``deadline`` (it may still be starting)."""
    while True:
        try:
            return socket.create_connection((address, port), timeout=5)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise DataHostUnreachable(
                    f"data host {host} at {address}:{port} did not accept a connection within "
                    f"connect_timeout_s={connect_timeout_s:g} ({exc})"
                ) from None
            time.sleep(0.2)


def open_link(cfg: TrainConfig, host: str, address: str, me: str, secret: bytes, deadline: float, peer: str,
              **link_options) -> tuple[Link, dict]:
    """A trainer's link to ``host``: dial it (retrying until ``deadline``), prove the job secret, and hand the socket to a
    heartbeat-checked `Link` named ``peer``. Returns the link and the host's HELLO."""
    sock = dial(host, address, cfg.data_port, deadline, cfg.connect_timeout_s)
    sock.settimeout(max(10.0, cfg.heartbeat_s))  # the handshake's own bound; the Link sets the kernel's
    hello = client_handshake(sock, secret, host=me)
    return Link(sock, peer, heartbeat_s=cfg.heartbeat_s, silence_timeout_s=cfg.silence_timeout_s, **link_options), hello


def trainer_lost(host: str, exc: Exception) -> TrainerGone:
    """Why a trainer's link broke, as a data host reports it."""
    if isinstance(exc, PeerSilent):
        return TrainerGone(f"trainer {host} went silent: {exc}")
    return TrainerGone(f"trainer {host} disconnected without STOP ({exc}); it crashed or was killed")


def trainer_frame(trainer: Trainer, kind: Kind, meta: dict, arrays: dict, results_dir: Path | None) -> HeteroError | None:
    """A data host's reading of STOP (its results kept) and ERROR: the error to end with, if any."""
    if kind is Kind.STOP:
        keep_results(results_dir, trainer.host, arrays)
        trainer.stopped = True
        if meta.get("status") != "completed":
            return JobStopped(f"{meta.get('reason', 'no reason given')} (STOP from trainer {trainer.host})")
    elif kind is Kind.ERROR:
        return TrainerGone(f"trainer {trainer.host} failed: {meta.get('reason', 'no reason given')}")
    return None


def send_stop(links: list[Link], status: str, reason: str, files: dict[str, bytes] | None) -> None:
    """The trainer's STOP, carrying ``files`` (its outputs), to every link, each then half-closed.

    A half-close, not a close: the trainer keeps reading until each data host hangs up. Closing a
    socket with unread data in it makes the kernel answer with a reset, which could destroy a
    STOP still in flight.
    """
    arrays = [(name, np.frombuffer(data, dtype=np.uint8)) for name, data in (files or {}).items()]
    meta = {"status": status, "reason": reason[:500], "files": [name for name, _ in arrays]}
    for link in links:
        try:
            link.send(Kind.STOP, meta, arrays)
            link.sock.shutdown(socket.SHUT_WR)
        except (WireError, OSError, Stopped):
            pass  # that host is gone already


def end_links(links: list[Link], threads: list[threading.Thread], beat, status: str, reason: str,
              files: dict[str, bytes] | None, wait_s: float) -> None:
    """A trainer ends the job for hosts it dialled: STOP (with ``files``) to each, then up to ``wait_s`` for the threads
    watching them (each returns once its host hung up), then the links closed."""
    if beat is not None:
        beat.stop()
    send_stop(links, status, reason, files)
    deadline = time.monotonic() + wait_s
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    for link in links:
        link.close()


def tell_trainer(link: Link, who: str, exc: BaseException) -> None:
    """A host ending on ``exc`` tells the trainer why, not just that the link closed; not when the trainer ended it."""
    if isinstance(exc, (TrainerGone, JobStopped)):
        return
    try:
        link.send(Kind.ERROR, {"reason": f"{who}: {describe(exc)}"[:1000]})
    except (WireError, OSError, Stopped):
        pass


def keep_results(results_dir: Path | None, trainer: str, arrays: dict) -> None:
    """Write the files a trainer sent with its STOP into ``results_dir`` (plain names only)."""
    if results_dir is None or not arrays:
        return
    for name, data in arrays.items():
        if not SAFE_FILE_NAME.fullmatch(name):
            print(f"[data] ignoring file {name!r} from trainer {trainer}: not a plain file name", flush=True)
            continue
        results_dir.mkdir(parents=True, exist_ok=True)
        tmp = results_dir / f".{name}.tmp"
        tmp.write_bytes(data.tobytes())
        os.replace(tmp, results_dir / name)
    print(f"[data] kept {', '.join(sorted(arrays))} from trainer {trainer} in {results_dir}", flush=True)

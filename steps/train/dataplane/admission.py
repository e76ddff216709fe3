"""Who may connect: a data host admits its trainers, a trainer dials its data hosts.

A data host accepts its trainers here (each proves the job secret, in its own
thread, so a stranger that connects and says nothing cannot hold up the real
trainers); a trainer dials its data hosts here. Either side then holds a
heartbeat-checked `Link` per peer (`steps.train.dataplane.session` on a data
host, `steps.train.dataplane.watch` on a trainer).
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from dataclasses import dataclass, field

from steps.train.dataplane.auth import client_handshake, serve_handshake
from steps.train.dataplane.errors import AuthError, DataHostUnreachable, TrainerGone, WireError
from steps.train.dataplane.link import Link
from steps.train.dataplane.messages import FROM_DATA_HOST, FROM_TRAINER, Hello
from steps.train.dataplane.settings import DataPlaneSettings

HANDSHAKE_TIMEOUT_S = 10.0  # in all, for a connection to prove the job secret
MAX_PENDING = 32  # connections at once that have not proved it yet


@dataclass
class Trainer:
    """One connection of a trainer host: with several streams per flow (`steps.train.dataplane.streams`), each of
    them is a `Trainer` of the same ``host``, numbered by ``stream``."""

    host: str
    link: Link
    stream: int = 0
    stopped: bool = False  # it said STOP
    lost: bool = False  # its link broke, or it said ERROR: nothing more to tell it
    sent: dict = field(default_factory=dict)  # epoch -> samples sent to this trainer
    batches: int = 0  # sent to this trainer, all epochs


def accept_trainers(
    server: socket.socket,
    settings: DataPlaneSettings,
    me: str,
    trainer_hosts: tuple[str, ...],
    secret: bytes,
    info: dict,
    streams: int = 1,
) -> list[Trainer]:
    """Accept on ``server`` until every expected trainer has proved the secret on ``streams`` connections (the HELLO
    says how many, so the trainer dials the rest); ``info`` goes in the HELLO too. Returns one `Trainer` per connection,
    by host, then stream.

    Whoever reaches the port gets at most `HANDSHAKE_TIMEOUT_S` in all to prove the secret, and at most
    `MAX_PENDING` unproven connections are held at once (a new one cuts the oldest, so a flood cannot
    lock out a trainer, which proves the secret within a round trip): a flood or a slow client costs a
    few threads and file descriptors, never the host. Running out of descriptors
    (EMFILE) is waited out, not fatal. Refusals are logged at most once a second, with counts."""
    expected = {(host, stream) for host in trainer_hosts for stream in range(streams)}
    trainers: dict[tuple[str, int], Trainer] = {}
    pending: dict[socket.socket, float] = {}  # unproven connection -> when its handshake must be over
    lock = threading.Lock()
    log = _RefusalLog(me)

    def handshake(sock: socket.socket, address) -> None:
        try:
            peer = serve_handshake(sock, secret, host=me, info={**info, "streams": streams})
        except (AuthError, WireError, OSError) as exc:
            log.refused(str(exc), address[0])
            peer = None
        with lock:
            pending.pop(sock, None)
            key = (peer, sum(1 for host, _ in trainers if host == peer))  # its next stream
            if peer is not None and key in expected:
                link = Link(
                    sock,
                    f"trainer {peer}",
                    inbound=FROM_TRAINER,
                    heartbeat_s=settings.heartbeat_s,
                    silence_timeout_s=settings.silence_timeout_s,
                )
                trainers[key] = Trainer(peer, link, stream=key[1])
                return
        sock.close()

    threads = []
    deadline = time.monotonic() + settings.connect_timeout_s
    try:
        while True:
            now = time.monotonic()
            with lock:
                if set(trainers) == expected:
                    return [trainers[key] for key in sorted(trainers)]
                for sock in [s for s, due in pending.items() if due < now]:  # too slow to prove the secret
                    _cut(sock)
                    pending[sock] = float("inf")  # its thread closes it
            remaining = deadline - now
            if remaining <= 0:
                missing = ", ".join(sorted({host for host, _ in expected - set(trainers)}))
                raise TrainerGone(
                    f"trainer host(s) {missing} did not connect within connect_timeout_s={settings.connect_timeout_s:g}"
                )
            log.flush()
            accepted = _accept(server, min(remaining, 0.2), log)
            if accepted is None:
                continue
            sock, address = accepted
            with lock:
                _hold(pending, sock, address, log)
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            thread = threading.Thread(target=handshake, args=(sock, address), name="handshake", daemon=True)
            thread.start()
            threads.append(thread)
            threads = [t for t in threads if t.is_alive()]
    finally:
        _let_go(lock, pending, threads, log)


def _let_go(lock: threading.Lock, pending: dict[socket.socket, float], threads: list[threading.Thread], log: _RefusalLog) -> None:
    """Admission is over: strangers still mid-handshake are cut off (shutdown wakes their recv), their threads end."""
    with lock:
        for sock in pending:
            _cut(sock)
    for thread in threads:
        thread.join(timeout=HANDSHAKE_TIMEOUT_S)
    log.flush(force=True)


def _accept(server: socket.socket, timeout: float, log: _RefusalLog) -> tuple[socket.socket, tuple] | None:
    """The next connection on ``server`` within ``timeout``, or None. Running out of descriptors (EMFILE and the like)
    is waited out: the connection waits in the backlog."""
    server.settimeout(timeout)
    try:
        return server.accept()
    except TimeoutError:
        return None
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            raise
        log.refused(f"cannot accept: {os.strerror(exc.errno)}")
        time.sleep(0.1)
        return None


def _hold(pending: dict[socket.socket, float], sock: socket.socket, address: tuple, log: _RefusalLog) -> None:
    """``sock`` joins the connections that have yet to prove the secret, by when they must. At `MAX_PENDING` the
    oldest goes: a real trainer proves the secret within a round trip."""
    waiting = [s for s, due in pending.items() if due != float("inf")]
    if len(waiting) >= MAX_PENDING:
        oldest = min(waiting, key=pending.__getitem__)
        _cut(oldest)
        pending[oldest] = float("inf")  # its thread closes it
        log.refused(f"{MAX_PENDING} connections were waiting to prove the secret; cut the oldest", address[0])
    pending[sock] = time.monotonic() + HANDSHAKE_TIMEOUT_S


def _cut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _RefusalLog:
    """Refused connections, counted by reason and printed at most once a second: a flood must not flood the log."""

    def __init__(self, me: str) -> None:
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


def open_link(
    settings: DataPlaneSettings, host: str, address: str, me: str, secret: bytes, deadline: float, peer: str, **link_options
) -> tuple[Link, Hello]:
    """A trainer's link to ``host``: dial it (retrying until ``deadline``), prove the job secret, and hand the socket to a
    heartbeat-checked `Link` named ``peer``. Returns the link and the host's HELLO."""
    sock = dial(host, address, settings.data_port, deadline, settings.connect_timeout_s)
    sock.settimeout(max(10.0, settings.heartbeat_s))  # the handshake's own bound; the Link sets the kernel's
    hello = client_handshake(sock, secret, host=me)
    link = Link(
        sock,
        peer,
        inbound=FROM_DATA_HOST,
        heartbeat_s=settings.heartbeat_s,
        silence_timeout_s=settings.silence_timeout_s,
        **link_options,
    )
    link.give_up_unacknowledged()  # a host cut off is heard by the heartbeat, not after its queued batches
    return link, hello

"""A trainer's side of its links, whatever the framework: dial, heartbeat, watch, STOP.

A trainer (the Ray head, for every other host of its job) dials each host
that serves it (`steps.train.dataplane.admission`), pings them all while it is
busy, and reads each link in a thread of its own: a host that goes silent,
hangs up or says ERROR is lost, and the first loss is the trainer's failure,
in a line that names the host. A host that asks for several streams per flow
(its HELLO's ``streams``) gets that many connections, each authenticated, each
read and pinged on its own; losing any of them is losing the host. After STOP a
host hanging up is the expected end. What a host sends besides PING and ERROR (batches, answers) goes to the
framework's ``on_message``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from steps.common.errors import HeteroError, describe
from steps.train.dataplane.admission import open_link
from steps.train.dataplane.errors import DataHostLost, Stopped, WireError
from steps.train.dataplane.link import Heartbeat, Link
from steps.train.dataplane.messages import Error, Hello, Message, Other, Ping, Stop
from steps.train.dataplane.settings import DataPlaneSettings


def failure_reason(trainer: str, exc: BaseException) -> str:
    """What a trainer's STOP says failed: a lost data host by its own name, anything else as the trainer's."""
    return describe(exc) if isinstance(exc, DataHostLost) else f"trainer {trainer}: {describe(exc)}"


def send_stop(links: list[Link], status: str, reason: str, files: dict[str, bytes] | None, extra: Sequence[Link] = ()) -> None:
    """The trainer's STOP, carrying ``files`` (its outputs), to every link, each then half-closed; ``extra`` (a host's
    further streams) get the STOP without the files, which one copy per host is enough of.

    A half-close, not a close: the trainer keeps reading until each data host hangs up. Closing a
    socket with unread data in it makes the kernel answer with a reset, which could destroy a
    STOP still in flight.
    """
    stop = Stop(status, reason[:500], dict(files or {}))
    bare = Stop(status, reason[:500])
    for link, message in [*((link, stop) for link in links), *((link, bare) for link in extra)]:
        try:
            link.send(message)
            link.sock.shutdown(socket.SHUT_WR)
        except (WireError, OSError, Stopped):
            pass  # that host is gone already


@dataclass
class Peer:
    """A host this trainer dials: its name, its address, and once dialled its link and HELLO; ``streams``: every link
    to it, ``link`` first (more than one when its HELLO asks for several streams per flow)."""

    name: str
    address: str
    link: Link | None = None
    hello: Hello | None = None
    streams: list[Link] = field(default_factory=list)


PeerT = TypeVar("PeerT", bound=Peer)  # a framework's peers may carry its own bookkeeping


class PeerWatch(Generic[PeerT]):
    """``label`` names a peer in every line ("data host algo-2"); ``error`` is the class of its loss. ``lost(peer, exc)``
    words a broken link (default: "<label> <name> was lost: <exc>"); ``on_failure(error)`` hears the first failure."""

    def __init__(
        self,
        settings: DataPlaneSettings,
        peers: list[PeerT],
        *,
        me: str,
        secret: bytes,
        label: str = "data host",
        error: type[HeteroError] = DataHostLost,
        on_message: Callable[[PeerT, Message | Other], None] | None = None,
        on_failure: Callable[[HeteroError], None] | None = None,
        lost: Callable[[PeerT, Exception], HeteroError] | None = None,
        **link_options,
    ) -> None:
        self.settings, self.peers, self.me, self.secret = settings, peers, me, secret
        self.label, self.error = label, error
        self.on_message, self.on_failure = on_message, on_failure
        self._lost = lost or (lambda peer, exc: error(f"{label} {peer.name} was lost: {exc}"))
        self.link_options = link_options
        self.failure: HeteroError | None = None  # the first loss (or failure `fail` was told of)
        self.stopping = threading.Event()  # STOP sent: a host hanging up is the expected end
        self.closing = threading.Event()  # the links are going away
        self._beat: Heartbeat | None = None
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def links(self) -> list[Link]:
        """Every link to every peer, each peer's streams included."""
        return [link for p in self.peers for link in p.streams]

    def connect(self) -> list[Hello]:
        """Dial every peer (each may still be starting: until connect_timeout_s in all) and prove the secret, on as many
        connections as its HELLO asks for."""
        deadline = time.monotonic() + self.settings.connect_timeout_s
        hellos = []
        for peer in self.peers:
            peer.link, peer.hello = link, hello = self._dial(peer, deadline)
            peer.streams = [link]
            for _ in range(hello.streams - 1):
                peer.streams.append(self._dial(peer, deadline)[0])
            hellos.append(hello)
        return hellos

    def _dial(self, peer: PeerT, deadline: float) -> tuple[Link, Hello]:
        return open_link(
            self.settings,
            peer.name,
            peer.address,
            self.me,
            self.secret,
            deadline,
            f"{self.label} {peer.name}",
            **self.link_options,
        )

    def send_all(self, message: Message) -> None:
        for link in self.links:
            link.send(message)

    def heartbeat(self) -> None:
        """PING every link from now on, while the owner is busy elsewhere."""
        if self._beat is None:
            self._beat = Heartbeat(self.links, self.settings.heartbeat_s, on_error=self._send_failed)

    def watch(self) -> PeerWatch:
        """Read every link in a thread of its own from now on (and heartbeat, if not yet)."""
        self.heartbeat()
        for peer in self.peers:
            for stream, link in enumerate(peer.streams):
                self.spawn(self._watch, peer, link, name=f"watch-{peer.name}-{stream}")
        return self

    def spawn(self, target: Callable, *args, name: str) -> threading.Thread:
        """A thread `close` waits for (until the hosts hung up, within silence_timeout_s)."""
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def fail(self, error: HeteroError) -> None:
        with self._lock:
            if self.failure is not None:
                return
            self.failure = error
        if self.on_failure is not None:
            self.on_failure(error)

    def close(self, status: str = "completed", reason: str = "", files: dict[str, bytes] | None = None) -> bool:
        """STOP (with ``files``) to every peer, then up to silence_timeout_s for each to hang up, then the links closed.
        Idempotent: False when already closed."""
        if self.stopping.is_set():
            return False
        self.stopping.set()
        if self._beat is not None:
            self._beat.stop()
        firsts = [p.link for p in self.peers if p.link is not None]
        send_stop(firsts, status, reason, files, extra=[link for p in self.peers for link in p.streams[1:]])
        deadline = time.monotonic() + self.settings.silence_timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self.closing.set()
        for link in self.links:
            link.close()
        return True

    def _send_failed(self, link: Link, exc: Exception) -> None:
        """A PING the peer's socket refused: the peer is gone (killed, its instance lost), whatever its reader still has
        to read of what the peer sent before."""
        peer = next((p for p in self.peers if any(s is link for s in p.streams)), None)
        if peer is not None and not self.stopping.is_set():
            self.fail(self._lost(peer, exc))

    def _watch(self, peer: PeerT, link: Link) -> None:
        """One link of ``peer`` (one of its streams)."""
        while not self.closing.is_set():
            try:
                message = link.read()
                if message is None or isinstance(message, Ping):
                    continue
                if isinstance(message, Error):
                    if not self.stopping.is_set():
                        self.fail(self.error(f"{self.label} {peer.name} failed: {message.reason}"))
                    return
                if self.on_message is not None:
                    self.on_message(peer, message)
            except Stopped:
                return
            except (WireError, OSError) as exc:
                if not self.stopping.is_set():
                    self.fail(self._lost(peer, exc))
                return  # after STOP, the host hanging up is the expected end

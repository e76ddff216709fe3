"""One authenticated data-plane connection: serialised sends and liveness.

Both ends send PING frames when they have nothing else to say, so silence
means a gone peer (host lost, process frozen, network cut), not a slow one:
a trainer busy validating still pings, and a data host still decoding its
first batch still pings. A peer silent for ``silence_timeout_s`` raises
`PeerSilent`, so neither side ever waits forever.
"""

from __future__ import annotations

import errno
import socket
import struct
import threading
import time
from collections.abc import Callable

from steps.train.dataplane.errors import PeerSilent, Stopped, WireError
from steps.train.dataplane.messages import Inbound, Message, Other, Ping, decode
from steps.train.dataplane.wire import TIMEOUTS, Allocator, FrameReader, _numpy_allocator, send_frame

SOCKET_BUFFER_BYTES = 4 * 1024 * 1024


class Link:
    """``inbound``: the messages this side reads (`messages.FROM_TRAINER` on a data host, `FROM_DATA_HOST` on a trainer)."""

    def __init__(
        self,
        sock: socket.socket,
        peer: str,
        *,
        inbound: Inbound,
        heartbeat_s: float,
        silence_timeout_s: float,
        allocator: Allocator = _numpy_allocator,
    ) -> None:
        # The kernel enforces the heartbeat timeout (SO_RCVTIMEO/SO_SNDTIMEO on a blocking socket): a Python
        # socket timeout would add a poll() before every recv and split each 10 MB send into partial writes.
        sock.settimeout(None)
        timeval = struct.pack("ll", int(heartbeat_s), int((heartbeat_s % 1) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):  # fewer wake-ups per 10 MB batch
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
        self.sock = sock
        self.peer = peer
        self.inbound = inbound
        self.silence_timeout_s = silence_timeout_s
        self.last_seen = time.monotonic()
        self.closing = threading.Event()
        self.bytes_sent = 0
        self._send_lock = threading.Lock()
        self._reader = FrameReader(sock, allocator=allocator, on_stall=self._on_stall)

    def touch(self) -> None:
        self.last_seen = time.monotonic()

    def silent_for(self) -> float:
        return time.monotonic() - self.last_seen

    def _on_stall(self) -> None:
        if self.closing.is_set():
            raise Stopped()
        if self.silent_for() > self.silence_timeout_s:
            raise PeerSilent(
                f"{self.peer} sent nothing for {self.silent_for():.0f} s (silence_timeout_s={self.silence_timeout_s:g})"
            )

    def send(self, message: Message) -> None:
        kind, meta, arrays = message.encode()
        with self._send_lock:
            try:
                self.bytes_sent += send_frame(self.sock, kind, meta, arrays, on_stall=self._on_stall)
            except TimeoutError as exc:
                self._unreachable(exc)
                raise

    def _unreachable(self, exc: OSError) -> None:
        """The kernel ended the connection (`give_up_unacknowledged`): the peer, by name."""
        if exc.errno == errno.ETIMEDOUT:
            raise PeerSilent(
                f"{self.peer} acknowledged nothing it was sent for {self.silence_timeout_s:g} s "
                f"(silence_timeout_s={self.silence_timeout_s:g}): unreachable"
            ) from None

    def give_up_unacknowledged(self) -> None:
        """End the connection once what this side sent has gone unacknowledged for ``silence_timeout_s``
        (TCP_USER_TIMEOUT): a peer cut off or gone without a FIN then fails the next send at once, even while this side's
        reader is blocked behind what the peer sent before. Only for a side that sends small frames (a trainer's PINGs
        and requests): one whose sends may wait on a busy peer's closed window longer than that would be cut too."""
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, max(1, round(self.silence_timeout_s * 1000)))

    @property
    def bytes_read(self) -> int:
        return self._reader.bytes_read

    def read(self) -> Message | Other | None:
        """The next message, or None when the peer was idle for one heartbeat. A malformed frame is a `WireError`."""
        try:
            frame = self._reader.read()
        except TIMEOUTS as exc:
            self._unreachable(exc)
            self._on_stall()
            return None
        self.touch()
        return decode(frame, self.inbound)

    def close(self) -> None:
        self.closing.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class Heartbeat:
    """PINGs on every link while the owner is busy elsewhere (training, validating, blocked in TensorFlow)."""

    def __init__(self, links, interval_s: float, on_error: Callable[[Link, Exception], None] | None = None) -> None:
        """``on_error(link, exc)``: a PING that could not be sent (the peer's socket is gone). Heard at once, not only
        when the link's reader reaches the end of what the peer sent before: a reader blocked behind a full queue of
        that peer's batches would train through them first."""
        self.links = list(links)
        self.interval_s = interval_s
        self.on_error = on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for link in self.links:
                try:
                    link.send(Ping())
                except Stopped:
                    pass
                except (WireError, OSError) as exc:
                    if self.on_error is not None:
                        self.on_error(link, exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

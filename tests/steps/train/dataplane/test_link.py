"""A link to a peer: heartbeats while idle, and a peer that goes silent, or stops reading, is an error."""

from __future__ import annotations

import socket

import numpy as np
import pytest


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    return a, b


@pytest.mark.slow
def test_an_idle_peer_is_a_heartbeat_then_a_silent_peer():
    from steps.train.dataplane.errors import PeerSilent
    from steps.train.dataplane.link import Link
    from steps.train.dataplane.messages import FROM_DATA_HOST

    a, b = tcp_pair()
    with a, b:
        link = Link(a, "peer b", inbound=FROM_DATA_HOST, heartbeat_s=0.1, silence_timeout_s=0.5)
        assert link.read() is None  # one heartbeat of quiet: not yet an error
        with pytest.raises(PeerSilent, match="peer b sent nothing"):
            while True:
                link.read()


@pytest.mark.slow
def test_a_peer_that_stops_reading_stalls_a_send_into_peer_silent():
    from steps.train.dataplane.errors import PeerSilent
    from steps.train.dataplane.link import Link
    from steps.train.dataplane.messages import FROM_DATA_HOST, Batch

    a, b = tcp_pair()
    with a, b:
        link = Link(a, "peer b", inbound=FROM_DATA_HOST, heartbeat_s=0.1, silence_timeout_s=0.5)
        big = np.zeros(64 * 1024 * 1024, dtype=np.uint8)  # far more than both socket buffers hold
        with pytest.raises(PeerSilent):
            link.send(Batch(epoch=0, pixels=big, labels=big[:0], ids=big[:0]))


def test_a_trainer_link_gives_up_what_goes_unacknowledged_after_the_silence_and_names_the_peer():
    """A peer cut off (or gone without a FIN) acknowledges nothing: the kernel ends the connection after
    silence_timeout_s (TCP_USER_TIMEOUT), and the send or read that meets it names the peer as unreachable."""
    import errno

    from steps.train.dataplane.errors import PeerSilent
    from steps.train.dataplane.link import Link
    from steps.train.dataplane.messages import FROM_DATA_HOST, Ping

    a, b = tcp_pair()
    with a, b:
        link = Link(a, "data host b", inbound=FROM_DATA_HOST, heartbeat_s=0.1, silence_timeout_s=2.5)
        link.give_up_unacknowledged()
        assert a.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 2500
        with pytest.raises(PeerSilent, match="data host b acknowledged nothing it was sent for 2.5 s .*unreachable"):
            link._unreachable(TimeoutError(errno.ETIMEDOUT, "Connection timed out"))
        link._unreachable(TimeoutError(errno.EAGAIN, "Resource temporarily unavailable"))  # a heartbeat of quiet: no error
        link.send(Ping())

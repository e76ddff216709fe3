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

"""A link to a peer: heartbeats while idle, and a peer that goes silent, or stops reading, is an error."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from steps.train.dataplane.link import Link, PeerSilent
from steps.train.dataplane.wire import Kind


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    return a, b


def test_an_idle_peer_is_a_heartbeat_then_a_silent_peer():
    a, b = tcp_pair()
    with a, b:
        link = Link(a, "peer b", heartbeat_s=0.1, silence_timeout_s=0.5)
        assert link.read() is None  # one heartbeat of quiet: not yet an error
        with pytest.raises(PeerSilent, match="peer b sent nothing"):
            while True:
                link.read()


def test_a_peer_that_stops_reading_stalls_a_send_into_peer_silent():
    a, b = tcp_pair()
    with a, b:
        link = Link(a, "peer b", heartbeat_s=0.1, silence_timeout_s=0.5)
        big = np.zeros(64 * 1024 * 1024, dtype=np.uint8)  # far more than both socket buffers hold
        with pytest.raises(PeerSilent):
            link.send(Kind.BATCH, {}, [("pixels", big)])

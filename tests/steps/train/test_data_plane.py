"""The data service and client in failure: the trainer learns why, and nothing hangs."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

from steps.common.errors import UserError
from steps.train.core.config import TrainConfig
from steps.train.dataplane.errors import DataHostLost
from steps.train.frameworks.pytorch.data import DataServiceClient
from steps.train.frameworks.pytorch.data_host import serve
from steps.train.frameworks.pytorch.dataset import Batch
from tests.support.threads import SECRET, no_leaked_threads  # noqa: F401 - fixture
from tests.support.threads import Side as _Side

pytestmark = pytest.mark.usefixtures("no_leaked_threads")

BATCH = 4


def _failing_batches(epoch: int):
    for b in range(3):
        ids = torch.arange(b * BATCH, (b + 1) * BATCH, dtype=torch.int64)
        yield Batch(pixels=torch.zeros((BATCH, 8, 8, 3), dtype=torch.uint8), labels=ids, ids=ids, epoch=epoch)
    raise UserError("shard train-00003.tar is malformed: member 000000012.cls missing", headline="malformed shard")


def test_a_failing_data_host_tells_the_trainer_why(monkeypatch):
    monkeypatch.delenv("HETERO_HOSTS_FILE", raising=False)
    server = socket.create_server(("127.0.0.1", 0))
    cfg = TrainConfig(epochs=1, data_port=server.getsockname()[1], heartbeat_s=0.1, silence_timeout_s=5.0, connect_timeout_s=10.0)
    service = _Side(serve, cfg, server, me="127.0.0.1", trainer_hosts=("trainer-a",), secret=SECRET,
                    samples_per_epoch=16, epoch_batches=_failing_batches)
    service.start()
    client = DataServiceClient(cfg, me="trainer-a", data_hosts=("127.0.0.1",), secret=SECRET).connect()
    try:
        with pytest.raises(DataHostLost, match="data host 127.0.0.1 failed: data host 127.0.0.1: malformed shard: shard train-00003"):
            for batch in client.batches(0):
                batch.release()
    finally:
        client.close("failed", "data host failed")
        service.join(timeout=30)
        server.close()
    assert isinstance(service.error, UserError)


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

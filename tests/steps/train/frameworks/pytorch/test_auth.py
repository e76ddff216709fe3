"""The PyTorch data service against strangers: what reaches its port without the job secret stops nothing and holds
nothing up, while the real trainer gets every batch (the handshake itself: tests/steps/train/dataplane/test_auth.py)."""

from __future__ import annotations

import socket

import pytest
import torch

from steps.train.core.config import TrainConfig
from steps.train.dataplane.auth import client_handshake
from steps.train.dataplane.errors import AuthError, PeerClosed, WireError
from steps.train.dataplane.wire import FrameReader, Kind, send_frame
from steps.train.frameworks.pytorch.data import DataServiceClient
from steps.train.frameworks.pytorch.data_host import serve
from steps.train.frameworks.pytorch.dataset import Batch
from tests.support.threads import OTHER, SECRET, no_leaked_threads  # noqa: F401 - fixture
from tests.support.threads import Side as _Side

pytestmark = pytest.mark.usefixtures("no_leaked_threads")

# -- the real data service against strangers ----------------------------------

BATCHES_PER_EPOCH, BATCH = 5, 4
CORRUPT = [(1000, "OSError: truncated")]  # travels with batch 2 and counts towards END


def _epoch_batches(epoch: int):
    for b in range(BATCHES_PER_EPOCH):
        ids = torch.arange(b * BATCH, (b + 1) * BATCH, dtype=torch.int64)
        pixels = ids.to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 8, 8, 3).contiguous()  # pixel value = sample id
        yield Batch(pixels=pixels, labels=ids % 3, ids=ids, corrupt=list(CORRUPT) if b == 2 else [], epoch=epoch)


def _stranger_garbage(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost")  # exactly one header's worth, so the service reads it all
        return _drain(s)


def _stranger_unauthenticated_stop(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        reader = FrameReader(s, max_body=0)
        assert reader.read()[0] is Kind.HELLO
        send_frame(s, Kind.STOP, {"status": "completed", "reason": "let me stop you"})
        return _drain(s)


def _stranger_wrong_secret_then_stop(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with pytest.raises(AuthError):
            client_handshake(s, OTHER, host="trainer-a")
        try:
            send_frame(s, Kind.STOP, {"status": "completed"})
        except OSError:
            pass  # already closed by the service
        return _drain(s)


def _drain(s) -> list:
    """Kinds of frames the service sends until it closes the connection."""
    reader, kinds = FrameReader(s, max_body=0), []
    while True:
        try:
            kinds.append(reader.read()[0])
        except (PeerClosed, ConnectionResetError):
            return kinds
        except WireError:
            return kinds + ["cut"]


def test_strangers_cannot_stop_the_service_and_the_trainer_gets_every_batch(monkeypatch):
    monkeypatch.delenv("HETERO_HOSTS_FILE", raising=False)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    cfg = TrainConfig(
        epochs=2, data_port=port, heartbeat_s=0.1, silence_timeout_s=5.0, connect_timeout_s=10.0, prefetch_batches=2
    )
    samples = BATCHES_PER_EPOCH * BATCH + len(CORRUPT)
    service = _Side(
        serve,
        cfg,
        server,
        me="127.0.0.1",
        trainer_hosts=("trainer-a",),
        secret=SECRET,
        samples_per_epoch=samples,
        epoch_batches=_epoch_batches,
    )
    service.start()
    client = None
    try:
        assert _stranger_garbage(port) == [Kind.HELLO]  # the service greets, reads garbage, hangs up
        assert _stranger_unauthenticated_stop(port) == []
        assert _stranger_wrong_secret_then_stop(port) == []
        assert service.is_alive() and service.error is None

        client = DataServiceClient(cfg, me="trainer-a", data_hosts=("127.0.0.1",), secret=SECRET).connect()
        assert client.hosts[0].samples_per_epoch == samples
        for epoch in range(cfg.epochs):
            ids, corrupt = [], []
            for batch in client.batches(epoch):
                assert batch.epoch == epoch and batch.source == "127.0.0.1"
                assert batch.pixels.dtype == torch.uint8 and batch.pixels.shape == (BATCH, 8, 8, 3)
                assert torch.equal(batch.pixels[:, 4, 4, 1], batch.ids.to(torch.uint8))
                assert torch.equal(batch.labels, batch.ids % 3)
                ids += batch.ids.tolist()
                corrupt += batch.corrupt
                batch.release()
            assert sorted(ids) == list(range(BATCHES_PER_EPOCH * BATCH))  # every sample exactly once
            assert corrupt == CORRUPT
            assert client.hosts[0].received[epoch] == samples  # what END said (batches() checks they agree)
        # the data host's own measurements rode along with its batches
        measured = client.measurements()
        (host,) = measured["data_hosts"]
        assert host["host"] == "127.0.0.1" and host["samples_sent"] == cfg.epochs * samples
        assert host["batches_sent"] == {"trainer-a": cfg.epochs * BATCHES_PER_EPOCH}
        assert host["decode_cpu_s_per_sample"] == 0  # these batches were built, not decoded
        assert measured["bytes_received"] == client.hosts[0].link.bytes_read
        assert 8 * 8 * 3 < measured["bytes_received_per_sample"] < 2 * host["bytes_sent_per_sample"]
        client.close()
        service.join(timeout=30)
        assert not service.is_alive(), "serve() did not return after the trainer's STOP"
        assert service.error is None
    finally:
        if client is not None:
            client.close("failed", "test ended early")
        service.join(timeout=30)
        server.close()
    assert not service.is_alive()


def test_a_silent_stranger_does_not_hold_up_the_real_trainer(monkeypatch):
    monkeypatch.delenv("HETERO_HOSTS_FILE", raising=False)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    cfg = TrainConfig(epochs=1, data_port=port, heartbeat_s=0.1, silence_timeout_s=5.0, connect_timeout_s=8.0)
    service = _Side(
        serve,
        cfg,
        server,
        me="127.0.0.1",
        trainer_hosts=("trainer-a",),
        secret=SECRET,
        samples_per_epoch=BATCHES_PER_EPOCH * BATCH + len(CORRUPT),
        epoch_batches=_epoch_batches,
    )
    service.start()
    stranger = socket.create_connection(("127.0.0.1", port), timeout=10)  # connects, then never answers the HELLO
    client = None
    try:
        # with handshakes one at a time, this would wait out the stranger's 10 s handshake and then the 8 s deadline
        client = DataServiceClient(cfg, me="trainer-a", data_hosts=("127.0.0.1",), secret=SECRET).connect()
        assert sum(len(b) for b in client.batches(0)) == BATCHES_PER_EPOCH * BATCH
        client.close()
        service.join(timeout=30)
        assert service.error is None and not service.is_alive()
    finally:
        stranger.close()
        if client is not None:
            client.close("failed", "test ended early")
        service.join(timeout=30)
        server.close()

"""The PyTorch data host against the real trainer reader over sockets: in failure the trainer learns why and nothing
hangs; over several streams per flow every sample arrives once, and losing one stream is losing the host."""

from __future__ import annotations

import dataclasses
import socket

import pytest
import torch

from steps.common.errors import UserError
from steps.train.core.config import TrainConfig
from steps.train.dataplane.errors import DataHostLost, JobStopped, TrainerGone
from steps.train.frameworks.pytorch.data import DataServiceClient
from steps.train.frameworks.pytorch.data_host import serve
from steps.train.frameworks.pytorch.dataset import Batch
from steps.train.frameworks.pytorch.throttle import Throttle
from tests.support.threads import SECRET, no_leaked_threads  # noqa: F401 - fixture
from tests.support.threads import Side as _Side

pytestmark = pytest.mark.usefixtures("no_leaked_threads")

BATCH = 4


def _failing_batches(epoch: int):
    for b in range(3):
        ids = torch.arange(b * BATCH, (b + 1) * BATCH, dtype=torch.int64)
        yield Batch(pixels=torch.zeros((BATCH, 8, 8, 3), dtype=torch.uint8), labels=ids, ids=ids, epoch=epoch)
    raise UserError("shard train-00003.tar is malformed: member 000000012.cls missing", headline="malformed shard")


def _listening(epochs: int) -> tuple[socket.socket, TrainConfig]:
    """The data host's server socket on loopback and the config that names its port."""
    server = socket.create_server(("127.0.0.1", 0))
    cfg = TrainConfig(
        epochs=epochs, data_port=server.getsockname()[1], heartbeat_s=0.1, silence_timeout_s=5.0, connect_timeout_s=10.0
    )
    return server, cfg


def _serving(cfg: TrainConfig, server: socket.socket, epoch_batches, samples: int, streams: int = 1, **extra) -> _Side:
    """`serve` in a thread of its own for one trainer, "trainer-a" (``extra``: more of `serve`'s arguments)."""
    service = _Side(
        serve,
        cfg,
        server,
        me="127.0.0.1",
        trainer_hosts=("trainer-a",),
        secret=SECRET,
        samples_per_epoch=samples,
        epoch_batches=epoch_batches,
        streams=streams,
        **extra,
    )
    service.start()
    return service


def test_a_failing_data_host_tells_the_trainer_why(monkeypatch):
    monkeypatch.delenv("HETERO_HOSTS_FILE", raising=False)
    server, cfg = _listening(epochs=1)
    service = _serving(cfg, server, _failing_batches, 16)
    client = DataServiceClient(cfg, me="trainer-a", data_hosts=("127.0.0.1",), secret=SECRET).connect()
    try:
        with pytest.raises(
            DataHostLost, match="data host 127.0.0.1 failed: data host 127.0.0.1: malformed shard: shard train-00003"
        ):
            for batch in client.batches(0):
                batch.release()
    finally:
        client.close("failed", "data host failed")
        service.join(timeout=30)
        server.close()
    assert isinstance(service.error, UserError)


def _numbered_batches(batches: int):
    def epoch_batches(epoch: int):
        for b in range(batches):
            ids = torch.arange(b * BATCH, (b + 1) * BATCH, dtype=torch.int64)
            pixels = ids.to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 8, 8, 3).contiguous()  # pixel value = sample id
            yield Batch(pixels=pixels, labels=ids % 3, ids=ids, epoch=epoch)

    return epoch_batches


def test_two_streams_per_flow_carry_every_sample_exactly_once_per_epoch(monkeypatch):
    monkeypatch.delenv("HETERO_HOSTS_FILE", raising=False)
    server, cfg = _listening(epochs=2)
    batches = 40
    service = _serving(cfg, server, _numbered_batches(batches), batches * BATCH, streams=2)
    client = DataServiceClient(cfg, me="trainer-a", data_hosts=("127.0.0.1",), secret=SECRET)
    try:
        client.connect()
        (host,) = client.hosts
        assert len(host.streams) == 2 and host.hello.streams == 2
        for epoch in range(cfg.epochs):
            ids = []
            for batch in client.batches(epoch):
                assert batch.epoch == epoch
                assert torch.equal(batch.pixels[:, 4, 4, 1], batch.ids.to(torch.uint8))
                ids += batch.ids.tolist()
                batch.release()
            assert sorted(ids) == list(range(batches * BATCH))  # every sample exactly once, whatever the streams' order
            assert host.received[epoch] == batches * BATCH  # what the two ENDs said together
        one_batch = BATCH * 8 * 8 * 3
        assert all(link.bytes_read > one_batch for link in host.streams)  # both connections carried batches
        (measured,) = client.measurements()["data_hosts"]
        assert measured["streams"] == 2
        assert measured["batches_sent"] == {"trainer-a": cfg.epochs * batches}
        client.close()
        service.join(timeout=30)
        assert service.error is None and not service.is_alive()
    finally:
        client.close("failed", "test ended early")
        service.join(timeout=30)
        server.close()


def test_losing_one_of_two_streams_is_losing_the_data_host(monkeypatch):
    monkeypatch.delenv("HETERO_HOSTS_FILE", raising=False)
    server, cfg = _listening(epochs=1)
    batches = 400
    service = _serving(cfg, server, _numbered_batches(batches), batches * BATCH, streams=2)
    client = DataServiceClient(cfg, me="trainer-a", data_hosts=("127.0.0.1",), secret=SECRET)
    try:
        client.connect()
        with pytest.raises(DataHostLost, match=r"^data host 127\.0\.0\.1 .*(was lost|failed)"):
            for n, batch in enumerate(client.batches(0)):
                batch.release()
                if n == 2:  # the second connection is cut (a reset, a middlebox dropping the flow)
                    client.hosts[0].streams[1].sock.shutdown(socket.SHUT_RDWR)
    finally:
        client.close("failed", "data host lost")
        service.join(timeout=30)
        server.close()
    assert not service.is_alive()
    # the host hears the cut stream close (its trainer lost) or, when that reader is scheduled late, first hears the
    # trainer's STOP on the other stream saying why; either way it names the trainer and ends
    assert isinstance(service.error, (TrainerGone, JobStopped)) and "trainer trainer-a" in str(service.error)


@pytest.mark.parametrize("retune", ["on", "off"])
def test_the_data_host_reports_its_decode_workers_retune_to_the_trainer(monkeypatch, retune):
    monkeypatch.delenv("HETERO_HOSTS_FILE", raising=False)
    server, cfg = _listening(epochs=1)
    cfg = dataclasses.replace(cfg, retune=retune)
    service = _serving(cfg, server, _numbered_batches(10), 10 * BATCH, throttle=Throttle(2))
    client = DataServiceClient(cfg, me="trainer-a", data_hosts=("127.0.0.1",), secret=SECRET)
    try:
        client.connect()
        for batch in client.batches(0):
            batch.release()
        (measured,) = client.measurements()["data_hosts"]
        workers = measured["decode_workers"]
        assert workers["start"] == 2 and workers["changed"] == len(workers["changes"])
        if retune == "on":
            assert workers["bounds"] == [1, 2] and "off" not in workers
        else:
            assert workers == {"start": 2, "end": 2, "changed": 0, "changes": [], "off": "retune=off"}
        client.close()
        service.join(timeout=30)
        assert service.error is None and not service.is_alive()  # the retune thread ended with the serving
    finally:
        client.close("failed", "test ended early")
        service.join(timeout=30)
        server.close()

"""The PyTorch data host in failure: the trainer learns why, and nothing hangs."""

from __future__ import annotations

import socket

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
    service = _Side(
        serve,
        cfg,
        server,
        me="127.0.0.1",
        trainer_hosts=("trainer-a",),
        secret=SECRET,
        samples_per_epoch=16,
        epoch_batches=_failing_batches,
    )
    service.start()
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

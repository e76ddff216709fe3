"""The corrupt-sample budget inside the PyTorch training loop: a workload whose decode always fails ends training at
once (the budget's own rule: tests/steps/train/core/test_corrupt.py)."""

import pytest
import torch

from steps.train.core.config import TrainConfig
from steps.train.core.errors import CorruptData
from steps.train.frameworks.pytorch.dataset import Batch
from steps.train.frameworks.pytorch.trainer import train_epochs
from steps.train.workloads.shapes import Shapes


class _Source:
    """Batches of 4 uint8 64x64 images where every sample after the first batch fails to decode."""

    samples_per_epoch = 400

    def __init__(self):
        self.served = 0

    def batches(self, epoch):
        for b in range(100):
            self.served += 1
            good = 4 if b == 0 else 0
            yield Batch(
                torch.zeros((good, 64, 64, 3), dtype=torch.uint8),
                torch.zeros(good, dtype=torch.int64),
                torch.arange(good),
                corrupt=[(b * 4 + i, "OSError: broken data stream") for i in range(4 - good)],
            )


@pytest.mark.slow
def test_a_workload_whose_decode_always_fails_ends_training_at_once_not_after_the_epoch():
    source = _Source()
    cfg = TrainConfig(epochs=2, batch_size=4, max_corrupt_share=0.01)
    workload = Shapes({})
    with pytest.raises(CorruptData, match=r"epoch 0: already 8 of its 400 samples .*sample 4: OSError: broken data stream"):
        model = workload.build_model(3)
        train_epochs(cfg, workload, model, source, torch.device("cpu"))  # the trainer's loop, as the benches time it
    assert source.served == 3  # 4 samples allowed; the 2nd all-corrupt batch brings 8

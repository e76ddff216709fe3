"""Checkpoint and resume in the PyTorch training loop: a SIGTERM mid-epoch saves the input position with the model,
and the resumed run consumes every sample exactly once per epoch across the interruption."""

import numpy as np
import pytest
import torch

from steps.train.core.config import TrainConfig
from steps.train.core.errors import Interrupted
from steps.train.core.progress import Progress
from steps.train.core.terminate import TERMINATE
from steps.train.frameworks.pytorch.checkpoint import Checkpoints, resume_progress
from steps.train.frameworks.pytorch.dataset import Batch
from steps.train.frameworks.pytorch.trainer import train_epochs
from steps.train.workloads.shapes import Shapes

SAMPLES = 48
FP16_SAMPLES = 8


class _Source:
    """Epochs of ``samples`` ids (SAMPLES unless told) in batches of 4, in a per-epoch order; sample 13 never decodes.
    Honours a resume as a data host does: from that epoch, without the ids already consumed. ``on_batch(n)``: called
    before batch n."""

    def __init__(self, on_batch=None, samples=SAMPLES):
        self.samples_per_epoch = samples
        self.on_batch = on_batch or (lambda n: None)
        self.served = 0
        self.resumed = (0, set())

    def resume(self, epoch, consumed):
        self.resumed = (epoch, {int(i) for i in consumed})

    def batches(self, epoch):
        order = np.random.default_rng(epoch).permutation(self.samples_per_epoch)
        if epoch == self.resumed[0]:
            order = [i for i in order if i not in self.resumed[1]]
        for start in range(0, len(order), 4):
            self.on_batch(self.served)
            self.served += 1
            ids = [int(i) for i in order[start : start + 4]]
            good = [i for i in ids if i != 13]
            yield Batch(
                torch.zeros((len(good), 64, 64, 3), dtype=torch.uint8),
                torch.tensor([i % 3 for i in good]),
                torch.tensor(good, dtype=torch.int64),
                corrupt=[(i, "bad") for i in ids if i == 13],
            )


def _run(cfg, folder, source):
    workload = Shapes({})
    torch.manual_seed(0)
    model = workload.build_model(3)
    optimizer = workload.optimizer(model.parameters(), 0.01)
    checkpoints = Checkpoints(folder, every_steps=cfg.checkpoint_every_steps, every_s=0)
    progress = Progress.fresh(cfg)
    saved = checkpoints.load()
    if saved is not None:
        progress = resume_progress(*saved, 0, model, optimizer, folder)
        source.resume(progress.epoch, progress.consumed)
    train_epochs(
        cfg, workload, model, source, torch.device("cpu"), optimizer=optimizer, progress=progress, checkpoints=checkpoints
    )
    return progress, model


@pytest.fixture(autouse=True)
def _no_pending_sigterm():
    TERMINATE.event.clear()
    yield
    TERMINATE.event.clear()


@pytest.mark.slow
def test_a_sigterm_mid_epoch_saves_the_position_and_the_resumed_run_consumes_each_sample_once_per_epoch(tmp_path):
    cfg = TrainConfig(epochs=3, batch_size=4, warmup_steps=0, max_corrupt_share=0.5, log_every=1000)
    whole, _ = _run(cfg, tmp_path / "uninterrupted", _Source())

    def sigterm_at(n):
        if n == 17:  # while epoch 1's 6th batch is on its way: that step still completes
            TERMINATE.event.set()

    with pytest.raises(Interrupted) as interrupted:
        _run(cfg, tmp_path / "ckpt", _Source(on_batch=sigterm_at))
    assert "checkpoint at epoch 1, iteration 6 (step 18)" in interrupted.value.message and interrupted.value.code == 143
    assert Checkpoints(tmp_path / "ckpt").load()[0] == (1, 6)
    assert not [p for p in (tmp_path / "ckpt").iterdir() if p.name.startswith(".")]  # nothing half-written left behind
    TERMINATE.event.clear()
    source = _Source()
    resumed, _ = _run(cfg, tmp_path / "ckpt", source)

    assert source.resumed[0] == 1 and len(source.resumed[1]) == 4 * 6  # six batches of epoch 1 were consumed
    assert resumed.ledger.epochs == whole.ledger.epochs  # same ids, once each, every epoch
    assert [e["distinct"] for e in resumed.ledger.epochs] == [SAMPLES] * 3
    assert all(e["duplicates"] == 0 for e in resumed.ledger.epochs)
    assert resumed.stats.steps == whole.stats.steps and sum(resumed.stats.sizes) == sum(whole.stats.sizes)
    assert len(resumed.corrupt) == len(whole.corrupt) == 3  # sample 13, once per epoch
    assert resumed.resumes == 1


def test_checkpoints_every_n_steps_and_at_every_epoch_end(tmp_path, capsys):
    cfg = TrainConfig(epochs=2, batch_size=4, warmup_steps=0, max_corrupt_share=0.5, checkpoint_every_steps=5, log_every=1000)
    _run(cfg, tmp_path, _Source())
    saves = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[checkpoint] saved")]
    assert [s.split(": ")[0] for s in saves].count("[checkpoint] saved (end of epoch)") == 2
    assert sum("(interval)" in s for s in saves) == 4  # steps 5, 10, 15, 20 (two epochs of 12 steps)
    tag, (part,) = Checkpoints(tmp_path).load()
    assert tag == (2, 0) and part["ledger"]["ids"].size == 0 and part["steps"] == 24


def test_a_failure_between_steps_leaves_a_checkpoint_to_resume_from(tmp_path):
    cfg = TrainConfig(epochs=1, batch_size=4, warmup_steps=0, max_corrupt_share=0.5, log_every=1000)

    def lose_the_data_host(n):
        if n == 6:
            raise ConnectionError("data host lost")

    with pytest.raises(ConnectionError):
        _run(cfg, tmp_path, _Source(on_batch=lose_the_data_host))
    tag, (part,) = Checkpoints(tmp_path).load()
    assert tag == (0, 6) and part["steps"] == 6 and part["ledger"]["ids"].size == 6 * 4


def test_a_data_host_that_reports_its_own_sigterm_first_still_ends_as_an_interruption(tmp_path):
    cfg = TrainConfig(epochs=1, batch_size=4, warmup_steps=0, max_corrupt_share=0.5, log_every=1000)

    def everyone_gets_sigterm(n):
        if n == 4:
            TERMINATE.event.set()  # the trainer's own SIGTERM, noted ...
            raise ConnectionError("data host algo-2 failed: terminated: SIGTERM")  # ... as its data host's ERROR arrives

    with pytest.raises(Interrupted) as interrupted:
        _run(cfg, tmp_path, _Source(on_batch=everyone_gets_sigterm))
    assert "checkpoint at epoch 0, iteration 4 (step 4)" in interrupted.value.message
    assert Checkpoints(tmp_path).load()[1][0]["ledger"]["ids"].size == 4 * 4


def test_an_fp16_run_keeps_its_loss_scale_in_the_checkpoint_and_resumes_with_it(tmp_path):
    # two steps an epoch: a float16 backward pass on the CPU takes a sixth of a second
    cfg = TrainConfig(epochs=1, batch_size=4, warmup_steps=0, max_corrupt_share=0.5, log_every=1000, precision="fp16")
    _run(cfg, tmp_path, _Source(samples=FP16_SAMPLES))
    end = tmp_path / "trainer-0.end.pt"
    document = torch.load(end, weights_only=False)
    assert document["scaler"]["scale"] > 0
    document["scaler"]["scale"] = 1024.0  # what a run that had backed off its scale would have saved
    torch.save(document, end)
    _run(TrainConfig(**{**cfg.as_dict(), "epochs": 2}), tmp_path, _Source(samples=FP16_SAMPLES))
    assert torch.load(end, weights_only=False)["scaler"]["scale"] == 1024.0  # resumed with it (no growth in 2 steps)


def test_a_run_without_fp16_saves_no_loss_scale(tmp_path):
    cfg = TrainConfig(epochs=1, batch_size=4, warmup_steps=0, max_corrupt_share=0.5, log_every=1000, precision="bf16")
    _run(cfg, tmp_path, _Source())
    assert torch.load(tmp_path / "trainer-0.end.pt", weights_only=False)["scaler"] is None

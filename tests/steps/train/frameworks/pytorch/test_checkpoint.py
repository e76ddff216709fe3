"""PyTorch checkpoints on disk: one of another kind is refused with what to do, and several trainers resume from the
newest point they all reached."""

import pytest
import torch

from steps.common.errors import UserError
from steps.train.frameworks.pytorch.checkpoint import Checkpoints


def test_a_checkpoint_of_another_kind_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "trainer-0.a.json").write_text('{"tag": [0, 3], "world_size": 1}')
    (tmp_path / "trainer-0.a.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match=r"cannot be read .* delete the checkpoint folder"):
        Checkpoints(tmp_path).load()
    torch.save({"version": 99}, tmp_path / "trainer-0.a.pt")
    with pytest.raises(UserError, match="not a version-2 checkpoint"):
        Checkpoints(tmp_path).load()
    with pytest.raises(UserError, match=r"written by \[1\] trainer host\(s\); this job has 2"):
        Checkpoints(tmp_path, rank=0, world=2).load()


def test_several_trainers_resume_from_the_newest_point_they_all_reached(tmp_path):
    first, second = (Checkpoints(tmp_path, rank=r, world=2, every_steps=4) for r in (0, 1))
    assert first.due(8, 17) and not first.due(9, 18)  # every 4 iterations of an epoch, not by time or run steps
    for tag in ((0, 4), (0, 8)):  # both reached these
        first.save(tag, {"ledger": {"ids": [1]}}, steps=tag[1])
        second.save(tag, {"ledger": {"ids": [2]}}, steps=tag[1])
    first.save((0, 12), {"ledger": {"ids": [1, 3]}}, steps=12)  # the second ran out of batches: the first went on alone
    reader = Checkpoints(tmp_path, rank=1, world=2)
    tag, parts = reader.load()
    assert tag == (0, 8) and [p["ledger"]["ids"] for p in parts] == [[1], [2]]
    assert reader.saved_tag == (0, 8) and reader.saved_step == 8  # named if interrupted before the next save
    first.save((1, 0), {"ledger": {"ids": []}}, steps=14, end_of_epoch=True)
    second.save((1, 0), {"ledger": {"ids": []}}, steps=13, end_of_epoch=True)
    assert Checkpoints(tmp_path, rank=0, world=2).load()[0] == (1, 0)

"""The head's Ray Train trainer, built without starting Ray."""

from __future__ import annotations

import pytest

from steps.train.frameworks.ray.trainer import _torch_trainer


def _callbacks(trainer_class) -> list[str]:
    from ray.train import ScalingConfig

    trainer = trainer_class(lambda: None, scaling_config=ScalingConfig(num_workers=1))
    return [type(c).__name__ for c in trainer._create_default_callbacks()]


@pytest.mark.slow  # imports Ray Train (2 s)
def test_the_job_trainer_is_ray_trains_own_less_the_placement_group_cleaner():
    """The cleaner's process polls a state API no node here serves (its warnings were most of a job's log); the rest of
    Ray Train's callbacks stay, in their order. Ray renaming the hook it overrides fails here, not in a job's log."""
    from ray.train.torch import TorchTrainer

    ours, theirs = _callbacks(_torch_trainer()), _callbacks(TorchTrainer)
    assert "PlacementGroupCleanerCallback" in theirs
    assert ours == [name for name in theirs if name != "PlacementGroupCleanerCallback"]

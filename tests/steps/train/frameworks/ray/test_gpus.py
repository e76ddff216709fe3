"""The Ray path checks a trainer host's GPUs with torch before its Ray node offers them to Ray Train (the check
itself: tests/steps/train/core/test_gpus.py)."""

from types import SimpleNamespace

import pytest
import torch

from steps.common.errors import UserError
from steps.contract import EMULATED_HOST_ENV


@pytest.fixture
def real_host(monkeypatch):
    monkeypatch.delenv(EMULATED_HOST_ENV, raising=False)


def _gpu_host(role="trainer"):
    return SimpleNamespace(current_host="algo-2", instance_type="ml.g5.xlarge", trainer_hosts=("algo-2",), role=role)


def test_the_ray_path_checks_trainer_hosts_with_torch_before_its_ray_node_starts(real_host, monkeypatch):
    from steps.train.frameworks.ray import trainer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(trainer, "RayNode", lambda *a: pytest.fail("the Ray node started"))
    with pytest.raises(UserError, match=r"PyTorch \(Ray Train\) finds no usable GPU"):
        trainer.run_trainer(None, _gpu_host(), None)

"""The PyTorch trainer and GPUs: its process group's backends, and the usable-GPU check before it trains (the check
itself: tests/steps/train/core/test_gpus.py)."""

from types import SimpleNamespace

import pytest
import torch
from torch.distributed import BackendConfig

from steps.common.errors import UserError
from steps.contract import EMULATED_HOST_ENV
from steps.train.frameworks.pytorch.trainer import process_group_backend


@pytest.fixture
def real_host(monkeypatch):
    monkeypatch.delenv(EMULATED_HOST_ENV, raising=False)


def _gpu_host(role="trainer"):
    return SimpleNamespace(current_host="algo-2", instance_type="ml.g5.xlarge", trainer_hosts=("algo-2",), role=role)


def test_on_gpus_host_memory_collectives_go_over_gloo_and_gradients_over_nccl():
    # the summaries the trainers all_reduce at the end are CPU tensors, which NCCL alone refuses
    assert BackendConfig(process_group_backend(torch.device("cuda"))).get_device_backend_map() == {"cpu": "gloo", "cuda": "nccl"}
    assert process_group_backend(torch.device("cpu")) == "gloo"


def test_the_pytorch_trainer_checks_before_it_trains(real_host, monkeypatch):
    from steps.train.frameworks.pytorch.trainer import run_trainer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"ml\.g5\.xlarge.*PyTorch finds no usable GPU \(torch.cuda.is_available\(\) is false\)"):
        run_trainer(None, _gpu_host(), None)

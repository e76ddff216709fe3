"""The PyTorch models a workload builds."""

from __future__ import annotations

import pytest
import torch

from steps.train.workloads.models import resnet50, small_cnn


@pytest.mark.slow
def test_resnet50_has_the_torchvision_parameter_count():
    model = resnet50(1000)
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    assert model(torch.zeros(1, 3, 64, 64)).shape == (1, 1000)


def test_small_cnn_maps_a_batch_to_logits():
    assert small_cnn(8)(torch.zeros(4, 3, 64, 64)).shape == (4, 8)

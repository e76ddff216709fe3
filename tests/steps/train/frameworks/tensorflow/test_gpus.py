"""The TensorFlow trainer checks its GPUs with TensorFlow's own device list, loading no torch (the check itself:
tests/steps/train/core/test_gpus.py)."""

import os
import subprocess
import sys

import pytest

from steps.contract import EMULATED_HOST_ENV


@pytest.fixture
def real_host(monkeypatch):
    monkeypatch.delenv(EMULATED_HOST_ENV, raising=False)


@pytest.mark.slow
def test_the_tensorflow_trainer_checks_with_tensorflows_device_list(real_host):
    # in a fresh process: what it imports is the point (TensorFlow's own device list, no torch)
    code = """
import sys
from types import SimpleNamespace
import tensorflow as tf
tf.config.list_physical_devices = lambda kind=None: []
from steps.common.errors import UserError
from steps.train.frameworks.tensorflow.trainer import run_trainer
try:
    run_trainer(None, SimpleNamespace(current_host="algo-2", instance_type="ml.g5.xlarge", trainer_hosts=("algo-2",)), None)
except UserError as exc:
    print(exc.message)
print("torch" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    )
    message, torch_imported = out.stdout.strip().splitlines()[-2:]
    assert 'TensorFlow finds no usable GPU (tf.config.list_physical_devices("GPU") is empty)' in message
    assert "CUDA 12.9" in message and torch_imported == "False"

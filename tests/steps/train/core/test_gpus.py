"""How many of a trainer host's GPUs the training uses, the warning when some sit idle, and the failure when a GPU
instance type has none usable."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from torch.distributed import BackendConfig

from steps.common.errors import UserError
from steps.contract import EMULATED_HOST_ENV
from steps.train.core.gpus import gpu_use, gpus_of, idle_gpus_line, require_usable_gpus
from steps.train.frameworks.pytorch.trainer import process_group_backend


def test_one_process_on_a_multi_gpu_host_says_how_many_sit_idle_and_the_fix():
    use = gpu_use(1, 4, "pytorch")
    assert (use["per_host"], use["used_per_host"]) == (4, 1)
    assert "on 1 of its 4 GPUs" in use["idle"] and "DnnInstanceCount" in use["idle"] and "framework=tensorflow" in use["idle"]
    assert idle_gpus_line("algo-2", use).startswith("[trainer] algo-2: WARNING framework=pytorch")


def test_every_gpu_used_or_none_there_is_no_warning():
    for used, per_host in ((1, 1), (4, 4), (0, 0)):
        use = gpu_use(used, per_host, "tensorflow")
        assert use["idle"] is None and idle_gpus_line("algo-1", use) is None


def test_on_gpus_host_memory_collectives_go_over_gloo_and_gradients_over_nccl():
    # the summaries the trainers all_reduce at the end are CPU tensors, which NCCL alone refuses
    assert BackendConfig(process_group_backend(torch.device("cuda"))).get_device_backend_map() == {"cpu": "gloo", "cuda": "nccl"}
    assert process_group_backend(torch.device("cpu")) == "gloo"


# -- a GPU instance type without a usable GPU ---------------------------------------------------------------------------


@pytest.fixture
def real_host(monkeypatch):
    monkeypatch.delenv(EMULATED_HOST_ENV, raising=False)


def test_gpus_per_type_come_from_the_instance_catalogue():
    assert (gpus_of("ml.g5.xlarge"), gpus_of("ml.p4d.24xlarge"), gpus_of("ml.c5.4xlarge")) == (1, 8, 0)
    assert gpus_of("ml.g6e.96xlarge") >= 1 and gpus_of("ml.c5.96xlarge") == 0  # a size it lacks: its family decides
    assert gpus_of("ml.trn1.2xlarge") == 0  # a family it does not list: no check


@pytest.mark.parametrize(
    "framework,cause",
    [
        ("pytorch", "CUDA 13, which needs an NVIDIA driver R580 or newer"),
        ("ray", "CUDA 13, which needs an NVIDIA driver R580 or newer"),
        ("tensorflow", "TensorFlow training image needs CUDA 12.9"),
    ],
)
def test_a_gpu_type_without_a_usable_gpu_fails_naming_the_type_the_cause_and_the_fix(real_host, framework, cause):
    with pytest.raises(UserError) as caught:
        require_usable_gpus("algo-3", "ml.g5.xlarge", 0, framework, how="the probe said none")
    message = caught.value.message
    assert caught.value.headline == "no usable GPU"
    assert "trainer host algo-3 is a ml.g5.xlarge, a GPU instance type" in message and "(the probe said none)" in message
    assert cause in message and "billed as a GPU" in message
    assert "npx cdk deploy -c hetero:trainingImage=<uri>" in message and "DnnInstanceType" in message


def test_an_emulated_host_says_so_in_one_line_and_trains_on(monkeypatch):
    monkeypatch.setenv(EMULATED_HOST_ENV, "1")
    lines = []
    require_usable_gpus("algo-1", "ml.g5.xlarge", 0, "pytorch", how="torch.cuda.is_available() is false", log=lines.append)
    assert lines == [
        "[trainer] algo-1: emulated ml.g5.xlarge: no GPU here (torch.cuda.is_available() is false), training on the CPU"
    ]


def test_a_cpu_type_or_a_usable_gpu_passes_silently(real_host):
    lines = []
    require_usable_gpus("algo-1", "ml.c5.4xlarge", 0, "pytorch", how="-", log=lines.append)
    require_usable_gpus("algo-1", "ml.p4d.24xlarge", 8, "tensorflow", how="-", log=lines.append)
    assert lines == []


def test_the_check_imports_no_framework():
    # the TensorFlow image has no torch: the check must not pull it in
    out = subprocess.run(
        [sys.executable, "-c", "import sys, steps.train.core.gpus; print(sorted({'torch', 'tensorflow'} & set(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def _gpu_host(role="trainer"):
    return SimpleNamespace(current_host="algo-2", instance_type="ml.g5.xlarge", trainer_hosts=("algo-2",), role=role)


def test_the_pytorch_trainer_checks_before_it_trains(real_host, monkeypatch):
    from steps.train.frameworks.pytorch.trainer import run_trainer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"ml\.g5\.xlarge.*PyTorch finds no usable GPU \(torch.cuda.is_available\(\) is false\)"):
        run_trainer(None, _gpu_host(), None)


def test_the_ray_path_checks_trainer_hosts_with_torch_before_its_ray_node_starts(real_host, monkeypatch):
    from steps.train.frameworks.ray import job as ray_job

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(ray_job, "RayNode", lambda *a: pytest.fail("the Ray node started"))
    with pytest.raises(UserError, match=r"PyTorch \(Ray Train\) finds no usable GPU"):
        ray_job.run_ray_host(None, _gpu_host(), None)


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

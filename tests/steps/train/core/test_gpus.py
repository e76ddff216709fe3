"""How many of a trainer host's GPUs the training uses, the warning when some sit idle, and the failure when a GPU
instance type has none usable."""

import subprocess
import sys

import pytest

from steps.common.errors import UserError
from steps.contract import EMULATED_HOST_ENV
from steps.train.core.gpus import gpu_use, gpus_of, idle_gpus_line, require_usable_gpus


def test_one_process_on_a_multi_gpu_host_says_how_many_sit_idle_and_the_fix():
    use = gpu_use(1, 4, "pytorch")
    assert (use["per_host"], use["used_per_host"]) == (4, 1)
    assert "on 1 of its 4 GPUs" in use["idle"] and "DnnInstanceCount" in use["idle"] and "framework=tensorflow" in use["idle"]
    assert idle_gpus_line("algo-2", use).startswith("[trainer] algo-2: WARNING framework=pytorch")


def test_every_gpu_used_or_none_there_is_no_warning():
    for used, per_host in ((1, 1), (4, 4), (0, 0)):
        use = gpu_use(used, per_host, "tensorflow")
        assert use["idle"] is None and idle_gpus_line("algo-1", use) is None


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

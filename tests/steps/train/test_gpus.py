"""How many of a trainer host's GPUs the training uses, and the warning when some sit idle."""

import torch
from torch.distributed import BackendConfig

from steps.train.gpus import gpu_use, idle_gpus_line
from steps.train.trainer import process_group_backend


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

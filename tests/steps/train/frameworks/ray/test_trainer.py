"""The head's Ray Train trainer, built without starting Ray."""

from __future__ import annotations

import os
import tempfile
from types import SimpleNamespace

import pytest

from steps.train.frameworks.ray import node as ray_node
from steps.train.frameworks.ray.job_trainer import job_trainer


def _callbacks(trainer_class) -> list[str]:
    from ray.train import ScalingConfig

    trainer = trainer_class(lambda: None, scaling_config=ScalingConfig(num_workers=1))
    return [type(c).__name__ for c in trainer._create_default_callbacks()]


@pytest.mark.slow  # imports Ray Train (2 s)
def test_the_job_trainer_is_ray_trains_own_less_the_placement_group_cleaner():
    """The cleaner's process polls a state API no node here serves (its warnings were most of a job's log); the rest of
    Ray Train's callbacks stay, in their order. Ray renaming the hook it overrides fails here, not in a job's log."""
    from ray.train.torch import TorchTrainer

    ours, theirs = _callbacks(job_trainer()), _callbacks(TorchTrainer)
    assert "PlacementGroupCleanerCallback" in theirs
    assert ours == [name for name in theirs if name != "PlacementGroupCleanerCallback"]


def _node_environment(tmp_path, monkeypatch) -> dict:
    monkeypatch.setattr(ray_node, "job_secret", lambda: b"secret")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cluster = SimpleNamespace(trainer_hosts=["algo-1"], current_host="algo-1")
    return ray_node.RayNode(SimpleNamespace(silence_timeout_s=30.0), cluster).environment()


@pytest.mark.slow  # imports Ray Train (2 s)
def test_ray_trains_settings_reach_its_processes_through_the_nodes_environment_not_a_runtime_environment(tmp_path, monkeypatch):
    """Ray Train gives its controller, and the controller its workers, a runtime environment carrying the driver's
    RAY_TRAIN_* settings; a process with one starts through Ray's setup_worker.py (one more interpreter) and so does
    everything it starts. The job's trainer gives none: every setting Ray Train would carry, with the value it would
    carry, is already in the node's environment, which every Ray process of the node inherits."""
    from ray.train.v2._internal import constants
    from ray.train.v2._internal.execution.controller import TrainController
    from ray.train.v2._internal.execution.worker_group import WorkerGroup

    environment = _node_environment(tmp_path, monkeypatch)
    monkeypatch.setattr(os, "environ", environment)
    carried = constants.get_env_vars_to_propagate()
    carried.setdefault(
        constants.RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR, constants.DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE
    )
    assert carried and carried.items() <= environment.items()
    assert WorkerGroup._get_worker_runtime_env({})["env_vars"] == constants.get_env_vars_to_propagate()  # Ray's own

    trainer = job_trainer()
    assert issubclass(trainer.controller, TrainController) and trainer.controller.__name__ == "TrainController"
    worker_group = trainer.controller.worker_group_cls
    assert worker_group._get_worker_runtime_env({}) == {}
    assert worker_group._get_worker_runtime_env({"pip": ["x"]}) == {"pip": ["x"]}  # a run's own stays


@pytest.mark.slow  # imports Ray Train (2 s)
def test_one_worker_gets_its_dataset_configured_in_itself_several_keep_ray_trains_manager(monkeypatch):
    """A single worker's dataset needs no dataset manager actor (one more Ray worker process per job): the provider it
    is given configures the dataset where it is asked for it, once, at world size 1."""
    from ray.train import ScalingConfig
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback as RayDatasetsCallback
    from ray.train.v2._internal.data_integration.interfaces import DatasetShardMetadata

    from steps.train.frameworks.ray.job_trainer import InWorkerShards

    trainer = job_trainer()(lambda: None, scaling_config=ScalingConfig(num_workers=1), datasets={"train": "the dataset"})
    (callback,) = [c for c in trainer._create_default_callbacks() if isinstance(c, RayDatasetsCallback)]
    worker = SimpleNamespace(metadata=SimpleNamespace(node_id="node"))
    (provider,) = callback.before_init_train_context([worker])["dataset_shard_provider"]
    assert isinstance(provider, InWorkerShards)

    calls = []

    def configure(datasets, world_size, worker_handles, worker_node_ids):
        calls.append((datasets, world_size))
        return [{name: f"iterator of {ds}" for name, ds in datasets.items()}]

    monkeypatch.setattr(provider._data_config, "configure", configure)
    assert provider.get_dataset_shard(DatasetShardMetadata("train", 0)) == "iterator of the dataset"
    assert provider.get_dataset_shard(DatasetShardMetadata("train", 0)) == "iterator of the dataset"
    assert calls == [({"train": "the dataset"}, 1)]
    with pytest.raises(KeyError, match="'valid'"):
        provider.get_dataset_shard(DatasetShardMetadata("valid", 0))

    delegated = []
    monkeypatch.setattr(RayDatasetsCallback, "before_init_train_context", lambda self, workers: delegated.append(len(workers)))
    callback.before_init_train_context([worker, worker])
    assert delegated == [2]

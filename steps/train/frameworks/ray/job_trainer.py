"""Ray Train's ``TorchTrainer`` as the head runs it: Ray Train's own, less what a fixed cluster of 1-CPU hosts pays for
and never uses.

On a trainer host every process of the job's Ray node shares the host's CPUs with the training step, and on the
emulated hosts that is one CPU: each Ray worker process Ray Train starts (the controller, its worker group, Ray Data's
coordinators) is a Python process importing Ray on it, one after the other, before the first step. Two things are left
out (docs/performance.md, A Ray job's start):

- the placement-group cleaner: one more worker process per job, asking each second the state API (which needs the full
  dashboard, started on no node here) whether the controller lives, to free its placement groups should it die; the
  cluster ends with the job, and its placement groups with it;
- for a single worker, the dataset manager: Ray Train starts an actor (one more worker process) that splits each
  dataset among the workers, and for the split a coordinator actor (another); one worker has nothing to split with
  anyone, and its dataset iterator is configured in the worker itself, whose process runs the dataset (Ray Data's
  executor runs where the iterator is iterated). Several workers keep Ray Train's manager and its streaming split;
- the runtime environment Ray Train gives its controller and workers to carry its ``RAY_TRAIN_*`` settings from the
  driver's environment: a process with a runtime environment starts through Ray's ``setup_worker.py`` (one more
  Python interpreter, importing Ray's runtime-env code, then ``exec`` of the worker), and every task and actor it
  starts inherits it (Ray Data's coordinators, the read and decode tasks). Here the driver's environment and every Ray
  process's are the node's (`steps.train.frameworks.ray.node.RayNode.environment`, given to ``ray start`` on every
  host), so the settings are where Ray Train reads them without it.

Ray is imported inside the functions: a process that imports it before its node's environment is set connects without
the auth token (`steps.train.frameworks.ray.node.RayNode.connect`).
"""

from __future__ import annotations

from typing import Any


def job_trainer() -> type:
    """The ``TorchTrainer`` subclass the head fits (`steps.train.frameworks.ray.trainer`)."""
    import ray
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback as RayDatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
    from ray.train.v2._internal.execution.controller import TrainController as RayTrainController
    from ray.train.v2._internal.execution.worker_group import WorkerGroup
    from ray.train.v2.torch.torch_trainer import TorchTrainer  # what ray.train.torch exports (Ray Train v2)

    class NodeWorkerGroup(WorkerGroup):
        @staticmethod
        def _get_worker_runtime_env(custom_runtime_env) -> dict:
            """The run's own worker runtime environment only (RunConfig.worker_runtime_env, {} unless set): Ray Train's
            settings are already in every worker's environment, the node's."""
            return dict(custom_runtime_env)

    class TrainController(RayTrainController):  # Ray Train's name: its lines in the job's log read as they do without
        worker_group_cls = NodeWorkerGroup

    class DatasetsCallback(RayDatasetsCallback):  # Ray Train's name, as the controller's
        def before_init_train_context(self, workers) -> dict:
            """Ray Train's dataset manager for several workers; for one, a provider configured in the worker."""
            if len(workers) != 1:
                return super().before_init_train_context(workers)
            datasets = {k: v() if callable(v) else v for k, v in self._datasets.items()}
            return {"dataset_shard_provider": [InWorkerShards(datasets, self._data_config)]}

    class JobTrainer(TorchTrainer):
        controller = TrainController  # what it runs on the driver's node

        def _create_default_callbacks(self) -> list:
            # Ray Train's own call, with its stubs' narrower type of the datasets (it gives them as they were given)
            return [
                DatasetsCallback(train_run_context=self.train_run_context, datasets=self.datasets)  # type: ignore[arg-type]
                if isinstance(c, RayDatasetsCallback)
                else c
                for c in super()._create_default_callbacks()
                if not isinstance(c, PlacementGroupCleanerCallback)
            ]

        def _initialize_and_run_controller(self, **controller_init_kwargs) -> Any:
            """Ray Train's own, less the controller's runtime environment: the controller on the driver's node, run to
            its result. Ray Train registers a SIGINT handler here when ``fit`` runs in the main thread; the head's
            ``fit`` runs in a thread of its own (`steps.train.frameworks.ray.trainer`), and a stop ends the driver."""
            node = {ray._raylet.RAY_NODE_ID_KEY: ray.get_runtime_context().get_node_id()}  # type: ignore[attr-defined]
            actor: Any = ray.remote(num_cpus=0, label_selector=node)(self.controller)  # Ray's stubs: a class, not an actor class
            controller = actor.remote(**controller_init_kwargs)
            ray.get(controller.run.remote())
            return ray.get(controller.get_result.remote())

    return JobTrainer


class InWorkerShards:
    """A single Ray Train worker's datasets (Ray Train's ``DatasetShardProvider``), configured where it is asked for
    them: in the worker, which Ray Train has given the driver's ``DataContext`` before (``DatasetsCallback``
    propagates it), as Ray Train's dataset manager configures them in its own process."""

    def __init__(self, datasets: dict, data_config) -> None:
        self._datasets, self._data_config = datasets, data_config
        self._iterators: dict = {}

    def get_dataset_shard(self, dataset_info) -> Any:
        name = dataset_info.dataset_name
        if name not in self._datasets:
            raise KeyError(f"no dataset {name!r} was given to the trainer: {', '.join(sorted(self._datasets)) or 'none'}")
        if name not in self._iterators:
            configured = self._data_config.configure(
                datasets={name: self._datasets[name]}, world_size=1, worker_handles=None, worker_node_ids=None
            )
            self._iterators[name] = configured[0][name]
        return self._iterators[name]

    def shutdown_data_executors(self) -> None:
        """Nothing to shut down here: the dataset's executor runs in the worker's process, and ends with it."""

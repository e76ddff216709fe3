"""Ray Train's ``TorchTrainer`` as the head runs it: Ray Train's own, less what a fixed cluster of 1-CPU hosts pays for
and never uses.

On a trainer host every process of the job's Ray node shares the host's CPUs with the training step, and on the
emulated hosts that is one CPU: each Ray worker process Ray Train starts (the controller, its worker group, Ray Data's
coordinators) is a Python process importing Ray on it, one after the other, before the first step. Two things are left
out (docs/performance.md, A Ray job's start):

- the placement-group cleaner: one more worker process per job, asking each second the state API (which needs the full
  dashboard, started on no node here) whether the controller lives, to free its placement groups should it die; the
  cluster ends with the job, and its placement groups with it;
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

    class JobTrainer(TorchTrainer):
        controller = TrainController  # what it runs on the driver's node

        def _create_default_callbacks(self) -> list:
            return [c for c in super()._create_default_callbacks() if not isinstance(c, PlacementGroupCleanerCallback)]

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

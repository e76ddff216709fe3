"""Training entry point for every host of the job, data hosts and trainers alike.

SageMaker runs the same script on every instance group; this one reads the
SageMaker Environment, decides the host's role once (from its instance
group, never its host name) and runs the data service or the trainer.

In SageMaker (script mode)::

    hyperparameters: sagemaker_program=steps/train/launcher.py,
                     sagemaker_submit_directory=s3://.../code.tar.gz, plus TrainConfig keys

Locally, on an emulated cluster (one process per host)::

    hetero run                      # the whole pipeline
    SAGEMAKER_BASE_DIR=runs/<id>/jobs/<job>/algo-1 python steps/train/launcher.py

The ``framework`` hyperparameter picks the stack: PyTorch over the project's
own data plane, TensorFlow over tf.data.service (dispatcher on the
trainer host, a worker on every data host), or Ray (a Ray cluster over every
host: Ray Data decodes on every CPU, Ray Train trains on the trainer hosts).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # SageMaker runs the entry point by path, not as a module
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from steps.common.errors import run_step  # noqa: E402


def dispatch(env) -> None:
    from steps.train.core.cluster import DATA, Cluster, wait_for_host_names
    from steps.train.core.config import TrainConfig
    from steps.train.workload import load_workload

    cfg = TrainConfig.from_hyperparameters(env.hyperparameters)
    cluster = Cluster.from_environment(env, cfg)
    wait_for_host_names(cluster.hosts, cfg.connect_timeout_s)  # the toolkit's wait before user code, which this entry replaces
    if cfg.framework in ("tensorflow", "ray"):
        _confine(cfg, cluster)  # re-executes this process once, before anything imports TensorFlow or starts Ray
    _load_secret(cluster)
    workload = load_workload(cfg.workload, cfg.workload_options)
    print(f"[launcher] host={cluster.current_host} group={cluster.current_group} role={cluster.role} "
          f"framework={cfg.framework} heterogeneous={cluster.heterogeneous}", flush=True)
    if cfg.framework == "tensorflow":
        _quiet_tensorflow()
        if cluster.role == DATA:  # a tf.data.service worker: the dataset graph comes from the trainer
            from steps.train.frameworks.tensorflow.data_host import run_tf_data_host

            run_tf_data_host(cfg, cluster)
        else:  # the dispatcher and the Keras training loop
            from steps.train.frameworks.tensorflow.trainer import run_tf_trainer

            run_tf_trainer(cfg, cluster, workload)
    elif cfg.framework == "ray":  # every host a Ray node; the first trainer host drives (steps.train.frameworks.ray.job)
        from steps.train.frameworks.ray.job import run_ray_host

        run_ray_host(cfg, cluster, workload)
    elif cluster.role == DATA:
        from steps.train.frameworks.pytorch.data_host import run_data_service

        run_data_service(cfg, cluster, workload)
    else:
        from steps.train.frameworks.pytorch.trainer import run_trainer

        run_trainer(cfg, cluster, workload)


def _confine(cfg, cluster) -> None:
    """Before TensorFlow is imported or Ray started: re-execute this host with its listeners (and those of every process it
    starts) on its cluster address (steps.train.dataplane.bind_guard)."""
    from steps.train.core.cluster import resolve
    from steps.train.dataplane import bind_guard

    if cfg.bind_guard == "on" and not bind_guard.guarded():
        bind_guard.reexec_guarded(resolve(cluster.current_host))
    if not bind_guard.guarded():
        what = "tf.data.service listens on every interface without authentication" if cfg.framework == "tensorflow" else \
            "Ray listens on every interface (its token still applies)"
        print(f"[launcher] WARNING bind_guard=off: {what}", flush=True)


def _load_secret(cluster) -> None:
    """The job secret, read once from the ``secret`` channel before any server starts (and its file removed:
    steps.train.dataplane.auth); a job without the channel fails where a peer first needs the secret, saying so."""
    from steps.contract import SECRET_CHANNEL
    from steps.train.dataplane.auth import load_job_secret

    folder = cluster.channel(SECRET_CHANNEL, required=False)
    if folder is not None:
        load_job_secret(folder)


def _quiet_tensorflow() -> None:
    # TensorFlow's C++ INFO lines (CPU features, oneDNN) would drown the job's own log; warnings still show
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def main() -> int:
    # SageMaker stops a job (StopTrainingJob, a spot interruption) with SIGTERM: unwind so peers get STOP and the failure
    # file is written; a training loop first finishes its step and saves a checkpoint (steps.train.frameworks.pytorch.checkpoint)
    from steps.train.core.terminate import TERMINATE

    TERMINATE.install()
    # the toolkit reads SAGEMAKER_BASE_DIR once, at import: import it only now
    from sagemaker_training import environment

    def step():
        dispatch(environment.Environment())

    code = run_step(step, output_dir=environment.output_dir)
    if code:
        _end_now(code)
    return code


def _end_now(code: int) -> None:
    """A failed host ends as soon as its failure is recorded. Interpreter shutdown would first join
    what may be waiting on a peer that froze: tf.data.service servers drain in-flight calls (holding
    the GIL, for as long as the peer's call lasts), DataLoader workers are joined one by one."""
    import multiprocessing

    for child in multiprocessing.active_children():  # DataLoader workers: gone now, not tracing back over a broken pipe
        child.kill()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())

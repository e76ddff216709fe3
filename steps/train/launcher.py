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
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

if __package__ in (None, ""):  # SageMaker runs the entry point by path, not as a module
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from steps.common.errors import run_step  # noqa: E402


def _terminate(signum, frame):
    # SageMaker stops a job with SIGTERM: unwind so peers get STOP and the failure file is written
    raise SystemExit(128 + signum)


def dispatch(env) -> None:
    from steps.train.cluster import DATA, Cluster
    from steps.train.config import TrainConfig
    from steps.train.workload import load_workload

    cfg = TrainConfig.from_hyperparameters(env.hyperparameters)
    cluster = Cluster.from_environment(env, cfg)
    workload = load_workload(cfg.workload, cfg.workload_options)
    print(f"[launcher] host={cluster.current_host} group={cluster.current_group} role={cluster.role} "
          f"heterogeneous={cluster.heterogeneous}", flush=True)
    if cluster.role == DATA:
        from steps.train.data_service import run_data_service

        run_data_service(cfg, cluster, workload)
    else:
        from steps.train.trainer import run_trainer

        run_trainer(cfg, cluster, workload)


def main() -> int:
    signal.signal(signal.SIGTERM, _terminate)
    # the toolkit reads SAGEMAKER_BASE_DIR once, at import: import it only now
    from sagemaker_training import environment

    def step():
        dispatch(environment.Environment())

    return run_step(step, output_dir=environment.output_dir)


if __name__ == "__main__":
    sys.exit(main())

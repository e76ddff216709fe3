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

import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if __package__ in (None, ""):  # SageMaker runs the entry point by path, not as a module
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from steps.common.errors import run_step  # noqa: E402

if TYPE_CHECKING:
    from sagemaker_training.environment import Environment


def dispatch(env: Environment) -> None:
    from steps.frameworks import framework
    from steps.train.core.cluster import DATA, Cluster, wait_for_host_names
    from steps.train.core.config import TrainConfig
    from steps.train.workload import load_workload

    cfg = TrainConfig.from_hyperparameters(env.hyperparameters)
    fw = framework(cfg.framework)
    cluster = Cluster.from_environment(env, cfg)
    wait_for_host_names(cluster.hosts, cfg.connect_timeout_s)  # the toolkit's wait before user code, which this entry replaces
    if fw.unguarded_listeners:
        _confine(cfg, cluster, fw.unguarded_listeners)  # re-executes this process once, before the framework starts a server
    _load_secret(cluster)
    workload = load_workload(cfg.workload, cfg.workload_options)
    print(
        f"[launcher] host={cluster.current_host} group={cluster.current_group} role={cluster.role} "
        f"framework={cfg.framework} heterogeneous={cluster.heterogeneous}",
        flush=True,
    )
    for name, value in fw.quiet_env.items():
        os.environ.setdefault(name, value)
    # the framework's data-host entry on a data host (if it has one: Ray runs one cluster of every host), else its trainer
    entry = fw.data_host if cluster.role == DATA and fw.data_host else fw.trainer
    module, _, function = entry.partition(":")
    getattr(importlib.import_module(module), function)(cfg, cluster, workload)
    if fw.serves_as:  # whichever host's model folder SageMaker packs, the package serves (steps/train/core/model_package.py)
        from steps.train.core.model_package import write_serving_code

        write_serving_code(cluster.model_dir, cfg.workload, serves_as=fw.serves_as)
    if fw.serving_model:
        module, _, function = fw.serving_model.partition(":")
        getattr(importlib.import_module(module), function)(cluster.model_dir, workload)


def _confine(cfg, cluster, listeners: str) -> None:
    """Before TensorFlow is imported or Ray started: re-execute this host with its listeners (and those of every process it
    starts) on its cluster address (steps.train.dataplane.bind_guard)."""
    from steps.train.core.cluster import resolve
    from steps.train.dataplane import bind_guard

    if cfg.bind_guard == "on" and not bind_guard.guarded():
        bind_guard.reexec_guarded(resolve(cluster.current_host))
    if not bind_guard.guarded():
        print(f"[launcher] WARNING bind_guard=off: {listeners}", flush=True)


def _load_secret(cluster) -> None:
    """The job secret, read once from the ``secret`` channel before any server starts (and its file removed:
    steps.train.dataplane.auth); a job without the channel fails where a peer first needs the secret, saying so."""
    from steps.contract import SECRET_CHANNEL
    from steps.train.dataplane.auth import load_job_secret

    folder = cluster.channel(SECRET_CHANNEL, required=False)
    if folder is not None:
        load_job_secret(folder)


def main() -> NoReturn:
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
    _end_done()


def _end_done() -> NoReturn:
    """A host whose work completed ends as the interpreter would, less its teardown: threads joined, exit handlers run
    (Ray's, logging's, multiprocessing's), streams flushed, then the exit. Tearing down the modules and the heap of a
    process that loaded torch, Ray or TensorFlow took 0.6-1.1 s per host after the last exit handler (the README's Ray
    run: every host of both jobs), and SageMaker bills a job until its last host has exited."""
    import atexit
    import threading

    for thread in threading.enumerate():  # what interpreter shutdown waits for first: the non-daemon threads
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # CPython's own call at shutdown (the module has no public name for it)
    _exit(0)


def _end_now(code: int) -> NoReturn:
    """A failed host ends as soon as its failure is recorded. Interpreter shutdown would first join
    what may be waiting on a peer that froze: tf.data.service servers drain in-flight calls (holding
    the GIL, for as long as the peer's call lasts), DataLoader workers are joined one by one."""
    import multiprocessing
    import signal

    # torch's DataLoader installs a SIGCHLD handler that raises in the main thread when one of its workers dies by a
    # signal: killing them here would print that as a traceback over the host's one-line failure
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for child in multiprocessing.active_children():  # DataLoader workers: gone now, not tracing back over a broken pipe
        try:
            child.kill()
        except OSError:  # already gone
            pass
    _exit(code)


def _exit(code: int) -> NoReturn:
    """The process's end with ``code``, its output flushed and nothing more run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()

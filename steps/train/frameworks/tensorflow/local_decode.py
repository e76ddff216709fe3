"""Hybrid decode, TensorFlow: a tf.data.service worker on the trainer host, over its own share of every shard.

The trainer host's spare vCPUs (`steps.train.core.spare_cpus`) run one more
tf.data.service worker, registered with the dispatcher in the trainer's
process like the data hosts' workers. It serves from a folder of links to
every shard of the trainer group's ``train_local`` channel, beside a
``TAKE_FILE`` naming this trainer's positions of each shard
(`steps.train.core.split`); the data hosts' take files name the rest. The trainer's
per-epoch accounting counts every id, from whichever worker.

The worker is a child process, pinned to the spare vCPUs, so the training
loop keeps the CPUs it was measured to need; it dies with the trainer
(``PR_SET_PDEATHSIG``), and the trainer ends it when the job ends. Run as a
script only by `LocalWorker`.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the child this module runs as imports only what serving needs
    import keras
    import tensorflow as tf

    from steps.train.core.cluster import Cluster
    from steps.train.core.config import TrainConfig
    from steps.train.core.spare_cpus import Spare
    from steps.train.core.split import Take
    from steps.train.workload import Workload

CODE_ROOT = Path(__file__).resolve().parents[4]  # the folder holding steps/: the child imports the step code from it

READY = "hetero-tf-local-worker-ready"


def spare_workers(
    cfg: TrainConfig, cluster: Cluster, workload: Workload, model: keras.Model, strategy: tf.distribute.Strategy
) -> Spare:
    """This trainer host's decode vCPUs beside its loop (a `steps.train.core.spare_cpus.Spare`); ``auto`` probes the
    training step with a clone of ``model`` on one real batch."""
    from steps.formats.tfrecord import list_tfrecord_shards
    from steps.train.core.spare_cpus import spare

    def measure(shards: list[Path]) -> float | str:
        try:
            return loop_cpus(cfg, workload, model, strategy, [str(s) for s in shards[:1]])
        except (ValueError, TypeError) as exc:  # a subclassed Keras model that clone_model cannot copy
            return f"the model cannot be cloned: {exc}"[:300]

    return spare(cfg, cluster, measure, list_shards=list_tfrecord_shards)


def loop_cpus(
    cfg: TrainConfig, workload: Workload, model: keras.Model, strategy: tf.distribute.Strategy, files: list[str]
) -> float:
    """vCPUs this process keeps busy while training: CPU seconds over wall seconds of a few train steps on one
    cached batch, with a clone of ``model`` and a fresh optimizer (the model trained is untouched)."""
    import tensorflow as tf

    from steps.train.core.cluster import available_cpus
    from steps.train.core.spare_cpus import PROBE_STEPS
    from steps.train.frameworks.tensorflow.dataset import training_dataset
    from steps.train.frameworks.tensorflow.step import distribute, make_train_step, step_optimizer

    batch = training_dataset(files, workload, batch_size=cfg.batch_size, seed=cfg.seed, epoch=0).take(1).cache()
    with strategy.scope():
        clone = tf.keras.models.clone_model(model)
        clone.set_weights(model.get_weights())
        optimizer = step_optimizer(workload, cfg.learning_rate)
    train_step = make_train_step(workload, clone, optimizer, strategy)
    batches = iter(distribute(strategy, batch.repeat()))
    for _ in range(2):
        float(train_step(next(batches)))
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(PROBE_STEPS):
        float(train_step(next(batches)))  # waits for the device
    wall = time.perf_counter() - wall
    return (time.process_time() - cpu) / wall if wall > 0 else float(available_cpus())


class LocalWorker:
    """The child process serving this trainer's share; `failed` says why it ended early, if it did."""

    def __init__(self, shards: list[Path], take: Take, *, dispatcher: str, address: str, workers: int, timeout_s: float) -> None:
        from steps.train.frameworks.tensorflow.dataset import write_take

        self.folder = Path(tempfile.mkdtemp(prefix="hetero-tf-local-worker-"))
        for path in shards:
            (self.folder / path.name).symlink_to(path.resolve())
        write_take(self.folder, take)
        cpus = sorted(os.sched_getaffinity(0))[-workers:]  # the loop keeps the first ones
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, dispatcher, address, str(workers)],
            cwd=self.folder,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(CODE_ROOT), os.environ.get("PYTHONPATH")]))},
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: _child_setup(cpus),
        )
        self._await_ready(timeout_s)

    def _await_ready(self, timeout_s: float) -> None:
        """The child prints READY once its worker is up, and nothing else on stdout."""
        deadline = time.monotonic() + timeout_s
        stdout = self.process.stdout
        assert stdout is not None  # stdout=PIPE
        while time.monotonic() < deadline:
            ready, _, _ = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = stdout.readline()
            if line.strip() == READY:
                return
            if not line:  # it ended
                break
        self.stop()
        from steps.train.dataplane.errors import LocalDecodeFailed

        raise LocalDecodeFailed(
            f"this trainer host's tf.data.service worker did not start (exit code {self.process.returncode}); "
            "its error is in this host's log above"
        )

    def failed(self) -> str | None:
        code = self.process.poll()
        return (
            None
            if code is None
            else f"this trainer host's tf.data.service worker (pid {self.process.pid}) ended with exit code {code}"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _child_setup(cpus: list[int]) -> None:
    """In the child, before exec: die with the trainer, run on the spare vCPUs only."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.sched_setaffinity(0, cpus)


def main(dispatcher: str, address: str, workers: int) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(workers)
    tf.config.threading.set_inter_op_parallelism_threads(workers)
    service = tf.data.experimental.service
    worker = service.WorkerServer(
        service.WorkerConfig(dispatcher_address=dispatcher, worker_address=f"{address}:%port%", port=0, protocol="grpc")
    )
    print(READY, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # the trainer ends it: nothing to save
    worker.join()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))

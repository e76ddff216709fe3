"""The TensorFlow trainer: a Keras model in a custom loop, fed by tf.data.service or in-process.

Heterogeneous: batches come from the tf.data.service workers on the data hosts
(`steps.train.frameworks.tensorflow.data_host`); the dispatcher lives in this process
(`steps.train.frameworks.tensorflow.data`). Homogeneous (the baseline): the same
`steps.train.frameworks.tensorflow.dataset` pipeline runs in-process over this host's shards. Either
way the loop times, per step, the wait for data and the compute (a custom loop
rather than ``model.fit``, which hides that split), checks after each epoch
that every sample arrived exactly once (ids are counted; a duplicate is an
error, a missing sample a corrupt one), and writes the same ``metrics.json``
and metric lines as the PyTorch trainer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

from steps.formats.tfrecord import list_tfrecord_shards
from steps.train.core.cluster import Cluster, available_cpus, resolve
from steps.train.core.config import TrainConfig
from steps.train.core.corrupt import CorruptBudget
from steps.train.core.errors import Interrupted
from steps.train.core.gpus import gpu_use, require_usable_gpus
from steps.train.core.manifest import read_classes
from steps.train.core.metrics import StepStats, metric_line, training_metrics
from steps.train.core.outputs import write_outputs
from steps.train.core.precision import precision_document, precision_line
from steps.train.core.terminate import TERMINATE
from steps.train.dataplane.meter import arrived
from steps.train.dataplane.watch import failure_reason
from steps.train.frameworks.tensorflow.checkpoint import Checkpoints
from steps.train.frameworks.tensorflow.cluster import check_single_trainer, local_shards, shard_counts
from steps.train.frameworks.tensorflow.data import DataService
from steps.train.frameworks.tensorflow.dataset import SERVE_PATTERN, TAKE_FILE, sample_ids, training_dataset, validation_dataset
from steps.train.frameworks.tensorflow.errors import DuplicateSamples
from steps.train.frameworks.tensorflow.local_decode import LocalWorker, spare_workers
from steps.train.frameworks.tensorflow.step import (
    device_strategy,
    distribute,
    make_train_step,
    resolve_tf_precision,
    set_precision,
    step_optimizer,
)
from steps.train.workload import Workload

if TYPE_CHECKING:
    from pathlib import Path

    import keras

    from steps.train.core.spare_cpus import Spare

CORRUPT_REASON = "failed to decode; TensorFlow's error is in the log of the host that decoded it"


class InProcessSource:
    """Homogeneous: this host's shards through the same pipeline, in this process."""

    def __init__(self, cfg: TrainConfig, cluster: Cluster, workload: Workload) -> None:
        files, self.samples_per_epoch = local_shards(cluster, cluster.trainer_hosts, cfg.shard_wait_s)
        self.files = [str(f) for f in files]
        self.cfg, self.workload = cfg, workload

    def dataset(self, epoch: int) -> tf.data.Dataset:
        return training_dataset(self.files, self.workload, batch_size=self.cfg.batch_size, seed=self.cfg.seed, epoch=epoch)

    def sample_ids(self) -> np.ndarray:
        return sample_ids(self.files)

    def check(self) -> None:
        pass

    def measurements(self, samples: int, bytes_per_sample: float) -> dict:
        return arrived([], 0, 0)

    def close(self, status: str = "completed", reason: str = "", files: dict | None = None) -> None:
        pass


class ServiceSource:
    """Heterogeneous: the same pipeline, run by the tf.data.service workers on the data hosts, and by one on this
    host's spare vCPUs over its share of every shard (hybrid decode, `steps.train.frameworks.tensorflow.local_decode`)."""

    def __init__(self, cfg: TrainConfig, cluster: Cluster, workload: Workload, spare: Spare) -> None:
        self.cfg, self.workload = cfg, workload
        self.service = DataService(cfg, cluster).start(trainer_workers=spare.workers)
        self.samples_per_epoch = self.service.samples_per_epoch
        if spare.workers:
            take = self.service.split.trainer(0)
            counts = shard_counts(cluster)
            worker = LocalWorker(
                spare.shards,
                take,
                dispatcher=self.service.address,
                address=resolve(cluster.current_host),
                workers=spare.workers,
                timeout_s=cfg.connect_timeout_s,
            )
            self.service.add_local(worker, spare, sum(take.count(counts.get(s.name, 0)) for s in spare.shards))

    def dataset(self, epoch: int) -> tf.data.Dataset:
        return self.service.distribute(
            training_dataset(
                SERVE_PATTERN, self.workload, batch_size=self.cfg.batch_size, seed=self.cfg.seed, epoch=epoch, take_file=TAKE_FILE
            )
        )

    def sample_ids(self) -> np.ndarray:
        return self.service.sample_ids()

    def check(self) -> None:
        self.service.check()

    def measurements(self, samples: int, bytes_per_sample: float) -> dict:
        return self.service.measurements(samples, bytes_per_sample)

    def close(self, status: str = "completed", reason: str = "", files: dict | None = None) -> None:
        self.service.close(status, reason, files)


def run_trainer(cfg: TrainConfig, cluster: Cluster, workload: Workload) -> None:
    check_single_trainer(cluster)
    require_usable_gpus(
        cluster.current_host,
        cluster.instance_type,
        len(tf.config.list_physical_devices("GPU")),
        "tensorflow",
        how='tf.config.list_physical_devices("GPU") is empty',
    )
    precision = resolve_tf_precision(cfg.precision)
    set_precision(precision)  # before any model is built
    device = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
    print(precision_line(cluster.current_host, cfg.precision, precision, device), flush=True)
    tf.keras.utils.set_random_seed(cfg.seed)
    # TensorFlow sizes its pools by the machine's cores, not this process's CPU set
    tf.config.threading.set_intra_op_parallelism_threads(available_cpus())
    tf.config.threading.set_inter_op_parallelism_threads(available_cpus())
    classes = read_classes(cluster.channel("manifest"))
    source: ServiceSource | InProcessSource | None = None
    try:
        strategy = device_strategy()
        gpus = len(tf.config.list_logical_devices("GPU"))
        with strategy.scope():
            model = workload.build_keras_model(len(classes))
            optimizer = step_optimizer(workload, cfg.learning_rate)
        if cluster.heterogeneous:
            spare = spare_workers(cfg, cluster, workload, model, strategy)
            print(
                f"[trainer] {cluster.current_host}: a tf.data.service worker on {spare.workers} of {spare.cpus} vCPU(s), "
                f"{spare.kept} kept for the training loop ({spare.why})",
                flush=True,
            )
            source = ServiceSource(cfg, cluster, workload, spare)
        else:
            source = InProcessSource(cfg, cluster, workload)
        checkpoints = Checkpoints(cluster.checkpoint_dir)
        stats, accounting, corrupt = train_epochs(cfg, workload, model, optimizer, source, strategy, checkpoints)
        validation = _validation_files(cluster)
        accuracy = _validate(cfg, cluster, workload, model, validation)
        costs = _isolated_costs(cfg, cluster, workload, model, strategy, validation)
        missing = sum(a["missing"] for a in accounting)
        summary = stats.summary()  # one trainer host: its totals are the job's
        summary.update(global_samples=summary["samples"], global_seen=summary["seen"])
        metrics = training_metrics(
            cfg=cfg,
            cluster=cluster,
            framework="tensorflow",
            summary=summary,
            accuracy=accuracy,
            corrupt=corrupt,
            corrupt_count=missing,
            classes=classes,
            epoch_accounting=accounting,
            isolated_costs=costs,
            model_parameters=int(model.count_params()),  # the planner's all-reduce model
            sample_ledger={"epochs": [], "resumes": checkpoints.resumes, "partial_epoch": None},  # the epochs: accounting
            gpus=gpu_use(gpus, gpus, "tensorflow"),  # MirroredStrategy: every GPU
            precision=precision_document(cfg.precision, precision),
            **source.measurements(summary["seen"], stats.bytes_per_sample),
        )
        files = write_outputs(cluster, metrics, lambda folder: _save_model(model, workload, folder))
        source.close("completed", files=files)  # every data host keeps a copy of the results
    except BaseException as exc:
        if source is not None:
            source.close("failed", failure_reason(cluster.current_host, exc))
        raise


def _save_model(model: keras.Model, workload: Workload, folder: Path) -> None:
    """The Keras model (what a resumed or later job loads) and the SavedModel TF Serving serves (its ``1/``: a folder,
    so it stays in this host's model folder, which SageMaker packs with the others')."""
    from steps.train.frameworks.tensorflow.serving import KERAS_FILE, export_serving_model

    model.save(folder / KERAS_FILE)
    export_serving_model(model, workload, folder)


def train_epochs(
    cfg: TrainConfig,
    workload: Workload,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    source: InProcessSource | ServiceSource,
    strategy: tf.distribute.Strategy,
    checkpoints: Checkpoints,
) -> tuple[StepStats, list[dict], list]:
    """Every epoch from the last checkpoint's (`steps.train.frameworks.tensorflow.checkpoint`: saved at each epoch end; a SIGTERM ends
    the job at the next step, and the restarted job redoes that epoch)."""
    train_step = make_train_step(workload, model, optimizer, strategy, jit_compile=cfg.compile == "on")

    def dataset(epoch: int):
        return distribute(strategy, source.dataset(epoch))

    stats = StepStats(cfg.warmup_steps)
    budget = CorruptBudget(cfg.max_corrupt_share, source.samples_per_epoch)
    accounting: list[dict] = []
    corrupt: list[tuple[int, str]] = []
    start = 0
    state = checkpoints.load(model, optimizer)
    if state is not None:
        start, accounting, corrupt = state["epoch"], state["accounting"], [tuple(c) for c in state["corrupt"]]
        stats.restore(state["stats"])
        stats.bytes_per_sample = state["bytes_per_sample"]
        checkpoints.resumes = state["resumes"] + 1
        print(
            f"[checkpoint] resuming from {checkpoints.folder}: epoch {start}, step {stats.steps} (resume "
            f"{checkpoints.resumes}); an interrupted epoch is redone whole",
            flush=True,
        )
    if start >= cfg.epochs or (cfg.max_steps and stats.steps >= cfg.max_steps):
        return stats, accounting, corrupt
    TERMINATE.armed = True
    try:
        upcoming = iter(dataset(start))
        epoch, first_of_epoch = start, stats.steps
        for epoch in range(start, cfg.epochs):
            batches, upcoming, first_of_epoch = upcoming, None, stats.steps

            def open_next(received: int, epoch=epoch):
                # the next epoch's job starts on the workers in the last few batches of this one, so the pipelines
                # are full at the boundary; earlier, both epochs would share the workers' CPUs
                nonlocal upcoming
                tail = cfg.prefetch_batches * cfg.batch_size
                if epoch + 1 < cfg.epochs and upcoming is None and received >= source.samples_per_epoch - tail:
                    upcoming = iter(dataset(epoch + 1))

            ids, stopped = _epoch(cfg, source, batches, open_next, train_step, stats, epoch, strategy, checkpoints)
            if stopped:
                break
            accounting.append(account_epoch(epoch, ids, source.samples_per_epoch))
            if accounting[-1]["missing"] and not corrupt:
                corrupt = _name_missing(source, ids)
            budget.check_epoch(epoch, accounting[-1]["missing"], corrupt)
            _save(checkpoints, model, optimizer, epoch + 1, stats, accounting, corrupt)
            if TERMINATE.requested:
                raise _interrupted(checkpoints, epoch + 1, 0)
    except Interrupted:
        raise
    except BaseException as exc:
        if TERMINATE.requested:  # the data hosts got SIGTERM too, and one said so first: still an interruption
            raise _interrupted(checkpoints, epoch, stats.steps - first_of_epoch) from exc
        raise
    finally:
        TERMINATE.armed = False
    return stats, accounting, corrupt


def _save(checkpoints: Checkpoints, model, optimizer, epoch: int, stats: StepStats, accounting, corrupt) -> None:
    started = time.perf_counter()
    path = checkpoints.save(
        model,
        optimizer,
        {
            "epoch": epoch,
            "steps": stats.steps,
            "stats": stats.state(),
            "bytes_per_sample": stats.bytes_per_sample,
            "accounting": accounting,
            "corrupt": [list(c) for c in corrupt],
            "resumes": checkpoints.resumes,
        },
    )
    if path is not None:
        print(
            f"[checkpoint] saved (end of epoch): epoch {epoch}, step {stats.steps}, in {time.perf_counter() - started:.2f} s "
            f"-> {path}",
            flush=True,
        )


def _interrupted(checkpoints: Checkpoints, epoch: int, steps_lost: int) -> Interrupted:
    where = f"checkpoint at epoch {checkpoints.saved_epoch}" if checkpoints.saved_epoch >= 0 else "no checkpoint yet"
    redo = f"; the {steps_lost} step(s) of epoch {epoch} done so far are redone" if steps_lost else ""
    return Interrupted(
        f"SIGTERM (a stop or a spot interruption) during training: {where} in {checkpoints.folder}{redo}; "
        "a job restarted on the same checkpoint location resumes there"
    )


def _epoch(
    cfg, source, batches, open_next, train_step, stats: StepStats, epoch: int, strategy, checkpoints: Checkpoints
) -> tuple[list, bool]:
    ids: list[np.ndarray] = []
    received = 0
    first_step = stats.steps
    last = time.perf_counter()
    while True:
        if TERMINATE.requested:
            raise _interrupted(checkpoints, epoch, stats.steps - first_step)
        source.check()
        try:
            batch = next(batches)
        except StopIteration:
            break
        batch_ids = np.concatenate([t.numpy() for t in strategy.experimental_local_results(batch["ids"])])
        ready = time.perf_counter()
        ids.append(batch_ids)
        received += len(batch_ids)
        if not stats.bytes_per_sample and len(batch_ids):
            stats.bytes_per_sample = _tensor_bytes(batch, strategy) / len(batch_ids)
        loss = float(train_step(batch))  # float() waits for the device: compute time is real
        done = time.perf_counter()
        stats.record(wait=ready - last, compute=done - ready, samples=len(batch_ids))
        if stats.steps % cfg.log_every == 0:
            print(stats.last_step_line(epoch=epoch, loss=loss), flush=True)
        if cfg.max_steps and stats.steps >= cfg.max_steps:
            return ids, True
        open_next(received)
        last = time.perf_counter()
    source.check()  # an epoch cut short by a lost data host is that host's failure, not corrupt data
    return ids, False


def _tensor_bytes(batch: dict, strategy) -> int:
    """The bytes of a batch's tensors (pixels, labels, ids): what tf.data.service carries per element, framing aside."""
    return sum(
        t.shape.num_elements() * t.dtype.size for value in batch.values() for t in strategy.experimental_local_results(value)
    )


def account_epoch(epoch: int, ids: list[np.ndarray], expected: int) -> dict:
    """Every sample of the epoch exactly once: duplicates are an error, missing samples failed to decode."""
    seen = np.concatenate(ids) if ids else np.empty(0, np.int64)
    unique = int(np.unique(seen).size)
    if unique != seen.size or unique > expected:
        raise DuplicateSamples(
            f"epoch {epoch}: {seen.size} samples arrived, {unique} distinct, {expected} expected: the data hosts' shards overlap. "
            "Give each data host its own shards (ShardedByS3Key) or let it take its share of a FullyReplicated channel"
        )
    missing = expected - unique
    if missing:
        print(
            f"[trainer] epoch {epoch}: {missing} of {expected} samples failed to decode and were skipped "
            "(the data hosts' logs name the errors)",
            flush=True,
        )
    return {"epoch": epoch, "expected": expected, "received": int(seen.size), "distinct": unique, "missing": missing}


def _name_missing(source, ids: list[np.ndarray]) -> list[tuple[int, str]]:
    """Which samples failed to decode, asked once and only when some did: answering reads every shard."""
    received = np.concatenate(ids) if ids else np.empty(0, np.int64)
    missing = np.setdiff1d(source.sample_ids(), received)
    return [(int(i), CORRUPT_REASON) for i in missing[:20]]


def _validation_files(cluster: Cluster) -> list[str]:
    channel = cluster.channel("validation", required=False)
    return [str(f) for f in list_tfrecord_shards(channel)] if channel else []


def _validate(cfg: TrainConfig, cluster: Cluster, workload: Workload, model, files: list[str]) -> float | None:
    if not files:
        print(f"[trainer] {cluster.current_host}: no validation shards; accuracy not measured", flush=True)
        return None
    correct = total = 0
    for batch in validation_dataset(files, workload, batch_size=cfg.batch_size):
        logits = model(workload.tf_normalize(batch["pixels"]), training=False)
        correct += int(tf.reduce_sum(tf.cast(tf.argmax(logits, axis=1) == batch["labels"], tf.int32)))
        total += int(batch["labels"].shape[0])
    accuracy = correct / total if total else None
    print(metric_line(accuracy=accuracy or 0.0, validation_samples=total), flush=True)
    return accuracy


def _isolated_costs(cfg: TrainConfig, cluster: Cluster, workload: Workload, model, strategy, files: list[str]) -> dict | None:
    """Decode alone and the step alone on this host (`steps.train.frameworks.tensorflow.costs`), on the validation shards."""
    from steps.train.core.cost_document import cost_line
    from steps.train.frameworks.tensorflow.costs import isolated_costs

    costs = isolated_costs(cfg, workload, model, strategy, files)
    if costs:
        print(cost_line(cluster.current_host, costs), flush=True)
    return costs

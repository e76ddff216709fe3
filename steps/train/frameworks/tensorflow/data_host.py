"""tf.data.service on a data host: a worker serving this host's shards, and the control link to the trainer.

The worker serves from a directory that holds only this host's shards (its
ShardedByS3Key objects, or its share of a FullyReplicated channel), so with
``ShardingPolicy.OFF`` every sample is served exactly once per epoch
(`steps.train.frameworks.tensorflow.dataset`). The dispatcher lives on the trainer
(`steps.train.frameworks.tensorflow.data`).

tf.data.service itself has no authentication and no notion of "training is
over", so the data host also keeps the project's authenticated control link
to the trainer (`steps.train.dataplane.control`): the trainer sends the dispatcher's
address over it (START), both sides heartbeat, and the trainer ends the job
with STOP carrying its results. A data host exits non-zero when the trainer
goes silent or disconnects without STOP.

Not run directly: `steps/train/launcher.py` calls `run_tf_data_host` on every
host of the data instance group when the ``framework`` hyperparameter is
``tensorflow`` (in SageMaker, and locally under ``hetero run``).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

from steps.train.core.cluster import Cluster, available_cpus, resolve
from steps.train.core.config import TrainConfig
from steps.train.core.split import NONE as NO_SPLIT
from steps.train.core.split import Split
from steps.train.dataplane.auth import job_secret
from steps.train.dataplane.control import Trainer, accept_trainers, tell_trainer, trainer_frame, trainer_lost
from steps.train.dataplane.link import Heartbeat
from steps.train.dataplane.meter import ProcessMeter
from steps.train.dataplane.wire import Kind, WireError
from steps.train.frameworks.tensorflow.cluster import check_single_trainer, local_shards
from steps.train.frameworks.tensorflow.servers import end_server


def run_tf_data_host(cfg: TrainConfig, cluster: Cluster, workload=None) -> None:
    """``workload`` is not used here: the dataset graph, the workload's decode in it, comes from the trainer."""
    import tensorflow as tf

    from steps.train.frameworks.tensorflow.dataset import write_take

    check_single_trainer(cluster)
    files, samples = local_shards(cluster, cluster.data_hosts, cfg.shard_wait_s)
    me, address = cluster.current_host, resolve(cluster.current_host)
    serving = Path(tempfile.mkdtemp(prefix="hetero-tf-worker-"))
    for path in files:
        (serving / path.name).symlink_to(path.resolve())
    print(f"[data] {me}: {len(files)} TFRecord shards, {samples} samples; tf.data.service worker for trainer "
          f"{cluster.trainer_hosts[0]}", flush=True)
    worker, trainer_stopped_it = None, False
    home = os.getcwd()
    try:
        with socket.create_server((address, cfg.data_port), backlog=16) as server:
            (trainer,) = accept_trainers(server, cfg, me, cluster.trainer_hosts, job_secret(),
                                         {"samples_per_epoch": samples, "epochs": cfg.epochs, "framework": "tensorflow",
                                          "decode_workers": available_cpus()})
        beat = Heartbeat([trainer.link], cfg.heartbeat_s)
        try:
            dispatcher, split = _await_start(trainer)
            write_take(serving, split.data())  # the samples the trainer host's own worker does not decode (hybrid decode)
            if split.hybrid:
                print(f"[data] {me}: the trainer decodes {sum(split.trainers)} of every {split.period} samples itself", flush=True)
            os.chdir(serving)  # where the dataset's relative SERVE_PATTERN and TAKE_FILE resolve
            worker = tf.data.experimental.service.WorkerServer(tf.data.experimental.service.WorkerConfig(
                dispatcher_address=dispatcher, worker_address=f"{address}:%port%", port=0, protocol="grpc"))
            meter = ProcessMeter()
            trainer.link.send(Kind.START, {"worker": address, "samples_per_epoch": samples})
            print(f"[data] {me}: worker registered with dispatcher {dispatcher}", flush=True)
            _serve_until_stop(trainer, cluster.model_dir, [str(f) for f in files], meter)
            trainer_stopped_it = True
        except Exception as exc:
            tell_trainer(trainer.link, f"data host {me}", exc)
            raise
        finally:
            beat.stop()
            trainer.link.close()
    finally:
        if worker is not None:
            end_server(worker, clean=trainer_stopped_it)
        os.chdir(home)
        shutil.rmtree(serving, ignore_errors=True)
    print(f"[data] {me}: trainer stopped the job; exiting", flush=True)


def _await_start(trainer: Trainer) -> tuple[str, Split]:
    """The dispatcher's address and the decode split, from the trainer's START."""
    while True:
        frame = _read(trainer)
        if frame is None:
            continue
        kind, meta, _ = frame
        if kind is Kind.START:
            raw = meta.get("split")
            return str(meta["dispatcher"]), NO_SPLIT if raw is None else Split.from_meta(raw, trainers=1, sender=trainer.host)
        _control(trainer, kind, meta, {}, None, [])


def _serve_until_stop(trainer: Trainer, results_dir: Path, files: list[str], meter: ProcessMeter) -> None:
    while not trainer.stopped:
        frame = _read(trainer)
        if frame is not None:
            _control(trainer, *frame, results_dir, files, meter)


def _read(trainer: Trainer):
    try:
        return trainer.link.read()
    except (WireError, OSError) as exc:
        raise trainer_lost(trainer.host, exc) from None


def _control(trainer: Trainer, kind: Kind, meta: dict, arrays: dict, results_dir: Path | None, files: list[str],
             meter: ProcessMeter | None = None) -> None:
    if kind is Kind.REPORT:  # training is over: the trainer records what this host measured of itself
        trainer.link.send(Kind.REPORT, {"host": meter.report() if meter else {}})
        return
    if kind is Kind.IDS:  # some samples went missing: the trainer asks which ones this host serves
        from steps.train.frameworks.tensorflow.dataset import sample_ids

        trainer.link.send(Kind.IDS, {}, [("ids", sample_ids(files))])
        return
    error = trainer_frame(trainer, kind, meta, arrays, results_dir)
    if error is not None:
        raise error

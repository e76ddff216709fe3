"""tf.data.service on a data host: a worker serving this host's shards, and the control link to the trainer.

The worker serves from a directory that holds only this host's shards (its
ShardedByS3Key objects, or its share of a FullyReplicated channel), so with
``ShardingPolicy.OFF`` every sample is served exactly once per epoch
(`steps.train.frameworks.tensorflow.dataset`). The dispatcher lives on the trainer
(`steps.train.frameworks.tensorflow.data`).

tf.data.service itself has no authentication and no notion of "training is
over", so the data host also keeps the project's authenticated control link
to the trainer (`steps.train.dataplane.session`): the trainer sends the dispatcher's
address over it (START), both sides heartbeat, and the trainer ends the job
with STOP carrying its results. A data host exits non-zero when the trainer
goes silent or disconnects without STOP.

Not run directly: `steps/train/launcher.py` calls `run_data_service` on every
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
from steps.train.dataplane import messages
from steps.train.dataplane.admission import Trainer
from steps.train.dataplane.auth import job_secret
from steps.train.dataplane.meter import ProcessMeter
from steps.train.dataplane.session import HostSession
from steps.train.dataplane.settings import DataPlaneSettings
from steps.train.frameworks.tensorflow.cluster import check_single_trainer, local_shards
from steps.train.frameworks.tensorflow.servers import end_server


def run_data_service(cfg: TrainConfig, cluster: Cluster, workload=None) -> None:
    """``workload`` is not used here: the dataset graph, the workload's decode in it, comes from the trainer."""
    import tensorflow as tf

    from steps.train.frameworks.tensorflow.dataset import write_take

    check_single_trainer(cluster)
    files, samples = local_shards(cluster, cluster.data_hosts, cfg.shard_wait_s)
    me, address = cluster.current_host, resolve(cluster.current_host)
    serving = Path(tempfile.mkdtemp(prefix="hetero-tf-worker-"))
    for path in files:
        (serving / path.name).symlink_to(path.resolve())
    print(
        f"[data] {me}: {len(files)} TFRecord shards, {samples} samples; tf.data.service worker for trainer "
        f"{cluster.trainer_hosts[0]}",
        flush=True,
    )
    worker, trainer_stopped_it = None, False
    home = os.getcwd()
    control = _Control([str(f) for f in files])
    try:
        with socket.create_server((address, cfg.data_port), backlog=16) as server:
            session = HostSession.admit(
                DataPlaneSettings.of(cfg),
                server,
                me=me,
                trainer_hosts=cluster.trainer_hosts,
                secret=job_secret(),
                info={
                    "samples_per_epoch": samples,
                    "epochs": cfg.epochs,
                    "framework": "tensorflow",
                    "decode_workers": available_cpus(),
                },
                who=f"data host {me}",
                results_dir=cluster.model_dir,
                on_message=control,
            )
        with session:
            session.wait_until(lambda: control.start is not None)
            (trainer,) = session.trainers
            assert control.start is not None  # waited for above
            dispatcher, split = _started(trainer, control.start)
            write_take(serving, split.data())  # the samples the trainer host's own worker does not decode (hybrid decode)
            if split.hybrid:
                print(
                    f"[data] {me}: the trainer decodes {sum(split.trainers)} of every {split.period} samples itself", flush=True
                )
            os.chdir(serving)  # where the dataset's relative SERVE_PATTERN and TAKE_FILE resolve
            worker = tf.data.experimental.service.WorkerServer(
                tf.data.experimental.service.WorkerConfig(
                    dispatcher_address=dispatcher, worker_address=f"{address}:%port%", port=0, protocol="grpc"
                )
            )
            control.meter = ProcessMeter()
            trainer.link.send(messages.WorkerUp(worker=address, samples_per_epoch=samples))
            print(f"[data] {me}: worker registered with dispatcher {dispatcher}", flush=True)
            session.wait_until()
            trainer_stopped_it = True
    finally:
        if worker is not None:
            end_server(worker, clean=trainer_stopped_it)
        os.chdir(home)
        shutil.rmtree(serving, ignore_errors=True)
    print(f"[data] {me}: trainer stopped the job; exiting", flush=True)


def _started(trainer: Trainer, start: messages.Start) -> tuple[str, Split]:
    """The dispatcher's address and the decode split, from the trainer's START."""
    raw = start.split
    return start.require("dispatcher"), NO_SPLIT if raw is None else Split.from_meta(raw, trainers=1, sender=trainer.host)


class _Control:
    """What a tf.data.service data host reads besides STOP and ERROR: START (kept for the main thread), and the
    trainer's questions, answered from here: IDS (some samples went missing: which does this host serve?) and REPORT
    (training is over: what did this host measure of itself?)."""

    def __init__(self, files: list[str]) -> None:
        self.files = files
        self.start: messages.Start | None = None
        self.meter: ProcessMeter | None = None

    def __call__(self, trainer: Trainer, message) -> None:
        if isinstance(message, messages.Start):
            self.start = message
        elif isinstance(message, messages.ReportQuery):
            trainer.link.send(messages.Report(host=self.meter.report() if self.meter else {}))
        elif isinstance(message, messages.IdsQuery):
            from steps.train.frameworks.tensorflow.dataset import sample_ids

            trainer.link.send(messages.Ids(ids=sample_ids(self.files)))

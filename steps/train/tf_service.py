"""tf.data.service on the heterogeneous cluster: dispatcher on the trainer, a worker per data host.

Roles (from the instance group, addresses from the Environment):

* the **dispatcher** runs inside the first (only) trainer host's process, so
  losing a data host never loses the job's coordinator;
* a **worker** runs on every data host, serving from a directory that holds
  only that host's shards (its ShardedByS3Key objects, or its share of a
  FullyReplicated channel), so with ``ShardingPolicy.OFF`` every sample is
  served exactly once per epoch (`steps.train.tf_data`).

tf.data.service itself has no authentication and no notion of "training is
over", so every data host also keeps the project's authenticated control link
to the trainer (`steps.train.control`): the trainer sends the dispatcher's
address over it (START), both sides heartbeat, and the trainer ends the job
with STOP carrying its results. A data host exits non-zero when the trainer
goes silent or disconnects without STOP; the trainer fails, naming the host,
when a data host does.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from steps.common.errors import EXIT_INTERNAL_ERROR, HeteroError, UserError, describe, write_failure
from steps.shard.tfrecord import list_tfrecord_shards
from steps.train.auth import client_handshake, job_secret
from steps.train.cluster import Cluster, resolve
from steps.train.config import MAX_TRAINER_HOSTS, TrainConfig
from steps.train.control import (DataHostLost, Trainer, TrainerGone, accept_trainers, dial, send_stop, trainer_frame,
                                 trainer_lost)
from steps.train.link import Heartbeat, Link, Stopped
from steps.train.manifest import read_manifest
from steps.train.wire import Kind, WireError

COMPRESSION = {"none": None, "auto": "AUTO"}


def check_single_trainer(cluster: Cluster) -> None:
    """The job-level twin of `pipeline.graph.Graph.check_parameters`, for jobs started outside the pipeline."""
    if len(cluster.trainer_hosts) > MAX_TRAINER_HOSTS["tensorflow"]:
        raise UserError(
            f"the TensorFlow path trains on one host ({len(cluster.trainer_hosts)} given: {', '.join(cluster.trainer_hosts)}); "
            "it uses every GPU of that host (MirroredStrategy). Set DnnInstanceCount=1 (--dnn-hosts 1), or use --framework pytorch "
            "for several trainer hosts",
            headline="unsupported cluster shape",
        )


# -- data host --------------------------------------------------------------------------------

def run_tf_data_host(cfg: TrainConfig, cluster: Cluster) -> None:
    import tensorflow as tf

    check_single_trainer(cluster)
    files, samples = local_shards(cluster, cluster.data_hosts)
    me, address = cluster.current_host, resolve(cluster.current_host)
    serving = Path(tempfile.mkdtemp(prefix="hetero-tf-worker-"))
    for path in files:
        (serving / path.name).symlink_to(path.resolve())
    print(f"[data] {me}: {len(files)} TFRecord shards, {samples} samples; tf.data.service worker for trainer "
          f"{cluster.trainer_hosts[0]}", flush=True)
    worker = None
    home = os.getcwd()
    try:
        with socket.create_server((address, cfg.data_port), backlog=16) as server:
            (trainer,) = accept_trainers(server, cfg, me, cluster.trainer_hosts, job_secret(),
                                         {"samples_per_epoch": samples, "epochs": cfg.epochs, "framework": "tensorflow"})
        beat = Heartbeat([trainer.link], cfg.heartbeat_s)
        try:
            dispatcher = _await_start(trainer)
            os.chdir(serving)  # where the dataset's relative SERVE_PATTERN resolves
            worker = tf.data.experimental.service.WorkerServer(tf.data.experimental.service.WorkerConfig(
                dispatcher_address=dispatcher, worker_address=f"{address}:%port%", port=0, protocol="grpc"))
            trainer.link.send(Kind.START, {"worker": address, "samples_per_epoch": samples})
            print(f"[data] {me}: worker registered with dispatcher {dispatcher}", flush=True)
            _serve_until_stop(trainer, cluster.model_dir, [str(f) for f in files])
        except Exception as exc:
            if not isinstance(exc, TrainerGone):  # the trainer learns why, not just that the link closed
                try:
                    trainer.link.send(Kind.ERROR, {"reason": f"data host {me}: {describe(exc)}"[:1000]})
                except (WireError, OSError, Stopped):
                    pass
            raise
        finally:
            beat.stop()
            trainer.link.close()
    finally:
        if worker is not None:
            worker.stop()
        os.chdir(home)
        shutil.rmtree(serving, ignore_errors=True)
    print(f"[data] {me}: trainer stopped the job; exiting", flush=True)


def local_shards(cluster: Cluster, hosts: tuple[str, ...]) -> tuple[list[Path], int]:
    """This host's TFRecord shards and their sample count (from the shard step's manifest);
    ``hosts`` share the train channel."""
    channel = cluster.channel("train")
    shards = list_tfrecord_shards(channel)
    if not shards:
        raise UserError(f"host {cluster.current_host} found no *.tfrecord shards in {channel}; the TensorFlow path "
                        "reads the shard step's TFRecord output (shard with --format tfrecord)", headline="no shards")
    index, count = cluster.part("train", hosts)
    mine = shards[index::count]  # FullyReplicated: whole files per host (the shard step makes a multiple of the hosts)
    counts = {Path(s["name"]).name: int(s["samples"]) for s in read_manifest(cluster.channel("manifest"))["splits"]["train"]["shards"]}
    unknown = [p.name for p in mine if p.name not in counts]
    if unknown:
        raise UserError(f"shards {', '.join(unknown[:5])} in {channel} are not in the manifest; the train and manifest channels "
                        "must come from the same shard step run", headline="manifest mismatch")
    return mine, sum(counts[p.name] for p in mine)


def _await_start(trainer: Trainer) -> str:
    while True:
        frame = _read(trainer)
        if frame is None:
            continue
        kind, meta, _ = frame
        if kind is Kind.START:
            return str(meta["dispatcher"])
        _control(trainer, kind, meta, {}, None, [])


def _serve_until_stop(trainer: Trainer, results_dir: Path, files: list[str]) -> None:
    while not trainer.stopped:
        frame = _read(trainer)
        if frame is not None:
            _control(trainer, *frame, results_dir, files)


def _read(trainer: Trainer):
    try:
        return trainer.link.read()
    except (WireError, OSError) as exc:
        raise trainer_lost(trainer.host, exc) from None


def _control(trainer: Trainer, kind: Kind, meta: dict, arrays: dict, results_dir: Path | None, files: list[str]) -> None:
    if kind is Kind.IDS:  # some samples went missing: the trainer asks which ones this host serves
        from steps.train.tf_data import sample_ids

        trainer.link.send(Kind.IDS, {}, [("ids", sample_ids(files))])
        return
    error = trainer_frame(trainer, kind, meta, arrays, results_dir)
    if error is not None:
        raise error


# -- trainer host -----------------------------------------------------------------------------

class TfDataService:
    """The trainer's side: dispatcher, control links to every data host, and the watch over them."""

    def __init__(self, cfg: TrainConfig, cluster: Cluster):
        self.cfg = cfg
        self.cluster = cluster
        self.secret = job_secret()
        self.links: dict[str, Link] = {}
        self.samples_per_host: dict[str, int] = {}
        self.failure: HeteroError | None = None
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.dispatcher = None
        self.beat: Heartbeat | None = None
        self._ids: dict[str, np.ndarray] = {}
        self._ids_arrived = threading.Condition()

    @property
    def samples_per_epoch(self) -> int:
        return sum(self.samples_per_host.values())

    def start(self) -> "TfDataService":
        import tensorflow as tf

        service = tf.data.experimental.service
        self.dispatcher = service.DispatchServer(service.DispatcherConfig(port=0, protocol="grpc"))
        address = f"{resolve(self.cluster.current_host)}:{self.dispatcher.target.rsplit(':', 1)[1]}"
        deadline = time.monotonic() + self.cfg.connect_timeout_s
        for host in self.cluster.data_hosts:
            sock = dial(host, resolve(host), self.cfg.data_port, deadline, self.cfg.connect_timeout_s)
            sock.settimeout(max(10.0, self.cfg.heartbeat_s))
            client_handshake(sock, self.secret, host=self.cluster.current_host)
            self.links[host] = Link(sock, f"data host {host}", heartbeat_s=self.cfg.heartbeat_s,
                                    silence_timeout_s=self.cfg.silence_timeout_s)
            self.links[host].send(Kind.START, {"dispatcher": address})
        self.beat = Heartbeat(self.links.values(), self.cfg.heartbeat_s)
        for host, link in self.links.items():
            self.samples_per_host[host] = self._await_worker(host, link)
        for host, link in self.links.items():
            thread = threading.Thread(target=self._watch, args=(host, link), name=f"watch-{host}", daemon=True)
            thread.start()
            self._threads.append(thread)
        print(f"[trainer] dispatcher {address}: {len(self.links)} worker(s), {self.samples_per_epoch} samples per epoch", flush=True)
        return self

    def _await_worker(self, host: str, link: Link) -> int:
        while True:
            try:
                frame = link.read()
            except (WireError, OSError) as exc:
                raise DataHostLost(f"data host {host} failed before its tf.data.service worker came up: {exc}") from None
            if frame is None:
                continue
            kind, meta, _ = frame
            if kind is Kind.START:
                return int(meta.get("samples_per_epoch", 0))
            if kind is Kind.ERROR:
                raise DataHostLost(f"data host {host} failed: {meta.get('reason', 'no reason given')}")

    def _watch(self, host: str, link: Link) -> None:
        while not self._stopping.is_set():
            try:
                frame = link.read()
            except Stopped:
                return
            except (WireError, OSError) as exc:
                if not self._stopping.is_set():
                    self._fail(DataHostLost(f"data host {host} was lost: {exc}"))
                return  # after STOP, the data host hanging up is the expected end
            if frame is not None and frame[0] is Kind.ERROR:
                self._fail(DataHostLost(f"data host {host} failed: {frame[1].get('reason', 'no reason given')}"))
                return
            if frame is not None and frame[0] is Kind.IDS:
                with self._ids_arrived:
                    self._ids[host] = frame[2].get("ids", np.empty(0, np.int64))
                    self._ids_arrived.notify_all()

    def _fail(self, error: HeteroError) -> None:
        if self.failure is None:
            self.failure = error
            print(f"[trainer] {error.one_line()}", flush=True)
            threading.Thread(target=self._watchdog, name="watchdog", daemon=True).start()
            with self._ids_arrived:  # a sample_ids() call waiting on that host ends now
                self._ids_arrived.notify_all()

    def _watchdog(self) -> None:
        """The training loop checks for a lost host between batches; if TensorFlow keeps it blocked
        waiting for that host's data, end the process here, the same way it would have ended."""
        if self._stopping.wait(self.cfg.silence_timeout_s):
            return
        reason = describe(self.failure)
        print(f"ERROR {reason} (the input pipeline stayed blocked for {self.cfg.silence_timeout_s:g} s)", flush=True)
        write_failure(self.cluster.output_dir, reason)
        self.close("failed", reason)
        os._exit(EXIT_INTERNAL_ERROR)

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def sample_ids(self) -> np.ndarray:
        """Every sample id the workers serve (each data host reads its shards whole to answer)."""
        with self._ids_arrived:
            self._ids.clear()
        for link in self.links.values():
            link.send(Kind.IDS)
        with self._ids_arrived:
            self._ids_arrived.wait_for(lambda: len(self._ids) == len(self.links) or self.failure is not None,
                                       timeout=self.cfg.connect_timeout_s)
            self.check()
            return np.concatenate(list(self._ids.values())) if self._ids else np.empty(0, np.int64)

    def distribute(self, dataset):
        import tensorflow as tf

        return dataset.apply(tf.data.experimental.service.distribute(
            processing_mode=tf.data.experimental.service.ShardingPolicy.OFF, service=self.dispatcher.target,
            compression=COMPRESSION[self.cfg.tf_compression]))

    def close(self, status: str = "completed", reason: str = "", files: dict[str, bytes] | None = None) -> None:
        """STOP (with ``files``) to every data host, wait for each to hang up, stop the dispatcher. Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self.beat is not None:
            self.beat.stop()
        send_stop(list(self.links.values()), status, reason, files)
        deadline = time.monotonic() + self.cfg.silence_timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for link in self.links.values():
            link.close()
        if self.dispatcher is not None:
            self.dispatcher.stop()

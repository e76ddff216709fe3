"""tf.data.service on the trainer: the dispatcher, the control links to every data host, and the watch over them.

The dispatcher runs inside the first (only) trainer host's process, so losing
a data host never loses the job's coordinator; a worker runs on every data
host (`steps.train.frameworks.tensorflow.data_host`). Over each host's authenticated control
link the trainer sends the dispatcher's address (START), learns how many
samples the host serves, asks which sample ids it serves when some went
missing (IDS), and ends the job with STOP carrying its results. The trainer
fails, naming the host, when a data host does; if TensorFlow keeps the
training loop blocked on that host's data, a watchdog ends the process the
same way.

Not run directly: `steps.train.frameworks.tensorflow.trainer` starts a `DataService` when the
job is heterogeneous (entry point: `steps/train/launcher.py`).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from steps.common.errors import EXIT_INTERNAL_ERROR, EXIT_TERMINATED, HeteroError, describe, write_failure
from steps.train.core.cluster import Cluster, resolve
from steps.train.core.config import TrainConfig
from steps.train.core.errors import Interrupted
from steps.train.core.split import NONE as NO_SPLIT
from steps.train.core.split import Split
from steps.train.core.terminate import TERMINATE
from steps.train.dataplane import messages
from steps.train.dataplane.auth import job_secret
from steps.train.dataplane.errors import DataHostLost, LocalDecodeFailed, WireError
from steps.train.dataplane.link import Link
from steps.train.dataplane.meter import arrived, data_host_metrics
from steps.train.dataplane.settings import DataPlaneSettings
from steps.train.dataplane.watch import Peer, PeerWatch
from steps.train.frameworks.tensorflow.servers import end_server

if TYPE_CHECKING:  # imported where a tf.data.service client starts
    import tensorflow as tf

COMPRESSION = {"none": None, "auto": "AUTO"}
WATCHDOG_GRACE_S = 5.0  # how long a training loop blocked in TensorFlow gets to notice a lost data host itself


class DataService:
    """The trainer's side: dispatcher, control links to every data host, and the watch over them."""

    def __init__(self, cfg: TrainConfig, cluster: Cluster) -> None:
        self.cfg = cfg
        self.cluster = cluster
        self.watch = PeerWatch(
            DataPlaneSettings.of(cfg),
            [Peer(h, resolve(h)) for h in cluster.data_hosts],
            me=cluster.current_host,
            secret=job_secret(),
            on_message=self._answer,
            on_failure=self._failed,
        )
        self._stopping = self.watch.stopping
        self.samples_per_host: dict[str, int] = {}
        self.dispatcher: Any = None  # a tf.data.service DispatchServer, once serving
        self.address = ""
        self._ids: dict[str, np.ndarray] = {}
        self._reports: dict[str, dict] = {}
        self._answered = threading.Condition()  # IDS and REPORT answers
        self.split: Split = NO_SPLIT
        self.local: Any = None  # this host's own tf.data.service worker (`add_local`, hybrid decode)
        self._local: dict = {}

    @property
    def failure(self) -> HeteroError | None:
        return self.watch.failure

    @property
    def links(self) -> dict[str, Link]:
        return {p.name: p.link for p in self.watch.peers if p.link is not None}

    @property
    def samples_per_epoch(self) -> int:
        return sum(self.samples_per_host.values())

    def start(self, trainer_workers: int = 0) -> DataService:
        """The dispatcher, and every data host told where it is and which samples it serves: all but the share
        ``trainer_workers`` decode vCPUs of this host take beside the data hosts' (their HELLOs say how many they have)."""
        import tensorflow as tf

        service = tf.data.experimental.service
        self.dispatcher = service.DispatchServer(service.DispatcherConfig(port=0, protocol="grpc"))
        # its target says localhost; the dispatcher listens only on this host's cluster address (steps.train.dataplane.bind_guard)
        address = self.address = f"{resolve(self.cluster.current_host)}:{self.dispatcher.target.rsplit(':', 1)[1]}"
        hellos = self.watch.connect()
        self.split = Split.weighted([trainer_workers], sum(max(hello.decode_workers, 1) for hello in hellos))
        self.watch.send_all(messages.Start(dispatcher=address, split=self.split.as_meta()))
        self.watch.heartbeat()
        for host, link in self.links.items():
            self.samples_per_host[host] = self._await_worker(host, link)
        self.watch.watch()
        print(
            f"[trainer] dispatcher {address}: {len(self.links)} worker(s), {self.samples_per_epoch} samples per epoch", flush=True
        )
        return self

    def add_local(self, worker, spare, samples_per_epoch: int) -> None:
        """Watch this host's own worker (`steps.train.frameworks.tensorflow.local_decode.LocalWorker`, serving ``samples_per_epoch`` of every
        epoch): its end before the job's fails the job like a lost data host."""
        self.local, self._local = worker, {"spare": spare, "samples_per_epoch": samples_per_epoch}
        self.watch.spawn(self._watch_local, name="watch-local-worker")

    def _watch_local(self) -> None:
        while not self._stopping.wait(self.cfg.heartbeat_s):
            failed = self.local.failed()
            if failed:
                if not self._stopping.is_set():
                    self._fail(LocalDecodeFailed(f"{failed} ({self.cluster.current_host})"))
                return

    def _await_worker(self, host: str, link: Link) -> int:
        while True:
            try:
                message = link.read()
            except (WireError, OSError) as exc:
                raise DataHostLost(f"data host {host} failed before its tf.data.service worker came up: {exc}") from None
            if isinstance(message, messages.WorkerUp):
                return message.samples_per_epoch
            if isinstance(message, messages.Error):
                raise DataHostLost(f"data host {host} failed: {message.reason}")

    def _answer(self, peer: Peer, message) -> None:
        """A data host's answer to `_ask` (read by the `PeerWatch`)."""
        if isinstance(message, messages.Ids):
            with self._answered:
                self._ids[peer.name] = message.ids
                self._answered.notify_all()
        elif isinstance(message, messages.Report):
            with self._answered:
                self._reports[peer.name] = message.host
                self._answered.notify_all()

    def _fail(self, error: HeteroError) -> None:
        self.watch.fail(error)

    def _failed(self, error: HeteroError) -> None:
        print(f"[trainer] {error.one_line()}", flush=True)
        threading.Thread(target=self._watchdog, args=(error,), name="watchdog", daemon=True).start()
        with self._answered:  # a sample_ids() call waiting on that host ends now
            self._answered.notify_all()

    def _watchdog(self, failure: HeteroError) -> None:
        """The training loop checks for a lost host between batches, so it notices within a step; if TensorFlow
        keeps it blocked waiting for that host's data, end the process here, the same way it would have ended.
        The loss was already silence_timeout_s in the making: waiting that long again doubled the time to exit."""
        grace = min(WATCHDOG_GRACE_S, self.cfg.silence_timeout_s)
        if self._stopping.wait(grace):
            return
        code, reason = EXIT_INTERNAL_ERROR, describe(failure)
        if TERMINATE.requested:  # the data hosts went because the job is being stopped: an interruption, not their fault
            code, reason = (
                EXIT_TERMINATED,
                Interrupted(
                    "SIGTERM (a stop or a spot interruption) while TensorFlow waited for data; a job restarted on the same "
                    "checkpoint location redoes the epoch it was in, from the last epoch-end checkpoint"
                ).one_line(),
            )
        print(f"ERROR {reason} (the input pipeline stayed blocked for {grace:g} s after that)", flush=True)
        write_failure(self.cluster.output_dir, reason)
        self.close("failed", reason)
        os._exit(code)

    def check(self) -> None:
        self.watch.check()

    def sample_ids(self) -> np.ndarray:
        """Every sample id the workers serve (each data host reads its shards whole to answer)."""
        ids = self._ask(messages.IdsQuery, self._ids)
        return np.concatenate(list(ids.values())) if ids else np.empty(0, np.int64)

    def _ask(self, kind: type[messages.Message], answers: dict) -> dict:
        """Send the question ``kind`` to every data host; wait until each answered (the watch threads fill ``answers``)."""
        with self._answered:
            answers.clear()
        self.watch.send_all(kind())
        with self._answered:
            self._answered.wait_for(
                lambda: len(answers) == len(self.links) or self.failure is not None, timeout=self.cfg.connect_timeout_s
            )
            self.check()
            return dict(answers)

    def measurements(self, samples: int, bytes_per_sample: float) -> dict:
        """What each data host measured of itself (`ProcessMeter`), with the ``samples`` this trainer received split
        by each host's share of an epoch (every worker serves its own shards once per epoch), for metrics.json."""
        reports = self._ask(messages.ReportQuery, self._reports)
        local_share = self._local["samples_per_epoch"] / max(self.samples_per_epoch, 1) if self._local else 0.0
        hosts = []
        for host, report in reports.items():
            share = round(samples * (1 - local_share) * self.samples_per_host.get(host, 0) / max(self.samples_per_epoch, 1))
            hosts.append(data_host_metrics(host, {**report, "samples": share, "bytes_sent": share * bytes_per_sample}))
        remote = samples - round(samples * local_share)
        local = (
            [
                {
                    "host": self.cluster.current_host,
                    **self._local["spare"].as_metrics(),
                    "split": self.split.as_meta(),
                    "samples": samples - remote,
                    "samples_per_epoch": self._local["samples_per_epoch"],
                    "share": local_share,
                }
            ]
            if self._local
            else []
        )
        return {**arrived(hosts, int(remote * bytes_per_sample), remote), "local_decode": local}

    def distribute(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        import tensorflow as tf

        return dataset.apply(
            tf.data.experimental.service.distribute(
                processing_mode=tf.data.experimental.service.ShardingPolicy.OFF,
                service=f"grpc://{self.address}",
                compression=COMPRESSION[self.cfg.tf_compression],
            )
        )

    def close(self, status: str = "completed", reason: str = "", files: dict[str, bytes] | None = None) -> None:
        """STOP (with ``files``) to every data host, wait for each to hang up, stop the dispatcher. Idempotent."""
        if not self.watch.close(status, reason, files):
            return
        if self.local is not None:
            self.local.stop()
        if self.dispatcher is not None:
            end_server(self.dispatcher, clean=status == "completed")

"""The trainer's side of the data plane: connect, merge, prefetch, account.

One receiver thread per connection (a data host asks for one or more
streams per flow) reads frames straight into reusable (pinned, on CUDA)
buffers and posts ready `Batch` objects to one bounded queue: the merge.
Bounded prefetch comes from that queue plus TCP backpressure. An epoch ends
when every connection of every data host has sent its END frame, never by
counting steps and whatever order the streams deliver in; the ENDs' sample
counts, summed per host, are checked against what arrived. A data host that dies or goes silent ends the epoch with a
`DataHostLost` that names it and the samples lost, instead of a hang.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, SupportsInt

import numpy as np
import torch

from steps.common.errors import HeteroError, UserError, describe
from steps.formats.webdataset import count_samples, list_shards
from steps.train.core.cluster import Cluster, available_cpus, resolve
from steps.train.core.config import TrainConfig
from steps.train.core.manifest import train_channel
from steps.train.core.split import NONE as NO_SPLIT
from steps.train.core.split import Split
from steps.train.dataplane import messages
from steps.train.dataplane.errors import DataHostLost, LocalDecodeFailed
from steps.train.dataplane.meter import arrived, data_host_metrics
from steps.train.dataplane.settings import DataPlaneSettings
from steps.train.dataplane.watch import Peer, PeerWatch
from steps.train.dataplane.wire import Segment
from steps.train.frameworks.pytorch.dataset import Batch, ShardDataset, batch_loader
from steps.train.frameworks.pytorch.throttle import retuner, workers_report
from steps.train.workload import Workload

if TYPE_CHECKING:
    from steps.train.core.retune import Retuner
    from steps.train.frameworks.pytorch.local_decode import LocalDecoder


@dataclass(frozen=True)
class _End:
    host: str
    epoch: int
    samples: int


@dataclass(frozen=True)
class _Failure:
    error: HeteroError


@dataclass
class _Host(Peer):
    samples_per_epoch: int = 0
    epoch: int = 0  # the epoch its stream is in
    received: dict = field(default_factory=dict)  # epoch -> samples received
    first_report: dict = field(default_factory=dict)  # the data host's own running measurements, with its first batch
    report: dict = field(default_factory=dict)  # ... and with its latest frame
    ends: dict = field(default_factory=dict)  # epoch -> the sample counts of the ENDs its streams sent
    lock: threading.Lock = field(default_factory=threading.Lock)  # its streams' readers count into it


class BufferPool:
    """Reuses pixel buffers so the hot path never page-faults fresh memory."""

    def __init__(self, *, pinned: bool, limit: int) -> None:
        self.pinned = pinned
        self.limit = limit
        self._free: dict[tuple, list] = {}
        self._lock = threading.Lock()

    def allocate(self, segment: Segment) -> np.ndarray:
        key = (segment.dtype.str, segment.shape)
        with self._lock:
            free = self._free.get(key)
            if free:
                array, event = free.pop()
                if event is not None:
                    event.synchronize()  # a non-blocking copy to the GPU may still read it
                return array
        if self.pinned:
            return torch.empty(segment.shape, dtype=torch.from_numpy(np.empty(0, segment.dtype)).dtype, pin_memory=True).numpy()
        return np.empty(segment.shape, dtype=segment.dtype)

    def give_back(self, array: np.ndarray, event=None) -> None:
        key = (array.dtype.str, array.shape)
        with self._lock:
            free = self._free.setdefault(key, [])
            if len(free) < self.limit:
                free.append((array, event))


class DataServiceClient:
    def __init__(self, cfg: TrainConfig, *, me: str, data_hosts: tuple[str, ...], secret: bytes, pinned: bool = False) -> None:
        self.cfg = cfg
        self.me = me
        self.hosts = [_Host(h, resolve(h)) for h in data_hosts]
        self.pool = BufferPool(pinned=pinned, limit=cfg.prefetch_batches * len(data_hosts) + 2)
        self.queue: queue.Queue = queue.Queue(maxsize=cfg.prefetch_batches * len(data_hosts))
        self._epoch = 0
        self._gate = threading.Condition()
        self.watch = PeerWatch(
            DataPlaneSettings.of(cfg),
            self.hosts,
            me=me,
            secret=secret,
            on_message=self._receive,
            on_failure=self._post_failure,
            lost=self._lost,
            allocator=self._allocate,
        )
        self._stopping = self.watch.stopping  # STOP sent: drain until each data host hangs up
        self._threads: list[threading.Thread] = []
        self.split: Split = NO_SPLIT
        self.local: LocalDecoder | None = None  # this host's own decode workers (`add_local`), a source beside the data hosts
        self._local: _Host | None = None
        self._local_cpu_s = 0.0
        self.waited_s = 0.0  # the loop's time waiting on an empty merge: what retunes this host's decode workers
        self._retuner: Retuner | None = None

    # -- lifecycle ---------------------------------------------------------
    def connect(
        self, epoch: int = 0, consumed: np.ndarray | None = None, trainer_workers: list[int] | None = None
    ) -> DataServiceClient:
        """Dial every data host, prove the secret, and say where to start: ``epoch``, without the sample ids
        ``consumed`` of it (a checkpoint's input position), and which samples the trainers decode themselves:
        ``trainer_workers`` (every trainer's local decode workers, by rank) against the data hosts' decode workers
        (their HELLOs) settle the `Split` every trainer computes alike."""
        consumed = np.empty(0, dtype=np.int64) if consumed is None else np.asarray(consumed, dtype=np.int64)
        hellos = self.watch.connect()  # one per data host, in order
        for host, hello in zip(self.hosts, hellos):
            host.samples_per_epoch = hello.samples_per_epoch
        self.split = Split.weighted(list(trainer_workers or [0]), sum(max(hello.decode_workers, 1) for hello in hellos))
        self.watch.send_all(messages.Resume(epoch=epoch, split=self.split.as_meta(), consumed=consumed))
        self._epoch = epoch
        for host in self.hosts:
            host.epoch = epoch  # the epoch the job starts (or resumes) at
        self.watch.watch()
        return self

    @property
    def failure(self) -> HeteroError | None:
        """The first lost host: raised before any batch still queued."""
        return self.watch.failure

    def add_local(self, local: LocalDecoder) -> None:
        """Merge ``local``'s batches (a `steps.train.frameworks.pytorch.local_decode.LocalDecoder`: this host's side of the split) with
        the data hosts' streams; before the first `batches` call. Its epochs end, and are checked, like a data host's."""
        self.local = local
        host = self._local = _Host(local.name, "local", samples_per_epoch=local.samples_per_epoch)
        self._retuner = retuner(self.cfg, local.throttle, lambda: (self.waited_s, sum(host.received.values())))
        self._spawn(self._decode_locally, self._local)

    def close(self, status: str = "completed", reason: str = "", files: dict[str, bytes] | None = None) -> None:
        """Tell every data host to stop, handing it ``files`` (the trainer's outputs), then drop
        the connections once each has hung up (`send_stop`). Idempotent."""
        if not self.watch.close(status, reason, files):
            return
        with self._gate:
            self._gate.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._retuner is not None:
            self._retuner.stop()
        if self.local is not None:
            self.local.stop()

    @property
    def samples_per_epoch(self) -> int:
        """Every data host's share of an epoch, as their HELLOs said."""
        return sum(h.samples_per_epoch for h in self.hosts)

    def measurements(self) -> dict:
        """What the data hosts measured of themselves (`data_host_metrics`) and what arrived here."""
        received = sum(sum(h.received.values()) for h in self.hosts)
        read = sum(link.bytes_read for link in self.watch.links)
        measured = arrived([data_host_metrics(h.name, h.report, h.first_report) for h in self.hosts if h.report], read, received)
        return {**measured, "local_decode": self._local_metrics(received)}

    def _local_metrics(self, remote: int) -> dict | None:
        """This host's own decode (hybrid): its workers, its share of the samples that reached the loop, its CPU cost."""
        if self._local is None or self.local is None:  # both set by add_local
            return None
        samples = sum(self._local.received.values())
        return {
            "host": self.me,
            **self.local.spare.as_metrics(),
            "split": self.split.as_meta(),
            "samples": samples,
            "share": samples / (samples + remote) if samples + remote else 0.0,
            "decode_cpu_s_per_sample": self._local_cpu_s / samples if samples else 0.0,
            "decode_workers": workers_report(self.cfg, self.local.throttle, self._retuner),
        }

    def _spawn(self, target, *args) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"{target.__name__}")
        thread.start()
        self._threads.append(thread)
        return thread

    # -- consumer side -----------------------------------------------------
    def batches(self, epoch: int) -> Iterator[Batch]:
        """Every batch of ``epoch`` from every data host, in arrival order."""
        ended: set[str] = set()
        while len(ended) < len(self.hosts) + (self._local is not None):
            asked = time.perf_counter()
            item = self.queue.get()
            self.waited_s += time.perf_counter() - asked
            if self.failure is not None:  # not after the batches still queued: a lost host ends training now
                raise self.failure
            if isinstance(item, _Failure):
                raise item.error
            if isinstance(item, _End):
                self._check_end(item)
                ended.add(item.host)
                continue
            yield item
        with self._gate:
            self._epoch = epoch + 1
            self._gate.notify_all()

    def _check_end(self, end: _End) -> None:
        host = next(h for h in [*self.hosts, self._local] if h is not None and h.name == end.host)
        got = host.received.get(end.epoch, 0)
        if got != end.samples:
            raise DataHostLost(f"data host {end.host} says it sent {end.samples} samples in epoch {end.epoch}, {got} arrived")

    # -- threads -----------------------------------------------------------
    def _allocate(self, segment: Segment) -> np.ndarray:
        if segment.name == "pixels":
            return self.pool.allocate(segment)
        return np.empty(segment.shape, dtype=segment.dtype)

    def _post(self, item) -> None:
        while not self._stopping.is_set():  # after STOP nobody consumes: drop what still arrives
            try:
                self.queue.put(item, timeout=self.cfg.heartbeat_s)
                return
            except queue.Full:
                continue

    def _fail(self, error: HeteroError) -> None:
        self.watch.fail(error)

    def _post_failure(self, error: HeteroError) -> None:
        self._post(_Failure(error))  # wakes a consumer waiting on an empty queue

    def _receive(self, host: _Host, message) -> None:
        """A data host's BATCH or END (`PeerWatch` reads the link, and words its loss with `_lost`)."""
        if isinstance(message, messages.Batch):
            batch = self._batch(host, message)
            with host.lock:
                host.received[batch.epoch] = host.received.get(batch.epoch, 0) + len(batch) + len(batch.corrupt)
                self._keep_report(host, message.host)
            self._post(batch)
        elif isinstance(message, messages.End):
            with host.lock:  # the host's epoch ends with the END of its last stream, its batches all posted before
                self._keep_report(host, message.host)
                ends = host.ends.setdefault(message.epoch, [])
                ends.append(message.samples)
                if len(ends) == len(host.streams):
                    self._post(_End(host.name, message.epoch, sum(ends)))
                    host.epoch += 1
            with self._gate:  # hold this stream's next epoch back until the trainer starts it
                while self._epoch <= message.epoch and not self._stopping.is_set():
                    self._gate.wait(self.cfg.heartbeat_s)
            for link in host.streams:
                link.touch()

    def _decode_locally(self, host: _Host) -> None:
        """Feed this host's own batches into the merge, one epoch at a time, in step with the data hosts' streams."""
        epoch, local = self._epoch, self.local
        assert local is not None  # started by add_local
        try:
            while epoch < self.cfg.epochs and not self._stopping.is_set():
                for batch in local.batches(epoch):
                    if self._stopping.is_set():
                        return
                    batch.epoch, batch.source = epoch, host.name
                    host.received[epoch] = host.received.get(epoch, 0) + len(batch) + len(batch.corrupt)
                    self._local_cpu_s += batch.cpu_s
                    self._post(batch)
                self._post(_End(host.name, epoch, host.received.get(epoch, 0)))
                epoch += 1
                if epoch == self.cfg.epochs and self._retuner is not None:
                    self._retuner.stop()  # every local sample is decoded: the loop's waits from here on are not for them
                with self._gate:
                    while self._epoch < epoch and not self._stopping.is_set():
                        self._gate.wait(self.cfg.heartbeat_s)
        except Exception as exc:  # noqa: BLE001 - the loop learns why through the merge queue
            if not self._stopping.is_set():
                error = (
                    exc
                    if isinstance(exc, HeteroError)
                    else LocalDecodeFailed(
                        f"this trainer host's own decode workers ({host.name}) failed in epoch {epoch}: {describe(exc)}"
                    )
                )
                self._fail(error)

    @staticmethod
    def _keep_report(host: _Host, report: dict) -> None:
        """BATCH and END frames carry the data host's running measurements (`ServiceMeter.report`)."""
        if report:
            host.report = report
            host.first_report = host.first_report or report

    def _batch(self, host: _Host, message: messages.Batch) -> Batch:
        pixels, pool = message.pixels, self.pool

        def release(event=None) -> None:
            pool.give_back(pixels, event)

        return Batch(
            torch.from_numpy(pixels),
            torch.from_numpy(message.labels),
            torch.from_numpy(message.ids),
            corrupt=[tuple(c) for c in message.corrupt],
            epoch=message.epoch,
            source=host.name,
            release=release,
        )

    def _lost(self, host: _Host, exc: Exception) -> DataHostLost:
        epoch = host.epoch
        got = host.received.get(epoch, 0)
        total = host.samples_per_epoch
        return DataHostLost(
            f"data host {host.name} ({host.address}) was lost in epoch {epoch}: {exc}. It had delivered {got} of its "
            f"{total} samples for this epoch to this trainer; up to {max(total - got, 0)} samples of the epoch are lost"
        )


class LocalSource:
    """Homogeneous: this host's shards through its own DataLoader workers."""

    def __init__(self, cfg: TrainConfig, cluster: Cluster, workload: Workload, *, pinned: bool) -> None:
        shards = list_shards(train_channel(cluster, cfg.shard_wait_s))
        if not shards:
            raise UserError(
                f"trainer {cluster.current_host} found no *.tar shards in {cluster.channel('train')}", headline="no shards"
            )
        self.dataset = dataset = ShardDataset(
            shards, workload, train=True, seed=cfg.seed, stream=cluster.rank, part=cluster.part("train", cluster.trainer_hosts)
        )
        # One CPU: decode in this process between steps, back to back as the one core runs them anyway. A worker
        # process on the same core would add the cost of two processes contending for it (measured 20-30% on
        # the default workload), and the data host would then seem to remove more than the decode itself.
        self.loader = batch_loader(
            dataset,
            batch_size=cfg.batch_size,
            num_workers=cfg.num_workers,
            pin_memory=pinned,
            in_process=cfg.num_workers == 0 and available_cpus() == 1,
        )
        part = cluster.part("train", cluster.trainer_hosts)
        self.samples_per_epoch = sum(count_samples(s) for s in shards) // part[1]

    def resume(self, epoch: int, consumed: Iterable[SupportsInt]) -> None:
        self.dataset.resume(epoch, consumed)

    def batches(self, epoch: int) -> Iterator[Batch]:
        yield from self.loader

    def measurements(self) -> dict:
        return arrived([], 0, 0)

    def close(self, status: str = "completed", reason: str = "", files: dict | None = None) -> None:
        pass

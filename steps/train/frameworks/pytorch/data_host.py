"""The data service: runs on every data host, feeds every trainer host.

Each data host decodes and augments the shards SageMaker gave it
(ShardedByS3Key: its own share) with one DataLoader worker per CPU, and
streams ready uint8 batches to the trainers that connect, over
``streams_per_flow`` connections to each (`steps.train.dataplane.streams`).
Every connection pulls from one shared queue, so a faster trainer (or a freer
connection) gets more batches; each epoch closes with an END frame per
connection carrying the samples sent on it.

The service ends when every trainer has sent STOP (exit 0), or when a
trainer disconnects without STOP, reports failure or goes silent (exit
non-zero): SageMaker bills until every host exits, so a data host never
outlives its trainers.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from steps.common.errors import UserError
from steps.formats.webdataset import count_samples, list_shards
from steps.train.core.cluster import Cluster, resolve
from steps.train.core.config import TrainConfig
from steps.train.core.manifest import train_channel
from steps.train.core.split import NONE as NO_SPLIT
from steps.train.core.split import Split
from steps.train.dataplane import messages
from steps.train.dataplane.admission import Trainer
from steps.train.dataplane.auth import job_secret
from steps.train.dataplane.errors import TrainerGone, WireError
from steps.train.dataplane.meter import ServiceMeter
from steps.train.dataplane.session import HostSession, trainer_lost
from steps.train.dataplane.settings import DataPlaneSettings
from steps.train.dataplane.streams import streams_per_flow
from steps.train.frameworks.pytorch.dataset import Batch, ShardDataset, batch_loader, worker_start_method
from steps.train.frameworks.pytorch.throttle import Throttle, retuner, workers_report
from steps.train.workload import Workload


def run_data_service(cfg: TrainConfig, cluster: Cluster, workload: Workload) -> None:
    shards = list_shards(train_channel(cluster, cfg.shard_wait_s))
    if not shards:
        raise UserError(
            f"data host {cluster.current_host} found no *.tar shards in {cluster.channel('train')}; "
            "point the train channel at the shard step's train/ output",
            headline="no shards",
        )
    counts = [count_samples(s) for s in shards]
    part = cluster.part("train", cluster.data_hosts)
    dataset = ShardDataset(
        shards, workload, train=True, seed=cfg.seed, stream=cluster.data_hosts.index(cluster.current_host), part=part
    )
    method = worker_start_method()  # the loader's workers and the semaphore they share start alike
    loader = batch_loader(dataset, batch_size=cfg.batch_size, num_workers=cfg.num_workers, start_method=method)
    # all decode at the start; retune may take some out
    dataset.throttle = Throttle(loader.num_workers or 1, start_method=method)
    # Every batch carries image_size^2 x 3 uint8 pixels and an int64 label and id per sample; no trainer's target
    # rate is known at a data host's start, so auto is one stream (docs/dataplane.md#streams-per-flow).
    streams = streams_per_flow(cfg.streams_per_flow, bytes_per_sample=workload.image_size**2 * 3 + 16)
    print(
        f"[data] {cluster.current_host}: {len(shards)} shards, {sum(counts)} samples (share {part[0] + 1}/{part[1]}), "
        f"{loader.num_workers or 1} decode worker(s), serving {len(cluster.trainer_hosts)} trainer(s) over {streams} "
        f"stream(s) each (streams_per_flow={cfg.streams_per_flow or 'auto'})",
        flush=True,
    )

    def start(epoch: int, consumed: np.ndarray, split: Split) -> None:
        dataset.resume(epoch, consumed)
        dataset.share(split.data())
        if split.hybrid:
            print(
                f"[data] {cluster.current_host}: the trainers decode {sum(split.trainers)} of every {split.period} samples "
                f"themselves; this host {dataset.samples_per_epoch(counts)} per epoch",
                flush=True,
            )

    with socket.create_server((resolve(cluster.current_host), cfg.data_port), backlog=64) as server:
        serve(
            cfg,
            server,
            me=cluster.current_host,
            trainer_hosts=cluster.trainer_hosts,
            secret=job_secret(),
            samples_per_epoch=sum(counts) // part[1],
            epoch_batches=lambda epoch: loader,
            results_dir=cluster.model_dir,
            start=start,
            decode_workers=loader.num_workers or 1,
            streams=streams,
            throttle=dataset.throttle,
        )
    print(f"[data] {cluster.current_host}: all trainers stopped; exiting", flush=True)


def serve(
    cfg: TrainConfig,
    server: socket.socket,
    *,
    me: str,
    trainer_hosts: tuple[str, ...],
    secret: bytes,
    samples_per_epoch: int,
    epoch_batches: Callable[[int], Iterable[Batch]],
    results_dir: Path | None = None,
    start: Callable[[int, np.ndarray, Split], None] | None = None,
    decode_workers: int = 1,
    streams: int = 1,
    throttle: Throttle | None = None,
) -> None:
    """Accept the trainers on ``server`` (``streams`` connections each), stream ``epoch_batches(e)`` for every epoch,
    return when all said STOP.

    Each trainer's first frame is RESUME: the epoch to start at and the sample ids of it already consumed
    (a checkpoint's input position; epoch 0 and none on a fresh start), and the hybrid decode split
    (`steps.train.core.split`: which samples the trainers decode themselves). ``start(epoch, ids, split)`` hands
    them to the dataset before its first iteration. The HELLO tells the trainers ``samples_per_epoch``
    (this host's share before any split) and ``decode_workers``, which they weigh the split by.

    Files a trainer hands over with its STOP (its metrics and model) are written to ``results_dir``:
    every host of the job then holds the job's results, whichever host's model directory
    SageMaker packs into the model artifact.

    ``throttle``: how many of the decode workers behind ``epoch_batches`` decode at once; the feed retunes it
    while it serves (`steps.train.core.retune`).
    """
    session = HostSession.admit(
        DataPlaneSettings.of(cfg),
        server,
        me=me,
        trainer_hosts=trainer_hosts,
        secret=secret,
        info={"samples_per_epoch": samples_per_epoch, "epochs": cfg.epochs, "decode_workers": decode_workers},
        who=f"data host {me}",
        results_dir=results_dir,
        heartbeat=False,
        streams=streams,
    )  # the senders ping
    first, consumed, split = receive_resume(session.trainers, cfg)
    if first or consumed.size:
        print(f"[data] {me}: resuming at epoch {first}, {consumed.size} sample(s) of it already consumed", flush=True)
    if start is not None:
        start(first, consumed, split)
    with session:
        feed = BatchFeed(session, cfg, throttle)
        try:
            for epoch in range(first, cfg.epochs):
                for batch in epoch_batches(epoch):
                    feed.put(epoch, batch)
                feed.end_epoch(epoch)
        finally:
            feed.stop_retune()  # the last epoch is served: the senders' waits from here on are not for data
        session.wait_until()


def receive_resume(trainers: list[Trainer], cfg: TrainConfig) -> tuple[int, np.ndarray, Split]:
    """Every trainer's RESUME: the epoch they all start at, the union of the ids they consumed in it, and the
    decode split they settled on (`Split`; none when a RESUME carries no split). Every connection of a trainer sends
    the same RESUME (its streams per flow)."""
    epochs, ids, splits = {}, [], {}
    hosts = len({t.host for t in trainers})
    deadline = time.monotonic() + cfg.connect_timeout_s
    for t in trainers:
        while True:
            try:
                message = t.link.read()
            except (WireError, OSError) as exc:
                raise trainer_lost(t.host, exc) from None
            if isinstance(message, messages.Resume):
                break
            if message is not None and not isinstance(message, messages.Ping):
                raise TrainerGone(f"trainer {t.host} sent {message.kind.name} before RESUME: run the same code on every host")
            if time.monotonic() > deadline:
                raise TrainerGone(f"trainer {t.host} sent no RESUME within connect_timeout_s={cfg.connect_timeout_s:g}")
        if not 0 <= message.epoch <= cfg.epochs:
            raise TrainerGone(f"trainer {t.host} asked to resume at epoch {message.epoch!r}; this job has {cfg.epochs}")
        epochs[t.host] = message.epoch
        splits[t.host] = NO_SPLIT if message.split is None else Split.from_meta(message.split, trainers=hosts, sender=t.host)
        if message.consumed is not None:
            ids.append(message.consumed.astype(np.int64, copy=False).ravel())
    if len(set(epochs.values())) > 1:
        raise TrainerGone(f"trainers resume at different epochs ({epochs}): they read different checkpoints")
    if len(set(splits.values())) > 1:
        raise TrainerGone(
            f"trainers sent different decode splits ({ {h: s.as_meta() for h, s in splits.items()} }): "
            "run the same code and hyperparameters on every trainer"
        )
    start = next(iter(epochs.values()), 0)
    split = next(iter(splits.values()), NO_SPLIT)
    return start, np.unique(np.concatenate(ids)) if ids else np.empty(0, dtype=np.int64), split


class BatchFeed:
    """What a PyTorch data host sends: batches from one shared queue, a sender per connection (a faster trainer, or a
    freer connection of several streams per flow, takes more), each epoch closed by an END per connection with the
    samples sent on it. Each sender pings its connection when it has nothing to send, never waiting on another link:
    heartbeats are per stream."""

    def __init__(self, session: HostSession, cfg: TrainConfig, throttle: Throttle | None = None) -> None:
        self.session = session
        self.cfg = cfg
        self.queue: queue.Queue = queue.Queue(maxsize=2 * len(session.trainers))
        self.meter = ServiceMeter()
        self.waited_s = 0.0  # the senders' time waiting on an empty queue: the trainers wait for this host's decode
        self._waits = threading.Lock()
        self.retuner = None
        self.throttle = throttle
        if throttle is not None:
            self.retuner = retuner(self.cfg, throttle, lambda: (self.waited_s, self.meter.samples), consumers=self._senders)
            self.meter.decode_workers = lambda: workers_report(self.cfg, throttle, self.retuner)
        for t in session.trainers:
            session.spawn(self._send, t)

    def stop_retune(self) -> None:
        """Stop retuning and let every worker decode: one left waiting for a token would hold up the pool's shutdown."""
        if self.retuner is not None:
            self.retuner.stop()
        if self.throttle is not None:
            self.throttle.open()

    def _senders(self) -> int:
        return sum(not t.stopped for t in self.session.trainers)

    def put(self, epoch: int, batch: Batch) -> None:
        while True:
            self.session.check()
            try:
                self.queue.put((epoch, batch), timeout=self.cfg.heartbeat_s)
                self.meter.count(batch)
                return
            except queue.Full:
                continue

    def end_epoch(self, epoch: int) -> None:
        with self.queue.all_tasks_done:
            while self.queue.unfinished_tasks:
                self.session.check()
                self.queue.all_tasks_done.wait(self.cfg.heartbeat_s)
        report = self.meter.report(self.session.trainers)
        for t in self.session.trainers:
            if not t.stopped:
                end = messages.End(epoch=epoch, samples=t.sent.get(epoch, 0), host=report)
                self.session.guarded(t, lambda: t.link.send(end))  # noqa: B023 - called at once

    def _send(self, t: Trainer) -> None:
        session = self.session
        while not (t.stopped or session.done.is_set()):
            asked = time.perf_counter()
            try:
                epoch, batch = self.queue.get(timeout=self.cfg.heartbeat_s)
            except queue.Empty:
                session.guarded(t, lambda: t.link.send(messages.Ping()))
                continue
            finally:
                with self._waits:
                    self.waited_s += time.perf_counter() - asked
            try:
                message = messages.Batch(
                    epoch=epoch,
                    pixels=batch.pixels.numpy(),
                    labels=batch.labels.numpy(),
                    ids=batch.ids.numpy(),
                    corrupt=batch.corrupt,
                    host=self.meter.report(session.trainers),
                )
                session.guarded(t, lambda: t.link.send(message))  # noqa: B023 - called at once
                t.sent[epoch] = t.sent.get(epoch, 0) + len(batch) + len(batch.corrupt)
                t.batches += 1
            finally:
                self.queue.task_done()

"""The data service: runs on every data host, feeds every trainer host.

Each data host decodes and augments the shards SageMaker gave it
(ShardedByS3Key: its own share) with one DataLoader worker per CPU, and
streams ready uint8 batches to the trainers that connect. Trainers pull from
one shared queue, so a faster trainer gets more batches; each epoch closes
with an END frame per trainer carrying the samples that trainer was sent.

The service ends when every trainer has sent STOP (exit 0), or when a
trainer disconnects without STOP, reports failure or goes silent (exit
non-zero): SageMaker bills until every host exits, so a data host never
outlives its trainers.
"""

from __future__ import annotations

import os
import queue
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from steps.common.errors import HeteroError, UserError, describe
from steps.shard.format import count_samples, list_shards
from steps.train.auth import AuthError, job_secret, serve_handshake
from steps.train.cluster import Cluster, resolve
from steps.train.config import TrainConfig
from steps.train.dataset import Batch, ShardDataset, batch_loader
from steps.train.link import Link, PeerSilent, Stopped
from steps.train.wire import Kind, WireError
from steps.train.workload import Workload


HANDSHAKE_TIMEOUT_S = 10.0
SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


class TrainerGone(HeteroError):
    headline = "trainer lost"


class _AllStopped(Exception):
    """Internal: every trainer said STOP; the service winds down cleanly."""


@dataclass
class _Trainer:
    host: str
    link: Link
    stopped: bool = False
    sent: dict = field(default_factory=dict)  # epoch -> samples sent to this trainer


def run_data_service(cfg: TrainConfig, cluster: Cluster, workload: Workload) -> None:
    shards = list_shards(cluster.channel("train"))
    if not shards:
        raise UserError(
            f"data host {cluster.current_host} found no *.tar shards in {cluster.channel('train')}; "
            "point the train channel at the shard step's train/ output",
            headline="no shards",
        )
    samples = sum(count_samples(s) for s in shards)
    part = cluster.part("train", cluster.data_hosts)
    dataset = ShardDataset(shards, workload, train=True, seed=cfg.seed, stream=cluster.data_hosts.index(cluster.current_host), part=part)
    loader = batch_loader(dataset, batch_size=cfg.batch_size, num_workers=cfg.num_workers)
    print(f"[data] {cluster.current_host}: {len(shards)} shards, {samples} samples (share {part[0] + 1}/{part[1]}), "
          f"serving {len(cluster.trainer_hosts)} trainer(s)", flush=True)
    with socket.create_server((resolve(cluster.current_host), cfg.data_port), backlog=64) as server:
        serve(cfg, server, me=cluster.current_host, trainer_hosts=cluster.trainer_hosts, secret=job_secret(),
              samples_per_epoch=samples // part[1], epoch_batches=lambda epoch: loader, results_dir=cluster.model_dir)
    print(f"[data] {cluster.current_host}: all trainers stopped; exiting", flush=True)


def serve(cfg: TrainConfig, server: socket.socket, *, me: str, trainer_hosts: tuple[str, ...], secret: bytes,
          samples_per_epoch: int, epoch_batches: Callable[[int], Iterable[Batch]], results_dir: Path | None = None) -> None:
    """Accept the trainers on ``server``, stream ``epoch_batches(e)`` for every epoch, return when all said STOP.

    Files a trainer hands over with its STOP (its metrics and model) are written to ``results_dir``:
    every host of the job then holds the job's results, whichever host's model directory
    SageMaker packs into the model artifact.
    """
    trainers = _accept_trainers(server, cfg, me, trainer_hosts, secret, samples_per_epoch)
    service = DataService(trainers, cfg, results_dir)
    service.start()
    try:
        for epoch in range(cfg.epochs):
            for batch in epoch_batches(epoch):
                service.put(epoch, batch)
            service.end_epoch(epoch)
        service.wait_for_stop()
    except _AllStopped:
        pass
    except BaseException as exc:
        service.abort(f"data host {me}: {describe(exc)}")  # the trainers learn why, not just that the socket closed
        raise
    finally:
        service.close()


def _accept_trainers(server: socket.socket, cfg: TrainConfig, me: str, trainer_hosts: tuple[str, ...], secret: bytes,
                     samples: int) -> list[_Trainer]:
    """Accept until every expected trainer has proved the secret. Each handshake runs in its own
    thread, so a stranger that connects and says nothing cannot hold up the real trainers."""
    expected = set(trainer_hosts)
    trainers: dict[str, _Trainer] = {}
    pending: set[socket.socket] = set()
    lock = threading.Lock()
    info = {"samples_per_epoch": samples, "epochs": cfg.epochs}

    def handshake(sock: socket.socket, address) -> None:
        try:
            peer = serve_handshake(sock, secret, host=me, info=info)
        except (AuthError, WireError, OSError) as exc:
            print(f"[data] {me}: rejected connection from {address[0]}: {exc}", flush=True)
            peer = None
        with lock:
            pending.discard(sock)
            if peer in expected and peer not in trainers:
                trainers[peer] = _Trainer(peer, Link(sock, f"trainer {peer}", heartbeat_s=cfg.heartbeat_s,
                                                     silence_timeout_s=cfg.silence_timeout_s))
                return
        sock.close()

    threads = []
    deadline = time.monotonic() + cfg.connect_timeout_s
    try:
        while True:
            with lock:
                if set(trainers) == expected:
                    return list(trainers.values())
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = ", ".join(sorted(expected - set(trainers)))
                raise TrainerGone(f"trainer host(s) {missing} did not connect within connect_timeout_s={cfg.connect_timeout_s:g}")
            server.settimeout(min(remaining, 0.2))
            try:
                sock, address = server.accept()
            except TimeoutError:
                continue
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            with lock:
                pending.add(sock)
            thread = threading.Thread(target=handshake, args=(sock, address), name="handshake", daemon=True)
            thread.start()
            threads.append(thread)
    finally:
        with lock:
            for sock in pending:  # strangers still mid-handshake: cut them off (shutdown wakes their recv)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for thread in threads:
            thread.join(timeout=HANDSHAKE_TIMEOUT_S)


class DataService:
    """Fans batches out to trainer links; watches them for STOP and silence."""

    def __init__(self, trainers: list[_Trainer], cfg: TrainConfig, results_dir: Path | None = None):
        self.trainers = trainers
        self.cfg = cfg
        self.results_dir = results_dir
        self.queue: queue.Queue = queue.Queue(maxsize=2 * len(trainers))
        self.failure: HeteroError | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for t in self.trainers:
            for target in (self._control, self._send):
                thread = threading.Thread(target=target, args=(t,), name=f"{target.__name__}-{t.host}", daemon=True)
                thread.start()
                self._threads.append(thread)

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure
        if self.done.is_set():
            raise _AllStopped()

    def put(self, epoch: int, batch: Batch) -> None:
        while True:
            self.check()
            try:
                self.queue.put((epoch, batch), timeout=self.cfg.heartbeat_s)
                return
            except queue.Full:
                continue

    def end_epoch(self, epoch: int) -> None:
        with self.queue.all_tasks_done:
            while self.queue.unfinished_tasks:
                self.check()
                self.queue.all_tasks_done.wait(self.cfg.heartbeat_s)
        for t in self.trainers:
            if not t.stopped:
                self._guarded(t, lambda: t.link.send(Kind.END, {"epoch": epoch, "samples": t.sent.get(epoch, 0)}))

    def wait_for_stop(self) -> None:
        while True:
            self.check()
            self.done.wait(self.cfg.heartbeat_s)

    def abort(self, reason: str) -> None:
        for t in self.trainers:
            if not t.stopped:
                try:
                    t.link.send(Kind.ERROR, {"reason": reason[:1000]})
                except (WireError, OSError, Stopped):
                    pass

    def close(self) -> None:
        self.done.set()
        for t in self.trainers:
            t.link.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _fail(self, error: HeteroError) -> None:
        with self._lock:
            if self.failure is None and not self.done.is_set():
                self.failure = error
        self.done.set()

    def _lost(self, t: _Trainer, exc: Exception) -> None:
        """A trainer link broke; the send and control threads both land here, so the reason is the same."""
        if t.stopped or self.done.is_set():
            return
        if isinstance(exc, PeerSilent):
            self._fail(TrainerGone(f"trainer {t.host} went silent: {exc}"))
        else:
            self._fail(TrainerGone(f"trainer {t.host} disconnected without STOP ({exc}); it crashed or was killed"))

    def _guarded(self, t: _Trainer, action) -> None:
        try:
            action()
        except Stopped:
            pass
        except (WireError, OSError) as exc:
            self._lost(t, exc)

    def _control(self, t: _Trainer) -> None:
        while not (t.stopped or self.done.is_set()):
            try:
                frame = t.link.read()
            except Stopped:
                return
            except (WireError, OSError) as exc:
                self._lost(t, exc)
                return
            if frame is None:
                continue
            kind, meta, arrays = frame
            if kind is Kind.STOP:
                self._keep_results(t, meta, arrays)
                t.stopped = True
                if meta.get("status") != "completed":
                    self._fail(TrainerGone(f"trainer {t.host} stopped the job: {meta.get('reason', 'no reason given')}"))
                elif all(x.stopped for x in self.trainers):
                    self.done.set()
            elif kind is Kind.ERROR:
                self._fail(TrainerGone(f"trainer {t.host} failed: {meta.get('reason', 'no reason given')}"))

    def _keep_results(self, t: _Trainer, meta: dict, arrays: dict) -> None:
        if self.results_dir is None or not arrays:
            return
        for name, data in arrays.items():
            if not SAFE_FILE_NAME.fullmatch(name):
                print(f"[data] ignoring file {name!r} from trainer {t.host}: not a plain file name", flush=True)
                continue
            self.results_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.results_dir / f".{name}.tmp"
            tmp.write_bytes(data.tobytes())
            os.replace(tmp, self.results_dir / name)
        print(f"[data] kept {', '.join(sorted(arrays))} from trainer {t.host} in {self.results_dir}", flush=True)

    def _send(self, t: _Trainer) -> None:
        while not (t.stopped or self.done.is_set()):
            try:
                epoch, batch = self.queue.get(timeout=self.cfg.heartbeat_s)
            except queue.Empty:
                self._guarded(t, lambda: t.link.send(Kind.PING))
                continue
            try:
                meta = {"epoch": epoch, "corrupt": batch.corrupt}
                arrays = [("pixels", batch.pixels.numpy()), ("labels", batch.labels.numpy()), ("ids", batch.ids.numpy())]
                self._guarded(t, lambda: t.link.send(Kind.BATCH, meta, arrays))
                t.sent[epoch] = t.sent.get(epoch, 0) + len(batch) + len(batch.corrupt)
            finally:
                self.queue.task_done()

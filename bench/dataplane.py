"""The real data plane on one machine, as the benches build it: no pipeline, no SageMaker toolkit, only torch.

Each data host is a process pinned to its own CPU set running the data service
(`serve`) over a `ShardDataset` with one DataLoader worker per CPU; the caller's
process is the trainer, pinned to its own CPU set, on the GPU when there is one,
with the real `DataServiceClient` (and, for hybrid decode, the real
`LocalDecoder` merged into it) and the real training loop. Used by
``plan_accuracy.py`` and ``hybrid.py``; runs where only torch is installed (the
GPU machine).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from pipeline.local.sample_data import generate
from steps.formats.webdataset import count_samples, list_shards, write_shard
from steps.train.core.config import TrainConfig
from steps.train.core.spare_cpus import Spare, kept_for_loop, sample_pixels
from steps.train.core.split import Split
from steps.train.dataplane.meter import arrived
from steps.train.frameworks.pytorch.data import DataServiceClient
from steps.train.frameworks.pytorch.data_host import serve
from steps.train.frameworks.pytorch.dataset import Batch, ShardDataset, batch_loader
from steps.train.frameworks.pytorch.local_decode import LocalDecoder
from steps.train.frameworks.pytorch.step import loop_cpus
from steps.train.frameworks.pytorch.trainer import train_epochs
from steps.train.workloads.shapes import Shapes

SECRET = b"p" * 32
BATCH = 64


def make_shards(root: Path, samples: int) -> list[Path]:
    raw = generate(root / "raw", samples=samples)
    classes = sorted(p.name for p in raw.iterdir() if p.is_dir())
    files = [(label, f) for label, c in enumerate(classes) for f in sorted((raw / c).glob("*.jpg"))]
    shards = root / "shards"
    if not shards.is_dir():
        shards.mkdir(parents=True, exist_ok=True)
        per = 500
        for start in range(0, len(files), per):
            write_shard(
                shards / f"part-{start // per:04d}.tar",
                ((start + i, label, "jpg", f.read_bytes()) for i, (label, f) in enumerate(files[start : start + per])),
            )
    return list_shards(shards)


def by_core(cpus: list[int]) -> list[int]:
    """CPUs ordered so hyperthread siblings sit side by side: consecutive CPU sets then take whole cores, and a
    host never shares a core with another (on separate instances they would not)."""

    def core(cpu: int) -> tuple:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            return (int((topology / "physical_package_id").read_text()), int((topology / "core_id").read_text()), cpu)
        except (OSError, ValueError):
            return (0, cpu, cpu)

    return sorted(cpus, key=core)


def siblings() -> list[str]:
    found = set()
    for topology in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/thread_siblings_list"):
        found.add(topology.read_text().strip())
    return sorted(found, key=lambda s: int(s.replace("-", ",").split(",")[0]))


def cpu_ticks() -> dict:
    """Machine-wide CPU time by kind (/proc/stat), to tell a busy host from one whose hypervisor steals time."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return {}
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return dict(zip(names, map(int, fields)))


def cpu_share_since(ticks: dict) -> dict:
    """The machine's CPU time since ``ticks`` (`cpu_ticks`) by kind, as shares."""
    spent = {k: v - ticks.get(k, 0) for k, v in cpu_ticks().items()}
    return {k: round(v / max(sum(spent.values()), 1), 4) for k, v in spent.items()}


def emit(doc: dict, out: str | None) -> None:
    """Print the bench's JSON, and write it to ``out`` too when given."""
    text = json.dumps(doc, indent=2)
    if out:
        Path(out).write_text(text + "\n")
    print(text)


def config(port: int, options: dict, *, steps: int) -> TrainConfig:
    return TrainConfig(
        epochs=1,
        batch_size=BATCH,
        data_port=port,
        max_steps=steps,
        warmup_steps=max(10, steps // 5),
        log_every=10**9,
        workload_options=dict(options),
        silence_timeout_s=120,
    )


def _data_host(
    cpus: list[int], address: str, port: int, shards: list[str], options: dict, stream: int, repeat: int, streams: int
) -> None:
    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(1)
    cfg = config(port, options, steps=0)
    paths = [Path(s) for s in shards] * repeat  # one long epoch: no epoch boundary inside a measured run
    dataset = ShardDataset(paths, Shapes(options), train=True, seed=stream, stream=stream)
    loader = batch_loader(dataset, batch_size=BATCH, num_workers=len(cpus))
    samples = sum(count_samples(p) for p in shards) * repeat

    def start(epoch: int, consumed: np.ndarray, split: Split) -> None:
        dataset.share(split.data())  # hybrid decode: the trainer decodes its side of every shard

    with socket.create_server((address, port), backlog=16) as server:
        serve(
            cfg,
            server,
            me=address,
            trainer_hosts=("trainer",),
            secret=SECRET,
            samples_per_epoch=samples,
            epoch_batches=lambda epoch: loader,
            start=start,
            decode_workers=len(cpus),
            streams=streams,
        )


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def local_decode(trainer_cpus: str, options: dict, model, device: torch.device, shards: list[Path], repeat: int) -> Spare:
    """The trainer's own decode workers, decided as on a trainer host (`steps.train.core.spare_cpus.kept_for_loop`) whose
    CPUs are this process's: ``trainer_cpus`` all (none), auto (probe the step) or a number of vCPUs kept."""
    cpus = len(os.sched_getaffinity(0))
    workload = Shapes(options)
    kept, why, loop = kept_for_loop(
        trainer_cpus, cpus, lambda: loop_cpus(workload, model, device, sample_pixels(workload, shards), BATCH, 1e-3)
    )
    workers = cpus - kept
    return Spare(workers, kept, cpus, list(shards) * repeat if workers else [], why, loop)


class TrainerOnly:
    """A homogeneous trainer's source, as `steps.train.frameworks.pytorch.data.LocalSource` builds it from a cluster:
    one DataLoader over every shard, its workers (``spare``'s) on the CPUs the loop leaves."""

    def __init__(self, workload: Shapes, spare: Spare, device: torch.device) -> None:
        if not spare.workers:
            raise ValueError(f"a trainer without data hosts needs decode workers: {spare.why} leaves none")
        cpus = sorted(os.sched_getaffinity(0))
        dataset = ShardDataset(spare.shards, workload, train=True, seed=0, stream=0)
        self.loader = batch_loader(
            dataset, batch_size=BATCH, num_workers=spare.workers, pin_memory=device.type == "cuda", cpus=cpus[spare.kept :]
        )
        self.samples_per_epoch = sum(count_samples(p) for p in spare.shards)

    def batches(self, epoch: int) -> Iterator[Batch]:
        yield from self.loader

    def measurements(self) -> dict:
        return arrived([], 0, 0)

    def close(self, status: str = "completed", reason: str = "") -> None:
        self.loader._stop_workers()  # persistent workers: end them with the run, not at garbage collection


def run_configuration(
    hosts: int,
    host_cpus: list[list[int]],
    shards: list[Path],
    options: dict,
    steps: int,
    device: torch.device,
    repeat: int,
    trainer_cpus: str = "all",
    streams: int = 1,
) -> dict:
    """Train ``steps`` steps fed by ``hosts`` data hosts over ``streams`` connections each (and, unless ``trainer_cpus``
    is all, this process's own decode workers on the CPUs the step leaves; with no data host, those alone); the
    trainer's steady rate and what every source measured."""
    addresses = [f"127.0.0.{10 + i}" for i in range(hosts)]
    port = _free_port(addresses[0] if addresses else "127.0.0.1")
    spawn = mp.get_context("spawn")
    procs = [
        spawn.Process(
            target=_data_host,
            args=(host_cpus[i], addresses[i], port, [str(s) for s in shards], options, i, repeat, streams),
        )
        for i in range(hosts)
    ]  # not daemonic: a data host starts DataLoader workers
    for p in procs:
        p.start()
    cfg = config(port, options, steps=steps)
    client = None
    threads = torch.get_num_threads()
    try:
        workload = Shapes(options)
        model = workload.build_model(8).to(device)
        found = local_decode(trainer_cpus, options, model, device, shards, repeat)
        if not hosts:
            client = TrainerOnly(workload, found, device)
            torch.set_num_threads(found.kept)
        else:
            client = DataServiceClient(
                cfg, me="trainer", data_hosts=tuple(addresses), secret=SECRET, pinned=device.type == "cuda"
            ).connect(trainer_workers=[found.workers])
        if found.workers and hosts:
            torch.set_num_threads(found.kept)
            client.add_local(
                LocalDecoder(
                    cfg,
                    "trainer",
                    hosts,
                    workload,
                    found,
                    client.split.trainer(0),
                    pinned=device.type == "cuda",
                    epoch=0,
                    consumed=np.empty(0, np.int64),
                )
            )
        cpu_started = time.process_time()
        stats = train_epochs(cfg, workload, model, client, device).stats
        trainer_cpu = time.process_time() - cpu_started
        measured = client.measurements()
        local = measured.pop("local_decode", None)
        client.close("completed")
    finally:
        torch.set_num_threads(threads)
        if client is not None:
            client.close("failed", "bench ended")
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    summary = stats.summary()
    rate = summary["samples"] / summary["elapsed_s"]
    return {
        "hosts": hosts,
        "steps": summary["steps"],
        "measured_steps": summary["measured_steps"],
        "compute_s_per_step": summary["compute_s"] / max(summary["measured_steps"], 1),
        "samples_per_second": rate,
        "data_wait_share": summary["data_wait_share"],
        "trainer_cpu_s_per_sample": trainer_cpu / max(summary["seen"], 1),
        "spare": found.as_metrics(),
        "local_decode": [local] if local else [],  # as in metrics.json
        **measured,
        "model": model,
    }

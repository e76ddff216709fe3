"""The trainer: one torch training loop for every cluster shape.

Heterogeneous: batches come from the data service on the data hosts.
Homogeneous (the baseline): the same `ShardDataset` decodes in this host's
own DataLoader workers. Either way the loop measures, per step, the time
spent waiting for data and the time spent computing; with several trainer
hosts it is DistributedDataParallel, with `Join` absorbing uneven batch
counts (data hosts stream to whichever trainer is ready).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel

from steps.common.errors import UserError
from steps.shard.format import count_samples, list_shards
from steps.train.auth import job_secret
from steps.train.cluster import Cluster, available_cpus, resolve
from steps.train.config import TrainConfig
from steps.train.control import failure_reason
from steps.train.corrupt import CorruptBudget
from steps.train.costs import cost_line, isolated_costs
from steps.train.data_client import DataServiceClient
from steps.train.dataset import ShardDataset, batch_loader
from steps.common.files import write_json_atomic
from steps.train.metrics import StepStats, final_line, metric_line, training_metrics
from steps.train.manifest import read_classes, train_channel
from steps.train.service_meter import arrived
from steps.train.workload import Workload


class LocalSource:
    """Homogeneous: this host's shards through its own DataLoader workers."""

    def __init__(self, cfg: TrainConfig, cluster: Cluster, workload: Workload, *, pinned: bool):
        shards = list_shards(train_channel(cluster, cfg.shard_wait_s))
        if not shards:
            raise UserError(f"trainer {cluster.current_host} found no *.tar shards in {cluster.channel('train')}", headline="no shards")
        dataset = ShardDataset(shards, workload, train=True, seed=cfg.seed, stream=cluster.rank,
                               part=cluster.part("train", cluster.trainer_hosts))
        # One CPU: decode in this process between steps, back to back as the one core runs them anyway. A worker
        # process on the same core would add the cost of two processes contending for it (measured 20-30% on
        # the default workload), and the data host would then seem to remove more than the decode itself.
        self.loader = batch_loader(dataset, batch_size=cfg.batch_size, num_workers=cfg.num_workers, pin_memory=pinned,
                                   in_process=cfg.num_workers == 0 and available_cpus() == 1)
        part = cluster.part("train", cluster.trainer_hosts)
        self.samples_per_epoch = sum(count_samples(s) for s in shards) // part[1]

    def batches(self, epoch: int):
        yield from self.loader

    def measurements(self) -> dict:
        return arrived([], 0, 0)

    def close(self, status: str = "completed", reason: str = "", files: dict | None = None) -> None:
        pass


def run_trainer(cfg: TrainConfig, cluster: Cluster, workload: Workload) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(available_cpus())
    classes = read_classes(cluster.channel("manifest"))
    _init_distributed(cfg, cluster, device)
    source = None
    try:
        if cluster.heterogeneous:
            source = DataServiceClient(cfg, me=cluster.current_host, data_hosts=cluster.data_hosts, secret=job_secret(),
                                       pinned=device.type == "cuda").connect()
        else:
            source = LocalSource(cfg, cluster, workload, pinned=device.type == "cuda")
        model = workload.build_model(len(classes)).to(device)
        if dist.is_initialized():
            model = DistributedDataParallel(model)
        stats, corrupt = _train(cfg, workload, model, source, device)
        validation = _validation_shards(cluster) if cluster.rank == 0 else []
        accuracy = _validate(cfg, cluster, workload, model, device, validation) if cluster.rank == 0 else None
        summary = _gather(stats.summary(), len(corrupt))
        files = {}
        if cluster.rank == 0:
            costs = _isolated_costs(cfg, cluster, workload, model, device, validation)
            _write_outputs(cfg, cluster, model, summary, accuracy, corrupt, classes, isolated_costs=costs,
                           **source.measurements())
            files = {p.name: p.read_bytes() for p in sorted(cluster.model_dir.iterdir()) if p.is_file()}
        source.close("completed", files=files)  # every data host keeps a copy of the results
    except BaseException as exc:
        if source is not None:
            source.close("failed", failure_reason(cluster.current_host, exc))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _init_distributed(cfg: TrainConfig, cluster: Cluster, device: torch.device) -> None:
    if cluster.world_size < 2:
        return
    # the interface SageMaker names in resourceconfig.json (eth0; lo in the local emulator)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", cluster.network_interface)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", cluster.network_interface)
    dist.init_process_group(
        backend="nccl" if device.type == "cuda" else "gloo",
        init_method=f"tcp://{resolve(cluster.trainer_hosts[0])}:{cfg.dist_port}",
        rank=cluster.rank,
        world_size=cluster.world_size,
        timeout=datetime.timedelta(seconds=cfg.connect_timeout_s),
    )


def _train(cfg, workload, model, source, device):
    world = dist.get_world_size() if dist.is_initialized() else 1
    budget = CorruptBudget(cfg.max_corrupt_share, source.samples_per_epoch // world)  # this trainer's share of an epoch
    loss_fn = workload.loss().to(device)
    optimizer = workload.optimizer(model.parameters(), cfg.learning_rate)
    stats = StepStats(cfg.warmup_steps)
    corrupt: list = []
    model.train()
    for epoch in range(cfg.epochs):
        join = Join([model]) if dist.is_initialized() else contextlib.nullcontext()
        with join:
            stopped = _epoch(cfg, workload, model, source, device, loss_fn, optimizer, stats, corrupt, epoch, budget)
        if stopped:
            break
    return stats, corrupt


def _epoch(cfg, workload, model, source, device, loss_fn, optimizer, stats, corrupt, epoch, budget) -> bool:
    last = time.perf_counter()
    for batch in source.batches(epoch):
        ready = time.perf_counter()
        corrupt.extend(batch.corrupt)
        budget.add(epoch, batch.corrupt)
        if len(batch) == 0:
            batch.release()
            continue
        x = workload.normalize(batch.pixels.to(device, non_blocking=True))
        y = batch.labels.to(device, non_blocking=True)
        batch.release(_copy_done(device))
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()  # also waits for the device, so compute time is real
        done = time.perf_counter()
        stats.record(wait=ready - last, compute=done - ready, samples=len(batch))
        if stats.steps % cfg.log_every == 0:
            print(stats.last_step_line(epoch=epoch, loss=loss_value), flush=True)
        last = done
        if cfg.max_steps and stats.steps >= cfg.max_steps:
            return True
    return False


def _copy_done(device: torch.device):
    """An event the buffer pool waits on before reusing a buffer still being copied to the GPU."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record()
    return event


@torch.no_grad()
def _validation_shards(cluster) -> list:
    channel = cluster.channel("validation", required=False)
    return list_shards(channel) if channel else []


def _validate(cfg, cluster, workload, model, device, shards: list) -> float | None:
    if not shards:
        print(f"[trainer] {cluster.current_host}: no validation shards; accuracy not measured", flush=True)
        return None
    net = model.module if isinstance(model, DistributedDataParallel) else model
    net.eval()
    correct = total = 0
    loader = batch_loader(ShardDataset(shards, workload, train=False), batch_size=cfg.batch_size, num_workers=min(2, available_cpus()))
    for batch in loader:
        if len(batch) == 0:
            continue
        logits = net(workload.normalize(batch.pixels.to(device)))
        correct += int((logits.argmax(1).cpu() == batch.labels).sum())
        total += len(batch)
    net.train()
    accuracy = correct / total if total else None
    print(metric_line(accuracy=accuracy or 0.0, validation_samples=total), flush=True)
    return accuracy


def _isolated_costs(cfg, cluster, workload, model, device, shards: list) -> dict | None:
    """Decode alone and the step alone on this host (`steps.train.costs`), on the validation shards."""
    net = model.module if isinstance(model, DistributedDataParallel) else model
    costs = isolated_costs(workload, net, device, shards, batch_size=cfg.batch_size, learning_rate=cfg.learning_rate)
    if costs:
        print(cost_line(cluster.current_host, costs), flush=True)
    return costs


def _gather(summary: dict, corrupt: int) -> dict:
    """Sum samples and corrupt counts over trainer hosts; the slowest host sets the time."""
    if not dist.is_initialized():
        return {**summary, "global_samples": summary["samples"], "global_seen": summary["seen"], "corrupt": corrupt}
    sums = torch.tensor([summary["samples"], corrupt, summary["seen"]], dtype=torch.float64)
    dist.all_reduce(sums)
    slowest = torch.tensor([summary["elapsed_s"]], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return {**summary, "global_samples": int(sums[0]), "corrupt": int(sums[1]), "global_seen": int(sums[2]),
            "elapsed_s": float(slowest[0])}


def _write_outputs(cfg, cluster, model, summary, accuracy, corrupt, classes, isolated_costs=None, **measured) -> None:
    net = model.module if isinstance(model, DistributedDataParallel) else model
    cluster.model_dir.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), cluster.model_dir / "model.pt")
    metrics = training_metrics(cfg=cfg, cluster=cluster, framework="pytorch", summary=summary, accuracy=accuracy,
                               corrupt=corrupt, corrupt_count=summary["corrupt"], classes=classes, isolated_costs=isolated_costs,
                               **measured)
    for directory in (cluster.model_dir, cluster.output_data_dir):
        write_json_atomic(directory / "metrics.json", metrics)
    print(final_line(metrics), flush=True)

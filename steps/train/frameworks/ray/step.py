"""One Ray Train worker: the PyTorch train step over its share of Ray Data's batches.

The loop runs in one Ray Train worker per trainer host (the hosts'
`steps.train.frameworks.ray.node.TRAINER_RESOURCE`): the same train step and validation
(`steps.train.frameworks.pytorch.step`, in the precision the worker's device resolves), and the same per-step
timing, sample-id ledger and resume bookkeeping (`steps.train.core.progress`) as
`steps.train.frameworks.pytorch.trainer`, DistributedDataParallel with
`Join` (each worker's share of an epoch is whatever it pulled, not an
equal count: Ray Train's default split drops rows to make counts equal,
`steps.train.frameworks.ray.dataset.exact_split` does not).
"""

from __future__ import annotations

import contextlib
import io
import time

import numpy as np

from steps.train.core.constants import SHUFFLE_BUFFER
from steps.train.frameworks.ray.dataset import cached_workload


def host_batch(batch: dict, *, pinned: bool) -> tuple:
    """A Ray Data batch's rows that decoded (``ok``) as host tensors for `TrainStep` (uint8 NHWC pixels, int64 labels:
    it copies them to the device and normalises them there). ``pinned`` (a GPU trainer): the rows are gathered
    straight into page-locked memory, so the step's non-blocking copy is asynchronous (from pageable memory it waits);
    torch's caching host allocator keeps each block until its copy is done and reuses it. Either way one copy on the
    CPU, the one that drops the rows that did not decode (Ray's own arrays may be read-only views of its object store)."""
    import torch

    ok = batch["ok"]
    tensors = []
    for rows in (batch["pixels"], batch["labels"]):
        out = torch.empty((int(ok.sum()), *rows.shape[1:]), dtype=getattr(torch, rows.dtype.name), pin_memory=pinned)
        np.compress(ok, rows, axis=0, out=out.numpy())
        tensors.append(out)
    return tuple(tensors)


def train_loop(config: dict) -> None:
    """One Ray Train worker: every epoch of its share, timed and accounted; rank 0 reports the run."""
    import ray.train
    import torch
    import torch.distributed as dist
    from ray.train.torch import prepare_model
    from torch.distributed.algorithms.join import Join

    from steps.train.core.config import TrainConfig
    from steps.train.core.precision import precision_line
    from steps.train.core.progress import Progress
    from steps.train.frameworks.pytorch.step import (
        TrainStep,
        all_objects,
        pick_device,
        require_compiler,
        resolve_precision,
        to_device,
    )
    from steps.train.frameworks.ray.checkpoint import resumed, resumed_progress, save

    cfg = TrainConfig(**config["cfg"])
    workload = cached_workload(cfg.workload, cfg.workload_options)
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = pick_device()
    require_compiler(cfg.compile, device)
    precision = resolve_precision(cfg.precision, device)
    print(precision_line(f"Ray Train worker {rank}", cfg.precision, precision, device.type), flush=True)
    torch.manual_seed(cfg.seed)
    saved = resumed(config.get("resume"), world)
    net = to_device(workload.build_model(config["classes"]), device)  # its layout before prepare_model wraps it in DDP
    if saved:
        net.load_state_dict(saved["model"])
    model = prepare_model(net)
    optimizer = workload.optimizer(model.parameters(), cfg.learning_rate)
    progress = Progress.fresh(cfg)
    if saved:
        optimizer.load_state_dict(saved["optimizer"])
        progress = resumed_progress(saved, rank, cfg, config["checkpoint_folder"])
    step = TrainStep(workload, model, optimizer, device, precision, cfg.compile)
    if saved and saved.get("scaler") is not None and step.scaler.is_enabled():
        step.scaler.load_state_dict(saved["scaler"])
    shard = ray.train.get_dataset_shard("train")
    sources: dict[str, list] = {}  # node -> [samples, decode CPU seconds] this attempt: nodes change with a restart
    # a resumed run that had reached max_steps trains no more
    for epoch in range(progress.epoch, progress.epoch if progress.reached(cfg.max_steps) else cfg.epochs):
        # with world > 1 the model is Ray Train's DistributedDataParallel, a Joinable; its declared type is Module
        with Join([model]) if world > 1 else contextlib.nullcontext():  # type: ignore[list-item]
            stopped = _epoch(cfg, shard, step, progress, sources, epoch)
        progress.close_epoch(epoch, all_objects)
        if stopped:
            break
        save(config["results"], rank, world, net, step, epoch + 1, progress)
    _report(config, cfg, rank, workload, net, device, precision, progress, sources)
    if dist.is_initialized():
        dist.barrier()


def _epoch(cfg, shard, step, progress, sources: dict[str, list], epoch: int) -> bool:
    """One epoch of this worker's share; True when it reached max_steps."""
    last = time.perf_counter()
    for batch in shard.iter_batches(batch_size=cfg.batch_size, batch_format="numpy", local_shuffle_buffer_size=SHUFFLE_BUFFER):
        ready = time.perf_counter()
        ok = batch["ok"]
        progress.corrupt += [(int(i), str(e)) for i, e in zip(batch["ids"][~ok], batch["error"][~ok])]
        for node, cpu_s in zip(batch["node"], batch["cpu_s"]):
            seen = sources.setdefault(str(node), [0, 0.0])
            seen[0] += 1
            seen[1] += float(cpu_s)
        progress.ledger.add(epoch, batch["ids"].tolist())
        if not ok.any():
            continue
        loss_value = step(*host_batch(batch, pinned=step.device.type == "cuda"))
        done = time.perf_counter()
        progress.stepped(cfg, epoch=epoch, wait=ready - last, compute=done - ready, samples=int(ok.sum()), loss=loss_value)
        last = time.perf_counter()
        if progress.reached(cfg.max_steps):
            return True
    return False


def _report(config: dict, cfg, rank: int, workload, net, device, precision: str, progress, sources: dict) -> None:
    """Every worker's summary to rank 0, which validates, measures the isolated costs and hands the run's report and
    model to the results actor."""
    import ray
    import torch

    from steps.formats.webdataset import list_shards
    from steps.train.core.precision import precision_document
    from steps.train.frameworks.pytorch.step import all_objects, isolated_costs, validate

    summaries = all_objects({"summary": progress.stats.summary(), "corrupt": progress.corrupt, "sources": sources})
    if rank != 0:
        return
    validation = list_shards(config["validation"]) if config.get("validation") else []
    report = {
        "ranks": summaries,
        "sample_ledger": progress.ledger_report(),
        "precision": precision_document(cfg.precision, precision),
        "model_parameters": sum(p.numel() for p in net.parameters()),  # the planner's all-reduce model
        "accuracy": validate(workload, net, device, validation, batch_size=cfg.batch_size, num_workers=0, precision=precision)[0],
        "isolated_costs": isolated_costs(
            workload,
            net,
            device,
            validation,
            batch_size=cfg.batch_size,
            learning_rate=cfg.learning_rate,
            precision=precision,
        )
        if validation
        else None,
    }
    buffer = io.BytesIO()
    torch.save(net.state_dict(), buffer)
    ray.get(ray.get_actor(config["results"]).put.remote(report, buffer.getvalue()))

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
from steps.formats.webdataset import list_shards
from steps.train.core.cluster import Cluster, available_cpus, resolve
from steps.train.core.config import TrainConfig
from steps.train.core.corrupt import CorruptBudget
from steps.train.core.cost_document import cost_line
from steps.train.core.errors import Interrupted
from steps.train.core.gpus import gpu_use, idle_gpus_line, require_usable_gpus
from steps.train.core.manifest import read_classes
from steps.train.core.metrics import metric_line, training_metrics
from steps.train.core.outputs import write_outputs
from steps.train.core.precision import precision_document, precision_line
from steps.train.core.progress import Progress
from steps.train.core.terminate import TERMINATE
from steps.train.dataplane.auth import job_secret
from steps.train.dataplane.watch import failure_reason
from steps.train.frameworks.pytorch.checkpoint import Checkpoints, interrupted, resume_progress, save_checkpoint
from steps.train.frameworks.pytorch.data import DataServiceClient, LocalSource
from steps.train.frameworks.pytorch.local_decode import LocalDecoder, spare_workers
from steps.train.frameworks.pytorch.step import (
    TrainStep,
    all_objects,
    bare,
    isolated_costs,
    pick_device,
    require_compiler,
    resolve_precision,
    to_device,
    validate,
)
from steps.train.workload import Workload


def run_trainer(cfg: TrainConfig, cluster: Cluster, workload: Workload) -> None:
    device = pick_device()
    require_usable_gpus(
        cluster.current_host,
        cluster.instance_type,
        torch.cuda.device_count() if device.type == "cuda" else 0,
        "pytorch",
        how="torch.cuda.is_available() is false",
    )
    require_compiler(cfg.compile, device)
    precision = resolve_precision(cfg.precision, device)
    print(precision_line(cluster.current_host, cfg.precision, precision, device.type), flush=True)
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(available_cpus())
    classes = read_classes(cluster.channel("manifest"))
    _init_distributed(cfg, cluster, device)
    gpus = gpu_use(int(device.type == "cuda"), torch.cuda.device_count(), "pytorch")
    if warning := idle_gpus_line(cluster.current_host, gpus):
        print(warning, flush=True)
    source: LocalSource | DataServiceClient | None = None
    try:
        model = to_device(workload.build_model(len(classes)), device)
        optimizer = workload.optimizer(model.parameters(), cfg.learning_rate)
        checkpoints, progress = _checkpoints_and_progress(cfg, cluster, model, optimizer)
        if cluster.heterogeneous:
            source = _hybrid_source(cfg, cluster, workload, model, device, progress, precision)
        else:
            source = LocalSource(cfg, cluster, workload, pinned=device.type == "cuda")
            source.resume(progress.epoch, progress.consumed)
        if dist.is_initialized():
            model = DistributedDataParallel(model)
        train_epochs(
            cfg,
            workload,
            model,
            source,
            device,
            optimizer=optimizer,
            progress=progress,
            checkpoints=checkpoints,
            precision=precision,
        )
        stats, corrupt = progress.stats, progress.corrupt
        validation = _validation_shards(cluster) if cluster.rank == 0 else []
        accuracy = _validate(cfg, cluster, workload, model, device, validation, precision) if cluster.rank == 0 else None
        summary = _gather(stats.summary(), len(corrupt))
        measured = source.measurements()
        local = [m for m in all_objects(measured.pop("local_decode", None)) if m]
        files = {}
        if cluster.rank == 0:
            costs = _isolated_costs(cfg, cluster, workload, model, device, validation, precision)
            files = _write_outputs(
                cfg,
                cluster,
                model,
                summary,
                accuracy,
                corrupt,
                classes,
                isolated_costs=costs,
                sample_ledger=progress.ledger_report(),
                checkpoints={"saved": checkpoints.saves, "seconds": round(checkpoints.seconds, 3)},
                local_decode=local,
                gpus=gpus,
                precision=precision_document(cfg.precision, precision),
                **measured,
            )
        source.close("completed", files=files)  # every data host keeps a copy of the results
    except BaseException as exc:
        if source is not None:
            source.close("failed", failure_reason(cluster.current_host, exc))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _checkpoints_and_progress(cfg: TrainConfig, cluster: Cluster, model, optimizer) -> tuple[Checkpoints, Progress]:
    """This trainer's checkpoints, and its run so far: from the newest checkpoint where the job left one, else fresh."""
    checkpoints = Checkpoints(
        cluster.checkpoint_dir,
        rank=cluster.rank,
        world=cluster.world_size,
        every_steps=cfg.checkpoint_every_steps,
        every_s=cfg.checkpoint_every_s,
    )
    resumed = checkpoints.load()
    if resumed is None:
        return checkpoints, Progress.fresh(cfg)
    return checkpoints, resume_progress(*resumed, cluster.rank, model, optimizer, checkpoints.folder)


def _hybrid_source(
    cfg, cluster: Cluster, workload: Workload, model, device, progress: Progress, precision: str
) -> DataServiceClient:
    """The data hosts' streams, merged with this host's own decode workers where it has vCPUs to spare
    (`steps.train.frameworks.pytorch.local_decode`); every trainer weighs the split by the same numbers."""
    found = spare_workers(cfg, cluster, workload, model, device, precision)
    print(
        f"[trainer] {cluster.current_host}: {found.workers} local decode worker(s) of {found.cpus} vCPU(s), "
        f"{found.kept} kept for the training loop ({found.why})",
        flush=True,
    )
    if found.workers:
        torch.set_num_threads(found.kept)
    pinned = device.type == "cuda"
    source = DataServiceClient(cfg, me=cluster.current_host, data_hosts=cluster.data_hosts, secret=job_secret(), pinned=pinned)
    source.connect(progress.epoch, progress.consumed, trainer_workers=_all_ints(found.workers))
    take = source.split.trainer(cluster.rank)
    if found.workers:
        source.add_local(
            LocalDecoder(
                cfg,
                cluster.current_host,
                len(cluster.data_hosts) + cluster.rank,
                workload,
                found,
                take,
                pinned=pinned,
                epoch=progress.epoch,
                consumed=progress.consumed,
            )
        )
    return source


def _all_ints(value: int) -> list[int]:
    """``value`` of every trainer host, by rank."""
    return [int(v) for v in all_objects(value)]


def process_group_backend(device: torch.device) -> str:
    """On GPUs, NCCL for the model's gradients and gloo for what stays in host memory (the summaries and objects the
    trainers exchange: NCCL has no CPU tensors); gloo alone on CPUs."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


def _init_distributed(cfg: TrainConfig, cluster: Cluster, device: torch.device) -> None:
    if cluster.world_size < 2:
        return
    # the interface SageMaker names in resourceconfig.json (eth0; lo in the local emulator)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", cluster.network_interface)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", cluster.network_interface)
    dist.init_process_group(
        backend=process_group_backend(device),
        init_method=f"tcp://{resolve(cluster.trainer_hosts[0])}:{cfg.dist_port}",
        rank=cluster.rank,
        world_size=cluster.world_size,
        timeout=datetime.timedelta(seconds=cfg.connect_timeout_s),
    )


def train_epochs(
    cfg: TrainConfig,
    workload: Workload,
    model: torch.nn.Module,
    source: LocalSource | DataServiceClient,
    device: torch.device,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    progress: Progress | None = None,
    checkpoints: Checkpoints | None = None,
    precision: str | None = None,
) -> Progress:
    """Every epoch from where ``progress`` stands (None: from the start, with the workload's optimizer), saving checkpoints
    as `steps.train.frameworks.pytorch.checkpoint.Checkpoints` says (None: none); returns the run so far. The trainer's
    loop, and what `bench/` times."""
    optimizer = optimizer if optimizer is not None else workload.optimizer(model.parameters(), cfg.learning_rate)
    progress = progress if progress is not None else Progress.fresh(cfg)
    checkpoints = checkpoints if checkpoints is not None else Checkpoints(None)
    precision = precision or resolve_precision(cfg.precision, device)  # the trainer hands the one it resolved at its start
    world = dist.get_world_size() if dist.is_initialized() else 1
    budget = CorruptBudget(cfg.max_corrupt_share, source.samples_per_epoch // world)  # this trainer's share of an epoch
    budget.restore(progress.epoch, progress.budget_seen)
    step = TrainStep(workload, model, optimizer, device, precision, cfg.compile)
    if progress.scaler is not None and step.scaler.is_enabled():
        step.scaler.load_state_dict(progress.scaler)
    TERMINATE.armed = True
    try:
        if progress.reached(cfg.max_steps):
            return progress
        for epoch in range(progress.epoch, cfg.epochs):
            # under torch.distributed the model is DistributedDataParallel, a Joinable; its declared type is Module
            join = Join([model]) if dist.is_initialized() else contextlib.nullcontext()  # type: ignore[list-item]
            with join:
                stopped = _epoch(cfg, step, source, progress, epoch, budget, checkpoints)
            if stopped:
                break
            progress.close_epoch(epoch, all_objects)
            save_checkpoint(checkpoints, progress, step, "end of epoch", end_of_epoch=True)
            if TERMINATE.requested:
                raise interrupted(progress, checkpoints)
    except Interrupted:
        raise
    except BaseException as exc:
        # between steps the state is whole: save it, so a retried or restarted job resumes here
        whole = world == 1 and not progress.in_step
        if TERMINATE.requested:  # the data hosts got SIGTERM too, and one said so first: still an interruption
            if whole:
                save_checkpoint(checkpoints, progress, step, "SIGTERM", quiet_failure=True)
            raise interrupted(progress, checkpoints) from exc
        if whole and not isinstance(exc, UserError):
            save_checkpoint(checkpoints, progress, step, f"after {type(exc).__name__}", quiet_failure=True)
        raise
    finally:
        TERMINATE.armed = False
    return progress


def _epoch(cfg, step: TrainStep, source, progress: Progress, epoch, budget, checkpoints) -> bool:
    last = time.perf_counter()
    for batch in source.batches(epoch):
        ready = time.perf_counter()
        progress.in_step = True
        progress.corrupt.extend(batch.corrupt)
        progress.budget_seen.extend(batch.corrupt)
        budget.add(epoch, batch.corrupt)
        if len(batch):
            x, y = step.inputs(batch.pixels, batch.labels)
            ids = batch.ids.tolist()
            batch.release(_copy_done(step.device))
            loss_value = step.update(x, y)
            done = time.perf_counter()
            progress.stepped(cfg, epoch=epoch, wait=ready - last, compute=done - ready, samples=len(batch), loss=loss_value)
        else:
            ids = []
            batch.release()
        progress.ledger.add(epoch, ids + [sid for sid, _ in batch.corrupt])
        progress.in_step = False
        if not len(batch):
            continue
        sigterm = TERMINATE.requested and checkpoints.world == 1  # with several trainers only at points they all reach
        if sigterm or checkpoints.due(progress.iteration, progress.stats.steps):
            save_checkpoint(checkpoints, progress, step, "SIGTERM" if sigterm else "interval")
            done = time.perf_counter()  # saving is not waiting for data: the next step's wait starts now
        if TERMINATE.requested:
            raise interrupted(progress, checkpoints)
        last = done
        if progress.reached(cfg.max_steps):
            return True
    return False


def _copy_done(device: torch.device):
    """An event the buffer pool waits on before reusing a buffer still being copied to the GPU."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record()
    return event


def _validation_shards(cluster) -> list:
    channel = cluster.channel("validation", required=False)
    return list_shards(channel) if channel else []


def _validate(cfg, cluster, workload, model, device, shards: list, precision: str) -> float | None:
    if not shards:
        print(f"[trainer] {cluster.current_host}: no validation shards; accuracy not measured", flush=True)
        return None
    accuracy, total = validate(
        workload, model, device, shards, batch_size=cfg.batch_size, num_workers=min(2, available_cpus()), precision=precision
    )
    print(metric_line(accuracy=accuracy or 0.0, validation_samples=total), flush=True)
    return accuracy


def _isolated_costs(cfg, cluster, workload, model, device, shards: list, precision: str) -> dict | None:
    """Decode alone and the step alone on this host (`steps.train.frameworks.pytorch.step.isolated_costs`), on the
    validation shards."""
    costs = isolated_costs(
        workload,
        bare(model),
        device,
        shards,
        batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        precision=precision,
    )
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
    return {
        **summary,
        "global_samples": int(sums[0]),
        "corrupt": int(sums[1]),
        "global_seen": int(sums[2]),
        "elapsed_s": float(slowest[0]),
    }


def _write_outputs(cfg, cluster, model, summary, accuracy, corrupt, classes, isolated_costs=None, **measured) -> dict[str, bytes]:
    metrics = training_metrics(
        cfg=cfg,
        cluster=cluster,
        framework="pytorch",
        summary=summary,
        accuracy=accuracy,
        corrupt=corrupt,
        corrupt_count=summary["corrupt"],
        classes=classes,
        isolated_costs=isolated_costs,
        model_parameters=sum(p.numel() for p in bare(model).parameters()),  # the planner's all-reduce model
        **measured,
    )
    return write_outputs(cluster, metrics, lambda folder: torch.save(bare(model).state_dict(), folder / "model.pt"))

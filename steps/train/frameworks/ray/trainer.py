"""The Ray path's data pipeline and training loop: Ray Data decodes on every CPU, Ray Train trains on the trainer hosts.

The pipeline reads the WebDataset shards (`ray.data.read_webdataset`, the raw
bytes: the workload decodes) and runs the workload's decode as map tasks,
which Ray schedules on any node with a free CPU: the data hosts' and the
trainer hosts' own spare ones alike. A sample that fails to decode travels
as a row marked not ``ok`` with its error, so the trainer counts and names
it, as on the other paths.

The loop runs in one Ray Train worker per trainer host (the hosts'
`steps.train.frameworks.ray.node.TRAINER_RESOURCE`): the same train step and validation
(`steps.train.frameworks.pytorch.step`, in the precision the worker's device resolves), per-step timing and sample-id ledger as
`steps.train.frameworks.pytorch.trainer`, DistributedDataParallel with
`Join` (each worker's share of an epoch is whatever it pulled, not an
equal count: Ray Train's default split drops rows to make counts equal,
`ExactSplit` does not).
"""

from __future__ import annotations

import contextlib
import io
import time
from typing import TYPE_CHECKING

import numpy as np

from steps.formats.webdataset import IMAGE_EXTS, LABEL_EXT
from steps.train.core.constants import SHUFFLE_BUFFER

if TYPE_CHECKING:  # ray is imported where used, as the functions below do
    import ray.data
    from ray.train import DataConfig

RAY_CHECKPOINT = "ray_checkpoint.pt"  # in the head's checkpoint folder: model, optimizer and the run so far, per epoch
_WORKLOADS: dict = {}


def _workload(name: str, options: dict):
    from steps.train.workload import load_workload

    key = (name, repr(sorted(options.items())))
    if key not in _WORKLOADS:
        _WORKLOADS[key] = load_workload(name, options)
    return _WORKLOADS[key]


def decode_batch(batch: dict, *, workload: str, options: dict) -> dict:
    """Rows of ``read_webdataset`` (key, image bytes, label bytes) -> decoded uint8 pixels, label, id, and per row
    whether it decoded (``ok``, ``error``), the CPU seconds it took and the node it ran on."""
    import ray

    w = _workload(workload, options)
    started = time.thread_time()
    keys = batch["__key__"]
    images = [
        next((batch[ext][i] for ext in IMAGE_EXTS if ext in batch and batch[ext][i] is not None), None) for i in range(len(keys))
    ]
    rng = np.random.default_rng()  # augmentation differs per epoch; the Ray path does not replay it bit for bit
    pixels, labels, ids, ok, errors = [], [], [], [], []
    for key, raw, label in zip(keys, images, batch[LABEL_EXT] if LABEL_EXT in batch else [None] * len(keys)):
        ids.append(int(key))
        try:
            if raw is None or label is None:
                raise ValueError("an image or a label file is missing")
            value = int(bytes(label).decode())
            decoded = w.decode(bytes(raw), train=True, rng=rng)
        except Exception as exc:  # noqa: BLE001 - a bad sample is counted and named, never the end of the epoch
            value, decoded, error = 0, np.zeros((w.image_size, w.image_size, 3), np.uint8), f"{type(exc).__name__}: {exc}"[:200]
        else:
            error = ""
        pixels.append(decoded)
        labels.append(value)
        ok.append(not error)
        errors.append(error)
    cpu = (time.thread_time() - started) / max(len(keys), 1)
    node = ray.util.get_node_ip_address()
    return {
        "pixels": np.stack(pixels),
        "labels": np.asarray(labels, np.int64),
        "ids": np.asarray(ids, np.int64),
        "ok": np.asarray(ok),
        "error": np.asarray(errors, dtype=object),
        "cpu_s": np.full(len(keys), cpu),
        "node": np.asarray([node] * len(keys), dtype=object),
    }


def training_dataset(files: list[str], workload: str, options: dict, batch_size: int) -> ray.data.Dataset:
    """Every shard's samples, decoded by Ray Data map tasks on whichever node has a CPU free."""
    import ray

    ds = ray.data.read_webdataset(files, decoder=None, override_num_blocks=max(len(files), 1))
    return ds.randomize_block_order().map_batches(
        decode_batch,
        fn_kwargs={"workload": workload, "options": options},
        batch_size=batch_size,
        batch_format="numpy",
        num_cpus=1,
    )


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


def exact_split() -> DataConfig:
    """Ray Train's DataConfig, splitting every dataset among the workers without dropping rows (``equal=False``)."""
    from ray.train import DataConfig

    class ExactSplit(DataConfig):
        def configure(self, datasets, world_size, worker_handles, worker_node_ids, **kwargs):
            output = [{} for _ in range(world_size)]
            for name, ds in datasets.items():
                ds = ds.copy(ds)
                ds.context.execution_options = self._resolve_execution_options(name)
                for i, split in enumerate(ds.streaming_split(world_size, equal=False, locality_hints=worker_node_ids)):
                    output[i][name] = split
            return output

    return ExactSplit()


def train_loop(config: dict) -> None:
    """One Ray Train worker: every epoch of its share, timed and accounted; rank 0 reports the run."""
    import ray.train
    import torch
    import torch.distributed as dist
    from ray.train.torch import prepare_model
    from torch.distributed.algorithms.join import Join

    from steps.formats.webdataset import list_shards
    from steps.train.core.config import TrainConfig
    from steps.train.core.ledger import Ledger
    from steps.train.core.metrics import StepStats
    from steps.train.core.precision import precision_document, precision_line
    from steps.train.frameworks.pytorch.step import (
        TrainStep,
        all_objects,
        isolated_costs,
        pick_device,
        require_compiler,
        resolve_precision,
        to_device,
        validate,
    )

    cfg = TrainConfig(**config["cfg"])
    workload = _workload(cfg.workload, cfg.workload_options)
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = pick_device()
    require_compiler(cfg.compile, device)
    precision = resolve_precision(cfg.precision, device)
    print(precision_line(f"Ray Train worker {rank}", cfg.precision, precision, device.type), flush=True)
    torch.manual_seed(cfg.seed)
    saved = _resumed(config.get("resume"), world)
    net = to_device(workload.build_model(config["classes"]), device)  # its layout before prepare_model wraps it in DDP
    if saved:
        net.load_state_dict(saved["model"])
    model = prepare_model(net)
    optimizer = workload.optimizer(model.parameters(), cfg.learning_rate)
    shard = ray.train.get_dataset_shard("train")
    stats, ledger, corrupt, sources = StepStats(cfg.warmup_steps), Ledger(), [], {}
    start, resumes = 0, 0
    if saved:
        optimizer.load_state_dict(saved["optimizer"])
        mine = saved["ranks"][rank]
        stats.restore(mine["stats"])
        # what each node decoded (sources) counts this attempt, as the data hosts' own figures do on the other paths:
        # nodes and their addresses change with a restart
        corrupt = [tuple(c) for c in mine["corrupt"]]
        start, resumes = saved["epoch"], saved["resumes"] + 1
        ledger = Ledger(saved["ledger"], start)
        if rank == 0:
            print(
                f"[checkpoint] resuming from {config['checkpoint_folder']}: epoch {start}, step {stats.steps} (resume "
                f"{resumes}); an interrupted epoch is redone whole",
                flush=True,
            )
    step = TrainStep(workload, model, optimizer, device, precision, cfg.compile)
    if saved and saved.get("scaler") is not None and step.scaler.is_enabled():
        step.scaler.load_state_dict(saved["scaler"])
    stopped = False
    done = bool(cfg.max_steps and stats.steps >= cfg.max_steps)  # a resumed run that had reached max_steps
    for epoch in range(start, start if done else cfg.epochs):
        last = time.perf_counter()
        with Join([model]) if world > 1 else contextlib.nullcontext():
            for batch in shard.iter_batches(
                batch_size=cfg.batch_size, batch_format="numpy", local_shuffle_buffer_size=SHUFFLE_BUFFER
            ):
                ready = time.perf_counter()
                ok = batch["ok"]
                corrupt += [(int(i), str(e)) for i, e in zip(batch["ids"][~ok], batch["error"][~ok])]
                for node, cpu_s in zip(batch["node"], batch["cpu_s"]):
                    seen = sources.setdefault(str(node), [0, 0.0])
                    seen[0] += 1
                    seen[1] += float(cpu_s)
                ledger.add(epoch, batch["ids"].tolist())
                if not ok.any():
                    continue
                loss_value = step(*host_batch(batch, pinned=device.type == "cuda"))
                done = time.perf_counter()
                stats.record(wait=ready - last, compute=done - ready, samples=int(ok.sum()))
                if stats.steps % cfg.log_every == 0:
                    print(stats.last_step_line(epoch=epoch, loss=loss_value), flush=True)
                last = time.perf_counter()
                if cfg.max_steps and stats.steps >= cfg.max_steps:
                    stopped = True
                    break
        everyone = all_objects(ledger.ids)
        ledger.close_epoch(epoch, np.concatenate(everyone))
        if stopped:
            break
        _checkpoint(config["results"], rank, world, net, step, epoch + 1, stats, corrupt, ledger, resumes)
    summaries = all_objects({"summary": stats.summary(), "corrupt": corrupt, "sources": sources})
    report = {}
    if rank == 0:
        validation = list_shards(config["validation"]) if config.get("validation") else []
        report = {
            "ranks": summaries,
            "ledger": ledger.epochs,
            "resumes": resumes,
            "precision": precision_document(cfg.precision, precision),
            "model_parameters": sum(p.numel() for p in net.parameters()),  # the planner's all-reduce model
            "accuracy": validate(
                workload, net, device, validation, batch_size=cfg.batch_size, num_workers=0, precision=precision
            )[0],
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
    if dist.is_initialized():
        dist.barrier()


def _checkpoint(results: str, rank: int, world: int, net, step, epoch: int, stats, corrupt, ledger, resumes: int) -> None:
    """At an epoch's end: every worker's run so far, with rank 0's model, optimizer and (fp16) loss scaler, to the
    results actor, which
    writes it into the head's checkpoint folder before the next epoch starts. ``epoch``: the next one to run."""
    import ray
    import torch

    from steps.train.frameworks.pytorch.step import all_objects

    ranks = all_objects({"stats": stats.state(), "corrupt": [list(c) for c in corrupt]})
    if rank == 0:
        buffer = io.BytesIO()
        torch.save(
            {
                "version": 1,
                "epoch": epoch,
                "world": world,
                "model": net.state_dict(),
                "optimizer": step.optimizer.state_dict(),
                "scaler": step.scaler.state_dict() if step.scaler.is_enabled() else None,
                "ranks": ranks,
                "ledger": ledger.epochs,
                "resumes": resumes,
            },
            buffer,
        )
        ray.get(ray.get_actor(results).checkpoint.remote(buffer.getvalue(), epoch, stats.steps))


def _resumed(ref, world: int) -> dict | None:
    """The checkpoint the driver found (an object reference to its bytes), or None. A checkpoint of another number of
    trainer hosts is refused: each worker restores its own part."""
    if ref is None:
        return None
    import ray
    import torch

    from steps.common.errors import UserError

    state = torch.load(io.BytesIO(ray.get(ref)), map_location="cpu", weights_only=False)
    if state.get("version") != 1 or state.get("world") != world:
        raise UserError(
            f"the Ray checkpoint {RAY_CHECKPOINT} was written by {state.get('world')} trainer host(s) (version "
            f"{state.get('version')}), this job has {world}: restart with the same instance groups, or remove "
            "the checkpoint to start over",
            headline="checkpoint does not fit",
        )
    return state

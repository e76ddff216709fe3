"""The Ray path (``framework=ray``): a Ray cluster over the job's hosts, Ray Data decoding on every CPU, Ray Train on the GPUs.

Every host starts its Ray node (`steps.train.frameworks.ray.node`: the first trainer host
is the head). The head's process is the driver: it waits for every host's
node, builds the Ray Data pipeline over the training shards
(`steps.train.frameworks.ray.dataset`), trains with a ``TorchTrainer`` (one worker per
trainer host, each running `steps.train.frameworks.ray.step`), writes the same ``metrics.json`` as the other paths and ends
the job. Ray decides where each decode task runs, so the trainer hosts' spare
CPUs decode beside the data hosts' (hybrid by construction); ``trainer_cpus``
is what each Ray Train worker reserves (auto: the step's busy vCPUs, measured,
plus one, as on the PyTorch path: `steps.train.frameworks.ray.local_decode`).

Ray has no notion of "the job is over" for the nodes that joined it, so the
head also keeps the project's authenticated control link to every other host
(`steps.train.dataplane.watch` on the head, `steps.train.frameworks.ray.data_host` on the others), as the
TensorFlow trainer does with its data hosts:
both sides heartbeat, the head ends the job with STOP carrying its results (or
the reason it failed), and a host whose head goes silent or drops the link
without STOP exits non-zero naming it. Every host stops its Ray node, and
every process Ray started for it, before it exits.

The training shards must be at the same path on every host: the train channel
is replicated to both groups (or on FSx), which is how Ray Data's read tasks,
placed on any node, open the files the driver listed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steps.common.errors import UserError, describe, record_failure
from steps.common.metrics_json import Metrics
from steps.formats.webdataset import count_samples, list_shards
from steps.train.core.cluster import TRAINER, Cluster, resolve
from steps.train.core.config import TrainConfig
from steps.train.core.gpus import gpu_use, idle_gpus_line, require_usable_gpus
from steps.train.core.manifest import read_classes, train_channel
from steps.train.core.metrics import training_metrics
from steps.train.core.outputs import write_outputs
from steps.train.dataplane import messages
from steps.train.dataplane.auth import job_secret
from steps.train.dataplane.errors import HostLost
from steps.train.dataplane.meter import arrived
from steps.train.dataplane.settings import DataPlaneSettings
from steps.train.dataplane.watch import Peer, PeerWatch, failure_reason
from steps.train.frameworks.ray.checkpoint import saved_checkpoint, write_checkpoint
from steps.train.frameworks.ray.data_host import follow
from steps.train.frameworks.ray.errors import RayNodeFailed
from steps.train.frameworks.ray.job_trainer import job_trainer
from steps.train.frameworks.ray.local_decode import decoded_where, kept_cpus, step_measure
from steps.train.frameworks.ray.node import TRAINER_RESOURCE, RayNode, per_trainer_host

RESULTS_ACTOR = "hetero-results"


def run_trainer(cfg: TrainConfig, cluster: Cluster, workload) -> None:
    """What every host of a Ray job runs: its Ray node, then the head's driver on the first trainer host, on every other
    host the follower (`steps.train.frameworks.ray.data_host`)."""
    if cluster.role == TRAINER:  # before its Ray node offers the host's GPUs (none) to Ray Train
        import torch

        require_usable_gpus(
            cluster.current_host,
            cluster.instance_type,
            torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "ray",
            how="torch.cuda.is_available() is false",
        )
    node = RayNode(cfg, cluster)
    completed = False
    try:
        if node.is_head:
            _run_head(cfg, cluster, node)
        else:
            follow(cfg, cluster, node)
        completed = True
    except BaseException as exc:
        # on record before the node goes: a driver whose raylet is killed can be ended by Ray's C++ at once (a quick
        # exit, no Python unwinding), and the host would end saying nothing
        record_failure(cluster.output_dir, exc)
        raise
    finally:
        _end(node, completed)


def _end(node: RayNode, completed: bool) -> None:
    """This host's Ray node, gone: after a completed job the driver disconnects and the node stops in order; after a
    failure (a lost host, SIGTERM) the node is killed at once, since the job's other hosts exit as soon as they learn
    of it and SageMaker bills until the last one has."""
    try:
        import ray

        if completed and ray.is_initialized():
            ray.shutdown()
    finally:
        node.stop(graceful=completed)


# -- the head: driver, trainer of record, end of the job -------------------------------------------------------


def _run_head(cfg: TrainConfig, cluster: Cluster, node: RayNode) -> None:
    others = tuple(h for g in cluster.groups for h in g.hosts if h != cluster.current_host)
    links = _followers(cfg, cluster, others)
    try:
        links.connect()
        links.watch()
        node.start()
        links.send_all(messages.Start(ray=node.address))  # where to join: the head picked its port
        node.connect()
        inputs = _read_inputs(cfg, cluster)  # this host's own work, while the other hosts' nodes join
        _await_nodes(cfg, len(others) + 1, node, links)
        files = _train(cfg, cluster, links, inputs)
        links.close("completed", files=files)
    except BaseException as exc:  # a lost host by its own name (the others' failures lead with it), else the head's
        links.close("failed", describe(exc) if isinstance(exc, HostLost) else failure_reason(cluster.current_host, exc))
        raise


def _await_nodes(cfg: TrainConfig, count: int, node: RayNode, links: PeerWatch) -> None:
    import ray

    deadline = time.monotonic() + cfg.connect_timeout_s
    while True:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        if len(alive) >= count:
            print(
                f"[ray] head: {len(alive)} node(s), {int(ray.cluster_resources().get('CPU', 0))} CPU(s) in the cluster",
                flush=True,
            )
            return
        links.check()
        if not node.alive():
            raise RayNodeFailed("the Ray head node stopped before every host joined; its log is above")
        if time.monotonic() > deadline:
            raise RayNodeFailed(f"{len(alive)} of {count} Ray nodes joined within connect_timeout_s={cfg.connect_timeout_s:g}")
        time.sleep(0.5)


@dataclass(frozen=True)
class _Inputs:
    """What the head reads and measures on its own host before training: the shards, the classes, the step's measure
    (``trainer_cpus=auto``) and the results actor's process, started while the other hosts' nodes join."""

    shards: list[Path]
    samples: int
    classes: list[str]
    validation: Path | None
    measure: Callable[[], float | str]
    box: Any  # the results actor (`_results_actor`)


def _read_inputs(cfg: TrainConfig, cluster: Cluster) -> _Inputs:
    shards = list_shards(train_channel(cluster, cfg.shard_wait_s))
    if not shards:
        raise UserError(
            f"the Ray head {cluster.current_host} found no *.tar shards in {cluster.channel('train')}", headline="no shards"
        )
    classes = read_classes(cluster.channel("manifest"))
    inputs = _Inputs(
        shards=shards,
        samples=sum(count_samples(s) for s in shards),
        classes=classes,
        validation=cluster.channel("validation", required=False),
        measure=step_measure(cfg, shards, len(classes)),
        box=_results_actor(resolve(cluster.current_host), cluster.checkpoint_dir),
    )
    if cfg.trainer_cpus == "auto":  # the measure `kept_cpus` asks for once every node is there, taken now
        inputs.measure()
    return inputs


def _train(cfg: TrainConfig, cluster: Cluster, links: PeerWatch, inputs: _Inputs) -> dict[str, bytes]:
    import ray
    from ray.data import DataContext
    from ray.train import FailureConfig, RunConfig, ScalingConfig

    from steps.train.frameworks.ray.dataset import exact_split, training_dataset
    from steps.train.frameworks.ray.step import train_loop

    shards, classes, validation, box = inputs.shards, inputs.classes, inputs.validation, inputs.box
    saved = saved_checkpoint(cluster.checkpoint_dir)
    per_host = per_trainer_host("GPU")
    gpus = gpu_use(min(per_host, 1), per_host, "ray")  # a Ray Train worker per trainer host, on one GPU
    gpu = bool(per_host)
    if warning := idle_gpus_line(cluster.current_host, gpus):
        print(warning, flush=True)
    kept, why = kept_cpus(cfg, inputs.measure, cluster.world_size)
    print(
        f"[ray] head: {len(shards)} shard(s), {inputs.samples} samples; {cluster.world_size} Ray Train worker(s), {kept} CPU(s) "
        f"each{' and a GPU' if gpu else ''} ({why}); decode on every other CPU",
        flush=True,
    )
    DataContext.get_current().enable_progress_bars = False  # Ray Train hands the driver's context to the ingest
    trainer = job_trainer()(
        train_loop,
        train_loop_config={
            "cfg": cfg.as_dict(),
            "classes": len(classes),
            "results": RESULTS_ACTOR,
            "validation": str(validation) if validation else None,
            "resume": ray.put(saved) if saved else None,
            "checkpoint_folder": str(cluster.checkpoint_dir),
        },
        scaling_config=ScalingConfig(
            num_workers=cluster.world_size, use_gpu=gpu, resources_per_worker={"CPU": kept, TRAINER_RESOURCE: 1}
        ),
        datasets={
            "train": training_dataset(
                [str(s) for s in shards], cfg.workload, cfg.workload_options, cfg.batch_size, stream=kept > 0
            )
        },
        dataset_config=exact_split(),
        run_config=RunConfig(
            name="train", storage_path=str(cluster.output_data_dir / "ray"), failure_config=FailureConfig(max_failures=0)
        ),
    )
    started = time.perf_counter()
    _fit(trainer, cfg, links)
    wall = time.perf_counter() - started
    report, model = ray.get(box.get.remote())
    metrics = _metrics(cfg, cluster, report, classes, wall, kept, why, gpus)
    return write_outputs(cluster, metrics, lambda folder: (folder / "model.pt").write_bytes(model))


def _fit(trainer, cfg: TrainConfig, links: PeerWatch) -> None:
    """``trainer.fit()``, ended early when another host of the job is lost: SageMaker fails a job whose host fails
    anyway, so riding it out on Ray's retries would only keep the rest billing. The head's process then exits (its
    Ray node and workers with it) with the lost host's name."""
    outcome: list = []

    def fit() -> None:
        try:
            trainer.fit()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the driver's thread
            outcome.append(exc)

    thread = threading.Thread(target=fit, name="ray-train-fit", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(timeout=cfg.heartbeat_s)
        links.check()
    if outcome and outcome[0] is not None:
        raise outcome[0]


def _metrics(
    cfg: TrainConfig, cluster: Cluster, report: dict, classes: list[str], wall: float, kept: int, why: str, gpus: dict
) -> Metrics:
    """metrics.json from every worker's summary: sums over workers, the slowest sets the time; per node, what its
    decode tasks produced (data hosts as ``data_hosts``, trainer hosts as ``local_decode``)."""
    ranks = report["ranks"]
    summary = dict(ranks[0]["summary"])
    summary.update(
        global_samples=sum(r["summary"]["samples"] for r in ranks),
        global_seen=sum(r["summary"]["seen"] for r in ranks),
        elapsed_s=max(r["summary"]["elapsed_s"] for r in ranks),
    )
    corrupt = [c for r in ranks for c in r["corrupt"]]
    data_hosts, local = decoded_where(cluster, ranks, summary["global_seen"], wall, kept, why)
    return training_metrics(
        cfg=cfg,
        cluster=cluster,
        framework="ray",
        summary=summary,
        accuracy=report["accuracy"],
        corrupt=corrupt,
        corrupt_count=len(corrupt),
        classes=classes,
        isolated_costs=report["isolated_costs"],
        model_parameters=report["model_parameters"],
        local_decode=local,
        gpus=gpus,
        precision=report["precision"],
        sample_ledger=report["sample_ledger"],
        **arrived(data_hosts, 0, 0),
    )  # Ray moves blocks through its object store: no bytes measured


def _results_actor(head_ip: str, checkpoint_folder: Path):
    """Where rank 0 leaves the run's report and model for the driver, and each epoch's checkpoint in the head's
    checkpoint folder (synced to S3 by SageMaker): an actor on the head node."""
    import ray

    @ray.remote
    class Results:
        def __init__(self) -> None:
            self.value: tuple[dict, bytes] | None = None

        def put(self, report: dict, model: bytes) -> None:
            self.value = (report, model)

        def checkpoint(self, data: bytes, epoch: int, step: int) -> None:
            write_checkpoint(checkpoint_folder, data, epoch, step)

        def get(self):
            if self.value is None:
                raise RuntimeError("the training workers ended without reporting")
            return self.value

    # ray.remote makes the class an ActorClass (options, remote); mypy keeps a decorated class's own type (python/mypy#3135)
    actor = Results.options(name=RESULTS_ACTOR, resources={f"node:{head_ip}": 0.001}, num_cpus=0)  # type: ignore[attr-defined]
    return actor.remote()


def _followers(cfg: TrainConfig, cluster: Cluster, hosts: tuple[str, ...]) -> PeerWatch:
    """The head's control links to every other host: dial, prove the secret, heartbeat, watch, STOP."""
    return PeerWatch(
        DataPlaneSettings.of(cfg),
        [Peer(h, resolve(h)) for h in hosts],
        me=cluster.current_host,
        secret=job_secret(),
        label="host",
        error=HostLost,
        on_failure=lambda error: print(f"[ray] {error.one_line()}", flush=True),
    )

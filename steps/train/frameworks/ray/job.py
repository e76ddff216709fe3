"""The Ray path (``framework=ray``): a Ray cluster over the job's hosts, Ray Data decoding on every CPU, Ray Train on the GPUs.

Every host starts its Ray node (`steps.train.frameworks.ray.node`: the first trainer host
is the head). The head's process is the driver: it waits for every host's
node, builds the Ray Data pipeline over the training shards
(`steps.train.frameworks.ray.trainer`), trains with a ``TorchTrainer`` (one worker per
trainer host), writes the same ``metrics.json`` as the other paths and ends
the job. Ray decides where each decode task runs, so the trainer hosts' spare
CPUs decode beside the data hosts' (hybrid by construction); ``trainer_cpus``
is what each Ray Train worker reserves (auto: the step's busy vCPUs, measured,
plus one, as on the PyTorch path).

Ray has no notion of "the job is over" for the nodes that joined it, so the
head also keeps the project's authenticated control link to every other host
(`steps.train.dataplane.watch` on the head, `steps.train.dataplane.session` on the others), as the
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

import socket
import threading
import time
from pathlib import Path

from steps.common.errors import UserError, describe
from steps.common.files import write_atomic
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
from steps.train.dataplane.meter import arrived, data_host_metrics
from steps.train.dataplane.session import HostSession
from steps.train.dataplane.settings import DataPlaneSettings
from steps.train.dataplane.watch import Peer, PeerWatch, failure_reason
from steps.train.frameworks.ray.errors import RayNodeFailed
from steps.train.frameworks.ray.node import TRAINER_RESOURCE, RayNode
from steps.train.frameworks.ray.trainer import RAY_CHECKPOINT

RESULTS_ACTOR = "hetero-results"


def run_ray_host(cfg: TrainConfig, cluster: Cluster, workload) -> None:
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
            _follow(cfg, cluster, node)
        completed = True
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
        _await_nodes(cfg, len(others) + 1, node, links)
        files = _train(cfg, cluster, links)
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


def _train(cfg: TrainConfig, cluster: Cluster, links: PeerWatch) -> dict[str, bytes]:
    import ray
    from ray.data import DataContext
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from steps.train.frameworks.ray.trainer import exact_split, train_loop, training_dataset

    shards = list_shards(train_channel(cluster, cfg.shard_wait_s))
    if not shards:
        raise UserError(
            f"the Ray head {cluster.current_host} found no *.tar shards in {cluster.channel('train')}", headline="no shards"
        )
    samples = sum(count_samples(s) for s in shards)
    classes = read_classes(cluster.channel("manifest"))
    validation = cluster.channel("validation", required=False)
    head_ip = resolve(cluster.current_host)
    box = _results_actor(head_ip, cluster.checkpoint_dir)
    saved = _saved_checkpoint(cluster.checkpoint_dir)
    per_host = _per_trainer_host("GPU")
    gpus = gpu_use(min(per_host, 1), per_host, "ray")  # a Ray Train worker per trainer host, on one GPU
    gpu = bool(per_host)
    if warning := idle_gpus_line(cluster.current_host, gpus):
        print(warning, flush=True)
    kept, why = _kept_cpus(cfg, shards, len(classes), cluster.world_size)
    print(
        f"[ray] head: {len(shards)} shard(s), {samples} samples; {cluster.world_size} Ray Train worker(s), {kept} CPU(s) "
        f"each{' and a GPU' if gpu else ''} ({why}); decode on every other CPU",
        flush=True,
    )
    DataContext.get_current().enable_progress_bars = False  # Ray Train hands the driver's context to the ingest
    trainer = TorchTrainer(
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
        datasets={"train": training_dataset([str(s) for s in shards], cfg.workload, cfg.workload_options, cfg.batch_size)},
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


def _per_trainer_host(resource: str) -> int:
    """How much of ``resource`` (CPU, GPU) the smallest trainer host of the Ray cluster has (0: none)."""
    import ray

    return int(
        min(
            (n["Resources"].get(resource, 0) for n in ray.nodes() if n.get("Alive") and n["Resources"].get(TRAINER_RESOURCE)),
            default=0,
        )
    )


def _kept_cpus(cfg: TrainConfig, shards: list, classes: int, workers: int) -> tuple[int, str]:
    """The CPUs each of the ``workers`` Ray Train workers reserves on its trainer host (Ray schedules decode tasks on the
    rest), and why: ``trainer_cpus`` all, a number, or auto: the training step measured on this (the head's) host as the
    PyTorch path measures it (`steps.train.frameworks.pytorch.step.loop_cpus`), its busy vCPUs plus one for the data plane; never so
    many that Ray Data is left no CPU (`leave_room_for_data`)."""
    import ray

    from steps.train.core.spare_cpus import kept_for_loop, sample_pixels
    from steps.train.frameworks.pytorch.step import loop_cpus, pick_device, resolve_precision
    from steps.train.workload import load_workload

    def measure() -> float:
        workload = load_workload(cfg.workload, cfg.workload_options)
        device = pick_device()
        return loop_cpus(
            workload,
            workload.build_model(classes).to(device),
            device,
            sample_pixels(workload, shards),
            cfg.batch_size,
            cfg.learning_rate,
            precision=resolve_precision(cfg.precision, device),
        )

    kept, why, _ = kept_for_loop(cfg.trainer_cpus, _per_trainer_host("CPU"), measure)
    return leave_room_for_data(kept, why, workers, int(ray.cluster_resources().get("CPU", 0)))


def leave_room_for_data(kept: int, why: str, workers: int, cpus: int) -> tuple[int, str]:
    """Ray Data runs its read and decode tasks only on CPUs no Ray Train worker reserves (its budget is the cluster's
    ``cpus`` less the workers'). Where ``workers`` x ``kept`` would take them all (a trainer host alone, with one vCPU: the
    baseline), the read would never start: each worker then reserves what leaves one CPU, and the decode shares the
    trainers' CPUs, as the other paths' baseline decodes between its steps."""
    if cpus - workers * kept >= 1:
        return kept, why
    fits = max(0, (cpus - 1) // workers)
    return fits, (
        f"{why}; {workers} x {kept} would leave Ray Data none of the cluster's {cpus} CPU(s) to read and decode "
        f"on: {fits} each, the decode shares the trainers' CPUs"
    )


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
) -> dict:
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
    import ray

    by_ip = {resolve(h): h for g in cluster.groups for h in g.hosts}
    cpus = {by_ip.get(n["NodeManagerAddress"], n["NodeManagerAddress"]): int(n["Resources"].get("CPU", 0)) for n in ray.nodes()}
    sources: dict[str, list] = {}
    for r in ranks:
        for ip, (count, cpu_s) in r["sources"].items():
            seen = sources.setdefault(by_ip.get(ip, ip), [0, 0.0])
            seen[0] += count
            seen[1] += cpu_s
    data_hosts, local = [], []
    for host, (count, cpu_s) in sorted(sources.items()):
        if host in cluster.data_hosts:
            data_hosts.append(
                data_host_metrics(host, {"samples": count, "decode_cpu_s": cpu_s, "wall_s": wall, "cpus": cpus.get(host, 0)})
            )
        else:
            local.append(
                {
                    "host": host,
                    "samples": count,
                    "decode_cpu_s_per_sample": cpu_s / count if count else 0.0,
                    "share": count / max(summary["global_seen"], 1),
                    "workers": max(cpus.get(host, 0) - kept, 0),
                    "kept_cpus": kept,
                    "cpus": cpus.get(host, 0),
                    "why": f"Ray schedules decode tasks on the CPUs its Train worker does not reserve ({why})",
                }
            )
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
        sample_ledger={"epochs": report["ledger"], "resumes": report["resumes"], "partial_epoch": None},
        **arrived(data_hosts, 0, 0),
    )  # Ray moves blocks through its object store: no bytes measured


def _saved_checkpoint(folder: Path) -> bytes | None:
    """The last epoch-end checkpoint in the head's checkpoint folder (a restarted job finds it there), or None."""
    path = folder / RAY_CHECKPOINT
    return path.read_bytes() if path.is_file() else None


def _results_actor(head_ip: str, checkpoint_folder: Path):
    """Where rank 0 leaves the run's report and model for the driver, and each epoch's checkpoint in the head's
    checkpoint folder (synced to S3 by SageMaker): an actor on the head node."""
    import ray

    @ray.remote
    class Results:
        def __init__(self) -> None:
            self.value = None

        def put(self, report: dict, model: bytes) -> None:
            self.value = (report, model)

        def checkpoint(self, data: bytes, epoch: int, step: int) -> None:
            started = time.perf_counter()
            path = write_atomic(checkpoint_folder / RAY_CHECKPOINT, lambda fh: fh.write(data))
            print(
                f"[checkpoint] saved (end of epoch): epoch {epoch}, step {step}, in {time.perf_counter() - started:.2f} s "
                f"-> {path}",
                flush=True,
            )

        def get(self):
            if self.value is None:
                raise RuntimeError("the training workers ended without reporting")
            return self.value

    return Results.options(name=RESULTS_ACTOR, resources={f"node:{head_ip}": 0.001}, num_cpus=0).remote()


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


# -- every other host: a Ray node, and the control link to the head ----------------------------------------------


def _follow(cfg: TrainConfig, cluster: Cluster, node: RayNode) -> None:
    me, head = cluster.current_host, node.head_host
    joins: list[str] = []  # the head's Ray address, from its START

    def on_message(trainer, message) -> None:
        if isinstance(message, messages.Start):
            joins.append(message.require("ray"))

    def ready() -> bool:
        """The Ray node started once the head says where, and watched: its end while the head trains fails this host."""
        if node.process is not None and not node.alive():
            raise RayNodeFailed(f"host {me}'s Ray node stopped (its log is above) while the head {head} trains")
        if joins and node.process is None:
            node.start(joins[0])
        return session.all_stopped

    with socket.create_server((resolve(me), cfg.data_port), backlog=16) as server:
        session = HostSession.admit(
            DataPlaneSettings.of(cfg),
            server,
            me=me,
            trainer_hosts=(head,),
            secret=job_secret(),
            info={"framework": "ray", "epochs": cfg.epochs},
            who=f"host {me}",
            results_dir=cluster.model_dir,
            on_message=on_message,
        )
    with session:
        session.wait_until(ready)
    print(f"[ray] {me}: the head {head} ended the job; exiting", flush=True)

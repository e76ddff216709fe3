"""What a Ray trainer host keeps for its Ray Train worker, and what the decode on its other CPUs did.

Ray decides where each decode task runs, so a trainer host's spare CPUs decode beside the data hosts' (hybrid by
construction): what the worker reserves (``trainer_cpus``: all, a number, or auto, the step measured as the PyTorch
path measures it) is what Ray Data does not get there. After the run, `decoded_where` sorts what every node decoded
into metrics.json's ``data_hosts`` and ``local_decode``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from steps.train.core.cluster import Cluster, resolve
from steps.train.core.config import TrainConfig
from steps.train.dataplane.meter import data_host_metrics
from steps.train.frameworks.ray.node import per_trainer_host


def step_measure(cfg: TrainConfig, shards: list, classes: int) -> Callable[[], float | str]:
    """The measure of ``trainer_cpus=auto``: the vCPUs a training step keeps busy on this (the head's) host, measured as
    the PyTorch path measures it (`steps.train.frameworks.pytorch.step.loop_cpus`), once, on the first call."""

    @functools.cache
    def measure() -> float | str:
        from steps.train.core.spare_cpus import sample_pixels
        from steps.train.frameworks.pytorch.step import loop_cpus, pick_device, resolve_precision
        from steps.train.workload import load_workload

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

    return measure


def kept_cpus(cfg: TrainConfig, measure: Callable[[], float | str], workers: int) -> tuple[int, str]:
    """The CPUs each of the ``workers`` Ray Train workers reserves on its trainer host (Ray schedules decode tasks on the
    rest), and why: ``trainer_cpus`` all, a number, or auto: ``measure()`` (`step_measure`), its busy vCPUs plus one
    for the data plane; never so many that Ray Data is left no CPU (`leave_room_for_data`). Once every node joined."""
    import ray

    from steps.train.core.spare_cpus import kept_for_loop

    kept, why, _ = kept_for_loop(cfg.trainer_cpus, per_trainer_host("CPU"), measure)
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


def decoded_where(
    cluster: Cluster, ranks: list[dict], seen: int, wall: float, kept: int, why: str
) -> tuple[list[dict], list[dict]]:
    """Per node, what its decode tasks produced (every worker's ``sources``, by node address): the data hosts' as
    metrics.json's ``data_hosts`` rows, the trainer hosts' as ``local_decode`` rows (``seen``: every sample the
    workers consumed, for each one's share)."""
    import ray

    by_ip = {resolve(h): h for g in cluster.groups for h in g.hosts}
    cpus = {by_ip.get(n["NodeManagerAddress"], n["NodeManagerAddress"]): int(n["Resources"].get("CPU", 0)) for n in ray.nodes()}
    sources: dict[str, list] = {}
    for r in ranks:
        for ip, (count, cpu_s) in r["sources"].items():
            node = sources.setdefault(by_ip.get(ip, ip), [0, 0.0])
            node[0] += count
            node[1] += cpu_s
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
                    "share": count / max(seen, 1),
                    "workers": max(cpus.get(host, 0) - kept, 0),
                    "kept_cpus": kept,
                    "cpus": cpus.get(host, 0),
                    "why": f"Ray schedules decode tasks on the CPUs its Train worker does not reserve ({why})",
                }
            )
    return data_hosts, local

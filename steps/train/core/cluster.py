"""What this host is and who its peers are, read from the SageMaker Environment.

The role comes from the host's instance group, never from its name (SageMaker
assigns algo-N names randomly across groups). Peer addresses come from name
resolution; ``HETERO_HOSTS_FILE`` (``/etc/hosts`` syntax) replaces it where
there is no cluster DNS, as in the local emulator. Host names may not resolve
at first while the cluster boots: `wait_for_host_names` waits for every one
before a role starts, as the sagemaker-training toolkit does before it starts
an entry point.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

from steps.common.errors import UserError
from steps.contract import CHECKPOINT_FOLDER, HOSTS_FILE_ENV
from steps.train.core.config import TrainConfig

if TYPE_CHECKING:
    from sagemaker_training.environment import Environment

DATA, TRAINER = "data", "trainer"


@dataclass(frozen=True)
class Group:
    name: str
    instance_type: str
    hosts: tuple[str, ...]
    role: str

    def as_metrics(self) -> dict:
        return {"name": self.name, "instance_type": self.instance_type, "count": len(self.hosts), "role": self.role}


@dataclass(frozen=True)
class Cluster:
    current_host: str
    current_group: str
    role: str
    heterogeneous: bool
    groups: tuple[Group, ...]
    data_hosts: tuple[str, ...]
    trainer_hosts: tuple[str, ...]
    channel_dirs: dict
    channel_distribution: dict
    model_dir: Path
    output_dir: Path
    output_data_dir: Path
    network_interface: str
    checkpoint_dir: Path  # CheckpointConfig.LocalPath: /opt/ml/checkpoints, under the emulator's base folder locally

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host of the job, this one first."""
        return (
            self.current_host,
            *sorted((h for g in self.groups for h in g.hosts if h != self.current_host), key=lambda h: (len(h), h)),
        )

    @property
    def instance_type(self) -> str:
        return next(g.instance_type for g in self.groups if g.name == self.current_group)

    @property
    def rank(self) -> int:
        return self.trainer_hosts.index(self.current_host)

    @property
    def world_size(self) -> int:
        return len(self.trainer_hosts)

    @overload
    def channel(self, name: str, *, required: Literal[True] = True) -> Path: ...
    @overload
    def channel(self, name: str, *, required: Literal[False]) -> Path | None: ...
    def channel(self, name: str, *, required: bool = True) -> Path | None:
        path = self.channel_dirs.get(name)
        if path is None and required:
            raise UserError(
                f"host {self.current_host} ({self.current_group}) has no {name!r} input channel "
                f"(channels here: {', '.join(sorted(self.channel_dirs)) or 'none'}); provision it on group {self.current_group}",
                headline="missing input channel",
            )
        return Path(path) if path else None

    def part(self, channel: str, hosts: tuple[str, ...]) -> tuple[int, int]:
        """This host's share of a channel that every one of ``hosts`` sees whole."""
        if self.channel_distribution.get(channel) == "ShardedByS3Key":
            return (0, 1)  # SageMaker already gave each host its own objects
        return (hosts.index(self.current_host), len(hosts))

    @classmethod
    def from_environment(cls, env: Environment, cfg: TrainConfig) -> Cluster:
        raw_groups = env.instance_groups_dict or {
            "homogeneousCluster": {
                "instance_group_name": "homogeneousCluster",
                "instance_type": env.current_instance_type,
                "hosts": env.hosts,
            }
        }
        heterogeneous = len(raw_groups) > 1
        if heterogeneous:
            missing = [g for g in (cfg.data_group, cfg.dnn_group) if g not in raw_groups]
            if missing or len(raw_groups) != 2:
                raise UserError(
                    f"instance groups {sorted(raw_groups)} do not match data_group={cfg.data_group!r} and "
                    f"dnn_group={cfg.dnn_group!r}; set those hyperparameters to your two group names",
                    headline="unknown instance groups",
                )
        groups = tuple(
            Group(
                name, g["instance_type"], tuple(sorted(g["hosts"])), DATA if heterogeneous and name == cfg.data_group else TRAINER
            )
            for name, g in sorted(raw_groups.items())
        )
        data_hosts = tuple(h for g in groups if g.role == DATA for h in g.hosts)
        trainer_hosts = tuple(h for g in groups if g.role == TRAINER for h in g.hosts)
        current_group = env.current_instance_group if heterogeneous else groups[0].name
        return cls(
            current_host=env.current_host,
            current_group=current_group,
            role=DATA if env.current_host in data_hosts else TRAINER,
            heterogeneous=heterogeneous,
            groups=groups,
            data_hosts=data_hosts,
            trainer_hosts=trainer_hosts,
            channel_dirs=dict(env.channel_input_dirs),
            channel_distribution={k: v.get("S3DistributionType", "FullyReplicated") for k, v in env.input_data_config.items()},
            model_dir=Path(env.model_dir),
            output_dir=Path(env.output_dir),
            output_data_dir=Path(env.output_data_dir),
            network_interface=env.network_interface_name,
            checkpoint_dir=Path(env.model_dir).parent / CHECKPOINT_FOLDER,
        )


def resolve(host: str) -> str:
    address, why = _lookup(host)
    if address is None:
        raise UserError(f"cannot resolve host {host!r}: {why}", headline="unknown host")
    return address


def _lookup(host: str) -> tuple[str | None, str]:
    """(address, "") or (None, why not). A hosts file, when set, is the cluster's only name service."""
    hosts_file = os.environ.get(HOSTS_FILE_ENV)
    if hosts_file:
        try:
            lines = Path(hosts_file).read_text().splitlines()
        except FileNotFoundError:
            return None, f"{HOSTS_FILE_ENV} {hosts_file} does not exist yet"
        for line in lines:
            fields = line.split("#", 1)[0].split()
            if len(fields) >= 2 and host in fields[1:]:
                return fields[0], ""
        return None, f"not in {HOSTS_FILE_ENV} {hosts_file} yet"
    try:
        return socket.gethostbyname(host), ""
    except OSError as exc:
        return None, str(exc)


RESOLVE_FIRST_WAIT_S, RESOLVE_MAX_WAIT_S = 0.25, 5.0  # doubling from the first to the most between tries


def wait_for_host_names(
    hosts: tuple[str, ...],
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """Every host of the cluster -> its address, waiting until each name resolves or ``timeout_s`` has passed.

    SageMaker's guide says host names may not resolve at first, and the toolkit's ``entry_point.run()`` retries
    for up to 15 minutes before it starts the user's code; this entry point replaces the toolkit's, so it keeps
    that wait. A name that does not resolve is a peer that is not up yet, so the deadline is the hosts' wait for
    their peers (``connect_timeout_s``). Tries back off from 0.25 s to 5 s: a late name costs a start at most 5 s,
    and one line per wait says which host and how long so far."""
    log = log or (lambda line: print(line, flush=True))
    started = clock()
    deadline = started + timeout_s
    pause, waited, found = RESOLVE_FIRST_WAIT_S, False, {}
    for host in hosts:
        while True:
            address, why = _lookup(host)
            if address is not None:
                found[host] = address
                break
            now = clock()
            if now >= deadline:
                raise UserError(
                    f"host name {host!r} did not resolve within connect_timeout_s={timeout_s:g} s (last try: {why}); the "
                    "cluster's name service never answered for it: retry the job, check the DNS settings of the VPC if the "
                    "job runs in one (enableDnsSupport), or raise the connect_timeout_s hyperparameter",
                    headline="host name does not resolve",
                )
            pause = min(pause, deadline - now)
            log(
                f"[cluster] waiting for host {host} to resolve: {now - started:.1f} s so far of {timeout_s:g} s "
                f"(connect_timeout_s); next try in {pause:.2f} s ({why})"
            )
            sleep(pause)
            waited, pause = True, min(pause * 2, RESOLVE_MAX_WAIT_S)
    if waited:
        log(f"[cluster] every host name resolves, after {clock() - started:.1f} s")
    return found


def available_cpus() -> int:
    """CPUs this process may run on (the affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1

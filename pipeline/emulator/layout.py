"""What each host of an emulated training job finds under ``/opt/ml`` before it starts, from the request alone.

``input/config/resourceconfig.json`` from ``ResourceConfig.InstanceGroups``, ``hyperparameters.json`` from
``HyperParameters``, ``inputdataconfig.json`` and the channels from ``InputDataConfig`` (provisioned only on the groups a
channel names, split across hosts as ShardedByS3Key does, a file-system channel mounted whole), the code from
``sagemaker_submit_directory`` unpacked into ``code/`` (an S3 location, or under network isolation the host's own copy
in the ``code`` channel), and empty ``model/`` and ``output/``.
"""

from __future__ import annotations

import json
import random
import shutil
import tarfile
import threading
import time
from pathlib import Path

from pipeline import storage
from pipeline.emulator.hosts import CONTAINER_ROOT, Channel, Host, InstanceGroup, write_hosts
from steps.common.errors import UserError
from steps.contract import CODE_CHANNEL, SHARDED


def deal_hosts(groups: list[InstanceGroup], job_dir: Path, rng: random.Random, role_of) -> list[Host]:  # noqa: ANN001
    """Host names algo-N dealt randomly across ``groups``, as SageMaker does, each with an address of the job's /24;
    ``role_of``: group name -> the role its hosts run."""
    total = sum(g.count for g in groups)
    names = [f"algo-{i}" for i in range(1, total + 1)]
    rng.shuffle(names)  # SageMaker deals names randomly across groups
    subnet = f"127.{rng.randint(1, 254)}.{rng.randint(0, 255)}"
    dealt = iter(names)
    hosts = []
    for group in groups:
        for _ in range(group.count):
            name = next(dealt)
            index = int(name.split("-")[1])
            hosts.append(Host(name, group, f"{subnet}.{index}", job_dir / name, role_of(group.name)))
    hosts.sort(key=lambda h: int(h.name.split("-")[1]))
    return hosts


def provision_channels(channels: list[Channel], hosts: list[Host], groups: list[InstanceGroup]) -> dict[str, dict]:
    """Each channel on the hosts of the groups it names; host name -> its ``inputdataconfig.json``."""
    provisioned: dict[str, dict] = {h.name: {} for h in hosts}
    for channel in channels:
        names = channel.instance_groups or tuple(g.name for g in groups)
        targets = sorted((h for h in hosts if h.group.name in names), key=lambda h: int(h.name.split("-")[1]))
        if channel.distribution == SHARDED and len(channel.objects) < len(targets):
            raise UserError(
                f"channel {channel.name!r} has {len(channel.objects)} object(s) for {len(targets)} hosts with ShardedByS3Key, so some "
                f"hosts would get no data; re-shard for {len(targets)} hosts or use fewer hosts",
                headline="more hosts than shards",
            )
        for i, host in enumerate(targets):
            channel_dir = host.base_dir / "input" / "data" / channel.name
            if channel.mount is not None:
                channel_dir.parent.mkdir(parents=True, exist_ok=True)
                channel_dir.symlink_to(channel.mount)
            else:
                mine = channel.objects[i :: len(targets)] if channel.distribution == SHARDED else channel.objects
                storage.link_objects(list(mine), channel_dir)
            config = {"TrainingInputMode": channel.input_mode, "RecordWrapperType": "None"}
            if channel.mount is None:
                config.update(ContentType="application/x-tar", S3DistributionType=channel.distribution)
            provisioned[host.name][channel.name] = config
    return provisioned


def write_config(
    host: Host, *, hosts: list[Host], groups: list[InstanceGroup], hyperparameters: dict, job_name: str, channels: dict
) -> None:
    """``host``'s ``input/config`` files, and its empty ``model/``, ``output/data`` and ``code/``."""
    config = host.base_dir / "input" / "config"
    _write_json(
        config / "resourceconfig.json",
        {
            "current_host": host.name,
            "current_instance_type": host.group.instance_type,
            "current_group_name": host.group.name,
            "hosts": [h.name for h in hosts],
            "instance_groups": [
                {
                    "instance_group_name": g.name,
                    "instance_type": g.instance_type,
                    "hosts": sorted((h.name for h in hosts if h.group is g), key=lambda n: int(n.split("-")[1])),
                }
                for g in groups
            ],
            "network_interface_name": "lo",
        },
    )
    _write_json(config / "hyperparameters.json", {**hyperparameters, "sagemaker_job_name": job_name})
    _write_json(config / "inputdataconfig.json", channels)
    for sub in ("model", "output/data", "code"):
        (host.base_dir / sub).mkdir(parents=True, exist_ok=True)


def code_of(host: Host, hyperparameters: dict) -> Path:
    """The code ``host`` unpacks: an S3 location, or a path in the host's container (its ``code`` channel's file)."""
    source = hyperparameters.get("sagemaker_submit_directory")
    if not source:
        raise UserError(
            "HyperParameters has no sagemaker_submit_directory: script mode needs the code's location", headline="no code"
        )
    if not source.startswith(CONTAINER_ROOT):
        return storage.path(source)
    local = host.base_dir / source[len(CONTAINER_ROOT) :]
    if not local.exists():
        raise UserError(
            f"sagemaker_submit_directory {source!r} is not on host {host.name} ({host.group.name}): no input "
            f"channel put it there; give the job a {CODE_CHANNEL!r} channel holding the code tar.gz on every "
            "instance group, or an s3:// location (without network isolation)",
            headline="no code",
        )
    return local


def unpack_code(code: Path, destination: Path) -> None:
    if code.is_dir():
        shutil.copytree(code, destination, dirs_exist_ok=True)
        return
    with tarfile.open(code, "r:gz") as tar:
        tar.extractall(destination, filter="data")


def _write_json(path: Path, obj) -> None:  # noqa: ANN001
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2))


def publish_names_late(
    hosts: list[Host], path: Path, rng: random.Random, after_s: float
) -> tuple[threading.Event, threading.Thread]:
    """Each host's entry appears in the hosts file at its own time, in random order, the last ``after_s`` after now
    (the file itself with the first): until then a host finds names missing. The event stops the publishing."""
    hosts = list(hosts)
    rng.shuffle(hosts)
    stop = threading.Event()
    started = time.monotonic()

    def publish() -> None:
        for i in range(len(hosts)):
            if stop.wait(max(0.0, started + after_s * (i + 1) / len(hosts) - time.monotonic())):
                return
            write_hosts(path, hosts[: i + 1])

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    return stop, thread

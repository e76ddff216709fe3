"""The shard step's manifest as the training hosts see it (the ``manifest`` channel)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from steps.common.errors import UserError
from steps.contract import MANIFEST_FILE as MANIFEST_NAME
from steps.contract import SHARDED

if TYPE_CHECKING:
    from steps.train.core.cluster import Cluster


def read_manifest(channel_dir: Path) -> dict:
    path = channel_dir / MANIFEST_NAME
    if not path.is_file():
        found = sorted(channel_dir.rglob(MANIFEST_NAME)) if channel_dir.is_dir() else []
        if not found:
            raise UserError(
                f"no {MANIFEST_NAME} in {channel_dir}: point the manifest channel at the shard step's manifest.json",
                headline="missing manifest",
            )
        path = found[0]
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); re-run the shard step", headline="bad manifest") from None


def read_classes(channel_dir: Path) -> list[str]:
    classes = read_manifest(channel_dir).get("classes")
    if not isinstance(classes, list) or not classes:
        raise UserError(f"the manifest in {channel_dir} lists no classes; re-run the shard step", headline="bad manifest")
    return [str(c) for c in classes]


def train_channel(cluster: Cluster, timeout_s: float, *, poll_s: float = 2.0, name: str = "train") -> Path:
    """The train channel, once every shard the manifest lists is visible in it.

    With ShardedByS3Key, SageMaker downloaded this host's objects before the job started. A channel
    every host sees whole (FullyReplicated, or a file system such as FSx for Lustre, whose link to S3
    imports new objects asynchronously) may not show every shard yet: wait for them, up to ``timeout_s``."""
    channel = cluster.channel(name)
    if cluster.channel_distribution.get(name) == SHARDED:
        return channel
    expected = {Path(s["name"]).name for s in read_manifest(cluster.channel("manifest"))["splits"]["train"]["shards"]}
    deadline = time.monotonic() + timeout_s
    announced = False
    while True:
        missing = sorted(expected - {p.name for p in channel.rglob("*") if p.is_file()})
        if not missing:
            return channel
        if time.monotonic() >= deadline:
            raise UserError(
                f"{len(missing)} of {len(expected)} shards listed in the manifest are not in {channel} after "
                f"{timeout_s:g} s (first: {', '.join(missing[:3])}); a file system linked to S3 (FSx for Lustre) imports "
                "new objects asynchronously: check its data repository association, or raise shard_wait_s",
                headline="shards not visible",
            )
        if not announced:
            print(f"[data] waiting for {len(missing)} of {len(expected)} shards to appear in {channel}", flush=True)
            announced = True
        time.sleep(poll_s)

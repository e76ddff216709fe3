"""Hosts that see the train channel whole wait, boundedly, until every shard in the manifest is there."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from steps.common.errors import UserError
from steps.train.core.manifest import train_channel


@dataclass
class FakeCluster:
    root: Path
    channel_distribution: dict = field(default_factory=dict)

    def channel(self, name: str) -> Path:
        return self.root / name


def layout(tmp_path: Path, names: list[str], present: list[str], distribution: str | None) -> FakeCluster:
    (tmp_path / "train").mkdir()
    (tmp_path / "manifest").mkdir()
    manifest = {"splits": {"train": {"shards": [{"name": f"train/{n}", "samples": 1} for n in names]}}}
    (tmp_path / "manifest" / "manifest.json").write_text(json.dumps(manifest))
    for name in present:
        (tmp_path / "train" / name).write_bytes(b"x")
    return FakeCluster(tmp_path, {"train": distribution} if distribution else {})


def test_a_sharded_channel_is_used_as_delivered(tmp_path):
    cluster = layout(tmp_path, ["a.tar", "b.tar"], ["a.tar"], "ShardedByS3Key")
    assert train_channel(cluster, 0) == tmp_path / "train"  # each host holds only its own objects


def test_a_file_system_channel_waits_for_shards_that_appear_late(tmp_path, capsys):
    cluster = layout(tmp_path, ["a.tar", "b.tar"], ["a.tar"], None)  # FSx: no S3DistributionType
    late = threading.Timer(0.3, lambda: (tmp_path / "train" / "b.tar").write_bytes(b"x"))
    late.start()
    try:
        assert train_channel(cluster, 30, poll_s=0.05) == tmp_path / "train"
    finally:
        late.cancel()
    assert "waiting for 1 of 2 shards" in capsys.readouterr().out


def test_shards_that_never_appear_end_the_wait_with_a_clear_error(tmp_path):
    cluster = layout(tmp_path, ["a.tar", "b.tar", "c.tar"], ["a.tar"], "FullyReplicated")
    with pytest.raises(
        UserError,
        match=r"2 of 3 shards listed in the manifest are not in .*train after 0.2 s \(first: b.tar, c.tar\).*"
        r"asynchronously.*shard_wait_s",
    ):
        train_channel(cluster, 0.2, poll_s=0.05)

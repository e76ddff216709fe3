"""The shard step's write stage: a rerun removes only what the step wrote; manifest entries match the files."""

from __future__ import annotations

from steps.formats.webdataset import iter_shard, sha256_file
from steps.shard.plan import Item
from steps.shard.write import clear_previous_output, write_split


def test_clear_previous_output_removes_only_this_steps_files(tmp_path):
    for name in (
        "train/train-00000.tar",
        "train/train-00001.tfrecord",
        "validation/validation-00000.tar",
        "quarantine/a/x.jpg",
        "manifest.json",
        "report.json",
        "failure",
        "train/keep.txt",
        "keep.json",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("old")
    clear_previous_output(tmp_path)
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["keep.json", "train/keep.txt"]


def test_write_split_entry_describes_the_files(tmp_path):
    image = tmp_path / "img.jpg"
    image.write_bytes(b"\xff\xd8 bytes")
    items = [Item(i, i % 2, image, "jpg", image.stat().st_size) for i in range(3)]
    entry = write_split(tmp_path / "out", "train", [items[:2], items[2:]], "webdataset")
    assert [s["name"] for s in entry["shards"]] == ["train/train-00000.tar", "train/train-00001.tar"]
    assert entry["samples"] == 3 and entry["bytes"] == sum(s["bytes"] for s in entry["shards"])
    first = tmp_path / "out" / entry["shards"][0]["name"]
    assert entry["shards"][0]["sha256"] == sha256_file(first)
    assert [s.sample_id for s in iter_shard(first)] == [0, 1]


def test_an_empty_split_writes_no_folder(tmp_path):
    assert write_split(tmp_path, "validation", [], "webdataset") == {"samples": 0, "bytes": 0, "shards": []}
    assert not (tmp_path / "validation").exists()

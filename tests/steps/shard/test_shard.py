"""The shard step: validation, quarantine, split, balanced shard plan, manifest, CLI contract."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from steps.common.errors import UserError
from steps.formats.webdataset import iter_shard, list_shards, sha256_file
from steps.shard.shard import shard_dataset
from tests.support.raw_images import image_bytes, make_raw

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "steps" / "shard" / "shard.py"


def read_split(output: Path, split: str) -> list:
    folder = output / split
    return [s for shard in (list_shards(folder) if folder.exists() else []) for s in iter_shard(shard)]


# --- shard plan ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_raw(tmp_path_factory):
    """17 incompressible 300x300 PNGs (~270 KB each, ~4.6 MB): several 1 MB shards."""
    return make_raw(tmp_path_factory.mktemp("big"), {"a": 9, "b": 8}, side=300, fmt="PNG", ext="png")


@pytest.mark.parametrize("hosts", [1, 2, 3])
def test_train_shards_are_a_multiple_of_hosts_and_balanced(big_raw, tmp_path, hosts):
    manifest = shard_dataset(big_raw, tmp_path, target_shard_mb=1, data_hosts=hosts, validation_fraction=0)
    shards = manifest["splits"]["train"]["shards"]
    payload = sum(p.stat().st_size for p in big_raw.rglob("*.png"))
    fewest = math.ceil(payload / 2**20)  # tar headers can only add shards, at most one per 512 KB
    assert len(shards) % hosts == 0
    assert math.ceil(fewest / hosts) * hosts <= len(shards) <= math.ceil((fewest + 1) / hosts) * hosts
    counts = [s["samples"] for s in shards]
    assert max(counts) - min(counts) <= 1 and sum(counts) == 17
    assert [p.name for p in list_shards(tmp_path / "train")] == [f"train-{i:05d}.tar" for i in range(len(shards))]


@pytest.mark.parametrize("hosts, expected", [(1, [20]), (2, [10, 10]), (3, [7, 7, 6]), (4, [5, 5, 5, 5])])
def test_small_data_gets_one_shard_per_host(tmp_path, hosts, expected):
    raw = make_raw(tmp_path / "raw", {"a": 10, "b": 10})
    manifest = shard_dataset(raw, tmp_path / "out", data_hosts=hosts, validation_fraction=0)
    assert [s["samples"] for s in manifest["splits"]["train"]["shards"]] == expected


# --- outputs --------------------------------------------------------------------------------


def test_manifest_fields_and_checksums(tmp_path):
    raw = make_raw(tmp_path / "raw", {"cat": 6, "dog": 5})
    out = tmp_path / "out"
    manifest = shard_dataset(raw, out, target_shard_mb=2.5, data_hosts=2, validation_fraction=0.2, seed=1)
    assert manifest == json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "webdataset" and manifest["version"] == 1
    assert manifest["classes"] == ["cat", "dog"]
    assert manifest["target_shard_bytes"] == int(2.5 * 2**20) and manifest["data_hosts"] == 2
    assert (manifest["quarantined"], manifest["skipped"]) == (0, 0)
    for split in ("train", "validation"):
        entry = manifest["splits"][split]
        for shard in entry["shards"]:
            path = out / shard["name"]
            assert shard["name"].startswith(f"{split}/{split}-")
            assert shard["sha256"] == sha256_file(path) and shard["bytes"] == path.stat().st_size
            assert shard["samples"] == len(list(iter_shard(path)))
        assert entry["samples"] == sum(s["samples"] for s in entry["shards"])
        assert entry["bytes"] == sum(s["bytes"] for s in entry["shards"])
    assert manifest["splits"]["train"]["samples"] + manifest["splits"]["validation"]["samples"] == 11
    assert sorted(os.listdir(out / "train")) == ["train-00000.tar", "train-00001.tar"]  # no manifest in train/


def test_corrupt_images_are_quarantined_and_every_valid_sample_appears_once(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 4, "b": 3, "c": 3})
    rng = np.random.default_rng(5)
    good = image_bytes(rng, side=64)
    (raw / "a" / "trunc.jpg").write_bytes(good[: len(good) * 6 // 10])
    (raw / "b" / "random.jpg").write_bytes(rng.bytes(3000))
    (raw / "c" / "upper.PNG").write_bytes(image_bytes(rng, fmt="PNG"))
    (raw / "c" / "notes.txt").write_text("labelling notes")
    (raw / "a" / ".DS_Store").write_bytes(b"hidden")
    out = tmp_path / "out"
    manifest = shard_dataset(raw, out, validation_fraction=0.3)

    report = json.loads((out / "report.json").read_text())
    assert {q["path"] for q in report["quarantined"]} == {"a/trunc.jpg", "b/random.jpg"}
    assert all(q["reason"] for q in report["quarantined"])
    assert (out / "quarantine" / "b" / "random.jpg").read_bytes() == (raw / "b" / "random.jpg").read_bytes()
    assert (out / "quarantine" / "a" / "trunc.jpg").exists()
    assert [s["path"] for s in report["skipped"]] == ["c/notes.txt"]
    assert report["classes"]["a"]["quarantined"] == 1 and report["classes"]["c"]["images"] == 4
    assert (manifest["quarantined"], manifest["skipped"]) == (2, 1)

    # Ids follow (sorted class, sorted path) over the valid images; each appears exactly once.
    bad = {"a/trunc.jpg", "b/random.jpg"}
    expected = [
        (p, label)
        for label, name in enumerate("abc")
        for p in sorted((raw / name).iterdir())
        if p.suffix.lower() in (".jpg", ".png") and f"{name}/{p.name}" not in bad
    ]
    samples = read_split(out, "train") + read_split(out, "validation")
    assert sorted(s.sample_id for s in samples) == list(range(len(expected))) == list(range(11))
    for s in samples:
        path, label = expected[s.sample_id]
        assert (s.label, s.raw, s.ext) == (label, path.read_bytes(), path.suffix.lower()[1:])


def test_stratified_split(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 10, "b": 2, "c": 1})
    out = tmp_path / "out"
    shard_dataset(raw, out, validation_fraction=0.1)
    val_labels = sorted(s.label for s in read_split(out, "validation"))
    assert val_labels == [0, 1]  # one from a (10 x 0.1), at least one from b, none from the single c
    assert len(read_split(out, "train")) == 11


def test_validation_fraction_zero_means_no_validation_split(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 3, "b": 3})
    manifest = shard_dataset(raw, tmp_path / "out", validation_fraction=0)
    assert manifest["splits"]["validation"] == {"samples": 0, "bytes": 0, "shards": []}
    assert not (tmp_path / "out" / "validation").exists()


def test_same_seed_same_bytes_other_seed_other_split(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 12, "b": 12})
    first = shard_dataset(raw, tmp_path / "1", seed=3)
    again = shard_dataset(raw, tmp_path / "2", seed=3)
    other = shard_dataset(raw, tmp_path / "3", seed=4)
    assert first == again
    assert first["splits"] != other["splits"]


def test_rerun_replaces_stale_shards(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 6, "b": 6})
    shard_dataset(raw, tmp_path / "out", data_hosts=3)
    (tmp_path / "out" / "failure").write_text("old failure")
    shard_dataset(raw, tmp_path / "out", data_hosts=1)
    assert len(list_shards(tmp_path / "out" / "train")) == 1
    assert not (tmp_path / "out" / "failure").exists()


# --- user errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("mb", [0.5, 200])
def test_target_size_out_of_range(tmp_path, mb):
    raw = make_raw(tmp_path / "raw", {"a": 2})
    with pytest.raises(UserError, match=rf"{mb}.*1\.\.128"):
        shard_dataset(raw, tmp_path / "out", target_shard_mb=mb)


@pytest.mark.parametrize("hosts", [0, -1, 1.5, True])
def test_data_hosts_must_be_a_positive_int(tmp_path, hosts):
    with pytest.raises(UserError, match="data-hosts"):
        shard_dataset(tmp_path, tmp_path / "out", data_hosts=hosts)


def test_missing_input_folder(tmp_path):
    with pytest.raises(UserError, match="nowhere") as err:
        shard_dataset(tmp_path / "nowhere", tmp_path / "out")
    assert str(tmp_path / "nowhere") in err.value.message


def test_no_class_folders(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "loose.jpg").write_bytes(b"x")
    with pytest.raises(UserError, match="one folder per class") as err:
        shard_dataset(tmp_path / "raw", tmp_path / "out")
    assert str(tmp_path / "raw") in err.value.message


def test_no_valid_images(tmp_path):
    (tmp_path / "raw" / "a").mkdir(parents=True)
    (tmp_path / "raw" / "a" / "bad.jpg").write_bytes(b"not a jpeg")
    (tmp_path / "raw" / "a" / "readme.md").write_text("x")
    with pytest.raises(UserError, match="no readable images") as err:
        shard_dataset(tmp_path / "raw", tmp_path / "out")
    assert str(tmp_path / "raw") in err.value.message
    assert (tmp_path / "out" / "quarantine" / "a" / "bad.jpg").exists()  # still reported, not dropped


def test_more_data_hosts_than_training_samples(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 2, "b": 2})
    with pytest.raises(UserError, match="5 data hosts but only 4 training samples"):
        shard_dataset(raw, tmp_path / "out", data_hosts=5, validation_fraction=0)


def test_output_inside_input_is_refused(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 2})
    with pytest.raises(UserError, match="inside input"):
        shard_dataset(raw, raw / "shards")


# --- command line ---------------------------------------------------------------------------


def _run(args, *, cwd, module=False, env=None):
    head = [sys.executable, "-m", "steps.shard.shard"] if module else [sys.executable, str(SCRIPT)]
    return subprocess.run(head + [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--input", "{tmp}/nowhere"], "{tmp}/nowhere"),
        (["--input", "{raw}", "--target-shard-mb", "200"], "200"),
        (["--input", "{raw}", "--data-hosts", "abc"], "invalid int value"),
        (["--input", "{raw}", "--data-hosts", "9"], "9 data hosts but only"),
        (["--input", "{raw}", "--format", "parquet"], "invalid choice: 'parquet'"),
        (["--input", "{raw}", "--target-shard-mb", "abc"], "argument --target-shard-mb: invalid float value: 'abc'"),
        (["--input", "{raw}", "--shard-size", "64"], "unrecognized arguments: --shard-size 64"),
        (["--input", "{raw}", "--out", "{tmp}/elsewhere"], "unrecognized arguments: --out"),  # --output by its full name only
    ],
)
def test_cli_failure_writes_one_line_failure_file(tmp_path, args, needle):
    raw = make_raw(tmp_path / "raw", {"a": 2, "b": 2})
    out = tmp_path / "out"
    args = [a.format(tmp=tmp_path, raw=raw) for a in args] + ["--output", out]
    result = _run(args, cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    failure = (out / "failure").read_text()
    assert failure.endswith("\n") and len(failure.strip().splitlines()) == 1
    assert needle.format(tmp=tmp_path) in failure


def test_cli_by_path_without_the_package_installed(tmp_path):
    # SageMaker Processing runs the file by path and the repo is not pip-installed there.
    # -S skips site-packages' .pth files (our editable install) while PYTHONPATH still
    # offers Pillow and numpy, so only the script's own sys.path fix can find `steps`.
    raw = make_raw(tmp_path / "raw", {"a": 3, "b": 3})
    (raw / "a" / "broken.jpg").write_bytes(b"nope")
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    head = [sys.executable, "-S", str(SCRIPT)]
    result = subprocess.run(
        head + ["--input", str(raw), "--output", str(tmp_path / "out"), "--data-hosts", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "1 quarantined" in result.stdout and "2 shards" in result.stdout
    assert (tmp_path / "out" / "manifest.json").exists() and not (tmp_path / "out" / "failure").exists()


def test_cli_as_module(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 3, "b": 3})
    result = _run(["--input", raw, "--output", tmp_path / "out"], cwd=REPO, module=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("shard: ")
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["classes"] == ["a", "b"]


def test_cli_draws_a_fresh_owner_only_job_secret_each_run(tmp_path):
    """The pipeline's first job writes the execution's data-plane secret, the training jobs' `secret` channel."""
    from steps.shard.shard import main

    raw = make_raw(tmp_path / "raw", {"a": 3, "b": 3})
    secrets = []
    for _ in range(2):
        assert main(["--input", str(raw), "--output", str(tmp_path / "out")]) == 0
        secret = tmp_path / "out" / "secret" / "job-secret"
        assert oct(secret.stat().st_mode & 0o777) == "0o600" and oct(secret.parent.stat().st_mode & 0o777) == "0o700"
        secrets.append(secret.read_text())
    assert secrets[0] != secrets[1] and all(len(s) == 64 and int(s, 16) >= 0 for s in secrets)
    assert [p.name for p in (tmp_path / "out" / "secret").iterdir()] == ["job-secret"]  # nothing else in the channel


def test_cli_help_is_not_a_failure(tmp_path):
    result = _run(["--help", "--output", tmp_path / "out"], cwd=tmp_path)
    assert result.returncode == 0 and "--target-shard-mb" in result.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("counts,corrupt_only", [({"cats": 6}, None), ({"cats": 6, "dogs": 0}, "dogs")])
def test_fewer_than_two_classes_with_readable_images_are_refused(tmp_path, counts, corrupt_only):
    """One class trains to 100% and learns nothing: refused at Shard, naming what was found."""
    raw = make_raw(tmp_path / "raw", {k: v for k, v in counts.items() if v})
    if corrupt_only:
        (raw / corrupt_only).mkdir()
        (raw / corrupt_only / "bad.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(UserError, match=r"readable images of 1 class \(cats\): a classifier needs at least two") as err:
        shard_dataset(raw, tmp_path / "out")
    assert err.value.headline == "too few classes" and str(raw) in err.value.message
    assert not (tmp_path / "out" / "manifest.json").exists()

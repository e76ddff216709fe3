"""The tar shard format: round trip, header-only counting, byte-identical output, malformed shards."""

from __future__ import annotations

import io
import tarfile

import pytest

from steps.common.errors import UserError
from steps.formats.webdataset import Sample, count_samples, iter_shard, list_shards, sha256_file, write_shard

SAMPLES = [
    (7, 0, "jpg", b"\xff\xd8 jpeg bytes 7"),
    (3, 2, "PNG", b"\x89PNG bytes 3" * 100),  # upper-case ext is stored lower-case
    (123456789, 1, "jpeg", b""),
    (1000000000, 11, "jpg", bytes(range(256)) * 5),  # ids past nine digits still round-trip
]


def _tar(path, members):
    """A hand-made tar from ``(name, payload)`` pairs, for shards the writer would never make."""
    with tarfile.open(path, "w") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return path


def test_round_trip_keeps_order_ids_labels_bytes_and_ext(tmp_path):
    shard = tmp_path / "s.tar"
    assert write_shard(shard, SAMPLES) == len(SAMPLES)
    got = list(iter_shard(shard))
    assert got == [Sample(i, label, raw, ext.lower()) for i, label, ext, raw in SAMPLES]
    with tarfile.open(shard) as tar:
        names = tar.getnames()
    assert names[:4] == ["000000007.jpg", "000000007.cls", "000000003.png", "000000003.cls"]


def test_count_samples_matches_written(tmp_path):
    shard = tmp_path / "s.tar"
    write_shard(shard, SAMPLES)
    assert count_samples(shard) == len(SAMPLES)
    empty = tmp_path / "empty.tar"
    write_shard(empty, [])
    assert count_samples(empty) == 0
    assert list(iter_shard(empty)) == []


def test_identical_input_gives_identical_bytes(tmp_path):
    a, b, c = tmp_path / "a.tar", tmp_path / "b.tar", tmp_path / "c.tar"
    write_shard(a, SAMPLES)
    write_shard(b, iter(SAMPLES))
    write_shard(c, list(reversed(SAMPLES)))
    assert sha256_file(a) == sha256_file(b)
    assert sha256_file(a) != sha256_file(c)
    with tarfile.open(a) as tar:
        for member in tar.getmembers():
            assert (member.mtime, member.mode, member.uid, member.gid) == (0, 0o644, 0, 0)
            assert (member.uname, member.gname) == ("", "")


def test_bad_extension_is_rejected_and_leaves_no_shard(tmp_path):
    shard = tmp_path / "s.tar"
    with pytest.raises(ValueError, match="gif"):
        write_shard(shard, [(1, 0, "gif", b"x")])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "members, member, problem",
    [
        ([("000000001.jpg", b"x")], "000000001.jpg", "no 000000001.cls"),
        ([("000000001.cls", b"1")], "000000001.cls", "exactly one image"),
        ([("000000001.jpg", b"x"), ("000000001.cls", b"cat")], "000000001.cls", "not a non-negative"),
        ([("000000001.jpg", b"x"), ("000000001.cls", b"-1")], "000000001.cls", "not a non-negative"),
        ([("000000001.jpg", b"x"), ("000000001.png", b"x"), ("000000001.cls", b"1")], "000000001.jpg", "exactly one image"),
        ([("000000001.jpg", b"x"), ("000000001.txt", b"x"), ("000000001.cls", b"1")], "000000001.txt", "unknown extension"),
        ([("abc.jpg", b"x")], "abc.jpg", "numeric key"),
    ],
)
def test_malformed_shard_names_shard_and_member(tmp_path, members, member, problem):
    shard = _tar(tmp_path / "bad.tar", members)
    with pytest.raises(UserError, match=problem) as err:
        list(iter_shard(shard))
    assert str(shard) in err.value.message and member in err.value.message


def test_count_samples_checks_pairs_too(tmp_path):
    shard = _tar(tmp_path / "bad.tar", [("000000001.jpg", b"x"), ("000000001.cls", b"1"), ("000000002.jpg", b"x")])
    with pytest.raises(UserError, match="000000002"):
        count_samples(shard)


@pytest.mark.parametrize("payload", [b"this is not a tar archive" * 100, b""])
def test_not_a_tar_is_a_user_error(tmp_path, payload):
    shard = tmp_path / "junk.tar"
    shard.write_bytes(payload)
    for read in (lambda: list(iter_shard(shard)), lambda: count_samples(shard)):
        with pytest.raises(UserError) as err:
            read()
        assert str(shard) in err.value.message


def test_truncated_shard_is_a_user_error(tmp_path):
    shard = tmp_path / "s.tar"
    write_shard(shard, [(i, 0, "jpg", bytes(2000)) for i in range(3)])
    shard.write_bytes(shard.read_bytes()[:3000])
    with pytest.raises(UserError, match="s.tar"):
        list(iter_shard(shard))


def test_list_shards_sorted_tar_files_only(tmp_path):
    for name in ("train-00002.tar", "train-00000.tar", "train-00001.tar", "manifest.json", "x.tar.partial"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "dir.tar").mkdir()
    assert [p.name for p in list_shards(tmp_path)] == ["train-00000.tar", "train-00001.tar", "train-00002.tar"]
    with pytest.raises(UserError, match="nowhere"):
        list_shards(tmp_path / "nowhere")

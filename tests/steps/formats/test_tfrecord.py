"""TFRecord shards: round trip, byte-identical output, malformed files, tf.data parsing, the shard step."""

from __future__ import annotations

import json
import sys

import pytest

from steps.common.errors import UserError
from steps.formats.registry import FORMATS
from steps.formats.tfrecord import (
    FRAME_BYTES,
    count_tfrecord_samples,
    feature_spec,
    iter_tfrecord_shard,
    list_tfrecord_shards,
    parse_record,
    write_tfrecord_shard,
)
from steps.formats.webdataset import Sample, list_shards, sha256_file
from steps.shard.shard import main, shard_dataset
from tests.support.raw_images import make_raw

tf = pytest.importorskip("tensorflow", reason="TFRecord shards need TensorFlow")

SAMPLES = [
    (7, 0, "jpg", b"\xff\xd8 jpeg bytes 7"),
    (3, 2, "PNG", b"\x89PNG bytes 3" * 100),  # upper-case ext is stored lower-case
    (123456789, 1, "jpeg", b""),
    (2**40, 11, "jpg", bytes(range(256)) * 5),  # ids well past nine digits still round-trip
]


def _expected(samples) -> list[Sample]:
    return [Sample(i, label, raw, ext.lower()) for i, label, ext, raw in samples]


def _example(**features) -> bytes:
    """A hand-made record, for shards the writer would never make."""

    def feature(value):
        if isinstance(value, list):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=value))
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    feature_map = {name: feature(value) for name, value in features.items()}
    return tf.train.Example(features=tf.train.Features(feature=feature_map)).SerializeToString()


def _records(path, records):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return path


GOOD = dict(image=b"x", label=1, id=1, ext=b"jpg")


# --- writing and reading ---------------------------------------------------------------------


def test_round_trip_keeps_order_ids_labels_bytes_and_ext(tmp_path):
    shard = tmp_path / "s.tfrecord"
    assert write_tfrecord_shard(shard, SAMPLES) == len(SAMPLES)
    assert list(iter_tfrecord_shard(shard)) == _expected(SAMPLES)
    assert count_tfrecord_samples(shard) == len(SAMPLES)


def test_empty_shard(tmp_path):
    shard = tmp_path / "empty.tfrecord"
    assert write_tfrecord_shard(shard, []) == 0
    assert list(iter_tfrecord_shard(shard)) == [] and count_tfrecord_samples(shard) == 0


def test_identical_input_gives_identical_bytes(tmp_path):
    a, b, c = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord", tmp_path / "c.tfrecord"
    write_tfrecord_shard(a, SAMPLES)
    write_tfrecord_shard(b, iter(SAMPLES))
    write_tfrecord_shard(c, list(reversed(SAMPLES)))
    assert sha256_file(a) == sha256_file(b)
    assert sha256_file(a) != sha256_file(c)


@pytest.mark.parametrize(
    "bad, needle",
    [
        ((1, 0, "gif", b"x"), "gif"),
        ((-1, 0, "jpg", b"x"), "sample_id"),
        ((2**63, 0, "jpg", b"x"), "sample_id"),
        ((1, "3", "jpg", b"x"), "label"),
        ((1, True, "jpg", b"x"), "label"),
    ],
)
def test_invalid_sample_is_rejected_and_leaves_no_file(tmp_path, bad, needle):
    shard = tmp_path / "s.tfrecord"
    with pytest.raises(ValueError, match=needle):
        write_tfrecord_shard(shard, [SAMPLES[0], bad])
    assert list(tmp_path.iterdir()) == []


def test_failing_input_leaves_no_partial(tmp_path):
    def samples():
        yield SAMPLES[0]
        raise OSError("disk went away")

    with pytest.raises(OSError, match="disk went away"):
        write_tfrecord_shard(tmp_path / "s.tfrecord", samples())
    assert list(tmp_path.iterdir()) == []


def test_parse_record_in_a_tf_data_pipeline(tmp_path):
    shard = tmp_path / "s.tfrecord"
    write_tfrecord_shard(shard, SAMPLES)
    dataset = tf.data.TFRecordDataset([str(shard)]).map(parse_record, num_parallel_calls=2, deterministic=True)
    got = [{k: v.numpy() for k, v in record.items()} for record in dataset]
    assert got == [{"image": raw, "label": label, "id": i, "ext": ext.lower().encode()} for i, label, ext, raw in SAMPLES]
    assert set(feature_spec()) == {"image", "label", "id", "ext"}


def test_parsed_image_decodes_in_the_graph(tmp_path):
    raw_dir = make_raw(tmp_path / "raw", {"a": 1})
    image = next((raw_dir / "a").iterdir())
    shard = tmp_path / "s.tfrecord"
    write_tfrecord_shard(shard, [(0, 0, "jpg", image.read_bytes())])
    dataset = tf.data.TFRecordDataset(str(shard)).map(parse_record).map(lambda r: tf.io.decode_jpeg(r["image"]))
    assert [tuple(pixels.shape) for pixels in dataset] == [(16, 16, 3)]


# --- malformed shards --------------------------------------------------------------------------


def _cut(path, keep):
    path.write_bytes(path.read_bytes()[:keep])
    return path


def _flip(path, at):
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    "damage, record",
    [
        (lambda p, first: _cut(p, first + 2000), "record 1"),  # mid-payload of the second record
        (lambda p, first: _cut(p, first + 5), "record 1"),  # mid-header: tf.data alone would stop quietly
        (lambda p, first: _flip(p, first + 100), "record 1"),  # CRC mismatch
        (lambda p, first: p.write_bytes(p.read_bytes() + b"\0" * 3), "record 3"),  # trailing bytes
        (lambda p, first: p.write_bytes(b"this is not a tfrecord" * 100), "record 0"),
    ],
)
def test_corrupt_or_truncated_file_is_a_user_error(tmp_path, damage, record):
    shard = tmp_path / "s.tfrecord"
    write_tfrecord_shard(shard, [(i, 0, "jpg", bytes(3000)) for i in range(3)])
    first = FRAME_BYTES + len(next(iter(tf.data.TFRecordDataset(str(shard)))).numpy())
    damage(shard, first)
    for read in (lambda: list(iter_tfrecord_shard(shard)), lambda: count_tfrecord_samples(shard)):
        with pytest.raises(UserError) as err:
            read()
        assert str(shard) in err.value.message and record in err.value.message
        assert "shard step" in err.value.message and err.value.headline == "malformed shard"


MALFORMED = [
    (_example(image=b"x", id=1, ext=b"jpg"), "lacks feature 'label'"),
    (_example(image=b"x", label=1, ext=b"jpg"), "lacks feature 'id'"),
    (_example(image=b"x", label=b"1", id=1, ext=b"jpg"), "feature 'label' is a bytes_list"),
    (_example(image=b"x", label=[1, 2], id=1, ext=b"jpg"), "holds 2 values"),
    (_example(image=b"x", label=1, id=1, ext=b"gif"), "'gif'"),
    (_example(image=b"x", label=-1, id=1, ext=b"jpg"), "feature 'label' is -1"),
    (b"\xff\xff\xff", "not a serialized tf.train.Example"),
]


# ids by problem: a serialized map's byte order differs between processes (pytest-xdist workers must agree)
@pytest.mark.parametrize("record, problem", MALFORMED, ids=[problem for _, problem in MALFORMED])
def test_malformed_record_names_shard_and_index(tmp_path, record, problem):
    shard = _records(tmp_path / "bad.tfrecord", [_example(**GOOD), record])
    with pytest.raises(UserError, match=problem) as err:
        list(iter_tfrecord_shard(shard))
    assert str(shard) in err.value.message and "record 1" in err.value.message


def test_missing_shard_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="nowhere.tfrecord"):
        count_tfrecord_samples(tmp_path / "nowhere.tfrecord")


def test_list_tfrecord_shards_sorted_tfrecord_files_only(tmp_path):
    for name in ("train-00002.tfrecord", "train-00000.tfrecord", "train-00001.tfrecord", "train-00000.tar", "x.tfrecord.partial"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "dir.tfrecord").mkdir()
    assert [p.name for p in list_tfrecord_shards(tmp_path)] == [f"train-0000{i}.tfrecord" for i in range(3)]
    with pytest.raises(UserError, match="nowhere"):
        list_tfrecord_shards(tmp_path / "nowhere")


# --- the shard step ----------------------------------------------------------------------------


@pytest.mark.parametrize("hosts", [1, 2, 3])
def test_shard_step_writes_tfrecord_shards_and_manifest(tmp_path, hosts):
    raw = make_raw(tmp_path / "raw", {"a": 7, "b": 6, "c": 5})
    out = tmp_path / "out"
    manifest = shard_dataset(raw, out, data_hosts=hosts, validation_fraction=0.2, shard_format="tfrecord")
    assert manifest == json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "tfrecord" and manifest["classes"] == ["a", "b", "c"]
    ids = []
    for split in ("train", "validation"):
        entry = manifest["splits"][split]
        names = [s["name"] for s in entry["shards"]]
        assert names == [f"{split}/{split}-{i:05d}.tfrecord" for i in range(len(names))]
        assert [p.name for p in list_tfrecord_shards(out / split)] == [n.split("/")[1] for n in names]
        for shard in entry["shards"]:
            path = out / shard["name"]
            samples = list(iter_tfrecord_shard(path))
            assert shard["samples"] == len(samples) == count_tfrecord_samples(path)
            assert shard["bytes"] == path.stat().st_size and shard["sha256"] == sha256_file(path)
            ids += [s.sample_id for s in samples]
        assert entry["samples"] == sum(s["samples"] for s in entry["shards"])
    assert len(manifest["splits"]["train"]["shards"]) % hosts == 0
    assert manifest["splits"]["train"]["samples"] + manifest["splits"]["validation"]["samples"] == 18
    assert sorted(ids) == list(range(18))


def test_tfrecord_size_estimate_is_a_close_upper_bound(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 5, "b": 5}, side=40)
    manifest = shard_dataset(raw, tmp_path / "out", validation_fraction=0, shard_format="tfrecord")
    written = manifest["splits"]["train"]["bytes"]
    estimated = sum(FORMATS["tfrecord"].sample_bytes(p.stat().st_size) for p in raw.rglob("*.jpg"))
    assert written <= estimated <= written + 10 * 20


def test_same_input_same_tfrecord_bytes(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 6, "b": 6})
    first = shard_dataset(raw, tmp_path / "1", data_hosts=2, shard_format="tfrecord")
    again = shard_dataset(raw, tmp_path / "2", data_hosts=2, shard_format="tfrecord")
    assert first == again


def test_switching_format_removes_the_other_formats_shards(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 6, "b": 6})
    out = tmp_path / "out"
    shard_dataset(raw, out, data_hosts=2)
    shard_dataset(raw, out, shard_format="tfrecord")
    assert list_shards(out / "train") == [] and len(list_tfrecord_shards(out / "train")) == 1
    shard_dataset(raw, out)
    assert list_tfrecord_shards(out / "train") == [] and len(list_shards(out / "train")) == 1


@pytest.mark.parametrize("bad", ["parquet", "", None])
def test_unknown_format_is_a_user_error(tmp_path, bad):
    with pytest.raises(UserError, match="webdataset, tfrecord"):
        shard_dataset(tmp_path, tmp_path / "out", shard_format=bad)


def test_missing_tensorflow_fails_before_any_output(tmp_path, monkeypatch):
    raw = make_raw(tmp_path / "raw", {"a": 2})
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # makes `import tensorflow` raise ImportError
    with pytest.raises(UserError, match="need TensorFlow.*--format webdataset"):
        shard_dataset(raw, tmp_path / "out", shard_format="tfrecord")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UserError, match="need TensorFlow"):
        list(iter_tfrecord_shard(tmp_path / "any.tfrecord"))


def test_cli_format_flag(tmp_path, capsys):
    raw = make_raw(tmp_path / "raw", {"a": 3, "b": 3})
    out = tmp_path / "out"
    assert main(["--input", str(raw), "--output", str(out), "--format", "tfrecord", "--data-hosts", "2"]) == 0
    assert capsys.readouterr().out.startswith("shard: ")
    assert json.loads((out / "manifest.json").read_text())["format"] == "tfrecord"
    assert [p.name for p in list_tfrecord_shards(out / "train")] == ["train-00000.tfrecord", "train-00001.tfrecord"]

"""TFRecord shards: the shard step's output for TensorFlow input pipelines.

A shard is an uncompressed TFRecord file. Every record is one serialized
``tf.train.Example`` with four features:

    image   bytes   the original image file bytes (not decoded)
    label   int64   the class index
    id      int64   the sample's global id, unique across train and validation
    ext     bytes   the image extension, b"jpg", b"jpeg" or b"png"

The same samples, ids and manifest as the tar format (`steps.formats.webdataset`), so a
trainer can prove it saw every sample exactly once whichever format it reads.

Why TFRecord: `tf.data.TFRecordDataset` and tf.data.service workers stream it
natively with CRC checks, and `parse_record` is plain TF ops, so parsing runs
inside the tf.data graph on whichever host owns the input pipeline.

    from steps.formats.tfrecord import write_tfrecord_shard, iter_tfrecord_shard, parse_record
    write_tfrecord_shard("train-00000.tfrecord", [(0, 3, "jpg", jpeg_bytes)])
    for sample in iter_tfrecord_shard("train-00000.tfrecord"):
        ...
    dataset = tf.data.TFRecordDataset(paths).map(parse_record)

TensorFlow is imported by the functions that need it, not by this module, so
code that only plans or lists shards stays fast and TF-free.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from steps.common.errors import UserError
from steps.formats.webdataset import IMAGE_EXTS, Sample, _checked_ext

if TYPE_CHECKING:
    import tensorflow as tf

SUFFIX = ".tfrecord"
# Each record is framed by an 8-byte length, a 4-byte length CRC and a 4-byte data CRC.
FRAME_BYTES = 16
INT64_MAX = 2**63 - 1


def write_tfrecord_shard(path: str | os.PathLike, samples: Iterable[tuple[int, int, str, bytes]]) -> int:
    """Write ``(sample_id, label, ext, raw_bytes)`` tuples, in the order given, as one shard.

    The bytes depend only on the input (Examples are serialized deterministically),
    so a re-run produces the same sha256. Written to a temporary name and renamed
    so a crash never leaves a half shard behind a valid-looking ``*.tfrecord`` name.
    Returns the number of samples written.
    """
    tf = _tensorflow()
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    count = 0
    try:
        with tf.io.TFRecordWriter(str(tmp)) as writer:
            for sample_id, label, ext, raw in samples:
                writer.write(_example(tf, path, sample_id, label, ext, raw))
                count += 1
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return count


def _example(tf, path: Path, sample_id: int, label: int, ext: str, raw: bytes) -> bytes:
    ext = _checked_ext(ext, path)
    for name, value in (("sample_id", sample_id), ("label", label)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
            raise ValueError(f"{name} must be an int >= 0 (and fit in int64), got {value!r}")
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(raw)])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[sample_id])),
        "ext": tf.train.Feature(bytes_list=tf.train.BytesList(value=[ext.encode("ascii")])),
    }
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    # `feature` is a protobuf map; only deterministic serialization fixes its key order.
    return example.SerializeToString(deterministic=True)


def feature_spec() -> dict:
    """The ``tf.io.parse_single_example`` spec for one record: four scalar features."""
    tf = _tensorflow()
    return {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
        "id": tf.io.FixedLenFeature([], tf.int64),
        "ext": tf.io.FixedLenFeature([], tf.string),
    }


def parse_record(record: tf.Tensor) -> dict[str, tf.Tensor]:
    """One serialized record -> ``{"image", "label", "id", "ext"}`` scalar tensors.

    TF ops only, so it runs inside a tf.data graph (``dataset.map(parse_record)``),
    tf.data.service workers included. ``image`` is still the encoded file.
    """
    return _tensorflow().io.parse_single_example(record, feature_spec())


def iter_tfrecord_shard(path: str | os.PathLike) -> Iterator[Sample]:
    """Stream the samples of one shard in stored order, checking every record.

    Raises `UserError` naming the shard (and record index) when the file is
    truncated or corrupt (CRC mismatch), or a record is not an Example whose four
    features above each hold one value of the right type.
    """
    tf = _tensorflow()
    path = Path(path)
    size = _file_size(path)
    records = iter(tf.data.TFRecordDataset(str(path)))
    index = offset = 0
    while True:
        try:
            record = next(records).numpy()
        except StopIteration:
            break
        except tf.errors.DataLossError as exc:
            raise _malformed(path, index, f"corrupt or truncated TFRecord data ({_tf_message(exc)})") from exc
        except tf.errors.OpError as exc:
            raise UserError(f"cannot read shard {path}: {_tf_message(exc)}") from exc
        yield _to_sample(tf, path, index, record)
        index, offset = index + 1, offset + FRAME_BYTES + len(record)
    if offset != size:
        # TFRecordDataset stops quietly at a partial record header; the sizes tell.
        raise _malformed(path, index, f"file is {size} bytes but its records end at byte {offset} (truncated or trailing data)")


def count_tfrecord_samples(path: str | os.PathLike) -> int:
    """Number of samples in a shard; TFRecord has no index, so every record is read and checked."""
    return sum(1 for _ in iter_tfrecord_shard(path))


def list_tfrecord_shards(directory: str | os.PathLike) -> list[Path]:
    """The ``*.tfrecord`` files directly inside ``directory``, sorted by name."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"shard folder {directory} does not exist or is not a folder")
    return sorted(p for p in directory.glob(f"*{SUFFIX}") if p.is_file())


# --- reading helpers ---------------------------------------------------------------


def _file_size(path: Path) -> int:
    if not path.is_file():
        raise UserError(f"cannot read shard {path}: it does not exist or is not a file")
    return path.stat().st_size


def _to_sample(tf, path: Path, index: int, record: bytes) -> Sample:
    try:
        features = tf.train.Example.FromString(record).features.feature
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError type differs between backends
        raise _malformed(path, index, f"is not a serialized tf.train.Example ({exc})") from exc
    raw = _scalar(path, index, features, "image", "bytes_list")
    label = _scalar(path, index, features, "label", "int64_list")
    sample_id = _scalar(path, index, features, "id", "int64_list")
    ext = _scalar(path, index, features, "ext", "bytes_list").decode("ascii", errors="replace")
    if ext not in IMAGE_EXTS:
        raise _malformed(path, index, f"feature 'ext' is {ext[:20]!r}, expected one of {IMAGE_EXTS}")
    for name, value in (("label", label), ("id", sample_id)):
        if value < 0:
            raise _malformed(path, index, f"feature {name!r} is {value}, expected an integer >= 0")
    return Sample(sample_id=sample_id, label=label, raw=raw, ext=ext)


def _scalar(path: Path, index: int, features, name: str, kind: str):
    """The single value of feature ``name``, which must be a ``kind`` list of length 1."""
    if name not in features:
        raise _malformed(path, index, f"lacks feature {name!r}")
    feature = features[name]
    if feature.WhichOneof("kind") != kind:
        raise _malformed(path, index, f"feature {name!r} is a {feature.WhichOneof('kind')}, expected a {kind}")
    values = getattr(feature, kind).value
    if len(values) != 1:
        raise _malformed(path, index, f"feature {name!r} holds {len(values)} values, expected 1")
    return values[0]


def _tf_message(exc) -> str:
    """A TF error's message without its ``{{function_node ...}}`` and ``[Op:...]`` decorations."""
    text = re.sub(r"\{\{.*?\}\}\s*", "", exc.message)
    return re.sub(r"\s*\[Op:.*$", "", text, flags=re.DOTALL).strip()


def _malformed(path: Path, index: int, problem: str) -> UserError:
    return UserError(
        f"shard {path}, record {index}: {problem}. Re-create the shards with the shard step (steps/shard/shard.py).",
        headline="malformed shard",
    )


def check_tensorflow() -> None:
    """Fail now, not after slow work, when TensorFlow is not installed (it is not imported here)."""
    if importlib.util.find_spec("tensorflow") is None:
        raise _missing_tensorflow("No module named 'tensorflow'")


def _tensorflow():
    if "tensorflow" not in sys.modules:
        # TensorFlow's C++ INFO lines (CPU features) would drown the step's own log; warnings still show. Only before
        # the import: parse_record runs this inside tf.data graphs, and AutoGraph, failing to convert
        # os.environ.setdefault, logged the bound method, the whole environment in its repr
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise _missing_tensorflow(str(exc)) from exc
    return tf


def _missing_tensorflow(reason: str) -> UserError:
    return UserError(
        f"TFRecord shards need TensorFlow, which this Python ({sys.executable}) cannot import "
        f"({reason}); install tensorflow-cpu, or use --format webdataset",
        headline="missing dependency",
    )

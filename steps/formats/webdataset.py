"""WebDataset-style tar shards: the one on-disk format between the shard step and training.

A shard is an uncompressed tar. Every sample is two adjacent members sharing a key:

    000000042.jpg   the original image bytes (ext jpg, jpeg or png, lowercased)
    000000042.cls   the class index as ASCII decimal, e.g. ``3``

The key is the sample's global id (``f"{sample_id:09d}"``), unique across train and
validation, so a trainer can prove it saw every sample exactly once.

Why tar: SageMaker moves 1-128 MB objects far faster than millions of small files,
`ShardedByS3Key` splits a channel per object, and any tar reader (or WebDataset)
can stream it without an index.

    from steps.formats.webdataset import write_shard, iter_shard
    write_shard("train-00000.tar", [(0, 3, "jpg", jpeg_bytes)])
    for sample in iter_shard("train-00000.tar"):
        ...
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol

from steps.common.errors import UserError
from steps.common.files import writing

if TYPE_CHECKING:
    import numpy as np

IMAGE_EXTS = ("jpg", "jpeg", "png")
LABEL_EXT = "cls"
KEY_DIGITS = 9


class Sample(NamedTuple):
    """One decoded-from-tar sample; ``raw`` is still the encoded image file."""

    sample_id: int
    label: int
    raw: bytes
    ext: str


class Decoder(Protocol):
    """What decodes a sample's ``raw`` bytes: a workload (`steps.train.workload.Workload.decode`), as code that must not
    import the workload's framework sees it."""

    def decode(self, raw: bytes, *, train: bool, rng: np.random.Generator) -> np.ndarray: ...


def sample_key(sample_id: int) -> str:
    return f"{sample_id:0{KEY_DIGITS}d}"


def write_shard(path: str | os.PathLike, samples: Iterable[tuple[int, int, str, bytes]]) -> int:
    """Write ``(sample_id, label, ext, raw_bytes)`` tuples, in the order given, as one shard.

    The bytes depend only on the input (mtime 0, root owner, mode 0o644), so a
    re-run produces the same sha256. Written to a temporary name and renamed so a
    crash never leaves a half shard behind a valid-looking ``*.tar`` name.
    Returns the number of samples written.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    count = 0
    try:
        with writing(path), tarfile.open(tmp, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for sample_id, label, ext, raw in samples:
                ext = _checked_ext(ext, path)
                if not isinstance(sample_id, int) or sample_id < 0:
                    raise ValueError(f"sample_id must be an int >= 0, got {sample_id!r}")
                if not isinstance(label, int) or label < 0:
                    raise ValueError(f"label must be an int >= 0, got {label!r}")
                key = sample_key(sample_id)
                _add_member(tar, f"{key}.{ext}", bytes(raw))
                _add_member(tar, f"{key}.{LABEL_EXT}", str(label).encode("ascii"))
                count += 1
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return count


def _checked_ext(ext: str, path: Path) -> str:
    ext = ext.lower().lstrip(".")
    if ext not in IMAGE_EXTS:
        raise ValueError(f"{path}: image extension must be one of {IMAGE_EXTS}, got {ext!r}")
    return ext


def _add_member(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(payload))


def iter_shard(path: str | os.PathLike) -> Iterator[Sample]:
    """Stream the samples of one shard in stored order.

    Reads the tar sequentially (``r|``), so it works on pipes and FastFile
    mounts alike. Raises `UserError` naming the shard and member when the shard
    is not a tar, a pair is incomplete, or a label is not a decimal integer.
    """
    path = Path(path)
    with _OpenShard(path, "r|") as tar:
        for key, group in _groups(path, tar, read=lambda m: _read(tar, m)):
            yield _to_sample(path, key, group)


def count_samples(path: str | os.PathLike) -> int:
    """Number of samples in a shard, from the tar headers alone (payloads are skipped)."""
    path = Path(path)
    with _OpenShard(path, "r:") as tar:
        # Random-access mode seeks over payloads; pairs are still checked by name.
        groups = _groups(path, tar, read=lambda m: b"")
        return sum(1 for key, group in groups if _image_ext(path, key, group))


def list_shards(directory: str | os.PathLike) -> list[Path]:
    """The ``*.tar`` files directly inside ``directory``, sorted by name."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"shard folder {directory} does not exist or is not a folder")
    return sorted(p for p in directory.glob("*.tar") if p.is_file())


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- reading helpers ---------------------------------------------------------------


class _OpenShard:
    """``tarfile.open`` whose errors (also those raised while iterating) become UserErrors."""

    def __init__(self, path: Path, mode: Literal["r|", "r:"]) -> None:
        self.path, self.mode = path, mode

    def __enter__(self) -> tarfile.TarFile:
        try:
            self.tar = tarfile.open(self.path, mode=self.mode)
        except (tarfile.TarError, EOFError) as exc:
            raise _malformed(self.path, None, f"not a readable tar file ({exc})") from exc
        except OSError as exc:
            raise UserError(f"cannot read shard {self.path}: {exc}") from exc
        return self.tar

    def __exit__(self, exc_type, exc, tb) -> None:
        self.tar.close()
        if isinstance(exc, (tarfile.TarError, EOFError)):
            raise _malformed(self.path, None, f"corrupt or truncated tar ({exc})") from exc


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tar.extractfile(member)
    assert f is not None, "only regular files reach _read"
    return f.read()


def _groups(path: Path, tar: tarfile.TarFile, *, read: Callable[[tarfile.TarInfo], bytes]):
    """Yield ``(key, {ext: (member_name, payload)})`` for each run of members sharing a key.

    Members of one sample must be adjacent (that is what lets a reader stream).
    """
    key: str | None = None
    group: dict[str, tuple[str, bytes]] = {}
    for member in tar:
        if not member.isfile():
            raise _malformed(path, member.name, "is not a regular file")
        member_key, _, ext = member.name.partition(".")
        if not member_key.isdigit() or not ext:
            raise _malformed(path, member.name, "name is not '<numeric key>.<ext>'")
        if member_key != key:
            if key is not None:
                yield key, group
            key, group = member_key, {}
        if ext in group:
            raise _malformed(path, member.name, "appears twice")
        # Payloads must be read now: a streaming tar cannot go back to them.
        group[ext] = (member.name, read(member))
    if key is not None:
        yield key, group


def _image_ext(path: Path, key: str, group: dict[str, tuple[str, bytes]]) -> str:
    """Check a member group is exactly one image plus one label; return the image ext."""
    first = next(iter(group.values()))[0]
    unknown = [name for ext, (name, _) in group.items() if ext not in IMAGE_EXTS and ext != LABEL_EXT]
    if unknown:
        raise _malformed(path, unknown[0], f"has an unknown extension (expected {IMAGE_EXTS} or {LABEL_EXT})")
    images = [ext for ext in group if ext in IMAGE_EXTS]
    if len(images) != 1:
        raise _malformed(path, first, f"sample {key} needs exactly one image member, found {len(images)}")
    if LABEL_EXT not in group:
        raise _malformed(path, first, f"sample {key} has no {key}.{LABEL_EXT} label member")
    return images[0]


def _to_sample(path: Path, key: str, group: dict[str, tuple[str, bytes]]) -> Sample:
    ext = _image_ext(path, key, group)
    label_name, label_bytes = group[LABEL_EXT]
    text = label_bytes.decode("ascii", errors="replace").strip()
    if not text.isdigit():
        raise _malformed(path, label_name, f"label {text[:20]!r} is not a non-negative decimal integer")
    return Sample(sample_id=int(key), label=int(text), raw=group[ext][1], ext=ext)


def _malformed(path: Path, member: str | None, problem: str) -> UserError:
    where = f"shard {path}" + (f", member {member}" if member else "")
    return UserError(
        f"{where}: {problem}. Re-create the shards with the shard step (steps/shard/shard.py).",
        headline="malformed shard",
    )

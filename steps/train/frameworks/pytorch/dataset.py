"""Reading shards into ready uint8 batches: the CPU-heavy half of training.

The same code feeds both paths: a data host's data service, and the trainer's
own DataLoader in a homogeneous run. Work is split across DataLoader workers
by sample index, not by shard, so one shard per host still uses every core.
A sample that fails to decode is not dropped silently: it travels in the
batch's ``corrupt`` list (id and reason) and the trainer reports the count.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import multiprocessing.context
import os
import pickle
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, SupportsInt

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from steps.common.errors import HeteroError, UserError
from steps.formats.webdataset import iter_shard
from steps.train.core.cluster import available_cpus
from steps.train.core.constants import SHUFFLE_BUFFER
from steps.train.core.split import ALL, Take
from steps.train.workload import Workload


@dataclass
class Batch:
    """One ready batch: uint8 NHWC pixels, int64 labels and sample ids."""

    pixels: torch.Tensor
    labels: torch.Tensor
    ids: torch.Tensor
    corrupt: list = field(default_factory=list)  # [(sample_id, reason)]
    cpu_s: float = 0.0  # CPU seconds its worker spent reading, decoding and batching it
    epoch: int = 0
    source: str = "local"
    release: Callable[..., None] = field(default=lambda event=None: None, repr=False)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getstate__(self) -> dict[str, Any]:  # crosses from DataLoader workers: the release hook stays behind
        state = dict(self.__dict__)
        state.pop("release")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, release=_no_release)

    def pin_memory(self) -> Batch:  # DataLoader(pin_memory=True) calls this
        self.pixels, self.labels, self.ids = self.pixels.pin_memory(), self.labels.pin_memory(), self.ids.pin_memory()
        return self


def _no_release(event=None) -> None:
    pass


class ShardDataset(IterableDataset):
    """Samples of some shards, decoded; each ``__iter__`` call is one epoch."""

    def __init__(
        self,
        shards: list[Path],
        workload: Workload,
        *,
        train: bool,
        seed: int = 0,
        stream: int = 0,
        part: tuple[int, int] = (0, 1),
        take: Take = ALL,
    ) -> None:
        """``take``: only the samples at these positions of each shard (this host's side of a hybrid decode
        split, `steps.train.core.split`); ``part=(i, n)``: of those, every n-th, for n hosts that all see the same
        shards (a FullyReplicated channel) yet must each serve a distinct share."""
        self.shards = list(shards)
        self.part = part
        self.take = take
        self.workload = workload
        self.train = train
        self.seed = seed
        self.stream = stream
        self._epoch = -1  # persistent workers keep their copy: counting calls tracks the epoch
        self._resumed: tuple[int, frozenset] = (-1, frozenset())
        # a Throttle: how many of its DataLoader workers decode at once (`steps.train.frameworks.pytorch.throttle`)
        self.throttle: contextlib.AbstractContextManager | None = None

    def resume(self, epoch: int, consumed: Iterable[SupportsInt]) -> None:
        """Start at ``epoch``, leaving out of it the sample ids in ``consumed`` (a checkpoint's input position).
        Before the first iteration: DataLoader workers take their copy of the dataset then."""
        self._epoch = epoch - 1
        self._resumed = (epoch, frozenset(int(i) for i in consumed))

    def share(self, take: Take) -> None:
        """Decode only the samples at ``take``'s positions of each shard; before the first iteration, as `resume`."""
        self.take = take

    def samples_per_epoch(self, counts: list[int]) -> int:
        """This host's samples per epoch, from every shard's sample count (same order as ``shards``)."""
        return sum(self.take.count(n) for n in counts) // self.part[1]

    def __iter__(self) -> Iterator:
        self._epoch += 1
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        shards = list(self.shards)
        if self.train:
            # the same order on every host of a part split, or the shares would overlap
            random.Random(f"{self.seed}/{self.stream if self.part[1] == 1 else 'replicated'}/{self._epoch}").shuffle(shards)
        rng = np.random.default_rng([self.seed, self.stream, self._epoch, worker])
        index, count = self.part
        stride, offset = count * workers, index * workers + worker
        samples = (s for i, s in enumerate(_chain(shards, self.take)) if i % stride == offset)
        if self._epoch == self._resumed[0] and self._resumed[1]:
            consumed = self._resumed[1]
            samples = (s for s in samples if s.sample_id not in consumed)
        decoded = (self._decode(s, rng) for s in samples)
        yield from _costed(_shuffled(decoded, rng) if self.train else decoded)

    def _decode(self, sample, rng):
        with self.throttle or contextlib.nullcontext():
            return self._decode_one(sample, rng)

    def _decode_one(self, sample, rng):
        try:
            return sample.sample_id, sample.label, self.workload.decode(sample.raw, train=self.train, rng=rng), None
        except Exception as exc:  # noqa: BLE001 - a bad sample must not end the epoch
            return sample.sample_id, sample.label, None, f"{type(exc).__name__}: {exc}"[:200]


def _costed(items):
    """Each item with the CPU seconds this thread spent producing it (read, decode, shuffle) appended:
    what a data host reports per sample, measured where the work runs."""
    started = time.thread_time()
    for item in items:
        now = time.thread_time()
        yield (*item, now - started)
        started = time.thread_time()


def _chain(shards, take: Take = ALL):
    for shard in shards:
        if take == ALL:
            yield from iter_shard(shard)
        else:
            yield from (s for k, s in enumerate(iter_shard(shard)) if k in take)


def _shuffled(items, rng: np.random.Generator):
    buffer = []
    for item in items:
        buffer.append(item)
        if len(buffer) >= SHUFFLE_BUFFER:
            yield buffer.pop(int(rng.integers(len(buffer))))
    rng.shuffle(buffer)
    yield from buffer


def collate(items: Sequence[tuple]) -> Batch:
    """One `Batch` of ``(sample_id, label, pixels | None, error | None[, cpu_s])`` items."""
    started = time.thread_time()
    good = [(sid, label, px) for sid, label, px, err, *_ in items if err is None]
    corrupt = [(sid, err) for sid, _, px, err, *_ in items if err is not None]
    if good:
        pixels = torch.from_numpy(np.stack([px for _, _, px in good]))
    else:
        pixels = torch.empty((0, 0, 0, 3), dtype=torch.uint8)
    labels = torch.tensor([label for _, label, _ in good], dtype=torch.int64)
    ids = torch.tensor([sid for sid, _, _ in good], dtype=torch.int64)
    cpu_s = sum(item[4] for item in items if len(item) > 4) + time.thread_time() - started
    return Batch(pixels=pixels, labels=labels, ids=ids, corrupt=corrupt, cpu_s=cpu_s)


class BatchLoader(DataLoader):
    """A DataLoader of `Batch` whose worker errors keep their own message.

    torch re-raises a worker's exception in the parent with the message replaced by
    "Caught X in DataLoader worker process N. Original Traceback: ...". For our own errors
    (a malformed shard, say) the last line of that text is what the user must read.
    """

    # a generator of batches where DataLoader declares its iterator class: what a caller does with either is iterate
    def __iter__(self) -> Iterator[Batch]:  # type: ignore[override]
        try:
            yield from super().__iter__()
        except Exception as exc:  # not GeneratorExit: a loop that stops early keeps its workers
            self._stop_workers()
            if not isinstance(exc, HeteroError) or "Original Traceback" not in exc.message:
                raise
            last = [line for line in exc.message.splitlines() if line.strip()][-1]
            raise type(exc)(last.split(": ", 1)[-1], headline=exc.headline) from None

    def _stop_workers(self) -> None:
        """End the persistent workers now: a failed loader is not iterated again, and
        left to garbage collection its workers are joined whenever that happens to run."""
        iterator, self._iterator = getattr(self, "_iterator", None), None
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()


def batch_loader(
    dataset: ShardDataset,
    *,
    batch_size: int,
    num_workers: int = 0,
    pin_memory: bool = False,
    in_process: bool = False,
    cpus: list[int] | None = None,
    start_method: str | None = None,
) -> BatchLoader:
    """A DataLoader of `Batch` over `dataset`, one worker per available CPU by default; ``in_process``: none,
    the caller's process decodes between its own steps; ``cpus``: the CPUs its workers may run on (all of the
    caller's by default); ``start_method``: how its workers start (`worker_start_method` by default)."""
    workers = 0 if in_process else num_workers or available_cpus()
    method = start_method or worker_start_method()
    if workers > 0 and method != "fork":
        _check_pickles(dataset.workload)
    return BatchLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        collate_fn=collate,
        pin_memory=pin_memory,
        persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,
        worker_init_fn=functools.partial(_run_on, sorted(cpus)) if cpus else None,
        multiprocessing_context=_context(method) if workers > 0 else None,
    )


def worker_start_method() -> str:
    """``fork`` (the quickest start) unless this process has initialised CUDA: then ``forkserver``. A worker forked
    from a CUDA process inherits its CUDA tensors, and where the worker frees one (garbage it collects, another
    thread's frame) the CUDA runtime aborts it ("CUDA error: initialization error"): seen on a GPU trainer host
    decoding locally (TrainerCpus=auto, after its cost probe ran on the GPU); the abort's stack freed a tensor through
    a numpy array, as the data plane's views of its pinned buffers are. A forkserver worker starts from a clean
    process and receives the dataset pickled, which holds no CUDA state (so a workload must pickle there)."""
    return "forkserver" if torch.cuda.is_initialized() else "fork"


def _check_pickles(workload: object) -> None:
    """A workload crosses into forkserver workers pickled: say so at once, naming the workload, rather than with a
    pickling traceback from inside the DataLoader."""
    try:
        pickle.dumps(workload)
    except RuntimeError:
        pass  # a multiprocessing object (a Value, a lock) pickles only while a worker is being started: it will then
    except (pickle.PicklingError, TypeError, AttributeError) as exc:  # a lambda or local class, a file, a thread lock
        raise UserError(
            f"workload {type(workload).__module__}.{type(workload).__qualname__} cannot be pickled ({exc}); a GPU "
            "trainer's decode workers receive it pickled: keep only picklable state on it (no lambdas, open files or "
            "locks; build those in decode or on first use)",
            headline="bad workload",
        ) from None


def _context(method: str) -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        # the server imports torch and this module once; each worker is then forked from it in milliseconds
        # instead of importing torch itself (seconds per worker). Effective until the server starts.
        context.set_forkserver_preload([__name__])
    return context


def _run_on(cpus: list[int], worker_id: int) -> None:
    os.sched_setaffinity(0, cpus)

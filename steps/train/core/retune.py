"""Runtime retune: a host's active decode workers follow what its consumer needs, one worker at a time.

Cachew's rule (ATC'22) is the start: every interval, measure how long the
consumer (a trainer's loop; a data host's senders) waited for data and how many
samples this host's workers produced. While the consumer waits, add a worker;
keep it only if it helped (more samples per second, or much less waiting),
else take it back. While the consumer never waits, remove a worker; keep the
removal only if it did not hurt (samples per second within a few percent, the
consumer still not waiting), else put it back. Two hysteresis rules keep it
from flapping: the interval right after a change is not judged (workers start,
queues refill), and a change that was taken back sets a cap (or floor) that
holds for some intervals. Workers stay within [lo, hi].

`Controller` is the rule, pure; `Retuner` runs it on a thread against a host's
cumulative counters and applies its decisions through a callable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

INTERVAL_S = 3.0  # long enough for a few batches per worker, short enough to react within a minute
WAITING = 0.05  # the consumer waited more than this share of the interval: it wants more data
IDLE = 0.01  # the consumer waited at most this share: it never waits
GAIN = 0.07  # an added worker must raise samples per second by this much (Cachew's 7%)
LOSS = 0.03  # a removed worker may cost at most this much (Cachew's 3%)
PATIENCE = 2  # intervals of no waiting before a worker is removed
HOLD = 10  # intervals a taken-back change keeps its cap or floor
REPORTED_CHANGES = 16  # the latest changes a report carries (a data host's rides on every batch)


@dataclass(frozen=True)
class Interval:
    """One measured interval: ``seconds`` long, the consumer ``waited_s`` of it (summed over ``consumers`` waiting in
    parallel), this host's workers produced ``samples``."""

    seconds: float
    waited_s: float
    samples: int
    consumers: int = 1

    @property
    def wait_share(self) -> float:
        return min(1.0, self.waited_s / (self.seconds * self.consumers)) if self.seconds > 0 else 0.0

    @property
    def rate(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Change:
    t: float  # seconds since the retune began
    before: int
    after: int
    why: str

    def as_dict(self) -> dict:
        return {"t": round(self.t, 3), "from": self.before, "to": self.after, "why": self.why}


class Controller:
    """The +/-1 rule over ``start`` workers within [``lo``, ``hi``]; `step` judges one `Interval`."""

    def __init__(self, start: int, lo: int, hi: int) -> None:
        if not 1 <= lo <= start <= hi:
            raise ValueError(f"retune bounds must hold 1 <= lo <= start <= hi, got lo={lo} start={start} hi={hi}")
        self.workers, self.lo, self.hi = start, lo, hi
        self._settling = False  # the interval after a change is not judged
        self._trial: tuple[int, Interval] | None = None  # a change on trial: its direction and the interval before it
        self._idle = 0  # consecutive intervals without waiting
        self._cap, self._floor = hi, lo
        self._held = 0  # intervals left before a taken-back change's cap or floor lifts

    def step(self, interval: Interval, t: float) -> Change | None:
        """The change to make after ``interval`` (ended ``t`` seconds into the retune), or None."""
        if interval.samples == 0 and interval.waited_s == 0:
            return None  # nothing asked, nothing made: between epochs, or after the last
        self._tick_hold()
        if self._settling:
            self._settling = False
            return None
        if self._trial is not None:
            return self._judge(self._trial, interval, t)
        share = interval.wait_share
        self._idle = self._idle + 1 if share <= IDLE else 0
        if share > WAITING and self.workers < min(self.hi, self._cap):
            return self._try(+1, interval, t, f"the consumer waited {share:.0%} of the last {interval.seconds:.0f} s")
        if self._idle >= PATIENCE and self.workers > max(self.lo, self._floor):
            self._idle = 0
            return self._try(-1, interval, t, f"the consumer did not wait for {PATIENCE} intervals")
        return None

    def _try(self, direction: int, before: Interval, t: float, why: str) -> Change:
        self._trial = (direction, before)
        return self._move(direction, t, why)

    def _judge(self, trial: tuple[int, Interval], after: Interval, t: float) -> Change | None:
        direction, before = trial
        self._trial = None
        if direction > 0:
            helped = after.rate >= before.rate * (1 + GAIN) or after.wait_share <= before.wait_share / 2
            if helped:
                return None
            self._cap, self._held = self.workers - 1, HOLD
            return self._move(
                -1, t, f"the added worker did not help ({before.rate:.0f} -> {after.rate:.0f} samples/s, less than +{GAIN:.0%})"
            )
        hurt = after.rate < before.rate * (1 - LOSS) or after.wait_share > WAITING
        if not hurt:
            return None
        self._floor, self._held = self.workers + 1, HOLD
        return self._move(
            +1,
            t,
            f"the removed worker was needed ({before.rate:.0f} -> {after.rate:.0f} samples/s, "
            f"the consumer waited {after.wait_share:.0%})",
        )

    def _move(self, direction: int, t: float, why: str) -> Change:
        before, self.workers = self.workers, self.workers + direction
        self._settling = True
        return Change(t, before, self.workers, why)

    def _tick_hold(self) -> None:
        if self._held:
            self._held -= 1
            if not self._held:
                self._cap, self._floor = self.hi, self.lo


class Retuner:
    """Runs a `Controller` every ``interval_s`` on a daemon thread. ``read()``: the cumulative seconds the consumer
    waited and samples produced so far; ``apply(n)``: make ``n`` workers active, returning how many are (a change
    that could not be made is not recorded). ``consumers``: how many wait in parallel (their waits are summed)."""

    def __init__(
        self,
        controller: Controller,
        read: Callable[[], tuple[float, int]],
        apply: Callable[[int], int],
        *,
        consumers: Callable[[], int] = lambda: 1,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.controller = controller
        self.read, self.apply, self.consumers = read, apply, consumers
        self.interval_s = interval_s
        self.start_workers = controller.workers
        self.changes: list[Change] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="retune")
        self._began = time.monotonic()

    def start(self) -> Retuner:
        self._began = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def tick(self, interval: Interval) -> Change | None:
        """Judge one interval and apply the decision (the thread's body, callable on its own)."""
        change = self.controller.step(interval, time.monotonic() - self._began)
        if change is None:
            return None
        made = self.apply(change.after)
        if made != change.after:  # could not be made now (a worker held its token past the wait): stay in step
            self.controller.workers = made
            return None
        self.changes.append(change)
        print(f"[retune] decode workers {change.before} -> {change.after}: {change.why}", flush=True)
        return change

    def report(self) -> dict:
        """``decode_workers`` of metrics.json: the workers at the start and now, the bounds, the latest changes."""
        return {
            "start": self.start_workers,
            "end": self.controller.workers,
            "bounds": [self.controller.lo, self.controller.hi],
            "interval_s": self.interval_s,
            "changed": len(self.changes),
            "changes": [c.as_dict() for c in self.changes[-REPORTED_CHANGES:]],
        }

    def _run(self) -> None:
        waited, samples = self.read()
        started = time.monotonic()
        while not self._stop.wait(self.interval_s):
            now_waited, now_samples = self.read()
            now = time.monotonic()
            self.tick(Interval(now - started, now_waited - waited, now_samples - samples, max(self.consumers(), 1)))
            waited, samples, started = now_waited, now_samples, now


def fixed(workers: int, why: str) -> dict:
    """``decode_workers`` of a host that does not retune: its workers throughout, and why."""
    return {"start": workers, "end": workers, "changed": 0, "changes": [], "off": why}

"""The retune rule: +1 worker while the consumer waits and the last addition helped, -1 while it never waits and the
last removal did not hurt, within bounds, with a settling interval after each change and a hold after a take-back."""

from __future__ import annotations

import threading
import time

import pytest

from steps.train.core import retune
from steps.train.core.retune import HOLD, PATIENCE, Controller, Interval, Retuner, fixed


def waited(share: float, rate: float = 100.0) -> Interval:
    return Interval(seconds=1.0, waited_s=share, samples=int(rate))


def run(c: Controller, intervals: list[Interval]) -> list[tuple[int, int] | None]:
    out = []
    for i, interval in enumerate(intervals):
        change = c.step(interval, float(i))
        out.append(None if change is None else (change.before, change.after))
    return out


def test_interval_shares_and_rates():
    assert Interval(2.0, 0.5, 100).wait_share == 0.25 and Interval(2.0, 0.5, 100).rate == 50
    assert Interval(2.0, 2.0, 10, consumers=4).wait_share == 0.25  # four senders waiting in parallel
    assert Interval(1.0, 5.0, 0).wait_share == 1.0  # clock skew between the two readings cannot exceed all of it
    assert Interval(0.0, 0.0, 0).wait_share == 0.0 and Interval(0.0, 0.0, 0).rate == 0.0


@pytest.mark.parametrize(("lo", "start", "hi"), [(0, 1, 2), (2, 1, 3), (1, 4, 3)])
def test_bounds_must_hold_the_start(lo, start, hi):
    with pytest.raises(ValueError, match=f"lo={lo} start={start} hi={hi}"):
        Controller(start, lo, hi)


def test_a_waiting_consumer_gets_a_worker_that_stays_when_it_helped():
    c = Controller(2, 1, 8)
    # wait -> add; the next interval settles; then judged: rate up 50% -> kept; still waiting -> add again
    assert run(c, [waited(0.4, 100), waited(0.3, 140), waited(0.3, 150), waited(0.2, 160)]) == [(2, 3), None, None, (3, 4)]
    assert c.workers == 4


def test_an_added_worker_that_did_not_help_is_taken_back_and_not_tried_again_while_held():
    c = Controller(2, 1, 8)
    assert run(c, [waited(0.4, 100), waited(0.4, 101), waited(0.4, 103)]) == [(2, 3), None, (3, 2)]
    # the consumer still waits, yet the cap of 2 holds for HOLD intervals (one settles after the take-back)
    held = run(c, [waited(0.4, 100)] * (HOLD - 1))
    assert held == [None] * (HOLD - 1) and c.workers == 2
    assert run(c, [waited(0.4, 100)]) == [(2, 3)]  # the hold has lifted: try again


def test_an_addition_that_cut_the_wait_counts_as_helping_without_a_higher_rate():
    # the consumer became the bottleneck: the rate can rise only a little, but it stopped waiting
    c = Controller(1, 1, 4)
    assert run(c, [waited(0.10, 100), waited(0.0, 104), waited(0.0, 104)]) == [(1, 2), None, None]
    assert c.workers == 2


def test_a_consumer_that_never_waits_loses_workers_while_that_does_not_hurt():
    c = Controller(4, 1, 4)
    steps = [waited(0.0, 100)] * PATIENCE  # -> remove after PATIENCE idle intervals
    out = run(c, steps + [waited(0.0, 100), waited(0.0, 99)])  # settle, then judged: within 3% -> kept
    assert out == [None] * (PATIENCE - 1) + [(4, 3), None, None] and c.workers == 3


def test_a_removal_that_hurt_is_put_back_and_the_floor_holds():
    c = Controller(3, 1, 3)
    out = run(c, [waited(0.0, 100)] * PATIENCE + [waited(0.0, 90), waited(0.0, 90)])
    assert out[-3:] == [(3, 2), None, (2, 3)]  # 10% fewer samples per second: the removed worker was needed
    assert run(c, [waited(0.0, 100)] * (HOLD - 1)) == [None] * (HOLD - 1)  # the floor of 3 holds


def test_a_removal_that_made_the_consumer_wait_is_put_back():
    c = Controller(2, 1, 2)
    out = run(c, [waited(0.0, 100)] * PATIENCE + [waited(0.2, 100), waited(0.2, 100)])
    assert out[-1] == (1, 2) and c.workers == 2


def test_workers_stay_within_bounds():
    top = Controller(3, 1, 3)
    assert run(top, [waited(0.9)] * 5) == [None] * 5  # already at hi
    bottom = Controller(1, 1, 3)
    assert run(bottom, [waited(0.0)] * 5) == [None] * 5  # already at lo


def test_a_middling_wait_changes_nothing():
    # between IDLE and WAITING: neither starved nor idle (the hysteresis band)
    c = Controller(2, 1, 4)
    assert run(c, [waited(0.03)] * 6) == [None] * 6


def test_an_empty_interval_is_not_judged():
    # between epochs or after the last: no samples and no waiting say nothing about the workers
    c = Controller(2, 1, 4)
    assert run(c, [waited(0.4), Interval(1.0, 0.0, 0), Interval(1.0, 0.0, 0), waited(0.4, 100), waited(0.3, 200)]) == [
        (2, 3),
        None,
        None,
        None,  # the settling interval: empty ones do not use it up
        None,  # judged: helped
    ]


def test_the_retuner_applies_records_and_reports_changes():
    applied = []
    tuner = Retuner(Controller(2, 1, 4), read=lambda: (0.0, 0), apply=lambda n: applied.append(n) or n)
    change = tuner.tick(waited(0.5))
    assert change is not None and applied == [3]
    report = tuner.report()
    assert report["start"] == 2 and report["end"] == 3 and report["bounds"] == [1, 4] and report["changed"] == 1
    assert report["changes"][0]["from"] == 2 and report["changes"][0]["to"] == 3
    assert "waited 50%" in report["changes"][0]["why"] and report["changes"][0]["t"] >= 0


def test_a_change_that_could_not_be_made_is_not_recorded():
    tuner = Retuner(Controller(3, 1, 3), read=lambda: (0.0, 0), apply=lambda n: 3)  # no token came back in time
    for _ in range(PATIENCE):
        tuner.tick(waited(0.0))
    assert tuner.changes == [] and tuner.controller.workers == 3


def test_the_report_carries_the_latest_changes_only(monkeypatch):
    monkeypatch.setattr(retune, "REPORTED_CHANGES", 2)
    tuner = Retuner(Controller(1, 1, 8), read=lambda: (0.0, 0), apply=lambda n: n)
    rate = 100
    for _ in range(4):
        tuner.tick(waited(0.5, rate))  # adds
        tuner.tick(waited(0.5, 2 * rate))  # settles
        tuner.tick(waited(0.5, 2 * rate))  # judged: it helped
        rate *= 2
    report = tuner.report()
    assert report["changed"] == 4 and [c["to"] for c in report["changes"]] == [4, 5]


def test_the_thread_reads_intervals_from_cumulative_counters():
    state = {"waited": 0.0, "samples": 0}
    lock = threading.Lock()
    applied = []

    def read():
        with lock:
            state["waited"] += 0.04  # the consumer waits 80% of each 0.05 s interval
            state["samples"] += 10
            return state["waited"], state["samples"]

    tuner = Retuner(Controller(1, 1, 2), read, lambda n: applied.append(n) or n, interval_s=0.05).start()
    deadline = time.monotonic() + 5
    while not applied and time.monotonic() < deadline:
        time.sleep(0.01)
    tuner.stop()
    assert applied and applied[0] == 2
    assert not tuner._thread.is_alive()


def test_a_host_that_does_not_retune_says_why():
    assert fixed(3, "retune=off") == {"start": 3, "end": 3, "changed": 0, "changes": [], "off": "retune=off"}

"""Which stage set a run's pace: input-bound, compute-bound or transport-bound, with the numbers that decided it.

- **compute-bound**: the trainers waited for data less than `WAIT_SHARE` of their steps; the step sets
  the pace, and more input capacity buys nothing.
- **input-bound**: they waited more, and the hosts that decode were busy (a data host's busy share, its
  CPU seconds over wall time and CPUs, at least `BUSY_SHARE`; a homogeneous trainer decodes for itself):
  more CPUs for decode (another data host, a bigger type) raise the rate.
- **transport-bound**: they waited more while the data hosts had CPU to spare: the batches are ready but
  do not arrive fast enough (the network, or the trainers' receiving), so more decode buys nothing.

The numbers come from `metrics.json` (schema 2: each data host measured itself, `steps.train.dataplane.meter`).
A schema-1 document has no data-host measurements, so input and transport are not told apart there.
"""

from __future__ import annotations

from steps.frameworks import TABLE

# A trainer that waits for data this share of its steps is fed too slowly (the planner's input-bound test too). Not a
# tunable: it separates real waiting from the noise of step-time measurement, which is no choice of the user's
WAIT_SHARE = 0.05
BUSY_SHARE = 0.80


def diagnose(metrics: dict) -> dict:
    wait = float(metrics["data_wait_share"])
    hosts = metrics.get("data_hosts") or []
    busy = [round(float(h["busy_share"]), 4) for h in hosts]
    wire = float(metrics.get("bytes_received_per_sample") or 0.0) * float(metrics["samples_per_second"])
    doc = {
        "label": "",
        "data_wait_share": wait,
        "data_host_busy_share": busy,
        "wire_mb_per_s": round(wire / 1e6, 3) if hosts else None,
        "reason": "",
    }
    if wait < WAIT_SHARE:
        reason = (
            f"the trainers waited for data {wait:.1%} of their step time (under {WAIT_SHARE:.0%}): the training "
            "step sets the pace; more input capacity would not raise it"
        )
        if busy and sum(busy) / len(busy) >= BUSY_SHARE:
            reason += (
                f"; the data hosts were busy {sum(busy) / len(busy):.0%} of their CPUs too, so a faster step would "
                "make the run input-bound"
            )
        return {**doc, "label": "compute-bound", "reason": reason}
    if metrics["mode"] == "homogeneous":
        return {
            **doc,
            "label": "input-bound",
            "reason": f"the trainers waited for data {wait:.1%} of their step time while decoding on their own CPUs: "
            "data hosts (or more CPUs) would raise the rate",
        }
    if not hosts:
        return {
            **doc,
            "label": "input-bound",
            "reason": f"the trainers waited for data {wait:.1%} of their step time; the data hosts did not measure "
            "themselves (metrics schema 1), so input and transport are not told apart",
        }
    mean = sum(busy) / len(busy)
    if mean >= BUSY_SHARE:
        return {
            **doc,
            "label": "input-bound",
            "reason": f"the trainers waited for data {wait:.1%} of their step time and the data hosts were busy "
            f"{mean:.0%} of their CPUs (at least {BUSY_SHARE:.0%}): more data-host CPUs would raise the rate",
        }
    if not _measures_wire(metrics):  # Ray moves blocks through its object store: no bytes per sample measured
        return {
            **doc,
            "label": "transport-bound",
            "wire_mb_per_s": None,
            "reason": f"the trainers waited for data {wait:.1%} of their step time while the data hosts were busy only "
            f"{mean:.0%} of their CPUs: Ray Data's scheduling and object transfers, not decode, set the pace; "
            "more decode would not help",
        }
    return {
        **doc,
        "label": "transport-bound",
        "reason": f"the trainers waited for data {wait:.1%} of their step time while the data hosts were busy only "
        f"{mean:.0%} of their CPUs: batches were ready but arrived too slowly ({wire / 1e6:.1f} MB/s into "
        "the trainers); more decode would not help, more network (or fewer bytes per sample) would",
    }


def _measures_wire(metrics: dict) -> bool:
    """Whether the run's data hosts counted the bytes they sent (steps/frameworks.py), for a framework this table knows."""
    row = TABLE.get(metrics.get("framework", ""))
    return row is None or row.measures_wire_bytes

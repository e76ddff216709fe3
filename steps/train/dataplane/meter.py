"""What a data host measures of itself while it serves: the planner's per-host inputs.

CPU seconds come from where the work runs: each batch carries the CPU time its
DataLoader worker spent reading, decoding and batching it (`Batch.cpu_s`), and
this process's own CPU time (receiving from workers, framing, sending) is read
around the serving. Busy share is both over the wall time and the CPUs the host
was given: near 1, the host is the bottleneck; well below, it waits on its trainers.
Every BATCH and END frame carries the running totals (a few hundred bytes beside a
batch), so the trainers hold every data host's numbers when they write metrics.json,
also after a run stopped mid-epoch by ``max_steps``, with no extra round trip.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from steps.train.core.cluster import available_cpus


class ServiceMeter:
    def __init__(self) -> None:
        self.cpus = available_cpus()
        self.samples = 0
        self.batches = 0
        self.decode_cpu_s = 0.0
        self.decode_workers: Callable[[], dict] | None = None  # the decode workers' retune history, where it has one
        self._wall_started = time.perf_counter()
        self._cpu_started = time.process_time()

    def count(self, batch) -> None:
        self.samples += len(batch) + len(batch.corrupt)
        self.batches += 1
        self.decode_cpu_s += batch.cpu_s

    def report(self, trainers) -> dict:
        """Running totals since serving began, for BATCH and END frames (``trainers``: one per connection, a trainer
        host with several streams per flow once per stream)."""
        batches: dict[str, int] = {}
        for t in trainers:
            batches[t.host] = batches.get(t.host, 0) + t.batches
        return {
            "cpus": self.cpus,
            "wall_s": round(time.perf_counter() - self._wall_started, 6),
            "samples": self.samples,
            "batches": self.batches,
            "decode_cpu_s": round(self.decode_cpu_s, 6),
            "service_cpu_s": round(time.process_time() - self._cpu_started, 6),
            "bytes_sent": sum(t.link.bytes_sent for t in trainers),
            "batches_sent": batches,
            "streams": len(trainers) // max(len(batches), 1),
            **({"decode_workers": self.decode_workers()} if self.decode_workers else {}),
        }


class ProcessMeter:
    """A tf.data.service data host's measurements: its worker decodes and serves in this process, so the
    process's CPU time is both (``service_cpu_s`` 0). It cannot count what it served; the trainer, which
    can, fills in ``samples`` and ``bytes_sent`` (`steps.train.frameworks.tensorflow.data`)."""

    def __init__(self) -> None:
        self.cpus = available_cpus()
        self._wall_started = time.perf_counter()
        self._cpu_started = time.process_time()

    def report(self) -> dict:
        return {
            "cpus": self.cpus,
            "wall_s": round(time.perf_counter() - self._wall_started, 6),
            "decode_cpu_s": round(time.process_time() - self._cpu_started, 6),
            "service_cpu_s": 0.0,
        }


def arrived(data_hosts: list[dict], bytes_received: int, samples: int) -> dict:
    """The measurement fields of metrics.json: each data host's own line and what arrived at this trainer
    (``arrived([], 0, 0)``: a homogeneous run, which has neither)."""
    return {
        "data_hosts": data_hosts,
        "bytes_received": bytes_received,
        "bytes_received_per_sample": bytes_received / samples if samples else 0.0,
    }


def data_host_metrics(host: str, report: dict, first: dict | None = None) -> dict:
    """One data host's line in metrics.json (``data_hosts``), per sample, from its latest report.

    With ``first`` (the report that came with its first batch), rates, costs and busy share are the
    difference between the two: serving in steady state, without the start-up (workers starting,
    shuffle buffers filling) that precedes the first batch. Batches in flight between the workers
    and the wire are about as many at either end, so the difference is not skewed by them."""
    total = _totals(report)
    if first and _totals(first)["samples"] < total["samples"]:
        start = _totals(first)
        window = {k: total[k] - start[k] for k in total}
    else:
        window = total
    samples = max(window["samples"], 1)
    cpus = max(int(report.get("cpus", 1)), 1)
    wall = window["wall_s"]
    return {
        "host": host,
        "cpus": cpus,
        "samples_sent": total["samples"],
        "batches_sent": dict(report.get("batches_sent", {})),
        "streams": int(report.get("streams", 1)),  # connections to each trainer (streams per flow)
        "decode_cpu_s_per_sample": window["decode_cpu_s"] / samples,
        "service_cpu_s_per_sample": window["service_cpu_s"] / samples,
        "busy_share": (window["decode_cpu_s"] + window["service_cpu_s"]) / (wall * cpus) if wall > 0 else 0.0,
        "bytes_sent_per_sample": window["bytes_sent"] / samples,
        "samples_per_second": window["samples"] / wall if wall > 0 else 0.0,
        "measured_over_s": wall,
        **({"decode_workers": report["decode_workers"]} if "decode_workers" in report else {}),
    }


def _totals(report: dict) -> dict:
    return {
        "samples": int(report.get("samples", 0)),
        "wall_s": float(report.get("wall_s", 0.0)),
        "decode_cpu_s": float(report.get("decode_cpu_s", 0.0)),
        "service_cpu_s": float(report.get("service_cpu_s", 0.0)),
        "bytes_sent": int(report.get("bytes_sent", 0)),
    }

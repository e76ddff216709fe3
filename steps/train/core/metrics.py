"""Step statistics, metric lines and metrics.json.

Metric lines look like ``[metrics] step=120 step_time_ms=86.10 ...`` so the
regexes in `steps.contract.METRIC_DEFINITIONS` (handed to SageMaker's metric_definitions)
scrape them. Statistics leave out the warm-up steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from steps.common.metrics_json import (
    VERSION,
    CorruptSamples,
    DataHost,
    Gpus,
    InstanceGroup,
    Metrics,
    Precision,
    SampleLedger,
    StepSeries,
    StepTime,
)

if TYPE_CHECKING:
    from steps.train.core.cluster import Cluster
    from steps.train.core.config import TrainConfig

SERIES_POINTS = 300  # step-time points kept in metrics.json for the report's charts


def metric_line(**values: object) -> str:
    parts = [f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()]
    return "[metrics] " + " ".join(parts)


@dataclass
class StepStats:
    """Per-step wait and compute times. Statistics leave out the first ``warmup_steps``,
    unless the run is too short to have any steps after them: then they use every step
    and say so (``warmup_steps_excluded``: 0)."""

    warmup_steps: int
    waits: list = field(default_factory=list)
    computes: list = field(default_factory=list)
    sizes: list = field(default_factory=list)
    bytes_per_sample: float = 0.0  # what one sample takes as a tensor on arrival (TensorFlow path)

    def record(self, *, wait: float, compute: float, samples: int) -> None:
        self.waits.append(wait)
        self.computes.append(compute)
        self.sizes.append(samples)

    @property
    def steps(self) -> int:
        return len(self.waits)

    def state(self) -> dict:
        """What a checkpoint keeps, so a resumed run reports the whole run."""
        return {"waits": list(self.waits), "computes": list(self.computes), "sizes": list(self.sizes)}

    def restore(self, state: dict) -> None:
        self.waits, self.computes, self.sizes = list(state["waits"]), list(state["computes"]), list(state["sizes"])

    def last_step_line(self, *, epoch: int, loss: float) -> str:
        """The metric line of the step recorded last."""
        wait, step_time = self.waits[-1], self.waits[-1] + self.computes[-1]
        return metric_line(
            epoch=epoch,
            step=self.steps,
            step_time_ms=step_time * 1e3,
            samples_per_sec=self.sizes[-1] / step_time,
            data_wait_pct=100 * wait / step_time,
            loss=loss,
        )

    def series(self, points: int = SERIES_POINTS) -> dict:
        """Step and data-wait times over the whole run (warm-up included), each the mean of ``window_steps``
        consecutive steps, at most ``points`` of them: what the report plots."""
        window = max(1, math.ceil(self.steps / points))
        waits, times = np.asarray(self.waits), np.asarray(self.waits) + np.asarray(self.computes)
        chunks = range(0, self.steps, window)
        return {
            "window_steps": window,
            "step_time_s": [float(times[i : i + window].mean()) for i in chunks],
            "data_wait_s": [float(waits[i : i + window].mean()) for i in chunks],
        }

    def summary(self) -> dict:
        skip = self.warmup_steps if self.steps > self.warmup_steps else 0
        waits, computes = np.asarray(self.waits[skip:]), np.asarray(self.computes[skip:])
        times = waits + computes
        if not len(times):
            return {
                "steps": 0,
                "seen": 0,
                "measured_steps": 0,
                "warmup_steps_excluded": 0,
                "step_time_s": {"mean": 0.0, "p50": 0.0, "p90": 0.0},
                "data_wait_share": 0.0,
                "data_wait_s": 0.0,
                "compute_s": 0.0,
                "elapsed_s": 0.0,
                "samples": 0,
            }
        return {
            "steps": self.steps,
            "seen": int(sum(self.sizes)),
            "measured_steps": len(times),
            "warmup_steps_excluded": skip,
            "step_time_s": {
                "mean": float(times.mean()),
                "p50": float(np.percentile(times, 50)),
                "p90": float(np.percentile(times, 90)),
            },
            "data_wait_share": float(waits.sum() / times.sum()),
            "data_wait_s": float(waits.sum()),
            "compute_s": float(computes.sum()),
            "elapsed_s": float(times.sum()),
            "samples": int(sum(self.sizes[skip:])),
            "series": self.series(),
        }


def training_metrics(
    *,
    cfg: TrainConfig,
    cluster: Cluster,
    framework: str,
    summary: dict,
    accuracy: float | None,
    corrupt: list,
    corrupt_count: int,
    classes: list[str],
    data_hosts: list[dict],
    bytes_received: int,
    bytes_received_per_sample: float,
    isolated_costs: dict | None,
    model_parameters: int,
    sample_ledger: dict,
    local_decode: list | None = None,
    gpus: dict,
    precision: dict,
    checkpoints: dict | None = None,
    epoch_accounting: list | None = None,
) -> Metrics:
    """The metrics.json document every trainer writes (`steps.common.metrics_json`; the Evaluate step reads it).
    ``data_hosts``: what each data host measured of itself (`steps.train.dataplane.meter.data_host_metrics`), empty in a
    homogeneous run."""
    elapsed = summary["elapsed_s"]
    measured = max(summary["measured_steps"], 1)
    series = summary.get("series")
    return Metrics(
        schema_version=VERSION,
        framework=framework,
        mode="heterogeneous" if cluster.heterogeneous else "homogeneous",
        instance_groups=[InstanceGroup(**g.as_metrics()) for g in cluster.groups],
        global_batch_size=cfg.batch_size * cluster.world_size,
        steps=summary["steps"],
        warmup_steps=summary["warmup_steps_excluded"],
        measured_steps=summary["measured_steps"],
        step_time_s=StepTime(**summary["step_time_s"]),
        data_wait_share=summary["data_wait_share"],
        data_wait_s_per_step=summary["data_wait_s"] / measured,
        compute_s_per_step=summary["compute_s"] / measured,
        samples_per_second=summary["global_samples"] / elapsed if elapsed else 0.0,
        accuracy=accuracy,
        epochs=cfg.epochs,
        samples_seen=summary["global_seen"],
        corrupt_samples=CorruptSamples(count=corrupt_count, examples=[list(c) for c in corrupt[:20]]),
        classes=classes,
        step_series=StepSeries(**series) if series else None,
        data_hosts=[DataHost.from_dict(h) for h in data_hosts],
        bytes_received=bytes_received,
        bytes_received_per_sample=bytes_received_per_sample,
        compile=cfg.compile,
        isolated_costs=isolated_costs,
        model_parameters=model_parameters,
        sample_ledger=SampleLedger.from_dict(sample_ledger),
        local_decode=local_decode,
        gpus=Gpus.from_dict(gpus),
        precision=Precision.from_dict(precision),
        checkpoints=checkpoints,
        epoch_accounting=epoch_accounting,
        config=cfg.as_dict(),
    )


def final_line(metrics: Metrics) -> str:
    return metric_line(
        final=1,
        step_time_ms=metrics.step_time_s.mean * 1e3,
        samples_per_sec=metrics.samples_per_second,
        data_wait_pct=100 * metrics.data_wait_share,
    )

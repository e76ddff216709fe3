"""Step statistics, metric lines and metrics.json.

Metric lines look like ``[metrics] step=120 step_time_ms=86.10 ...`` so the
regexes in `METRIC_DEFINITIONS` (handed to SageMaker's metric_definitions)
scrape them. Statistics leave out the warm-up steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SCHEMA_VERSION = 1

METRIC_DEFINITIONS = [
    {"Name": name, "Regex": rf"{key}=([0-9.eE+-]+)"}
    for name, key in (
        ("train:step_time_ms", "step_time_ms"),
        ("train:samples_per_sec", "samples_per_sec"),
        ("train:data_wait_pct", "data_wait_pct"),
        ("train:loss", "loss"),
        ("validation:accuracy", "accuracy"),
    )
]


def metric_line(**values) -> str:
    parts = [f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()]
    return "[metrics] " + " ".join(parts)


@dataclass
class StepStats:
    warmup_steps: int
    steps: int = 0
    waits: list = field(default_factory=list)
    computes: list = field(default_factory=list)
    samples: int = 0
    seen: int = 0  # every trained sample, warm-up included

    def record(self, *, wait: float, compute: float, samples: int) -> None:
        self.steps += 1
        self.seen += samples
        if self.steps > self.warmup_steps:
            self.waits.append(wait)
            self.computes.append(compute)
            self.samples += samples

    @property
    def measured(self) -> int:
        return len(self.waits)

    def summary(self) -> dict:
        if not self.waits:
            return {"steps": self.steps, "seen": self.seen, "measured_steps": 0, "step_time_s": {"mean": 0.0, "p50": 0.0, "p90": 0.0}, "data_wait_share": 0.0,
                    "data_wait_s": 0.0, "compute_s": 0.0, "elapsed_s": 0.0, "samples": 0}
        times = np.asarray(self.waits) + np.asarray(self.computes)
        return {
            "steps": self.steps,
            "seen": self.seen,
            "measured_steps": len(times),
            "step_time_s": {"mean": float(times.mean()), "p50": float(np.percentile(times, 50)), "p90": float(np.percentile(times, 90))},
            "data_wait_share": float(np.sum(self.waits) / times.sum()),
            "data_wait_s": float(np.sum(self.waits)),
            "compute_s": float(np.sum(self.computes)),
            "elapsed_s": float(times.sum()),
            "samples": self.samples,
        }

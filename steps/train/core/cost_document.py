"""The ``isolated_costs`` document of metrics.json, framework-free: the PyTorch (`steps.train.frameworks.pytorch.costs`) and TensorFlow
(`steps.train.frameworks.tensorflow.costs`) measurements both write it, and a TensorFlow host imports no torch."""

from __future__ import annotations

import statistics

from steps.train.core.cluster import available_cpus

MEASURED_BATCHES = 8  # after one warm-up batch


def cost_document(decode_s: list[float], step_s: list[float], *, batch_size: int, device: str,
                  decode_in_one_process: bool) -> dict:
    """``isolated_costs`` of metrics.json from per-batch timings whose first batch is the warm-up. Decode timed in
    one process is spread over this host's CPUs; timed through a pipeline that used them all, it is taken as is."""
    cpus = available_cpus()
    spread = cpus if decode_in_one_process else 1
    decode, step = decode_s[1:], step_s[1:]
    return {
        "batches": len(decode), "batch_size": batch_size, "cpus": cpus, "device": device,
        "decode_cpu_s_per_batch": min(decode) * cpus / spread,
        "decode_s_per_batch": min(decode) / spread,
        "step_s_per_batch": min(step),
        "decode_s_per_batch_median": statistics.median(decode) / spread,
        "step_s_per_batch_median": statistics.median(step),
    }


def cost_line(host: str, costs: dict) -> str:
    return (f"[trainer] {host}: alone on {costs['cpus']} CPU(s): decode {costs['decode_s_per_batch'] * 1e3:.1f} ms, "
            f"step {costs['step_s_per_batch'] * 1e3:.1f} ms per batch of {costs['batch_size']}")

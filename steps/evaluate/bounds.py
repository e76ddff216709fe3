"""The bound a measured speedup must respect, from the trainer's own decode-alone and step-alone costs.

A homogeneous host decodes a batch (``d`` s) and trains on it (``s`` s) back to
back; a heterogeneous cluster overlaps them on different hosts, so no speedup
beats ``(d + s) / max(d, s)``. ``d`` and ``s`` are what the trainer measured
alone on its CPUs after training (``isolated_costs`` in metrics.json,
`steps.train.costs`). The document says how close the measured speedup came
(efficiency), whether the baseline itself ran at the back-to-back cost (a
slower baseline pays for contention on its own cores, which a data host then
appears to remove), and flags a speedup above the bound instead of reporting it
as a result.
"""

from __future__ import annotations

OVER_BOUND_TOLERANCE = 1.05  # measurement noise on a shared machine
FAIR_BASELINE = 0.10  # the baseline's step within 10% of decode + step back to back


def speedup_bound(baseline: dict | None, heterogeneous: dict, speedup: float | None) -> dict | None:
    """``baseline`` / ``heterogeneous``: the runs' metrics.json documents."""
    costs = (baseline or {}).get("isolated_costs") or heterogeneous.get("isolated_costs")
    if not costs:
        return None
    d, s = float(costs["decode_s_per_batch"]), float(costs["step_s_per_batch"])
    back_to_back = d + s
    ideal = back_to_back / max(d, s)
    doc = {"decode_s_per_batch": d, "step_s_per_batch": s, "measured_on_cpus": costs.get("cpus"), "device": costs.get("device"),
           "back_to_back_s": back_to_back, "ideal_speedup": ideal, "measured_speedup": speedup,
           "efficiency": speedup / ideal if speedup else None, "baseline_over_back_to_back": None,
           "over_bound": bool(speedup and speedup > ideal * OVER_BOUND_TOLERANCE), "notes": []}
    if baseline:
        ratio = baseline["step_time_s"]["mean"] / back_to_back
        doc["baseline_over_back_to_back"] = ratio
        if ratio > 1 + FAIR_BASELINE:
            doc["notes"].append(
                f"the baseline's step ({baseline['step_time_s']['mean'] * 1e3:.0f} ms) is {ratio - 1:.0%} slower than decode + "
                f"step back to back ({back_to_back * 1e3:.0f} ms) on its CPUs: it pays for contention between its decode workers "
                "and its training loop, so the speedup overstates what a data host is worth")
        elif ratio < 1 - FAIR_BASELINE:
            doc["notes"].append(
                f"the baseline's step is {1 - ratio:.0%} faster than decode + step back to back: it overlaps them on its own "
                "CPUs, so the bound understates what it already gets without a data host")
    if doc["over_bound"]:
        doc["notes"].append(f"measured speedup {speedup:.2f}x is above the bound {ideal:.2f}x: the baseline or the measurement "
                            "is wrong, this is not a result")
    return doc

"""The table a local run ends with: baseline vs heterogeneous, priced."""

from __future__ import annotations

from steps.common.metrics_json import precision_label
from steps.evaluate.prices import price_lines


def _cluster(run: dict) -> str:
    return " + ".join(f"{g['count']} x {g['instance_type']}" for g in run["instance_groups"])


def _fmt(value, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


ROWS = (
    ("cluster", lambda r: _cluster(r)),
    ("step time (ms)", lambda r: _fmt(r["step_time_s"], ".1f", 1e3)),
    ("samples/s", lambda r: _fmt(r["samples_per_second"], ".1f")),
    ("data wait", lambda r: _fmt(r["data_wait_share"], ".1%")),
    ("cluster $/h", lambda r: _fmt(r["cluster_usd_per_hour"], ".3f")),
    ("cost / 100 steps ($)", lambda r: _fmt(r["cost_per_100_steps"], ".4f")),
    ("samples per $", lambda r: _fmt(r["samples_per_dollar"], ",.0f")),
    ("accuracy", lambda r: _fmt(r.get("accuracy"), ".1%")),
    ("precision", lambda r: precision_label(r.get("precision"))),
    ("compile", lambda r: r.get("compile") or "-"),
    ("bottleneck", lambda r: r["bottleneck"]["label"] if r.get("bottleneck") else "-"),
)


def render(price_performance: dict) -> str:
    runs = price_performance["runs"]
    names = [n for n in ("baseline", "heterogeneous") if runs.get(n)]
    cells = [[label] + [fn(runs[n]) for n in names] for label, fn in ROWS]
    header = [""] + names
    widths = [max(len(row[i]) for row in cells + [header]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in [header] + cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    speedup, improvement = price_performance.get("speedup"), price_performance.get("improvement")
    if speedup is not None:
        lines.append(f"speedup {speedup:.2f}x   price-performance improvement {improvement:.1%}")
    lines += _bound_lines(price_performance.get("bound"))
    bottleneck = (runs.get("heterogeneous") or {}).get("bottleneck")
    if bottleneck:
        lines.append(f"heterogeneous run {bottleneck['label']}: {bottleneck['reason']}")
    used = {g["instance_type"] for n in names for g in runs[n]["instance_groups"]}
    lines += price_lines(price_performance.get("prices", {}), used)
    return "\n".join(lines)


def _bound_lines(bound: dict | None) -> list[str]:
    """The ideal the measured speedup is judged by (steps/evaluate/bounds.py), and what the numbers are."""
    if not bound:
        return []
    d, s, cpus = bound["decode_s_per_batch"] * 1e3, bound["step_s_per_batch"] * 1e3, bound.get("measured_on_cpus")
    host = bound.get("data_host_decode_s_per_batch")
    where = f" (the data hosts: {host * 1e3:.1f} ms on their own CPUs during the run)" if host is not None else ""
    lines = [
        f"bound: decode {d:.1f} ms + step {s:.1f} ms per batch, each alone on the trainer's {cpus} CPU(s){where}: "
        f"no overlap beats {bound['ideal_speedup']:.2f}x"
    ]
    verdict = "ABOVE THE BOUND: not a result" if bound["over_bound"] else f"{bound['efficiency']:.0%} of the bound"
    line = f"heterogeneous step vs decode + step back to back: {bound['speedup_over_back_to_back']:.2f}x = {verdict}"
    if bound["measured_speedup"] is not None:
        line += f"; the baseline's step is {bound['baseline_over_back_to_back']:.2f} x back to back"
    lines.append(line)
    lines += [f"note: {note}" for note in bound["notes"]]
    return lines


EMULATED = (
    "step times are measured on this machine's CPUs, one emulated host per CPU set; the $ rows apply the "
    "instance types' cloud prices to those times: a comparison of the two layouts, not a cloud measurement"
)

"""report.html: one self-contained page per execution, with charts, for people who decide.

Step time over training (baseline against heterogeneous), the data-wait share, the planner's
cost/throughput frontier with its pick, and price-performance across every execution in the
results store, with the model package each execution registered (``hetero report``). Charts are matplotlib PNGs inlined as data URIs, so the file opens anywhere with
nothing beside it. Evaluate writes it beside price_performance.json; ``hetero report`` writes it
for any execution or the whole history.
"""

from __future__ import annotations

import base64
import html
import io

from steps.common.metrics_json import precision_label
from steps.evaluate.plan import bound_text, ran_on_text
from steps.evaluate.planner import MEASURED, REAL_VCPUS
from steps.evaluate.prices import price_lines

REPORT_FILE = "report.html"
REPORT_CONTENT_TYPE = "text/html; charset=utf-8"


def report_html(
    *,
    execution_id: str | None,
    price_performance: dict | None,
    plan: dict | None,
    heterogeneous: dict | None,
    baseline: dict | None,
    history: list[dict],
    packages: dict[str, dict] | None = None,
) -> str:
    """The page. ``history``: price_performance.json documents of all executions, oldest first; ``packages``:
    execution id -> the model package it registered (DescribeModelPackage's fields, ``href`` where it has a page)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: render to memory
    sections = [f"<h1>hetero report{': ' + html.escape(execution_id) if execution_id else ''}</h1>"]
    if price_performance:
        sections.append(_summary(price_performance))
    if heterogeneous or baseline:
        sections.append(
            _figure(
                "Step time over training",
                _step_chart(heterogeneous, baseline),
                "Mean of consecutive steps; the first ones include start-up.",
            )
        )
        sections.append(
            _figure(
                "Data-wait share",
                _wait_chart(heterogeneous, baseline),
                "Share of each step the trainer spent waiting for its batch.",
            )
        )
    if plan and plan.get("recommendation"):
        basis = (plan.get("basis") or {}).get("text") or f"not stated (plan schema version {plan.get('schema_version')})"
        caption = f"{html.escape(plan['reason'])}<br>basis: {html.escape(basis)}"
        sections.append(_figure("The planner's frontier", _frontier_chart(plan), caption))
        sections.append(_frontier_table(plan))
        sections.append(_as_ran_table(plan))
    elif plan:
        sections.append(f"<p>No plan: {html.escape(str(plan.get('reason')))}</p>")
    if history:
        sections.append(
            _figure(
                "Price-performance across executions",
                _history_chart(history),
                f"{len(history)} execution(s) in the results store, oldest first.",
            )
        )
    if packages is not None:
        sections.append(_packages_table(history, packages))
    return _PAGE.format(body="\n".join(sections))


def _packages_table(history: list[dict], packages: dict[str, dict]) -> str:
    """Each execution's registered model package, newest first: version, approval status, ARN (a link where it has a page)."""
    rows = []
    for doc in reversed(history):
        execution = str(doc.get("execution_id"))
        package = packages.get(execution)
        if package is None:
            cells = [html.escape(execution), "-", "not registered", "-"]
        else:
            arn = html.escape(package["ModelPackageArn"])
            link = f'<a href="{html.escape(package["href"])}">{arn}</a>' if package.get("href") else arn
            cells = [
                html.escape(execution),
                str(package.get("ModelPackageVersion", "-")),
                html.escape(package["ModelApprovalStatus"]),
                link,
            ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("execution", "version", "approval", "model package"))
    return f"<h2>Registered models</h2><table><tr>{head}</tr>{''.join(rows)}</table>"


def _summary(doc: dict) -> str:
    runs = doc["runs"]
    names = [n for n in ("baseline", "heterogeneous") if runs.get(n)]
    rows = [
        ("cluster", lambda r: " + ".join(f"{g['count']} x {g['instance_type']}" for g in r["instance_groups"])),
        ("step time (ms)", lambda r: f"{r['step_time_s'] * 1e3:.1f}"),
        ("samples/s", lambda r: f"{r['samples_per_second']:,.1f}"),
        ("data wait", lambda r: f"{r['data_wait_share']:.1%}"),
        ("cluster $/h", lambda r: f"{r['cluster_usd_per_hour']:.3f}"),
        ("samples per $", lambda r: f"{r['samples_per_dollar']:,.0f}"),
        ("bottleneck", lambda r: (r.get("bottleneck") or {}).get("label", "-")),
        ("precision", lambda r: precision_label(r.get("precision"))),
        ("compile", lambda r: r.get("compile") or "-"),
    ]
    head = "".join(f"<th>{n}</th>" for n in names)
    body = "".join(
        f"<tr><th>{label}</th>{''.join(f'<td>{html.escape(fn(runs[n]))}</td>' for n in names)}</tr>" for label, fn in rows
    )
    lines = []
    if doc.get("speedup") is not None:
        lines.append(f"speedup {doc['speedup']:.2f}x, price-performance improvement {doc['improvement']:.1%}")
    bound = doc.get("bound")
    if bound:
        verdict = "ABOVE THE BOUND: not a result" if bound["over_bound"] else f"{bound['efficiency']:.0%} of the bound"
        lines.append(
            f"bound {bound['ideal_speedup']:.2f}x (decode {bound['decode_s_per_batch'] * 1e3:.1f} ms + step "
            f"{bound['step_s_per_batch'] * 1e3:.1f} ms alone); heterogeneous vs back to back "
            f"{bound['speedup_over_back_to_back']:.2f}x = {verdict}"
        )
    hetero = runs.get("heterogeneous") or {}
    if hetero.get("bottleneck"):
        lines.append(f"{hetero['bottleneck']['label']}: {hetero['bottleneck']['reason']}")
    if retuned := retune_line(hetero):
        lines.append(retuned)
    for name in names:
        if (runs[name].get("gpus") or {}).get("idle"):
            lines.append(f"{name} run: {runs[name]['gpus']['idle']}")
    lines += price_lines(doc.get("prices", {}), {g["instance_type"] for n in names for g in runs[n]["instance_groups"]})
    notes = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f"<table><tr><th></th>{head}</tr>{body}</table><ul>{notes}</ul>"


def retune_line(run: dict) -> str:
    """One line: each decoding host's workers, start -> end, and how many changes the retune made ('' without any)."""
    hosts = run.get("decode_workers") or []
    if not hosts:
        return ""
    parts = [
        f"{h['host']} {h['start']}" + (f" -> {h['end']} ({h['changed']} change(s))" if h["changed"] else " (unchanged)")
        for h in hosts
    ]
    return "decode workers (retune): " + ", ".join(parts)


def _figure(title: str, png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<h2>{html.escape(title)}</h2><img alt="{html.escape(title)}" src="data:image/png;base64,{data}">'
        f'<p class="caption">{caption}</p>'
    )


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _runs(heterogeneous, baseline):
    return [(name, doc) for name, doc in (("baseline", baseline), ("heterogeneous", heterogeneous)) if doc]


def _step_chart(heterogeneous, baseline) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    for name, doc in _runs(heterogeneous, baseline):
        series = doc.get("step_series")
        if series:
            window = series["window_steps"]
            ax.plot([i * window for i in range(len(series["step_time_s"]))], [t * 1e3 for t in series["step_time_s"]], label=name)
        else:
            ax.axhline(doc["step_time_s"]["mean"] * 1e3, label=f"{name} (mean only)", linestyle="--")
    ax.set_xlabel("step")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(bottom=0)
    ax.legend()
    return _png(fig)


def _wait_chart(heterogeneous, baseline) -> bytes:
    import matplotlib.pyplot as plt

    runs = _runs(heterogeneous, baseline)
    fig, ax = plt.subplots(figsize=(5, 2.6))
    shares = [doc["data_wait_share"] * 100 for _, doc in runs]
    ax.barh([name for name, _ in runs], shares, color=["#999999", "#1f77b4"][-len(runs) :])
    for y, share in enumerate(shares):
        ax.text(share, y, f" {share:.1f}%", va="center")
    ax.set_xlabel("data wait (% of step time)")
    ax.set_xlim(0, max(100, *shares))
    return _png(fig)


BOUND_MARKERS = {
    "compute": "o",
    "trainer_cpu": "s",
    "data_cpu": "D",
    "network_flow": "v",
    "network_instance": "^",
    "s3": "P",
    MEASURED: "X",
}


def _frontier_chart(plan: dict) -> bytes:
    """Samples/s against $/h of every candidate (types, sizes and counts), the frontier with each point's binding
    resource as its marker and its cluster beside it, the pick and this run."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    candidates = plan["candidates"]
    ax.scatter(
        [c["cluster_price_per_hour"] for c in candidates],
        [c["samples_per_second"] for c in candidates],
        s=8,
        color="#cccccc",
        label="candidates",
    )
    frontier = sorted(plan["frontier"], key=lambda c: c["cluster_price_per_hour"])
    ax.plot([c["cluster_price_per_hour"] for c in frontier], [c["samples_per_second"] for c in frontier], color="#1f77b4")
    for bound in sorted({c["bottleneck"] for c in frontier}):
        points = [c for c in frontier if c["bottleneck"] == bound]
        ax.scatter(
            [c["cluster_price_per_hour"] for c in points],
            [c["samples_per_second"] for c in points],
            marker=BOUND_MARKERS.get(bound, "o"),
            s=40,
            color="#1f77b4",
            zorder=4,
            label=f"frontier, {bound}-bound",
        )
    for c in frontier:
        ax.annotate(
            _cluster(c),
            (c["cluster_price_per_hour"], c["samples_per_second"]),
            fontsize=6,
            xytext=(4, -8),
            textcoords="offset points",
        )
    pick = plan["recommendation"]
    ax.scatter(
        [pick["cluster_price_per_hour"]],
        [pick["samples_per_second"]],
        marker="*",
        s=250,
        color="#d62728",
        zorder=5,
        label=f"pick: {_cluster(pick)} ({pick['bottleneck']}-bound)",
    )
    current = plan.get("current")
    if current and current.get("basis", REAL_VCPUS) == REAL_VCPUS and plan.get("basis"):
        ax.scatter(
            [current["cluster_price_per_hour"]],
            [current["measured_samples_per_second"]],
            marker="x",
            s=80,
            color="black",
            zorder=5,
            label=f"this run (measured): {_cluster(current)}",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cluster price ($/h, log)")
    ax.set_ylabel("samples/s (log)")
    ax.legend(fontsize=7)
    return _png(fig)


def _frontier_table(plan: dict) -> str:
    """The frontier's points with what binds each, most samples per dollar first; the pick and its fallbacks marked."""
    fallbacks = [_cluster(p) for p in plan.get("fallbacks", [])]
    rows = []
    for p in sorted(plan["frontier"], key=lambda p: -p["samples_per_dollar"]):
        cluster = _cluster(p)
        mark = "pick" if cluster == _cluster(plan["recommendation"]) else ("fallback" if cluster in fallbacks else "")
        cells: tuple[str, ...] = (cluster, f"{p['samples_per_second']:,.0f}", bound_text(p), f"{p['cluster_price_per_hour']:.3f}")
        cells += (f"{p['samples_per_dollar']:,.0f}", p.get("rate_source", "predicted"), mark)
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("cluster", "samples/s", "bound by", "$/h", "samples per $", "rate", ""))
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _as_ran_table(plan: dict) -> str:
    """Each run's cluster predicted as it ran (an emulated run: at the CPUs its hosts had) beside its measurement: the
    model's error, apart from the frontier, whose rows are all at the types' own vCPUs."""
    ran = plan.get("measured") or ([plan["current"]] if plan.get("current") else [])
    if not ran:
        return ""
    rows = []
    for r in ran:
        cells: tuple[str, ...] = (_cluster(r), r.get("run", ""), ran_on_text(r), f"{r['samples_per_second']:,.0f}")
        cells += (r["bottleneck"], f"{r['measured_samples_per_second']:,.0f}", f"{r['model_error']:+.1%}")
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("cluster", "run", "on", "predicted", "bound by", "measured", "error"))
    return f"<h2>The model against each run, as it ran</h2><table><tr>{head}</tr>{''.join(rows)}</table>"


def _cluster(p: dict) -> str:
    trainers = f"{p['trainers']} x {p['trainer']}"
    return trainers if p["data"] is None else f"{trainers} + {p['data_count']} x {p['data']}"


def _history_chart(history: list[dict]) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    x = range(len(history))
    for name in ("baseline", "heterogeneous"):
        points = [(i, doc["runs"][name]["samples_per_dollar"]) for i, doc in zip(x, history) if doc["runs"].get(name)]
        if points:
            ax.plot([i for i, _ in points], [v for _, v in points], marker="o", label=f"{name} samples per $")
    ax.set_xticks(
        list(x), [str(doc.get("execution_id") or i)[-12:] for i, doc in zip(x, history)], rotation=30, ha="right", fontsize=7
    )
    ax.set_ylabel("samples per $")
    ax.set_ylim(bottom=0)
    ax.legend()
    return _png(fig)


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>hetero report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.25rem .6rem;text-align:right}}
th:first-child{{text-align:left}}img{{max-width:100%}}.caption{{color:#555;font-size:.9rem}}</style></head>
<body>
{body}
</body></html>
"""

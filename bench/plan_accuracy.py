"""Does the planner predict what a cluster will do? Profile one configuration, predict others, run them. Prints JSON.

    python bench/plan_accuracy.py                                   # this machine: 1 data host, trainer on CPU
    python bench/plan_accuracy.py --hosts 1,2,3,4 --host-cpus 3 --trainer-cpus 2 --models small_cnn,resnet50

Every configuration runs the real data plane on this machine: each data host is a
process pinned to its own CPU set (``--host-cpus``) running the data service
(`serve`) over a `ShardDataset` with one DataLoader worker per CPU; this process is
the trainer, pinned to ``--trainer-cpus`` CPUs, on the GPU when there is one, with
the real `DataServiceClient` and training loop. The profile is one run with one
data host: the step alone with data resident (`isolated_costs`) and what the data
host measured of itself (CPU per sample, bytes per sample, scaling). The planner
(`steps.evaluate.planner`) predicts every configuration's samples/s from that
profile alone; then each configuration runs and is measured (steady state, warm-up
steps left out). Prices make cost per epoch: the trainer as ``--trainer-price``, each
data host at ``--host-cpus`` times the per-vCPU price of ``--cpu-price`` (ml.c5.xlarge,
4 vCPUs, by default), from the bundled catalogue.

Judged: each prediction within 10% of measured, and the planner's pick within 5% of
the cheapest measured cost per epoch among the configurations reaching 95% of the
best measured throughput. ``blur_passes`` (the workload's CPU knob) can be set per
model (``--blur resnet50=12``) so the range spans input- and compute-bound.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.dataplane import BATCH, by_core, cpu_share_since, cpu_ticks, emit, make_shards, run_configuration, siblings  # noqa: E402
from steps.evaluate.planner import InstanceType, Prediction, predict, profile_from_metrics, recommend  # noqa: E402
from steps.evaluate.prices import load_prices  # noqa: E402
from steps.train.frameworks.pytorch.step import isolated_costs  # noqa: E402
from steps.train.workloads.shapes import Shapes  # noqa: E402

EPOCH_SAMPLES = 1_000_000  # the nominal epoch cost per epoch is quoted for
WITHIN = 0.10
PICK_WITHIN = 0.05


def bench_model(name: str, args, shards: list[Path], device: torch.device, trainer: InstanceType, host: InstanceType) -> dict:
    options = {"model": name, **({"blur_passes": args.blur[name]} if name in args.blur else {})}
    workload = Shapes(options)
    host_cpus = [
        args.cpus[args.trainer_cpus + i * args.host_cpus : args.trainer_cpus + (i + 1) * args.host_cpus]
        for i in range(max(args.hosts))
    ]  # args.cpus lists hyperthread siblings side by side
    # a first estimate sizes the profile run: the step alone on the device, decode alone on one core
    probe = isolated_costs(workload, workload.build_model(8).to(device), device, shards[:2], batch_size=BATCH, learning_rate=1e-3)
    guess = min(BATCH / probe["step_s_per_batch_median"], args.host_cpus * BATCH / probe["decode_cpu_s_per_batch"])
    profile_runs = [
        run_configuration(1, host_cpus, shards, options, _steps(guess, args.seconds), device, args.repeat)
        for _ in range(args.repeats)
    ]
    costs = isolated_costs(workload, profile_runs[-1]["model"], device, shards[:2], batch_size=BATCH, learning_rate=1e-3)
    for run in profile_runs:
        run.pop("model")
    profile_run = _median_run(profile_runs)
    profile = profile_from_metrics({"isolated_costs": costs, **profile_run}, f"profile run of {name}")
    predictions = {n: predict(profile, trainer, 1, host, n, EPOCH_SAMPLES) for n in args.hosts}
    runs: dict[int, list] = {n: [] for n in args.hosts}
    for _ in range(args.repeats):  # rounds over every configuration: slow drifts of the machine hit them all alike
        for n in args.hosts:
            run = run_configuration(
                n, host_cpus, shards, options, _steps(predictions[n].samples_per_second, args.seconds), device, args.repeat
            )
            run.pop("model")
            runs[n].append(run)
            print(
                f"[bench] {name}: {n} data host(s): predicted {predictions[n].samples_per_second:.0f}, "
                f"measured {run['samples_per_second']:.0f} samples/s",
                file=sys.stderr,
                flush=True,
            )
    runs = {n: _median_run(r) for n, r in runs.items()}
    return _judge(name, options, profile, costs, profile_run, predictions, runs, trainer, host)


def _median_run(runs: list[dict]) -> dict:
    """The run of median rate, with every repeat's rate beside it."""
    ordered = sorted(runs, key=lambda r: r["samples_per_second"])
    return {**ordered[(len(ordered) - 1) // 2], "repeats": [round(r["samples_per_second"], 1) for r in runs]}


def _steps(rate: float, seconds: float) -> int:
    return int(min(max(rate * seconds / BATCH, 60), 20000))


def _judge(name, options, profile, costs, profile_run, predictions: dict[int, Prediction], runs: dict, trainer, host) -> dict:
    rows = []
    for n, p in predictions.items():
        measured = runs[n]["samples_per_second"]
        price = trainer.price_per_hour + n * host.price_per_hour
        rows.append(
            {
                "data_hosts": n,
                "predicted_samples_per_s": round(p.samples_per_second, 1),
                "measured_samples_per_s": round(measured, 1),
                "measured_repeats": runs[n]["repeats"],
                "error": round(p.samples_per_second / measured - 1, 4),
                "bottleneck": p.bottleneck,
                "predicted_gpu_busy_share": round(p.gpu_busy_share, 3),
                "measured_data_wait_share": round(runs[n]["data_wait_share"], 3),
                "cluster_usd_per_hour": round(price, 4),
                "predicted_cost_per_epoch": round(p.cost_per_epoch, 4),
                "measured_cost_per_epoch": round(price * EPOCH_SAMPLES / measured / 3600, 4),
                "data_host_busy_share": [round(h["busy_share"], 3) for h in runs[n]["data_hosts"]],
                "trainer_cpu_s_per_sample": round(runs[n]["trainer_cpu_s_per_sample"], 6),
            }
        )
    pick = recommend(list(predictions.values()))
    best = max(r["measured_samples_per_s"] for r in rows)
    fast = [r for r in rows if r["measured_samples_per_s"] >= 0.95 * best]
    cheapest = min(fast, key=lambda r: r["measured_cost_per_epoch"])
    picked = next(r for r in rows if r["data_hosts"] == pick.data_count)
    return {
        "model": name,
        "workload_options": options,
        "profile": {
            "step_s_per_sample": profile.step_s_per_sample,
            "cpu_s_per_sample": profile.cpu_s_per_sample,
            "decode_cpu_s_per_sample": profile.decode_cpu_s_per_sample,
            "scaling": round(profile.scaling, 4),
            "scaling_measured": profile.scaling_measured,
            "bytes_per_sample": profile.bytes_per_sample,
            "step_s_per_batch_alone": costs["step_s_per_batch_median"],
            "profile_run_samples_per_s": round(profile_run["samples_per_second"], 1),
            "profile_run_repeats": profile_run["repeats"],
            "step_s_per_batch_in_loop": round(profile_run["compute_s_per_step"], 6),
            "profile_run_trainer_cpu_s_per_sample": round(profile_run["trainer_cpu_s_per_sample"], 6),
            "profile_run_data_wait_share": round(profile_run["data_wait_share"], 3),
        },
        "configurations": rows,
        "max_abs_error": round(max(abs(r["error"]) for r in rows), 4),
        "predictions_within_10pct": all(abs(r["error"]) <= WITHIN for r in rows),
        "planner_pick": pick.data_count,
        "cheapest_fast_measured": cheapest["data_hosts"],
        "pick_cost_over_cheapest": round(picked["measured_cost_per_epoch"] / cheapest["measured_cost_per_epoch"] - 1, 4),
        "pick_within_5pct": picked["measured_cost_per_epoch"] <= (1 + PICK_WITHIN) * cheapest["measured_cost_per_epoch"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="small_cnn")
    parser.add_argument("--hosts", default="1", help="data host counts to predict and measure, e.g. 1,2,3,4")
    parser.add_argument("--host-cpus", type=int, default=1)
    parser.add_argument("--trainer-cpus", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=8.0, help="target length of each measured run")
    parser.add_argument("--samples", type=int, default=4000, help="distinct images (served repeatedly)")
    parser.add_argument("--repeat", type=int, default=100, help="passes over the images in one epoch")
    parser.add_argument("--repeats", type=int, default=3, help="measured runs per configuration (the median counts)")
    parser.add_argument("--blur", default="", help="per-model blur_passes, e.g. resnet50=12")
    parser.add_argument("--trainer-price", default="ml.g5.2xlarge")
    parser.add_argument("--cpu-price", default="ml.c5.xlarge")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    args.hosts = [int(h) for h in args.hosts.split(",")]
    args.blur = {k: int(v) for k, v in (item.split("=") for item in args.blur.split(",") if item)}
    args.cpus = by_core(sorted(os.sched_getaffinity(0)))
    need = args.trainer_cpus + max(args.hosts) * args.host_cpus
    if need > len(args.cpus):
        sys.exit(
            f"needs {need} CPUs ({args.trainer_cpus} trainer + {max(args.hosts)} x {args.host_cpus}); this machine has {len(args.cpus)}"
        )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    os.sched_setaffinity(0, args.cpus[: args.trainer_cpus])
    torch.set_num_threads(args.trainer_cpus)
    prices = load_prices(None)
    trainer = InstanceType(
        f"{args.trainer_price} (this machine's {device.type} + {args.trainer_cpus} CPUs)",
        args.trainer_cpus,
        prices.hourly(args.trainer_price),
    )
    cpu_type = args.cpu_price
    host = InstanceType(
        f"{args.host_cpus} CPUs of this machine at {cpu_type}'s per-vCPU price",
        args.host_cpus,
        prices.hourly(cpu_type) / 4 * args.host_cpus,
    )
    started, ticks = time.perf_counter(), cpu_ticks()
    with tempfile.TemporaryDirectory(prefix="hetero-plan-bench-") as tmp:
        shards = make_shards(Path(tmp), args.samples)
        results = [bench_model(m, args, shards, device, trainer, host) for m in args.models.split(",")]
    doc = {
        "bench": "plan_accuracy",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "cpus": len(args.cpus),
        "trainer_cpus": args.trainer_cpus,
        "host_cpus": args.host_cpus,
        "batch": BATCH,
        "cpu_order": args.cpus,
        "hyperthread_siblings": siblings(),
        "prices": {
            "trainer": trainer.name,
            "trainer_usd_per_hour": trainer.price_per_hour,
            "data_host": host.name,
            "data_host_usd_per_hour": round(host.price_per_hour, 4),
        },
        "machine_cpu_share": cpu_share_since(ticks),
        "epoch_samples": EPOCH_SAMPLES,
        "models": results,
        "seconds": round(time.perf_counter() - started, 1),
        "all_within_10pct": all(r["predictions_within_10pct"] for r in results),
        "all_picks_within_5pct": all(r["pick_within_5pct"] for r in results),
    }
    emit(doc, args.out)


if __name__ == "__main__":
    main()

"""Does the planner predict what a cluster will do? Profile one configuration, predict others, run them. Prints JSON.

    python bench/plan_accuracy.py                                   # this machine: 1 data host, trainer on CPU
    python bench/plan_accuracy.py --hosts 1,2,3,4 --host-cpus 3 --trainer-cpus 2 --models small_cnn,resnet50
    python bench/plan_accuracy.py --trainer-cpus-list 1,2 --hosts 0,1,2 --streams 1,2 --trainer-keep 1   # the space

Every configuration runs the real data plane on this machine: each data host is a
process pinned to its own CPU set (``--host-cpus``) running the data service
(`serve`, over ``--streams`` connections to the trainer: StreamsPerFlow) over a
`ShardDataset` with one DataLoader worker per CPU; this process is the trainer,
pinned to its CPUs, on the GPU when there is one, with the real `DataServiceClient`
and training loop. A configuration is a trainer size x a data host count x streams:

- trainer sizes (``--trainer-cpus-list``, default ``--trainer-cpus``): the smallest
  is ``--trainer-price``; a bigger one emulates the type of the same GPU model with
  as many more vCPUs (ml.g5.2xlarge at 1 CPU: ml.g5.4xlarge at 2), at that type's
  price (`steps.evaluate.space.trainer_sizes`, the sizes ``hetero plan`` predicts for).
  Every size runs the same step (one torch thread per CPU of the smallest: the same
  GPU); what it keeps for its loop is ``--trainer-keep`` (TrainerCpus), the rest
  decode beside the data hosts (hybrid decode), or alone with ``--hosts 0``;
- data hosts (``--hosts``, 0: the trainer decodes alone, measured only where it keeps
  CPUs to decode on);
- streams (``--streams``): connections per data-host/trainer pair.

Where the machine has fewer CPUs than a layout, the data hosts wrap round onto the
trainer's CPUs (``shared_cpus`` of each configuration in the JSON): the planner
predicts separate instances, so those rows measure the emulation's contention too.

The profile is the smallest trainer with one data host and one stream: the step alone
with data resident (`isolated_costs`) and what the data host measured of itself (CPU
per sample, bytes per sample, scaling). The planner (`steps.evaluate.planner.predict`)
predicts every configuration's samples/s from that profile alone; then each
configuration runs and is measured (steady state, warm-up steps left out), in rounds
of every configuration, ``--repeats`` times (the median counts). Prices make cost per
epoch: the trainer as above, each data host at ``--host-cpus`` times the per-vCPU
price of ``--cpu-price`` (ml.c5.xlarge, 4 vCPUs, by default), from the bundled catalogue.

Judged: the median prediction error within 10% and the worst within 20% (and, as
before, whether every one is within 10%), and the planner's pick within 5% of the
cheapest measured cost per epoch among the configurations reaching 95% of the best
measured throughput. ``blur_passes`` (the workload's CPU knob) can be set per model
(``--blur resnet50=12``) so the range spans input- and compute-bound.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.dataplane import (  # noqa: E402
    BATCH,
    by_core,
    cpu_share_since,
    cpu_ticks,
    emit,
    local_decode,
    make_shards,
    run_configuration,
    siblings,
)
from steps.evaluate.catalogue import load_catalogue  # noqa: E402
from steps.evaluate.choice import ENOUGH_THROUGHPUT, recommend  # noqa: E402
from steps.evaluate.planner import (  # noqa: E402
    Inputs,
    InstanceType,
    Prediction,
    Profile,
    predict,
    profile_from_metrics,
)
from steps.evaluate.prices import load_prices  # noqa: E402
from steps.evaluate.space import trainer_sizes  # noqa: E402
from steps.train.frameworks.pytorch.step import isolated_costs  # noqa: E402
from steps.train.workloads.shapes import Shapes  # noqa: E402

EPOCH_SAMPLES = 1_000_000  # the nominal epoch cost per epoch is quoted for
WITHIN = 0.10
MEDIAN_WITHIN, WORST_WITHIN = 0.10, 0.20
PICK_WITHIN = 0.05


@dataclass(frozen=True)
class Layout:
    """One configuration: a trainer of ``trainer_cpus`` CPUs fed by ``hosts`` data hosts over ``streams`` connections each."""

    trainer_cpus: int
    hosts: int
    streams: int

    def cpu_sets(self, cpus: list[int], host_cpus: int, kept: int) -> tuple[list[int], list[list[int]], list[int]]:
        """The trainer's CPUs (its loop on the first ``kept``: the emulated GPU), each data host's, and the CPUs more
        than one of them decodes on: where the machine has fewer CPUs than the layout, the data hosts wrap round onto
        the trainer's decode CPUs (the loop's stay its own while any other is left)."""
        trainer = cpus[: self.trainer_cpus]
        pool = cpus[self.trainer_cpus :] + trainer[kept:] or trainer
        hosts = [[pool[(i * host_cpus + j) % len(pool)] for j in range(host_cpus)] for i in range(self.hosts)]
        used = [*trainer, *(c for h in hosts for c in h)]
        return trainer, hosts, sorted({c for c in used if used.count(c) > 1})

    def given(self, cpus: list[int], host_cpus: int, kept: int) -> tuple[float, float] | None:
        """The vCPUs the layout's CPU sets give, each decoding process taking an equal share of a CPU it shares: a data
        host's (the mean) and the trainer's spare; None where a data host shares the loop's CPUs (no share to give)."""
        trainer, hosts, _ = self.cpu_sets(cpus, host_cpus, kept)
        decoders = [*trainer[kept:], *(c for h in hosts for c in h)]
        if set(trainer[:kept]) & set(decoders):
            return None
        share = {c: 1 / decoders.count(c) for c in decoders}
        host = sum(share[c] for h in hosts for c in h) / len(hosts) if hosts else 0.0
        return host, sum(share[c] for c in trainer[kept:])


def layouts(args) -> list[Layout]:
    """Every trainer size x data host count x streams, streams only where there are data hosts, and no data host only
    where the trainer keeps CPUs to decode on (`kept`)."""
    found = []
    for k in args.trainer_cpus_list:
        for n in args.hosts:
            for s in args.streams if n else [1]:
                if n or k > args.kept[k]:
                    found.append(Layout(k, n, s))
    return found


def bench_model(name: str, args, shards: list[Path], device: torch.device, trainers: dict, host: InstanceType) -> dict:
    options = {"model": name, **({"blur_passes": args.blur[name]} if name in args.blur else {})}
    workload = Shapes(options)
    args.kept = {k: _kept(args, k, options, workload, device, shards) for k in args.trainer_cpus_list}
    space = layouts(args)
    first = min(args.trainer_cpus_list)
    profiled = Layout(first, 1, 1)  # the profile: the smallest trainer, one data host, one stream
    # a first estimate sizes the profile run: the step alone on the device, decode alone on one core
    probe = isolated_costs(workload, workload.build_model(8).to(device), device, shards[:2], batch_size=BATCH, learning_rate=1e-3)
    guess = min(BATCH / probe["step_s_per_batch_median"], args.host_cpus * BATCH / probe["decode_cpu_s_per_batch"])
    profile_runs = [_run(args, profiled, shards, options, guess, device) for _ in range(args.repeats)]
    costs = isolated_costs(workload, profile_runs[-1]["model"], device, shards[:2], batch_size=BATCH, learning_rate=1e-3)
    for run in profile_runs:
        run.pop("model")
    profile_run = _median_run(profile_runs)
    profile = profile_from_metrics({"isolated_costs": costs, **profile_run}, f"profile run of {name}")
    predictions = {c: _predict(profile, c, trainers[c.trainer_cpus], host, args.kept[c.trainer_cpus]) for c in space}
    given = {c: _predict_given(profile, c, trainers[c.trainer_cpus], host, args) for c in space}
    runs: dict[Layout, list] = {c: [] for c in space}
    for _ in range(args.repeats):  # rounds over every configuration: slow drifts of the machine hit them all alike
        for c in space:
            run = _run(args, c, shards, options, predictions[c].samples_per_second, device)
            run.pop("model")
            runs[c].append(run)
            print(
                f"[bench] {name}: trainer {c.trainer_cpus} CPU(s), {c.hosts} data host(s), {c.streams} stream(s): "
                f"predicted {predictions[c].samples_per_second:.0f}, measured {run['samples_per_second']:.0f} samples/s",
                file=sys.stderr,
                flush=True,
            )
    runs = {c: _median_run(r) for c, r in runs.items()}
    return _judge(name, options, profile, costs, profile_run, predictions, given, runs, args)


def _kept(args, k: int, options: dict, workload: Shapes, device: torch.device, shards: list[Path]) -> int:
    """The vCPUs a trainer of ``k`` CPUs keeps for its loop under ``--trainer-keep``, decided as the run decides it."""
    os.sched_setaffinity(0, args.cpus[:k])
    return local_decode(args.trainer_keep, options, workload.build_model(8).to(device), device, shards, 1).kept


def _predict(profile: Profile, c: Layout, trainer: InstanceType, host: InstanceType, kept: int) -> Prediction:
    """The planner's prediction (`steps.evaluate.planner.predict`, as ``hetero plan`` makes it) for ``c``: the trainer's
    CPUs beyond what it keeps decode beside the data hosts (its ``spare``)."""
    data = host if c.hosts else None
    return predict(
        profile, trainer, 1, data, c.hosts, EPOCH_SAMPLES, spare=c.trainer_cpus - kept, inputs=Inputs(streams=c.streams)
    )


def _predict_given(profile: Profile, c: Layout, trainer: InstanceType, host: InstanceType, args) -> Prediction | None:
    """The same model for the CPUs the layout's emulation gives (`Layout.given`: shared CPUs split between their
    decoding processes); None where it gives no share (a data host on the loop's CPUs)."""
    given = c.given(args.cpus, args.host_cpus, args.kept[c.trainer_cpus])
    if given is None:
        return None
    host_vcpus, spare = given
    data = replace(host, vcpus=host_vcpus) if c.hosts else None
    if data is None:
        trainer = replace(trainer, vcpus=args.kept[c.trainer_cpus] + spare)  # no data host: its decode CPUs are the spare
    return predict(profile, trainer, 1, data, c.hosts, EPOCH_SAMPLES, spare=spare, inputs=Inputs(streams=c.streams))


def _run(args, c: Layout, shards: list[Path], options: dict, rate: float, device: torch.device) -> dict:
    trainer, hosts, shared = c.cpu_sets(args.cpus, args.host_cpus, args.kept[c.trainer_cpus])
    os.sched_setaffinity(0, trainer)
    run = run_configuration(
        c.hosts, hosts, shards, options, _steps(rate, args.seconds), device, args.repeat, args.trainer_keep, streams=c.streams
    )
    return {**run, "cpu_sets": {"trainer": trainer, "data_hosts": hosts, "shared": shared}}


def _median_run(runs: list[dict]) -> dict:
    """The run of median rate, with every repeat's rate beside it."""
    ordered = sorted(runs, key=lambda r: r["samples_per_second"])
    return {**ordered[(len(ordered) - 1) // 2], "repeats": [round(r["samples_per_second"], 1) for r in runs]}


def _steps(rate: float, seconds: float) -> int:
    return int(min(max(rate * seconds / BATCH, 60), 20000))


def _judge(name, options, profile, costs, profile_run, predictions: dict, given: dict, runs: dict, args) -> dict:
    rows = [_row(c, p, given[c], runs[c]) for c, p in predictions.items()]
    pick = recommend(list(predictions.values()))
    picked = rows[list(predictions.values()).index(pick)]
    best = max(r["measured_samples_per_s"] for r in rows)
    fast = [r for r in rows if r["measured_samples_per_s"] >= ENOUGH_THROUGHPUT * best]
    cheapest = min(fast, key=lambda r: r["measured_cost_per_epoch"])
    errors = [abs(r["error"]) for r in rows]
    alone = [abs(r["error"]) for r in rows if not r["shared_cpus"]]
    for_given = [abs(r["error_for_given_cpus"]) for r in rows if r["error_for_given_cpus"] is not None]
    return {
        "model": name,
        "workload_options": options,
        "trainer_kept_cpus": args.kept,
        "profile": {
            "configuration": {"trainer_cpus": min(args.trainer_cpus_list), "data_hosts": 1, "streams": 1},
            "step_s_per_sample": profile.step_s_per_sample,
            "cpu_s_per_sample": profile.cpu_s_per_sample,
            "decode_cpu_s_per_sample": profile.decode_cpu_s_per_sample,
            "scaling": round(profile.scaling, 4),
            "scaling_measured": profile.scaling_measured,
            "bytes_per_sample": profile.bytes_per_sample,
            "step_s_per_batch_alone": costs["step_s_per_batch_median"],
            "profile_run_samples_per_s": round(profile_run["samples_per_second"], 1),
            "profile_run_repeats": profile_run["repeats"],
            "profile_run_cpu_sets": profile_run["cpu_sets"],
            "step_s_per_batch_in_loop": round(profile_run["compute_s_per_step"], 6),
            "profile_run_trainer_cpu_s_per_sample": round(profile_run["trainer_cpu_s_per_sample"], 6),
            "profile_run_data_wait_share": round(profile_run["data_wait_share"], 3),
        },
        "configurations": rows,
        "median_abs_error": round(statistics.median(errors), 4),
        "max_abs_error": round(max(errors), 4),
        "predictions_within_10pct": all(e <= WITHIN for e in errors),
        "predictions_within_goal": statistics.median(errors) <= MEDIAN_WITHIN and max(errors) <= WORST_WITHIN,
        "unshared": {  # the configurations whose processes each had CPUs of their own, as separate instances would
            "configurations": len(alone),
            "median_abs_error": round(statistics.median(alone), 4) if alone else None,
            "max_abs_error": round(max(alone), 4) if alone else None,
        },
        "for_given_cpus": {  # every configuration predicted for the CPU shares the emulation gave it
            "configurations": len(for_given),
            "median_abs_error": round(statistics.median(for_given), 4) if for_given else None,
            "max_abs_error": round(max(for_given), 4) if for_given else None,
        },
        "planner_pick": _name(picked),
        "cheapest_fast_measured": _name(cheapest),
        "planner_pick_data_hosts": picked["data_hosts"],
        "cheapest_fast_measured_data_hosts": cheapest["data_hosts"],
        "pick_cost_over_cheapest": round(picked["measured_cost_per_epoch"] / cheapest["measured_cost_per_epoch"] - 1, 4),
        "pick_within_5pct": picked["measured_cost_per_epoch"] <= (1 + PICK_WITHIN) * cheapest["measured_cost_per_epoch"],
    }


def _row(c: Layout, p: Prediction, given: Prediction | None, run: dict) -> dict:
    measured = run["samples_per_second"]
    local = run["local_decode"][0] if run["local_decode"] else {}
    return {
        "trainer_cpus": c.trainer_cpus,
        "trainer_type": p.trainer,
        "data_hosts": c.hosts,
        "streams": c.streams,
        "cpu_sets": run["cpu_sets"],
        "shared_cpus": run["cpu_sets"]["shared"],
        "trainer_decode_workers": run["spare"]["workers"],
        "predicted_samples_per_s": round(p.samples_per_second, 1),
        "measured_samples_per_s": round(measured, 1),
        "measured_repeats": run["repeats"],
        "error": round(p.samples_per_second / measured - 1, 4),
        "bottleneck": p.bottleneck,
        # the same model for the CPUs the emulation gave (shared CPUs split): what the shared rows can be judged by
        "predicted_for_given_cpus": round(given.samples_per_second, 1) if given else None,
        "error_for_given_cpus": round(given.samples_per_second / measured - 1, 4) if given else None,
        "bottleneck_for_given_cpus": given.bottleneck if given else None,
        "predicted_stage_rates": {k: round(v, 1) for k, v in p.stage_rates.items()},
        "predicted_gpu_busy_share": round(p.gpu_busy_share, 3),
        "measured_data_wait_share": round(run["data_wait_share"], 3),
        "cluster_usd_per_hour": round(p.cluster_price_per_hour, 4),
        "predicted_cost_per_epoch": round(p.cost_per_epoch, 4),
        "measured_cost_per_epoch": round(p.cluster_price_per_hour * EPOCH_SAMPLES / measured / 3600, 4),
        "data_host_busy_share": [round(h["busy_share"], 3) for h in run.get("data_hosts") or []],
        "data_host_streams": [h.get("streams") for h in run.get("data_hosts") or []],
        "local_decode_share": round(local.get("share", 0.0), 3),
        "trainer_cpu_s_per_sample": round(run["trainer_cpu_s_per_sample"], 6),
    }


def _name(row: dict) -> str:
    return f"trainer {row['trainer_cpus']} CPU(s), {row['data_hosts']} data host(s), {row['streams']} stream(s)"


def trainer_types(args, device: torch.device, catalogue, prices) -> dict[int, InstanceType]:
    """Each trainer size (``--trainer-cpus-list``) as the type it emulates: the smallest is ``--trainer-price``, a bigger
    one the type of the same GPU model (the sizes ``hetero plan`` predicts for, `steps.evaluate.space.trainer_sizes`)
    with as many more vCPUs, at its price; vCPUs as many as it has here (one machine's loopback: no network bound)."""
    base = catalogue.priced(args.trainer_price, prices)
    if base is None:
        sys.exit(f"--trainer-price {args.trainer_price}: no price in the bundled price table; name a priced type")
    first = min(args.trainer_cpus_list)
    found = {}
    for k in args.trainer_cpus_list:
        vcpus = base.vcpus * k // first
        same = [t for t in trainer_sizes(catalogue, prices, base) if t.vcpus == vcpus and t.gpus == base.gpus]
        if not same or base.vcpus * k % first:
            sys.exit(
                f"--trainer-cpus-list {k}: no priced type with {base.name}'s GPUs and {k}/{first} of its vCPUs to emulate; "
                "give sizes in the ratio of the family's (e.g. 1,2 for ml.g5.2xlarge and ml.g5.4xlarge)"
            )
        found[k] = InstanceType(f"{same[0].name} (this machine's {device.type} + {k} CPUs)", k, same[0].price_per_hour)
    return found


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="small_cnn")
    parser.add_argument("--hosts", default="1", help="data host counts to predict and measure, e.g. 0,1,2 (0: the trainer alone)")
    parser.add_argument("--host-cpus", type=int, default=1)
    parser.add_argument("--trainer-cpus", type=int, default=1)
    parser.add_argument("--trainer-cpus-list", help="trainer sizes to predict and measure, e.g. 1,2 (default: --trainer-cpus)")
    parser.add_argument("--trainer-keep", default="all", help="TrainerCpus: vCPUs the trainer keeps for its loop (all, auto, N)")
    parser.add_argument("--streams", default="1", help="StreamsPerFlow values to predict and measure, e.g. 1,2")
    parser.add_argument("--seconds", type=float, default=8.0, help="target length of each measured run")
    parser.add_argument("--samples", type=int, default=4000, help="distinct images (served repeatedly)")
    parser.add_argument("--repeat", type=int, default=100, help="passes over the images in one epoch")
    parser.add_argument("--repeats", type=int, default=3, help="measured runs per configuration (the median counts)")
    parser.add_argument("--blur", default="", help="per-model blur_passes, e.g. resnet50=12")
    parser.add_argument("--trainer-price", default="ml.g5.2xlarge")
    parser.add_argument("--cpu-price", default="ml.c5.xlarge")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    args.hosts, args.streams = _ints(args.hosts), _ints(args.streams)
    args.trainer_cpus_list = _ints(args.trainer_cpus_list or str(args.trainer_cpus))
    args.blur = {k: int(v) for k, v in (item.split("=") for item in args.blur.split(",") if item)}
    args.cpus = by_core(sorted(os.sched_getaffinity(0)))
    if max(args.trainer_cpus_list) > len(args.cpus):
        sys.exit(f"--trainer-cpus-list {max(args.trainer_cpus_list)}: this machine has {len(args.cpus)} CPUs")
    if 1 not in args.hosts:
        sys.exit(f"--hosts {','.join(map(str, args.hosts))}: include 1, the profiled configuration")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    torch.set_num_threads(min(args.trainer_cpus_list))  # one step for every size: a bigger size of the same GPU
    prices = load_prices(None)
    trainers = trainer_types(args, device, load_catalogue(), prices)
    cpu_type = args.cpu_price
    host = InstanceType(
        f"{args.host_cpus} CPUs of this machine at {cpu_type}'s per-vCPU price",
        args.host_cpus,
        prices.hourly(cpu_type) / 4 * args.host_cpus,
    )
    started, ticks = time.perf_counter(), cpu_ticks()
    with tempfile.TemporaryDirectory(prefix="hetero-plan-bench-") as tmp:
        shards = make_shards(Path(tmp), args.samples)
        results = [bench_model(m, args, shards, device, trainers, host) for m in args.models.split(",")]
    first = min(args.trainer_cpus_list)
    doc = {
        "bench": "plan_accuracy",
        "command": " ".join(sys.argv),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "cpus": len(args.cpus),
        "trainer_cpus": first,
        "trainer_cpus_list": args.trainer_cpus_list,
        "trainer_keep": args.trainer_keep,
        "host_cpus": args.host_cpus,
        "streams": args.streams,
        "batch": BATCH,
        "cpu_order": args.cpus,
        "hyperthread_siblings": siblings(),
        "prices": {
            "trainer": trainers[first].name,
            "trainer_usd_per_hour": trainers[first].price_per_hour,
            "trainers": {k: {"type": t.name, "usd_per_hour": t.price_per_hour} for k, t in trainers.items()},
            "data_host": host.name,
            "data_host_usd_per_hour": round(host.price_per_hour, 4),
        },
        "machine_cpu_share": cpu_share_since(ticks),
        "epoch_samples": EPOCH_SAMPLES,
        "models": results,
        "seconds": round(time.perf_counter() - started, 1),
        "all_within_10pct": all(r["predictions_within_10pct"] for r in results),
        "all_within_goal": all(r["predictions_within_goal"] for r in results),
        "all_picks_within_5pct": all(r["pick_within_5pct"] for r in results),
    }
    emit(doc, args.out)


if __name__ == "__main__":
    main()

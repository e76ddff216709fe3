"""Does hybrid decode pay off? Heterogeneous vs hybrid samples/s on the same CPU sets, on the real data plane. Prints JSON.

    python bench/hybrid.py                                     # the GPU machine: trainer 8 CPUs + the GPU, 1 data host of 4
    python bench/hybrid.py --trainer-cpus 8 --hosts 2 --host-cpus 4 --blur 2 --repeats 3

Needs only torch and the step code (`bench/dataplane.py`: data hosts are processes pinned to their CPU sets running
the data service, this process is the trainer, on the GPU when there is one). The trainer host gets
``--trainer-cpus`` CPUs (a GPU instance's vCPUs: 8 on ml.g5.2xlarge or ml.p3.2xlarge), each data host
``--host-cpus``. Rows, on exactly those CPU sets, interleaved over ``--repeats`` (the median counts):

- heterogeneous: ``TrainerCpus=all``, the trainer host decodes nothing (today's heterogeneous cluster);
- hybrid auto: ``TrainerCpus=auto``, the job's own probe measures the step's CPU use, keeps that plus one vCPU for the
  data plane and decodes its side of every shard on the rest (`steps.train.core.spare_cpus`, `steps.train.core.split`);
- hybrid N (``--forced N``): keeps N vCPUs.

The bound beside the ratio: a run is at most as fast as its slower stage, the step with data resident or the decode
of every worker it has, each measured alone in the same run (`steps.train.frameworks.pytorch.step.isolated_costs`), so hybrid over
heterogeneous is at most min(step rate, (data + local workers) x per-worker decode rate) over min(step rate, data
workers x the same rate). Judged: hybrid auto >= 1.2 x heterogeneous where auto found spare CPUs (it decoded),
and >= 0.95 x where it found none (it must then cost nothing). Where the machine has fewer CPUs than the layout, the
data hosts take theirs from the end of the trainer's set (``shared_cpus`` in the JSON): hybrid can then only match.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.dataplane import BATCH, by_core, cpu_share_since, cpu_ticks, emit, make_shards, run_configuration  # noqa: E402
from steps.train.frameworks.pytorch.step import isolated_costs  # noqa: E402
from steps.train.workloads.shapes import Shapes  # noqa: E402

SPARE_GOAL, NONE_GOAL = 1.2, 0.95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="small_cnn", choices=("small_cnn", "resnet50"))
    parser.add_argument("--blur", type=int, default=None, help="the workload's blur_passes (its decode cost knob)")
    parser.add_argument("--trainer-cpus", type=int, default=8)
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--host-cpus", type=int, default=4)
    parser.add_argument("--forced", type=int, default=None, help="also a row keeping this many vCPUs for the loop")
    parser.add_argument("--seconds", type=float, default=8.0, help="target length of each measured run")
    parser.add_argument("--samples", type=int, default=4000, help="distinct images (served repeatedly)")
    parser.add_argument("--repeat", type=int, default=100, help="passes over the images in one epoch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()

    cpus = by_core(sorted(os.sched_getaffinity(0)))
    trainer_set = cpus[: args.trainer_cpus]
    if len(trainer_set) < args.trainer_cpus:
        sys.exit(f"--trainer-cpus {args.trainer_cpus}: this machine has {len(cpus)} CPUs")
    host_sets = [
        [cpus[(args.trainer_cpus + i * args.host_cpus + j) % len(cpus)] for j in range(args.host_cpus)] for i in range(args.hosts)
    ]
    shared = sorted(set(trainer_set) & {c for s in host_sets for c in s})
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    os.sched_setaffinity(0, trainer_set)
    options = {"model": args.model, **({"blur_passes": args.blur} if args.blur is not None else {})}
    workload = Shapes(options)
    rows = {"heterogeneous": "all", "hybrid_auto": "auto", **({f"hybrid_{args.forced}": str(args.forced)} if args.forced else {})}
    started, ticks = time.perf_counter(), cpu_ticks()
    with tempfile.TemporaryDirectory(prefix="hetero-hybrid-bench-") as tmp:
        shards = make_shards(Path(tmp), args.samples)
        costs = isolated_costs(
            workload, workload.build_model(8).to(device), device, shards[:2], batch_size=BATCH, learning_rate=1e-3
        )
        step_rate = BATCH / costs["step_s_per_batch_median"]
        worker_rate = BATCH / costs["decode_cpu_s_per_batch"]  # one decode worker on one CPU
        steps = int(
            min(
                max(min(step_rate, (args.hosts * args.host_cpus + args.trainer_cpus) * worker_rate) * args.seconds / BATCH, 60),
                20000,
            )
        )
        runs: dict[str, list] = {name: [] for name in rows}
        for _ in range(args.repeats):  # rounds over every row: slow drifts of the machine hit them all alike
            for name, trainer_cpus in rows.items():
                run = run_configuration(args.hosts, host_sets, shards, options, steps, device, args.repeat, trainer_cpus)
                run.pop("model")
                runs[name].append(run)
                print(
                    f"[bench] {name}: {run['samples_per_second']:.0f} samples/s, local decode workers "
                    f"{run['spare']['workers']} (kept {run['spare']['kept_cpus']})",
                    file=sys.stderr,
                    flush=True,
                )
    data_workers = args.hosts * args.host_cpus
    result = {}
    for name, repeats in runs.items():
        rates = [r["samples_per_second"] for r in repeats]
        median = sorted(repeats, key=lambda r: r["samples_per_second"])[(len(repeats) - 1) // 2]
        local_workers = median["spare"]["workers"]
        result[name] = {
            "samples_per_second": round(statistics.median(rates), 1),
            "repeats": [round(r, 1) for r in rates],
            "data_wait_share": round(median["data_wait_share"], 3),
            "spare": median["spare"],
            "local_decode": median["local_decode"],
            "bound_samples_per_second": round(min(step_rate, (data_workers + local_workers) * worker_rate), 1),
        }
    hetero = result["heterogeneous"]["samples_per_second"]
    for name in rows:
        if name != "heterogeneous":
            result[name]["over_heterogeneous"] = round(result[name]["samples_per_second"] / hetero, 3)
            result[name]["bound_over_heterogeneous"] = round(
                result[name]["bound_samples_per_second"] / result["heterogeneous"]["bound_samples_per_second"], 3
            )
    auto = result["hybrid_auto"]
    spare_found = auto["spare"]["workers"] > 0
    goal = SPARE_GOAL if spare_found else NONE_GOAL
    doc = {
        "bench": "hybrid",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "workload": options,
        "batch": BATCH,
        "trainer_cpus": trainer_set,
        "data_host_cpus": host_sets,
        "shared_cpus": shared,
        "step_s_per_batch_alone": costs["step_s_per_batch_median"],
        "decode_cpu_s_per_batch": costs["decode_cpu_s_per_batch"],
        "rows": result,
        "hybrid_auto_over_heterogeneous": auto["over_heterogeneous"],
        "goal": f">= {goal} ({'the trainer had spare CPUs' if spare_found else 'no spare CPUs found: must cost nothing'})",
        "goal_met": auto["over_heterogeneous"] >= goal,
        "machine_cpu_share": cpu_share_since(ticks),
        "seconds": round(time.perf_counter() - started, 1),
    }
    emit(doc, args.out)


if __name__ == "__main__":
    main()

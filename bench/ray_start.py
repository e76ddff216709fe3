"""How long a Ray job takes to start on a 1-CPU node: ``fit()`` to the training loop's first line and first batch.

A Ray job's start on a trainer host is Ray's own processes, each a Python interpreter importing Ray on the host's
CPUs: Ray Train's controller, its worker group and synchronisation actor, Ray Data's coordinators and read task. The
job's trainer (`steps.train.frameworks.ray.job_trainer`) is Ray Train's ``TorchTrainer`` less its placement-group
cleaner and its runtime environments (``job``); ``no_cleaner`` is it with Ray Train's own controller start (its runtime
environments kept); the anchor, in the same run, is Ray Train's ``TorchTrainer`` as shipped (``ray_train``). Each
trial is a fresh process and a fresh single-node Ray cluster (``ray.init``), pinned to one CPU (``--cpu``) as an
emulated host is, with the node's Ray settings (`steps.train.frameworks.ray.node.RAY_SETTINGS`); the loop reads a
small Ray Data dataset through its shard, as the job's does. The trainers alternate, ``--repeats`` times each::

    .venv/bin/python bench/ray_start.py               # 3 trials of each
    .venv/bin/python bench/ray_start.py --repeats 5

Prints one JSON document: per trainer, each trial's seconds from ``fit()`` to the loop's first line, to its first
batch, and the whole ``fit()``; their medians; each trainer's medians over the anchor's (the ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRAINERS = ("ray_train", "no_cleaner", "job")  # the anchor first
MEASURES = ("to_loop_s", "to_first_batch_s", "fit_s")


def trial(trainer: str) -> dict:
    """One trial, in this process: a Ray cluster of one node, the trainer fitted once, the times."""
    import time

    import ray
    import ray.train
    from ray.train import ScalingConfig

    from steps.train.frameworks.ray.node import TRAINER_RESOURCE

    # as a 1-CPU trainer host alone (the baseline): the worker reserves no CPU, Ray Data reads on the one there is
    ray.init(num_cpus=1, resources={TRAINER_RESOURCE: 1}, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        from steps.train.frameworks.ray.job_trainer import job_trainer

        trainer_class = job_trainer()
        if trainer == "no_cleaner":  # the job's less its runtime-environment change: Ray Train's controller start
            trainer_class._initialize_and_run_controller = trainer_class.__mro__[1]._initialize_and_run_controller
        elif trainer == "ray_train":
            from ray.train.torch import TorchTrainer as trainer_class

        times = Path(tempfile.mkdtemp(prefix="bench-ray-start-")) / "times.json"

        def loop(config: dict) -> None:
            started = time.time()
            first = None
            for _ in ray.train.get_dataset_shard("train").iter_batches(batch_size=32):
                first = first or time.time()
            Path(config["times"]).write_text(json.dumps({"started": started, "first_batch": first}))

        fitted = trainer_class(
            loop,
            train_loop_config={"times": str(times)},
            scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 0, TRAINER_RESOURCE: 1}),
            datasets={"train": ray.data.range(256)},
        )
        begun = time.time()
        try:
            fitted.fit()
            ended = time.time()
            metrics = json.loads(times.read_text())
        finally:
            shutil.rmtree(times.parent, ignore_errors=True)
    finally:
        ray.shutdown()
    return {
        "to_loop_s": round(metrics["started"] - begun, 2),
        "to_first_batch_s": round(metrics["first_batch"] - begun, 2),
        "fit_s": round(ended - begun, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=min(os.sched_getaffinity(0)), help="the CPU every trial runs on")
    parser.add_argument("--trial", choices=TRAINERS, help=argparse.SUPPRESS)  # one trial, in a fresh process
    args = parser.parse_args()
    if args.trial:
        print(json.dumps(trial(args.trial)))
        return

    from steps.train.frameworks.ray.node import RAY_SETTINGS

    environment = {**os.environ, **RAY_SETTINGS, "PYTHONPATH": str(ROOT)}
    runs: dict[str, list[dict]] = {t: [] for t in TRAINERS}
    for _ in range(args.repeats):
        for trainer in TRAINERS:
            done = subprocess.run(
                [sys.executable, __file__, "--trial", trainer],
                env=environment,
                capture_output=True,
                text=True,
                check=False,
                timeout=600,
                preexec_fn=lambda: os.sched_setaffinity(0, {args.cpu}),
            )
            if done.returncode != 0:
                raise SystemExit(f"a {trainer} trial failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            runs[trainer].append(json.loads(done.stdout.strip().splitlines()[-1]))
    medians = {t: {m: statistics.median(r[m] for r in runs[t]) for m in MEASURES} for t in TRAINERS}
    print(
        json.dumps(
            {
                "cpu": args.cpu,
                "repeats": args.repeats,
                "trials": runs,
                "medians": medians,
                "over_ray_train": {
                    t: {m: round(medians[t][m] / medians["ray_train"][m], 3) for m in MEASURES} for t in TRAINERS[1:]
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

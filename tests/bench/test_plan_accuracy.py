"""bench/plan_accuracy.py: the candidate space it measures (trainer sizes as the catalogue's types of one GPU, data
hosts 0..N, streams per flow), the CPU sets it gives each configuration, and the bench run small on the CPU."""

from __future__ import annotations

import argparse
import json
import os

import pytest
import torch

from bench.plan_accuracy import Layout, layouts, trainer_types
from steps.evaluate.catalogue import load_catalogue
from steps.evaluate.prices import load_prices
from tests.support.bench import run_bench


def test_streams_vary_only_with_data_hosts_and_a_trainer_alone_only_where_it_keeps_cpus_to_decode():
    args = argparse.Namespace(trainer_cpus_list=[1, 2], hosts=[0, 1], streams=[1, 2], kept={1: 1, 2: 1})
    assert layouts(args) == [Layout(1, 1, 1), Layout(1, 1, 2), Layout(2, 0, 1), Layout(2, 1, 1), Layout(2, 1, 2)]


def test_data_hosts_take_the_cpus_after_the_trainer_and_wrap_onto_its_decode_cpus_never_its_loops():
    assert Layout(1, 1, 1).cpu_sets([0, 1], 1, kept=1) == ([0], [[1]], [])
    assert Layout(1, 2, 2).cpu_sets([0, 1, 2, 3], 1, kept=1) == ([0], [[1], [2]], [])
    assert Layout(1, 2, 1).cpu_sets([0, 1], 1, kept=1) == ([0], [[1], [1]], [1])
    assert Layout(2, 1, 1).cpu_sets([0, 1], 1, kept=1) == ([0, 1], [[1]], [1])  # beside the trainer's decode worker
    assert Layout(1, 1, 1).cpu_sets([0], 1, kept=1) == ([0], [[0]], [0])  # no other CPU: the loop's


def test_the_cpus_given_split_a_shared_cpu_between_the_processes_decoding_on_it():
    assert Layout(1, 1, 1).given([0, 1], 1, kept=1) == (1.0, 0.0)
    assert Layout(2, 0, 1).given([0, 1], 1, kept=1) == (0.0, 1.0)
    assert Layout(2, 1, 1).given([0, 1], 1, kept=1) == (0.5, 0.5)
    assert Layout(2, 2, 1).given([0, 1], 1, kept=1) == pytest.approx((1 / 3, 1 / 3))
    assert Layout(1, 1, 1).given([0], 1, kept=1) is None  # the data host shares the loop's CPU: no share to give


def test_bigger_trainers_are_the_same_gpus_types_with_as_many_more_vcpus_at_their_price():
    args = argparse.Namespace(trainer_price="ml.g5.2xlarge", trainer_cpus_list=[1, 2, 4])
    found = trainer_types(args, torch.device("cpu"), load_catalogue(), load_prices(None))
    prices = load_prices(None).usd_per_hour
    assert {k: (t.vcpus, t.price_per_hour) for k, t in found.items()} == {
        1: (1, prices["ml.g5.2xlarge"]),
        2: (2, prices["ml.g5.4xlarge"]),
        4: (4, prices["ml.g5.8xlarge"]),
    }
    assert found[2].name.startswith("ml.g5.4xlarge ")


def test_a_size_the_gpu_has_no_type_for_is_refused_by_name():
    args = argparse.Namespace(trainer_price="ml.g5.2xlarge", trainer_cpus_list=[2, 3])
    with pytest.raises(SystemExit, match="--trainer-cpus-list 3"):
        trainer_types(args, torch.device("cpu"), load_catalogue(), load_prices(None))


@pytest.mark.e2e
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a trainer with a CPU to decode on needs 2")
def test_the_bench_predicts_and_measures_trainer_sizes_data_hosts_and_streams_small_on_a_cpu(no_leftovers):  # noqa: F811
    done = run_bench(
        "bench/plan_accuracy.py",
        *("--samples", "500", "--repeat", "2", "--seconds", "0.5", "--repeats", "1"),
        *("--trainer-cpus-list", "1,2", "--hosts", "0,1", "--streams", "1,2", "--trainer-keep", "1"),
        timeout=420,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (model,) = json.loads(done.stdout)["models"]
    rows = {(r["trainer_cpus"], r["data_hosts"], r["streams"]): r for r in model["configurations"]}
    assert sorted(rows) == [(1, 1, 1), (1, 1, 2), (2, 0, 1), (2, 1, 1), (2, 1, 2)]
    assert rows[(2, 0, 1)]["bottleneck"] in ("compute", "trainer_cpu") and rows[(2, 0, 1)]["trainer_decode_workers"] == 1
    assert rows[(1, 1, 2)]["data_host_streams"] == [2] and rows[(1, 1, 1)]["data_host_streams"] == [1]
    assert rows[(2, 1, 1)]["shared_cpus"] and not rows[(1, 1, 1)]["shared_cpus"]
    assert rows[(2, 1, 1)]["predicted_for_given_cpus"] <= rows[(2, 1, 1)]["predicted_samples_per_s"]
    assert rows[(2, 1, 1)]["local_decode_share"] > 0  # the bigger trainer decoded beside its data host
    for row in rows.values():
        assert row["measured_samples_per_s"] > 0 and len(row["measured_repeats"]) == 1
    assert model["planner_pick"] in {f"trainer {k} CPU(s), {n} data host(s), {s} stream(s)" for k, n, s in rows}

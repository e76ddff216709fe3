"""The data plane the benches time (bench/dataplane.py), run small: a data host process and a hybrid trainer decoding
its side of every shard, each sample once. It guards the benches that run only on the GPU machine against a change
of the step code they call."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.bench import run_bench

pytestmark = pytest.mark.e2e

# in a process of its own, as a bench runs: multiprocessing's spawn starts a resource tracker that lives as long as
# the process that spawned
RUN = """
import json, sys
from pathlib import Path
import torch
from bench.dataplane import make_shards, run_configuration
shards = make_shards(Path(sys.argv[1]), 1000)
run = run_configuration(1, [[int(sys.argv[2])]], shards, {"blur_passes": 0}, steps=10**4, device=torch.device("cpu"),
                        repeat=1, trainer_cpus="1")
run.pop("model")
print(json.dumps(run))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a trainer with a CPU to spare needs 2")
def test_a_hybrid_trainer_and_a_data_host_deliver_every_sample_of_the_epoch_once(tmp_path, no_leftovers):  # noqa: F811
    cpus = sorted(os.sched_getaffinity(0))
    done = run_bench("-c", RUN, str(tmp_path), str(cpus[0]), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    (local,) = run["local_decode"]
    (host,) = run["data_hosts"]
    assert run["spare"]["workers"] == len(cpus) - 1 and local["split"] == {"period": len(cpus), "trainers": [len(cpus) - 1]}
    assert local["samples"] > 0 and host["samples_sent"] > 0
    assert local["samples"] + host["samples_sent"] == 1000  # the one epoch, from both sides of the split
    assert run["samples_per_second"] > 0

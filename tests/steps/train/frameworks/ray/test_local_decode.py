"""What a Ray Train worker reserves of its trainer host, decided without a Ray cluster."""

from __future__ import annotations

from steps.train.frameworks.ray.local_decode import leave_room_for_data


def test_the_ray_train_workers_reservation_always_leaves_ray_data_a_cpu():
    # a data host beside the trainer: the worker keeps what it measured, the data host's CPUs decode
    assert leave_room_for_data(1, "measured", workers=1, cpus=2) == (1, "measured")
    assert leave_room_for_data(2, "measured", workers=2, cpus=4 + 16) == (2, "measured")
    # the 1-vCPU baseline: reserving its one CPU left the read none, and it never started
    kept, why = leave_room_for_data(1, "measured", workers=1, cpus=1)
    assert kept == 0 and why.startswith("measured; 1 x 1 would leave Ray Data none of the cluster's 1 CPU(s)")
    # trainers alone with 4 vCPUs each, trainer_cpus=all: each keeps what leaves one CPU of the cluster
    assert leave_room_for_data(4, "trainer_cpus=all", workers=1, cpus=4)[0] == 3
    assert leave_room_for_data(4, "trainer_cpus=all", workers=2, cpus=8)[0] == 3

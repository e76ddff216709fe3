"""How many connections a data host asks each trainer for: the setting, or auto from the needed bandwidth."""

from __future__ import annotations

import pytest

from steps.contract import MAX_STREAMS_PER_FLOW
from steps.train.dataplane.streams import streams_per_flow

RESNET_224 = 224 * 224 * 3 + 16  # uint8 pixels, an int64 label and id


def test_a_set_value_is_used_as_it_is():
    assert streams_per_flow(3, bytes_per_sample=RESNET_224, samples_per_s=100.0) == 3


def test_auto_is_one_stream_when_no_target_rate_is_known():
    assert streams_per_flow(0, bytes_per_sample=RESNET_224) == 1


@pytest.mark.parametrize(
    ("samples_per_s", "streams"),
    [
        (1_000.0, 1),  # 1.2 Gbps
        (3_000.0, 1),  # 3.6 Gbps: one 5 Gbps flow carries it
        (6_900.0, 2),  # 8.3 Gbps: an H100 at ResNet-50 speed
        (20_000.0, 5),  # 24.1 Gbps
        (1e9, MAX_STREAMS_PER_FLOW),  # no more than the parameter allows
    ],
)
def test_auto_is_the_needed_gbps_over_five_rounded_up(samples_per_s, streams):
    assert streams_per_flow(0, bytes_per_sample=RESNET_224, samples_per_s=samples_per_s) == streams

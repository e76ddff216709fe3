"""How many TCP connections a data host opens to each trainer: streams per flow.

One TCP flow between two EC2 instances carries at most 5 Gbps outside a cluster
placement group (10 inside; EC2 User Guide, "Amazon EC2 instance network
bandwidth"), well below what one GPU can take (an H100 at published ResNet-50
speed needs ~8.3 Gbps of uint8 224 px images). So a data host may open several
authenticated connections to each trainer and spread its batches over them.
"""

from __future__ import annotations

import math

from steps.contract import MAX_STREAMS_PER_FLOW

PER_FLOW_GBPS = 5.0  # EC2's limit of one flow outside a cluster placement group


def streams_per_flow(setting: int, *, bytes_per_sample: int, samples_per_s: float | None = None) -> int:
    """``setting`` (StreamsPerFlow) when given, else auto: ceil(needed Gbps / `PER_FLOW_GBPS`), where needed Gbps is
    ``bytes_per_sample`` x the trainer's target ``samples_per_s``; 1 when that rate is not known."""
    if setting > 0:
        return setting
    if not samples_per_s:
        return 1
    needed_gbps = bytes_per_sample * samples_per_s * 8 / 1e9
    return min(max(math.ceil(needed_gbps / PER_FLOW_GBPS), 1), MAX_STREAMS_PER_FLOW)

"""The Ray path's own errors."""

from __future__ import annotations

from steps.common.errors import HeteroError


class RayNodeFailed(HeteroError):
    """A host's Ray node did not come up, did not join, or stopped while the job trains."""

    headline = "ray node failed"


class HostLost(HeteroError):
    """A host's link to the head closed, or the host reported its own failure, during training."""

    headline = "host lost"

"""The Ray path's own errors."""

from __future__ import annotations

from steps.common.errors import HeteroError


class RayNodeFailed(HeteroError):
    """A host's Ray node did not come up, did not join, or stopped while the job trains."""

    headline = "ray node failed"

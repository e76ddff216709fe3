"""The TensorFlow path's own errors."""

from __future__ import annotations

from steps.common.errors import HeteroError


class DuplicateSamples(HeteroError):
    """The tf.data service served a sample more often than the epoch holds it: the shards overlap."""

    headline = "samples served twice"

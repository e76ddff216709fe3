"""Constants every framework's training path shares, declared once; none is a tunable (each says why)."""

from __future__ import annotations

# Samples a host's training stream holds to shuffle their order each epoch (PyTorch's buffer, tf.data's shuffle, Ray
# Data's local_shuffle_buffer_size). Not a tunable: the Shard step already mixed the classes inside every train shard
# (steps/shard/plan.py), so the window only has to vary the order from epoch to epoch, and the frameworks use the same
# one so their runs compare.
SHUFFLE_BUFFER = 256

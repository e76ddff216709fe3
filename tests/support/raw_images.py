"""A raw image folder as the shard step reads it: one sub-folder per class of small noise images."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def image_bytes(rng, side=16, fmt="JPEG") -> bytes:
    """Noise, so every file differs and PNGs do not compress (predictable sizes)."""
    pixels = rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format=fmt)
    return out.getvalue()


def make_raw(root: Path, counts: dict[str, int], *, side=16, fmt="JPEG", ext="jpg", seed=0) -> Path:
    rng = np.random.default_rng(seed)
    for name, count in counts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for index in range(count):
            (root / name / f"{name}_{index:03d}.{ext}").write_bytes(image_bytes(rng, side, fmt))
    return root

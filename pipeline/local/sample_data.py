"""A synthetic raw image dataset shaped like real ones: thousands of small JPEGs, one folder per class.

Each class is a (colour family, shape) pair such as ``red_circle`` or ``blue_cross``,
drawn at a random position, size and rotation on a noisy, textured background. A
small CNN on 64x64 crops is well above chance after a couple of epochs (colour is
learnt first, shape next), so a local end-to-end run shows the loss going down.
Shapes are centred in the middle fifth of the image, so every 64x64 crop of a
96x96 image still shows most of the shape.

    python -m pipeline.local.sample_data runs/data/raw --samples 3000

    from pipeline.local.sample_data import generate
    raw = generate("runs/data/raw", samples=3000)    # reused when already there

Output: ``<dir>/<class>/<class>_00042.jpg`` plus a ``.sample_data.json`` stamp
holding the parameters; a call with the same parameters reuses the folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from steps.common.errors import UserError

STAMP = ".sample_data.json"
GENERATOR_VERSION = 1  # bump when the pictures change, so old stamps stop matching
JPEG_QUALITY = 90
SHAPES = ("circle", "square", "triangle", "cross", "diamond", "ring")
# Colour families as (low, high) per RGB channel: far apart in hue, jittered inside.
COLOURS = {
    "red": ((190, 255), (20, 90), (20, 80)),
    "blue": ((20, 80), (50, 120), (190, 255)),
    "green": ((20, 90), (170, 240), (30, 100)),
    "yellow": ((210, 255), (190, 250), (0, 70)),
}


def class_names(classes: int) -> list[str]:
    """``colour_shape`` names: as few colours as possible, so shape matters as much as colour.

    8 classes -> 4 shapes x 2 colours (red, blue).
    """
    limit = len(SHAPES) * len(COLOURS)
    if not 1 <= classes <= limit:
        raise UserError(f"sample data classes={classes} must be within 1..{limit}")
    n_shapes = min(len(SHAPES), math.ceil(classes / 2))
    colours = list(COLOURS)[: math.ceil(classes / n_shapes)]
    return [f"{c}_{s}" for c in colours for s in SHAPES[:n_shapes]][:classes]


def generate(
    output_dir: str | os.PathLike, *, samples: int = 3000, image_size: int = 96, seed: int = 0, classes: int = 8
) -> Path:
    """Write (or reuse) the dataset in ``output_dir`` and return its path."""
    output_dir = Path(output_dir)
    if samples < classes:
        raise UserError(f"sample data samples={samples} must be at least classes={classes}")
    if image_size < 32:
        raise UserError(f"sample data image_size={image_size} must be at least 32 pixels")
    params = {"version": GENERATOR_VERSION, "samples": samples, "image_size": image_size, "seed": seed, "classes": classes}
    if _stamp(output_dir) == params:
        return output_dir
    _check_replaceable(output_dir)
    # Build beside the target and swap in at the end, so an interrupted run never
    # leaves a half dataset that looks complete.
    partial = output_dir.with_name(f".{output_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        _write_images(partial, params)
        (partial / STAMP).write_text(json.dumps(params, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(output_dir, ignore_errors=True)
        os.replace(partial, output_dir)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return output_dir


def _stamp(output_dir: Path) -> dict | None:
    try:
        return json.loads((output_dir / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _check_replaceable(output_dir: Path) -> None:
    """Only an empty folder or one this module wrote may be replaced."""
    if output_dir.exists() and not (output_dir / STAMP).exists() and any(output_dir.iterdir()):
        raise UserError(f"{output_dir} already holds files that are not generated sample data; choose an empty or new folder")


def _write_images(root: Path, params: dict) -> None:
    names = class_names(params["classes"])
    for name in names:
        (root / name).mkdir(parents=True)
    for index in range(params["samples"]):
        label = index % len(names)  # round robin: classes within one image of each other
        # One generator per image: each picture depends only on (seed, index).
        rng = np.random.default_rng([params["seed"], index])
        image = draw_sample(names[label], params["image_size"], rng)
        image.save(root / names[label] / f"{names[label]}_{index // len(names):05d}.jpg", format="JPEG", quality=JPEG_QUALITY)


def draw_sample(class_name: str, size: int, rng: np.random.Generator) -> Image.Image:
    colour, shape = class_name.split("_", 1)
    image = _background(size, rng)
    fill = tuple(int(rng.integers(lo, hi + 1)) for lo, hi in COLOURS[colour])
    centre = rng.uniform(0.4, 0.6, size=2) * size
    radius = rng.uniform(0.2, 0.28) * size
    angle = rng.uniform(0, 2 * math.pi)
    _draw_shape(ImageDraw.Draw(image), shape, centre, radius, angle, fill)
    return image


def _background(size: int, rng: np.random.Generator) -> Image.Image:
    """Grey-ish with a tint, a gradient, blurry blobs and pixel noise: texture, not a cue."""
    base = (rng.uniform(70, 180) + rng.uniform(-20, 20, size=3)).astype(np.float32)
    ramp = np.linspace(-1, 1, size, dtype=np.float32)
    gradient = rng.uniform(-30, 30) * ramp[None, :] + rng.uniform(-30, 30) * ramp[:, None]
    coarse = Image.fromarray(rng.normal(0, 25, size=(size // 8, size // 8)).astype(np.float32))
    blobs = np.asarray(coarse.resize((size, size), Image.Resampling.BILINEAR))  # upsampled: soft blobs
    noise = rng.standard_normal((size, size, 3), dtype=np.float32) * 8
    pixels = base + (gradient + blobs)[:, :, None] + noise
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, centre, radius: float, angle: float, fill) -> None:
    cx, cy = centre
    if shape in ("circle", "ring"):
        box = [cx - radius, cy - radius, cx + radius, cy + radius]
        if shape == "circle":
            draw.ellipse(box, fill=fill)
        else:
            draw.ellipse(box, outline=fill, width=max(2, int(radius * 0.3)))
        return
    if shape == "cross":
        arm = radius * 0.35
        for a in (angle, angle + math.pi / 2):
            draw.polygon(_rotated_rect(cx, cy, radius, arm, a), fill=fill)
        return
    corners = {"square": 4, "triangle": 3, "diamond": 4}[shape]
    stretch = 0.6 if shape == "diamond" else 1.0  # a diamond is a squashed square
    c, s = math.cos(angle), math.sin(angle)
    points = []
    for k in range(corners):
        t = 2 * math.pi * k / corners
        x, y = radius * math.cos(t), radius * stretch * math.sin(t)
        points.append((cx + x * c - y * s, cy + x * s + y * c))
    draw.polygon(points, fill=fill)


def _rotated_rect(cx: float, cy: float, half_length: float, half_width: float, angle: float) -> list:
    c, s = math.cos(angle), math.sin(angle)
    corners = [(-half_length, -half_width), (half_length, -half_width), (half_length, half_width), (-half_length, half_width)]
    return [(cx + x * c - y * s, cy + x * s + y * c) for x, y in corners]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a synthetic class-per-folder JPEG dataset.")
    parser.add_argument("output_dir")
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--classes", type=int, default=8)
    args = parser.parse_args(argv)
    path = generate(args.output_dir, samples=args.samples, image_size=args.image_size, seed=args.seed, classes=args.classes)
    print(f"sample data: {args.samples} images in {path}")


if __name__ == "__main__":
    main()

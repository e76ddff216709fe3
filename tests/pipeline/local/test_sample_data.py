"""Synthetic raw dataset: layout, determinism, reuse, and that the classes carry a visible signal."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from pipeline.local.sample_data import STAMP, class_names, draw_sample, generate
from steps.common.errors import UserError


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.jpg"))


def test_layout_names_and_images(tmp_path):
    root = generate(tmp_path / "raw", samples=40, image_size=48, seed=0, classes=8)
    assert root == tmp_path / "raw"
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert classes == sorted(class_names(8))
    for name in classes:
        files = sorted(p.name for p in (root / name).iterdir())
        assert files == [f"{name}_{i:05d}.jpg" for i in range(5)]
    for path in root.rglob("*.jpg"):
        with Image.open(path) as im:
            assert (im.format, im.mode, im.size) == ("JPEG", "RGB", (48, 48))
            im.load()
    assert json.loads((root / STAMP).read_text())["samples"] == 40


def test_uneven_sample_count_stays_balanced(tmp_path):
    root = generate(tmp_path / "raw", samples=11, image_size=32, classes=3)
    counts = sorted(len(list(p.glob("*.jpg"))) for p in root.iterdir() if p.is_dir())
    assert counts == [3, 4, 4]


def test_deterministic_per_seed(tmp_path):
    a = generate(tmp_path / "a", samples=16, image_size=32, seed=7)
    b = generate(tmp_path / "b", samples=16, image_size=32, seed=7)
    c = generate(tmp_path / "c", samples=16, image_size=32, seed=8)
    assert _files(a) == _files(b) == _files(c)
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in _files(a))
    assert any((a / f).read_bytes() != (c / f).read_bytes() for f in _files(a))


def test_same_parameters_reuse_the_folder(tmp_path):
    root = generate(tmp_path / "raw", samples=16, image_size=32)
    (root / "red_circle" / "red_circle_00000.jpg").write_bytes(b"marker")  # a rebuild would overwrite it
    assert generate(tmp_path / "raw", samples=16, image_size=32) == root
    assert (root / "red_circle" / "red_circle_00000.jpg").read_bytes() == b"marker"
    assert len(_files(root)) == 16


def test_other_parameters_rebuild_the_folder(tmp_path):
    root = generate(tmp_path / "raw", samples=16, image_size=32)
    generate(tmp_path / "raw", samples=24, image_size=32)
    assert len(_files(root)) == 24
    assert json.loads((root / STAMP).read_text())["samples"] == 24
    assert [p.name for p in tmp_path.iterdir()] == ["raw"]  # no partial folder left behind


def test_refuses_a_folder_it_did_not_write(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "precious.txt").write_text("keep me")
    with pytest.raises(UserError, match="not generated sample data"):
        generate(tmp_path / "raw", samples=8)
    assert (tmp_path / "raw" / "precious.txt").read_text() == "keep me"


def test_class_names_mix_shape_and_colour():
    assert class_names(8) == [
        "red_circle",
        "red_square",
        "red_triangle",
        "red_cross",
        "blue_circle",
        "blue_square",
        "blue_triangle",
        "blue_cross",
    ]
    for n in range(1, 25):
        names = class_names(n)
        assert len(set(names)) == n
    for bad in (0, 25):
        with pytest.raises(UserError):
            class_names(bad)


def test_colour_family_is_visible_at_the_centre():
    # A filled circle always covers the image centre (centre jitter < radius),
    # so the centre pixel shows the class colour whatever the background.
    for seed in range(20):
        red = np.asarray(draw_sample("red_circle", 64, np.random.default_rng(seed))).astype(int)[32, 32]
        blue = np.asarray(draw_sample("blue_circle", 64, np.random.default_rng(seed))).astype(int)[32, 32]
        assert red[0] > red[2] + 60 and blue[2] > blue[0] + 60


def test_shapes_differ_for_the_same_random_draws():
    images = {name: np.asarray(draw_sample(name, 64, np.random.default_rng(0))) for name in class_names(8)}
    reds = [images[n] for n in images if n.startswith("red_")]
    assert all(not np.array_equal(x, y) for i, x in enumerate(reds) for y in reds[i + 1 :])

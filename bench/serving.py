"""Served predictions per second and the latency of ``POST /invocations``, next to the same model called directly.

A model package as training leaves it (the workload's network, its weights, metrics.json and the serving code every
host writes) is served as its container serves it (`pipeline.emulator.serving`: for PyTorch the package's own server,
the inference toolkit's Transformer calling the handler; for TensorFlow TF Serving's stand-in and the container's
Python service around the handlers), and sent ``--requests`` images one after another. The anchor, in the same run:
the model called directly on the same images, in this process (PyTorch: the handler's decode, normalisation and
forward pass; TensorFlow: the SavedModel's signature, which decodes in its graph, and the handler's ranking). Both
on one CPU (``--cpu``: this process, the container and their threads pinned to it; one framework thread), so the
ratio is what the HTTP side, the toolkit and the encoding cost per request::

    .venv/bin/python bench/serving.py                       # small_cnn, 300 requests
    .venv/bin/python bench/serving.py --model resnet50 --requests 50
    .venv/bin/python bench/serving.py --framework tensorflow   # TF Serving's stand-in and the container's service

Prints one JSON document: per side, requests per second and the p50/p99 latency in milliseconds; the ratio of the
served to the direct rate.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CLASSES = ["circle", "cross", "square", "triangle"]
WORKLOAD = "steps.train.workloads.shapes"
IMAGE = "hetero-pytorch-serve:2.13.0-cpu"  # the project's serving image: the container gets exactly its packages
TF_IMAGE = "tensorflow-inference:2.20-cpu-py312-amzn2023-sagemaker-v1"  # TF Serving's (its Python service's packages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=("pytorch", "tensorflow"), default="pytorch")
    parser.add_argument("--model", choices=("small_cnn", "resnet50"), default="small_cnn")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=10, help="requests before the timed ones (each side)")
    parser.add_argument("--cpu", type=int, default=min(os.sched_getaffinity(0)), help="the CPU both sides run on")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})  # the container, started below, inherits it
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = "1"

    import numpy as np
    from PIL import Image

    from pipeline.emulator.serving import serve_model

    rng = np.random.default_rng(0)
    images = []
    for _ in range(32):
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(out, format="JPEG", quality=90)
        images.append(out.getvalue())
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as work:
        if args.framework == "tensorflow":
            tar, direct, image = _tensorflow(Path(work), {"model": args.model})
        else:
            tar, direct, image = _pytorch(Path(work), {"model": args.model})
        anchor = _timed(direct, images, args.requests, args.warmup)
        container = {"Image": f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{image}", "ModelDataUrl": str(tar)}
        with serve_model(container, work_dir=Path(work) / "container", port=0, echo=lambda line: None) as served:

            def over_http(body: bytes) -> None:
                request = urllib.request.Request(
                    f"{served.url}/invocations", data=body, headers={"Content-Type": "image/jpeg", "Accept": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - the bench's loopback container
                    answer.read()

            measured = _timed(over_http, images, args.requests, args.warmup)
    print(
        json.dumps(
            {
                "bench": "serving",
                "framework": args.framework,
                "model": args.model,
                "cpu": args.cpu,
                "requests": args.requests,
                "served": measured,
                "direct": anchor,
                "served_over_direct": round(measured["per_second"] / anchor["per_second"], 3),
            },
            indent=2,
        )
    )


def _pytorch(work: Path, options: dict) -> tuple[Path, Callable[[bytes], object], str]:
    """The PyTorch package, the handler called directly on its weights, and the image that serves it."""
    import torch

    from steps.serve import pytorch as handler
    from steps.train.workload import load_workload

    torch.set_num_threads(1)
    folder = work / "model"
    folder.mkdir()
    torch.save(load_workload(WORKLOAD, options).build_model(len(CLASSES)).state_dict(), folder / "model.pt")
    tar = _package(folder, options, serves_as="pytorch")
    served_model = handler.model_fn(str(_unpacked(tar, work / "direct")))

    def direct(body: bytes) -> None:
        handler.output_fn(handler.predict_fn(handler.input_fn(body, "image/jpeg"), served_model), "application/json")

    return tar, direct, IMAGE


def _tensorflow(work: Path, options: dict) -> tuple[Path, Callable[[bytes], object], str]:
    """The TensorFlow package, its SavedModel's signature called directly (the image decoded in its graph) with the
    scores ranked as the handler ranks them, and the TensorFlow inference image."""
    import keras
    import tensorflow as tf

    from steps.serve.answer import ranked
    from steps.train.frameworks.tensorflow.serving import INPUT, OUTPUT, SIGNATURE, VERSION, export_serving_model
    from steps.train.workload import load_workload

    workload = load_workload(WORKLOAD, options)
    folder = work / "model"
    keras.utils.set_random_seed(0)
    export_serving_model(workload.build_keras_model(len(CLASSES)), workload, folder)
    tar = _package(folder, options, serves_as="tensorflow")
    signature = tf.saved_model.load(str(folder / VERSION)).signatures[SIGNATURE]

    def direct(body: bytes) -> None:
        ranked(zip(CLASSES, signature(**{INPUT: tf.constant([body])})[OUTPUT].numpy()[0].tolist(), strict=True))

    return tar, direct, TF_IMAGE


def _package(folder: Path, options: dict, *, serves_as: str) -> Path:
    """model.tar.gz as SageMaker packs a training host's model folder (untrained weights: the rate is the same)."""
    from pipeline.emulator.results import pack_folder
    from steps.contract import METRICS_FILE
    from steps.train.core.model_package import write_serving_code

    config = {"workload": WORKLOAD, "workload_options": options}
    (folder / METRICS_FILE).write_text(json.dumps({"classes": CLASSES, "config": config}))
    write_serving_code(folder, WORKLOAD, serves_as=serves_as)
    tar_path = folder.parent / "model.tar.gz"
    pack_folder(folder, tar_path)
    return tar_path


def _unpacked(tar_path: Path, into: Path) -> Path:
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    return into


def _timed(call, images: list[bytes], requests: int, warmup: int) -> dict:
    for i in range(warmup):
        call(images[i % len(images)])
    latencies = []
    started = time.perf_counter()
    for i in range(requests):
        t = time.perf_counter()
        call(images[i % len(images)])
        latencies.append(time.perf_counter() - t)
    wall = time.perf_counter() - started
    ordered = sorted(latencies)

    def percentile(p: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(p * len(ordered)))], 2)

    return {"per_second": round(requests / wall, 1), "p50_ms": percentile(0.50), "p99_ms": percentile(0.99)}


if __name__ == "__main__":
    main()

"""Does the PyTorch trainer's CUDA path keep a GPU fed from the data plane? Prints one JSON object.

    python bench/gpu_trainer.py [--model resnet50] [--batch 256] [--batches 60] [--epochs 2] [--precision fp32,bf16]
                                [--compile off,on] [--streams 1]

Needs a CUDA GPU (``--device cpu --size 32 --model small_cnn`` runs it small on a CPU, to check it works
before a GPU machine's time is spent on it: the figures mean nothing there). A sender process runs the real
data service (`serve()`) over pre-built ``--batch`` x 224 x 224 x 3 uint8 batches
over ``--streams`` connections (the StreamsPerFlow parameter) (producing costs nothing);
this process is the trainer: the real `DataServiceClient` with pinned,
pooled buffers, and the real training loop (`steps.train.frameworks.pytorch.trainer.train_epochs`:
non-blocking copies, normalisation on the GPU, event-guarded buffer reuse).
The anchor, in the same run, is the same model stepping on one batch that is
already on the GPU: ``fed_ratio`` = anchor step time / data-plane step time
(1.0: the data plane costs the GPU nothing). Both run once per ``--precision`` (the Precision parameter's values:
the train step's autocast and loss scaling) and ``--compile`` (the Compile parameter's: the step's forward eager or
through torch.compile, whose compilation falls in the warm-up steps), each one entry of ``runs`` in the output.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.dataplane import emit  # noqa: E402
from steps.contract import COMPILES, PRECISIONS  # noqa: E402
from steps.train.core.config import TrainConfig  # noqa: E402
from steps.train.core.precision import precision_document  # noqa: E402
from steps.train.frameworks.pytorch.data import DataServiceClient  # noqa: E402
from steps.train.frameworks.pytorch.data_host import serve  # noqa: E402
from steps.train.frameworks.pytorch.dataset import Batch  # noqa: E402
from steps.train.frameworks.pytorch.step import TrainStep, resolve_precision, to_device  # noqa: E402
from steps.train.frameworks.pytorch.trainer import train_epochs  # noqa: E402
from steps.train.workloads.shapes import Shapes  # noqa: E402

SECRET = b"g" * 32
CLASSES = 10


def _sender(server: socket.socket, cfg: TrainConfig, batch: int, batches: int, size: int) -> None:
    rng = np.random.default_rng(0)
    pixels = torch.from_numpy(rng.integers(0, 256, (batch, size, size, 3), dtype=np.uint8))
    labels = torch.from_numpy(rng.integers(0, CLASSES, batch).astype(np.int64))

    def epoch_batches(epoch: int):
        for b in range(batches):
            yield Batch(pixels, labels, torch.arange(b * batch, (b + 1) * batch), epoch=epoch)

    serve(
        cfg,
        server,
        me="127.0.0.1",
        trainer_hosts=("trainer",),
        secret=SECRET,
        samples_per_epoch=batch * batches,
        epoch_batches=epoch_batches,
        streams=cfg.streams_per_flow,
    )


def _anchor(workload, model, batch: int, steps: int, size: int, device: torch.device, precision: str, compile_: str) -> float:
    x = torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8, device=device)
    y = torch.randint(0, CLASSES, (batch,), device=device)
    step = TrainStep(workload, model, workload.optimizer(model.parameters(), 1e-3), device, precision, compile_)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step(x, y)  # the batch is on the device already: the copies are no-ops
        times.append(time.perf_counter() - start)
    return float(np.median(times[min(5, steps - 1) :]))


def _values(allowed: tuple[str, ...]):
    def parse(value: str) -> list[str]:
        chosen = [v.strip() for v in value.split(",") if v.strip()]
        if not chosen or set(chosen) - set(allowed):
            raise argparse.ArgumentTypeError(f"{value!r}: a comma-separated list of {', '.join(allowed)}")
        return chosen

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50", choices=("resnet50", "small_cnn"))
    parser.add_argument("--batch", type=int, default=64, help="samples per batch (the BatchSize parameter)")
    parser.add_argument("--batches", type=int, default=60, help="batches per epoch")
    parser.add_argument("--streams", type=int, default=1, help="connections from the data host to the trainer")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--size", type=int, default=224, help="image side")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--anchor-steps", type=int, default=30)
    parser.add_argument(
        "--precision",
        type=_values(PRECISIONS),
        default=["fp32", "bf16"],
        help="comma-separated Precision values, each run in turn",
    )
    parser.add_argument(
        "--compile", type=_values(COMPILES), default=list(COMPILES), help="comma-separated Compile values, each run in turn"
    )
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU (--device cpu runs it small, to check it works)")
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    workload = Shapes({"model": args.model})
    runs = [_run(args, workload, device, p, c) for p in args.precision for c in args.compile]
    emit(
        {
            "bench": "gpu_trainer",
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "torch": torch.__version__,
            "model": args.model,
            "batch": [args.batch, args.size, args.size, 3],
            "streams": args.streams,
            "runs": runs,
        },
        args.out,
    )


def _run(args, workload, device: torch.device, precision: str, compile_: str) -> dict:
    """The data-plane run and then the anchor, in ``precision`` and ``compile_``, on a fresh model."""
    torch.manual_seed(0)
    server = socket.create_server(("127.0.0.1", 0))
    cfg = TrainConfig(
        epochs=args.epochs,
        data_port=server.getsockname()[1],
        warmup_steps=min(5, args.batches - 1),
        log_every=1000,
        precision=precision,
        compile=compile_,
        batch_size=args.batch,
        streams_per_flow=args.streams,
    )
    sender = mp.get_context("fork").Process(target=_sender, args=(server, cfg, args.batch, args.batches, args.size), daemon=True)
    sender.start()
    client = None
    try:
        client = DataServiceClient(
            cfg, me="trainer", data_hosts=("127.0.0.1",), secret=SECRET, pinned=device.type == "cuda"
        ).connect()
        model = to_device(workload.build_model(CLASSES), device)
        stats = train_epochs(cfg, workload, model, client, device).stats
        client.close("completed")
        summary = stats.summary()
        used = resolve_precision(precision, device)
        anchor = _anchor(workload, model, args.batch, args.anchor_steps, args.size, device, used, compile_)
    finally:
        if client is not None:
            client.close("failed", "bench ended")
        sender.join(timeout=30)
        if sender.is_alive():
            sender.kill()
        server.close()
    step = summary["step_time_s"]["p50"]
    return {
        "precision": precision_document(precision, resolve_precision(precision, device)),
        "compile": compile_,
        "steps": summary["steps"],
        "samples": summary["seen"],
        "data_plane_step_ms_p50": round(step * 1e3, 2),
        "anchor_step_ms_p50": round(anchor * 1e3, 2),
        "fed_ratio": round(anchor / step, 3),
        "data_wait_share": round(summary["data_wait_share"], 4),
        "samples_per_s": round(args.batch / step, 1),
        "anchor_samples_per_s": round(args.batch / anchor, 1),
    }


if __name__ == "__main__":
    main()

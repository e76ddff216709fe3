"""How close is the whole data plane to a plain TCP socket? Prints one JSON object.

    .venv/bin/python bench/transport.py [--batches 200] [--repeats 3] [--quick]
    .venv/bin/python bench/transport.py --streams 2 [--quick]   # only the data plane: 1 vs 2 streams per flow

Every batch is 64 x 224 x 224 x 3 uint8 pixels plus int64 labels and ids
(9.6 MB), over loopback, from sender processes (fork; spawn for TensorFlow) to
this process, which is the receiver and the only one whose CPU time is
reported. The pixels are uniform random bytes (seeded), so they do not
compress: the worst case for a compressing transport (decoded photos
compress a little). Each number is
the median of ``--repeats`` runs, with every sample next to it; the
measurements are interleaved (raw, ours, tf none, tf auto, raw, ours, ...),
so one run's ratios compare like with like even on a noisy machine.

``raw_tcp``            the anchor: one sender process writes N fixed-size
                       messages to a plain TCP socket; the receiver
                       ``recv_into``s them into one preallocated buffer.
``hetero_data_plane``  the real path: the sender process runs
                       `steps.train.frameworks.pytorch.data_host.serve` over pre-built
                       `Batch` objects (the same arrays every time, so
                       producing costs nothing); the receiver is the real
                       `DataServiceClient` (handshake, frames, receiver
                       thread, merge queue, prefetch, buffer pool) ending in
                       torch tensors; the consumer reads one element of
                       each batch and calls ``release()``.
                       ``ratio_to_tcp`` = its GB/s / raw_tcp GB/s, per repeat.
``tf_data_service``    the off-the-shelf alternative: a real
                       ``DispatchServer`` in this process, as on a trainer
                       host, and one ``WorkerServer`` in a spawned sender
                       process, as on a data host (TensorFlow does not
                       survive fork). The dataset is one pre-built batch,
                       ``from_tensors(batch).repeat(warm-up + N)``, so
                       producing costs nothing; this process iterates it
                       through ``distribute(ShardingPolicy.OFF)`` and calls
                       ``.numpy()`` on each batch's pixels, which is what a
                       trainer hands the model. ``none``: compression=None.
                       ``auto``: the default, compression="AUTO" (snappy here),
                       which pays CPU on both ends and gains nothing on
                       this payload. ``ratio_to_tcp`` as above, against the
                       raw run of the same repeat. Skipped when TensorFlow
                       is not installed (it is not a dependency).
``ray_data``           framework=ray's data plane: a two-node Ray cluster on loopback
                       (`steps.train.frameworks.ray.node`: ``ray start``, token auth), the
                       sender node (127.0.0.5) running Ray Data map tasks that
                       each return one pre-built batch (the same arrays every
                       time: producing costs only Ray's serialization), and this
                       process, a driver on the head (127.0.0.4), iterating
                       ``iter_batches`` and touching each batch's pixels, as
                       a trainer would. ``ratio_to_tcp`` against the raw run
                       of the same repeat. Skipped with --no-ray.
``multi_host``         two data hosts (data-0 on 127.0.0.2, data-1 on
                       127.0.0.3, same port, found through a
                       HETERO_HOSTS_FILE) and one trainer.
                       ``alone``: each sender streams to a drain sink (a
                       handshake, then frames read into one reused buffer:
                       the cheapest possible receiver), one at a time.
                       ``merged``: both stream at once to the real client.
                       ``merged_over_sum`` = merged / (alone_0 + alone_1).
                       ``paced``: each sender is held to a fixed production
                       rate (``--paced-fraction`` of the single-host
                       throughput measured above, per sender), as a decoding
                       data host would be; this is the spec's question, can
                       the trainer take in what both hosts produce.
                       ``saturated``: senders unthrottled. On a 2-core box
                       both senders and the receiver then compete for the
                       same two cores, so 'alone' (two cores for one pair)
                       cannot add up; reported for information only.

``streams``            with ``--streams N``, nothing else: the real path above
                       with one connection, then with N connections (streams
                       per flow), interleaved per repeat; ``ratio_to_one_stream``
                       per repeat. Loopback has no per-flow cap (EC2 holds
                       one flow to 5 Gbps), so expect about 1 here.

GB/s is 1e9 bytes/s of batch payload (pixels + labels + ids) over the timed
window, which starts once a warm-up epoch has ended and stops when the last
batch was consumed. CPU ms/batch is ``time.process_time()`` of this whole
process (every thread) over the same window.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import platform
import signal
import socket
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager, suppress
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from steps.shard.job_secret import new_secret, write_job_secret  # noqa: E402
from steps.train.core.config import TrainConfig  # noqa: E402
from steps.train.dataplane.auth import client_handshake, load_job_secret  # noqa: E402
from steps.train.dataplane.wire import FrameReader, Kind, send_frame  # noqa: E402
from steps.train.frameworks.pytorch.data import DataServiceClient  # noqa: E402
from steps.train.frameworks.pytorch.data_host import serve  # noqa: E402
from steps.train.frameworks.pytorch.dataset import Batch  # noqa: E402

BATCH, H, W, C = 64, 224, 224, 3
PIXEL_BYTES = BATCH * H * W * C
BATCH_BYTES = PIXEL_BYTES + 2 * BATCH * 8  # + int64 labels and ids
TRAINER = "trainer-0"
DATA_HOSTS = {"data-0": "127.0.0.2", "data-1": "127.0.0.3"}
RAY_HOSTS = {"ray-head": "127.0.0.4", "ray-sender": "127.0.0.5"}
CTX = mp.get_context("fork")  # children share the parent's pre-built arrays, copy-on-write
TF_COMPRESSIONS = {"none": None, "auto": "AUTO"}
SPAWN = mp.get_context("spawn")  # for TensorFlow children: TF does not survive fork


# -- sender processes ------------------------------------------------------------


def _raw_sender(port: int, batches: int, payload: np.ndarray, results) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.recv(1)  # go
        view = memoryview(payload)
        c0 = time.process_time()
        for _ in range(batches):
            sock.sendall(view)
        results.send(time.process_time() - c0)
        sock.recv(1)  # the receiver has everything


def _serve_sender(
    server: socket.socket,
    me: str,
    cfg: TrainConfig,
    secret: bytes,
    warmup: int,
    batches: int,
    rate: float,
    pixels: np.ndarray,
    streams: int,
    results,
) -> None:
    batch = Batch(torch.from_numpy(pixels), torch.zeros(BATCH, dtype=torch.int64), torch.arange(BATCH, dtype=torch.int64))
    cpu = {}

    def epoch_batches(epoch: int):
        if epoch == 0:
            yield from (batch for _ in range(warmup))
            return
        start, cpu["start"] = time.perf_counter(), time.process_time()
        for i in range(batches):
            if rate:  # a data host that produces `rate` batches/s, like one bound by its decode CPU
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            yield batch
        cpu["end"] = time.process_time()

    serve(
        cfg,
        server,
        me=me,
        trainer_hosts=(TRAINER,),
        secret=secret,
        samples_per_epoch=BATCH * batches,
        epoch_batches=epoch_batches,
        streams=streams,
    )
    results.send(cpu["end"] - cpu["start"])


def _tf_worker(dispatcher: str, conn) -> None:
    """A tf.data.service worker, as on a data host: the receiver's dispatcher hands it the dataset to run."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so the worker is stopped
    import tensorflow as tf

    service = tf.data.experimental.service
    worker = service.WorkerServer(service.WorkerConfig(dispatcher_address=dispatcher, worker_address="127.0.0.1:%port%", port=0))
    try:
        conn.send("ready")
        while conn.recv() == "cpu":  # the receiver brackets its timed window with these
            conn.send(time.process_time())
    except EOFError:
        pass
    finally:
        worker.stop()


@contextmanager
def _children(*specs, ctx=CTX, duplex: bool = False):
    """Start one process per (target, args); always reap them, also on failure."""
    procs, pipes = [], []
    try:
        for target, args in specs:
            recv_end, send_end = ctx.Pipe(duplex=duplex)
            proc = ctx.Process(target=target, args=(*args, send_end), daemon=True)
            proc.start()
            send_end.close()
            procs.append(proc)
            pipes.append(recv_end)
        yield pipes
        for proc in procs:
            proc.join(timeout=60)
            if proc.exitcode != 0:
                raise RuntimeError(f"sender {proc.name} exited with {proc.exitcode}")
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for pipe in pipes:
            pipe.close()


def _listeners(names: list[str]) -> list[socket.socket]:
    """One listening socket per data host name, all on the same port (data_port is one number per job)."""
    for _ in range(50):
        socks = []
        try:
            for name in names:
                port = socks[0].getsockname()[1] if socks else 0
                socks.append(socket.create_server((DATA_HOSTS[name], port), backlog=8))
            return socks
        except OSError:
            for s in socks:
                s.close()
    raise RuntimeError("could not find one free port on every loopback address")


# -- receivers -----------------------------------------------------------------


def _window(batches: int, seconds: float, cpu: float) -> dict:
    return {"gbps": batches * BATCH_BYTES / seconds / 1e9, "cpu_ms_per_batch": 1e3 * cpu / batches, "batches": batches}


def measure_raw_tcp(batches: int, payload: np.ndarray) -> dict:
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        _children((_raw_sender, (server.getsockname()[1], batches, payload))) as pipes,
    ):
        server.settimeout(60)
        sock, _ = server.accept()
        with sock:
            buffer = memoryview(bytearray(BATCH_BYTES))
            sock.sendall(b"g")
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(batches):
                got = 0
                while got < BATCH_BYTES:
                    n = sock.recv_into(buffer[got:], BATCH_BYTES - got)
                    if n == 0:
                        raise RuntimeError("raw sender closed early")
                    got += n
                _ = buffer[-1]
            t1, c1 = time.perf_counter(), time.process_time()
            sock.sendall(b"d")
            sender_cpu = pipes[0].recv()
    return {**_window(batches, t1 - t0, c1 - c0), "sender_cpu_ms_per_batch": 1e3 * sender_cpu / batches}


def _config(port: int) -> TrainConfig:
    return TrainConfig(epochs=2, data_port=port, heartbeat_s=0.5, silence_timeout_s=60.0, connect_timeout_s=60.0)


def measure_hetero(names: list[str], batches: int, warmup: int, pixels: np.ndarray, rate: float = 0.0, streams: int = 1) -> dict:
    """The real client against one real `serve()` process per name (``streams`` connections each); ``batches`` per
    sender."""
    secret = new_secret().encode()
    servers = _listeners(names)
    try:
        cfg = _config(servers[0].getsockname()[1])
        specs = [
            (_serve_sender, (s, name, cfg, secret, warmup, batches, rate, pixels, streams)) for s, name in zip(servers, names)
        ]
        with _children(*specs) as pipes:
            for s in servers:
                s.close()  # the senders own them now
            client = DataServiceClient(cfg, me=TRAINER, data_hosts=tuple(names), secret=secret).connect()
            try:
                for batch in client.batches(0):
                    batch.release()
                t0, c0 = time.perf_counter(), time.process_time()
                count = 0
                for batch in client.batches(1):
                    _ = int(batch.pixels[-1, -1, -1, -1])  # touch it, as a step would
                    batch.release()
                    count += 1
                t1, c1 = time.perf_counter(), time.process_time()
            finally:
                client.close()
            sender_cpu = [p.recv() for p in pipes]
    finally:
        for s in servers:
            s.close()
    assert count == batches * len(names), (count, batches, names)
    return {**_window(count, t1 - t0, c1 - c0), "sender_cpu_ms_per_batch": [1e3 * c / batches for c in sender_cpu]}


def measure_drain(name: str, batches: int, warmup: int, pixels: np.ndarray, rate: float = 0.0) -> dict:
    """One real `serve()` process streaming to the cheapest receiver there is: what it produces alone."""
    secret = new_secret().encode()
    (server,) = _listeners([name])
    try:
        cfg = _config(server.getsockname()[1])
        with _children((_serve_sender, (server, name, cfg, secret, warmup, batches, rate, pixels, 1))) as pipes:
            server.close()
            scratch = {"pixels": np.empty((BATCH, H, W, C), np.uint8)}

            def allocate(segment):
                array = scratch.get(segment.name)
                return array if array is not None and array.shape == segment.shape else np.empty(segment.shape, segment.dtype)

            with socket.create_connection((DATA_HOSTS[name], cfg.data_port), timeout=60) as sock:
                client_handshake(sock, secret, host=TRAINER)
                send_frame(sock, Kind.RESUME, {"epoch": 0}, [("consumed", np.empty(0, np.int64))])  # a fresh start
                reader, count, t0 = FrameReader(sock, allocator=allocate), 0, None
                while True:
                    kind, meta, _ = reader.read()
                    if kind is Kind.END and meta["epoch"] == 0:
                        t0, c0 = time.perf_counter(), time.process_time()
                    elif kind is Kind.END:
                        t1, c1 = time.perf_counter(), time.process_time()
                        break
                    elif kind is Kind.BATCH and t0 is not None:
                        count += 1
                send_frame(sock, Kind.STOP, {"status": "completed"})
                with suppress(OSError):
                    while sock.recv(1 << 16):  # until the service hangs up: it has stopped
                        pass
            pipes[0].recv()
    finally:
        server.close()
    assert count == batches, (count, batches)
    return _window(count, t1 - t0, c1 - c0)


def measure_tf_data_service(batches: int, warmup: int, pixels: np.ndarray, compression: str | None) -> dict:
    """A real dispatcher here (as on a trainer host) and one real worker in a spawned process (TF does not survive fork)."""
    import tensorflow as tf

    service = tf.data.experimental.service
    batch = {"pixels": pixels, "labels": np.zeros(BATCH, np.int64), "ids": np.arange(BATCH, dtype=np.int64)}
    dataset = tf.data.Dataset.from_tensors(batch).repeat(warmup + batches)  # the same arrays every time
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    try:
        with _children((_tf_worker, (dispatcher.target.split("://", 1)[1],)), ctx=SPAWN, duplex=True) as (conn,):
            if not conn.poll(120):
                raise RuntimeError("tf.data.service worker did not start within 120 s")
            conn.recv()
            elements = iter(
                dataset.apply(
                    service.distribute(
                        processing_mode=service.ShardingPolicy.OFF, service=dispatcher.target, compression=compression
                    )
                )
            )
            for _ in range(warmup):
                next(elements)
            conn.send("cpu")
            w0 = conn.recv()
            t0, c0 = time.perf_counter(), time.process_time()
            count = 0
            for element in elements:
                _ = element["pixels"].numpy()[-1, -1, -1, -1]  # touch it, as a step would
                count += 1
            t1, c1 = time.perf_counter(), time.process_time()
            conn.send("cpu")
            w1 = conn.recv()
            del elements
            conn.send("stop")
    finally:
        dispatcher.stop()
    assert count == batches, (count, batches)
    return {**_window(count, t1 - t0, c1 - c0), "sender_cpu_ms_per_batch": 1e3 * (w1 - w0) / batches}


def measure_ray_data(batches: int, warmup: int) -> dict:
    """Batches made by Ray Data tasks on one node, iterated by a driver on the other (`steps.train.frameworks.ray.node` starts both)."""
    from steps.train.core.cluster import Cluster
    from steps.train.frameworks.ray.node import RayNode

    cfg = _config(0)  # ray_port 0: the head picks a free port
    secret_dir = tempfile.mkdtemp(prefix="hetero-bench-secret-")
    load_job_secret(write_job_secret(secret_dir).parent)  # the Ray token derives from it; the file goes once read
    os.rmdir(secret_dir)
    nodes = []
    try:
        for name, role in (("ray-head", "trainer"), ("ray-sender", "data")):
            cluster = Cluster(
                current_host=name,
                current_group=role,
                role=role,
                heterogeneous=True,
                groups=(),
                data_hosts=("ray-sender",),
                trainer_hosts=("ray-head",),
                channel_dirs={},
                channel_distribution={},
                model_dir=Path("."),
                output_dir=Path("."),
                output_data_dir=Path("."),
                network_interface="lo",
                checkpoint_dir=Path("."),
            )
            head = nodes[0].address if nodes else ""
            nodes.append(RayNode(cfg, cluster).start(head, log=sys.stderr))  # stdout is the JSON
        nodes[0].connect()  # sets the token's environment, then imports ray: Ray reads it once, at import
        import ray

        deadline = time.monotonic() + 120
        while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        ray.data.DataContext.get_current().enable_progress_bars = False
        made = {}

        def one_batch(_: dict) -> dict:  # a closure: Ray ships it by value (this script is no module on the nodes)
            if "pixels" not in made:  # once per worker process: then the same arrays every time
                made["pixels"] = np.random.default_rng(0).integers(0, 256, size=(1, BATCH, H, W, C), dtype=np.uint8)
            return {
                "pixels": made["pixels"],
                "labels": np.zeros((1, BATCH), np.int64),
                "ids": np.arange(BATCH, dtype=np.int64)[None],
            }

        dataset = ray.data.range(warmup + batches, override_num_blocks=warmup + batches).map_batches(
            one_batch, batch_size=1, resources={"hetero_data": 0.001}, num_cpus=1
        )
        elements = iter(dataset.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=4))
        for _ in range(warmup):
            next(elements)
        t0, c0 = time.perf_counter(), time.process_time()
        count = 0
        for element in elements:
            _ = element["pixels"][-1, -1, -1, -1]  # touch it, as a step would
            count += 1
        t1, c1 = time.perf_counter(), time.process_time()
    finally:
        if "ray" in sys.modules and sys.modules["ray"].is_initialized():
            sys.modules["ray"].shutdown()
        for node in nodes:
            node.stop()
    assert count == batches, (count, batches)
    return _window(count, t1 - t0, c1 - c0)


# -- the run ---------------------------------------------------------------------


def _spread(values: list[float]) -> dict:
    return {"median": _median(values), "samples": [round(v, 3) for v in values]}


def _summary(samples: list[dict], *keys: str) -> dict:
    return {key: _spread([s[key] for s in samples]) for key in keys}


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=200, help="timed batches per measurement and sender")
    parser.add_argument("--warmup", type=int, default=10, help="untimed batches first (buffer pool, TCP windows)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--paced-fraction",
        type=float,
        default=0.3,
        help="paced multi-host senders each produce this fraction of the single-host batches/s",
    )
    parser.add_argument("--quick", action="store_true", help="a short run: 30 batches, 4 warm-up")
    parser.add_argument("--no-ray", action="store_true", help="leave out the Ray Data row")
    parser.add_argument(
        "--streams", type=int, default=0, help="only the data plane, over 1 and then this many connections (streams per flow)"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so every sender process is reaped
    if args.quick:
        args.batches, args.warmup = 30, 4

    payload = np.random.default_rng(0).integers(0, 256, size=BATCH_BYTES, dtype=np.uint8)
    pixels = payload[:PIXEL_BYTES].reshape(BATCH, H, W, C)
    with tempfile.TemporaryDirectory() as tmp:
        hosts_file = Path(tmp) / "hosts"
        hosts_file.write_text("".join(f"{address} {name}\n" for name, address in {**DATA_HOSTS, **RAY_HOSTS}.items()))
        os.environ["HETERO_HOSTS_FILE"] = str(hosts_file)  # this process only: how the client finds data-0/1
        if args.streams:
            _print({**_header(args), "streams": compare_streams(args, pixels)})
            return

        with_tf = importlib.util.find_spec("tensorflow") is not None
        if with_tf:
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TF's INFO lines (server configs) would bury stderr
        raw, ours, tf_runs, ray_runs = [], [], {label: [] for label in TF_COMPRESSIONS}, []
        for _ in range(args.repeats):
            raw.append(measure_raw_tcp(args.batches, payload))
            ours.append(measure_hetero(["data-0"], args.batches, args.warmup, pixels))
            for label, compression in TF_COMPRESSIONS.items() if with_tf else ():
                tf_runs[label].append(measure_tf_data_service(args.batches, args.warmup, pixels, compression))
            if not args.no_ray:  # in a spawned process: a driver leaves Ray's threads behind, and later forks would inherit them
                with SPAWN.Pool(1) as pool:
                    ray_runs.append(pool.apply(measure_ray_data, (args.batches, args.warmup)))
        ratios = [o["gbps"] / r["gbps"] for r, o in zip(raw, ours)]
        tf_data_service = (
            {"skipped": "tensorflow is not installed"}
            if not with_tf
            else {
                label: {
                    **_summary(runs, "gbps", "cpu_ms_per_batch", "sender_cpu_ms_per_batch"),
                    "ratio_to_tcp": _spread([t["gbps"] / r["gbps"] for r, t in zip(raw, runs)]),
                }
                for label, runs in tf_runs.items()
            }
        )
        single_rate = statistics.median(o["gbps"] for o in ours) * 1e9 / BATCH_BYTES  # batches/s
        paced_rate = args.paced_fraction * single_rate

        multi = {}
        for label, rate in (("paced", paced_rate), ("saturated", 0.0)):
            runs = []
            for _ in range(args.repeats):
                alone = [measure_drain(name, args.batches, args.warmup, pixels, rate) for name in DATA_HOSTS]
                merged = measure_hetero(list(DATA_HOSTS), args.batches, args.warmup, pixels, rate)
                runs.append(
                    {
                        "alone_0_gbps": alone[0]["gbps"],
                        "alone_1_gbps": alone[1]["gbps"],
                        "merged_gbps": merged["gbps"],
                        "merged_cpu_ms_per_batch": merged["cpu_ms_per_batch"],
                        "merged_over_sum": merged["gbps"] / (alone[0]["gbps"] + alone[1]["gbps"]),
                    }
                )
            multi[label] = {
                **(
                    {"rate_per_sender_batches_per_s": round(rate, 1), "rate_per_sender_gbps": round(rate * BATCH_BYTES / 1e9, 3)}
                    if rate
                    else {}
                ),
                **_summary(runs, "alone_0_gbps", "alone_1_gbps", "merged_gbps", "merged_cpu_ms_per_batch", "merged_over_sum"),
            }
        multi["merged_over_sum"] = multi["paced"]["merged_over_sum"]["median"]
        multi["merged_over_sum_target"] = 0.9

    _print(
        {
            **_header(args),
            "raw_tcp": {**_summary(raw, "gbps", "cpu_ms_per_batch", "sender_cpu_ms_per_batch")},
            "hetero_data_plane": {
                **_summary(ours, "gbps", "cpu_ms_per_batch"),
                "sender_cpu_ms_per_batch": {"median": _median([o["sender_cpu_ms_per_batch"][0] for o in ours])},
                "ratio_to_tcp": _spread(ratios),
            },
            "tf_data_service": tf_data_service,
            "ray_data": {"skipped": "--no-ray"}
            if not ray_runs
            else {
                **_summary(ray_runs, "gbps", "cpu_ms_per_batch"),
                "ratio_to_tcp": _spread([t["gbps"] / r["gbps"] for r, t in zip(raw, ray_runs)]),
            },
            "multi_host": multi,
            "notes": [
                "GB/s = 1e9 bytes of pixels+labels+ids per second over the timed window; cpu_ms_per_batch = process_time of the "
                "receiving process (all its threads) over that window / batches; ratio_to_tcp is per repeat, raw and ours interleaved.",
                "tf_data_service: dispatcher in the receiving process, one worker in a spawned process, dataset "
                "from_tensors(batch).repeat(); the pixels are random bytes, so compression=AUTO (snappy) only adds CPU on both ends. "
                "Its ratio_to_tcp is against the raw_tcp run of the same repeat.",
                "multi_host alone = one serve() process streaming to a drain sink (handshake, then every frame read into one reused "
                "buffer, nothing else); merged = both serve() processes streaming at once to the real DataServiceClient.",
                "paced: each sender is held to rate_per_sender (paced-fraction x the single-host rate above), like a data host bound by "
                "its decode CPU; merged_over_sum there answers the spec's question (>= 0.9): does the trainer take in all both produce.",
                "saturated: unthrottled senders. Alone, one sender and the sink have the 2 cores to themselves; merged, two senders "
                "and the receiver share them, and loopback TCP costs CPU on both ends, so the sum is unreachable on this box and "
                "merged_over_sum there is a CPU-sharing figure, not a merge loss. Separate hosts would each bring their own CPU.",
            ],
        }
    )


def _header(args) -> dict:
    return {
        "bench": "transport",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "cpus": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
            "torch": torch.__version__,
            **({"tensorflow": sys.modules["tensorflow"].__version__} if "tensorflow" in sys.modules else {}),
            "load_avg_1m": round(os.getloadavg()[0], 2),
        },
        "batch": {"shape": [BATCH, H, W, C], "dtype": "uint8", "bytes": BATCH_BYTES},
        "batches": args.batches,
        "warmup": args.warmup,
        "repeats": args.repeats,
    }


def _print(doc: dict) -> None:
    print(json.dumps(doc, indent=2))


def compare_streams(args, pixels: np.ndarray) -> dict:
    """The real data plane over one connection, then over ``args.streams``, interleaved per repeat."""
    one, many = [], []
    for _ in range(args.repeats):
        one.append(measure_hetero(["data-0"], args.batches, args.warmup, pixels))
        many.append(measure_hetero(["data-0"], args.batches, args.warmup, pixels, streams=args.streams))
    return {
        "streams": args.streams,
        "one_stream": _summary(one, "gbps", "cpu_ms_per_batch"),
        "n_streams": _summary(many, "gbps", "cpu_ms_per_batch"),
        "ratio_to_one_stream": _spread([m["gbps"] / o["gbps"] for o, m in zip(one, many)]),
        "note": "loopback has no per-flow cap (EC2 holds one flow to 5 Gbps outside a cluster placement group), so "
        "about 1 is expected here; the gain is where the per-flow cap binds",
    }


if __name__ == "__main__":
    main()

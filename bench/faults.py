"""Faults on an emulated cluster: does every host end, in time, blaming the right host, leaving nothing behind?

    .venv/bin/python bench/faults.py [--repeats 5] [--silence 5] [--only pytorch-kill-data ...]

The matrix {kill, freeze} x {trainer, data host} x {PyTorch, TensorFlow} on a
2 data host + 1 trainer job (shards of 240 small images, training "forever"),
the fault injected once training runs; plus a pre-authentication flood: 1,100
connections that never prove the secret against a data host's accept loop in
a process limited to 256 file descriptors, then the real trainer.

For each run: seconds from the fault until every other host has exited,
their exit codes, the host each survivor's failure names first (it must be
the victim), and processes or listening ports left behind. Bounds (issue
"survive"): freeze <= silence_timeout_s + 10 s, kill <= 5 s.

Then an interruption per framework, as a spot interruption does it: SIGTERM to
every host of a 3-epoch job in its second epoch, then the job started again on
fresh hosts from its checkpoint folder. For each: seconds from SIGTERM until
every host exited (bound 5 s), the job's result, and the accounting of the
whole run: per epoch, samples lost and duplicated (the PyTorch sample ledger;
TensorFlow's per-epoch id count), steps redone, samples seen against epochs x
dataset. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline import storage  # noqa: E402
from pipeline.code import STEPS_DIR, build_code_tarball  # noqa: E402
from pipeline.emulator import EmulatedJob  # noqa: E402
from pipeline.sample_data import generate  # noqa: E402
from steps.shard.shard import shard_dataset  # noqa: E402
from pipeline.harness import by_role, children, listeners_on, start_training_job, two_group_request  # noqa: E402

FIRST_HOST = re.compile(r"algo-\d+")


def fault_run(work: Path, shards: Path, code_uri: str, framework: str, action: str, role: str, silence: float) -> dict:
    before = {p.pid for p in children()}
    job = start_training_job(work, shards, code_uri, silence_timeout_s=silence, hyperparameters={"framework": framework})
    with job:
        victim = by_role(job, role)[0]
        others = [h for h in job.hosts if h is not victim]
        faulted_at = time.monotonic()
        os.killpg(victim.process.pid, signal.SIGKILL if action == "kill" else signal.SIGSTOP)
        ended: dict[str, float] = {}
        while len(ended) < len(others) and time.monotonic() - faulted_at < 120:
            for h in others:
                if h.name not in ended and h.process.poll() is not None:
                    ended[h.name] = round(time.monotonic() - faulted_at, 2)
            time.sleep(0.05)
        all_ended_s = time.monotonic() - faulted_at
        if action == "freeze":
            os.killpg(victim.process.pid, signal.SIGCONT)
        result = job.wait()
    blamed = {h.name: (FIRST_HOST.search(h.failure or "") or [None])[0] for h in others}
    left = [p.pid for p in children() if p.pid not in before]
    bound = silence + 10 if action == "freeze" else 5.0
    return {
        "all_others_ended_s": round(all_ended_s, 2), "bound_s": bound, "within_bound": all_ended_s <= bound,
        "ended_s": {h.name: ended.get(h.name) for h in others}, "roles": {h.name: h.role for h in job.hosts},
        "exit_codes": {h.name: h.exit_code for h in others}, "all_nonzero": all(h.exit_code not in (0, None) for h in others),
        "victim": victim.name, "blamed": blamed, "blames_victim": all(b == victim.name for b in blamed.values()),
        "stopped_by_emulator": [h.name for h in others if h.stopped_by_emulator], "job_ok": result.ok,
        "processes_left": len(left), "ports_left": len(listeners_on([job])),
    }


INTERRUPT_EPOCHS = 3
REDONE = re.compile(r"the (\d+) step\(s\) of epoch \d+ done so far are redone")


def interruption_run(work: Path, shards: Path, code_uri: str, framework: str, silence: float) -> dict:
    """A job interrupted in its second epoch and restarted from its checkpoints: timing and accounting."""
    before = {p.pid for p in children()}
    train = json.loads((shards / "manifest.json").read_text())["splits"]["train"]["samples"]
    request = two_group_request(work, shards, code_uri, data=2, checkpoints=work / "checkpoints", hyperparameters={
        "framework": framework, "epochs": INTERRUPT_EPOCHS, "batch_size": 8, "log_every": 1, "heartbeat_s": 0.5,
        "silence_timeout_s": silence, "connect_timeout_s": 60, "workload_options": {"blur_passes": 0}})
    steps_per_epoch = train // 8
    job = EmulatedJob(name="job", request=request, job_dir=work / "job", grace_s=30, timeout_s=300,
                      interrupt_after_steps=steps_per_epoch + steps_per_epoch // 2)
    with job:
        job.start()
        result = job.wait()
    metrics = json.loads((result.model_dir / "metrics.json").read_text()) if result.ok else {}
    if framework == "pytorch":
        epochs = (metrics.get("sample_ledger") or {}).get("epochs", [])
        per_epoch = [{"epoch": e["epoch"], "lost": train - e["distinct"], "duplicated": e["duplicates"]} for e in epochs]
    else:
        per_epoch = [{"epoch": a["epoch"], "lost": a["missing"], "duplicated": a["received"] - a["distinct"]}
                     for a in metrics.get("epoch_accounting", [])]
    interrupted = result.interrupted or {}
    # what the interrupted trainer said it leaves to be redone (TensorFlow resumes at the epoch boundary)
    first = work / "job.attempt-1"
    said = " ".join(p.read_text() for p in first.glob("algo-*/output/failure"))
    redone = int(REDONE.search(said).group(1)) if REDONE.search(said) else 0
    left = [p.pid for p in children() if p.pid not in before]
    return {
        "job_ok": result.ok, "failure": result.failure, "interruptions": result.interruptions,
        "all_exited_s": interrupted.get("all_exited_s"), "bound_s": 5.0,
        "within_bound": interrupted.get("all_exited_s", 99) <= 5.0 and not interrupted.get("stopped_by_emulator"),
        "hosts_exited_s": interrupted.get("hosts_exited_s"), "exit_codes": interrupted.get("exit_codes"),
        "epochs": per_epoch, "samples_lost": sum(e["lost"] for e in per_epoch),
        "samples_duplicated": sum(e["duplicated"] for e in per_epoch), "steps_redone": redone,
        "samples_seen": metrics.get("samples_seen"), "samples_expected": INTERRUPT_EPOCHS * train,
        "processes_left": len(left), "ports_left": len(listeners_on([job])), "wall_s": round(result.wall_s, 1),
    }


FLOOD_HOST = """
import resource, socket, sys, json, time
sys.path.insert(0, {root!r})
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from steps.train.dataplane import control
from steps.train.core.config import TrainConfig
server = socket.create_server(("127.0.0.1", 0), backlog=2048)
print(server.getsockname()[1], flush=True)
cfg = TrainConfig(heartbeat_s=0.5, silence_timeout_s=10, connect_timeout_s=60)
started = time.monotonic()
trainers = control.accept_trainers(server, cfg, "127.0.0.1", ("trainer-a",), {secret!r}, {{}})
print(json.dumps({{"accepted": [t.host for t in trainers], "seconds": round(time.monotonic() - started, 2)}}), flush=True)
"""


def flood_run(connections: int) -> dict:
    from steps.train.dataplane.auth import client_handshake

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, connections + 256)), hard))
    secret = os.urandom(32).hex().encode()
    root = str(Path(__file__).resolve().parents[1])
    host = subprocess.Popen([sys.executable, "-c", FLOOD_HOST.format(root=root, secret=secret)], stdout=subprocess.PIPE, text=True)
    flood = []
    try:
        port = int(host.stdout.readline())
        for _ in range(connections):
            try:
                flood.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                break
        opened = len(flood)
        time.sleep(1.0)
        started = time.monotonic()
        trainer = socket.create_connection(("127.0.0.1", port), timeout=30)
        client_handshake(trainer, secret, host="trainer-a")
        admitted_s = time.monotonic() - started
        lines = []
        for line in host.stdout:  # the host logs refusals before its result line
            if line.startswith("{"):
                outcome = json.loads(line)
                break
            lines.append(line.strip())
        trainer.close()
        return {"connections_opened": opened, "host_fd_limit": 256, "trainer_admitted_s": round(admitted_s, 2),
                "host_survived": outcome["accepted"] == ["trainer-a"], "host_exit_code": host.wait(timeout=30),
                "host_log": lines[-3:]}
    finally:
        for s in flood:
            s.close()
        if host.poll() is None:
            host.kill()
            host.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--silence", type=float, default=5.0, help="silence_timeout_s of the jobs")
    parser.add_argument("--only", nargs="*", default=None, help="cells to run, e.g. pytorch-kill-data tensorflow-freeze-trainer flood")
    args = parser.parse_args()
    cells = [(f, a, r) for f in ("pytorch", "tensorflow") for a in ("kill", "freeze") for r in ("trainer", "data")]
    report = {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "repeats": args.repeats,
              "silence_timeout_s": args.silence, "cells": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        images = generate(work / "images", samples=240, image_size=48, seed=1)
        code_uri = storage.uri(build_code_tarball(source=STEPS_DIR, destination=work / "code.tar.gz"))
        shards = {}
        for framework, fmt in (("pytorch", "webdataset"), ("tensorflow", "tfrecord")):
            shards[framework] = work / f"shards-{framework}"
            shard_dataset(images, shards[framework], target_shard_mb=1, data_hosts=2, shard_format=fmt)
        for framework, action, role in cells:
            name = f"{framework}-{action}-{role}"
            if args.only is not None and name not in args.only:
                continue
            runs = [fault_run(work / f"{name}-{i}", shards[framework], code_uri, framework, action, role, args.silence)
                    for i in range(args.repeats)]
            times = [r["all_others_ended_s"] for r in runs]
            report["cells"][name] = {
                "ended_s": {"min": min(times), "median": statistics.median(times), "max": max(times)}, "bound_s": runs[0]["bound_s"],
                "all_within_bound": all(r["within_bound"] for r in runs), "all_nonzero": all(r["all_nonzero"] for r in runs),
                "all_blame_the_victim": all(r["blames_victim"] for r in runs),
                "processes_left": sum(r["processes_left"] for r in runs), "ports_left": sum(r["ports_left"] for r in runs),
                "runs": runs,
            }
            print(json.dumps({name: report["cells"][name]["ended_s"]}), file=sys.stderr, flush=True)
        for framework in ("pytorch", "tensorflow"):
            name = f"{framework}-interrupt"
            if args.only is not None and name not in args.only:
                continue
            runs = [interruption_run(work / f"{name}-{i}", shards[framework], code_uri, framework, args.silence)
                    for i in range(args.repeats)]
            times = [r["all_exited_s"] for r in runs if r["all_exited_s"] is not None]
            report["cells"][name] = {
                "exited_s": {"min": min(times), "median": statistics.median(times), "max": max(times)} if times else None,
                "bound_s": 5.0, "all_within_bound": all(r["within_bound"] for r in runs), "all_jobs_ok": all(r["job_ok"] for r in runs),
                "samples_lost": sum(r["samples_lost"] for r in runs), "samples_duplicated": sum(r["samples_duplicated"] for r in runs),
                "steps_redone": [r["steps_redone"] for r in runs],
                "processes_left": sum(r["processes_left"] for r in runs), "ports_left": sum(r["ports_left"] for r in runs),
                "runs": runs,
            }
            print(json.dumps({name: report["cells"][name]["exited_s"]}), file=sys.stderr, flush=True)
    if args.only is None or "flood" in args.only:
        report["flood"] = [flood_run(1100) for _ in range(args.repeats)]
    report["not_measured"] = ("samples lost per kill/freeze fault (the trainer's failure names the samples a lost host had not "
                              "delivered; a retried job resumes from the checkpoint written when the loss was noticed)")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Faults on an emulated cluster: does every host end, in time, blaming the right host, leaving nothing behind?

    .venv/bin/python bench/faults.py [--repeats 5] [--silence 5] [--only pytorch-kill-data ...] [--out faults.json]

The matrix {kill, freeze} x {trainer, data host} x {PyTorch, TensorFlow, Ray} on a
2 data host + 1 trainer job (shards of 240 small images, training "forever"; on
Ray the trainer is the Ray head), the fault injected once training runs, to
every process of the victim's host (its session: a whole instance); plus a
pre-authentication flood: 1,100 connections that never prove the secret
against a data host's accept loop in a process limited to 256 file
descriptors, then the real trainer.

For each run: seconds from the fault until every other host has exited,
their exit codes, the host each survivor's failure names first and the host
the job's failure (the run's first error line) names first (both must be the
victim), for a frozen victim the seconds from the first failure until the
emulator ended it, and processes (found by the job's environment marker,
`tests.support.harness.job_processes`), listening ports and temp folders (each
host's TMPDIR, each Ray node's folder) left behind. Bounds (issue "survive"):
freeze <= silence_timeout_s + 10 s, kill <= 5 s; a frozen host ended within
the emulator's grace (`FAULT_GRACE_S` + its SIGTERM wait) after the first
failure.

Then an interruption per framework, as a spot interruption does it: SIGTERM to
every host of a 3-epoch job in its second epoch, then the job started again on
fresh hosts from its checkpoint folder. For each: seconds from SIGTERM until
every host exited (bound 5 s), whether each wrote its failure file, the job's result, and the accounting of the
whole run: per epoch, samples lost and duplicated (the PyTorch sample ledger;
TensorFlow's per-epoch id count; Ray's ledger), steps redone, samples seen against epochs x
dataset. Writes JSON to --out, or else to stdout; everything else it prints (the emulator's lines, a summary per cell)
goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
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
from pipeline.emulator.hosts import HOST_NAME, STOP_WAIT_S  # noqa: E402
from pipeline.emulator.job import EmulatedJob  # noqa: E402
from pipeline.emulator.links import LinkFault, unavailable  # noqa: E402
from pipeline.local.sample_data import generate  # noqa: E402
from steps.frameworks import FRAMEWORKS, TABLE  # noqa: E402
from steps.shard.shard import shard_dataset  # noqa: E402
from tests.support.harness import by_role, fault, job_processes, listeners_on, start_training_job, temp_left, two_group_request  # noqa: E402

FAULT_GRACE_S = 10.0  # the emulator's grace after a job's first failure: the survivors' bound, less the silence noticed
# a frozen host ignores the emulator's SIGTERM: SIGKILL ends it STOP_WAIT_S later; 1 s for the emulator to notice
# the first failure and the victim's end (it polls), and to kill the session's last process
VICTIM_BOUND_S = FAULT_GRACE_S + STOP_WAIT_S + 1.0
CUT = LinkFault(cut=True)
LOSSY = LinkFault(loss=0.02, delay_ms=50)  # a poor link: 2% of the packets lost, 50 ms more each way
LOSSY_EPOCHS = 2


def _first_host(text: str | None) -> str | None:
    found = HOST_NAME.search(text or "")
    return found.group() if found else None


def fault_run(work: Path, shards: Path, code_uri: str, framework: str, action: str, role: str, silence: float) -> dict:
    """``action``: kill, freeze or cut (the victim's link drops every packet, its processes live on)."""
    work.mkdir(parents=True)
    job = start_training_job(
        work,
        shards,
        code_uri,
        silence_timeout_s=silence,
        grace_s=FAULT_GRACE_S,
        hyperparameters={"framework": framework},
        network_faults=action == "cut",
    )
    with job:
        victim = by_role(job, role)[0]
        others = [h for h in job.hosts if h is not victim]
        faulted_at = time.monotonic()
        if action == "cut":
            job.degrade(victim, CUT)
        else:
            fault(victim, signal.SIGKILL if action == "kill" else signal.SIGSTOP)
        result = job.wait()  # a frozen victim is still frozen: the emulator ends it, FAULT_GRACE_S after the first failure
        counters = job.link_counters().get(victim.name, {})
    ended = {h.name: round(h.ended_at - faulted_at, 2) for h in others}
    all_ended_s = max(ended.values())
    blamed = {h.name: _first_host(h.failure) for h in others}
    bound = 5.0 if action == "kill" else silence + 10
    run = {
        "all_others_ended_s": all_ended_s,
        "bound_s": bound,
        "within_bound": all_ended_s <= bound,
        "ended_s": ended,
        "roles": {h.name: h.role for h in job.hosts},
        "exit_codes": {h.name: h.exit_code for h in others},
        "all_nonzero": all(h.exit_code not in (0, None) for h in others),
        "victim": victim.name,
        "blamed": blamed,
        "blames_victim": all(b == victim.name for b in blamed.values()),
        "job_failure": (result.failure or "")[:300],
        "job_failure_names": _first_host(result.failure),
        "stopped_by_emulator": [h.name for h in others if h.stopped_by_emulator],
        "job_ok": result.ok,
        "processes_left": len(job_processes(job)),
        "ports_left": len(listeners_on([job])),
        "temp_left": temp_left(job),
        **(
            {"victim_exit_code": victim.exit_code, "victim_packets_dropped": counters.get("dropped", 0)}
            if action == "cut"
            else {}
        ),
    }
    if action == "freeze":
        first_failure = min(h.ended_at for h in others)
        run.update(
            victim_ended_after_first_failure_s=round(victim.ended_at - first_failure, 2),
            victim_bound_s=VICTIM_BOUND_S,
            victim_within_bound=victim.ended_at - first_failure <= VICTIM_BOUND_S,
        )
    return run


INTERRUPT_EPOCHS = 3


def _per_epoch(metrics: dict, framework: str, train: int) -> list[dict]:
    """Samples lost and duplicated per epoch, by the job's own accounting (the PyTorch and Ray sample ledger,
    TensorFlow's per-epoch id count)."""
    if framework in ("pytorch", "ray"):
        epochs = (metrics.get("sample_ledger") or {}).get("epochs", [])
        return [{"epoch": e["epoch"], "lost": train - e["distinct"], "duplicated": e["duplicates"]} for e in epochs]
    return [
        {"epoch": a["epoch"], "lost": a["missing"], "duplicated": a["received"] - a["distinct"]}
        for a in metrics.get("epoch_accounting", [])
    ]


def _job_hyperparameters(framework: str, epochs: int, silence: float) -> dict:
    return {
        "framework": framework,
        "epochs": epochs,
        "batch_size": 8,
        "log_every": 1,
        "heartbeat_s": 0.5,
        "silence_timeout_s": silence,
        "connect_timeout_s": 120,
        "workload_options": {"blur_passes": 0},
    }


def lossy_run(work: Path, shards: Path, code_uri: str, framework: str, silence: float) -> dict:
    """A whole job whose first data host's link is `LOSSY` from before it starts: it must end ok, every sample of
    every epoch delivered once."""
    work.mkdir(parents=True)
    train = json.loads((shards / "manifest.json").read_text())["splits"]["train"]["samples"]
    request = two_group_request(
        work, shards, code_uri, data=2, hyperparameters=_job_hyperparameters(framework, LOSSY_EPOCHS, silence)
    )
    job = EmulatedJob(name="job", request=request, job_dir=work / "job", grace_s=30, timeout_s=600, network_faults=True)
    with job:
        job.prepare()
        victim = by_role(job, "data")[0]
        job.degrade(victim, LOSSY)
        job.start()
        result = job.wait()
        counters = job.link_counters().get(victim.name, {})
    metrics = json.loads((result.model_dir / "metrics.json").read_text()) if result.ok else {}
    per_epoch = _per_epoch(metrics, framework, train)
    return {
        "job_ok": result.ok,
        "failure": result.failure,
        "victim": victim.name,
        "link": str(LOSSY),
        "packets_lost": counters.get("lost", 0),
        "packets_delayed": counters.get("delayed", 0),
        "epochs": per_epoch,
        "epochs_accounted": len(per_epoch),
        "samples_lost": sum(e["lost"] for e in per_epoch),
        "samples_duplicated": sum(e["duplicated"] for e in per_epoch),
        "samples_seen": metrics.get("samples_seen"),
        "samples_expected": LOSSY_EPOCHS * train,
        "all_accounted": result.ok
        and len(per_epoch) == LOSSY_EPOCHS
        and not any(e["lost"] or e["duplicated"] for e in per_epoch),
        "processes_left": len(job_processes(job)),
        "ports_left": len(listeners_on([job])),
        "temp_left": temp_left(job),
        "wall_s": round(result.wall_s, 1),
    }


REDONE = re.compile(r"the (\d+) step\(s\) of epoch \d+ done so far are redone")


def interruption_run(work: Path, shards: Path, code_uri: str, framework: str, silence: float) -> dict:
    """A job interrupted in its second epoch and restarted from its checkpoints: timing and accounting."""
    work.mkdir(parents=True)
    train = json.loads((shards / "manifest.json").read_text())["splits"]["train"]["samples"]
    request = two_group_request(
        work,
        shards,
        code_uri,
        data=2,
        checkpoints=work / "checkpoints",
        hyperparameters=_job_hyperparameters(framework, INTERRUPT_EPOCHS, silence),
    )
    steps_per_epoch = train // 8
    job = EmulatedJob(
        name="job",
        request=request,
        job_dir=work / "job",
        grace_s=30,
        timeout_s=600 if framework == "ray" else 300,
        interrupt_after_steps=steps_per_epoch + steps_per_epoch // 2,
    )
    with job:
        job.start()
        result = job.wait()
    metrics = json.loads((result.model_dir / "metrics.json").read_text()) if result.ok else {}
    per_epoch = _per_epoch(metrics, framework, train)
    interrupted = result.interrupted or {}
    # what the interrupted trainer said it leaves to be redone (TensorFlow resumes at the epoch boundary)
    first = work / "job.attempt-1"
    said = " ".join(p.read_text() for p in first.glob("algo-*/output/failure"))
    redone = int(REDONE.search(said).group(1)) if REDONE.search(said) else 0
    failures = {p.parent.parent.name: p.read_text().strip()[:120] for p in sorted(first.glob("algo-*/output/failure"))}
    return {
        "job_ok": result.ok,
        "failure": result.failure,
        "interruptions": result.interruptions,
        "all_exited_s": interrupted.get("all_exited_s"),
        "bound_s": 5.0,
        "within_bound": interrupted.get("all_exited_s", 99) <= 5.0 and not interrupted.get("stopped_by_emulator"),
        "hosts_exited_s": interrupted.get("hosts_exited_s"),
        "exit_codes": interrupted.get("exit_codes"),
        "roles": interrupted.get("roles"),
        "failure_files": failures,
        "all_wrote_failure_files": set(failures) == set(interrupted.get("exit_codes") or {}),
        "epochs": per_epoch,
        "samples_lost": sum(e["lost"] for e in per_epoch),
        "samples_duplicated": sum(e["duplicated"] for e in per_epoch),
        "steps_redone": redone,
        "samples_seen": metrics.get("samples_seen"),
        "samples_expected": INTERRUPT_EPOCHS * train,
        "processes_left": len(job_processes(job)),
        "ports_left": len(listeners_on([job])),
        "temp_left": temp_left(job, first),
        "wall_s": round(result.wall_s, 1),
    }


FLOOD_HOST = """
import resource, socket, sys, json, time
sys.path.insert(0, {root!r})
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from steps.train.dataplane import admission
from steps.train.dataplane.settings import DataPlaneSettings
server = socket.create_server(("127.0.0.1", 0), backlog=2048)
print(server.getsockname()[1], flush=True)
settings = DataPlaneSettings(data_port=9400, heartbeat_s=0.5, silence_timeout_s=10, connect_timeout_s=60)
started = time.monotonic()
trainers = admission.accept_trainers(server, settings, "127.0.0.1", ("trainer-a",), {secret!r}, {{}})
print(json.dumps({{"accepted": [t.host for t in trainers], "seconds": round(time.monotonic() - started, 2)}}), flush=True)
"""


def flood_run(connections: int) -> dict:
    from steps.train.dataplane.auth import client_handshake

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, connections + 256)), hard))
    secret = os.urandom(32).hex().encode()
    root = str(Path(__file__).resolve().parents[1])
    host = subprocess.Popen(
        [sys.executable, "-c", FLOOD_HOST.format(root=root, secret=secret)], stdout=subprocess.PIPE, text=True
    )
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
        return {
            "connections_opened": opened,
            "host_fd_limit": 256,
            "trainer_admitted_s": round(admitted_s, 2),
            "host_survived": outcome["accepted"] == ["trainer-a"],
            "host_exit_code": host.wait(timeout=30),
            "host_log": lines[-3:],
        }
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
    parser.add_argument(
        "--only", nargs="*", default=None, help="cells to run, e.g. pytorch-kill-data ray-freeze-trainer ray-interrupt flood"
    )
    parser.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    args = parser.parse_args()
    with contextlib.redirect_stdout(sys.stderr):  # the emulator's lines and each cell's summary: stdout is the JSON's
        report = measure(args)
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)


def measure(args: argparse.Namespace) -> dict:
    network = unavailable()
    cells = [(f, a, r) for f in FRAMEWORKS for a in ("kill", "freeze") for r in ("trainer", "data")]
    cells += [] if network else [(f, "cut", "data") for f in FRAMEWORKS]
    report = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "repeats": args.repeats,
        "silence_timeout_s": args.silence,
        "cells": {},
        **({"network_cells": f"not run: {network}"} if network else {}),
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        images = generate(work / "images", samples=240, image_size=48, seed=1)
        code_uri = storage.uri(build_code_tarball(source=STEPS_DIR, destination=work / "code.tar.gz"))
        shards = {}
        for framework in FRAMEWORKS:
            shards[framework] = work / f"shards-{framework}"
            shard_dataset(images, shards[framework], target_shard_mb=1, data_hosts=2, shard_format=TABLE[framework].shard_format)
        for framework, action, role in cells:
            name = f"{framework}-{action}-{role}"
            if args.only is not None and name not in args.only:
                continue
            runs = [
                fault_run(work / f"{name}-{i}", shards[framework], code_uri, framework, action, role, args.silence)
                for i in range(args.repeats)
            ]
            times = [r["all_others_ended_s"] for r in runs]
            report["cells"][name] = {
                "ended_s": {"min": min(times), "median": statistics.median(times), "max": max(times)},
                "bound_s": runs[0]["bound_s"],
                "all_within_bound": all(r["within_bound"] for r in runs),
                "all_nonzero": all(r["all_nonzero"] for r in runs),
                "all_blame_the_victim": all(r["blames_victim"] for r in runs),
                "all_job_failures_name_the_victim": all(r["job_failure_names"] == r["victim"] for r in runs),
                "none_stopped_by_emulator": not any(r["stopped_by_emulator"] for r in runs),
                **(
                    {
                        "victim_ended_after_first_failure_s": [r["victim_ended_after_first_failure_s"] for r in runs],
                        "victims_within_bound": all(r["victim_within_bound"] for r in runs),
                    }
                    if action == "freeze"
                    else {}
                ),
                **(
                    {
                        "victim_exit_codes": [r["victim_exit_code"] for r in runs],
                        "victim_packets_dropped": [r["victim_packets_dropped"] for r in runs],
                    }
                    if action == "cut"
                    else {}
                ),
                "processes_left": sum(r["processes_left"] for r in runs),
                "ports_left": sum(r["ports_left"] for r in runs),
                "temp_left": sum(len(r["temp_left"]) for r in runs),
                "runs": runs,
            }
            print(json.dumps({name: report["cells"][name]["ended_s"]}), file=sys.stderr, flush=True)
        for framework in FRAMEWORKS:
            name = f"{framework}-interrupt"
            if args.only is not None and name not in args.only:
                continue
            runs = [
                interruption_run(work / f"{name}-{i}", shards[framework], code_uri, framework, args.silence)
                for i in range(args.repeats)
            ]
            times = [r["all_exited_s"] for r in runs if r["all_exited_s"] is not None]
            report["cells"][name] = {
                "exited_s": {"min": min(times), "median": statistics.median(times), "max": max(times)} if times else None,
                "bound_s": 5.0,
                "all_within_bound": all(r["within_bound"] for r in runs),
                "all_jobs_ok": all(r["job_ok"] for r in runs),
                "all_wrote_failure_files": all(r["all_wrote_failure_files"] for r in runs),
                "samples_lost": sum(r["samples_lost"] for r in runs),
                "samples_duplicated": sum(r["samples_duplicated"] for r in runs),
                "steps_redone": [r["steps_redone"] for r in runs],
                "processes_left": sum(r["processes_left"] for r in runs),
                "ports_left": sum(r["ports_left"] for r in runs),
                "temp_left": sum(len(r["temp_left"]) for r in runs),
                "runs": runs,
            }
            print(json.dumps({name: report["cells"][name]["exited_s"]}), file=sys.stderr, flush=True)
        for framework in [] if network else FRAMEWORKS:
            name = f"{framework}-lossy-data"
            if args.only is not None and name not in args.only:
                continue
            runs = [
                lossy_run(work / f"{name}-{i}", shards[framework], code_uri, framework, args.silence) for i in range(args.repeats)
            ]
            walls = [r["wall_s"] for r in runs]
            report["cells"][name] = {
                "link": str(LOSSY),
                "wall_s": {"min": min(walls), "median": statistics.median(walls), "max": max(walls)},
                "all_jobs_ok": all(r["job_ok"] for r in runs),
                "all_accounted": all(r["all_accounted"] for r in runs),
                "samples_lost": sum(r["samples_lost"] for r in runs),
                "samples_duplicated": sum(r["samples_duplicated"] for r in runs),
                "packets_lost": [r["packets_lost"] for r in runs],
                "packets_delayed": [r["packets_delayed"] for r in runs],
                "processes_left": sum(r["processes_left"] for r in runs),
                "ports_left": sum(r["ports_left"] for r in runs),
                "temp_left": sum(len(r["temp_left"]) for r in runs),
                "runs": runs,
            }
            print(json.dumps({name: report["cells"][name]["wall_s"]}), file=sys.stderr, flush=True)
    if args.only is None or "flood" in args.only:
        report["flood"] = [flood_run(1100) for _ in range(args.repeats)]
    report["not_measured"] = (
        "samples lost per kill/freeze fault (the trainer's failure names the samples a lost host had not "
        "delivered; a retried job resumes from the checkpoint written when the loss was noticed)"
    )
    return report


if __name__ == "__main__":
    main()

"""A spot interruption of an emulated training job: SIGTERM to every host's first process (the request's
``ContainerEntrypoint``; in plain script mode that is the toolkit, which does not pass it on, so the hosts are killed),
``grace_s`` to exit, and what happened kept beside the job, whose first attempt's folders stay as
``<job_dir>.attempt-N``. `pipeline.emulator.job.EmulatedJob` then starts the job again on fresh hosts, from its
checkpoints."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

from pipeline.emulator.hosts import Host, send_signal, signal_group
from pipeline.stop import STOP


def signal_and_wait(live: list[Host], *, grace_s: float, signals_reach_entry_point: bool) -> dict[str, float]:
    """The interruption's notice to each live host; host name -> seconds it took to exit, for those that did in
    ``grace_s``."""
    signalled = time.monotonic()
    for host in live:
        if signals_reach_entry_point:
            send_signal(host.popen, signal.SIGTERM)
        else:  # script mode: the toolkit holds the signal, and the instance goes when the notice runs out
            signal_group(host.popen, signal.SIGKILL)
    deadline = signalled + grace_s
    exited: dict[str, float] = {}
    while time.monotonic() < deadline and len(exited) < len(live):
        STOP.check()
        for host in live:
            if host.name not in exited and host.popen.poll() is not None:
                exited[host.name] = round(time.monotonic() - signalled, 2)
        time.sleep(0.05)
    return exited


def record(live: list[Host], exited: dict[str, float], *, signals_reach_entry_point: bool) -> dict:
    """The interruption as `JobResult.interrupted` tells it: how long the hosts took to exit, their exit codes."""
    return {
        "signal": "SIGTERM" if signals_reach_entry_point else "none (script mode): killed",
        "hosts_exited_s": exited,
        "all_exited_s": max(exited.values(), default=0.0),
        "stopped_by_emulator": [h.name for h in live if h.name not in exited],
        "exit_codes": {h.name: h.exit_code for h in live},
        "roles": {h.name: h.role for h in live},
    }


def keep_attempt(job_dir: Path, attempt: int) -> None:
    """The interrupted attempt's folders, moved aside as ``<job_dir>.attempt-<attempt>``."""
    kept = job_dir.with_name(f"{job_dir.name}.attempt-{attempt}")
    if kept.exists():
        shutil.rmtree(kept)
    job_dir.rename(kept)

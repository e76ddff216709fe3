"""Why an emulated training job failed, in one line: the host whose failure the job's is (or the host it blames), its
reason, and the hints the emulator can add (a full volume, an import its image lacks); or why the job is stuck.

A host reports progress with a status or metric line of the step code (`PROGRESS_LINE`); a job none of whose hosts
has reported progress for ``progress_timeout_s`` is stuck, and its failure names the hosts still running, the one
silent longest first, with the last line each reported. Where a host's reason blames another host of the job (a
trainer that went silent, a data host lost), the failure leads with the blamed host: a frozen host never exits by
itself, and the first to fail is the peer that noticed.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

from pipeline.emulator import image_guard, volumes
from pipeline.emulator.hosts import HOST_NAME, Host

# a trainer's metric line (steps.train.core.metrics); on the Ray path the head's driver prints its workers' lines after
# Ray's "(RayTrainWorker pid=N[, ip=...]) " prefix
STEP_LINE = re.compile(r"^(?:\([\w:.-]+ pid=\d+(?:, ip=[\d.]+)?\) )?\[metrics\] .*\bstep=(\d+)\b")
# a status or metric line of the step code ("[metrics] ...", "[data] ...", "[ray] ...", on the Ray path also after a
# worker's prefix): what the progress watchdog counts. A framework's own output does not: it can repeat while nothing
# advances (Ray Data redraws its progress bars, Ray retries a warning every second)
PROGRESS_LINE = re.compile(r"^(?:\((?:[\w:.-]+ )?pid=\d+(?:, ip=[\d.]+)?\) )?\[[a-z][a-z_-]*\] ")
# no host of a job reporting progress this long: the job is stuck (its longest legitimate silence, start-up, validation
# or the cost measurement at the end, takes seconds to minutes)
PROGRESS_TIMEOUT_S = 600.0


def cause(failed: list[Host], hosts: list[Host]) -> Host:
    """Of the failed hosts, in the order they failed, the one whose failure the job's is: the first, unless it
    blames another host and the hosts that failed after it blame a different one more often (a host cut off from
    the others hears from none of them, and the first to give up may be the isolated host, blaming its peer;
    every peer that lost it blames it). The hosts the emulator stopped have no vote."""
    first = failed[0]
    if blamed(first, hosts) is None:
        return first
    votes = collections.Counter(
        b.name for h in failed if not h.stopped_by_emulator and (b := blamed(h, hosts)) is not None
    ).most_common()
    if len(votes) > 1 and votes[0][1] == votes[1][1]:
        return first
    return next(h for h in failed if (b := blamed(h, hosts)) is not None and b.name == votes[0][0])


def stuck(hosts: list[Host], now: float, *, timeout_s: float, step: str) -> str | None:
    """Why the job is stuck: none of its hosts has reported progress, or exited, for ``timeout_s``; the hosts
    still running, the one silent longest first, each with the last line it reported. None while it advances."""
    running = sorted((h for h in hosts if h.exit_code is None), key=lambda h: h.progress_at or now)
    last = max([h.progress_at or now for h in hosts] + [h.ended_at for h in hosts if h.ended_at is not None])
    if not running or now - last <= timeout_s:
        return None
    silent = "; ".join(
        f"host {h.name} ({h.group.name}, {h.role}) "
        + (
            f"silent {now - (h.progress_at or now):.0f} s since {h.progress_line[:200]!r}"
            if h.progress_line
            else "reported nothing since it started"
        )
        + f" [log: {h.base_dir / 'output' / 'host.log'}]"
        for h in running
    )
    return (
        f"step {step}: no host reported progress (a status or metric line of the step code) for "
        f"{timeout_s:g} s, so it is stuck: {silent}; stopped"
    )


def describe(host: Host, hosts: list[Host], *, step: str, job_dir: Path, volume_plan: list, volume_scale: float | None) -> str:
    """The job's failure as ``host``'s: how it ended, its reason, and the host it blames first."""
    code = host.exit_code
    assert code is not None, f"host {host.name}: described before it exited"
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    log = host.base_dir / "output" / "host.log"
    reason = host.failure or _last_error(log) or "no failure file; see its log"
    image = image_guard.explain(reason if host.failure else _tail(log), job_dir / ".image")
    volume = next((v for v in volume_plan if v.host == host.name), None)
    # a volume plan is made for a volume scale (`EmulatedJob.prepare`)
    full = f" {volumes.full_volume(volume, volume_scale)}" if volume and volume_scale is not None and "ENOSPC" in reason else ""
    who, tail = (
        f"host {host.name} ({host.group.name}, {host.role})",
        f"{reason}{full}{' ' + image if image else ''} [log: {log}]",
    )
    other = blamed(host, hosts)
    if other is not None:
        return f"step {step}: host {other.name} ({other.group.name}, {other.role}) failed, as {who} reports ({how}): {tail}"
    return f"step {step}: {who} {how}: {tail}"


def blamed(host: Host, hosts: list[Host]) -> Host | None:
    """The other host of the job that ``host``'s failure names first (the step code's failures lead with the host
    that failed), or None."""
    named = HOST_NAME.search(host.failure)
    return next((h for h in hosts if named and h.name == named.group() and h is not host), None)


def _last_error(log: Path) -> str:
    """The step code's last one-line error in a host's log (`steps.common.errors.run_step`): its reason where the failure
    file could not be written (a full volume has no room for it)."""
    errors = [line[len("ERROR ") :] for line in _tail(log, 50).splitlines() if line.startswith("ERROR ")]
    return errors[-1] if errors else ""


def _tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.is_file() else ""

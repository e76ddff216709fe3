"""Every process an emulated host or a local processing job started, found by its session, and ended.

Each host (and each processing job) runs in a session of its own (``start_new_session``), so its id is the session id
of everything it starts, whatever process group that moves to: Ray's workers each lead a group of their own (a
``killpg`` of the host's group misses them) and rename themselves ``ray::<Actor>`` (a search by command line misses
them too), but keep the session. A process can leave its session only by calling ``setsid`` itself; nothing the
steps start does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def session_members(session: int) -> list[int]:
    """Ids of the live processes (zombies left out) of ``session``, this process excluded."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session ...
        if fields[0] != "Z" and int(fields[3]) == session:
            found.append(int(entry.name))
    return found


def kill_session(session: int, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL every process of ``session`` until none is left (one may fork while it goes), for at most ``timeout_s``;
    returns those still there then (none unless a process is stuck in the kernel)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = session_members(session)
        if not left or time.monotonic() > deadline:
            return left
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def start_session(command: list[str], *, cwd: Path, env: dict, preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen:
    """A container's first process, as the emulator starts every one (a training host, a processing job): a session of
    its own, so whatever it starts goes with it (`kill_session`), its output and errors on one pipe, no stdin."""
    return subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )

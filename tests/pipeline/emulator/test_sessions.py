"""A host's session holds every process it started, also one that moved to a process group of its own (as each Ray
worker does, renaming itself too): `pipeline.emulator.sessions` finds and ends them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from pipeline.emulator.sessions import kill_session, session_members

# a host that starts a worker leading its own process group, as Ray's raylet starts its workers
HOST = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import os, time; os.setpgid(0, 0); print('moved', flush=True); time.sleep(120)"])
time.sleep(120)
"""


def test_a_process_that_left_its_hosts_group_is_found_by_session_and_killed():
    host = subprocess.Popen([sys.executable, "-c", HOST], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout.readline().strip() == "moved"
        members = session_members(host.pid)
        assert len(members) == 2 and host.pid in members
        (worker,) = [pid for pid in members if pid != host.pid]
        assert os.getpgid(worker) == worker != host.pid  # a group of its own: a killpg of the host's misses it
        os.killpg(host.pid, signal.SIGKILL)
        host.wait()
        assert session_members(host.pid) == [worker]  # outlived its host
        assert kill_session(host.pid) == []
        assert session_members(host.pid) == []
    finally:
        kill_session(host.pid)
        if host.poll() is None:
            host.kill()
            host.wait()
        host.stdout.close()

"""The SIGTERM policy of every host: a stop that signals the host's whole process group (as the emulator stops a job)
ends it as terminated, though its DataLoader workers die of the same SIGTERM, whose SIGCHLD PyTorch's handler would
raise over it as an internal error ("DataLoader worker (pid N) is killed by signal: Terminated")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from steps.common.errors import EXIT_TERMINATED, FAILURE_FILE

ROOT = Path(__file__).resolve().parents[4]

# a host decoding with DataLoader workers (forked, as a data host's are), under the launcher's policy and run_step;
# unarmed (a data host) its way out takes a while (closing its session), as the SIGCHLD of its workers comes in;
# armed (a training loop) the loop would wait on its dead workers' next batch
HOST = """
import sys, time
import torch
from torch.utils.data import DataLoader, IterableDataset
from steps.common.errors import run_step
from steps.train.core.terminate import TERMINATE

class Decoded(IterableDataset):
    def __iter__(self):
        while True:
            time.sleep(0.02)
            yield torch.zeros(8)

def serve():
    TERMINATE.armed = sys.argv[2] == "armed"
    try:
        for i, _ in enumerate(DataLoader(Decoded(), batch_size=2, num_workers=2, multiprocessing_context="fork")):
            if i == 5:
                print("serving", flush=True)
    finally:
        time.sleep(0.5)

TERMINATE.install()
sys.exit(run_step(serve, output_dir=sys.argv[1]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("role", ["unarmed", "armed"])
def test_a_stop_of_the_whole_host_is_terminated_though_its_dataloader_workers_die_of_it(tmp_path, role, no_leftovers):
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, str(tmp_path), role],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert host.stdout.readline().strip() == "serving"
        os.killpg(host.pid, signal.SIGTERM)  # the host and its workers, as the emulator stops a host
        output = host.stdout.read()
        code = host.wait(timeout=60)
    finally:
        try:
            os.killpg(host.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        host.wait()
        host.stdout.close()
    assert code == EXIT_TERMINATED, output
    assert "Traceback" not in output and "DataLoader worker" not in output, output
    assert (tmp_path / FAILURE_FILE).read_text().startswith("terminated: SIGTERM"), output

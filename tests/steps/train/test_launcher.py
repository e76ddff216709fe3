"""The launcher's end of a failed host (`steps.train.launcher`): the host's one-line failure is its last word."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_a_failed_host_with_dataloader_workers_ends_with_its_code_and_no_traceback():
    """torch's DataLoader installs a SIGCHLD handler that raises in the main thread when a worker dies by a signal; the
    launcher kills the workers on its way out, which must not print that as a traceback (or change the exit code)."""
    program = textwrap.dedent(
        """
        import multiprocessing

        import torch
        from torch.utils.data import DataLoader, Dataset

        from steps.train import launcher

        class Slow(Dataset):
            def __len__(self):
                return 1000

            def __getitem__(self, i):
                return torch.zeros(1)

        batches = iter(DataLoader(Slow(), batch_size=1, num_workers=3, prefetch_factor=1))
        next(batches)  # the workers run
        kill = multiprocessing.Process.kill

        def kill_and_let_it_die(process):  # as on a loaded machine: a worker is gone before the next is killed
            kill(process)
            process.join(5)

        multiprocessing.Process.kill = kill_and_let_it_die
        print("ERROR the host's failure", flush=True)
        launcher._end_now(3)
        """
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert done.stdout.rstrip().splitlines()[-1] == "ERROR the host's failure"

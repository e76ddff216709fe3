"""The run's stop (`pipeline.stop.STOP`) as `hetero run` installs it, for tests that stop what the runner waits on:
``run_stop`` installs it in this process and, after the test, puts back the handlers, the unraisable hook and a stop
that never came."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

import pytest

from pipeline.stop import STOP, STOP_SIGNALS, Stop


@contextlib.contextmanager
def installed(stop: Stop) -> Iterator[Stop]:
    """``stop`` handling this process's stop signals inside, then the handlers and the unraisable hook as they were."""
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    hook = sys.unraisablehook
    stop.install()
    try:
        yield stop
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        sys.unraisablehook = hook


def signalled(sig: int) -> None:
    """``sig`` to this process, and the bytecode that runs its handler (in the calling frame, as a signal lands)."""
    os.kill(os.getpid(), sig)
    for _ in range(1000):  # the handler runs between instructions: within these
        pass


@pytest.fixture
def run_stop():
    try:
        with installed(STOP):
            yield STOP
    finally:
        STOP.__init__()


def signal_when(ready: threading.Event, sig: int, timeout_s: float = 60) -> threading.Thread:
    """``sig`` to this process once ``ready`` is set (from a thread: its handler runs in the main thread, which waits)."""

    def send() -> None:
        if ready.wait(timeout_s):
            os.kill(os.getpid(), sig)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread

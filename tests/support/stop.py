"""The run's stop (`pipeline.stop.STOP`) as `hetero run` installs it, for tests that stop what the runner waits on:
``run_stop`` installs it in this process and, after the test, puts back the handlers, the unraisable hook and a stop
that never came."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from pipeline.stop import STOP, STOP_SIGNALS


@pytest.fixture
def run_stop():
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    hook = sys.unraisablehook
    STOP.install()
    try:
        yield STOP
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        sys.unraisablehook = hook
        STOP.__init__()


def signal_when(ready: threading.Event, sig: int, timeout_s: float = 60) -> threading.Thread:
    """``sig`` to this process once ``ready`` is set (from a thread: its handler runs in the main thread, which waits)."""

    def send() -> None:
        if ready.wait(timeout_s):
            os.kill(os.getpid(), sig)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread

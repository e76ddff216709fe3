"""Threads in data-plane tests: one side of a conversation in its own thread, and a check that none outlives its test."""

from __future__ import annotations

import threading

import pytest

SECRET = b"s" * 32  # the job secret both sides of a test handshake hold
OTHER = b"o" * 32  # a secret of another job


class Side(threading.Thread):
    """Runs one side of a handshake; keeps its result or exception."""

    def __init__(self, fn, *args, **kwargs):
        super().__init__(daemon=True)
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.result = self.error = None

    def run(self):
        try:
            self.result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc


@pytest.fixture
def no_leaked_threads():
    """Every thread a test starts (its own, the service's, the client's) is gone when it ends."""
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before]
    for t in leaked:
        t.join(timeout=10)
    assert [t.name for t in leaked if t.is_alive()] == []

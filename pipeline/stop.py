"""The stop of `hetero run`: SIGINT (Ctrl-C), SIGTERM (a process manager's stop, ``timeout``) or SIGHUP (its terminal
closed), at any instant of a run, ends it as Ctrl-C does: the step running stops every process it started on its way
out (hosts, and all they started: `pipeline.emulator.sessions`) and the CLI exits 128 + the signal with one line.

The first signal is recorded and raised in the main thread (`Signalled`). A raise can be lost: Python prints and drops
an exception raised inside a finalizer (a ``__del__`` or weakref callback, which a garbage collection runs at any
instant: the SageMaker SDK's objects while the definition compiles, say), a library may swallow it, and one may turn it
into an error of its own (pydantic-core builds a ``SchemaError`` around it while the SDK's models load). So the run
re-checks the recorded stop at its safe points (`Stop.check`: before each step, before a job starts a host, in every
wait loop) and raises it again there; a finalizer's raise is not printed; and an error that reaches the CLI after a
stop came is the stop's (`Stop.claiming_errors`), reported as the stop, never as an error with its stack. Code that
starts a process or makes a folder and records it runs `Stop.deferred`, so that no raise falls between the two and
leaves either behind. A second signal
during the stop is honoured, not ignored: what the stop still waits for (hosts given seconds to exit after SIGTERM)
is killed at once (`Stop.hurried`). It does not raise again, which would cut the stop's own clean-up short.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Signalled(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP (``args[0]``), ending `hetero run` as Ctrl-C does."""


class Stop:
    """The signals that came, first first; the one stop policy of the process that installs it."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self._deferring = 0
        self._lost = False  # the last raise was dropped by a finalizer: the next signal raises again
        self._hook: Callable[[sys.UnraisableHookArgs], object] | None = None  # the unraisable hook before ours

    def install(self) -> None:
        """Handle the stop signals here (main thread only); installing twice changes nothing."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.handler)
        if sys.unraisablehook != self._unraisable:
            self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)
        if (len(self.signals) == 1 or self._lost) and not self._deferring:
            self._lost = False
            raise Signalled(self.signals[0])

    @property
    def signum(self) -> int | None:
        return self.signals[0] if self.signals else None

    @property
    def hurried(self) -> bool:
        """A second signal came: the stop kills what is left at once."""
        return len(self.signals) > 1

    def check(self) -> None:
        """At a safe point of the run (never in its clean-up): raise the stop again, if one came and its raise was lost."""
        if self.signals:
            self._lost = False
            raise Signalled(self.signals[0])

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A stop that comes inside is raised at its end (a raise between starting a process and keeping its handle, or
        making a folder and keeping its name, would leave it behind)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if not self._deferring:
            self.check()

    @contextlib.contextmanager
    def claiming_errors(self) -> Iterator[None]:
        """An error raised inside once a stop came is the stop's consequence: raised as the stop (the error chained)."""
        try:
            yield
        except Exception as exc:
            if not self.signals:
                raise
            raise Signalled(self.signals[0]) from exc

    def line(self, exc: KeyboardInterrupt) -> str:
        """The one line the CLI ends a stopped run with."""
        first = exc.args[0] if isinstance(exc, Signalled) else signal.SIGINT
        how = signal.Signals(first).name
        if self.hurried:
            how += f", then {signal.Signals(self.signals[1]).name}: what was left killed at once"
        return f"interrupted ({how}); all hosts stopped"

    def exit_code(self, exc: KeyboardInterrupt) -> int:
        return 128 + (exc.args[0] if isinstance(exc, Signalled) else signal.SIGINT)

    def _unraisable(self, unraisable) -> None:
        """A stop raised inside a finalizer is recorded (the run's next safe point raises it again): nothing to print."""
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, Signalled):
            self._lost = True
            return
        (self._hook or sys.__unraisablehook__)(unraisable)


STOP = Stop()

"""The stop of `hetero run`: the first signal raises, a raise a finalizer drops is raised again at the next check, a
stop inside a deferred block is raised at its end, and a second signal hurries the stop without raising."""

from __future__ import annotations

import signal

import pytest

from pipeline.stop import Signalled, Stop
from tests.support.stop import installed, signalled


@pytest.fixture
def stop():
    """A `Stop` handling this process's stop signals for the test, then the handlers and the unraisable hook as they were."""
    with installed(Stop()) as stop:
        yield stop


class Finalized:
    """An object whose finalizer takes the signal: a garbage collection runs one at any instant."""

    def __init__(self, sig: int) -> None:
        self.sig = sig

    def __del__(self) -> None:
        signalled(self.sig)


def test_the_first_signal_raises_and_is_recorded(stop):
    with pytest.raises(Signalled) as raised:
        signalled(signal.SIGTERM)
    assert raised.value.args == (signal.SIGTERM,) and stop.signum == signal.SIGTERM and not stop.hurried
    assert stop.line(raised.value) == "interrupted (SIGTERM); all hosts stopped"
    assert stop.exit_code(raised.value) == 143


def test_a_stop_raised_inside_a_finalizer_is_not_lost(stop, capsys):
    """Python drops (and prints) an exception raised in a ``__del__``: the stop is kept, printed nowhere, and the run's
    next check raises it; a later signal raises again too, never ignored."""
    Finalized(signal.SIGINT)  # collected at once: the signal lands in its finalizer
    assert stop.signals == [signal.SIGINT]
    assert "Exception ignored" not in capsys.readouterr().err
    with pytest.raises(Signalled) as raised:
        stop.check()
    assert raised.value.args == (signal.SIGINT,)


def test_a_signal_after_a_lost_raise_raises_again(stop):
    Finalized(signal.SIGHUP)
    with pytest.raises(Signalled) as raised:
        signalled(signal.SIGTERM)
    assert raised.value.args == (signal.SIGHUP,)  # the run's stop is the first signal's


def test_a_second_signal_hurries_the_stop_and_raises_nothing(stop):
    """Raising again would cut the stop's clean-up short: the clean-up kills what is left at once instead."""
    with pytest.raises(Signalled) as raised:
        signalled(signal.SIGINT)
    signalled(signal.SIGTERM)  # during the stop's clean-up
    assert stop.hurried and stop.signals == [signal.SIGINT, signal.SIGTERM]
    assert stop.line(raised.value) == "interrupted (SIGINT, then SIGTERM: what was left killed at once); all hosts stopped"
    assert stop.exit_code(raised.value) == 130


def test_a_stop_inside_a_deferred_block_is_raised_at_its_end(stop):
    done = []
    with pytest.raises(Signalled):
        with stop.deferred():
            signalled(signal.SIGTERM)
            done.append("the process's handle kept")
    assert done == ["the process's handle kept"]


def test_no_check_raises_without_a_stop(stop):
    stop.check()
    with stop.deferred():
        pass
    assert stop.signum is None


class LibraryError(Exception):
    """What a library raises around an exception it caught (pydantic-core a ``SchemaError`` around the stop's raise)."""


def _library_call(sig: int) -> None:
    """A library call the signal lands in: the library turns the stop's raise into an error of its own."""
    try:
        signalled(sig)
    except BaseException as exc:
        raise LibraryError("'cls' must be valid as the first argument to 'isinstance'") from exc


def test_an_error_a_library_raises_around_the_stop_is_claimed_as_the_stop(stop):
    with pytest.raises(Signalled) as raised:
        with stop.claiming_errors():
            _library_call(signal.SIGHUP)
    assert raised.value.args == (signal.SIGHUP,) and isinstance(raised.value.__cause__, LibraryError)


def test_an_error_without_a_stop_is_the_error(stop):
    with pytest.raises(LibraryError):
        with stop.claiming_errors():
            raise LibraryError("a real failure")

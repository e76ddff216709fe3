"""A data host's side of the job, whatever the framework: its trainers admitted, heard, told, let go.

Every host that serves trainers (a PyTorch data host, a tf.data.service data
host, a Ray host the head dialled) runs one `HostSession`: it admits the
expected trainers (`steps.train.dataplane.admission`), reads each trainer's
frames in a thread of its own, keeps the files a STOP hands over, and ends
the session when every trainer has said STOP (clean), or when one goes silent,
disconnects without STOP or reports failure (`TrainerGone`): SageMaker bills
until every host exits, so no host outlives its trainers. A host that fails
on its own tells every trainer still listening why, not just that the link
closed. What the framework sends (batches, a worker's address, answers) is its
own: ``on_message`` gets every frame besides STOP, ERROR and PING.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

from steps.common.errors import describe
from steps.train.core.outputs import keep_results
from steps.train.dataplane.admission import Trainer, accept_trainers
from steps.train.dataplane.errors import AllStopped, JobStopped, PeerSilent, Stopped, TrainerGone, WireError
from steps.train.dataplane.link import Heartbeat
from steps.train.dataplane.messages import Error, Message, Other, Ping, Stop
from steps.train.dataplane.settings import DataPlaneSettings

OnMessage = Callable[[Trainer, Message | Other], None]


def trainer_lost(host: str, exc: Exception) -> TrainerGone:
    """Why a trainer's link broke, as a data host reports it."""
    if isinstance(exc, PeerSilent):
        return TrainerGone(f"trainer {host} went silent: {exc}")
    return TrainerGone(f"trainer {host} disconnected without STOP ({exc}); it crashed or was killed")


class HostSession:
    """``who``: how this host names itself to its trainers ("data host algo-2"). ``heartbeat``: PING every link while
    the host is busy elsewhere; off where the framework's own sender pings (one that never waits on another link)."""

    def __init__(
        self,
        settings: DataPlaneSettings,
        trainers: list[Trainer],
        *,
        who: str,
        results_dir: Path | None = None,
        on_message: OnMessage | None = None,
        heartbeat: bool = True,
    ) -> None:
        self.settings = settings
        self.trainers = trainers
        self.who = who
        self.results_dir = results_dir
        self.failure: Exception | None = None
        self.done = threading.Event()  # every trainer said STOP, or the session failed
        self._on_message = on_message
        self._heartbeat = heartbeat
        self._beat: Heartbeat | None = None
        self._changed = threading.Event()  # wakes `wait_until`
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    @classmethod
    def admit(
        cls,
        settings: DataPlaneSettings,
        server: socket.socket,
        *,
        me: str,
        trainer_hosts: tuple[str, ...],
        secret: bytes,
        info: dict,
        streams: int = 1,
        **options,
    ) -> HostSession:
        """Accept every expected trainer on ``server``, on ``streams`` connections each (``info``: the rest of this
        host's HELLO). Each connection is a `Trainer` of its own: read, pinged and lost on its own."""
        return cls(settings, accept_trainers(server, settings, me, trainer_hosts, secret, info, streams), **options)

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> HostSession:
        """Read every trainer's frames (and heartbeat every link) from here on."""
        if self._heartbeat:
            # No on_error here (the trainer's side has one, `PeerWatch`): each trainer's reader below reads that trainer's
            # frames straight off its socket, never from behind a queue, so it hears a trainer's socket go at once.
            self._beat = Heartbeat([t.link for t in self.trainers], self.settings.heartbeat_s)
        for t in self.trainers:
            self.spawn(self._control, t)
        return self

    def spawn(self, target: Callable, *args) -> threading.Thread:
        """A thread of the session's (``target(*args)``), joined when it closes."""
        thread = threading.Thread(target=target, args=args, name=f"{getattr(target, '__name__', 'session')}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def __enter__(self) -> HostSession:
        return self.start()

    def __exit__(self, kind, exc, tb) -> bool:
        """Tell the trainers why, when this host ends on an error of its own; close; a clean end (`AllStopped`) is no error."""
        try:
            if exc is not None and not isinstance(exc, AllStopped):
                self.tell(exc)
        finally:
            self.close()
        return isinstance(exc, AllStopped)

    def close(self) -> None:
        self.done.set()
        self._changed.set()
        if self._beat is not None:
            self._beat.stop()
        for t in self.trainers:
            t.link.close()
        for thread in self._threads:
            thread.join(timeout=5)

    # -- state -------------------------------------------------------------
    @property
    def all_stopped(self) -> bool:
        return all(t.stopped for t in self.trainers)

    def check(self) -> None:
        """Raise the session's failure, or `AllStopped` once every trainer said STOP."""
        if self.failure is not None:
            raise self.failure
        if self.done.is_set():
            raise AllStopped()

    def wait_until(self, ready: Callable[[], bool] | None = None) -> None:
        """Until ``ready()`` (every trainer stopped, by default), checked whenever a frame arrives and at least once a
        heartbeat; raises the session's failure (and whatever ``ready`` raises) instead."""
        ready = ready or (lambda: self.all_stopped)
        while True:
            self._changed.clear()
            if self.failure is not None:
                raise self.failure
            if ready():
                if self.failure is not None:  # a failed STOP: its failure is set before its trainer counts as stopped
                    raise self.failure
                return
            self._changed.wait(self.settings.heartbeat_s)

    def fail(self, error: Exception) -> None:
        """End the session on ``error``; the first one counts, and none once every trainer said STOP."""
        with self._lock:
            if self.failure is None and not self.done.is_set():
                self.failure = error
        self.done.set()
        self._changed.set()

    def lost(self, t: Trainer, exc: Exception) -> None:
        """``t``'s link broke (reading or sending: the reason is the same either way)."""
        if t.stopped or self.done.is_set():
            return
        t.lost = True
        self.fail(trainer_lost(t.host, exc))

    def guarded(self, t: Trainer, action: Callable[[], None]) -> None:
        """Run ``action`` (a send to ``t``); a broken link is ``t`` lost."""
        try:
            action()
        except Stopped:
            pass
        except (WireError, OSError) as exc:
            self.lost(t, exc)

    def tell(self, exc: BaseException) -> None:
        """Every trainer still listening learns why this host ends (not the one lost, nor those that said STOP)."""
        reason = f"{self.who}: {describe(exc)}"[:1000]
        for t in self.trainers:
            if not (t.stopped or t.lost):
                try:
                    t.link.send(Error(reason))
                except (WireError, OSError, Stopped):
                    pass

    # -- the reader per trainer --------------------------------------------
    def _control(self, t: Trainer) -> None:
        while not (t.stopped or self.done.is_set()):
            try:
                message = t.link.read()
            except Stopped:
                return
            except (WireError, OSError) as exc:
                self.lost(t, exc)
                return
            if message is None or isinstance(message, Ping):
                continue
            if isinstance(message, Stop):
                self._stopped(t, message)
            elif isinstance(message, Error):
                t.lost = True
                self.fail(TrainerGone(f"trainer {t.host} failed: {message.reason}"))
            elif self._on_message is not None:
                self._handle(self._on_message, t, message)
            self._changed.set()

    def _handle(self, on_message: OnMessage, t: Trainer, message: Message | Other) -> None:
        """The framework's part; what it raises ends the session (a broken link: ``t`` lost)."""
        try:
            on_message(t, message)
        except Stopped:
            pass
        except (WireError, OSError) as exc:
            self.lost(t, exc)
        except Exception as exc:  # noqa: BLE001 - raised in the host's main thread by `check` / `wait_until`
            self.fail(exc)

    def _stopped(self, t: Trainer, stop: Stop) -> None:
        """A trainer's STOP: its files kept; a failed job's reason is this host's end."""
        keep_results(self.results_dir, t.host, stop.files)
        if stop.status != "completed":  # first: a host that sees every trainer stopped also sees why (`wait_until`)
            self.fail(JobStopped(f"{stop.reason or 'no reason given'} (STOP from trainer {t.host})"))
        t.stopped = True
        if stop.status == "completed" and self.all_stopped:
            self.done.set()

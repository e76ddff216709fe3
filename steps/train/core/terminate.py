"""The one SIGTERM policy of every trainer (SageMaker's stop and spot-interruption signal): noted while a step runs
and acted on at the next step boundary, so a saved checkpoint always holds a whole number of steps; at once otherwise."""

from __future__ import annotations

import signal
import threading
from types import FrameType

from steps.common.errors import Terminated


class Terminate:
    """SIGTERM while armed is noted, not raised: the training loop ends at the next step boundary.
    Unarmed (start-up, validation, writing outputs) it ends the process at once, as before. Either way the death of a
    child of the host from then on is part of the stop (`child_ended`)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.armed = False

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()
        if callable(signal.getsignal(signal.SIGCHLD)) and signal.getsignal(signal.SIGCHLD) != self.child_ended:
            signal.signal(signal.SIGCHLD, self.child_ended)
        if not self.armed:
            raise Terminated()

    def child_ended(self, signum: int, frame: FrameType | None) -> None:
        """SIGCHLD once SIGTERM came. A stop signals every process of the host (the emulator signals its process group),
        so its children's deaths (DataLoader workers) are part of the stop, not failures of their own: the SIGCHLD
        handler PyTorch's DataLoader installs would raise one (RuntimeError: DataLoader worker is killed by signal) over
        `Terminated`. A training loop that may be waiting on that child (its own decode workers) ends now, as SIGTERM
        asks; code already unwinding goes on."""
        if self.armed:
            self.armed = False  # one raise: what follows is the training loop's way out
            raise Terminated()

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.handler)

    @property
    def requested(self) -> bool:
        return self.event.is_set()


TERMINATE = Terminate()

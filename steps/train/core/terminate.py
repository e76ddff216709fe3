"""The one SIGTERM policy of every trainer (SageMaker's stop and spot-interruption signal): noted while a step runs
and acted on at the next step boundary, so a saved checkpoint always holds a whole number of steps; at once otherwise."""

from __future__ import annotations

import signal
import threading
from types import FrameType

from steps.common.errors import Terminated


class Terminate:
    """SIGTERM while armed is noted, not raised: the training loop ends at the next step boundary.
    Unarmed (start-up, validation, writing outputs) it ends the process at once, as before."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.armed = False

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()
        if not self.armed:
            raise Terminated()

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.handler)

    @property
    def requested(self) -> bool:
        return self.event.is_set()


TERMINATE = Terminate()

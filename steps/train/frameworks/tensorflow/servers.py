"""Ending a tf.data.service server on either side of the TensorFlow path.

``DispatchServer.stop()`` and ``WorkerServer.stop()`` first drain the server's
in-flight gRPC calls, holding the GIL meanwhile, and their ``__del__`` calls
``stop()`` too. After a clean end (the trainer's STOP) that is quick. After a
failure the peer may have frozen mid-call, and its call never finishes: a stop,
or dropping the last reference to the server, would keep the host alive long
after it knows the job failed. So a failed host leaves its server running, held
here, and the launcher ends the process at once (`steps.train.launcher`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorflow as tf

_LEFT_RUNNING: list = []


def end_server(
    server: tf.data.experimental.service.DispatchServer | tf.data.experimental.service.WorkerServer, *, clean: bool
) -> None:
    """Stop ``server`` after a clean end; after a failure keep it, untouched, until the process ends."""
    if clean:
        server.stop()
    else:
        _LEFT_RUNNING.append(server)

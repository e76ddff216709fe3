"""Every exception of the data plane, each with its one-line headline.

Wire errors (`WireError` and below) say what was wrong with a connection or a
frame; the peer errors say which host of the job was lost and how, so a job's
failure line names the host to blame. `Stopped` and `AllStopped` are internal
signals, never shown to anyone.
"""

from __future__ import annotations

from steps.common.errors import HeteroError


class WireError(HeteroError):
    headline = "data plane protocol error"


class PeerClosed(WireError):
    headline = "peer closed the connection"


class PeerSilent(WireError):
    headline = "peer went silent"


class AuthError(WireError):
    headline = "data plane authentication failed"


class TrainerGone(HeteroError):
    headline = "trainer lost"
    peer_end = True  # a data host's end: the trainer's, told in one line


class DataHostLost(HeteroError):
    headline = "data host lost"
    peer_end = True  # a data host's end, told by the trainer in one line: its own stack tells nothing


class HostLost(HeteroError):
    """Another host of a Ray job, as the head watches it."""

    headline = "host lost"
    peer_end = True


class DataHostUnreachable(HeteroError):
    headline = "data host unreachable"


class LocalDecodeFailed(HeteroError):
    """A trainer host's own decode workers (hybrid decode) failed."""

    headline = "local decode failed"


class JobStopped(HeteroError):
    """A trainer ended the job because something failed; the message leads with what (and who) did."""

    headline = "job stopped"
    peer_end = True


class Stopped(Exception):
    """Internal: the local side is shutting down; abandon the current send or read."""


class AllStopped(Exception):
    """Internal: every trainer said STOP; a data host winds down cleanly."""

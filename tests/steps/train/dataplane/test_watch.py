"""A trainer's watch over the hosts it dialled, over real loopback connections: each loss named, STOP the clean end."""

from __future__ import annotations

import socket
import time
from contextlib import closing

import pytest

from steps.train.dataplane import messages
from steps.train.dataplane.admission import Trainer, accept_trainers
from steps.train.dataplane.errors import DataHostLost, HostLost, PeerClosed
from steps.train.dataplane.session import HostSession
from steps.train.dataplane.settings import DataPlaneSettings
from steps.train.dataplane.watch import Peer, PeerWatch
from tests.support.threads import SECRET, Side, no_leaked_threads  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("no_leaked_threads")


def _cfg(port: int) -> DataPlaneSettings:
    return DataPlaneSettings(heartbeat_s=0.1, silence_timeout_s=1.0, connect_timeout_s=10.0, data_port=port)


class Watched:
    """A `PeerWatch` of trainer "trainer-a" over one host "d" on a loopback port; the host's side is a raw `Trainer`
    record (the test drives it) or, with ``session``, a real `HostSession`."""

    def __init__(self, *, session: bool = False, **options):
        self.server = socket.create_server(("127.0.0.1", 0))
        cfg = _cfg(self.server.getsockname()[1])
        self.failures: list = []
        if session:
            host = Side(
                HostSession.admit,
                cfg,
                self.server,
                me="d",
                trainer_hosts=("trainer-a",),
                secret=SECRET,
                info={},
                who="data host d",
            )
        else:
            host = Side(accept_trainers, self.server, cfg, "d", ("trainer-a",), SECRET, {})
        host.start()
        self.watch = PeerWatch(
            cfg, [Peer("d", "127.0.0.1")], me="trainer-a", secret=SECRET, on_failure=self.failures.append, **options
        )
        self.watch.connect()
        host.join(timeout=10)
        assert host.error is None
        self.host: Trainer | HostSession = host.result if session else host.result[0]
        self.watch.watch()

    def wait_for_failure(self, timeout: float = 10.0) -> list:
        deadline = time.monotonic() + timeout
        while not self.failures and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.failures

    def close(self) -> None:
        self.watch.close("failed", "test over")
        link = self.host.trainers[0].link if isinstance(self.host, HostSession) else self.host.link
        link.close()
        self.server.close()


def test_a_host_that_hangs_up_before_stop_is_lost_by_name():
    with closing(Watched()) as w:
        w.host.link.close()
        assert len(w.wait_for_failure()) == 1 and isinstance(w.failures[0], DataHostLost)
        assert w.failures[0].one_line().startswith("data host lost: data host d was lost: ")
        with pytest.raises(DataHostLost):
            w.watch.check()


def test_a_host_that_says_error_fails_the_trainer_with_its_reason():
    with closing(Watched()) as w:
        w.host.link.send(messages.Error("data host d: malformed shard: train-3.tar"))
        w.wait_for_failure()
        assert [f.one_line() for f in w.failures] == [
            "data host lost: data host d failed: data host d: malformed shard: train-3.tar"
        ]


@pytest.mark.slow
def test_a_silent_host_is_lost_after_silence_timeout():
    with closing(Watched()) as w:  # the raw host never pings
        w.wait_for_failure()
        assert w.failures[0].message.startswith("data host d was lost: data host d sent nothing for 1 s (silence_timeout_s=1)")


def test_the_label_and_error_name_a_ray_host():
    with closing(Watched(label="host", error=HostLost)) as w:
        w.host.link.close()
        w.wait_for_failure()
        assert isinstance(w.failures[0], HostLost) and w.failures[0].message.startswith("host d was lost: ")


@pytest.mark.slow
def test_stop_carries_the_files_and_the_host_hanging_up_after_it_is_no_loss():
    with closing(Watched()) as w:
        w.watch.close("completed", "", {"model.pt": b"weights"})
        stop = None
        with pytest.raises(PeerClosed):  # the trainer half-closed after its STOP
            while True:
                stop = w.host.link.read() or stop
        assert stop.status == "completed" and stop.files["model.pt"].tobytes() == b"weights"
        w.host.link.close()
        assert w.watch.failure is None and w.failures == []


@pytest.mark.slow
def test_a_session_and_a_watch_end_a_job_together():
    heard = []
    with closing(Watched(session=True, on_message=lambda peer, message: heard.append((peer.name, message)))) as w:
        session = w.host
        with session:
            session.trainers[0].link.send(messages.Report(host={"cpus": 2}))
            w.watch.close("completed", "", {"metrics.json": b"{}"})
            session.wait_until()
        assert session.failure is None and w.watch.failure is None and w.failures == []
        assert heard == [("d", messages.Report(host={"cpus": 2}))]


def test_a_host_whose_socket_is_gone_is_lost_while_its_reader_is_still_busy_with_what_it_sent():
    """A killed host's connection closes; the trainer's reader of it may be blocked behind a full queue of that host's
    batches (here: a handler that does not return). The heartbeat's refused PING names the loss anyway."""
    import threading

    busy = threading.Event()
    release = threading.Event()

    def blocked(peer, message):  # the bounded batch queue, full until the test ends
        busy.set()
        release.wait(30)

    with closing(Watched(on_message=blocked)) as w:
        try:
            w.host.link.send(messages.End(epoch=0, samples=4, host={}))
            assert busy.wait(5)
            w.host.link.sock.shutdown(socket.SHUT_RDWR)  # the host is gone: its end refuses what the trainer sends
            w.host.link.close()
            w.wait_for_failure(timeout=5)
            assert not release.is_set()  # the reader is still inside the handler: the loss came from the heartbeat
            assert len(w.failures) == 1 and isinstance(w.failures[0], DataHostLost)
            assert w.failures[0].message.startswith("data host d was lost: ")
        finally:
            release.set()

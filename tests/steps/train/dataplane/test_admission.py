"""Who may connect to a data host: a flood, a slow client or no file descriptors left never end the host."""

from __future__ import annotations

import errno
import socket
import threading
import time

import pytest

from steps.train.dataplane import admission
from steps.train.dataplane.auth import client_handshake
from steps.train.dataplane.settings import DataPlaneSettings
from tests.support.threads import SECRET

CFG = DataPlaneSettings(data_port=9400, heartbeat_s=0.1, silence_timeout_s=5.0, connect_timeout_s=20.0)


class Acceptor(threading.Thread):
    """`accept_trainers` on a loopback port, in a thread, its result or error kept."""

    def __init__(self, server, trainers=("trainer-a",)):
        super().__init__(daemon=True)
        self.server, self.trainers, self.result, self.error = server, trainers, None, None

    def run(self):
        try:
            self.result = admission.accept_trainers(
                self.server, CFG, "127.0.0.1", self.trainers, SECRET, {"samples_per_epoch": 1}
            )
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _trainer_connects(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    client_handshake(sock, SECRET, host="trainer-a")
    return sock


@pytest.mark.slow
def test_a_flood_of_silent_connections_is_capped_and_the_real_trainer_still_gets_in(capsys):
    server = socket.create_server(("127.0.0.1", 0), backlog=256)
    port = server.getsockname()[1]
    acceptor = Acceptor(server)
    acceptor.start()
    flood = []
    try:
        for _ in range(admission.MAX_PENDING + 40):
            flood.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        time.sleep(0.5)  # let the acceptor take them all: past the cap, each new one cuts the oldest
        trainer = _trainer_connects(port)
        acceptor.join(timeout=30)
        assert acceptor.error is None and [t.host for t in acceptor.result] == ["trainer-a"]
        refused = sum(1 for s in flood if _closed_by_peer(s))
        assert refused == len(flood)  # the oldest were cut as new ones came, the rest when the acceptor ended
        assert (
            f" x {admission.MAX_PENDING} connections were waiting to prove the secret; cut the oldest" in capsys.readouterr().out
        )
        acceptor.result[0].link.close()
        trainer.close()
    finally:
        for s in flood:
            s.close()
        server.close()
        acceptor.join(timeout=30)


def _closed_by_peer(sock: socket.socket) -> bool:
    """True when the data host closed (or reset) ``sock``; False when it still holds it open after 10 s."""
    sock.settimeout(10)
    try:
        while sock.recv(4096):  # the HELLO, if it was greeted, then the close
            pass
        return True
    except TimeoutError:
        return False
    except OSError:  # reset: closed with our bytes unread
        return True


@pytest.mark.slow
def test_a_client_that_trickles_bytes_is_cut_when_its_handshake_time_is_up(monkeypatch):
    monkeypatch.setattr(admission, "HANDSHAKE_TIMEOUT_S", 0.5)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    acceptor = Acceptor(server)
    acceptor.start()
    slow = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        started, cut = time.monotonic(), None
        while time.monotonic() - started < 8:  # one byte every 0.1 s: each read is quick, the whole never ends
            try:
                slow.sendall(b"x")
            except OSError:
                cut = time.monotonic() - started
                break
            time.sleep(0.1)
        assert cut is not None and cut < 5, "the trickling client was never cut off"
        trainer = _trainer_connects(port)
        acceptor.join(timeout=30)
        assert acceptor.error is None
        acceptor.result[0].link.close()
        trainer.close()
    finally:
        slow.close()
        server.close()
        acceptor.join(timeout=30)


class NoDescriptorsThenReal:
    """A listening socket whose accept() fails with EMFILE a few times, as a host out of descriptors does."""

    def __init__(self, server, failures: int):
        self.server, self.failures = server, failures

    def settimeout(self, value):
        self.server.settimeout(value)

    def accept(self):
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self.server.accept()


@pytest.mark.slow
def test_running_out_of_file_descriptors_is_waited_out_and_logged(capsys):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    acceptor = Acceptor(NoDescriptorsThenReal(server, failures=5))
    acceptor.start()
    try:
        trainer = _trainer_connects(port)
        acceptor.join(timeout=30)
        assert acceptor.error is None and [t.host for t in acceptor.result] == ["trainer-a"]
        assert " x cannot accept: Too many open files" in capsys.readouterr().out
        acceptor.result[0].link.close()
        trainer.close()
    finally:
        server.close()
        acceptor.join(timeout=30)


def test_other_accept_errors_still_end_the_host():
    class Broken:
        def settimeout(self, value):
            pass

        def accept(self):
            raise OSError(errno.EBADF, "Bad file descriptor")

    with pytest.raises(OSError, match="Bad file descriptor"):
        admission.accept_trainers(Broken(), CFG, "127.0.0.1", ("trainer-a",), SECRET, {})

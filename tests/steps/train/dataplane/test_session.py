"""A data host's session with its trainers, over real loopback connections: how it ends, and who learns why."""

from __future__ import annotations

import socket
from contextlib import closing

import numpy as np
import pytest

from steps.common.errors import UserError
from steps.train.dataplane import messages
from steps.train.dataplane.auth import client_handshake
from steps.train.dataplane.errors import JobStopped, PeerClosed, TrainerGone
from steps.train.dataplane.link import Link
from steps.train.dataplane.session import HostSession
from steps.train.dataplane.settings import DataPlaneSettings
from tests.support.threads import SECRET, Side, no_leaked_threads  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("no_leaked_threads")

CFG = DataPlaneSettings(data_port=9400, heartbeat_s=0.1, silence_timeout_s=1.0, connect_timeout_s=10.0)


@pytest.fixture
def admitted(tmp_path):
    """A session of data host "d" with trainer "trainer-a" (a raw link, driven by the test), and that link."""
    server = socket.create_server(("127.0.0.1", 0))
    sessions = []

    def admit(**options):
        side = Side(
            HostSession.admit,
            CFG,
            server,
            me="d",
            trainer_hosts=("trainer-a",),
            secret=SECRET,
            info={"samples_per_epoch": 8},
            who="data host d",
            results_dir=tmp_path,
            **options,
        )
        side.start()
        sock = socket.create_connection(server.getsockname(), timeout=10)
        hello = client_handshake(sock, SECRET, host="trainer-a")
        side.join(timeout=10)
        assert side.error is None and hello.samples_per_epoch == 8
        sessions.append(side.result)
        return side.result, Link(sock, "data host d", inbound=messages.FROM_DATA_HOST, heartbeat_s=0.1, silence_timeout_s=5.0)

    yield admit
    for session in sessions:
        session.close()
    server.close()


def test_a_stop_ends_the_session_cleanly_and_its_files_are_kept(admitted, tmp_path):
    session, trainer = admitted()
    with closing(trainer), session:
        trainer.send(messages.Stop("completed", "", {"metrics.json": b'{"ok": 1}'}))
        session.wait_until()
    assert (tmp_path / "metrics.json").read_bytes() == b'{"ok": 1}'
    assert session.trainers[0].stopped and session.failure is None


def test_a_failed_stop_ends_the_host_with_the_trainers_reason_and_tells_it_nothing(admitted):
    session, trainer = admitted()
    with pytest.raises(JobStopped, match=r"data host algo-9 was lost \(STOP from trainer trainer-a\)"), session:
        trainer.send(messages.Stop("failed", "data host algo-9 was lost"))
        session.wait_until()
    heard = []
    with pytest.raises(PeerClosed):
        while True:
            heard.append(trainer.read())
    trainer.close()
    assert not [m for m in heard if isinstance(m, messages.Error)]  # no ERROR: the trainer ended the job itself


def test_a_host_that_sees_its_trainer_stopped_after_a_failed_stop_also_sees_why(admitted):
    """The reader marks a trainer stopped only once a failed STOP's failure is set: a host woken in between (its
    heartbeat, a signal) that finds every trainer stopped ends with the trainer's reason, not as a completed job."""
    session, trainer = admitted()
    seen = []  # the session's failure at the moment the trainer counts as stopped

    class Watched(type(session.trainers[0])):
        def __setattr__(self, name, value):
            if name == "stopped" and value:
                seen.append(session.failure)
            super().__setattr__(name, value)

    session.trainers[0].__class__ = Watched
    with pytest.raises(JobStopped, match=r"out of memory \(STOP from trainer trainer-a\)"), closing(trainer), session:
        trainer.send(messages.Stop("failed", "out of memory"))
        session.wait_until()
    assert len(seen) == 1 and isinstance(seen[0], JobStopped), seen


def test_a_trainer_that_hangs_up_without_stop_is_lost_by_name(admitted):
    session, trainer = admitted()
    trainer.close()
    with pytest.raises(TrainerGone, match="trainer trainer-a disconnected without STOP .*; it crashed or was killed"), session:
        session.wait_until()


@pytest.mark.slow
def test_a_silent_trainer_is_lost_after_silence_timeout(admitted):
    session, trainer = admitted()
    with (
        closing(trainer),
        pytest.raises(TrainerGone, match=r"trainer trainer-a went silent: trainer trainer-a sent nothing for 1 s"),
        session,
    ):
        session.wait_until()  # the raw link never pings


def test_a_trainer_that_says_error_is_lost_with_its_reason(admitted):
    session, trainer = admitted()
    with closing(trainer), pytest.raises(TrainerGone, match="trainer trainer-a failed: out of memory"), session:
        trainer.send(messages.Error("out of memory"))
        session.wait_until()


def test_a_host_failing_on_its_own_tells_the_trainer_why(admitted):
    session, trainer = admitted()
    with closing(trainer):
        with pytest.raises(UserError), session:
            raise UserError("shard train-3.tar is malformed", headline="malformed shard")
        reasons = []
        while not reasons:
            message = trainer.read()
            if isinstance(message, messages.Error):
                reasons.append(message.reason)
    assert reasons == ["data host d: malformed shard: shard train-3.tar is malformed"]


def test_the_framework_hears_the_other_frames_and_answers_on_the_link(admitted):
    heard = []

    def on_message(t, message):
        heard.append(message)
        if isinstance(message, messages.IdsQuery):
            t.link.send(messages.Ids(ids=np.array([4, 5])))

    session, trainer = admitted(on_message=on_message)
    with closing(trainer), session:
        trainer.send(messages.Start(dispatcher="127.0.0.1:1"))
        trainer.send(messages.IdsQuery())
        session.wait_until(lambda: len(heard) == 2)
        answer = None
        while not isinstance(answer, messages.Ids):
            answer = trainer.read()
        trainer.send(messages.Stop("completed"))
        session.wait_until()
    assert heard == [messages.Start(dispatcher="127.0.0.1:1"), messages.IdsQuery()] and answer.ids.tolist() == [4, 5]


def test_what_the_framework_raises_ends_the_session(admitted):
    def on_message(t, message):
        raise UserError("bad decode split", headline="bad decode split")

    session, trainer = admitted(on_message=on_message)
    with closing(trainer), pytest.raises(UserError, match="bad decode split"), session:
        trainer.send(messages.Start(ray="127.0.0.1:1"))
        session.wait_until()

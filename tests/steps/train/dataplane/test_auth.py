"""The job secret, the mutual handshake, and the real data service refusing strangers.

Handshakes run over ``socket.socketpair()`` with each side in its own
thread. The service test runs the real `serve()` on 127.0.0.1 and talks to
it first as strangers (garbage, an unauthenticated STOP, a wrong secret),
then as a real `DataServiceClient` that must still get every batch.
"""

from __future__ import annotations

import socket

import pytest

from steps.common.errors import UserError
from steps.contract import SECRET_FILE
from steps.shard.job_secret import new_secret, write_job_secret
from steps.train.dataplane import auth
from steps.train.dataplane.auth import client_handshake, job_secret, load_job_secret, serve_handshake
from steps.train.dataplane.errors import AuthError
from steps.train.dataplane.wire import FrameReader, Kind, send_frame
from tests.support.threads import OTHER, SECRET, no_leaked_threads  # noqa: F401 - fixture
from tests.support.threads import Side as _Side

pytestmark = pytest.mark.usefixtures("no_leaked_threads")


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.settimeout(10)
    b.settimeout(10)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _handshake(pair, data_secret: bytes, trainer_secret: bytes):
    data_sock, trainer_sock = pair
    data = _Side(serve_handshake, data_sock, data_secret, host="data-1", info={"samples_per_epoch": 7})
    data.start()
    try:
        trainer = _Side(client_handshake, trainer_sock, trainer_secret, host="trainer-1")
        trainer.run()  # in this thread
    finally:
        data.join(timeout=20)
        if data.is_alive():  # a hung handshake: unblock it so the thread ends
            data_sock.shutdown(socket.SHUT_RDWR)
            data.join()
    return data, trainer


# -- job secret ------------------------------------------------------------------


@pytest.fixture
def no_loaded_secret(monkeypatch):
    monkeypatch.setattr(auth, "_loaded", None)


def test_the_secret_is_read_once_from_its_channel_and_the_file_removed(tmp_path, no_loaded_secret):
    written = write_job_secret(tmp_path / "secret")
    value = written.read_bytes()
    assert load_job_secret(tmp_path / "secret") == value and job_secret() == value
    assert not written.exists()  # a dataset graph run in this process later finds no file to read
    assert job_secret() == value  # the one read serves every later use


@pytest.mark.parametrize("content", [None, "", "x" * 15])
def test_a_missing_or_short_secret_file_is_a_user_error_naming_the_file(tmp_path, no_loaded_secret, content):
    if content is not None:
        (tmp_path / SECRET_FILE).write_text(content)
    with pytest.raises(UserError, match=str(tmp_path / SECRET_FILE)) as caught:
        load_job_secret(tmp_path)
    assert caught.value.headline == "missing job secret"
    assert ("'secret' input channel" if content is None else "at least 16") in caught.value.message


def test_a_host_without_the_secret_channel_fails_where_the_secret_is_needed(no_loaded_secret):
    with pytest.raises(UserError, match="needs the 'secret' input channel"):
        job_secret()


def test_new_secrets_are_long_fresh_and_written_owner_only(tmp_path):
    a, b = new_secret(), new_secret()
    assert a != b and len(a) == 64
    written = write_job_secret(tmp_path / "secret")
    assert oct(written.stat().st_mode & 0o777) == "0o600" and oct(written.parent.stat().st_mode & 0o777) == "0o700"
    assert len(written.read_text()) == 64 and written.read_text() != write_job_secret(tmp_path / "secret").read_text()


# -- handshake -----------------------------------------------------------------


def test_same_secret_authenticates_both_sides(pair):
    data, trainer = _handshake(pair, SECRET, SECRET)
    assert data.error is None and trainer.error is None
    assert data.result == "trainer-1"
    assert trainer.result.host == "data-1"
    assert trainer.result.samples_per_epoch == 7


@pytest.mark.parametrize("data_secret, trainer_secret", [(SECRET, OTHER), (OTHER, SECRET)], ids=["trainer-wrong", "data-wrong"])
def test_wrong_secret_on_either_side_fails_both_and_the_data_side_says_so(pair, data_secret, trainer_secret):
    data, trainer = _handshake(pair, data_secret, trainer_secret)
    assert isinstance(data.error, AuthError)
    assert "did not prove the job secret" in str(data.error)
    assert isinstance(trainer.error, AuthError)
    assert "peer refused the connection: authentication failed" in str(trainer.error)  # the ERROR frame arrived


def test_data_side_answers_a_bad_mac_with_an_error_frame(pair):
    data_sock, trainer_sock = pair
    data = _Side(serve_handshake, data_sock, SECRET, host="data-1", info={})
    data.start()
    try:
        reader = FrameReader(trainer_sock, max_body=0)
        kind, hello, _ = reader.read()
        assert kind is Kind.HELLO and len(hello["nonce"]) >= 32
        send_frame(trainer_sock, Kind.AUTH, {"host": "trainer-1", "nonce": "n", "mac": "0" * 64})
        kind, meta, _ = reader.read()
    finally:
        data.join(timeout=20)
    assert (kind, meta) == (Kind.ERROR, {"reason": "authentication failed"})
    assert isinstance(data.error, AuthError)


def test_trainer_rejects_a_data_host_that_cannot_prove_the_secret(pair):
    """An impostor data host that skips the check and answers with a made-up MAC."""
    data_sock, trainer_sock = pair

    def impostor():
        reader = FrameReader(data_sock, max_body=0)
        send_frame(data_sock, Kind.HELLO, {"host": "data-1", "nonce": "abc"})
        reader.read()
        send_frame(data_sock, Kind.AUTH, {"mac": "f" * 64})

    fake = _Side(impostor)
    fake.start()
    try:
        with pytest.raises(AuthError, match="data host 'data-1' did not prove the job secret"):
            client_handshake(trainer_sock, SECRET, host="trainer-1")
    finally:
        fake.join(timeout=20)
    assert fake.error is None


def test_a_mac_for_another_host_name_does_not_pass(pair):
    """The MAC binds the claimed host name: a real trainer's proof, relayed under another name, is refused."""
    data_sock, relay_sock = pair
    data = _Side(serve_handshake, data_sock, SECRET, host="data-1", info={})
    data.start()
    relay_to_trainer, trainer_sock = socket.socketpair()
    trainer = _Side(client_handshake, trainer_sock, SECRET, host="trainer-1")
    try:
        reader = FrameReader(relay_sock, max_body=0)
        _, hello, _ = reader.read()
        trainer.start()
        send_frame(relay_to_trainer, Kind.HELLO, hello)  # the data host's challenge, passed to a real trainer
        _, proof, _ = FrameReader(relay_to_trainer, max_body=0).read()
        assert proof["host"] == "trainer-1"
        send_frame(relay_sock, Kind.AUTH, {**proof, "host": "trainer-2"})
        kind, _, _ = reader.read()
    finally:
        data.join(timeout=20)
        relay_to_trainer.close()
        trainer.join(timeout=20)
        trainer_sock.close()
    assert kind is Kind.ERROR and isinstance(data.error, AuthError)


def test_handshake_refuses_frames_of_the_wrong_kind(pair):
    data_sock, trainer_sock = pair
    data = _Side(serve_handshake, data_sock, SECRET, host="data-1", info={})
    data.start()
    try:
        FrameReader(trainer_sock, max_body=0).read()
        send_frame(trainer_sock, Kind.STOP, {"status": "completed"})
    finally:
        data.join(timeout=20)
    assert isinstance(data.error, AuthError) and "expected a AUTH frame" in str(data.error)

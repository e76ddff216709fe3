"""The trainer's side of tf.data.service: the watchdog over a data host TensorFlow keeps the loop waiting on."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from steps.train.core.config import TrainConfig
from steps.train.dataplane import auth
from steps.train.dataplane.errors import DataHostLost
from steps.train.frameworks.tensorflow import data as tf_data_client


@pytest.mark.slow
@pytest.mark.parametrize("handled", [False, True])
def test_the_watchdog_ends_a_trainer_that_tensorflow_keeps_blocked(tmp_path, monkeypatch, handled):
    exited = threading.Event()
    codes = []
    monkeypatch.setattr(tf_data_client.os, "_exit", lambda code: (codes.append(code), exited.set()))
    monkeypatch.setattr(auth, "_loaded", b"s" * 32)  # as the launcher loads it from the secret channel
    cluster = SimpleNamespace(trainer_hosts=("algo-1",), data_hosts=(), current_host="algo-1", output_dir=tmp_path / "output")
    service = tf_data_client.DataService(TrainConfig(silence_timeout_s=1.0), cluster)
    service._fail(DataHostLost("data host algo-2 was lost: connection closed"))
    if handled:  # the training loop saw the failure and closed the service: the watchdog stands down
        service.close("failed", "data host lost")
    # the watchdog fires after silence_timeout_s=1 (or stands down at close): half a second past it, it never will
    exited.wait(1.5 if handled else 3)
    time.sleep(0.2)
    if handled:
        assert codes == [] and not (tmp_path / "output" / "failure").exists()
    else:  # blocked: the watchdog writes the same failure the loop would have, and ends the process non-zero
        assert codes == [1]
        assert (tmp_path / "output" / "failure").read_text().startswith("data host lost: data host algo-2 was lost")


@pytest.mark.slow
def test_a_watchdog_firing_while_the_job_is_being_stopped_reports_the_interruption(tmp_path, monkeypatch):
    from steps.train.core.terminate import TERMINATE

    exited = threading.Event()
    codes = []
    monkeypatch.setattr(tf_data_client.os, "_exit", lambda code: (codes.append(code), exited.set()))
    monkeypatch.setattr(auth, "_loaded", b"s" * 32)
    monkeypatch.setattr(TERMINATE, "event", threading.Event())
    TERMINATE.event.set()  # SIGTERM reached this trainer too: its data host's loss is the stop, not a fault
    cluster = SimpleNamespace(trainer_hosts=("algo-1",), data_hosts=(), current_host="algo-1", output_dir=tmp_path / "output")
    service = tf_data_client.DataService(TrainConfig(silence_timeout_s=1.0), cluster)
    service._fail(DataHostLost("data host algo-2 failed: data host algo-2: terminated: SIGTERM"))
    assert exited.wait(3)
    assert codes == [143]
    failure = (tmp_path / "output" / "failure").read_text()
    assert failure.startswith("interrupted: SIGTERM") and "redoes the epoch it was in" in failure

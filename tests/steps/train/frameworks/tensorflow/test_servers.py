"""A failed host keeps its tf.data.service server untouched until the process ends."""

from __future__ import annotations

import gc

import pytest

from steps.train.frameworks.tensorflow import servers as tf_servers


class Server:
    def __init__(self, log):
        self.log = log

    def stop(self):
        self.log.append("stop")

    def __del__(self):  # as TensorFlow's servers do: dropping the last reference stops it
        self.stop()


def test_a_clean_end_stops_the_server():
    log = []
    tf_servers.end_server(Server(log), clean=True)
    assert log[:1] == ["stop"]


@pytest.mark.slow
def test_after_a_failure_the_server_is_neither_stopped_nor_collected(monkeypatch):
    monkeypatch.setattr(tf_servers, "_LEFT_RUNNING", [])
    log = []
    tf_servers.end_server(Server(log), clean=False)
    gc.collect()
    assert log == [] and len(tf_servers._LEFT_RUNNING) == 1

"""Every frame a declared message: what is sent arrives as the same message, and a malformed frame names its field."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from steps.train.dataplane import messages
from steps.train.dataplane.errors import WireError
from steps.train.dataplane.wire import FrameReader, Kind, send_frame


def _over_loopback(kind: Kind, meta: dict, arrays=()) -> tuple:
    """One frame through a real TCP connection on 127.0.0.1, as `FrameReader` reads it."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    with a, b:
        send_frame(a, kind, meta, arrays)
        return FrameReader(b).read()


def _round_trip(message, inbound):
    return messages.decode(_over_loopback(*message.encode()), inbound)


def test_each_message_arrives_as_it_was_sent():
    pixels = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    batch = _round_trip(
        messages.Batch(
            epoch=3,
            pixels=pixels,
            labels=np.array([1, 2]),
            ids=np.array([7, 9]),
            corrupt=[["s.tar", "m", "bad"]],
            host={"cpus": 2},
        ),
        messages.FROM_DATA_HOST,
    )
    assert isinstance(batch, messages.Batch) and batch.epoch == 3 and batch.host == {"cpus": 2}
    assert (batch.pixels == pixels).all() and batch.ids.tolist() == [7, 9] and batch.corrupt == [["s.tar", "m", "bad"]]
    resume = _round_trip(
        messages.Resume(epoch=1, split={"period": 4, "trainers": [1]}, consumed=np.array([5, 6])), messages.FROM_TRAINER
    )
    assert resume.epoch == 1 and resume.split == {"period": 4, "trainers": [1]} and resume.consumed.tolist() == [5, 6]
    stop = _round_trip(messages.Stop("completed", "", {"metrics.json": b"{}", "model.pt": b"\x00\x01"}), messages.FROM_TRAINER)
    assert stop.status == "completed" and {k: v.tobytes() for k, v in stop.files.items()} == {
        "metrics.json": b"{}",
        "model.pt": b"\x00\x01",
    }
    assert _round_trip(messages.End(epoch=0, samples=12), messages.FROM_DATA_HOST) == messages.End(0, 12, {})
    assert _round_trip(messages.Error("disk full"), messages.FROM_TRAINER) == messages.Error("disk full")


def test_a_kind_reads_as_the_message_of_its_direction():
    assert isinstance(_round_trip(messages.Start(dispatcher="10.0.0.1:5050"), messages.FROM_TRAINER), messages.Start)
    up = _round_trip(messages.WorkerUp(worker="10.0.0.2", samples_per_epoch=40), messages.FROM_DATA_HOST)
    assert up == messages.WorkerUp("10.0.0.2", 40)
    assert _round_trip(messages.IdsQuery(), messages.FROM_TRAINER) == messages.IdsQuery()
    assert _round_trip(messages.Ids(ids=np.array([3])), messages.FROM_DATA_HOST).ids.tolist() == [3]
    # a kind its direction does not declare is named, not guessed at
    assert _round_trip(messages.End(epoch=0, samples=1), messages.FROM_TRAINER) == messages.Other(Kind.END)


@pytest.mark.parametrize(
    "kind, meta, arrays, inbound, match",
    [
        (Kind.END, {"samples": 4}, (), messages.FROM_DATA_HOST, "a END frame lacks its field 'epoch'"),
        (Kind.END, {"epoch": "1", "samples": 4}, (), messages.FROM_DATA_HOST, "field 'epoch' holds str '1', not int"),
        (Kind.END, {"epoch": True, "samples": 4}, (), messages.FROM_DATA_HOST, "field 'epoch' holds bool"),
        (Kind.STOP, {"reason": "x"}, (), messages.FROM_TRAINER, "a STOP frame lacks its field 'status'"),
        (Kind.RESUME, {"epoch": 0, "split": [1]}, (), messages.FROM_TRAINER, "field 'split' holds list"),
        (
            Kind.BATCH,
            {"epoch": 0},
            [("pixels", np.zeros((1, 2, 2, 3), np.uint8)), ("labels", np.zeros(1))],
            messages.FROM_DATA_HOST,
            "a BATCH frame lacks its field 'ids'",
        ),
        (
            Kind.BATCH,
            {"epoch": 0},
            [("pixels", np.zeros((2, 2, 2, 3), np.uint8)), ("labels", np.zeros(1)), ("ids", np.zeros(2))],
            messages.FROM_DATA_HOST,
            r"BATCH frame shapes disagree: pixels uint8\[2, 2, 2, 3\], labels \[1\]",
        ),
        (Kind.REPORT, {"host": 3}, (), messages.FROM_DATA_HOST, "field 'host' holds int 3, not dict"),
        (Kind.HELLO, {"host": "d"}, (), messages.FROM_DATA_HOST, "a HELLO frame lacks its field 'nonce'"),
    ],
)
def test_a_malformed_frame_is_a_wire_error_naming_the_field(kind, meta, arrays, inbound, match):
    with pytest.raises(WireError, match=match):
        messages.decode(_over_loopback(kind, meta, arrays), inbound)


def test_a_start_without_the_field_its_reader_needs_says_which():
    start = _round_trip(messages.Start(ray="10.0.0.1:6379"), messages.FROM_TRAINER)
    assert start.require("ray") == "10.0.0.1:6379"
    with pytest.raises(WireError, match="a START frame lacks its field 'dispatcher'"):
        start.require("dispatcher")

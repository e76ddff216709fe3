"""A trainer that lost a peer ends as the peer's end: one line naming the peer, no stack of its own."""

from __future__ import annotations

import pytest

from steps.common.errors import EXIT_INTERNAL_ERROR, run_step
from steps.train.dataplane.errors import DataHostLost, HostLost


@pytest.mark.parametrize(
    "error",
    [
        DataHostLost("data host algo-2 (127.1.1.2) was lost in epoch 0: data host algo-2 sent nothing for 5 s"),
        HostLost("host algo-3 was lost: host algo-3 sent nothing for 5 s"),
    ],
)
def test_a_lost_peer_ends_the_step_in_one_line(tmp_path, capsys, error):
    def lose():
        raise error

    assert run_step(lose, output_dir=tmp_path) == EXIT_INTERNAL_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip() == f"ERROR {error.one_line()}"
    assert (tmp_path / "failure").read_text().strip() == error.one_line()

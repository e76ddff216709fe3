"""`hetero run` stopped by SIGINT, SIGTERM or SIGHUP before any job starts its hosts (the CLI loading, the definition
compiling, the sample data, inside Shard): exit 128 + the signal, one line, nothing left (`tests.support.run_command.stop_at`).
No cluster runs here: these go beside the cluster tests (tests/conftest.py ONE_HOST_TESTS); the stops once a job runs
are in tests/e2e/test_run_command.py."""

from __future__ import annotations

import pytest

from tests.support.run_command import stop_at, stops

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(**stops(early=True))
def test_a_signal_before_any_job_ends_the_run_in_one_line_leaving_nothing(tmp_path, framework, moment, sig):
    stop_at(tmp_path, framework, moment, sig)

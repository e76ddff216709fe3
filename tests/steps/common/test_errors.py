import errno
import os

import pytest

from steps.common.errors import EXIT_INTERNAL_ERROR, EXIT_USER_ERROR, HeteroError, UserError, run_step, storage_error


def fail(exc):
    def main():
        raise exc

    return main


def test_user_error_writes_one_line_everywhere(tmp_path, capsys):
    message = tmp_path / "message"
    code = run_step(
        fail(UserError("x" * 2000 + " bad value\nsecond line", headline="bad input")),
        output_dir=tmp_path / "out",
        exit_message=message,
    )
    assert code == EXIT_USER_ERROR
    failure = (tmp_path / "out" / "failure").read_text()
    assert failure.startswith("bad input: xxx") and len(failure.strip()) == 1024
    assert message.read_text() == failure
    assert "Traceback" not in capsys.readouterr().err


def test_internal_error_keeps_the_traceback(tmp_path, capsys):
    assert run_step(fail(ZeroDivisionError("boom")), output_dir=tmp_path) == EXIT_INTERNAL_ERROR
    assert (tmp_path / "failure").read_text().startswith("internal error: ZeroDivisionError: boom")
    assert "Traceback" in capsys.readouterr().err


def test_a_peers_end_is_one_line_and_a_failure(tmp_path, capsys):
    class PeerStopped(HeteroError):
        headline = "job stopped"
        peer_end = True

    assert (
        run_step(fail(PeerStopped("trainer algo-1: out of memory (STOP from trainer algo-1)")), output_dir=tmp_path)
        == EXIT_INTERNAL_ERROR
    )
    assert capsys.readouterr().err == "ERROR job stopped: trainer algo-1: out of memory (STOP from trainer algo-1)\n"
    assert (tmp_path / "failure").read_text() == "job stopped: trainer algo-1: out of memory (STOP from trainer algo-1)\n"


def test_success_writes_nothing(tmp_path):
    assert run_step(lambda: None, output_dir=tmp_path) == 0
    assert not (tmp_path / "failure").exists()


@pytest.mark.parametrize(
    "code,cause",
    [
        (errno.ENOSPC, "no space left on the device (ENOSPC)"),
        (errno.EROFS, "the file system is read-only (EROFS)"),
        (errno.EACCES, "permission denied (EACCES)"),
    ],
)
def test_a_full_disk_or_read_only_folder_is_one_line_naming_the_path_and_cause(tmp_path, capsys, code, cause):
    def step():
        try:
            raise OSError(code, os.strerror(code), "/data/out/shard-00001.tar")
        except OSError as exc:
            raise RuntimeError("writer thread failed") from exc  # wrapped, as a thread pool or a library does

    assert run_step(step, output_dir=tmp_path) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert err == f"ERROR storage: cannot write /data/out/shard-00001.tar: {cause}; {err.split('; ', 1)[1]}"
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "failure").read_text().startswith("storage: cannot write /data/out/shard-00001.tar")


def test_other_os_errors_stay_internal_with_their_traceback(tmp_path, capsys):
    def step():
        raise OSError(errno.ECONNRESET, "reset")

    assert run_step(step, output_dir=tmp_path) == EXIT_INTERNAL_ERROR
    assert "Traceback" in capsys.readouterr().err
    assert storage_error(ValueError("x")) is None


def test_a_full_volume_in_a_job_names_it_and_the_parameter_that_sizes_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(tmp_path))  # inside a job's container: its base folder is on the volume

    def step():
        raise OSError(errno.ENOSPC, "No space left on device")  # write() errors carry no file name

    assert run_step(step, output_dir=tmp_path / "output") == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert err.startswith("ERROR storage: cannot write a file: the job's storage volume is full (") and f" at {tmp_path})" in err
    assert (
        err.endswith(
            "(ENOSPC); raise the VolumeSizeGB parameter (hetero run --volume-gb), or stream the training shards "
            "(InputMode=FastFile)"
        )
        and len(err.splitlines()) == 1
    )

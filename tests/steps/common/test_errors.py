from steps.common.errors import EXIT_INTERNAL_ERROR, EXIT_USER_ERROR, UserError, run_step


def fail(exc):
    def main():
        raise exc
    return main


def test_user_error_writes_one_line_everywhere(tmp_path, capsys):
    message = tmp_path / "message"
    code = run_step(fail(UserError("x" * 2000 + " bad value\nsecond line", headline="bad input")), output_dir=tmp_path / "out",
                    exit_message=message)
    assert code == EXIT_USER_ERROR
    failure = (tmp_path / "out" / "failure").read_text()
    assert failure.startswith("bad input: xxx") and len(failure.strip()) == 1024
    assert message.read_text() == failure
    assert "Traceback" not in capsys.readouterr().err


def test_internal_error_keeps_the_traceback(tmp_path, capsys):
    assert run_step(fail(ZeroDivisionError("boom")), output_dir=tmp_path) == EXIT_INTERNAL_ERROR
    assert (tmp_path / "failure").read_text().startswith("internal error: ZeroDivisionError: boom")
    assert "Traceback" in capsys.readouterr().err


def test_success_writes_nothing(tmp_path):
    assert run_step(lambda: None, output_dir=tmp_path) == 0
    assert not (tmp_path / "failure").exists()

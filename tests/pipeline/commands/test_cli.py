"""`hetero` on bad input: one clear line naming the value and the fix, no traceback."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.cli import main
from pipeline.commands.parameters import parameter_layers
from pipeline.commands.run import validate_run
from pipeline.commands.workload import check_workload, deployed_code_dirs
from pipeline.graph import resolve_parameters
from pipeline.local.runner import LocalRunner
from steps.common.errors import UserError
from tests.support.stop import run_stop, signalled  # noqa: F401 - fixture


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--input", "/no/such/folder"], r"InputData '/no/such/folder' \(--input\) is not a folder.*<class>"),
        (["--dnn-instance-type", "ml.p9.mega"], r"ml\.p9\.mega"),
        (["--epochs", "0"], r"Epochs=0 must be >= 1"),
        (["--epochs", "two"], r"Epochs='two' is not an int"),
        (["--param", "DataDistribution=Striped"], r"allowed values are ShardedByS3Key, FullyReplicated"),
        (["--precision", "fp8"], r"Precision='fp8': allowed values are auto, fp32, bf16, fp16"),
        (["--compile", "max"], r"Compile='max': allowed values are off, on"),
        (["--param", "NoSuchThing=1"], r"unknown parameter 'NoSuchThing'"),
        (["--param", "Epochs"], r"write Name=Value"),
        (["--shard-size-mb", "500"], r"ShardSizeMB=500.0 must be between 1 and 128"),
        (["--workload-options", "[1, 2]"], r"must be a JSON object"),
        (["--workload-options", "{bad"], r"is not JSON"),
    ],
)
def test_bad_parameters_fail_before_any_work(tmp_path, capsys, argv, expected):
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path), *argv)
    assert code == 2
    assert "Traceback" not in err
    assert err.startswith("error: ")
    assert __import__("re").search(expected, err), err
    assert not list(tmp_path.iterdir()), "work started despite bad input"


def test_environment_and_config_file_layers(tmp_path, capsys, monkeypatch):
    config = tmp_path / "params.json"
    config.write_text('{"Epochs": 0}')
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--config", str(config))
    assert code == 2 and "Epochs=0" in err
    monkeypatch.setenv("HETERO_PARAM_Epochs", "-3")  # env beats the file
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--config", str(config))
    assert code == 2 and "Epochs=-3" in err
    monkeypatch.setenv("HETERO_PARAM_DnnInstanceType", "ml.nope")  # the command line beats env
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--epochs", "1", "--dnn-instance-type", "ml.zzz")
    assert code == 2 and "ml.zzz" in err and "ml.nope" not in err


def test_params_lists_every_parameter(capsys):
    assert main(["params"]) == 0
    out = capsys.readouterr().out
    for name in (
        "InputData",
        "DataInstanceCount",
        "DnnInstanceType",
        "DataDistribution",
        "InputMode",
        "ShardSizeMB",
        "RunBaseline",
    ):
        assert name in out


def test_a_prices_file_makes_a_new_instance_type_known(tmp_path):
    prices = tmp_path / "prices.json"
    prices.write_text('{"prices": {"ml.p9.mega": 99.0}}')
    params = resolve_parameters({"DnnInstanceType": "ml.p9.mega"})
    with pytest.raises(UserError, match="ml.p9.mega"):
        validate_run(params)
    args = cli.build_parser().parse_args(["run", "--prices", str(prices), "--dnn-instance-type", "ml.p9.mega"])
    params = resolve_parameters(*parameter_layers(args))
    assert params["PriceOverrides"] == str(prices)  # the file, which the Evaluate step reads as an input
    validate_run(params)  # known now: no error


@pytest.mark.parametrize("doc", ['{"prices": {"c5.xlarge": 0.2}}', '{"ml.c5.xlarge": 0.2}', "[1, 2]", "{bad json"])
def test_a_bad_price_file_shows_the_expected_schema(tmp_path, capsys, doc):
    prices = tmp_path / "prices.json"
    prices.write_text(doc)
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--prices", str(prices))
    assert code == 2 and "Traceback" not in err and str(prices) in err
    assert '{"prices": {"ml.<type>": <USD per hour>, ...}}' in err and "hetero prices refresh" in err
    assert not (tmp_path / "w").exists()


def test_a_refreshed_100_type_price_file_is_taken_by_run_and_plan(tmp_path, capsys):
    from tests.support.metrics import input_bound_run, write_json
    from tests.support.prices import refreshed_price_file

    prices = refreshed_price_file(tmp_path / "prices-override.json", prices={"ml.p9.mega": 99.0})
    assert len(prices.read_text()) > 2048  # over any request member's limit: it travels as a file
    args = cli.build_parser().parse_args(["run", "--prices", str(prices), "--dnn-instance-type", "ml.p9.mega"])
    validate_run(resolve_parameters(*parameter_layers(args)))
    hetero = write_json(tmp_path / "h" / "metrics.json", input_bound_run())
    assert main(["plan", "--metrics", str(hetero), "--prices", str(prices), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["unpriced"] == [] and str(prices) in plan["prices"]["source"]  # every catalogue type priced from the file


@pytest.mark.parametrize(
    "module,expected",
    [
        (
            "no_such_pkg.workload",
            r"workload module 'no_such_pkg.workload' is not in the code the hosts get: no "
            r"no_such_pkg/workload.py in steps/ or the code folders \(none\); ship it with --code-dir DIR",
        ),
        (
            "steps.train.workload",
            r"workload module 'steps.train.workload' \(.*steps/train/workload.py\) defines no WORKLOAD: add "
            r"WORKLOAD = ",
        ),
        ("not a module", r"workload module 'not a module' is not in the code the hosts get"),
    ],
)
def test_an_unknown_workload_is_refused_before_any_work(tmp_path, capsys, module, expected):
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--workload", module)
    assert code == 2 and "Traceback" not in err and err.startswith("error: bad workload: ")
    assert __import__("re").search(expected, err), err
    assert not (tmp_path / "w").exists()


def _user_code(tmp_path, requirements: str | None = None):
    """A workload outside the repository, in a package of a user's folder (a copy of tests/fixtures/tiny_workload.py)."""
    folder = tmp_path / "usercode"
    (folder / "my_workloads").mkdir(parents=True)
    (folder / "my_workloads" / "__init__.py").write_text("")
    shutil.copy(Path(__file__).parents[2] / "fixtures" / "tiny_workload.py", folder / "my_workloads" / "tiny.py")
    if requirements is not None:
        (folder / "requirements.txt").write_text(requirements)
    return folder


def test_a_workload_in_a_folder_not_named_is_refused_before_any_work_naming_the_folder(tmp_path, capsys, monkeypatch):
    """Hosts import what ships, never the caller's folder: a workload found here but in no code folder would fail on
    every host (and in SageMaker), so the run stops before Shard and says which folder to name."""
    folder = _user_code(tmp_path)
    monkeypatch.chdir(folder)
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--workload", "my_workloads.tiny")
    assert (
        code == 2
        and err.count("\n") == 1
        and err.startswith("error: bad workload: workload module 'my_workloads.tiny' is not in the code the hosts get")
    ), err
    assert f"ship it with --code-dir DIR, DIR being the folder that holds my_workloads/ (here: {folder})" in err
    assert not (tmp_path / "w").exists()
    check_workload("my_workloads.tiny", code_dirs=(folder,))  # named: it ships
    check_workload("steps.train.workloads.shapes")  # the project's own always ships
    with pytest.raises(UserError, match=r"not in the code the hosts get.*deploy it with -c hetero:codeDirs='\[\"DIR\"\]'"):
        check_workload("my_workloads.tiny", deployed=True)
    with pytest.raises(UserError, match=r"\(.*usercode/my_workloads/__init__.py\) defines no WORKLOAD"):
        check_workload("my_workloads", code_dirs=(folder,))
    # hetero start: what `cdk deploy` from this folder ships, its cdk.json's hetero:codeDirs (relative to it)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"hetero:codeDirs": ["usercode"]}}))
    assert deployed_code_dirs() == (Path("usercode"),)
    check_workload("my_workloads.tiny", code_dirs=deployed_code_dirs(), deployed=True)


@pytest.mark.parametrize(
    "files, folders, expected",
    [
        (["mine/steps/x.py"], ["mine"], r"code folder '.*/mine' holds a steps/ of its own"),
        (
            ["a/requirements.txt", "b/requirements.txt"],
            ["a", "b"],
            r"code folder '.*/b' ships requirements.txt, which '.*/a' ships too",
        ),
    ],
)
def test_code_folders_that_would_clash_in_the_code_are_refused(tmp_path, capsys, files, folders, expected):
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    argv = [a for f in folders for a in ("--code-dir", str(tmp_path / f))]
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), *argv)
    assert code == 2 and err.startswith("error: bad code folder: "), err
    assert __import__("re").search(expected, err), err
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--code-dir", str(tmp_path / "nope"))
    assert code == 2 and f"code folder '{tmp_path / 'nope'}' is not a folder" in err


def test_isolated_requirements_that_need_the_index_are_refused_before_shard(tmp_path, capsys):
    folder = _user_code(tmp_path, requirements="tiny-dep==0.0.1\n")
    code, err = run_cli(
        capsys,
        "run",
        "--work-dir",
        str(tmp_path / "w"),
        "--network-isolation",
        "--code-dir",
        str(folder),
        "--workload",
        "my_workloads.tiny",
    )
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(
        f"error: requirements need the network: {folder / 'requirements.txt'} needs the network, but the "
        "training jobs run with network isolation (no route to a package index): it does not say "
        "--no-index, so pip asks the package index about every requirement. Fix: vendor the wheels"
    ), err
    assert not list((tmp_path / "w").glob("local-*")) and not (tmp_path / "w" / "sample-data").exists()  # nothing ran


@pytest.mark.slow
def test_a_request_over_a_service_limit_is_refused_before_any_step_runs(tmp_path, capsys):
    """A folder path that makes the Shard step's --input-source argument longer than 256 characters: refused when the run
    starts, naming the parameter, its length, the limit and the fix; no step ran and no sample data was generated."""
    deep = tmp_path.joinpath(*["d" * 60] * 4)
    deep.mkdir(parents=True)
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--input", str(deep))
    assert code == 2 and "Traceback" not in err
    length = len(f"s3://local{deep}/")
    assert "step Shard: " in err and f"from parameter InputData ({length} characters)" in err, err
    assert "CreateProcessingJob allows at most 256: use a shorter S3 prefix (or local folder path)" in err
    assert not list((tmp_path / "w").glob("local-*")) and not (tmp_path / "w" / "sample-data").exists()


def test_plan_needs_an_execution_or_metrics_and_says_why_it_cannot_plan(tmp_path, capsys):
    from tests.support.metrics import metrics, write_json

    assert main(["plan", "--results", str(tmp_path)]) == 2
    assert "name an execution id" in capsys.readouterr().err
    homogeneous = write_json(tmp_path / "m" / "metrics.json", metrics(case="tf_homogeneous"))
    assert main(["plan", "--metrics", str(homogeneous)]) == 2
    assert capsys.readouterr().out.startswith("no plan: the plan is made from a heterogeneous run")
    assert main(["plan", "nope", "--results", str(tmp_path)]) == 2
    assert "no heterogeneous_metrics.json for execution 'nope'" in capsys.readouterr().err


def test_plan_from_metrics_files_takes_the_baseline_runs_measured_rate_for_staying_homogeneous(tmp_path, capsys):
    from steps.evaluate.plan import MEASURED_BASELINE
    from tests.support.metrics import input_bound_run, metrics, write_json

    hetero = write_json(tmp_path / "h" / "metrics.json", input_bound_run())
    groups = [{"name": "dnn_group", "instance_type": "ml.g5.xlarge", "count": 1, "role": "trainer"}]
    baseline = write_json(
        tmp_path / "b" / "metrics.json", metrics(case="tf_homogeneous", instance_groups=groups, samples_per_second=900.0)
    )
    assert main(["plan", "--metrics", str(hetero), "--baseline", str(baseline), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    stay = next(c for c in plan["candidates"] if (c["trainer"], c["trainers"], c["data"]) == ("ml.g5.xlarge", 1, None))
    assert stay["notes"] == [MEASURED_BASELINE] and stay["rate_source"] == "measured"
    assert stay["samples_per_second"] == pytest.approx(json.loads(baseline.read_text())["samples_per_second"])
    assert main(["plan", "some-execution", "--baseline", str(baseline)]) == 2
    assert "--baseline goes with --metrics" in capsys.readouterr().err


def test_plan_takes_several_runs_of_one_workload_on_other_gpus_and_refuses_mixed_workloads(tmp_path, capsys):
    from tests.support.metrics import input_bound_run, write_json

    g4dn = [
        {"name": "data_group", "instance_type": "ml.c5.xlarge", "count": 1, "role": "data"},
        {"name": "dnn_group", "instance_type": "ml.g4dn.xlarge", "count": 1, "role": "trainer"},
    ]
    config = {"workload": "image_classification", "workload_options": {}}
    g5_file = write_json(tmp_path / "g5" / "metrics.json", input_bound_run(config=config))
    g4dn_file = write_json(tmp_path / "g4dn" / "metrics.json", input_bound_run(config=config, instance_groups=g4dn))
    assert main(["plan", "--metrics", str(g5_file), "--metrics", str(g4dn_file), "--streams", "2"]) == 0
    out = capsys.readouterr().out
    assert f"runs: {g5_file}, {g4dn_file}" in out and "fallback 2: " in out
    header = next(line for line in out.splitlines() if line.startswith("cluster "))  # the frontier's, after basis and prices
    assert "rate" in header.split() and ("predicted" in out or "measured" in out)
    assert main(["plan", "--metrics", str(g5_file), "--metrics", str(g4dn_file), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert {c["trainer"].split(".")[1] for c in plan["candidates"]} == {"g5", "g4dn"} and len(plan["fallbacks"]) == 3
    other = write_json(tmp_path / "r" / "metrics.json", input_bound_run(config={**config, "workload": "resnet50"}))
    assert main(["plan", "--metrics", str(g5_file), "--metrics", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"{g5_file} ran workload 'image_classification' and {other} ran 'resnet50'" in err


@pytest.mark.slow
def test_report_writes_the_newest_executions_page_or_the_one_named(tmp_path, capsys):
    from steps.evaluate import evaluate as ev
    from tests.support.metrics import metrics, write_json

    store = tmp_path / "store"
    hetero = write_json(tmp_path / "h" / "metrics.json", metrics())
    for execution in ("first", "second"):
        ev.evaluate(
            heterogeneous=hetero, baseline=None, output=tmp_path / execution, execution_id=execution, store_uri=str(store)
        )
    capsys.readouterr()
    assert main(["report", "--results", str(store), "--output", str(tmp_path / "newest.html")]) == 0
    assert "hetero report: second" in (tmp_path / "newest.html").read_text()
    assert main(["report", "first", "--results", str(store), "--output", str(tmp_path / "first.html")]) == 0
    assert "hetero report: first" in (tmp_path / "first.html").read_text()
    assert capsys.readouterr().out == f"report: {tmp_path / 'newest.html'}\nreport: {tmp_path / 'first.html'}\n"
    assert main(["report", "--results", str(tmp_path / "empty")]) == 2
    assert "no executions with results" in capsys.readouterr().err


@pytest.mark.slow
def test_a_read_only_work_folder_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    import errno

    def read_only(self):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "runs" / "local-1"))

    monkeypatch.setattr(LocalRunner, "run", read_only)
    # ten sample images, not the default 3,000 (seconds of drawing): what fails is the run that follows them
    assert main(["run", "--work-dir", str(tmp_path / "runs"), "--sample-images", "10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: storage: cannot write {tmp_path / 'runs' / 'local-1'}: the file system is read-only (EROFS)")
    assert "Traceback" not in err


def test_run_network_isolation_runs_the_pipeline_compiled_as_deployed_isolated(monkeypatch, capsys):
    seen = []

    def capture(self, params, options):
        seen.append(options)
        raise UserError("captured", headline="test")

    monkeypatch.setattr(LocalRunner, "__init__", capture)
    assert main(["run", "--network-isolation"]) == 2 and main(["run"]) == 2
    assert [o.network_isolation for o in seen] == [True, False]


@pytest.mark.usefixtures("run_stop")
def test_a_stop_a_library_turns_into_its_own_error_ends_the_run_as_the_stop(monkeypatch, capsys):
    """SIGINT while the SDK's models load: pydantic-core raises a ``SchemaError`` around the stop's raise. The CLI
    exits 130 with the stop's one line, not the error's stack."""

    def compiling(self, params, options):
        try:
            signalled(signal.SIGINT)
        except KeyboardInterrupt as exc:
            raise RuntimeError('Error building "definitions" validator') from exc

    monkeypatch.setattr(LocalRunner, "__init__", compiling)
    code, err = run_cli(capsys, "run")
    assert (code, err) == (130, "interrupted (SIGINT); all hosts stopped\n")


def test_every_hetero_command_the_code_and_docs_name_exists():
    """A message or doc line that tells a user to run `hetero <command> --<option>` names a real one (deployment is
    `npx cdk deploy`, not a hetero command)."""
    import argparse
    import re
    from pathlib import Path

    root = Path(__file__).parents[3]
    subparsers = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = {name: {o for a in p._actions for o in a.option_strings} for name, p in subparsers.choices.items()}
    prose = {"failed", "data"}  # the base error's headline "hetero failed"; "a hetero data service"
    named = re.compile(r"(?<![\w./:-])hetero ([a-z][a-z-]*)(?: (--[a-z][a-z-]*))?")
    files = [
        root / "README.md",
        root / "app.py",
        *(
            p
            for d in ("docs", "pipeline", "steps", "infra", "images", "bench")
            for p in sorted((root / d).rglob("*"))
            if p.suffix in (".py", ".md")
        ),
    ]
    wrong = []
    for path in files:
        for m in named.finditer(path.read_text(encoding="utf-8")):
            command, option = m.groups()
            if command in prose:
                continue
            if command not in options or (option and option not in options[command]):
                wrong.append(f"{path.relative_to(root)}: {m.group(0)!r}")
    assert not wrong, wrong


@pytest.mark.parametrize("framework", ["tensorflow", "ray"])
def test_a_framework_this_environment_lacks_is_named_with_the_command_that_adds_it(framework, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == framework else real(name, *a))
    assert main(["run", "--framework", framework]) == 2
    err = capsys.readouterr().err
    assert f'make run ARGS="--framework {framework}"' in err and f"[{framework}]" in err


def test_plan_refuses_a_stream_count_below_one(tmp_path, capsys):
    from tests.support.metrics import input_bound_run, write_json

    hetero = write_json(tmp_path / "h" / "metrics.json", input_bound_run())
    assert main(["plan", "--metrics", str(hetero), "--streams", "0"]) == 2
    assert "streams 0: give a positive number" in capsys.readouterr().err

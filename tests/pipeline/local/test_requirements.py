"""The code's requirements.txt: installed on every emulated host into a folder of its own, as the training toolkit
installs it in the container, and refused under network isolation when it would need the network (pipeline.local.requirements)."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import pytest

from pipeline import storage
from pipeline.code import build_code_tarball
from pipeline.emulator import image_guard
from pipeline.emulator.job import SITE_PACKAGES, EmulatedJob
from pipeline.local.requirements import FSX_NO_NAT, NETWORK_ISOLATION, image_python, network_need, refuse_networked
from steps.common.errors import UserError
from tests.fixtures.wheels import write_wheel
from tests.support.harness import training_request

VENDORED = "--no-index --find-links wheels\n"


def _code(tmp_path: Path, requirements: str, *, wheels: dict | None = None) -> Path:
    """A user's code folder: requirements.txt and, under wheels/, the vendored wheels (name -> modules)."""
    folder = tmp_path / "usercode"
    folder.mkdir(exist_ok=True)
    (folder / "requirements.txt").write_text(requirements)
    for name, modules in (wheels or {}).items():
        write_wheel(folder / "wheels", name, "0.0.1", modules)
    return folder


def _refusal(tmp_path: Path, folder: Path) -> str | None:
    tarball = build_code_tarball(destination=tmp_path / "out" / "code.tar.gz", code_dirs=[folder])
    try:
        refuse_networked(tarball, python="3.12", origin=str(folder / "requirements.txt"))
    except UserError as exc:
        return exc.one_line()
    return None


@pytest.mark.slow
def test_vendored_wheels_with_no_index_pass_and_a_missing_one_is_refused_with_pips_reason(tmp_path):
    folder = _code(tmp_path, VENDORED + "tiny-dep==0.0.1\n", wheels={"tiny-dep": {"tiny_dep.py": "X = 1\n"}})
    assert _refusal(tmp_path, folder) is None
    (folder / "requirements.txt").write_text(VENDORED + "tiny-dep==0.0.1\nother-dep\n")
    message = _refusal(tmp_path, folder)
    assert message.startswith(
        f"requirements need the network: {folder / 'requirements.txt'} needs the network, but the "
        "training jobs run with network isolation"
    ), message
    assert "the shipped wheels do not satisfy it for Python 3.12: " in message and "other-dep" in message
    assert "--no-index --find-links wheels" in message and "drop network isolation" in message  # the fix
    assert "\n" not in message


@pytest.mark.parametrize(
    "requirements, reason",
    [
        ("tiny-dep\n", "it does not say --no-index, so pip asks the package index about every requirement"),
        (VENDORED + "-i https://pypi.org/simple\ntiny-dep\n", "requirements.txt:2 names an index (-i https://pypi.org/simple)"),
        (VENDORED + "--extra-index-url=https://x/simple tiny-dep\n", "requirements.txt:2 names an index (--extra-index-url"),
        ("--no-index -f /tmp/wheels\ntiny-dep\n", "requirements.txt:1 finds links outside the shipped code (-f /tmp/wheels)"),
        ("--no-index --find-links ../wheels\ntiny-dep\n", "finds links outside the shipped code (--find-links ../wheels)"),
        ("--no-index --find-links https://example.com/wheels/\ntiny-dep\n", "finds links outside the shipped code"),
        (VENDORED + "tiny-dep @ https://example.com/tiny_dep-0.0.1-py3-none-any.whl\n", "requirements.txt:2 installs from a URL"),
        (VENDORED + "git+https://github.com/x/y.git#egg=y\n", "installs from a URL (git+https://github.com/x/y.git#egg=y)"),
        (VENDORED + "-r more.txt\n", "requirements.txt:2 reads 'more.txt', which is not a file of the shipped code"),
    ],
)
def test_what_would_reach_for_the_network_is_named_by_line(tmp_path, requirements, reason):
    folder = _code(tmp_path, requirements, wheels={"tiny-dep": {"tiny_dep.py": "X = 1\n"}})
    message = _refusal(tmp_path, folder)
    assert message is not None and reason in message, message


@pytest.mark.slow
def test_nested_files_follow_the_same_rules_and_no_index_anywhere_counts(tmp_path):
    folder = _code(
        tmp_path, "-r more/reqs.txt\n# a comment\ntiny-dep  # pinned below\n", wheels={"tiny-dep": {"tiny_dep.py": ""}}
    )
    (folder / "more").mkdir()
    (folder / "more" / "reqs.txt").write_text("--no-index \\\n  --find-links ../wheels\ntiny-dep==0.0.1\n")
    no_index, reasons = network_need(folder / "requirements.txt", folder)
    assert no_index and reasons == []
    assert _refusal(tmp_path, folder) is None
    (folder / "more" / "reqs.txt").write_text("--no-index\n--index-url https://pypi.org/simple\n")
    assert "more/reqs.txt:2 names an index" in _refusal(tmp_path, folder)


def test_a_setup_py_at_the_root_is_refused_the_toolkit_would_pip_install_it(tmp_path):
    folder = _code(tmp_path, VENDORED)
    (folder / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    assert "ships a setup.py at its root, so the training toolkit runs `pip install .`" in _refusal(tmp_path, folder)


def test_the_image_python_comes_from_its_manifest():
    assert (
        image_python(
            training_request(code_uri="s3://local/x", output=Path("/o"), groups=[], channels=[], hyperparameters={})[
                "AlgorithmSpecification"
            ]["TrainingImage"]
        )
        == "3.12"
    )
    assert (
        image_python("123456789012.dkr.ecr.eu-west-1.amazonaws.com/mine:1")
        == f"{sys.version_info.major}.{sys.version_info.minor}"
    )


PROBE = """import importlib.metadata, json, moto, tiny_dep
print("PROBE " + json.dumps({"moto": moto.__file__, "version": importlib.metadata.version("moto"), "dep": tiny_dep.X}), flush=True)
"""


@pytest.mark.slow
def test_each_host_installs_the_requirements_into_its_own_folder_and_the_guard_lets_it_import_them(tmp_path):
    """The training bootstrap (the toolkit's entry_point.install) pip-installs the code's requirements.txt before the entry
    point, as in the container; here into the host's own folder, never this machine's environment. A package the image
    lacks (moto, refused to every host otherwise) is the job's own once its requirements installed it."""
    request = training_request(
        code_uri="s3://local/x",
        output=tmp_path / "out",
        groups=[("train", "ml.g5.xlarge", 2)],
        channels=[],
        hyperparameters={"framework": "pytorch"},
    )
    manifest = image_guard.manifest_for(request["AlgorithmSpecification"]["TrainingImage"])
    assert "moto" in image_guard.refused(manifest)  # the guard would refuse it: the job's own install must lift that
    folder = _code(
        tmp_path,
        VENDORED + "moto==0.0.1\ntiny-dep\n",
        wheels={"moto": {"moto/__init__.py": ""}, "tiny-dep": {"tiny_dep.py": "X = 7\n"}},
    )
    (folder / "probe.py").write_text(PROBE)
    code = build_code_tarball(destination=tmp_path / "code.tar.gz", code_dirs=[folder])
    request["HyperParameters"].update(sagemaker_program="probe.py", sagemaker_submit_directory=storage.uri(code))
    before = metadata.version("moto")
    lines = []
    job = EmulatedJob(
        name="req",
        request=request,
        job_dir=tmp_path / "job",
        timeout_s=240,
        on_line=lambda host, line: lines.append((host.name, line)),
        echo=lambda line: lines.append(("", line)),
    )
    with job:
        job.start()
        result = job.wait()
    assert result.ok, (result.failure, lines)
    probes = {host: json.loads(line[len("PROBE ") :]) for host, line in lines if line.startswith("PROBE ")}
    assert set(probes) == {"algo-1", "algo-2"}
    for host, probe in probes.items():
        assert probe == {
            "moto": str(tmp_path / "job" / SITE_PACKAGES / host / "moto" / "__init__.py"),
            "version": "0.0.1",
            "dep": 7,
        }, probe
    assert metadata.version("moto") == before != "0.0.1"  # this machine's environment is untouched


def test_each_reason_the_jobs_are_offline_is_named_with_its_way_out(tmp_path):
    folder = _code(tmp_path, "tiny-dep\n")
    tarball = build_code_tarball(destination=tmp_path / "out" / "code.tar.gz", code_dirs=[folder])
    with pytest.raises(UserError) as caught:
        refuse_networked(tarball, python="3.12", origin="requirements.txt", offline=(NETWORK_ISOLATION, FSX_NO_NAT))
    message = caught.value.one_line()
    assert (
        "but the training jobs run with network isolation and run in the FSx for Lustre VPC (hetero:fsx), whose subnets "
        "have no NAT gateway (no route to a package index)"
    ) in message, message
    assert message.endswith(
        ", or drop network isolation and deploy without hetero:fsx (the jobs then run outside a VPC "
        "and read their shards from S3)"
    ), message
    (folder / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    tarball = build_code_tarball(destination=tmp_path / "again" / "code.tar.gz", code_dirs=[folder])
    with pytest.raises(UserError, match=r"cannot reach \(they run in the FSx for Lustre VPC .*or deploy without hetero:fsx"):
        refuse_networked(tarball, python="3.12", origin="requirements.txt", offline=(FSX_NO_NAT,))

import gzip
import json
import tarfile

import pytest

from pipeline.code import STEPS_DIR, build_code_tarball
from steps.common.errors import UserError
from tests.support.stacks import synthesise


def test_two_builds_are_byte_identical(tmp_path):
    first = build_code_tarball(source=STEPS_DIR, destination=tmp_path / "a" / "code.tar.gz").read_bytes()
    second = build_code_tarball(source=STEPS_DIR, destination=tmp_path / "b" / "code.tar.gz").read_bytes()
    assert first == second


def test_archive_is_script_mode_tar_gz_with_steps_at_its_root(tmp_path):
    source = tmp_path / "steps"
    (source / "train" / "__pycache__").mkdir(parents=True)
    (source / "train" / "launcher.py").write_text("print('hi')\n")
    (source / "train" / "__pycache__" / "launcher.cpython-311.pyc").write_bytes(b"\0")
    (source / "common.py").write_text("")
    (source / "stale.pyc").write_bytes(b"\0")
    archive = build_code_tarball(source=source, destination=tmp_path / "out" / "code.tar.gz")
    assert archive.read_bytes()[:2] == b"\x1f\x8b" and gzip.open(archive).read()  # gzip, not zip
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["steps/common.py", "steps/train/launcher.py"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {(0, 0, 0, "", "", 0o644)}


def test_the_real_entry_points_are_packed(tmp_path):
    with tarfile.open(build_code_tarball(source=STEPS_DIR, destination=tmp_path / "code.tar.gz"), "r:gz") as tar:
        names = tar.getnames()
    assert {"steps/train/launcher.py", "steps/shard/shard.py", "steps/evaluate/evaluate.py", "steps/evaluate/prices.json"} <= set(
        names
    )
    assert names == sorted(names) and not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_asset_is_the_file_not_a_zipped_directory(synth_default):
    assets = [
        p for p in synth_default.outdir.iterdir() if p.name.startswith("asset.") and p.suffix != ".json"
    ]  # not the {} prices
    assert [p.suffixes[-2:] for p in assets] == [[".tar", ".gz"]]
    assert (
        assets[0].read_bytes()
        == build_code_tarball(source=STEPS_DIR, destination=synth_default.outdir.parent / "again" / "code.tar.gz").read_bytes()
    )


def test_code_folders_ship_at_the_root_without_hidden_files_caches_or_the_work_folder(tmp_path):
    """Like the SageMaker SDK's source_dir: a folder's contents land at the code's root (DIR/my_pkg/w.py ships
    my_pkg.w), beside steps/; what a folder keeps for itself (.git, .venv, .env, caches, the runs) does not ship."""
    mine = tmp_path / "mine"
    for name in (
        "my_pkg/__init__.py",
        "my_pkg/w.py",
        "requirements.txt",
        "wheels/x-1-py3-none-any.whl",
        ".env",
        ".git/HEAD",
        ".venv/lib/x.py",
        "my_pkg/__pycache__/w.cpython-311.pyc",
        "runs/local-1/metrics.json",
    ):
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_text(name)
    archive = build_code_tarball(destination=tmp_path / "code.tar.gz", code_dirs=[mine], exclude=[mine / "runs"])
    with tarfile.open(archive, "r:gz") as tar:
        names = tar.getnames()
        assert tar.extractfile("my_pkg/w.py").read() == b"my_pkg/w.py"
    ours = [n for n in names if not n.startswith("steps/")]
    assert ours == ["my_pkg/__init__.py", "my_pkg/w.py", "requirements.txt", "wheels/x-1-py3-none-any.whl"]
    assert "steps/train/launcher.py" in names and names == sorted(names)


@pytest.mark.slow
def test_the_deployed_asset_holds_the_code_folders_hetero_code_dirs_names(tmp_path):
    mine = tmp_path / "mine"
    (mine / "my_pkg").mkdir(parents=True)
    (mine / "my_pkg" / "w.py").write_text("WORKLOAD = None\n")
    (mine / "requirements.txt").write_text("--no-index --find-links wheels\n")
    synth = synthesise(tmp_path / "cdk", **{"hetero:codeDirs": [str(mine)]})
    (asset,) = [p for p in synth.outdir.iterdir() if p.name.startswith("asset.") and p.name.endswith(".tar.gz")]
    with tarfile.open(asset, "r:gz") as tar:
        assert {"my_pkg/w.py", "requirements.txt", "steps/train/launcher.py"} <= set(tar.getnames())
    assert asset.read_bytes() == build_code_tarball(destination=tmp_path / "again.tar.gz", code_dirs=[mine]).read_bytes()
    digest = asset.name.split(".")[1]
    body = json.dumps(synth.template.find_resources("AWS::SageMaker::Pipeline"))
    assert f"{digest}.gz" in body  # the definition's sagemaker_submit_directory is this asset


def test_an_isolated_deploy_refuses_requirements_that_need_the_index_at_synth(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "requirements.txt").write_text("tiny-dep\n")
    with pytest.raises(
        UserError,
        match=r"requirements.txt needs the network, but the training jobs run with network "
        r"isolation .*it does not say --no-index",
    ):
        synthesise(tmp_path / "cdk", **{"hetero:codeDirs": [str(mine)], "hetero:networkIsolation": True})


def test_an_fsx_deploy_refuses_requirements_that_need_the_index_at_synth_naming_fsx_and_the_fix(tmp_path):
    """With FSx the jobs run in the VPC's isolated subnets, which have no NAT gateway: pip finds no index there either."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "requirements.txt").write_text("tiny-dep\n")
    with pytest.raises(UserError) as caught:
        synthesise(tmp_path / "cdk", **{"hetero:codeDirs": [str(mine)], "hetero:fsx": True})
    message = caught.value.one_line()
    assert message.startswith(
        f"requirements need the network: {mine / 'requirements.txt'} needs the network, but the training jobs run in "
        "the FSx for Lustre VPC (hetero:fsx), whose subnets have no NAT gateway (no route to a package index): it does "
        "not say --no-index"
    ), message
    assert message.endswith(
        "start the file with `--no-index --find-links wheels`, or deploy without hetero:fsx (the jobs then run outside a "
        "VPC and read their shards from S3)"
    ), message

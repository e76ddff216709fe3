import gzip
import tarfile

from pipeline.code import STEPS_DIR, build_code_tarball


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
    assert {"steps/train/launcher.py", "steps/shard/shard.py", "steps/evaluate/evaluate.py", "steps/evaluate/prices.json"} <= set(names)
    assert names == sorted(names) and not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_asset_is_the_file_not_a_zipped_directory(synth_default):
    assets = [p for p in synth_default.outdir.iterdir() if p.name.startswith("asset.") and p.suffix != ".json"]  # not the {} prices
    assert [p.suffixes[-2:] for p in assets] == [[".tar", ".gz"]]
    assert assets[0].read_bytes() == build_code_tarball(
        source=STEPS_DIR, destination=synth_default.outdir.parent / "again" / "code.tar.gz").read_bytes()

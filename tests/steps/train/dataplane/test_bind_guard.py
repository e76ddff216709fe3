"""The TensorFlow and Ray hosts' confinement: wildcard binds land on the cluster address."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from steps.common.errors import UserError
from steps.contract import BIND_ADDRESS_ENV
from steps.train.dataplane import bind_guard

ROOT = Path(__file__).resolve().parents[4]

BIND = """
import json, socket
out = {}
for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::"), (socket.AF_INET, "127.0.0.1")):
    with socket.socket(family) as s:
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual stack, as gRPC binds
        s.bind((host, 0))
        out[host] = s.getsockname()[0]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if not (os.environ.get("CC") or bind_guard.shutil.which("cc") or bind_guard.shutil.which("gcc")):
        pytest.skip("no C compiler")
    return bind_guard.build_library(tmp_path_factory.mktemp("cache"))


def test_the_library_is_built_once_per_source_version(library):
    assert library.is_file() and bind_guard.build_library(library.parent.parent) == library


def test_wildcard_binds_land_on_the_one_address_and_others_are_untouched(library):
    env = {**os.environ, "LD_PRELOAD": str(library), BIND_ADDRESS_ENV: "127.0.0.7"}
    out = json.loads(subprocess.run([sys.executable, "-c", BIND], env=env, capture_output=True, text=True, check=True).stdout)
    assert out == {"0.0.0.0": "127.0.0.7", "::": "::ffff:127.0.0.7", "127.0.0.1": "127.0.0.1"}


def test_without_the_address_the_library_changes_nothing(library):
    env = {k: v for k, v in os.environ.items() if k != BIND_ADDRESS_ENV} | {"LD_PRELOAD": str(library)}
    out = json.loads(subprocess.run([sys.executable, "-c", BIND], env=env, capture_output=True, text=True, check=True).stdout)
    assert out["0.0.0.0"] == "0.0.0.0" and out["::"] == "::"


REEXEC = """
import json, os, sys
sys.path.insert(0, {root!r})
from steps.train.dataplane import bind_guard
if not bind_guard.guarded():
    bind_guard.reexec_guarded("127.0.0.9")
print(json.dumps({{"pid": os.getpid(), "argv": sys.argv[1:], "address": os.environ[{address!r}], "kept": os.environ["KEPT"]}}))
"""


def test_the_host_reexecutes_itself_confined(library, tmp_path, monkeypatch):
    monkeypatch.setattr(bind_guard.tempfile, "gettempdir", lambda: str(library.parent.parent))
    script = tmp_path / "host.py"
    script.write_text(REEXEC.format(root=str(ROOT), address=BIND_ADDRESS_ENV))
    env = {**os.environ, "KEPT": "yes", "TMPDIR": str(library.parent.parent)}
    proc = subprocess.Popen([sys.executable, str(script), "--flag", "value"], env=env, stdout=subprocess.PIPE, text=True)
    out = json.loads(proc.communicate(timeout=60)[0])
    assert out == {"pid": proc.pid, "argv": ["--flag", "value"], "address": "127.0.0.9", "kept": "yes"}


def test_without_a_compiler_the_host_refuses_and_names_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(UserError, match="no C compiler .cc, gcc.*bind_guard=off") as caught:
        bind_guard.build_library(tmp_path / "cache")
    assert caught.value.headline == "cannot confine listeners"

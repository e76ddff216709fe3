"""A TensorFlow or Ray host listens only on its cluster address.

tf.data.service has no authentication and no bind-address option: its
dispatcher (on the trainer) and workers (on the data hosts) listen on every
interface, and whoever reaches them can run dataset graphs there (read files,
write files, read the environment). Ray's GCS, raylets and workers also listen
on every interface (they check Ray's token, `steps.train.frameworks.ray.node`, but a port
nobody outside the cluster can reach is not one that must hold). So before a
TensorFlow host imports TensorFlow, or a Ray host starts Ray, the launcher
re-executes it (same pid, same arguments; every process it starts inherits it) with
``LD_PRELOAD`` = `bind_guard.c`, built here with the C compiler, which turns a
wildcard ``bind()`` into one on ``HETERO_BIND_ADDRESS``, the host's own cluster
address: only hosts of the cluster network can reach the servers.

The job secret is never in a host's environment (a dataset graph can read
``/proc/self/environ``): it arrives as a file of the ``secret`` channel, which the
re-executed launcher reads once and removes (`steps.train.dataplane.auth.load_job_secret`).

Without a C compiler the host refuses to start (fail closed) and says how to
fix it; the hyperparameter ``bind_guard=off`` accepts the exposure instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

from steps.common.errors import UserError
from steps.contract import BIND_ADDRESS_ENV

SOURCE = Path(__file__).with_name("bind_guard.c")


def guarded(environ=os.environ) -> bool:
    """True in a host this module re-executed (its listeners are confined)."""
    return bool(environ.get(BIND_ADDRESS_ENV)) and "bind_guard" in environ.get("LD_PRELOAD", "")


def build_library(cache_dir: Path | None = None) -> Path:
    """The compiled library, built once per source version into a cache folder (atomic, so hosts may race)."""
    source = SOURCE.read_bytes()
    folder = Path(cache_dir or tempfile.gettempdir()) / f"hetero-bind-guard-{hashlib.sha256(source).hexdigest()[:16]}"
    library = folder / "bind_guard.so"
    if library.is_file():
        return library
    compiler = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")
    if not compiler:
        raise UserError(
            "the TensorFlow and Ray paths confine their servers (tf.data.service has no authentication of its own) "
            f"to the cluster address with a small preloaded library built from {SOURCE.name}, and this image has no "
            "C compiler (cc, gcc). Install gcc in the training image, or set the hyperparameter bind_guard=off to "
            "accept that they listen on every interface (docs/dataplane.md: Security)",
            headline="cannot confine listeners",
        )
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"bind_guard.{os.getpid()}.so"
    result = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), str(SOURCE), "-ldl"], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise UserError(
            f"{compiler} could not build {SOURCE}: {result.stderr.strip()[-800:]}; install gcc and the C library "
            "headers in the training image, or set bind_guard=off",
            headline="cannot confine listeners",
        )
    partial.replace(library)
    return library


def reexec_guarded(address: str) -> NoReturn:
    """Replace this process by itself, listeners confined to ``address``."""
    env = dict(os.environ)
    library = build_library()
    env["LD_PRELOAD"] = ":".join(filter(None, [str(library), env.get("LD_PRELOAD", "")]))
    env[BIND_ADDRESS_ENV] = address
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)

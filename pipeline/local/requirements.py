"""Whether the code's ``requirements.txt`` installs without the network, as a training job with no route to a package
index must install it: under network isolation (`pipeline.emulator.isolation`), or in the subnets of the FSx for Lustre VPC the
stack creates (isolated subnets, no NAT gateway). `Offline` names which.

It does when pip, reading the file as the training toolkit runs it (``pip install -r requirements.txt`` in the
unpacked code), can never reach for the network and still finds everything:

* the file says ``--no-index`` (pip otherwise asks the index about every requirement, even one a local wheel
  satisfies) and names no index (``-i``, ``--index-url``, ``--extra-index-url``);
* no requirement is a URL other than ``file:`` (``pkg @ https://...``, ``git+https://...``);
* every ``--find-links`` / ``-f`` is a folder inside the shipped code, named relative to the file, as pip reads it
  (a path of this machine is not in the container), and nested ``-r`` / ``-c`` files follow the same rules;
* pip resolves every requirement, dependencies included, from those folders alone, as wheels for the image's Python
  (``pip install --dry-run --no-index --only-binary :all: --python-version X.Y``: an sdist would have to fetch its
  build requirements).

Anything else is refused before the run (`refuse_networked`), naming the file, the line and the fix.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.code import REQUIREMENTS
from pipeline.emulator.image_guard import manifest_for
from steps.common.errors import UserError

_INDEX = ("-i", "--index-url", "--extra-index-url")
_LINKS = ("-f", "--find-links")
_NESTED = ("-r", "--requirement", "-c", "--constraint")
FIX = (
    f"vendor the wheels into the code folder (pip download --only-binary :all: --python-version {{python}} -d DIR/wheels "
    f"-r DIR/{REQUIREMENTS}) and start the file with `--no-index --find-links wheels`, or {{undo}}"
)


@dataclass(frozen=True)
class Offline:
    """Why the training jobs have no route to a package index (``why``, after "the training jobs"), and the way out
    other than vendoring the wheels (``undo``)."""

    why: str
    undo: str


NETWORK_ISOLATION = Offline("run with network isolation", "drop network isolation")
FSX_NO_NAT = Offline(
    "run in the FSx for Lustre VPC (hetero:fsx), whose subnets have no NAT gateway",
    "deploy without hetero:fsx (the jobs then run outside a VPC and read their shards from S3)",
)


def _lines(file: Path) -> list[tuple[int, list[str]]]:
    """(line number, tokens) of each logical line of a requirements file: comments dropped, continuations joined."""
    found, pending, start = [], "", 0
    for number, raw in enumerate(file.read_text().splitlines(), 1):
        start = start or number
        pending += raw[:-1] + " " if raw.endswith("\\") else raw
        if raw.endswith("\\"):
            continue
        text = pending.split(" #", 1)[0] if not pending.lstrip().startswith("#") else ""
        if text.strip():
            try:
                found.append((start, shlex.split(text)))
            except ValueError:  # an unbalanced quote: pip splits on blanks too
                found.append((start, text.split()))
        pending, start = "", 0
    return found


def _options(tokens: list[str]) -> list[tuple[str, str | None]]:
    """(option, value) pairs of one line (``--opt=value``, ``--opt value`` and ``-fvalue`` alike); a requirement is
    ("", requirement)."""
    if not tokens[0].startswith("-"):
        return [("", " ".join(tokens))]
    pairs, rest = [], list(tokens)
    while rest:
        token = rest.pop(0)
        name, eq, value = token.partition("=")
        if not eq and token[:2] in ("-i", "-f", "-r", "-c") and len(token) > 2:
            name, value, eq = token[:2], token[2:], "="
        takes = name in _INDEX + _LINKS + _NESTED + ("-e", "--editable")
        pairs.append((name, value if eq else (rest.pop(0) if takes and rest else None)))
    return pairs


def network_need(file: Path, root: Path, seen: frozenset = frozenset()) -> tuple[bool, list[str]]:
    """(says --no-index, why pip would reach for the network) for ``file`` under the shipped code ``root``."""
    no_index, reasons = False, []
    where = file.relative_to(root).as_posix()
    for number, tokens in _lines(file):
        for name, value in _options(tokens):
            at = f"{where}:{number}"
            if name == "--no-index":
                no_index = True
            elif name in _INDEX:
                reasons.append(f"{at} names an index ({name} {value})")
            elif name in _LINKS and not _inside(file.parent, value, root):
                reasons.append(f"{at} finds links outside the shipped code ({name} {value})")
            elif name in _NESTED:
                nested = (file.parent / (value or "")).resolve()
                if not _inside(file.parent, value, root) or not nested.is_file():
                    reasons.append(f"{at} reads {value!r}, which is not a file of the shipped code")
                elif nested not in seen:
                    more_no_index, more = network_need(nested, root, seen | {file.resolve()})
                    no_index, reasons = no_index or more_no_index, reasons + more
            elif value and "://" in value and not value.startswith("file:"):
                reasons.append(f"{at} installs from a URL ({value})")
    return no_index, reasons


def _inside(base: Path, value: str | None, root: Path) -> bool:
    if not value or "://" in value:
        return False
    return (base / value).resolve().is_relative_to(root.resolve())


def unresolved(root: Path, python: str) -> str | None:
    """pip's complaint when the shipped folders cannot satisfy ``root/requirements.txt`` offline; None when they can."""
    with tempfile.TemporaryDirectory() as target:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--no-index",
                "--only-binary",
                ":all:",
                "--python-version",
                python,
                "--target",
                target,
                "--disable-pip-version-check",
                "--quiet",
                "-r",
                REQUIREMENTS,
            ],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if done.returncode == 0:
        return None
    errors = [line.strip() for line in done.stderr.splitlines() if line.strip().startswith("ERROR:")]
    last = errors[-1] if errors else (done.stderr.strip().splitlines() or ["pip failed"])[-1]
    return last.removeprefix("ERROR: ")


def image_python(image_uri: str) -> str:
    """The Python (major.minor) of ``image_uri`` from its package manifest; this interpreter's for an unknown image."""
    manifest = manifest_for(image_uri)
    return manifest.python if manifest and manifest.python else f"{sys.version_info.major}.{sys.version_info.minor}"


def refuse_networked(tarball: Path, *, python: str, origin: str, offline: tuple[Offline, ...] = (NETWORK_ISOLATION,)) -> None:
    """Refuse the code ``tarball`` when its requirements.txt (copied from ``origin``) would need the network, which the
    jobs lack for each of the ``offline`` reasons; the container runs Python ``python`` (major.minor). A ``setup.py`` at
    the code's root makes the toolkit run ``pip install .`` instead, whose build requirements come from the index."""
    because = " and ".join(reason.why for reason in offline)
    undo = " and ".join(reason.undo for reason in offline)
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(tarball, "r:gz") as tar:
        root = Path(tmp)
        tar.extractall(root, filter="data")
        if (root / "setup.py").is_file():
            raise UserError(
                f"the code ships a setup.py at its root, so the training toolkit runs `pip install .`, whose build "
                f"requirements come from a package index, which the training jobs cannot reach (they {because}): "
                f"move setup.py out of the code folder (ship the package's folder and a {REQUIREMENTS}), or {undo}",
                headline="requirements need the network",
            )
        if not (root / REQUIREMENTS).is_file():
            return
        no_index, reasons = network_need(root / REQUIREMENTS, root)
        if not no_index:
            reasons.insert(0, "it does not say --no-index, so pip asks the package index about every requirement")
        if not reasons and (complaint := unresolved(root, python)):
            reasons.append(f"the shipped wheels do not satisfy it for Python {python}: {complaint}")
    if reasons:
        raise UserError(
            f"{origin} needs the network, but the training jobs {because} (no route to a package index): "
            f"{'; '.join(reasons)}. Fix: {FIX.format(python=python, undo=undo)}",
            headline="requirements need the network",
        )

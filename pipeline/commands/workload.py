"""The workload module a run names, checked before anything runs: the hosts could import it from the code that ships,
and it defines WORKLOAD (read, never imported: the CLI runs none of the user's code)."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from pipeline.code import CODE_DIRS_KEY, REQUIREMENTS, STEPS_DIR, shipped_files
from steps.common.errors import UserError


def check_workload(module: str, *, code_dirs: tuple[Path, ...] = (), deployed: bool = False) -> None:
    """A workload module that no host could import, or that defines no WORKLOAD, is refused before Shard runs (the hosts
    would find out in training). Hosts import what ships (`pipeline.code`: steps/ and the code folders, plus what a
    requirements.txt installs, which is not known before it runs: a module missing from the files passes then). Found
    by path and read, not imported: the CLI runs none of the user's code."""
    files = shipped_files(code_dirs=code_dirs)
    parts = module.split(".")
    found = None
    if all(part.isidentifier() for part in parts):
        found = files.get(f"{'/'.join(parts)}.py") or files.get(f"{'/'.join(parts)}/__init__.py")
    if found is None and REQUIREMENTS in files:
        return
    if found is None:
        folders = ", ".join(map(str, code_dirs)) or "none"
        ship = (
            f"deploy it with -c {CODE_DIRS_KEY}='[\"DIR\"]' and run hetero start from that folder, whose cdk.json it reads"
            if deployed
            else "ship it with --code-dir DIR"
        )
        near = _importable_from(parts)
        raise UserError(
            f"workload module {module!r} is not in the code the hosts get: no {'/'.join(parts)}.py in "
            f"{STEPS_DIR.name}/ or the code folders ({folders}); {ship}, DIR being the folder that holds "
            f"{parts[0]}/ ({'here: ' + str(near) if near else 'e.g. --workload steps.train.workloads.shapes'})",
            headline="bad workload",
        )
    try:
        tree = ast.parse(found.read_bytes(), filename=str(found))
    except (SyntaxError, ValueError) as exc:
        raise UserError(f"workload module {module!r} ({found}) does not parse: {exc}", headline="bad workload") from None
    if not _binds(tree, "WORKLOAD"):
        raise UserError(
            f"workload module {module!r} ({found}) defines no WORKLOAD: add WORKLOAD = <a subclass of "
            "steps.train.workload.Workload>, or pass another module, e.g. --workload steps.train.workloads.shapes",
            headline="bad workload",
        )


def _importable_from(parts: list[str]) -> Path | None:
    """The folder (the current one, or one on this process's path) from which ``parts`` would import here."""
    if not all(part.isidentifier() for part in parts):
        return None
    for root in (Path.cwd(), *(Path(p) for p in sys.path if p)):
        if Path(root, *parts).with_suffix(".py").is_file() or Path(root, *parts, "__init__.py").is_file():
            return root
    return None


def deployed_code_dirs() -> tuple[Path, ...]:
    """The code folders `cdk deploy` from this folder ships: cdk.json's CODE_DIRS_KEY, relative to it."""
    try:
        context = json.loads(Path("cdk.json").read_text()).get("context", {})
    except (OSError, json.JSONDecodeError):
        return ()
    return tuple(Path(d) for d in context.get(CODE_DIRS_KEY) or ())


def _binds(tree: ast.AST, name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[-1]) in (name, "*"):
            return True
    return False

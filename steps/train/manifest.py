"""The shard step's manifest as the training hosts see it (the ``manifest`` channel)."""

from __future__ import annotations

import json
from pathlib import Path

from steps.common.errors import UserError
from steps.contract import MANIFEST_FILE as MANIFEST_NAME



def read_manifest(channel_dir: Path) -> dict:
    path = channel_dir / MANIFEST_NAME
    if not path.is_file():
        found = sorted(channel_dir.rglob(MANIFEST_NAME)) if channel_dir.is_dir() else []
        if not found:
            raise UserError(f"no {MANIFEST_NAME} in {channel_dir}: point the manifest channel at the shard step's manifest.json",
                            headline="missing manifest")
        path = found[0]
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); re-run the shard step", headline="bad manifest") from None


def read_classes(channel_dir: Path) -> list[str]:
    classes = read_manifest(channel_dir).get("classes")
    if not isinstance(classes, list) or not classes:
        raise UserError(f"the manifest in {channel_dir} lists no classes; re-run the shard step", headline="bad manifest")
    return [str(c) for c in classes]

"""What every trainer leaves when training ends, whatever its framework: the model (in the framework's format) and
``metrics.json`` in the model folder (SageMaker packs it into model.tar.gz, which Evaluate reads) and in the output-data
folder (output.tar.gz), then the run's final line. The files it returns go to every data host, which keeps a copy
(`keep_results`): every host of the job then holds the results, whichever host's model folder SageMaker packs."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from steps.common.files import write_json_atomic
from steps.common.metrics_json import Metrics
from steps.contract import METRICS_FILE
from steps.train.core.cluster import Cluster
from steps.train.core.metrics import final_line

SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def write_outputs(cluster: Cluster, metrics: Metrics, save_model: Callable[[Path], object]) -> dict[str, bytes]:
    """``save_model(folder)`` writes the model into the model folder; returns the model folder's files by name."""
    cluster.model_dir.mkdir(parents=True, exist_ok=True)
    save_model(cluster.model_dir)
    for directory in (cluster.model_dir, cluster.output_data_dir):
        write_json_atomic(directory / METRICS_FILE, metrics.as_dict())
    print(final_line(metrics), flush=True)
    return {p.name: p.read_bytes() for p in sorted(cluster.model_dir.iterdir()) if p.is_file()}


def keep_results(results_dir: Path | None, trainer: str, files: dict) -> None:
    """Write the ``files`` (name -> bytes-like) a trainer handed over into ``results_dir`` (plain names only)."""
    if results_dir is None or not files:
        return
    for name, data in files.items():
        if not SAFE_FILE_NAME.fullmatch(name):
            print(f"[data] ignoring file {name!r} from trainer {trainer}: not a plain file name", flush=True)
            continue
        results_dir.mkdir(parents=True, exist_ok=True)
        tmp = results_dir / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, results_dir / name)
    print(f"[data] kept {', '.join(sorted(files))} from trainer {trainer} in {results_dir}", flush=True)

"""What every trainer leaves when training ends, whatever its framework: the model (in the framework's format) and
``metrics.json`` in the model folder (SageMaker packs it into model.tar.gz, which Evaluate reads) and in the output-data
folder (output.tar.gz), then the run's final line. The files it returns go to every data host (each keeps a copy)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from steps.common.files import write_json_atomic
from steps.contract import METRICS_FILE
from steps.train.core.cluster import Cluster
from steps.train.core.metrics import final_line


def write_outputs(cluster: Cluster, metrics: dict, save_model: Callable[[Path], None]) -> dict[str, bytes]:
    """``save_model(folder)`` writes the model into the model folder; returns the model folder's files by name."""
    cluster.model_dir.mkdir(parents=True, exist_ok=True)
    save_model(cluster.model_dir)
    for directory in (cluster.model_dir, cluster.output_data_dir):
        write_json_atomic(directory / METRICS_FILE, metrics)
    print(final_line(metrics), flush=True)
    return {p.name: p.read_bytes() for p in sorted(cluster.model_dir.iterdir()) if p.is_file()}

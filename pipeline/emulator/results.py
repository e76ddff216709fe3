"""What an emulated training job leaves: every host's ``model/`` and ``output/data`` merged, and, when it succeeded,
packed as ``<S3OutputPath>/<job name>/output/{model,output}.tar.gz``, as SageMaker uploads them."""

from __future__ import annotations

import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from pipeline import storage
from pipeline.emulator.hosts import Host


@dataclass
class JobResult:
    name: str
    job_dir: Path
    hosts: list[Host]
    failure: str | None = None
    model_dir: Path | None = None
    output_data_dir: Path | None = None
    model_artifacts: str | None = None  # S3ModelArtifacts
    wall_s: float = 0.0  # every attempt: TrainingTimeInSeconds (BillableTimeInSeconds too: no spot market here)
    interruptions: int = 0
    interrupted: dict | None = None  # the interruption: how long the hosts took to exit after SIGTERM, their exit codes

    @property
    def ok(self) -> bool:
        return self.failure is None


def pack(*, name: str, request: dict, job_dir: Path, hosts: list[Host], failed: bool) -> tuple[Path, Path, str | None]:
    """The merged model and output folders, and the S3ModelArtifacts they were packed to (None: the job failed, or its
    request has no OutputDataConfig)."""
    merged = job_dir / "model"
    output = job_dir / "output" / "data"
    for host in hosts:
        for src, dst in ((host.base_dir / "model", merged), (host.base_dir / "output" / "data", output)):
            if src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True)
    artifacts = None
    if not failed and "OutputDataConfig" in request:
        prefix = f"{request['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{name}/output"
        pack_folder(merged, storage.path(f"{prefix}/model.tar.gz"))
        pack_folder(output, storage.path(f"{prefix}/output.tar.gz"))
        artifacts = f"{prefix}/model.tar.gz"
    return merged, output, artifacts


def pack_folder(folder: Path, destination: Path) -> None:
    """``folder`` as SageMaker packs a job's model or output folder: a tar.gz of every file under it, by relative path."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(destination, "w:gz") as tar:
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)

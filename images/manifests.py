"""Write `pipeline/manifests/<image>.json`: the Python packages each image the pipeline runs has, with versions.

The AWS Deep Learning Containers are built from a uv project per image (``docker/<framework>/<version>/<variant>/
pyproject.toml`` and its ``uv.lock`` in aws/deep-learning-containers); their SageMaker stage runs
``uv sync --frozen --no-dev --extra sagemaker``. This script resolves that lock the way uv installs it on the
image's platform (Linux x86_64, CPython 3.12): from the project's root, its dependencies and its ``sagemaker`` extra,
each package's dependencies, extras and environment markers. The CUDA PyTorch image also installs packages built
outside the lock (flash-attn, transformer-engine: the image config's ``build`` block). The Ray image is the PyTorch
GPU image plus ``ray[data,train]`` at the project's pin, resolved as the local environment resolves it
(``constraints.txt``). The PyTorch serving image (images/pytorch-serve/Dockerfile) is the PyTorch image of its variant
plus the inference toolkit at the project's pin, resolved the same way. The TensorFlow inference image is its lock and
TF Serving's gRPC stubs (installed without their dependencies); TF Serving itself is a binary, not a package.

    git clone https://github.com/aws/deep-learning-containers dlc   # or any snapshot of it
    .venv/bin/python images/manifests.py dlc                         # rewrites pipeline/manifests/*.json

The emulator (`pipeline.emulator.image_guard`) lets each emulated host import exactly the packages of its image's manifest.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canonical

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "pipeline" / "manifests"
# where the images' package sets are published: (manifest, lock file, image config of extra builds, image URI parts)
IMAGES = {
    "pytorch-gpu": (
        "docker/pytorch/2.13/cuda/uv.lock",
        ".github/config/image/pytorch/2.13-sagemaker-cuda.yml",
        {"repository": "pytorch", "tags": ["2.13.0-cu133-amzn2023-sagemaker", "2.13-cu133-amzn2023-sagemaker"]},
    ),
    "pytorch-cpu": (
        "docker/pytorch/2.13/cpu/uv.lock",
        ".github/config/image/pytorch/2.13-sagemaker-cpu.yml",
        {"repository": "pytorch", "tags": ["2.13.0-cpu-amzn2023-sagemaker", "2.13-cpu-amzn2023-sagemaker"]},
    ),
    "tensorflow-gpu": (
        "docker/tensorflow/2.21/cuda/uv.lock",
        ".github/config/image/tensorflow/2.21-sagemaker-cuda.yml",
        {
            "repository": "tensorflow-training",
            "tags": ["2.21.0-gpu-py312", "2.21.0-gpu-py312-sagemaker", "2.21.0-gpu-py312-cu129-amzn2023-sagemaker"],
        },
    ),
    "tensorflow-cpu": (
        "docker/tensorflow/2.21/cpu/uv.lock",
        ".github/config/image/tensorflow/2.21-sagemaker-cpu.yml",
        {
            "repository": "tensorflow-training",
            "tags": ["2.21.0-cpu-py312", "2.21.0-cpu-py312-sagemaker", "2.21.0-cpu-py312-amzn2023-sagemaker"],
        },
    ),
    # TensorFlow Serving's image: its Python side only (the service in front of the tensorflow_model_server binary)
    "tensorflow-inference-cpu": (
        "docker/tensorflow/inference/2.20/cpu/uv.lock",
        ".github/config/image/tensorflow/2.20-inference-sagemaker-cpu.yml",
        {"repository": "tensorflow-inference", "tags": ["2.20-cpu-py312-amzn2023-sagemaker-v1"]},
    ),
    "tensorflow-inference-gpu": (
        "docker/tensorflow/inference/2.20/cuda/uv.lock",
        ".github/config/image/tensorflow/2.20-inference-sagemaker-cuda.yml",
        {"repository": "tensorflow-inference", "tags": ["2.20-gpu-py312-cu129-amzn2023-sagemaker-v1"]},
    ),
}
# packages built or installed outside an image's lock (image config `build:` keys -> distribution): the CUDA PyTorch
# image's; TF Serving's gRPC stubs, which its Dockerfile installs with --no-deps at the TF Serving version
EXTRA_BUILDS = {"flash_attn_version": "flash-attn", "transformer_engine_version": "transformer-engine"}
NO_DEPS = {
    "tensorflow-inference-cpu": {"tf_serving_version": "tensorflow-serving-api"},
    "tensorflow-inference-gpu": {"tf_serving_version": "tensorflow-serving-api-gpu"},
}
PLATFORM = {
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "python_version": "3.12",
    "python_full_version": "3.12.11",
}
RAY_REQUIREMENT = "ray[data,train]"
SERVE_REQUIREMENT = "sagemaker-inference"  # the `serve` extra of pyproject.toml


def _applies(marker: str | None, extra: str = "") -> bool:
    return marker is None or Marker(marker).evaluate({**PLATFORM, "extra": extra})


def resolve_lock(lock: dict, extras: tuple[str, ...] = ("sagemaker",)) -> dict[str, str]:
    """name -> version of what `uv sync --extra <extras>` installs from ``lock`` on PLATFORM."""
    by_name: dict[str, list[dict]] = {}
    for package in lock["package"]:
        by_name.setdefault(canonical(package["name"]), []).append(package)
    (root,) = [p for p in lock["package"] if p.get("source", {}).get("virtual") or p.get("source", {}).get("editable")]
    installed: dict[str, str] = {}
    queue = [dict(d) for d in root.get("dependencies", [])]
    for extra in extras:
        queue += [dict(d) for d in root.get("optional-dependencies", {}).get(extra, [])]
    seen: set[tuple[str, str, tuple[str, ...]]] = set()
    while queue:
        dep = queue.pop()
        if not _applies(dep.get("marker")):
            continue
        name = canonical(dep["name"])
        package = _pick(by_name[name], dep)
        key = (name, package["version"], tuple(dep.get("extra", [])))
        if key in seen:
            continue
        seen.add(key)
        installed[name] = package["version"]
        queue += [dict(d) for d in package.get("dependencies", [])]
        for extra in dep.get("extra", []):
            queue += [dict(d) for d in package.get("optional-dependencies", {}).get(extra, [])]
    return dict(sorted(installed.items()))


def _pick(candidates: list[dict], dep: dict) -> dict:
    if len(candidates) == 1:
        return candidates[0]
    if "version" in dep:
        return next(c for c in candidates if c["version"] == dep["version"])
    fitting = [c for c in candidates if all(_applies(m) for m in c.get("resolution-markers", [])[:1])] or candidates
    matching = [c for c in candidates if any(_applies(m) for m in c.get("resolution-markers", []))]
    return (matching or fitting)[0]


def _extra_builds(config: str, builds: dict[str, str] = EXTRA_BUILDS) -> dict[str, str]:
    found = {}
    for key, distribution in builds.items():
        match = re.search(rf'^\s*{key}:\s*"?([^"\s]+)"?', config, re.M)
        if match:
            found[distribution] = match.group(1)
    return found


def _git(dlc: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(dlc), *args], check=True, capture_output=True, text=True).stdout


def _show(dlc: Path, path: str) -> str:
    if (dlc / ".git").exists() or (dlc / "HEAD").exists():
        return _git(dlc, "show", f"HEAD:{path}")
    return (dlc / path).read_text()


def _ray_packages() -> dict[str, str]:
    """ray[data,train] and everything it requires, at the versions constraints.txt pins (read from this environment)."""
    return _on_top({}, RAY_REQUIREMENT)


def _on_top(image: dict[str, str], requirement: str, *, replace: tuple[str, ...] = ()) -> dict[str, str]:
    """``image``'s packages after ``pip install <requirement>``: pip keeps a package the image has where its version
    satisfies the requirement on it (and what that package requires is the image's already), installs the version
    constraints.txt pins where not, and where the image lacks it, with what it requires in turn; those named in
    ``replace`` it installs whatever the image has."""
    from importlib import metadata

    pinned = _pins()
    packages = dict(image)
    installed: set[str] = set()
    queue = [Requirement(requirement)]
    while queue:
        wanted = queue.pop()
        name = canonical(wanted.name)
        have = packages.get(name)
        if name in installed or (have is not None and name not in replace and wanted.specifier.contains(have, prereleases=True)):
            continue
        packages[name] = pinned.get(name) or metadata.version(name)
        installed.add(name)
        extras = {""} | set(wanted.extras)
        queue += [
            child
            for child in map(Requirement, metadata.requires(name) or [])
            if child.marker is None or any(child.marker.evaluate({**PLATFORM, "extra": e}) for e in extras)
        ]
    return packages


def _pins() -> dict[str, str]:
    return {
        canonical(line.split("==")[0]): line.split("==")[1].strip()
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }


def main(dlc: Path) -> int:
    commit = _git(dlc, "rev-parse", "HEAD").strip() if (dlc / ".git").exists() or (dlc / "HEAD").exists() else "unknown"
    OUT.mkdir(parents=True, exist_ok=True)
    manifests = {}
    for image, (lock_path, config_path, uri) in IMAGES.items():
        packages = resolve_lock(tomllib.loads(_show(dlc, lock_path)))
        config = _show(dlc, config_path)
        packages.update({canonical(k): v for k, v in _extra_builds(config, {**EXTRA_BUILDS, **NO_DEPS.get(image, {})}).items()})
        manifests[image] = {
            "image": uri,
            "source": {
                "repository": "aws/deep-learning-containers",
                "commit": commit,
                "lock": lock_path,
                "config": config_path,
                "how": "uv sync --frozen --no-dev --extra sagemaker, resolved for linux x86_64 CPython 3.12",
            },
            "python": "3.12",
            "packages": dict(sorted(packages.items())),
        }
    ray = dict(manifests["pytorch-gpu"]["packages"])
    # pip keeps a package the image has when its version satisfies Ray's requirement, and adds the missing ones
    ray.update({name: version for name, version in _ray_packages().items() if name not in ray or name == "ray"})
    manifests["ray-gpu"] = {
        "image": {"repository": "hetero-ray", "tags": [ray["ray"]], "dockerfile": "images/ray/Dockerfile"},
        "source": {
            **manifests["pytorch-gpu"]["source"],
            "plus": f"pip install {RAY_REQUIREMENT} at the version constraints.txt pins",
        },
        "python": "3.12",
        "packages": dict(sorted(ray.items())),
    }
    for variant in ("cpu", "gpu"):
        base = manifests[f"pytorch-{variant}"]
        serve = _on_top(base["packages"], SERVE_REQUIREMENT, replace=(canonical(SERVE_REQUIREMENT),))
        tag = f"{serve['torch'].split('+')[0]}-{variant}"
        manifests[f"pytorch-serve-{variant}"] = {
            "image": {"repository": "hetero-pytorch-serve", "tags": [tag], "dockerfile": "images/pytorch-serve/Dockerfile"},
            "source": {**base["source"], "plus": f"pip install {SERVE_REQUIREMENT} at the version constraints.txt pins"},
            "python": "3.12",
            "packages": dict(sorted(serve.items())),
        }
    for image, manifest in manifests.items():
        (OUT / f"{image}.json").write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"{image}: {len(manifest['packages'])} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

"""Each emulated host imports exactly the Python packages of its job's image, as the container would.

Every host of the local runner is a process of this machine's environment, which holds every framework
(PyTorch, TensorFlow, Ray) and the tools (the CDK, moto, pytest). A container has only its image's
packages (`pipeline/manifests/<image>.json`, written by ``images/manifests.py`` from the AWS Deep Learning
Containers' lock files). So the emulator gives each process an import guard: a ``sitecustomize`` module,
first on ``PYTHONPATH``, that puts a finder at the head of ``sys.meta_path`` refusing every top-level module
of a distribution installed here but absent from the image. The refusal is the ``ModuleNotFoundError`` the
container would raise, with one more line naming the image and its manifest. Child processes (DataLoader
workers, a local tf.data.service worker, Ray's raylets and workers) inherit ``PYTHONPATH``, so the guard holds
for them too. Its cost: one set lookup per import of a top-level module not yet loaded.

The project's ``pipeline`` package is refused too: only ``steps/`` ships with the code. What the job brings itself
is the job's own and never refused: its code (``$SAGEMAKER_BASE_DIR/code``: ``steps/`` and the user's code folders) and
what its ``requirements.txt`` installed. A container's pip installs into the image's Python; an emulated host's pip
installs into a folder of its own (``PIP_TARGET``, `pip_into`), never into this machine's environment.

    >>> manifest_for("763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training:2.21.0-gpu-py312").name
    'tensorflow-gpu'
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import site
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"  # pipeline/manifests/
GUARD_MODULE = "sitecustomize"
SHIPPED = "steps"  # the project's package that ships with the code; its other top-level packages do not
# a distribution of this machine that stands for one of the image's: same import name, another build
EQUIVALENT = {"tensorflow-cpu": "tensorflow", "tensorflow": "tensorflow-cpu"}
# training frameworks step code may use only at the version it is tested with here: the TensorFlow image has torch
# (a dependency of its SageMaker SDK) at 2.11 (GPU) / 2.12 (CPU), which no test of this project runs against
TESTED_AT_THIS_VERSION = ("torch", "tensorflow", "tensorflow-cpu", "ray")
TARGET_ENV = "PIP_TARGET"  # pip's --target: where an emulated host's pip installs (`pip_into`)
_IMAGE = re.compile(r"(?:[^/]+/)*(?P<repository>[^/:@]+)(?::(?P<tag>[^@]+))?(?:@.*)?")


canonical = canonicalize_name  # PEP 503: Tensorflow_CPU -> tensorflow-cpu


@dataclass(frozen=True)
class Manifest:
    name: str  # pytorch-gpu, tensorflow-cpu, ...
    path: Path
    repository: str
    tags: tuple[str, ...]
    packages: dict  # canonical distribution name -> version
    python: str = ""  # the image's Python, major.minor

    def has(self, distribution: str) -> bool:
        name = canonical(distribution)
        return name in self.packages or EQUIVALENT.get(name) in self.packages


@functools.cache
def manifests() -> tuple[Manifest, ...]:
    found = []
    for path in sorted(MANIFESTS.glob("*.json")):
        data = json.loads(path.read_text())
        found.append(
            Manifest(
                path.stem,
                path,
                data["image"]["repository"],
                tuple(data["image"]["tags"]),
                {canonical(k): v for k, v in data["packages"].items()},
                data.get("python", ""),
            )
        )
    return tuple(found)


def manifest_for(image_uri: str) -> Manifest | None:
    """The manifest of ``image_uri`` (an ECR URI of a known image, any registry account and region); None: unknown."""
    match = _IMAGE.fullmatch(image_uri or "")
    if not match:
        return None
    for manifest in manifests():
        if match["repository"] == manifest.repository and (match["tag"] or "latest") in manifest.tags:
            return manifest
    return None


def _distributions() -> list[metadata.Distribution]:
    """The environment's own distributions: those in its site-packages folders, whatever this process imported before.
    A package may vendor others on a path it adds to sys.path when imported (Ray's ``thirdparty_files``: colorama,
    psutil); in the image they come with that package, so they are not distributions of their own to allow or refuse."""
    return list(metadata.distributions(path=[*site.getsitepackages(), site.getusersitepackages()]))


def _top_level(distribution: metadata.Distribution) -> set[str]:
    """The top-level names ``distribution`` provides: its top_level.txt, or else the first part of each file it installed
    (as `importlib.metadata.packages_distributions` infers them)."""
    declared = (distribution.read_text("top_level.txt") or "").split()
    if declared:
        return set(declared)
    names = {f.parts[0] if len(f.parts) > 1 else inspect.getmodulename(str(f)) for f in distribution.files or ()}
    return {name for name in names if name and "." not in name}


@functools.cache
def _module_owners() -> dict[str, tuple[str, ...]]:
    """Top-level importable name -> the distributions of this environment that provide it."""
    owners: dict[str, list[str]] = {}
    for distribution in _distributions():
        for name in _top_level(distribution):
            owners.setdefault(name, []).append(canonical(distribution.metadata["Name"]))
    return {name: tuple(found) for name, found in owners.items()}


@functools.cache
def _installed() -> frozenset[str]:
    """Every distribution of this environment (some provide no module: their metadata alone can be asked for)."""
    return frozenset(canonical(d.metadata["Name"]) for d in _distributions())


def other_versions(manifest: Manifest) -> dict[str, tuple[str, str]]:
    """Training frameworks (`TESTED_AT_THIS_VERSION`) the image has at another major.minor than this machine:
    distribution -> (image's version, this machine's)."""
    found = {}
    for name in TESTED_AT_THIS_VERSION:
        image = manifest.packages.get(name)
        try:
            here = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if image and _minor(image) != _minor(here):
            found[name] = (image, here)
    return found


def _minor(version: str) -> tuple[str, ...]:
    return tuple(re.split(r"[.+]", version)[:2])


def refused(manifest: Manifest) -> dict[str, str]:
    """Top-level module -> the distribution that provides it here, for every module the image cannot import, or has
    only at another version of a training framework. A name some allowed distribution also provides (a namespace
    package such as ``google``) stays importable."""
    blocked = {}
    mismatched = other_versions(manifest)
    for module, owners in _module_owners().items():
        if module == SHIPPED or module.startswith("__editable__"):
            continue
        if any(d in mismatched for d in owners) or not any(manifest.has(d) for d in owners):
            blocked[module] = owners[0]
    return dict(sorted(blocked.items()))


def pip_into(folder: Path) -> dict[str, str]:
    """The environment that makes a process's ``pip install`` (the training toolkit's ``install_requirements``) install
    into ``folder``, which the guard then allows (pip reads every option from a ``PIP_<OPTION>`` variable)."""
    return {TARGET_ENV: str(folder), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def guard_path(image_uri: str, folder: Path, *, enabled: bool = True, echo: Callable[[str], object] = print) -> str:
    """The PYTHONPATH entry that confines a job's processes to ``image_uri``'s packages ("" when there is none to
    apply: the guard is off, or the image has no manifest, which is said once)."""
    if not enabled:
        return ""
    manifest = manifest_for(image_uri)
    if manifest is None:
        echo(
            f"image {image_uri or '(none)'} has no package manifest (pipeline/manifests/): its hosts import this "
            "machine's packages, which may not be the image's"
        )
        return ""
    return str(install(folder, image_uri, manifest))


def install(folder: Path, image_uri: str, manifest: Manifest) -> Path:
    """Write the guard for ``manifest`` into ``folder`` (put it first on the processes' PYTHONPATH); returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "image_guard.json").write_text(
        json.dumps(
            {
                "image": image_uri,
                "manifest": f"pipeline/manifests/{manifest.path.name}",
                "refused": refused(manifest),
                "target_env": TARGET_ENV,
                "refused_distributions": sorted(d for d in _installed() if not manifest.has(d) or d in other_versions(manifest)),
                "other_versions": other_versions(manifest),
            }
        )
    )
    (folder / f"{GUARD_MODULE}.py").write_text(_GUARD_SOURCE)
    return folder


def explain(failure: str, folder: str | Path) -> str:
    """The line that names the image and its manifest when ``failure`` (a host's failure reason or log tail) is an
    import of a module the guard in ``folder`` refused; "" otherwise."""
    if not folder or not (Path(folder) / "image_guard.json").is_file():
        return ""
    spec = json.loads((Path(folder) / "image_guard.json").read_text())
    for name in re.findall(r"No module named '([\w.]+)'", failure):
        owner = spec["refused"].get(name.partition(".")[0])
        if owner:
            what = (
                "the project's code outside steps/, which does not ship with the job"
                if owner == "hetero"
                else f"no {owner!r} ({name!r})"
            )
            if owner in spec.get("other_versions", {}):
                image, here = spec["other_versions"][owner]
                what = f"{owner} {image}, not the {here} this project tests with (its own dependency, not for step code)"
            return (
                f"[image] {spec['image']} has {what}: the container fails the same way (its packages: "
                f"{spec['manifest']}); use what the image has, or build an image FROM it with the package"
            )
    return ""


# the module each emulated process imports at start (site.py imports `sitecustomize`); standard library only. It wraps
# the finders already in sys.meta_path (the path finder, the editable-install finder) so that a refused module is not
# found at all: `import x` raises the interpreter's own ModuleNotFoundError and `importlib.util.find_spec("x")` returns
# None, as in a container without the package; importlib.metadata finds no distribution of it either.
_GUARD_SOURCE = '''"""Import guard of an emulated host: the packages of its image only (pipeline.emulator.image_guard)."""
import json as _json
import os as _os
import re as _re
import sys as _sys
from importlib.machinery import PathFinder as _PathFinder


def _install():
    with open(_os.path.join(_os.path.dirname(__file__), "image_guard.json")) as f:
        spec = _json.load(f)
    refused, absent = frozenset(spec["refused"]), frozenset(spec["refused_distributions"])
    # the job's own: its code and what its pip installed (the guard's own module, pipeline.emulator.image_guard, says why)
    base = _os.environ.get("SAGEMAKER_BASE_DIR")
    own = [_os.path.realpath(p) for p in (_os.environ.get(spec["target_env"]), base and _os.path.join(base, "code")) if p]
    owned = {}

    def is_own(top):
        if top not in owned:
            owned[top] = bool(own) and _PathFinder.find_spec(top, own) is not None
        return owned[top]

    def present(distribution):
        where = _os.path.realpath(str(getattr(distribution, "_path", "")))
        if any(where.startswith(p + _os.sep) for p in own):
            return True
        name = getattr(distribution, "_normalized_name", None) or distribution.metadata["Name"] or ""
        return _re.sub(r"[-_.]+", "-", name).lower() not in absent

    class Refusing:
        """A finder that does not find what the image does not have."""

        def __init__(self, finder):
            self._finder = finder

        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top in refused and not is_own(top):
                return None
            find = getattr(self._finder, "find_spec", None)
            return find(name, path, target) if find else None

        def find_distributions(self, *args, **kwargs):
            """importlib.metadata's view: an absent package has no version either (torch asks optree's so)."""
            find = getattr(self._finder, "find_distributions", None)
            return filter(present, find(*args, **kwargs)) if find else iter(())

        def __getattr__(self, attribute):
            return getattr(self._finder, attribute)

    _sys.meta_path[:] = [f if getattr(f, "__module__", "") == "_frozen_importlib" and f.__name__ in
                         ("BuiltinImporter", "FrozenImporter") else Refusing(f) for f in _sys.meta_path]


_install()
del _install
'''

"""The environment a SageMaker container starts with, each variable with its public source, and the one an emulated
training host or processing job gets instead of the caller's shell.

A container's processes see what Docker gives every Linux container (`RUNTIME`), its image's ``ENV`` lines (`IMAGE`,
from the Dockerfiles of the AWS Deep Learning Containers the pipeline runs: the commit ``pipeline/manifests/`` names),
the request's ``Environment`` and what SageMaker sets for the job (`SERVICE`). Nothing of whoever called
CreateTrainingJob reaches it. So an emulated host starts from an empty environment and gets exactly those, then the
twin's own additions (`TWIN`, each with why the emulator needs it), then ``extra_env``: variables the emulator's caller
adds for itself (the file of an AWS call ledger, say). `NOT_SET` lists what a container may have that the twin leaves
out, and why. The precedence: Docker's < the image's < the request's ``Environment`` < SageMaker's < the twin's <
``extra_env``.

    >>> image_env("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cpu-amzn2023-sagemaker")["PATH"]
    '/opt/venv/bin:/opt/amazon/openmpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
"""

from __future__ import annotations

import os
import pwd
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.emulator.image_guard import manifest_for, pip_into
from steps.common.errors import UserError
from steps.contract import EMULATED_HOST_ENV, HOSTS_FILE_ENV


@dataclass(frozen=True)
class Variable:
    """One variable of a container: ``value`` as the source gives it (``${NAME}``: the value below it, as Docker
    expands an ``ENV`` line; ``{field}``: filled per job), ``where`` the images (manifest names) or jobs it is set in."""

    name: str
    value: str
    where: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class Addition:
    """A variable the twin sets on its own account, and why."""

    name: str
    value: str
    where: tuple[str, ...]
    reason: str


# the images, by their manifests (pipeline/manifests/<name>.json); hetero-ray is FROM the PyTorch GPU image and
# hetero-pytorch-serve FROM the PyTorch image of its variant, and their Dockerfiles (images/ray/Dockerfile,
# images/pytorch-serve/Dockerfile) add no ENV line
PT_GPU, PT_CPU, TF_GPU, TF_CPU, RAY = "pytorch-gpu", "pytorch-cpu", "tensorflow-gpu", "tensorflow-cpu", "ray-gpu"
SERVE_GPU, SERVE_CPU = "pytorch-serve-gpu", "pytorch-serve-cpu"
TFS_GPU, TFS_CPU = "tensorflow-inference-gpu", "tensorflow-inference-cpu"  # TF Serving's: built apart from the others
FROM_TRAINING = (PT_GPU, PT_CPU, TF_GPU, TF_CPU, RAY, SERVE_GPU, SERVE_CPU)  # the training images and those FROM them
IMAGES = (*FROM_TRAINING, TFS_GPU, TFS_CPU)
TRAINING, PROCESSING = "training job", "processing job"

DOCKER_RUN = "Docker run reference, 'Environment variables' (docs.docker.com/engine/containers/run/#environment-variables)"
DLC = "aws/deep-learning-containers@e0ecedea6a1c "  # the commit of the images' manifests
PT_FILES = "docker/pytorch/Dockerfile.cuda and Dockerfile.cpu"
TF_FILES = "docker/tensorflow/2.21/Dockerfile.cuda and Dockerfile.cpu"
BASE_STAGE = "stage runtime-base, which stage sagemaker (the image SageMaker runs) builds FROM"
TFS_DIR = "docker/tensorflow/inference/2.20"
TFS_FILES = f"{TFS_DIR}/Dockerfile.cuda and Dockerfile.cpu"

DOCKER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# the first ENV block of every DLC's runtime-base stage, training and inference alike
PYTHON_AND_LOCALE = (
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("PYTHONUNBUFFERED", "1"),
    ("PYTHONIOENCODING", "UTF-8"),
    ("LANG", "C.UTF-8"),
    ("LC_ALL", "C.UTF-8"),
)
RUNTIME = (
    Variable(
        "PATH",
        DOCKER_PATH,
        IMAGES,
        DOCKER_RUN + "; the ${PATH} each image's PATH extends: amazonlinux:2023 sets no ENV "
        "(amazonlinux/container-images Dockerfile). The GPU images' base, nvidia/cuda, adds folders of its own: not here",
    ),
    Variable("HOME", "/root", IMAGES, DOCKER_RUN + " ('set based on the value of USER'); the DLC Dockerfiles set no USER: root"),
)

IMAGE = (
    *(
        Variable(name, value, FROM_TRAINING, f"{DLC}{PT_FILES}, {TF_FILES}: {BASE_STAGE}")
        for name, value in (
            *PYTHON_AND_LOCALE,
            ("DLC_CONTAINER_TYPE", "training"),  # processing jobs run the CPU training image too (pipeline/sagemaker/images.py)
        )
    ),
    Variable("UV_PROJECT_ENVIRONMENT", "/opt/venv", FROM_TRAINING, f"{DLC}{PT_FILES}, {TF_FILES}: stage sagemaker"),
    Variable(
        "SAGEMAKER_TRAINING_MODULE",
        "sagemaker_pytorch_container.training:main",
        (PT_GPU, PT_CPU, RAY, SERVE_GPU, SERVE_CPU),
        f"{DLC}{PT_FILES}: stage sagemaker",
    ),
    Variable(
        "SAGEMAKER_TRAINING_MODULE",
        "sagemaker_tensorflow_container.training:main",
        (TF_GPU, TF_CPU),
        f"{DLC}{TF_FILES}: stage sagemaker",
    ),
    Variable(
        "CUDA_HOME",
        "/usr/local/cuda",
        (PT_GPU, RAY, TF_GPU, SERVE_GPU),
        f"{DLC}docker/pytorch/Dockerfile.cuda, docker/tensorflow/2.21/Dockerfile.cuda: {BASE_STAGE}",
    ),
    *(
        Variable(name, value, (TF_GPU, TF_CPU), f"{DLC}{TF_FILES}: {BASE_STAGE}")
        for name, value in (
            ("OPEN_MPI_PATH", "/opt/amazon/openmpi"),
            ("KMP_AFFINITY", "granularity=fine,compact,1,0"),
            ("KMP_BLOCKTIME", "1"),
            ("KMP_SETTINGS", "0"),
            ("TF_AUTOTUNE_THRESHOLD", "2"),
        )
    ),
    *(
        Variable(name, value, (TF_GPU,), f"{DLC}docker/tensorflow/2.21/Dockerfile.cuda: {BASE_STAGE}")
        for name, value in (("EFA_PATH", "/opt/amazon/efa"), ("RDMAV_FORK_SAFE", "1"))
    ),
    Variable(
        "PATH",
        "/opt/venv/bin:/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/usr/local/cuda/bin:${PATH}",
        (PT_GPU, RAY, TF_GPU, SERVE_GPU),
        f"{DLC}docker/pytorch/Dockerfile.cuda (stage sagemaker), docker/tensorflow/2.21/Dockerfile.cuda ({BASE_STAGE})",
    ),
    Variable(
        "PATH",
        "/opt/venv/bin:/opt/amazon/openmpi/bin:${PATH}",
        (PT_CPU, TF_CPU, SERVE_CPU),
        f"{DLC}docker/pytorch/Dockerfile.cpu (stage sagemaker), docker/tensorflow/2.21/Dockerfile.cpu ({BASE_STAGE})",
    ),
    Variable(
        "LD_LIBRARY_PATH",
        "/opt/venv/lib/python3.12/site-packages/nvidia/cudnn/lib:/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib:"
        "/opt/amazon/ofi-nccl/lib64:/opt/amazon/openmpi/lib:/opt/amazon/openmpi/lib64:/opt/amazon/efa/lib:"
        "/opt/amazon/efa/lib64:/usr/local/cuda/lib64:/usr/local/lib:${LD_LIBRARY_PATH}",
        (PT_GPU, RAY, SERVE_GPU),
        f"{DLC}docker/pytorch/Dockerfile.cuda: stage sagemaker",
    ),
    Variable(
        "LD_LIBRARY_PATH",
        "/opt/amazon/openmpi/lib:/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib64:/usr/local/cuda/lib64:/usr/local/lib:"
        "${LD_LIBRARY_PATH}",
        (TF_GPU,),
        f"{DLC}docker/tensorflow/2.21/Dockerfile.cuda: {BASE_STAGE}",
    ),
    Variable(
        "LD_LIBRARY_PATH",
        "/opt/amazon/openmpi/lib:/usr/local/lib:${LD_LIBRARY_PATH}",
        (PT_CPU, TF_CPU, SERVE_CPU),
        f"{DLC}docker/pytorch/Dockerfile.cpu (stage sagemaker), docker/tensorflow/2.21/Dockerfile.cpu ({BASE_STAGE})",
    ),
    # TF Serving's image: stage sagemaker FROM runtime-base (amazonlinux:2023; the GPU one nvidia/cuda's, whose own ENV
    # is not here); UV_PROJECT_ENVIRONMENT is its builder stage's only
    *(
        Variable(name, value, (TFS_GPU, TFS_CPU), f"{DLC}{TFS_FILES}: stage runtime-base")
        for name, value in (
            *PYTHON_AND_LOCALE,
            ("DLC_CONTAINER_TYPE", "inference"),
            ("MODEL_BASE_PATH", "/models"),
            ("MODEL_NAME", "model"),
        )
    ),
    Variable("CUDA_HOME", "/usr/local/cuda", (TFS_GPU,), f"{DLC}{TFS_DIR}/Dockerfile.cuda: stage runtime-base"),
    # PATH: runtime-base's ENV, then stage sagemaker's ENV PATH="$PATH:/sagemaker" (the service's folder)
    Variable(
        "PATH",
        "/opt/venv/bin:/usr/local/cuda/bin:${PATH}:/sagemaker",
        (TFS_GPU,),
        f"{DLC}{TFS_DIR}/Dockerfile.cuda: stages runtime-base and sagemaker",
    ),
    Variable(
        "PATH",
        "/opt/venv/bin:${PATH}:/sagemaker",
        (TFS_CPU,),
        f"{DLC}{TFS_DIR}/Dockerfile.cpu: stages runtime-base and sagemaker",
    ),
    Variable(
        "LD_LIBRARY_PATH",
        "/usr/local/cuda/lib64:/usr/local/lib",
        (TFS_GPU,),
        f"{DLC}{TFS_DIR}/Dockerfile.cuda: stage runtime-base",
    ),
    Variable("LD_LIBRARY_PATH", "/usr/local/lib", (TFS_CPU,), f"{DLC}{TFS_DIR}/Dockerfile.cpu: stage runtime-base"),
    Variable("SAGEMAKER_TFS_VERSION", "2.20", (TFS_GPU, TFS_CPU), f"{DLC}{TFS_FILES}: stage sagemaker (TFS_SHORT_VERSION)"),
)

SERVICE = (
    Variable(
        "TRAINING_JOB_NAME",
        "{job}",
        (TRAINING,),
        "aws/sagemaker-containers pull 34 (the training job's name, 'saved by SageMaker' in the container's environment); "
        "the training toolkit reads it (sagemaker_training/environment.py, params.TRAINING_JOB_ENV); the SageMaker SDK's "
        "local mode sets it (sagemaker/core/local/image.py, TRAINING_JOB_NAME_ENV_NAME)",
    ),
    Variable(
        "TRAINING_JOB_ARN",
        "arn:{partition}:sagemaker:{region}:{account}:training-job/{job}",
        (TRAINING,),
        "the SageMaker SDK finds the training job it runs in by it (sagemaker/core/experiments/_environment.py, "
        "TRAINING_JOB_ARN_ENV); it keeps the job name's case, where the service's own ARNs are lowercase "
        "(aws/sagemaker-experiments issue 174 and pull 172). Partition and account: the job's role's (RoleArn)",
    ),
    Variable(
        "AWS_REGION",
        "{region}",
        (TRAINING,),
        "the SageMaker SDK's local mode sets it in a training container (sagemaker/core/local/image.py, REGION_ENV_NAME; "
        "none in a processing container); aws/sagemaker-containers pull 112 (Training sets AWS_REGION, Hosting did "
        "not yet); the training toolkit reads it first (sagemaker_training/trainer.py, files.py). Doubted in "
        "aws/sagemaker-training-toolkit issue 12, asked for in issue 207",
    ),
)

# what a container may have that the twin does not set, and why
NOT_SET = {
    "AWS_DEFAULT_REGION": "no public AWS source says SageMaker sets it in a training or processing container",
    "AWS_REGION (processing)": "the SDK's local mode gives a processing container the request's Environment and "
    "credentials only; step code of a processing job gets its region as an argument (Evaluate's --region)",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, AWS_ACCESS_KEY_ID, ...": "how the job role's credentials reach a container "
    "is not documented (the SDK's local mode passes the caller's keys); no emulated job calls AWS: a local run's store "
    "and registry are local files",
    "PROCESSING_JOB_NAME": "no public source; a processing job's name and ARN are in /opt/ml/config/processingjobconfig.json "
    "(the SDK reads ProcessingJobArn there: sagemaker/core/experiments/_environment.py)",
    "HOSTNAME": "Docker sets the container's host name (Docker run reference); SageMaker documents none for it",
    "SAGEMAKER_SERVING_MODULE": "set by the DLC inference images only; the pipeline's jobs run training images",
    "NVIDIA_VISIBLE_DEVICES, CUDA_VERSION, ...": "the nvidia/cuda base image's ENV (its Dockerfiles are not in the DLC "
    "repository) describes a GPU and driver; an emulated host has no GPU (HETERO_EMULATED_HOST)",
}

_HOST = (TRAINING,)
_BOTH = (TRAINING, PROCESSING)
TWIN = (
    Addition(
        "PATH",
        "{interpreter folder}:{the container's PATH}; a processing job's {job_dir}/bin first",
        _BOTH,
        "the job runs this machine's Python, not the image's /opt/venv: its folder (pip, ray, the venv's tools) comes "
        "first; a processing job's `python3` is a shim for this interpreter",
    ),
    Addition(
        "LD_LIBRARY_PATH",
        "(removed)",
        _BOTH,
        "it names the image's library folders; here /usr/local/cuda/lib64 or /usr/local/lib hold this machine's builds, "
        "which would load ahead of the libraries this machine's packages were built with",
    ),
    Addition(
        "HOME",
        "{this machine's user's home, from the password database}",
        _BOTH,
        "Docker sets HOME from the container's user (root); the job runs as this machine's user",
    ),
    Addition(
        "PYTHONUNBUFFERED",
        "1",
        _BOTH,
        "the emulator reads each process's output line by line as it comes (progress watchdog, interruption at a step, "
        "the echo); an image without a manifest may not set it",
    ),
    Addition("SAGEMAKER_BASE_DIR", "{host folder}", _HOST, "the host's /opt/ml: the training toolkit's own override"),
    Addition(HOSTS_FILE_ENV, "{job_dir}/hosts", _HOST, "the emulated cluster's name service (steps/train/core/cluster.py)"),
    Addition(EMULATED_HOST_ENV, "1", _HOST, "its instance type's GPUs are not there (steps/train/core/gpus.py)"),
    Addition(
        "PYTHONPATH",
        "{image guard}:{code}:{host's site-packages}; a processing job: {image guard}",
        _BOTH,
        "a process imports what its container would: the image's packages (pipeline/emulator/image_guard.py), the code, what its "
        "requirements.txt installed",
    ),
    Addition("PIP_TARGET", "{host's site-packages}", _HOST, "a host's pip installs into its own folder (image_guard.pip_into)"),
    Addition("PIP_DISABLE_PIP_VERSION_CHECK", "1", _HOST, "no network call for pip's version (image_guard.pip_into)"),
    Addition("TMPDIR", "{host temp dir}", _HOST, "its instance's /tmp, removed with the job however it ends"),
)

_REFERENCE = re.compile(r"\$\{(\w+)\}")
_ROLE = re.compile(r"arn:(?P<partition>[\w-]+):iam::(?P<account>\d{12}):role/.+")


def image_env(image_uri: str) -> dict[str, str]:
    """What a container of ``image_uri`` starts with before SageMaker's variables: Docker's and the image's ENV,
    each ``${NAME}`` expanded as Docker does. Docker's alone for an image without a manifest (its ENV is not known)."""
    manifest = manifest_for(image_uri)
    env = {v.name: v.value for v in RUNTIME}
    for variable in IMAGE:
        if manifest is not None and manifest.name in variable.where:
            env[variable.name] = _REFERENCE.sub(lambda m: env.get(m[1], ""), variable.value)
    return env


def training_service_env(*, job_name: str, region: str, role_arn: str) -> dict[str, str]:
    """`SERVICE`: what SageMaker sets in each container of training job ``job_name``."""
    role = _ROLE.fullmatch(role_arn or "")
    if role is None:
        raise UserError(
            f"RoleArn {role_arn!r} is not an IAM role ARN: give the job its role, arn:<partition>:iam::<account>:role/<name>",
            headline="bad request",
        )
    values = {"job": job_name, "region": region, "partition": role["partition"], "account": role["account"]}
    return {v.name: v.value.format(**values) for v in SERVICE if TRAINING in v.where}


def training_host_env(
    *,
    request: Mapping,
    job_name: str,
    region: str,
    base_dir: Path,
    hosts_file: Path,
    pythonpath: list[str],
    site_packages: Path,
    temp_dir: Path,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of an emulated training host's first process (`TWIN` says what each twin value is)."""
    image = request.get("AlgorithmSpecification", {}).get("TrainingImage", "")
    container = {
        **image_env(image),
        **request.get("Environment", {}),
        **training_service_env(job_name=job_name, region=region, role_arn=request.get("RoleArn", "")),
    }
    return {
        **_twin(container, bin_dirs=[]),
        "SAGEMAKER_BASE_DIR": str(base_dir),
        HOSTS_FILE_ENV: str(hosts_file),
        EMULATED_HOST_ENV: "1",
        "PYTHONPATH": os.pathsep.join(filter(None, pythonpath)),
        **pip_into(site_packages),
        "TMPDIR": str(temp_dir),
        **(extra_env or {}),
    }


def processing_env(*, request: Mapping, bin_dir: Path, guard: str, extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of an emulated processing job: its image's, the request's ``Environment`` (SageMaker adds
    no variable of its own that a public source names: `NOT_SET`), the twin's; ``bin_dir`` holds its ``python3``."""
    container = {**image_env(request.get("AppSpecification", {}).get("ImageUri", "")), **request.get("Environment", {})}
    env = _twin(container, bin_dirs=[str(bin_dir)])
    pythonpath = os.pathsep.join(filter(None, [guard, env.get("PYTHONPATH")]))  # the guard first
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return {**env, **(extra_env or {})}


def serving_env(*, container: Mapping, guard: str) -> dict[str, str]:
    """The whole environment of an emulated model container (`pipeline.emulator.serving`): its image's, the container
    definition's ``Environment``, the twin's, the guard first on PYTHONPATH."""
    env = _twin({**image_env(container.get("Image", "")), **container.get("Environment", {})}, bin_dirs=[])
    pythonpath = os.pathsep.join(filter(None, [guard, env.get("PYTHONPATH")]))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def _twin(container: Mapping[str, str], *, bin_dirs: list[str]) -> dict[str, str]:
    """``container``'s environment with what every emulated job needs instead (`TWIN`): this machine's interpreter
    first on PATH, no LD_LIBRARY_PATH, this user's HOME, unbuffered output."""
    env = {k: v for k, v in container.items() if k != "LD_LIBRARY_PATH"}
    interpreter = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([*bin_dirs, interpreter, container.get("PATH", DOCKER_PATH)])
    env["HOME"] = pwd.getpwuid(os.getuid()).pw_dir
    env["PYTHONUNBUFFERED"] = "1"
    return env

"""Default images (offline, from the SageMaker SDK's bundled tables and AWS's DLC regions) and the ECR image-URI parser."""

import json
import re
from pathlib import Path

import pytest

from pipeline.sagemaker.dlc_regions import DLC_REGISTRIES
from pipeline.sagemaker.images import (
    DLC_TAGS,
    IMAGES,
    RAY_REPOSITORY,
    RAY_VERSION,
    SDK_TABLES,
    SERVING_TAGS,
    default_processing_image,
    default_serving_image,
    default_training_image,
    dlc_framework,
    ecr_partition,
    ecr_repository,
    image_regions,
    pipeline_images,
    require_image_region,
)
from steps.common.errors import UserError

# region -> its DLC registry account (the SDK's bundled table and AWS's region list agree)
ACCOUNTS = {"us-east-1": "763104351884", "af-south-1": "626614931356"}
REGIONS = sorted(ACCOUNTS)


@pytest.mark.parametrize("region", REGIONS)
def test_pytorch_defaults_are_the_2_13_sagemaker_dlc_of_the_region(region):
    host = f"{ACCOUNTS[region]}.dkr.ecr.{region}.amazonaws.com"
    assert default_training_image(region, "pytorch") == f"{host}/pytorch:2.13.0-cu133-amzn2023-sagemaker"
    assert default_processing_image(region, "pytorch") == f"{host}/pytorch:2.13.0-cpu-amzn2023-sagemaker"


@pytest.mark.parametrize("region", REGIONS)
def test_tensorflow_defaults_are_the_tags_the_dlc_release_data_lists_not_the_sdks_short_form(region):
    """aws/deep-learning-containers docs/src/data/tensorflow-training/2.21-{gpu,cpu}-sagemaker.yml list these tags; the
    SDK's 2.21.0-gpu-py312 is none of them."""
    host = f"{ACCOUNTS[region]}.dkr.ecr.{region}.amazonaws.com"
    assert default_training_image(region, "tensorflow") == f"{host}/tensorflow-training:2.21.0-gpu-py312-cu129-amzn2023-sagemaker"
    assert default_processing_image(region, "tensorflow") == f"{host}/tensorflow-training:2.21.0-cpu-py312-amzn2023-sagemaker"


@pytest.mark.parametrize("framework", sorted(IMAGES))
def test_the_image_manifests_name_the_default_tags(framework):
    """The emulator finds an image's packages by its tag (`pipeline.emulator.image_guard`): the default images have theirs."""
    from pipeline.emulator.image_guard import manifest_for

    training, processing = default_training_image("us-east-1", framework), default_processing_image("us-east-1", framework)
    assert (manifest_for(training).name, manifest_for(processing).name) == (f"{framework}-gpu", f"{framework}-cpu")


@pytest.mark.parametrize("framework", sorted(IMAGES))
def test_the_sdk_table_lists_the_pinned_version_with_the_dlc_registry_accounts(framework):
    from sagemaker.core import image_uris

    table, key = SDK_TABLES[framework]
    assert IMAGES[framework][1].startswith(key)  # the table's entry is the pinned version (PyTorch's keyed by minor)
    listed = image_uris.config_for_framework(table)["training"]["versions"][key]["registries"]
    assert {r: listed[r] for r in DLC_REGISTRIES if r in listed} == {r: DLC_REGISTRIES[r] for r in listed if r in DLC_REGISTRIES}


@pytest.mark.parametrize("framework", sorted(IMAGES))
def test_the_images_exist_in_the_36_regions_aws_lists_not_the_45_the_sdk_lists(framework):
    from sagemaker.core import image_uris

    table, key = SDK_TABLES[framework]
    assert len(image_uris.config_for_framework(table)["training"]["versions"][key]["registries"]) == 45
    assert image_regions(framework) == tuple(sorted(DLC_REGISTRIES)) and len(DLC_REGISTRIES) == 36


@pytest.mark.parametrize("region", ["us-gov-west-1", "me-west-1", "eusc-de-east-1"])  # in the SDK's table, not in AWS's list
@pytest.mark.parametrize("framework", sorted(IMAGES))
def test_a_region_without_the_image_is_refused_naming_the_framework_and_the_regions_that_have_it(region, framework):
    for build in (default_training_image, default_processing_image):
        with pytest.raises(
            UserError,
            match=rf"^region '{region}' has no AWS Deep Learning Container for {framework} "
            rf"{re.escape(IMAGES[framework][1])}: AWS publishes it in 36 regions "
            r"\(af-south-1, ap-east-1, .*, us-west-2\); use one of them, or your own images$",
        ):
            build(region, framework)
    mine = f"123456789012.dkr.ecr.{region}.amazonaws.com/team/train:1"
    assert pipeline_images(region, framework, training_image=mine, processing_image=mine) == (mine, mine)


def test_the_default_images_are_aws_dlcs_of_their_framework_and_custom_images_are_not():
    for framework in IMAGES:
        for region in ("us-east-1", "af-south-1", "cn-northwest-1"):
            assert dlc_framework(default_training_image(region, framework)) == framework
            assert dlc_framework(default_processing_image(region, framework)) == framework
    # the SDK's GovCloud account for the same image: recognised, so `hetero start` can refuse it by region
    gov = "442386744353.dkr.ecr.us-gov-west-1.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker"
    assert dlc_framework(gov) == "pytorch"
    with pytest.raises(UserError, match="region 'us-gov-west-1' has no AWS Deep Learning Container for pytorch"):
        require_image_region(ecr_repository(gov)[1], "pytorch")
    assert dlc_framework("123456789012.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker") is None
    assert dlc_framework("763104351884.dkr.ecr.us-east-1.amazonaws.com/my-team/pytorch:1") is None


@pytest.mark.parametrize("framework", sorted(IMAGES))
@pytest.mark.parametrize("region", REGIONS)
def test_training_is_the_gpu_variant_and_processing_the_cpu_variant(region, framework):
    training, processing = default_training_image(region, framework), default_processing_image(region, framework)
    assert re.search(r":[\d.]+-(gpu|cu\d+)-", training) and re.search(r":[\d.]+-cpu-", processing), (training, processing)
    assert ecr_repository(training) == ecr_repository(processing) == (ACCOUNTS[region], region, ecr_repository(training)[2])


def test_china_regions_use_the_china_registry_and_dns_suffix():
    image = default_training_image("cn-north-1", "pytorch")
    assert image == "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch:2.13.0-cu133-amzn2023-sagemaker"
    assert ecr_partition("cn-north-1") == "aws-cn" and ecr_partition("af-south-1") == "aws"


def test_pipeline_images_keeps_the_images_given():
    mine = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/train:1"
    assert pipeline_images("eu-west-1", "pytorch", training_image=mine) == (mine, default_processing_image("eu-west-1"))
    assert pipeline_images("${Token[AWS.Region.7]}", "pytorch", training_image=mine, processing_image=mine) == (mine, mine)


@pytest.mark.parametrize("region", ["${Token[AWS.Region.7]}", "", "US-EAST-1"])
def test_a_token_region_cannot_pick_defaults(region):
    with pytest.raises(
        UserError, match=r"is not a region name \(a CloudFormation token\?\).*pass training_image and processing_image"
    ):
        default_training_image(region, "pytorch")


def test_unknown_region_and_framework_are_named():
    with pytest.raises(UserError, match="'xx-nowhere-1'"):
        default_training_image("xx-nowhere-1", "pytorch")
    with pytest.raises(UserError, match="'xx-nowhere-1'"):
        default_processing_image("xx-nowhere-1", "tensorflow")
    with pytest.raises(UserError, match="'jax'.*pytorch, tensorflow"):
        default_training_image("us-east-1", "jax")


@pytest.mark.parametrize(
    "uri, parsed",
    [
        (
            "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker",
            ("763104351884", "us-east-1", "pytorch"),
        ),
        (
            "626614931356.dkr.ecr.af-south-1.amazonaws.com/tensorflow-training:2.21.0-cpu-py312",
            ("626614931356", "af-south-1", "tensorflow-training"),
        ),
        (
            "727897471807.dkr.ecr.cn-northwest-1.amazonaws.com.cn/pytorch-training:2.10.0-gpu-py313",
            ("727897471807", "cn-northwest-1", "pytorch-training"),
        ),
        ("123456789012.dkr.ecr.eu-west-1.amazonaws.com/my-team/pytorch", ("123456789012", "eu-west-1", "my-team/pytorch")),
        (
            "123456789012.dkr.ecr.eu-west-1.amazonaws.com/my_team/py.torch@sha256:" + "a" * 64,
            ("123456789012", "eu-west-1", "my_team/py.torch"),
        ),
        ("123456789012.dkr.ecr.eu-west-1.amazonaws.com/train:v1@sha256:" + "0" * 64, ("123456789012", "eu-west-1", "train")),
        (
            "442386744353.dkr.ecr.us-gov-west-1.amazonaws.com/pytorch:2.13.0-cpu-amzn2023-sagemaker",
            ("442386744353", "us-gov-west-1", "pytorch"),
        ),
    ],
)
def test_ecr_uris_are_parsed(uri, parsed):
    assert ecr_repository(uri) == parsed


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "pytorch:2.13",  # Docker Hub
        "public.ecr.aws/deep-learning-containers/pytorch:2.13-cu133-amzn2023-sagemaker",  # ECR Public: not for jobs
        "img:gpu",
        "76310435188.dkr.ecr.us-east-1.amazonaws.com/pytorch:1",  # 11-digit account
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/",  # no repository
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/PyTorch:1",  # repositories are lower case
        "763104351884.dkr.ecr.us-east-1.amazonaws.com.evil.example/pytorch:1",
        "763104351884.dkr.ecr.us-east-1.amazonaws.cn/pytorch:1",
        "763104351884.ecr.us-east-1.amazonaws.com/pytorch:1",
        "https://763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:1",
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:1 ",
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch@sha256:abc",  # truncated digest
    ],
)
def test_non_ecr_uris_are_user_errors_that_quote_the_value(uri):
    with pytest.raises(UserError, match=re.escape(repr(uri))) as raised:
        ecr_repository(uri)
    assert "<account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>" in raised.value.message


def test_importing_the_module_and_checking_regions_does_not_import_the_sdk():  # hetero start checks regions
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, pipeline.sagemaker.images as i; i.require_image_region('us-east-1', 'tensorflow'); "
        "i.dlc_framework('763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:1'); "
        "print(any(m == 'sagemaker' or m.startswith('sagemaker.') for m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[3]
    )
    assert result.stdout.strip() == "False"


def test_ray_has_no_aws_training_image_and_shards_and_evaluates_on_the_pytorch_cpu_image():
    with pytest.raises(UserError, match=r"framework ray has no AWS training image.*images/ray/Dockerfile"):
        default_training_image("us-east-1", "ray")
    assert default_processing_image("us-east-1", "ray") == default_processing_image("us-east-1", "pytorch")
    mine = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{RAY_REPOSITORY}:{RAY_VERSION}"
    assert pipeline_images("us-east-1", "ray", training_image=mine) == (mine, default_processing_image("us-east-1", "pytorch"))


ROOT = Path(__file__).resolve().parents[3]


def test_the_ray_dockerfile_builds_on_the_pytorch_image_with_the_pinned_ray():
    dockerfile = (ROOT / "images" / "ray" / "Dockerfile").read_text()
    assert re.findall(r"^ARG RAY_VERSION=(\S+)$", dockerfile, re.M) == [RAY_VERSION]
    assert 'RUN pip install --no-cache-dir "ray[data,train]==${RAY_VERSION}"' in dockerfile
    assert "/pytorch:" + DLC_TAGS["pytorch"][1] in dockerfile


def test_one_ray_version_in_the_pins_the_image_its_manifest_and_the_docs():
    """pipeline/sagemaker/images.py RAY_VERSION is the one the pins, the Dockerfile's commands, the image's manifest and the docs name."""
    assert re.findall(r'"ray\[data,train\]==([^"]+)"', (ROOT / "pyproject.toml").read_text()) == [RAY_VERSION]
    assert re.findall(r"^ray==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M) == [RAY_VERSION]
    manifest = json.loads((ROOT / "pipeline" / "manifests" / "ray-gpu.json").read_text())
    assert (manifest["image"]["repository"], manifest["image"]["tags"], manifest["packages"]["ray"]) == (
        RAY_REPOSITORY,
        [RAY_VERSION],
        RAY_VERSION,
    )
    named = []
    for path in [ROOT / "README.md", ROOT / "images" / "ray" / "Dockerfile", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        named += [(path.name, v) for v in re.findall(rf"{RAY_REPOSITORY}:([\w.-]+)", text)]
        named += [(path.name, v) for v in re.findall(r"ray\[data,train\]==([\w.]+)", text)]
    assert named and {v for _, v in named} == {RAY_VERSION}, named


def test_a_model_package_names_the_inference_dlc_of_its_frameworks_model_in_its_region():
    for region, account in ACCOUNTS.items():
        # Ray trains the workload's PyTorch model: it serves as PyTorch's does
        for framework, handler in (("pytorch", "pytorch"), ("ray", "pytorch"), ("tensorflow", "tensorflow")):
            repository, gpu_tag, cpu_tag = SERVING_TAGS[handler]
            cpu = default_serving_image(region, framework)
            assert cpu == f"{account}.dkr.ecr.{region}.amazonaws.com/{repository}:{cpu_tag}"
            assert default_serving_image(region, framework, gpu=True).endswith(f"/{repository}:{gpu_tag}")
    with pytest.raises(UserError, match="the default serving image cannot be looked up"):  # a token's placeholder
        default_serving_image("xx-heteroplaceholder-1", "pytorch")
    assert default_serving_image("cn-north-1", "pytorch").startswith("727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/")


def test_the_serving_dockerfile_builds_on_the_training_image_with_the_pinned_toolkit_and_its_manifests_say_so():
    dockerfile = (ROOT / "images" / "pytorch-serve" / "Dockerfile").read_text()
    (pin,) = re.findall(r'"sagemaker-inference==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert re.findall(r"^sagemaker-inference==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M) == [pin]
    assert re.findall(r"^ARG SAGEMAKER_INFERENCE_VERSION=(\S+)$", dockerfile, re.M) == [pin]
    assert "/pytorch:" + DLC_TAGS["pytorch"][1] in dockerfile and "/pytorch:" + DLC_TAGS["pytorch"][2] in dockerfile
    assert "exec python /opt/ml/model/code/steps/serve/server.py" in dockerfile
    for variant in ("cpu", "gpu"):
        serving = json.loads((ROOT / "pipeline" / "manifests" / f"pytorch-serve-{variant}.json").read_text())
        training = json.loads((ROOT / "pipeline" / "manifests" / f"pytorch-{variant}.json").read_text())
        assert serving["image"]["tags"] == [f"{IMAGES['pytorch'][1]}-{variant}"]
        assert serving["packages"]["sagemaker-inference"] == pin
        added = {k for k in serving["packages"] if serving["packages"][k] != training["packages"].get(k)}
        assert added == {"sagemaker-inference", "retrying"}  # the toolkit takes retrying<1.4: pip replaces the image's

import pytest

from infra.settings import StackSettings
from pipeline.sagemaker.job_access import INPUT_PREFIX_SETTING
from steps.common.errors import UserError
from tests.support.stacks import cdk_json_context


def test_cdk_json_documents_every_key_with_its_default():
    context = {k: v for k, v in cdk_json_context().items() if k.startswith("hetero:")}
    assert context == {key: default for key, (default, _) in StackSettings.help().items()}
    assert StackSettings.from_context(context) == StackSettings()


def test_command_line_strings_are_converted():
    settings = StackSettings.from_context(
        {"hetero:fsx": "true", "hetero:fsxStorageGiB": "2400", "hetero:retrainParameters": '{"Epochs": 5}'}
    )
    assert settings.fsx is True and settings.fsx_storage_gib == 2400 and settings.retrain_parameters == {"Epochs": 5}


@pytest.mark.parametrize(
    "context, named",
    [
        ({"hetero:fsxSize": 1200}, "hetero:fsxSize"),
        ({"hetero:fsx": "maybe"}, "hetero:fsx"),
        ({"hetero:fsxStorageGiB": 1000}, "hetero:fsxStorageGiB"),
        ({"hetero:retrainParameters": {"Epoch": 5}}, "Epoch"),
        ({"hetero:instanceDefaults": {"DataInstanceCount": "many"}}, "DataInstanceCount"),
        ({"hetero:pipelineName": "hetero_training"}, "hetero:pipelineName"),
        ({"hetero:prefix": "/hetero/"}, "hetero:prefix"),
        ({"hetero:inputPrefix": "raw"}, "hetero:inputPrefix"),
        ({"hetero:framework": "jax"}, "hetero:framework='jax': use one of pytorch, tensorflow"),
        ({"hetero:pytorchTrainingImage": "x"}, "hetero:pytorchTrainingImage"),  # renamed to hetero:trainingImage
        ({"hetero:dlcAccount": "763104351884"}, "hetero:dlcAccount"),  # removed: the account comes from each image URI
        (
            {"hetero:retrainParameters": {"PriceOverrides": '{"prices": {"ml.g5.xlarge": 1.0}}'}},
            "PriceOverrides=.*must be the s3:// URI of a JSON price file",
        ),  # the file, never its text (Evaluate reads it as an input)
        ({"hetero:trainingImage": "img:gpu"}, "hetero:trainingImage: image 'img:gpu' is not an ECR image URI"),
        ({"hetero:processingImage": "public.ecr.aws/x/y:1"}, "hetero:processingImage: image 'public.ecr.aws/x/y:1'"),
        # in the SageMaker SDK's image table, but AWS publishes no Deep Learning Containers there
        (
            {"hetero:region": "us-gov-west-1"},
            r"^hetero:region: region 'us-gov-west-1' has no AWS Deep Learning Container for pytorch "
            r"2\.13\.0: AWS publishes it in 36 regions \(af-south-1, .*us-west-2\); use one of them, or "
            r"your own images \(hetero:trainingImage, hetero:processingImage\)$",
        ),
        ({"hetero:region": "eusc-de-east-1", "hetero:framework": "tensorflow"}, "for tensorflow 2.21.0"),
        ({"hetero:region": "me-west-1", "hetero:framework": "ray"}, "for pytorch 2.13.0"),  # Ray's processing image is PyTorch's
        ({"hetero:inputPrefix": "hetero/"}, "hetero:inputPrefix='hetero/' holds the pipeline's artifacts"),
        ({"hetero:notifyEmail": "ops at example.com"}, r"^hetero:notifyEmail='ops at example.com': an e-mail address"),
        ({"hetero:notifyEmail": "ops@localhost"}, "hetero:notifyEmail='ops@localhost'"),
        (
            {"hetero:retrainParameters": {"InputData": "s3://elsewhere/raw/"}},
            "hetero:retrainParameters sets InputData='s3://elsewhere/raw/': .* set hetero:inputPrefix instead",
        ),
    ],
)
def test_bad_context_is_an_error_that_names_the_key(context, named):
    with pytest.raises(UserError, match=named):
        StackSettings.from_context(context)


def test_framework_and_training_image_come_from_context():
    image = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/tf:gpu"
    settings = StackSettings.from_context({"hetero:framework": "tensorflow", "hetero:trainingImage": image})
    assert (settings.framework, settings.training_image) == ("tensorflow", image)
    assert StackSettings().framework == "pytorch"


def test_scheduled_parameters_are_strings_sagemaker_accepts():
    # no instanceDefaults: scheduled runs keep the pipeline's declared instance defaults
    assert StackSettings().scheduled_parameters(bucket="b") == {"InputData": "s3://b/hetero/raw/", "RunBaseline": "false"}
    settings = StackSettings.from_context(
        {"hetero:instanceDefaults": {"DnnInstanceType": "ml.g5.2xlarge", "DataInstanceCount": 2}}
    )
    assert settings.scheduled_parameters(bucket="b") == {
        "InputData": "s3://b/hetero/raw/",
        "DnnInstanceType": "ml.g5.2xlarge",
        "DataInstanceCount": "2",
        "RunBaseline": "false",
    }


def test_own_images_deploy_to_any_region_and_the_input_prefix_may_lie_beside_the_artifacts():
    image = "123456789012.dkr.ecr.us-gov-west-1.amazonaws.com/team/pytorch:1"
    settings = StackSettings.from_context(
        {
            "hetero:region": "us-gov-west-1",
            "hetero:trainingImage": image,
            "hetero:processingImage": image,
            "hetero:inputPrefix": "incoming/",
        }
    )
    assert settings.region == "us-gov-west-1"
    assert settings.scheduled_parameters(bucket="b")["InputData"] == "s3://b/incoming/"


def test_the_input_prefix_setting_named_by_hetero_start_is_this_one():
    assert StackSettings.context_key("input_prefix") == INPUT_PREFIX_SETTING


def test_code_dirs_is_a_list_of_folders_and_the_cli_reads_the_same_key():
    from pipeline.code import CODE_DIRS_KEY

    assert StackSettings.context_key("code_dirs") == CODE_DIRS_KEY
    assert StackSettings.from_context({CODE_DIRS_KEY: '["../mine", "lib"]'}).code_dirs == ["../mine", "lib"]
    for bad in ("mine", "[1]", [""], {"a": 1}):
        with pytest.raises(UserError, match=f"context {CODE_DIRS_KEY}=.* is not a list"):
            StackSettings.from_context({CODE_DIRS_KEY: bad})


def test_notify_email_is_one_address_or_none():
    assert StackSettings().notify_email == ""
    settings = StackSettings.from_context({"hetero:notifyEmail": "ml-ops+alerts@team.example.com"})
    assert settings.notify_email == "ml-ops+alerts@team.example.com"

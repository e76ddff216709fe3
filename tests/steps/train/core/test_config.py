"""TrainConfig at the edge: SageMaker-style hyperparameters in, a frozen config out.

SageMaker writes every hyperparameter as a string in
``input/config/hyperparameters.json`` and the training toolkit JSON-decodes
what it can, so both forms (``"3"`` and ``3``) must parse the same way; its
own ``sagemaker_*`` keys ride along and are ignored here.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from steps.common.errors import UserError
from steps.train.core.config import TrainConfig

# What the toolkit hands over for a typical job: strings as written by the SDK, plus its own keys.
SAGEMAKER_HYPERPARAMETERS = {
    "epochs": "3",
    "batch_size": "32",
    "learning_rate": "0.1",
    "heartbeat_s": "0.5",
    "workload_options": '{"model": "resnet18", "blur": 1.5}',
    "data_group": "data_group",
    "sagemaker_program": "launcher.py",
    "sagemaker_submit_directory": "s3://bucket/job/source/sourcedir.tar.gz",
    "sagemaker_container_log_level": "20",
    "sagemaker_region": '"us-east-1"',
}


def test_defaults_are_valid_and_frozen():
    cfg = TrainConfig.from_hyperparameters({})
    assert cfg == TrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 5  # type: ignore[misc]


def test_strings_are_json_decoded_like_sagemaker_hyperparameters():
    cfg = TrainConfig.from_hyperparameters(SAGEMAKER_HYPERPARAMETERS)
    assert (cfg.epochs, cfg.batch_size) == (3, 32)
    assert cfg.learning_rate == 0.1 and cfg.heartbeat_s == 0.5
    assert cfg.workload_options == {"model": "resnet18", "blur": 1.5}
    assert cfg.data_group == "data_group"


def test_already_decoded_values_parse_the_same():
    as_strings = TrainConfig.from_hyperparameters(SAGEMAKER_HYPERPARAMETERS)
    decoded = {
        k: json.loads(v) if k != "data_group" and not k.startswith("sagemaker_") else v
        for k, v in SAGEMAKER_HYPERPARAMETERS.items()
    }
    assert TrainConfig.from_hyperparameters(decoded) == as_strings


@pytest.mark.parametrize(
    "key, raw, want",
    [
        ("learning_rate", "1", 1.0),  # an int where a float is due is widened
        ("learning_rate", 2, 2.0),
        ("epochs", "4.0", 4),  # an integral float where an int is due is narrowed
        ("epochs", "1e1", 10),
        ("seed", "-3", -3),  # no bound on seeds
        ("data_group", "123", "123"),  # a str field keeps its string as is
        ("workload", "my.module", "my.module"),
        ("workload_options", {"a": 1}, {"a": 1}),
    ],
)
def test_values_are_coerced_where_safe(key, raw, want):
    value = getattr(TrainConfig.from_hyperparameters({key: raw}), key)
    assert value == want and type(value) is type(want)


def test_unknown_key_is_a_user_error_naming_it_and_listing_known_keys():
    with pytest.raises(UserError, match="'epoch'") as caught:
        TrainConfig.from_hyperparameters({"epoch": "2"})
    assert "epochs" in caught.value.message  # the list of known keys shows the fix
    assert caught.value.headline == "bad hyperparameter"


@pytest.mark.parametrize(
    "key, raw",
    [
        ("epochs", "two"),
        ("epochs", "2.5"),
        ("epochs", "true"),  # bools are not ints here
        ("epochs", True),
        ("epochs", "[2]"),
        ("epochs", None),
        ("epochs", "1" * 5000),  # past Python's int-literal digit limit
        ("batch_size", "[[[[[[" * 5000),  # nesting past the JSON decoder's recursion limit
        ("learning_rate", "fast"),
        ("learning_rate", "false"),
        ("heartbeat_s", "NaN"),  # NaN would pass every bound
        ("heartbeat_s", "Infinity"),
        ("connect_timeout_s", "-Infinity"),
        ("silence_timeout_s", "1" + "0" * 400),  # an int too big for a float
        ("workload_options", "not json"),
        ("workload_options", "[1, 2]"),
        ("framework", 5),
        ("data_group", ["a"]),
    ],
)
def test_ill_typed_value_is_a_user_error_naming_the_key(key, raw):
    with pytest.raises(UserError, match=key) as caught:
        TrainConfig.from_hyperparameters({key: raw})
    assert caught.value.headline == "bad hyperparameter"


@pytest.mark.parametrize(
    "key, raw, fragment",
    [
        ("epochs", "0", ">= 1"),
        ("batch_size", "-1", ">= 1"),
        ("max_steps", "-1", ">= 0"),
        ("learning_rate", "-0.1", ">= 0.0"),
        ("heartbeat_s", "0.01", ">= 0.05"),
        ("silence_timeout_s", "0.5", ">= 1.0"),
        ("data_port", "0", "between 1 and 65535"),
        ("data_port", "65536", "between 1 and 65535"),
        ("dist_port", "70000", "between 1 and 65535"),
        ("framework", "mxnet", "allowed values are pytorch, tensorflow"),
        ("precision", "fp64", "allowed values are auto, fp32, bf16, fp16"),
        ("compile", "yes", "allowed values are off, on"),
    ],
)
def test_out_of_bounds_value_is_a_user_error_naming_key_and_bound(key, raw, fragment):
    with pytest.raises(UserError, match=key) as caught:
        TrainConfig.from_hyperparameters({key: raw})
    assert fragment in caught.value.message


@pytest.mark.parametrize("key, raw", [("epochs", "1"), ("heartbeat_s", "0.05"), ("data_port", "65535"), ("learning_rate", "0")])
def test_bounds_are_inclusive(key, raw):
    TrainConfig.from_hyperparameters({key: raw})


def test_sagemaker_keys_are_ignored_even_when_unknown_or_odd():
    cfg = TrainConfig.from_hyperparameters({"sagemaker_anything": {"x": [1]}, "sagemaker_job_name": None})
    assert cfg == TrainConfig()


def test_round_trip_through_hyperparameter_strings():
    cfg = TrainConfig(
        epochs=7,
        batch_size=16,
        learning_rate=0.25,
        workload_options={"model": "tiny", "blur": 0.0, "n": [1, 2]},
        data_group="feeders",
        dnn_group="gpus",
        data_port=9500,
        heartbeat_s=0.1,
        silence_timeout_s=3.0,
        seed=-1,
    )
    strings = cfg.to_hyperparameters()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in strings.items())
    assert set(strings) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert strings["epochs"] == "7" and strings["data_group"] == "feeders"
    assert json.loads(json.dumps(strings)) == strings  # what hyperparameters.json holds
    assert TrainConfig.from_hyperparameters(strings) == cfg
    assert TrainConfig.from_hyperparameters(TrainConfig().to_hyperparameters()) == TrainConfig()


def test_help_covers_every_field():
    help = TrainConfig.help()
    assert set(help) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert all(text.strip() for text in help.values())


def test_a_string_setting_that_looks_like_a_number_survives_the_toolkit():
    # sagemaker-training json.loads every hyperparameter value, so "123" reaches us as 123
    cfg = TrainConfig.from_hyperparameters({"data_group": 123, "dnn_group": True})
    assert cfg.data_group == "123" and cfg.dnn_group == "true"


@pytest.mark.parametrize("value", ["0", "-1", "many", "1.5", ""])
def test_trainer_cpus_is_auto_all_or_a_whole_number_of_vcpus(value):
    with pytest.raises(UserError, match=f"trainer_cpus={value!r}: use auto, all, or a whole number"):
        TrainConfig.from_hyperparameters({"trainer_cpus": value})
    assert TrainConfig.from_hyperparameters({"trainer_cpus": 2}).trainer_cpus == "2"  # the toolkit JSON-decodes "2"

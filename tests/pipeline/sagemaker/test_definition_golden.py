"""The compiled definition, byte for byte, for every framework and option set: a refactor that changes what SageMaker
would run fails here. A change meant to alter the definition regenerates the files and shows up in review:

    HETERO_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/pipeline/sagemaker/test_definition_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("sagemaker.core", reason="the cloud extra (SageMaker SDK v3) is not installed")

from pipeline.cli import main  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "pytorch": [],
    "tensorflow": ["--framework", "tensorflow"],
    "ray": ["--framework", "ray", "--training-image", "111122223333.dkr.ecr.us-east-1.amazonaws.com/hetero-ray:2.60.0"],
    "pytorch-fsx": ["--fsx-file-system-id", "fs-0123456789abcdef0", "--region", "us-west-2"],
    "pytorch-isolated": ["--network-isolation", "--code-uri", "s3://hetero-artifacts-example/hetero/code/abc123.tar.gz"],
    "tensorflow-own-images": [
        "--framework",
        "tensorflow",
        "--region",
        "eu-central-1",
        "--training-image",
        "111122223333.dkr.ecr.eu-central-1.amazonaws.com/mine:gpu",
        "--processing-image",
        "111122223333.dkr.ecr.eu-central-1.amazonaws.com/mine:cpu",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_compiled_definition_is_the_reviewed_one(case, capsys, monkeypatch):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    assert main(["definition", *CASES[case]]) == 0
    compiled = json.loads(capsys.readouterr().out)
    golden = GOLDEN / f"{case}.json"
    text = json.dumps(compiled, indent=1, sort_keys=True) + "\n"
    if os.environ.get("HETERO_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.is_file(), f"no reviewed definition for {case}: run with HETERO_UPDATE_GOLDEN=1 and review the file"
    assert text == golden.read_text(), (
        f"the compiled {case} definition changed: if that is meant, run "
        "HETERO_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/pipeline/sagemaker/test_definition_golden.py "
        "and review the diff"
    )

"""The SageMaker backend: compiles `pipeline.graph.build_graph(framework)` into a SageMaker Pipeline definition.

Built with the SageMaker Python SDK v3, fully offline: nothing here creates an
AWS client that calls out, reads credentials or uploads code. The code reaches
the containers as an S3 URI (``DeploySettings.code_uri``, a tar.gz with
``steps/`` at its root): training jobs get it through the script-mode
hyperparameters ``sagemaker_program`` / ``sagemaker_submit_directory``,
processing jobs download it as an input and unpack it before running the step
script. The CDK app passes CloudFormation tokens for the role, bucket and code
URI; the SDK validates some of those strings, so the definition is built with
safe placeholders and the real values are substituted into the parsed JSON.

The framework (``DeploySettings.framework``, pytorch or tensorflow) is fixed when the
pipeline is compiled. It picks the graph (shard format, ``framework`` hyperparameter)
and the default images, AWS Deep Learning Containers of that framework: the GPU
training image for training jobs and its CPU variant for processing jobs (the
TensorFlow Shard step writes TFRecords with ``tf.io``, so it needs TensorFlow too).

    hetero definition                       # offline, placeholder settings
    hetero definition --framework tensorflow
    hetero definition --role-arn arn:aws:iam::123456789012:role/x --bucket my-bucket \\
        --code-uri s3://my-bucket/code/code.tar.gz --region eu-west-1

The service starts every step whose dependencies are met, side by side: a step that reads where another step's
job writes must depend on it (a property reference or DependsOn), or `build_definition` refuses the definition
(`pipeline.sagemaker.dependencies.validate_dependencies`).

What the cloud does differently from the local runner, by name:

* ``RunBaseline`` is a ConditionStep (``BaselineGate``). Steps downstream of a
  branch not taken do not run (the SDK's own local executor blocks that whole
  sub-DAG), so what follows the baseline exists in both branches:
  ``TrainBaseline -> Evaluate -> RegisterModel -> CheckImprovement`` when it is true,
  ``EvaluateWithoutBaseline -> RegisterModelWithoutBaseline`` when it is false.
* ``DataSource`` cannot switch a channel at run time: S3 or FSx is fixed when the
  pipeline is deployed (``DeploySettings.fsx``). ``CheckParameters`` fails the
  execution before any job starts when DataSource asks for the other one, and
  when ImprovementThreshold is set without RunBaseline (nothing to compare; the
  local runner finds that out only at CheckImprovement).
* FSx for Lustre channels are always read in File mode; InputMode applies to S3.
* ``InstanceGroup.instance_count`` is an int in SDK v3: the counts are built as
  placeholders and replaced by ``{"Get": "Parameters.<name>"}`` in the JSON.
* Training jobs carry ``AlgorithmSpecification.ContainerEntrypoint`` (``settings.TRAINING_BOOTSTRAP``):
  the script-mode hyperparameters stay, but the entry point runs as the container's
  first process, so it receives SIGTERM.
* Training jobs have no Environment (DescribeTrainingJob shows it): the data plane's
  secret is the ``secret`` channel, a random object the Shard step writes per execution.
* With ``network_isolation`` the training containers reach nothing beyond their cluster,
  so the code is one more channel (``code``, every group) and ``sagemaker_submit_directory``
  names its file, ``/opt/ml/input/data/code/<object name>`` (the SageMaker SDK's own way).
"""

from __future__ import annotations

import json

from pipeline.graph import build_graph
from pipeline.sagemaker.compiler import Compiler
from pipeline.sagemaker.dependencies import validate_dependencies
from pipeline.sagemaker.offline import offline_sdk
from pipeline.sagemaker.placeholders import (
    all_steps,
    parameterise_instance_counts,
    parameterise_volumes,
    placeholder_settings,
    substitute,
    substitutions,
)
from pipeline.sagemaker.settings import TRAINING_ENTRYPOINT, DeploySettings, FsxSettings, check

__all__ = ["DeploySettings", "FsxSettings", "all_steps", "build_definition", "definition_json"]


def definition_json(settings: DeploySettings) -> str:
    """The definition as deterministic text: same settings, byte-identical output."""
    return json.dumps(build_definition(settings), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def build_definition(settings: DeploySettings) -> dict:
    """The parsed SageMaker Pipeline definition for ``settings`` (no network calls)."""
    check(settings)
    graph = build_graph(settings.framework)
    placeholders = placeholder_settings(settings)
    with offline_sdk(placeholders.region):
        raw = Compiler(graph, placeholders).pipeline().definition()
    definition = json.loads(raw)
    parameterise_instance_counts(definition, graph)
    parameterise_volumes(definition, graph)
    for step in all_steps(definition).values():  # ModelTrainer has no option for it (settings.TRAINING_BOOTSTRAP says why)
        if step["Type"] == "Training":
            step["Arguments"]["AlgorithmSpecification"]["ContainerEntrypoint"] = list(TRAINING_ENTRYPOINT)
    definition = substitute(definition, substitutions(settings, placeholders))
    validate_dependencies(definition)  # the service's order is the graph's: no step reads what it does not wait for
    return definition

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

What the cloud does differently from the local runner, by name:

* ``RunBaseline`` is a ConditionStep (``BaselineGate``). Steps downstream of a
  branch not taken do not run (the SDK's own local executor blocks that whole
  sub-DAG), so what follows the baseline exists in both branches:
  ``TrainBaseline -> Evaluate -> CheckImprovement`` when it is true,
  ``EvaluateWithoutBaseline`` when it is false.
* ``DataSource`` cannot switch a channel at run time: S3 or FSx is fixed when the
  pipeline is deployed (``DeploySettings.fsx``). ``CheckParameters`` fails the
  execution before any job starts when DataSource asks for the other one, and
  when ImprovementThreshold is set without RunBaseline (nothing to compare; the
  local runner finds that out only at CheckImprovement).
* FSx for Lustre channels are always read in File mode; InputMode applies to S3.
* ``InstanceGroup.instance_count`` is an int in SDK v3: the counts are built as
  placeholders and replaced by ``{"Get": "Parameters.<name>"}`` in the JSON.
"""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from pipeline.graph import (
    CheckStep,
    ExecutionId,
    Graph,
    Output,
    Param,
    ProcessingStep,
    TrainingStep,
    build_graph,
)
from steps.common.errors import UserError
from steps.train.auth import SECRET_ENV
from steps.train.config import FRAMEWORKS
from steps.train.metrics import METRIC_DEFINITIONS

PYTORCH_VERSION, PY_VERSION = "2.5.1", "py311"  # the framework container; heterogeneous clusters need PyTorch >= 1.10
# Heterogeneous clusters need TensorFlow >= 2.6. 2.21.0 is the newest training version in the SDK's bundled
# image table (image_uri_config/tensorflow.json) and it has both GPU and CPU images, with py312 only.
TENSORFLOW_VERSION, TENSORFLOW_PY_VERSION = "2.21.0", "py312"
IMAGES = {"pytorch": ("pytorch", PYTORCH_VERSION, PY_VERSION),  # framework -> (SDK image name, version, py_version)
          "tensorflow": ("tensorflow", TENSORFLOW_VERSION, TENSORFLOW_PY_VERSION)}
DLC_REPOSITORIES = {"pytorch": "pytorch-training", "tensorflow": "tensorflow-training"}  # ECR repositories of those images
TRAINING_INSTANCE_TYPE = "ml.p3.2xlarge"  # any GPU type: picks the GPU variant of the image
PROCESSING_INSTANCE_TYPE = "ml.m5.xlarge"
MAX_RUNTIME_S = 6 * 3600  # a stuck job bills every host of the cluster until this cap
VOLUME_GB = 100
PROCESSING_ROOT = "/opt/ml/processing"
CODE_DIR = f"{PROCESSING_ROOT}/input/code"
CHECKPOINT_DIR = "/opt/ml/checkpoints"
PROPERTY_FILE = "PricePerformance"

# Placeholders the SDK accepts; replaced by the real settings in the parsed definition.
_ROLE = "arn:aws:iam::000000000000:role/hetero-placeholder-role"
_BUCKET = "hetero-placeholder-bucket"
_CODE = "s3://hetero-placeholder-bucket/hetero-placeholder-code/code.tar.gz"
_PLACEHOLDER_REGION = "xx-heteroplaceholder-1"  # when the region is a token (an environment-agnostic CDK stack)
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")


@dataclass(frozen=True)
class FsxSettings:
    """An FSx for Lustre file system whose ``directory_path`` mirrors ``s3://<bucket>/<prefix>/``
    (a data repository association), so an execution's shards appear under
    ``<directory_path>/<execution id>/Shard/train``. Jobs that mount it run in the VPC."""

    file_system_id: str
    directory_path: str  # /<mount name>/<association's file system path>
    subnets: tuple[str, ...]
    security_group_ids: tuple[str, ...]


@dataclass(frozen=True)
class DeploySettings:
    pipeline_name: str
    region: str
    role_arn: str
    bucket: str  # artifact bucket name
    code_uri: str  # s3 URI of the code tar.gz (steps/ at its root)
    prefix: str = "hetero"  # key prefix for everything the pipeline writes
    framework: str = "pytorch"  # one of FRAMEWORKS: picks the graph and the default images
    training_image: str | None = None  # default: the AWS GPU training image of the framework in the region
    processing_image: str | None = None  # default: the CPU variant of the same image
    fsx: FsxSettings | None = None


def definition_json(settings: DeploySettings) -> str:
    """The definition as deterministic text: same settings, byte-identical output."""
    return json.dumps(build_definition(settings), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def build_definition(settings: DeploySettings) -> dict:
    """The parsed SageMaker Pipeline definition for ``settings`` (no network calls)."""
    _check(settings)
    graph = build_graph(settings.framework)
    placeholders = replace(settings, role_arn=_ROLE, bucket=_BUCKET, code_uri=_CODE, fsx=_placeholder_fsx(settings.fsx),
                           region=settings.region if _REGION.fullmatch(settings.region) else _PLACEHOLDER_REGION)
    with _offline_sdk(placeholders.region):
        raw = _Compiler(graph, placeholders).pipeline().definition()
    definition = json.loads(raw)
    _parameterise_instance_counts(definition, graph)
    return _substitute(definition, _substitutions(settings, placeholders))


# -- settings -----------------------------------------------------------------

def _check(settings: DeploySettings) -> None:
    for name in ("pipeline_name", "region", "role_arn", "bucket", "code_uri"):
        if not getattr(settings, name):
            raise UserError(f"DeploySettings.{name} is empty; pass the {name.replace('_', ' ')}", headline="bad deploy settings")
    if settings.framework not in FRAMEWORKS:
        raise UserError(f"DeploySettings.framework {settings.framework!r} is not supported; use one of {', '.join(FRAMEWORKS)}",
                        headline="bad deploy settings")
    if settings.prefix.strip("/") != settings.prefix or not settings.prefix:
        raise UserError(f"DeploySettings.prefix {settings.prefix!r} must be a key prefix without leading or trailing '/'",
                        headline="bad deploy settings")
    if not _REGION.fullmatch(settings.region) and not (settings.training_image and settings.processing_image):
        raise UserError(f"region {settings.region!r} is not a region name (a CloudFormation token?), so the default images "
                        "cannot be looked up: pass training_image and processing_image, or a concrete region",
                        headline="bad deploy settings")
    if settings.fsx and not (settings.fsx.subnets and settings.fsx.security_group_ids):
        raise UserError("FsxSettings needs subnets and security_group_ids: jobs that mount FSx run in its VPC",
                        headline="bad deploy settings")


def _placeholder_fsx(fsx: FsxSettings | None) -> FsxSettings | None:
    if fsx is None:
        return None
    return FsxSettings("fs-00000000placeholder", "/placeholder-fsx-path",
                       tuple(f"subnet-placeholder{i}" for i in range(len(fsx.subnets))),
                       tuple(f"sg-placeholder{i}" for i in range(len(fsx.security_group_ids))))


def _substitutions(real: DeploySettings, fake: DeploySettings) -> list[tuple[str, str]]:
    pairs = [(fake.role_arn, real.role_arn), (fake.code_uri, real.code_uri), (fake.bucket, real.bucket)]
    if fake.region != real.region:
        pairs.append((fake.region, real.region))
    if real.fsx:
        pairs += [(fake.fsx.file_system_id, real.fsx.file_system_id), (fake.fsx.directory_path, real.fsx.directory_path)]
        pairs += list(zip(fake.fsx.subnets, real.fsx.subnets)) + list(zip(fake.fsx.security_group_ids, real.fsx.security_group_ids))
    return sorted(pairs, key=lambda p: -len(p[0]))  # longest first: the code URI contains the bucket


def _substitute(node: Any, pairs: list[tuple[str, str]]) -> Any:
    """Placeholders -> real values in every string of the parsed definition (keys untouched).

    One pass per string, longest placeholder first, so a real value (a CDK token, say) is
    never itself searched for placeholders."""
    lookup = dict(pairs)
    pattern = re.compile("|".join(re.escape(fake) for fake, _ in pairs))

    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            return pattern.sub(lambda m: lookup[m.group(0)], value)
        return value

    return walk(node)


def default_training_image(region: str, framework: str = "pytorch") -> str:
    return _image(region, framework, TRAINING_INSTANCE_TYPE)


def default_processing_image(region: str, framework: str = "pytorch") -> str:
    return _image(region, framework, PROCESSING_INSTANCE_TYPE)


def _image(region: str, framework: str, instance_type: str) -> str:
    from sagemaker.core import image_uris  # bundled tables, no network

    name, version, py_version = IMAGES[framework]
    return image_uris.retrieve(name, region=region, version=version, py_version=py_version,
                               instance_type=instance_type, image_scope="training")


# -- the SDK, offline ---------------------------------------------------------

_SDK_CONFIG = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}


@contextmanager
def _offline_sdk(region: str):
    """What the SDK needs to build without the network, undone afterwards.

    * a region before `sagemaker.mlops` is imported (a module there creates a client at import);
    * no IAM role lookups (``SAGEMAKER_VALIDATE_ROLE=false``; the role is a placeholder ARN anyway);
    * no instance-metadata probe: ProcessingStep builds a LocalSession on the default boto3
      session, whose credential chain would try 169.254.169.254;
    * the SDK re-validates the session config against its JSON schema on every lookup (dozens
      of times, ~0.3 s each): our config is a constant, validated once here, then skipped.
    """
    wanted = {"AWS_DEFAULT_REGION": region, "SAGEMAKER_VALIDATE_ROLE": "false", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    patched = None
    try:
        from sagemaker.core.config.config_manager import SageMakerConfig

        validate = SageMakerConfig.__dict__["validate_sagemaker_config"]
        validate.__func__(_SDK_CONFIG)

        def validate_once(sagemaker_config=None):
            if sagemaker_config is not _SDK_CONFIG:
                validate.__func__(sagemaker_config)

        SageMakerConfig.validate_sagemaker_config = staticmethod(validate_once)
        patched = (SageMakerConfig, validate)
        with warnings.catch_warnings(), _quiet_sdk_logs():
            # "Running within a PipelineSession...", job names popped: expected while compiling
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        if patched:
            patched[0].validate_sagemaker_config = patched[1]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def _quiet_sdk_logs():
    """The SDK logs each default it applies at INFO/WARNING; only errors matter while compiling."""
    loggers = [logging.getLogger(name) for name in sorted(logging.root.manager.loggerDict) if name.split(".")[0] == "sagemaker"]
    loggers = [logging.getLogger("sagemaker"), *loggers]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _session(region: str):
    import boto3
    from sagemaker.core.workflow.pipeline_context import PipelineSession

    # Dummy credentials: nothing is signed or sent; they keep boto3 from searching for real ones.
    boto_session = boto3.Session(region_name=region, aws_access_key_id="offline", aws_secret_access_key="offline")
    return PipelineSession(boto_session=boto_session, sagemaker_config=_SDK_CONFIG, default_bucket=_BUCKET)


# -- the compiler -------------------------------------------------------------

class _Compiler:
    def __init__(self, graph: Graph, settings: DeploySettings):
        from sagemaker.core.workflow.execution_variables import ExecutionVariables
        from sagemaker.core.workflow.parameters import ParameterBoolean, ParameterFloat, ParameterInteger, ParameterString

        self.graph = graph
        self.s = settings
        self.session = _session(settings.region)
        self.exec_id = ExecutionVariables.PIPELINE_EXECUTION_ID
        self.exec_arn = ExecutionVariables.PIPELINE_EXECUTION_ARN
        kinds = {bool: ParameterBoolean, int: ParameterInteger, float: ParameterFloat, str: ParameterString}
        self.params = {p.name: kinds[p.type](name=p.name, default_value=self._default(p)) for p in graph.parameters}
        self.steps: dict = {}
        self.training_image = settings.training_image or default_training_image(settings.region, settings.framework)
        self.processing_image = settings.processing_image or default_processing_image(settings.region, settings.framework)

    def _default(self, p):
        if p.name == "InputData":  # a folder locally; the cloud reads raw images from the bucket
            return f"s3://{self.s.bucket}/{self.s.prefix}/raw/"
        if p.name == "DataSource":
            return "FSx" if self.s.fsx else "S3"
        return p.default

    # values of the graph -> pipeline expressions
    def value(self, v, *, string: bool = False):
        if isinstance(v, Param):
            param = self.params[v.name]
            return param.to_string() if string and self._graph_param(v).type is not str else param
        if isinstance(v, ExecutionId):
            return self.exec_id
        if isinstance(v, Output):
            return self.output_uri(v)
        return str(v).lower() if string and isinstance(v, bool) else (str(v) if string else v)

    def _graph_param(self, ref: Param):
        return next(p for p in self.graph.parameters if p.name == ref.name)

    def s3(self, *parts):
        from sagemaker.core.workflow.functions import Join

        return Join(on="/", values=[f"s3://{self.s.bucket}/{self.s.prefix}", *parts])

    def output_uri(self, ref: Output):
        from sagemaker.core.workflow.functions import Join

        step = self.steps[ref.step]
        if isinstance(self.graph.step(ref.step), TrainingStep):
            return step.properties.ModelArtifacts.S3ModelArtifacts
        base = step.properties.ProcessingOutputConfig.Outputs["output"].S3Output.S3Uri
        rel = self.graph.step(ref.step).outputs[ref.name]
        return base if rel in (".", "") else Join(on="/", values=[base, rel])

    # steps
    def processing(self, step: ProcessingStep, *, name: str | None = None, skip_inputs=(), property_files=()):
        from sagemaker.core.processing import Processor
        from sagemaker.core.shapes import ProcessingInput, ProcessingOutput, ProcessingS3Input, ProcessingS3Output
        from sagemaker.mlops.workflow.steps import ProcessingStep as SmProcessingStep

        name = name or step.name

        def s3_input(input_name, uri, local_path):
            return ProcessingInput(input_name=input_name, s3_input=ProcessingS3Input(
                s3_uri=uri, local_path=local_path, s3_data_type="S3Prefix", s3_input_mode="File"))

        inputs = [s3_input("code", self.s.code_uri, CODE_DIR)]
        args = ["--output", f"{PROCESSING_ROOT}/output"]
        for input_name, ref in step.inputs.items():
            if input_name in skip_inputs:
                continue
            local = f"{PROCESSING_ROOT}/input/{input_name}"
            inputs.append(s3_input(input_name, self.value(ref), local))
            args += [f"--{input_name}", local]
        for flag, ref in step.arguments.items():
            args += [flag, self.value(ref, string=True)]
        if step.name == "Evaluate":  # the results store lives in the artifact bucket
            args += ["--store", f"s3://{self.s.bucket}/{self.s.prefix}/results"]
        outputs = [ProcessingOutput(output_name="output", s3_output=ProcessingS3Output(
            s3_uri=self.s3(self.exec_id, name), local_path=f"{PROCESSING_ROOT}/output", s3_upload_mode="EndOfJob"))]
        # Processing has no script mode: unpack the code (a gzipped tar, whatever its object name: CDK
        # names assets <hash>.gz), then run the step script from the root of the tree.
        unpack = (f'set -e; mkdir -p /opt/ml/code; for f in {CODE_DIR}/*; do tar -xzf "$f" -C /opt/ml/code; done; '
                  f'cd /opt/ml/code; exec python3 {step.script} "$@"')
        processor = Processor(role=self.s.role_arn, image_uri=self.processing_image, instance_count=1,
                              instance_type=step.instance_type, entrypoint=["/bin/sh", "-c", unpack, step.script],
                              volume_size_in_gb=VOLUME_GB, max_runtime_in_seconds=MAX_RUNTIME_S,
                              base_job_name=f"hetero-{name.lower()}", sagemaker_session=self.session)
        sm_step = SmProcessingStep(name=name, step_args=processor.run(inputs=inputs, outputs=outputs, arguments=args),
                                   property_files=list(property_files), depends_on=None)
        self.steps[name] = sm_step
        return sm_step

    def training(self, step: TrainingStep):
        from sagemaker.core.shapes import (
            Channel, CheckpointConfig, DataSource, FileSystemDataSource, InstanceGroup, MetricDefinition,
            OutputDataConfig, S3DataSource, StoppingCondition,
        )
        from sagemaker.core.training.configs import Compute, Networking
        from sagemaker.mlops.workflow.steps import TrainingStep as SmTrainingStep
        from sagemaker.train import ModelTrainer

        # Counts are ints in SDK v3: a placeholder here, `Parameters.<count>` after compiling.
        groups = [InstanceGroup(instance_group_name=g.name, instance_type=self.value(g.instance_type), instance_count=1)
                  for g in step.groups]
        channels = []
        for c in step.channels:
            if c.name == "train" and self.s.fsx:
                source = DataSource(file_system_data_source=FileSystemDataSource(
                    file_system_id=self.s.fsx.file_system_id, file_system_type="FSxLustre", file_system_access_mode="ro",
                    directory_path=_join("", self.s.fsx.directory_path, "/", self.exec_id, "/Shard/train")))
                channels.append(Channel(channel_name=c.name, data_source=source, input_mode="File"))
                continue
            s3 = S3DataSource(s3_data_type="S3Prefix", s3_uri=self.value(c.source), s3_data_distribution_type=self.value(c.distribution),
                              **({"instance_group_names": list(c.instance_groups)} if c.instance_groups else {}))
            channels.append(Channel(channel_name=c.name, data_source=DataSource(s3_data_source=s3), input_mode=self.value(c.input_mode)))
        hyperparameters = {k: self.value(v, string=True) for k, v in step.hyperparameters.items()}
        hyperparameters.update(sagemaker_program=step.entry_point, sagemaker_submit_directory=self.s.code_uri,
                               sagemaker_region=self.s.region)
        trainer = ModelTrainer(
            training_image=self.training_image,  # explicit: with a parameterised instance type the SDK would pick the CPU image
            role=self.s.role_arn,
            sagemaker_session=self.session,
            base_job_name=f"hetero-{step.name.lower()}",
            compute=Compute(instance_groups=groups, volume_size_in_gb=VOLUME_GB),
            networking=Networking(subnets=list(self.s.fsx.subnets), security_group_ids=list(self.s.fsx.security_group_ids))
            if self.s.fsx else None,
            stopping_condition=StoppingCondition(max_runtime_in_seconds=MAX_RUNTIME_S),
            output_data_config=OutputDataConfig(s3_output_path=self.s3(self.exec_id, step.name)),
            checkpoint_config=CheckpointConfig(s3_uri=self.s3(self.exec_id, "checkpoints", step.name), local_path=CHECKPOINT_DIR),
            hyperparameters=hyperparameters,
            # Threat model of the data-plane secret: it keeps out network peers (other jobs or hosts in the
            # VPC, port scans) that lack IAM read access to this pipeline. The execution ARN is unguessable
            # from the network but readable by anyone allowed sagemaker:List/DescribePipelineExecution(s) or
            # DescribeTrainingJob (the environment is shown there): such principals are trusted here.
            environment={SECRET_ENV: _join("", self.exec_arn, "/", step.name)},
        ).with_metric_definitions([MetricDefinition(name=m["Name"], regex=m["Regex"]) for m in METRIC_DEFINITIONS])
        sm_step = SmTrainingStep(name=step.name, step_args=trainer.train(input_data_config=channels))
        self.steps[step.name] = sm_step
        return sm_step

    def check(self, step: CheckStep, evaluate):
        from sagemaker.core.workflow.conditions import ConditionGreaterThan, ConditionLessThan
        from sagemaker.core.workflow.functions import JsonGet
        from sagemaker.mlops.workflow.condition_step import ConditionStep
        from sagemaker.mlops.workflow.fail_step import FailStep

        threshold = self.params[step.threshold.name]
        value = JsonGet(step_name=evaluate.name, property_file=PROPERTY_FILE, json_path=step.field)
        fail = FailStep(name="ImprovementBelowThreshold", error_message=_join(
            "", f"{step.message}: {step.field} ", value, f" < {step.threshold.name} ", threshold,
            f" (see {step.file} in the Evaluate output)"))
        # threshold -1 never fails, as in the local runner
        return ConditionStep(name=step.name, conditions=[ConditionGreaterThan(left=threshold, right=-1),
                                                         ConditionLessThan(left=value, right=threshold)],
                             if_steps=[fail], else_steps=[])

    def pipeline(self):
        from sagemaker.core.workflow.conditions import ConditionEquals, ConditionLessThanOrEqualTo, ConditionOr
        from sagemaker.core.workflow.properties import PropertyFile
        from sagemaker.mlops.workflow.condition_step import ConditionStep
        from sagemaker.mlops.workflow.fail_step import FailStep
        from sagemaker.mlops.workflow.pipeline import Pipeline

        g, p = self.graph, self.params
        shard = self.processing(g.step("Shard"))
        hetero = self.training(g.step("TrainHeterogeneous"))
        baseline_spec = g.step("TrainBaseline")
        baseline = self.training(baseline_spec)
        evaluate_spec, check_spec = g.step("Evaluate"), g.step("CheckImprovement")
        prop = PropertyFile(name=PROPERTY_FILE, output_name="output", path=check_spec.file)
        evaluate = self.processing(evaluate_spec, property_files=[prop])
        without = self.processing(evaluate_spec, name="EvaluateWithoutBaseline",
                                  skip_inputs=[n for n, ref in evaluate_spec.inputs.items()
                                               if isinstance(ref, Output) and ref.step == baseline_spec.name])
        check = self.check(check_spec, evaluate)
        gate = ConditionStep(name="BaselineGate", conditions=[ConditionEquals(left=p[baseline_spec.condition.name], right=True)],
                             if_steps=[baseline, evaluate, check], else_steps=[without])
        deployed = "FSx" if self.s.fsx else "S3"
        invalid = FailStep(name="InvalidParameters", error_message=_join(
            "", "parameters rejected: DataSource=", p["DataSource"],
            f" (this pipeline was deployed to read training data from {deployed}; redeploy "
            f"{'without' if self.s.fsx else 'with'} FSx to change it), or ImprovementThreshold=", p["ImprovementThreshold"],
            " with RunBaseline=", p["RunBaseline"], " (a threshold above -1 needs RunBaseline=true)",
            *_dnn_limit_message(g, p)))
        conditions = [ConditionEquals(left=p["DataSource"], right=deployed),
                      ConditionOr(conditions=[ConditionEquals(left=p["RunBaseline"], right=True),
                                              ConditionLessThanOrEqualTo(left=p["ImprovementThreshold"], right=-1)])]
        if g.max_dnn_hosts is not None:
            conditions.append(ConditionLessThanOrEqualTo(left=p["DnnInstanceCount"], right=g.max_dnn_hosts))
        check_params = ConditionStep(name="CheckParameters", conditions=conditions, if_steps=[shard], else_steps=[invalid])
        return Pipeline(name=self.s.pipeline_name, parameters=list(self.params.values()),
                        steps=[check_params, hetero, gate], sagemaker_session=self.session,
                        pipeline_experiment_config=None)


def _dnn_limit_message(graph: Graph, p: dict) -> list:
    if graph.max_dnn_hosts is None:
        return []
    return [", or DnnInstanceCount=", p["DnnInstanceCount"],
            f" (the {graph.framework} path trains on at most {graph.max_dnn_hosts} dnn host)"]


def _join(on: str, *values):
    from sagemaker.core.workflow.functions import Join

    return Join(on=on, values=list(values))


def _parameterise_instance_counts(definition: dict, graph: Graph) -> None:
    """Replace each placeholder InstanceGroups[].InstanceCount by its graph parameter."""
    steps = {s["Name"]: s for s in _all_steps(definition["Steps"])}
    for spec in graph.steps:
        if not isinstance(spec, TrainingStep):
            continue
        groups = steps[spec.name]["Arguments"]["ResourceConfig"]["InstanceGroups"]
        by_name = {g["InstanceGroupName"]: g for g in groups}
        assert set(by_name) == {g.name for g in spec.groups}, (spec.name, by_name)
        for g in spec.groups:
            by_name[g.name]["InstanceCount"] = {"Get": f"Parameters.{g.count.name}"} if isinstance(g.count, Param) else g.count


def _all_steps(steps: list) -> list:
    """Every step of a definition, those inside condition branches included."""
    found = []
    for step in steps:
        found.append(step)
        if step.get("Type") == "Condition":
            found += _all_steps(step["Arguments"].get("IfSteps", []) + step["Arguments"].get("ElseSteps", []))
    return found


def all_steps(definition: dict) -> dict:
    """Name -> step of a parsed definition, nested branches included."""
    return {s["Name"]: s for s in _all_steps(definition["Steps"])}

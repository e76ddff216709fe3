"""Each kind of step of the graph compiled to SageMaker SDK v3 step objects: processing, training, register, check.

`StepCompiler` holds the compiled parameters and steps and turns the graph's values (literals, parameters, outputs of
earlier steps) into pipeline expressions; `pipeline.sagemaker.compiler` assembles the steps into one pipeline.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

from pipeline.graph import (
    Billing,
    CheckStep,
    ExecutionId,
    Graph,
    Output,
    Param,
    PipelineName,
    ProcessingStep,
    RegisterStep,
    TrainChannel,
    TrainingStep,
    Value,
)
from pipeline.sagemaker.images import default_processing_image, default_serving_image, default_training_image
from pipeline.sagemaker.offline import session
from pipeline.sagemaker.settings import (
    CODE_CHANNEL_DIR,
    CODE_DIR,
    MAX_RUNTIME_S,
    MAX_WAIT_S,
    MODEL_METRICS_PROPERTY_FILE,
    PROCESSING_ROOT,
    PROPERTY_FILE,
    TRAINING_RETRY_ATTEMPTS,
    DeploySettings,
    code_file,
    default_price_overrides_uri,
    model_package_group,
    model_registry,
)
from steps.contract import (
    CHECKPOINT_FOLDER,
    CHECKPOINT_LOCAL_PATH,
    CODE_CHANNEL,
    METRIC_DEFINITIONS,
    REPLICATED,
    RESULTS_FOLDER,
    Tunable,
)

if TYPE_CHECKING:  # the SDK is imported where used: it must not load before offline_sdk() has set the region
    from sagemaker.core.helper.pipeline_variable import PipelineVariable
    from sagemaker.core.training.configs import Networking
    from sagemaker.core.workflow.functions import Join
    from sagemaker.core.workflow.properties import PropertyFile
    from sagemaker.mlops.workflow.condition_step import ConditionStep
    from sagemaker.mlops.workflow.model_step import ModelStep
    from sagemaker.mlops.workflow.steps import ProcessingStep as SmProcessingStep
    from sagemaker.mlops.workflow.steps import TrainingStep as SmTrainingStep


class StepCompiler:
    """Each kind of graph step as SDK step objects (processing, training, register, check), and the graph's values as
    pipeline expressions; `pipeline.sagemaker.compiler.Compiler` puts them in one pipeline."""

    def __init__(self, graph: Graph, settings: DeploySettings) -> None:
        from sagemaker.core.workflow.execution_variables import ExecutionVariables
        from sagemaker.core.workflow.parameters import ParameterBoolean, ParameterFloat, ParameterInteger, ParameterString

        self.graph = graph
        self.s = settings
        self.session = session(settings.region, settings.bucket)
        self.exec_id = ExecutionVariables.PIPELINE_EXECUTION_ID
        kinds = {bool: ParameterBoolean, int: ParameterInteger, float: ParameterFloat, str: ParameterString}
        self.params = {p.name: kinds[p.type](name=p.name, default_value=self._default(p)) for p in graph.parameters}
        self.steps: dict = {}
        self.training_image = settings.training_image or default_training_image(settings.region, settings.framework)
        # what a registered model package names to serve (None: the framework's model has no serving form yet); the
        # framework's GPU inference image is the package's second specification (`GPU_SPECIFICATION`) unless the
        # deployment names an image of its own
        self.serving_image = settings.serving_image or default_serving_image(settings.region, settings.framework)
        self.gpu_serving_image = (
            None if settings.serving_image else default_serving_image(settings.region, settings.framework, gpu=True)
        )
        self.processing_image = settings.processing_image or default_processing_image(settings.region, settings.framework)

    def _default(self, p):
        if p.name == "InputData":  # a folder locally; the cloud reads raw images from the bucket
            return f"s3://{self.s.bucket}/{self.s.prefix}/raw/"
        if p.name == "DataSource":
            return "FSx" if self.s.fsx else "S3"
        if p.name == "PriceOverrides":  # a processing input's S3Uri cannot be empty: an object that overrides nothing
            return self.s.price_overrides_uri or default_price_overrides_uri(self.s)
        return p.default

    # values of the graph -> pipeline expressions
    def value(self, v: Value, *, string: bool = False) -> Any:  # a literal or a pipeline variable
        if isinstance(v, Param):
            param = self.params[v.name]
            return param.to_string() if string and self.graph_param(v).type is not str else param
        if isinstance(v, ExecutionId):
            return self.exec_id
        if isinstance(v, PipelineName):
            from sagemaker.core.workflow.execution_variables import ExecutionVariables

            return ExecutionVariables.PIPELINE_NAME
        if isinstance(v, Output):
            return self.output_uri(v)
        if isinstance(v, Billing):
            job = self.steps[v.step].properties
            return join("/", job.BillableTimeInSeconds, job.TrainingTimeInSeconds)
        return str(v).lower() if string and isinstance(v, bool) else (str(v) if string else v)

    def graph_param(self, ref: Param) -> Tunable:
        return next(p for p in self.graph.parameters if p.name == ref.name)

    def s3(self, *parts: str | PipelineVariable) -> Join:
        return join("/", f"s3://{self.s.bucket}/{self.s.prefix}", *parts)

    def output_uri(self, ref: Output, *, step: str | None = None) -> PipelineVariable:
        """``ref`` of compiled step ``ref.step``; ``step``: the graph step it was compiled from, where renamed."""
        compiled, graph_step = self.steps[ref.step], self.graph.step(step or ref.step)
        if isinstance(graph_step, TrainingStep):
            return compiled.properties.ModelArtifacts.S3ModelArtifacts
        base = compiled.properties.ProcessingOutputConfig.Outputs["output"].S3Output.S3Uri
        rel = self._processing_outputs(step or ref.step)[ref.name]
        return base if rel in (".", "") else join("/", base, rel)

    def _processing_outputs(self, step: str) -> dict:
        """Output name -> path of graph step ``step``: what besides a model is referred to is a processing step's."""
        graph_step = self.graph.step(step)
        assert isinstance(graph_step, ProcessingStep), (
            f"step {step}: its outputs are read by path, but it is a {type(graph_step).__name__}"
        )
        return graph_step.outputs

    # -- steps by kind -------------------------------------------------------
    def processing(
        self,
        step: ProcessingStep,
        *,
        name: str | None = None,
        skip: Collection[str] = (),
        property_files: Iterable[PropertyFile] = (),
    ) -> SmProcessingStep:
        from sagemaker.core.processing import Processor
        from sagemaker.core.shapes import ProcessingInput, ProcessingOutput, ProcessingS3Input, ProcessingS3Output
        from sagemaker.mlops.workflow.steps import ProcessingStep as SmProcessingStep

        name = name or step.name

        def s3_input(input_name, uri, local_path):
            return ProcessingInput(
                input_name=input_name,
                s3_input=ProcessingS3Input(s3_uri=uri, local_path=local_path, s3_data_type="S3Prefix", s3_input_mode="File"),
            )

        inputs = [s3_input("code", self.s.code_uri, CODE_DIR)]
        args = ["--output", f"{PROCESSING_ROOT}/output"]
        for input_name, ref in step.inputs.items():
            if _reads(ref, skip):
                continue
            local = f"{PROCESSING_ROOT}/input/{input_name}"
            inputs.append(s3_input(input_name, self.value(ref), local))
            args += [f"--{input_name}", local]
        for flag, ref in step.arguments.items():
            if not _reads(ref, skip):
                args += [flag, self.value(ref, string=True)]
        if step.results_store:  # the results store lives in the artifact bucket
            args += ["--store", f"s3://{self.s.bucket}/{self.s.prefix}/{RESULTS_FOLDER}"]
        if step.registry:
            args += ["--registry", model_registry(self.s)]
        if step.results_store or step.registry:  # its AWS clients' region: a processing container's environment names none
            args += ["--region", self.s.region]
        outputs = [
            ProcessingOutput(
                output_name="output",
                s3_output=ProcessingS3Output(
                    s3_uri=self.s3(self.exec_id, name), local_path=f"{PROCESSING_ROOT}/output", s3_upload_mode="EndOfJob"
                ),
            )
        ]
        # Processing has no script mode: unpack the code (a gzipped tar, whatever its object name: CDK
        # names assets <hash>.gz), then run the step script from the root of the tree.
        unpack = (
            f'set -e; mkdir -p /opt/ml/code; for f in {CODE_DIR}/*; do tar -xzf "$f" -C /opt/ml/code; done; '
            f'cd /opt/ml/code; exec python3 {step.script} "$@"'
        )
        processor = Processor(
            role=self.s.role_arn,
            image_uri=self.processing_image,
            instance_count=1,
            instance_type=step.instance_type,
            entrypoint=["/bin/sh", "-c", unpack, step.script],
            volume_size_in_gb=self.value(step.volume_gb),
            max_runtime_in_seconds=MAX_RUNTIME_S,
            base_job_name=f"hetero-{name.lower()}",
            sagemaker_session=self.session,
        )
        sm_step = SmProcessingStep(
            name=name,
            step_args=processor.run(inputs=inputs, outputs=outputs, arguments=args),
            property_files=list(property_files),
            depends_on=None,
        )
        self.steps[name] = sm_step
        return sm_step

    def channels(self, step: TrainingStep) -> list:
        """S3 channels name their instance groups; a file-system channel mounts on every group and has no
        InstanceGroupNames, and CreateTrainingJob takes all or none: so a job with one assigns none. Under network
        isolation the code is one more channel, on every group."""
        from sagemaker.core.shapes import Channel, DataSource, FileSystemDataSource, S3DataSource

        fsx = self.s.fsx
        on_fsx = {c.name for c in step.channels if c.file_system and fsx}
        code = (TrainChannel(CODE_CHANNEL, self.s.code_uri, REPLICATED, tuple(g.name for g in step.groups)),)
        channels = []
        for c in (*step.channels, *(code if self.s.network_isolation else ())):
            if fsx and c.name in on_fsx:
                source = DataSource(
                    file_system_data_source=FileSystemDataSource(
                        file_system_id=fsx.file_system_id,
                        file_system_type="FSxLustre",
                        file_system_access_mode="ro",
                        directory_path=join(
                            "",
                            fsx.directory_path,
                            "/",
                            self.exec_id,
                            f"/{c.source.step}/{self._processing_outputs(c.source.step)[c.source.name]}",
                        ),
                    )
                )
                channels.append(Channel(channel_name=c.name, data_source=source, input_mode="File"))
                continue
            groups = {"instance_group_names": list(c.instance_groups)} if c.instance_groups and not on_fsx else {}
            s3 = S3DataSource(
                s3_data_type="S3Prefix",
                s3_uri=self.value(c.source),
                s3_data_distribution_type=self.value(c.distribution),
                **groups,
            )
            channels.append(
                Channel(channel_name=c.name, data_source=DataSource(s3_data_source=s3), input_mode=self.value(c.input_mode))
            )
        return channels

    def training(self, step: TrainingStep) -> SmTrainingStep:
        from sagemaker.core.shapes import CheckpointConfig, InstanceGroup, MetricDefinition, OutputDataConfig, StoppingCondition
        from sagemaker.core.training.configs import Compute, Networking
        from sagemaker.mlops.workflow.retry import SageMakerJobExceptionTypeEnum, SageMakerJobStepRetryPolicy
        from sagemaker.mlops.workflow.steps import TrainingStep as SmTrainingStep
        from sagemaker.train import ModelTrainer

        # Counts are ints in SDK v3: a placeholder here, `Parameters.<count>` after compiling.
        groups = [
            InstanceGroup(instance_group_name=g.name, instance_type=self.value(g.instance_type), instance_count=1)
            for g in step.groups
        ]
        hyperparameters = {k: self.value(v, string=True) for k, v in step.hyperparameters.items()}
        # isolated, the container cannot download the code: it is the code channel's file (the toolkit unpacks it)
        submit = f"{CODE_CHANNEL_DIR}/{code_file(self.s.code_uri)}" if self.s.network_isolation else self.s.code_uri
        hyperparameters.update(
            sagemaker_program=step.entry_point, sagemaker_submit_directory=submit, sagemaker_region=self.s.region
        )
        trainer = ModelTrainer(
            training_image=self.training_image,  # explicit: with a parameterised instance type the SDK would pick the CPU image
            role=self.s.role_arn,
            sagemaker_session=self.session,
            base_job_name=f"hetero-{step.name.lower()}",
            # Managed spot is a deploy option, not a pipeline parameter: CreateTrainingJob rejects MaxWaitTimeInSeconds
            # unless EnableManagedSpotTraining is true, and a request member cannot be left out by a parameter's value
            compute=Compute(
                instance_groups=groups,
                volume_size_in_gb=_int_or_placeholder(step.volume_gb),
                **({"enable_managed_spot_training": True} if self.s.spot else {}),
            ),
            networking=self.networking(Networking),
            stopping_condition=StoppingCondition(
                max_runtime_in_seconds=MAX_RUNTIME_S, **({"max_wait_time_in_seconds": MAX_WAIT_S} if self.s.spot else {})
            ),
            output_data_config=OutputDataConfig(s3_output_path=self.s3(self.exec_id, step.name)),
            # per execution and step: a spot restart and a retry of the step (RetryPolicies) resume from it
            checkpoint_config=CheckpointConfig(
                s3_uri=self.s3(self.exec_id, step.name, CHECKPOINT_FOLDER), local_path=CHECKPOINT_LOCAL_PATH
            ),
            # No Environment: DescribeTrainingJob shows it. The data-plane secret is the `secret` channel's file (a random
            # object Shard writes under the execution's prefix): it keeps out network peers (other jobs or hosts in the
            # VPC, port scans) and every principal that cannot read that object, DescribeTrainingJob callers included.
            hyperparameters=hyperparameters,
        ).with_metric_definitions([MetricDefinition(name=m["Name"], regex=m["Regex"]) for m in METRIC_DEFINITIONS])
        # no capacity (spot or on-demand) or a SageMaker-side error: start the job again; it resumes from its checkpoint
        retry = SageMakerJobStepRetryPolicy(
            failure_reason_types=[SageMakerJobExceptionTypeEnum.CAPACITY_ERROR, SageMakerJobExceptionTypeEnum.INTERNAL_ERROR],
            max_attempts=TRAINING_RETRY_ATTEMPTS,
            interval_seconds=60,
            backoff_rate=2.0,
        )
        sm_step = SmTrainingStep(
            name=step.name, step_args=trainer.train(input_data_config=self.channels(step)), retry_policies=[retry]
        )
        self.steps[step.name] = sm_step
        return sm_step

    def networking(self, networking_class: type[Networking]) -> Networking | None:
        """The training jobs' VPC (with FSx) and the deploy options on traffic between and out of their hosts."""
        options: dict[str, Any] = {}
        if self.s.fsx:
            options.update(subnets=list(self.s.fsx.subnets), security_group_ids=list(self.s.fsx.security_group_ids))
        if self.s.inter_container_encryption:
            options["enable_inter_container_traffic_encryption"] = True
        if self.s.network_isolation:
            options["enable_network_isolation"] = True
        return networking_class(**options) if options else None

    def register(self, step: RegisterStep, *, name: str | None = None, source: str | None = None) -> ModelStep:
        """CreateModelPackage through the SDK's own request builder (what ModelBuilder.register does under a
        PipelineSession, without a ModelBuilder: that would package and upload inference code again, and the model
        folder of every training host already holds it: steps/train/core/model_package.py). The package names the
        framework's inference image, the content types and instance types it serves (`pipeline.sagemaker.serving`).
        ``source``: the compiled name of the step whose output holds ``step.file``."""
        from types import SimpleNamespace

        from sagemaker.core.model_registry import create_model_package_from_containers, get_model_package_args
        from sagemaker.core.shapes import MetricsSource, ModelMetrics, ModelQuality
        from sagemaker.core.workflow.functions import JsonGet
        from sagemaker.core.workflow.pipeline_context import _ModelStepArguments
        from sagemaker.mlops.workflow.model_step import ModelStep

        from pipeline.sagemaker.serving import gpu_specification, serving_arguments
        from steps.evaluate.registration import METADATA_KEYS
        from steps.evaluate.registry import EXECUTION_KEY

        name, source = name or step.name, source or step.metrics.step
        document = join("/", self.output_uri(Output(source, step.metrics.name), step=step.metrics.step), step.file)

        def field(path: str) -> JsonGet:
            return JsonGet(step_name=source, property_file=MODEL_METRICS_PROPERTY_FILE, json_path=path)

        metadata = {key: field(f"metadata.{key}") for key in (*METADATA_KEYS, "approval")}
        metadata[EXECUTION_KEY] = self.exec_id
        arguments = get_model_package_args(
            model_package_group_name=model_package_group(self.s),
            image_uri=self.serving_image or self.training_image,
            **(serving_arguments() if self.serving_image else {}),
            model_data=self.value(step.model),
            model_metrics=ModelMetrics(
                model_quality=ModelQuality(statistics=MetricsSource(content_type="application/json", s3_uri=document))
            ),
            approval_status=field("approval.status"),
            customer_metadata_properties=metadata,
        )
        self.session.context = _ModelStepArguments(SimpleNamespace(sagemaker_session=self.session))
        step_args = create_model_package_from_containers(self.session, **arguments)
        if self.gpu_serving_image:  # the SDK has no argument for it: CreateModelPackage's, added to the request it built
            request = self.session.context.create_model_package_request
            request["AdditionalInferenceSpecifications"] = [
                gpu_specification(request["InferenceSpecification"], self.gpu_serving_image)
            ]
        sm_step = ModelStep(name=name, step_args=step_args)
        self.session.context = None
        self.steps[name] = sm_step
        return sm_step

    def check(self, step: CheckStep) -> ConditionStep:
        from sagemaker.core.workflow.conditions import ConditionGreaterThan, ConditionLessThan
        from sagemaker.core.workflow.functions import JsonGet
        from sagemaker.mlops.workflow.condition_step import ConditionStep
        from sagemaker.mlops.workflow.fail_step import FailStep

        threshold = self.params[step.threshold.name]
        value = JsonGet(step_name=step.source.step, property_file=PROPERTY_FILE, json_path=step.field)
        fail = FailStep(
            name=f"{step.name}Failed",
            error_message=join(
                "",
                f"{step.message}: {step.field} ",
                value,
                f" < {step.threshold.name} ",
                threshold,
                f" (see {step.file} in the {step.source.step} output)",
            ),
        )
        # threshold -1 never fails, as in the local runner
        return ConditionStep(
            name=step.name,
            depends_on=list(step.depends_on) or None,
            conditions=[ConditionGreaterThan(left=threshold, right=-1), ConditionLessThan(left=value, right=threshold)],
            if_steps=[fail],
            else_steps=[],
        )


PRODUCED = (Output, Billing)  # values a step produces: another step reading one runs after it


def _reads(value, steps) -> bool:
    """Whether ``value`` is something one of ``steps`` produces (left out where that step does not run)."""
    return isinstance(value, PRODUCED) and value.step in steps


def _int_or_placeholder(value) -> int:
    """SDK v3 types the training volume as int: a parameter's is a placeholder here, `Parameters.<name>` after compiling
    (`pipeline.sagemaker.placeholders.parameterise_volumes`)."""
    return value if isinstance(value, int) else 1


def join(on: str, *values):  # noqa: ANN201 - the SDK's Join, imported where used
    from sagemaker.core.workflow.functions import Join

    return Join(on=on, values=list(values))

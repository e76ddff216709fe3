"""The stack: wires the constructs of `infra/` and nothing else.

    artifact bucket ──> training code (tar.gz asset) ──> job role ──> pipeline role ──> SageMaker pipeline
                        default price overrides ({} asset) ──┘                              │
          │                            (optional) VPC + FSx for Lustre ──┘ (job role)        │
          └──> new-data trigger (optional)          retraining schedule (optional) ─────────┘
    model package group ──> (pipeline role: register into it; job role: read it) ──> SageMaker pipeline
    notifications (KMS-encrypted SNS topic <- EventBridge: failed executions, registered models) + dashboard

The jobs run as the job role; the pipeline runs as the pipeline role, which alone may start jobs and pass
the job role. The trigger, the schedule and the plan-adoption function start executions with roles of
their own (sagemaker:StartPipelineExecution on this pipeline): none of them passes either role.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from infra.artifact_bucket import ArtifactBucket
from infra.dashboard import PipelineDashboard
from infra.iam_anchors import IAM_METADATA_KEY, iam_anchors
from infra.job_role import JobRole
from infra.lustre import LustreDataset
from infra.model_registry import ModelRegistry
from infra.new_data_trigger import NewDataTrigger
from infra.notifications import Notifications
from infra.pipeline_role import PipelineRole
from infra.plan_adoption import PlanAdoption
from infra.price_overrides import DefaultPriceOverrides
from infra.retrain_schedule import RetrainSchedule
from infra.sagemaker_pipeline import SageMakerPipeline
from infra.settings import StackSettings
from infra.training_code import TrainingCode
from pipeline.local.requirements import FSX_NO_NAT, NETWORK_ISOLATION
from pipeline.sagemaker.images import pipeline_images
from pipeline.sagemaker.settings import FsxSettings
from steps.contract import RESULTS_FOLDER


class HeteroStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, settings: StackSettings, **kwargs: Any) -> None:
        super().__init__(
            scope, construct_id, description="Heterogeneous-cluster training pipeline on SageMaker (hetero)", **kwargs
        )
        store = ArtifactBucket(self, "Store", event_bridge=settings.new_data_trigger)
        no_price_overrides = DefaultPriceOverrides(self, "DefaultPriceOverrides")
        # resolved once: the role may pull exactly the images the pipeline runs (a token region needs both set)
        training_image, processing_image = pipeline_images(
            self.region, settings.framework, training_image=settings.training_image, processing_image=settings.processing_image
        )
        code = TrainingCode(
            self,
            "TrainingCode",
            code_dirs=tuple(map(Path, settings.code_dirs)),
            training_image=training_image,
            # no route to a package index: isolated containers, or FSx's subnets (no NAT gateway, infra/lustre.py)
            offline=tuple(why for why, on in ((NETWORK_ISOLATION, settings.network_isolation), (FSX_NO_NAT, settings.fsx)) if on),
        )
        jobs, runner, models = self._roles(
            settings, store=store, code=code, price_overrides=no_price_overrides, images=(training_image, processing_image)
        )
        fsx = self._lustre(settings, store=store, jobs=jobs) if settings.fsx else None
        pipeline = self._pipeline(
            settings,
            store=store,
            code=code,
            price_overrides=no_price_overrides,
            images=(training_image, processing_image),
            jobs=jobs,
            runner=runner,
            models=models,
            fsx=fsx,
        )
        adoption = self._starters(settings, store=store, pipeline=pipeline)
        notifications = Notifications(
            self,
            "Notifications",
            pipeline_name=settings.pipeline_name,
            pipeline_arn=pipeline.pipeline_arn,
            model_package_group_name=models.group_name,
            email=settings.notify_email,
        )
        dashboard = PipelineDashboard(self, "Dashboard", pipeline_name=settings.pipeline_name)
        self._declare_iam_anchors(
            settings,
            store=store,
            code=code,
            price_overrides=no_price_overrides,
            jobs=jobs,
            models=models,
            notifications=notifications,
            adoption=adoption,
        )
        self._outputs(settings, store=store, models=models, notifications=notifications, dashboard=dashboard)

    def _roles(
        self,
        settings: StackSettings,
        *,
        store: ArtifactBucket,
        code: TrainingCode,
        price_overrides: DefaultPriceOverrides,
        images: tuple[str, str],
    ) -> tuple[JobRole, PipelineRole, ModelRegistry]:
        """The jobs' role, the pipeline's role (which alone passes the jobs' role) and the model registry both reach."""
        jobs = JobRole(
            self,
            "JobRole",
            pipeline_name=settings.pipeline_name,
            bucket=store.bucket,
            code=code.asset,
            price_overrides=price_overrides.asset,
            prefix=settings.prefix,
            input_prefix=settings.input_prefix,
            images=images,
        )
        runner = PipelineRole(self, "PipelineRole", pipeline_name=settings.pipeline_name, job_role=jobs.role)
        models = ModelRegistry(
            self, "ModelRegistry", group_name=settings.model_package_group_name, pipeline_name=settings.pipeline_name
        )
        models.grant_register(runner.policy)
        models.grant_read(jobs.policy)
        return jobs, runner, models

    def _lustre(self, settings: StackSettings, *, store: ArtifactBucket, jobs: JobRole) -> FsxSettings:
        """The VPC and the FSx for Lustre file system over the dataset prefix; the jobs may run in its subnets."""
        lustre = LustreDataset(
            self,
            "Lustre",
            bucket=store.bucket,
            dataset_prefix=settings.prefix,
            log_bucket=store.log_bucket,
            storage_gib=settings.fsx_storage_gib,
            throughput_per_tib=settings.fsx_throughput_per_tib,
        )
        jobs.allow_vpc_jobs(subnet_arns=lustre.subnet_arns, security_group_arns=lustre.security_group_arns)
        return FsxSettings(
            file_system_id=lustre.file_system_id,
            directory_path=lustre.directory_path,
            subnets=lustre.subnet_ids,
            security_group_ids=lustre.security_group_ids,
        )

    def _pipeline(
        self,
        settings: StackSettings,
        *,
        store: ArtifactBucket,
        code: TrainingCode,
        price_overrides: DefaultPriceOverrides,
        images: tuple[str, str],
        jobs: JobRole,
        runner: PipelineRole,
        models: ModelRegistry,
        fsx: FsxSettings | None,
    ) -> SageMakerPipeline:
        """The SageMaker pipeline, run by the pipeline role once both roles hold their permissions."""
        training_image, processing_image = images
        pipeline = SageMakerPipeline(
            self,
            "Pipeline",
            pipeline_name=settings.pipeline_name,
            pipeline_role=runner.role,
            job_role=jobs.role,
            bucket=store.bucket,
            code_url=code.s3_url,
            price_overrides_url=price_overrides.s3_url,
            prefix=settings.prefix,
            input_prefix=settings.input_prefix,
            framework=settings.framework,
            training_image=training_image,
            processing_image=processing_image,
            serving_image=settings.serving_image,
            fsx=fsx,
            inter_container_encryption=settings.inter_container_encryption,
            network_isolation=settings.network_isolation,
            spot=settings.spot,
            model_package_group=models.group_name,
        )
        runner.read_property_files(bucket=store.bucket, keys=pipeline.property_file_keys)
        # both roles hold their permissions before the first execution can start
        pipeline.node.add_dependency(runner.policy, jobs.policy, models.group)
        return pipeline

    def _starters(self, settings: StackSettings, *, store: ArtifactBucket, pipeline: SageMakerPipeline) -> PlanAdoption | None:
        """What starts executions besides a person: the retraining schedule (adopting the latest plan, optionally) and
        the new-data trigger. Returns the plan-adoption function, if any."""
        parameters = settings.scheduled_parameters(bucket=store.bucket.bucket_name)
        adoption = None
        if settings.schedule:
            if settings.retrain_adopts_plan:
                adoption = PlanAdoption(
                    self,
                    "PlanAdoption",
                    pipeline_name=settings.pipeline_name,
                    pipeline_arn=pipeline.pipeline_arn,
                    bucket=store.bucket,
                    results_prefix=f"{settings.prefix}/{RESULTS_FOLDER}",
                    parameters=parameters,
                )
            schedule = RetrainSchedule(
                self,
                "Retrain",
                pipeline=pipeline.ref,
                expression=settings.schedule,
                time_zone=settings.schedule_timezone,
                parameters=parameters,
                adopt_plan=adoption.function if adoption else None,
            )
            schedule.node.add_dependency(pipeline.pipeline)
        if settings.new_data_trigger:
            trigger = NewDataTrigger(
                self,
                "NewData",
                bucket=store.bucket,
                input_prefix=settings.input_prefix,
                marker=settings.new_data_marker,
                pipeline_arn=pipeline.pipeline_arn,
                parameters=parameters,
            )
            trigger.node.add_dependency(pipeline.pipeline)
        return adoption

    def _declare_iam_anchors(
        self,
        settings: StackSettings,
        *,
        store: ArtifactBucket,
        code: TrainingCode,
        price_overrides: DefaultPriceOverrides,
        jobs: JobRole,
        models: ModelRegistry,
        notifications: Notifications,
        adoption: PlanAdoption | None,
    ) -> None:
        """Where the pipeline's calls land in this deployment, for `hetero iam` (pipeline/iam/template.py)."""
        anchors = iam_anchors(
            self,
            bucket_arn=store.bucket.bucket_arn,
            prefix=settings.prefix,
            input_prefix=settings.input_prefix,
            code=(code.asset.s3_bucket_name, code.asset.s3_object_key),
            prices=(price_overrides.asset.s3_bucket_name, price_overrides.asset.s3_object_key),
            job_role_arn=jobs.role.role_arn,
            pipeline_name=settings.pipeline_name,
            model_package_group=models.group_name,
            notifications=notifications,
            plan_adoption=(adoption.function.function_arn, adoption.log_group.log_group_name) if adoption else None,
        )
        self.template_options.metadata = {IAM_METADATA_KEY: {"anchors": anchors}}

    def _outputs(
        self,
        settings: StackSettings,
        *,
        store: ArtifactBucket,
        models: ModelRegistry,
        notifications: Notifications,
        dashboard: PipelineDashboard,
    ) -> None:
        CfnOutput(self, "PipelineName", value=settings.pipeline_name, description="SageMaker pipeline name")
        CfnOutput(
            self,
            "NotificationTopic",
            value=notifications.topic.topic_arn,
            description="SNS topic told of failed or stopped executions and registered models (subscribe to it)",
        )
        CfnOutput(self, "DashboardName", value=dashboard.dashboard.dashboard_name, description="CloudWatch dashboard")
        CfnOutput(
            self,
            "ModelPackageGroup",
            value=models.group_name,
            description=f"Model registry group: hetero models --registry sagemaker://{models.group_name}",
        )
        CfnOutput(
            self,
            "ArtifactBucket",
            value=store.bucket.bucket_name,
            description=f"Artifact bucket (inputs under {settings.input_prefix}, outputs under {settings.prefix}/)",
        )

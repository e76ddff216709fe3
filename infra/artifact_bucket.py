"""The artifact bucket (pipeline inputs, outputs, checkpoints) and the bucket its access logs go to."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_s3 as s3
from constructs import Construct

NONCURRENT_DAYS = 30


class ArtifactBucket(Construct):
    """Encrypted, SSL-only, private, versioned; server access logs to `log_bucket`.

    Overwritten and deleted objects stay recoverable for `NONCURRENT_DAYS`, then go: training jobs rewrite
    their checkpoint slots (a model and its optimizer each time) every few minutes, and with versioning
    alone every one of those copies would be kept, and billed, for ever.

    EventBridge notifications are switched on in the bucket's own CloudFormation
    properties (not `event_bridge_enabled`, which deploys a Lambda-backed custom
    resource) so the new-data trigger can match "Object Created" events.
    """

    def __init__(self, scope: Construct, construct_id: str, *, event_bridge: bool) -> None:
        super().__init__(scope, construct_id)
        common = dict(
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            versioned=True,
            # keep data and logs when the stack is deleted: they may be the only copy
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.log_bucket = s3.Bucket(self, "AccessLogs", **common)
        Validations.of(self.log_bucket).acknowledge(
            Acknowledgment(
                id="AwsSolutions-S1",
                reason="This is the access-log bucket itself; logging it to another bucket would only move the problem.",
            ),
        )
        self.bucket = s3.Bucket(
            self,
            "Artifacts",
            server_access_logs_bucket=self.log_bucket,
            server_access_logs_prefix="artifacts/",
            **common,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="NoncurrentVersions",
                    noncurrent_version_expiration=Duration.days(NONCURRENT_DAYS),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
        )
        if event_bridge:
            cfn = self.bucket.node.default_child
            cfn.notification_configuration = s3.CfnBucket.NotificationConfigurationProperty(
                event_bridge_configuration=s3.CfnBucket.EventBridgeConfigurationProperty(event_bridge_enabled=True)
            )

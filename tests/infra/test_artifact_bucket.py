from aws_cdk.assertions import Match

from tests.support.stacks import resources

ENCRYPTED = {"ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}
PRIVATE = {"BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}


def test_artifact_bucket_is_encrypted_private_versioned_and_logged(synth_default):
    synth_default.template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": ENCRYPTED,
            "PublicAccessBlockConfiguration": PRIVATE,
            "VersioningConfiguration": {"Status": "Enabled"},
            "LoggingConfiguration": {"DestinationBucketName": Match.any_value(), "LogFilePrefix": "artifacts/"},
            "NotificationConfiguration": {"EventBridgeConfiguration": {"EventBridgeEnabled": True}},
        },
    )


def test_overwritten_artifacts_such_as_checkpoint_slots_are_not_kept_for_ever(synth_default):
    synth_default.template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "LoggingConfiguration": {"DestinationBucketName": Match.any_value(), "LogFilePrefix": "artifacts/"},
            "LifecycleConfiguration": {
                "Rules": [
                    {
                        "Id": "NoncurrentVersions",
                        "Status": "Enabled",
                        "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
                        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
                    }
                ]
            },
        },
    )


def test_log_bucket_is_encrypted_private_and_versioned(synth_default):
    synth_default.template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": ENCRYPTED,
            "PublicAccessBlockConfiguration": PRIVATE,
            "VersioningConfiguration": {"Status": "Enabled"},
            "LoggingConfiguration": Match.absent(),
        },
    )


def test_both_buckets_refuse_plain_http(synth_default):
    deny_http = {
        "PolicyDocument": {
            "Statement": Match.array_with(
                [Match.object_like({"Effect": "Deny", "Action": "s3:*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
            )
        }
    }
    synth_default.template.resource_properties_count_is("AWS::S3::BucketPolicy", deny_http, 2)


def test_buckets_outlive_the_stack(synth_default):
    assert all(b["DeletionPolicy"] == "Retain" for b in resources(synth_default, "AWS::S3::Bucket"))


def test_no_lambda_behind_the_event_bridge_switch(synth_default):
    assert not resources(synth_default, "AWS::Lambda::Function")
    assert not resources(synth_default, "Custom::S3BucketNotifications")

"""`hetero definition`: the SageMaker pipeline definition JSON, offline (`pipeline.sagemaker.definition`).

hetero definition --bucket my-bucket
hetero definition --framework tensorflow
"""

from __future__ import annotations

import argparse
import os
import sys

from pipeline.sagemaker.executions import (
    DEFAULT_PIPELINE_NAME,
)
from steps.contract import FRAMEWORKS


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    d = sub.add_parser("definition", help="print the SageMaker pipeline definition JSON (offline; placeholder defaults)")
    d.add_argument("--pipeline-name", default=DEFAULT_PIPELINE_NAME, help="(default %(default)s)")
    d.add_argument(
        "--region",
        default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        help="picks the default images (default: env AWS_REGION, AWS_DEFAULT_REGION or us-east-1)",
    )
    d.add_argument(
        "--role-arn",
        default="arn:aws:iam::123456789012:role/hetero-pipeline",
        help="the jobs' role, every step's RoleArn (default: a placeholder)",
    )
    d.add_argument("--bucket", default="hetero-artifacts-example", help="artifact bucket (default: a placeholder)")
    d.add_argument("--code-uri", help="s3:// URI of the code tar.gz (default s3://<bucket>/<prefix>/code/code.tar.gz)")
    d.add_argument("--prefix", default="hetero", help="key prefix of everything the pipeline writes (default %(default)s)")
    d.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        default=FRAMEWORKS[0],
        help="training framework: picks the shard format and the default images (default %(default)s)",
    )
    d.add_argument(
        "--training-image", help="training image URI (default: the AWS GPU training image of the framework in the region)"
    )
    d.add_argument("--processing-image", help="processing image URI (default: the CPU variant of that image)")
    d.add_argument(
        "--serving-image",
        help="the image registered model packages name (default: the framework's AWS inference image, CPU variant, in the region)",
    )
    d.add_argument("--fsx-file-system-id", help="read training shards from this FSx for Lustre file system (jobs run in its VPC)")
    d.add_argument(
        "--fsx-directory-path", default="/fsx/dataset", help="FSx path linked to s3://<bucket>/<prefix>/ (default %(default)s)"
    )
    d.add_argument("--subnet", action="append", help="VPC subnet of FSx jobs (repeatable; default a placeholder)")
    d.add_argument("--security-group", action="append", help="security group of FSx jobs (repeatable; default a placeholder)")
    d.add_argument(
        "--network-isolation",
        action="store_true",
        help="training jobs with EnableNetworkIsolation: the code arrives as the `code` input channel",
    )


def run(args: argparse.Namespace) -> int:
    from pipeline.sagemaker.definition import DeploySettings, FsxSettings, definition_json  # the SDK is imported only here

    fsx = None
    if args.fsx_file_system_id:
        fsx = FsxSettings(
            file_system_id=args.fsx_file_system_id,
            directory_path=args.fsx_directory_path,
            subnets=tuple(args.subnet or ["subnet-00000000000000000"]),
            security_group_ids=tuple(args.security_group or ["sg-00000000000000000"]),
        )
    settings = DeploySettings(
        pipeline_name=args.pipeline_name,
        region=args.region,
        role_arn=args.role_arn,
        bucket=args.bucket,
        code_uri=args.code_uri or f"s3://{args.bucket}/{args.prefix}/code/code.tar.gz",
        prefix=args.prefix,
        framework=args.framework,
        training_image=args.training_image,
        processing_image=args.processing_image,
        serving_image=args.serving_image,
        fsx=fsx,
        network_isolation=args.network_isolation,
    )
    sys.stdout.write(definition_json(settings))
    return 0

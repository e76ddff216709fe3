"""Optional VPC + FSx for Lustre file system linked to the pipeline's prefix of the artifact bucket.

The training channel reads shards from Lustre instead of S3 (`DataSource=FSx`): the Shard
step writes them to s3://<bucket>/<prefix>/<execution id>/Shard/train, the association
imports them (auto-import) to /<mount name>/dataset/<execution id>/Shard/train.
FSx channels mount on every instance group and need the job in a VPC: the job gets
the subnet and both security groups from here.
"""

from __future__ import annotations

from aws_cdk import Fn, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_s3 as s3
from constructs import Construct

FILE_SYSTEM_PATH = "/dataset"


class LustreDataset(Construct):
    """`directory_path`: the dataset folder as a SageMaker `FileSystemDataSource` sees it (/<mount name>/dataset)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        dataset_prefix: str,
        log_bucket: s3.IBucket,
        storage_gib: int,
        throughput_per_tib: int,
    ) -> None:
        super().__init__(scope, construct_id)
        # isolated subnets: jobs reach S3 through the gateway endpoint; no NAT gateway to pay for
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=1,
            nat_gateways=0,
            gateway_endpoints={"S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)},
            subnet_configuration=[
                ec2.SubnetConfiguration(name="jobs", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=20)
            ],
        )
        ec2.FlowLog(
            self,
            "FlowLog",
            resource_type=ec2.FlowLogResourceType.from_vpc(self.vpc),
            destination=ec2.FlowLogDestination.to_s3(log_bucket, "vpc-flow-logs/"),
        )
        # Lustre: servers and clients talk on 988 and 1018-1023 within the group (file system and jobs are members)
        self.lustre_group = ec2.SecurityGroup(
            self, "LustreGroup", vpc=self.vpc, description="FSx for Lustre file system and its clients"
        )
        self.lustre_group.add_ingress_rule(self.lustre_group, ec2.Port.tcp(988), "Lustre")
        self.lustre_group.add_ingress_rule(self.lustre_group, ec2.Port.tcp_range(1018, 1023), "Lustre")
        # SageMaker: hosts of one job talk to each other (data plane, torch.distributed) inside the VPC
        self.job_group = ec2.SecurityGroup(self, "JobGroup", vpc=self.vpc, description="Hosts of one SageMaker training job")
        self.job_group.add_ingress_rule(self.job_group, ec2.Port.all_traffic(), "between hosts of the cluster")
        self.subnet = self.vpc.isolated_subnets[0]
        # CloudFormation level: the L2 construct would also open 988-1023 (989-1017 are not Lustre's)
        self.file_system = fsx.CfnFileSystem(
            self,
            "FileSystem",
            file_system_type="LUSTRE",
            file_system_type_version="2.15",
            storage_capacity=storage_gib,
            subnet_ids=[self.subnet.subnet_id],
            security_group_ids=[self.lustre_group.security_group_id],
            lustre_configuration=fsx.CfnFileSystem.LustreConfigurationProperty(
                deployment_type="PERSISTENT_2", per_unit_storage_throughput=throughput_per_tib, data_compression_type="LZ4"
            ),
        )
        # the file system is a cache of the bucket (the association below): nothing is lost with it
        self.file_system.apply_removal_policy(RemovalPolicy.DESTROY)
        self.file_system_id = self.file_system.ref
        fsx.CfnDataRepositoryAssociation(
            self,
            "DatasetAssociation",
            file_system_id=self.file_system_id,
            file_system_path=FILE_SYSTEM_PATH,
            data_repository_path=f"s3://{bucket.bucket_name}/{dataset_prefix.strip('/')}/",
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(events=["NEW", "CHANGED", "DELETED"])
            ),
        )
        self.directory_path = Fn.join("", ["/", self.file_system.attr_lustre_mount_name, FILE_SYSTEM_PATH])
        stack = Stack.of(self)
        self.subnet_ids = (self.subnet.subnet_id,)
        self.security_group_ids = (self.lustre_group.security_group_id, self.job_group.security_group_id)
        self.subnet_arns = [stack.format_arn(service="ec2", resource=f"subnet/{self.subnet.subnet_id}")]
        self.security_group_arns = [
            stack.format_arn(service="ec2", resource=f"security-group/{g}") for g in self.security_group_ids
        ]

from aws_cdk.assertions import Match

from tests.support.stacks import resources


def test_no_network_or_file_system_without_fsx(synth_default):
    for kind in ("AWS::EC2::VPC", "AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "AWS::EC2::SecurityGroup"):
        synth_default.template.resource_count_is(kind, 0)


def test_persistent_2_file_system_in_the_isolated_subnet(synth_fsx):
    synth_fsx.template.has_resource_properties(
        "AWS::FSx::FileSystem",
        {
            "FileSystemType": "LUSTRE",
            "StorageCapacity": 1200,
            "SubnetIds": [{"Ref": Match.any_value()}],
            "LustreConfiguration": {
                "DeploymentType": "PERSISTENT_2",
                "PerUnitStorageThroughput": 125,
                "DataCompressionType": "LZ4",
            },
        },
    )
    synth_fsx.template.has_resource_properties("AWS::EC2::Subnet", {"MapPublicIpOnLaunch": False})
    synth_fsx.template.resource_count_is("AWS::EC2::NatGateway", 0)
    synth_fsx.template.resource_count_is("AWS::EC2::InternetGateway", 0)


def test_association_links_the_pipeline_prefix(synth_fsx):
    synth_fsx.template.has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemId": {"Ref": Match.any_value()},
            "FileSystemPath": "/dataset",
            "BatchImportMetaDataOnCreate": True,
            "DataRepositoryPath": {"Fn::Join": ["", ["s3://", {"Ref": Match.any_value()}, "/hetero/"]]},
            "S3": {"AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}},
        },
    )


def test_lustre_ports_are_open_within_the_group_only(synth_fsx):
    for low, high in ((988, 988), (1018, 1023)):
        synth_fsx.template.has_resource_properties(
            "AWS::EC2::SecurityGroupIngress",
            {
                "IpProtocol": "tcp",
                "FromPort": low,
                "ToPort": high,
                "GroupId": {"Fn::GetAtt": [Match.any_value(), "GroupId"]},
                "SourceSecurityGroupId": {"Fn::GetAtt": [Match.any_value(), "GroupId"]},
            },
        )
    for rule in resources(synth_fsx, "AWS::EC2::SecurityGroupIngress"):
        assert rule["Properties"]["GroupId"] == rule["Properties"]["SourceSecurityGroupId"], rule
        assert "CidrIp" not in rule["Properties"]
    assert sorted(
        (r["Properties"].get("FromPort"), r["Properties"].get("ToPort"))
        for r in resources(synth_fsx, "AWS::EC2::SecurityGroupIngress")
        if r["Properties"]["IpProtocol"] == "tcp"
    ) == [(988, 988), (1018, 1023)]


def test_jobs_reach_s3_through_an_endpoint_and_flow_logs_are_kept(synth_fsx):
    synth_fsx.template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {"VpcEndpointType": "Gateway", "ServiceName": {"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".s3"]]}},
    )
    synth_fsx.template.has_resource_properties("AWS::EC2::FlowLog", {"LogDestinationType": "s3", "ResourceType": "VPC"})


def test_file_system_goes_with_the_stack(synth_fsx):
    (fs,) = resources(synth_fsx, "AWS::FSx::FileSystem")
    assert fs["DeletionPolicy"] == "Delete"

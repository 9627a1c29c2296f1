"""`higgsfield verify` aws.layout-client: whatever holds the FSx layout client's address is root on every team's
directory (the file system's one root-squash exemption), so the check holds that address, and the instance there, to
the plan. The account is moto's healthy prod account (tests/cli/test_verify_checks.py `aws`) with the layout client
launched as `pulumi up` launches it; FSx, which moto answers without a mount name, by a Stubber with the wire shape of
DescribeFileSystems (boto/botocore:botocore/data/fsx/2018-03-01/service-2.json@1.44.18). Each failing test is a way
the deploy role, or a role it can act as, takes the address or the instance."""

from __future__ import annotations

import types

import pytest
from moto.backends import get_backend
from moto.ec2.models.amis import Ami

from components import storage
from infra.cli.verify import checks
from tests.cli.test_verify_checks import (  # noqa: F401 (fixtures)
    REGION,
    _moto_cluster,
    _stubbed,
    aws,
    aws_ctx,
    one,
    plan,
)

ACCOUNT = "123456789012"
FILE_SYSTEM = "fs-0123456789abcdef0"
DNS_NAME = f"{FILE_SYSTEM}.fsx.{REGION}.amazonaws.com"
MOUNT_NAME = "abcdefgh"
AMAZON_IMAGE = "ami-0a1b2c3d4e5f60718"


def _planned(plan) -> tuple:
    client = next(r for r in plan.of_type(checks.INSTANCE) if storage.LAYOUT_TAG in r.inputs["tags"])
    file_system = next(r for r in plan.of_type(checks.LUSTRE) if r.parent == client.parent)
    return client, file_system


def _file_system(plan, subnet: str, nids: list[str] | None = None, vpc: str = "") -> dict:
    """DescribeFileSystems' FileSystem of the stack's file system, as FSx answers it after `pulumi up` (in the
    cluster's VPC unless `vpc`)."""
    _, planned = _planned(plan)
    squash = planned.inputs["rootSquashConfiguration"]
    return {
        "FileSystemId": FILE_SYSTEM,
        "FileSystemType": "LUSTRE",
        "DNSName": DNS_NAME,
        "VpcId": vpc or _moto_cluster().resources_vpc_config["vpcId"],
        "SubnetIds": [subnet],
        "Tags": [{"Key": k, "Value": v} for k, v in planned.inputs["tags"].items()],
        "LustreConfiguration": {
            "MountName": MOUNT_NAME,
            "RootSquashConfiguration": {
                "RootSquash": squash["rootSquash"],
                "NoSquashNids": squash["noSquashNids"] if nids is None else nids,
            },
        },
    }


def _user_data(plan, dns_name: str = DNS_NAME) -> str:
    """The layout client's user data as the plan makes it, mounting the file system of `dns_name`."""
    return storage.layout_user_data(
        storage.layout_of(plan.config.fsx, plan.config.scheduler.team_uids), dns_name, MOUNT_NAME
    )


def _amazons_image(ec2) -> dict:
    """The AL2023 image the plan's SSM parameter names, Amazon's (owner alias `amazon`, as DescribeImages gives
    Amazon's public images): registered in moto's backend, which the suite has load none of its thousands
    (tests/conftest.py MOTO_EC2_LOAD_DEFAULT_AMIS)."""
    backend = get_backend("ec2")[ACCOUNT][REGION]
    if AMAZON_IMAGE not in backend.amis:
        backend.amis[AMAZON_IMAGE] = Ami(
            backend,
            AMAZON_IMAGE,
            name="al2023-ami-2023.9.20261102.0-kernel-6.12-x86_64",
            owner_id="137112412989",
            owner_alias="amazon",
            public=True,
            architecture="x86_64",
            root_device_type="ebs",
            root_device_name="/dev/xvda",
            region_name=f"{REGION}a",
        )
    return ec2.describe_images(ImageIds=[AMAZON_IMAGE])["Images"][0]


def _launch(ec2, plan, subnet: str, group: str, image: dict | None = None, **changed) -> str:
    """An instance at the layout client's address, as the plan launches it unless `changed`; its ID. Two things AWS
    does that moto does not, set here: a volume made at launch is of the image's snapshot (DescribeVolumes'
    Volume.SnapshotId, "the snapshot from which the volume was created"), and the primary interface made at launch
    is deleted with the instance (DeleteOnTermination true), which frees its address."""
    client, _ = _planned(plan)
    image = image or _amazons_image(ec2)
    tags = {**client.inputs["tags"], **changed.pop("tags", {})}
    made = ec2.run_instances(
        ImageId=image["ImageId"],
        InstanceType=storage.LAYOUT_CLIENT_TYPE,
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        PrivateIpAddress=client.inputs["privateIp"],
        SecurityGroupIds=[group],
        UserData=changed.pop("UserData", _user_data(plan)),
        MetadataOptions={"HttpEndpoint": "enabled", "HttpTokens": "required", "HttpPutResponseHopLimit": 1},
        BlockDeviceMappings=[{"DeviceName": image["RootDeviceName"], "Ebs": {"Encrypted": True, "VolumeSize": 8}}],
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        **changed,
    )["Instances"][0]
    snapshot = next(m["Ebs"]["SnapshotId"] for m in image["BlockDeviceMappings"])
    _moto_volume(made["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]).snapshot_id = snapshot
    for interface in get_backend("ec2")[ACCOUNT][REGION].get_instance(made["InstanceId"]).nics.values():
        interface.delete_on_termination = True
    return made["InstanceId"]


def _moto_volume(volume_id: str):
    return get_backend("ec2")[ACCOUNT][REGION].volumes[volume_id]


@pytest.fixture
def account(aws, aws_ctx, plan):  # noqa: F811
    """The prod account with its FSx subnet (in the cluster's VPC), the layout client's group (Pulumi-named, egress
    only) and the layout client launched at its address; `answer(file_system)` gives FSx's answer, one file system or
    a listing (the healthy one unless changed)."""
    ec2 = aws.client("ec2")
    vpc = ec2.create_vpc(CidrBlock=plan.config.vpc_cidr)["Vpc"]["VpcId"]
    client, _ = _planned(plan)
    # the /20 the layout client's address ends (the FSx zone's private subnet: components/network.py)
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.48.0/20", AvailabilityZone=f"{REGION}b")["Subnet"]
    _moto_cluster().resources_vpc_config = {"subnetIds": [subnet["SubnetId"]], "vpcId": vpc}
    group = ec2.create_security_group(GroupName=f"{client.name}-sg-0a1b2c3", Description="layout", VpcId=vpc)
    ec2.revoke_security_group_egress(
        GroupId=group["GroupId"],
        IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    )
    ec2.authorize_security_group_egress(
        GroupId=group["GroupId"], IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
    )
    state = {"ec2": ec2, "subnet": subnet["SubnetId"], "group": group["GroupId"], "vpc": vpc}
    state["instance"] = _launch(ec2, plan, subnet["SubnetId"], group["GroupId"])

    def answer(file_system: dict | list[dict] | None = None) -> None:
        listed = (
            file_system if isinstance(file_system, list) else [file_system or _file_system(plan, subnet["SubnetId"])]
        )
        _stubbed(aws_ctx, "fsx").add_response("describe_file_systems", {"FileSystems": listed})

    state["answer"] = answer
    return state


def _relaunched(account, plan, **changed) -> str:  # noqa: F811
    """TerminateInstances of the layout client, then RunInstances at its address with `changed` (what `pulumi up`
    does on a new layout, with something of the deploy role's own): the new instance's ID."""
    account["ec2"].terminate_instances(InstanceIds=[account["instance"]])
    return _launch(account["ec2"], plan, account["subnet"], account["group"], **changed)


def _evidence(aws_ctx, account, file_system: dict | list[dict] | None = None):  # noqa: F811
    account["answer"](file_system)
    return one("aws.layout-client", aws_ctx)


def test_the_planned_layout_client_alone_at_its_address_passes(aws_ctx, account):  # noqa: F811
    outcome = _evidence(aws_ctx, account)
    assert outcome.status == "PASS", outcome.evidence


def test_an_instance_of_the_deploy_roles_own_at_the_address_fails_naming_its_user_data(aws_ctx, account, plan):  # noqa: F811
    """The strict xfail's path (tests/delivery/test_r15_verify_attack: TerminateInstances, then RunInstances at the
    reserved address, which `pulumi up` itself does on a new layout): an instance with the plan's tags and user data
    of its own."""
    own = _relaunched(account, plan, UserData="#!/bin/bash\nmount -t lustre ...\n")
    outcome = _evidence(aws_ctx, account)
    assert outcome.status == "FAIL"
    assert f"instance {own}: its user data is not the plan's layout of this file system" in outcome.evidence


def test_a_network_interface_of_its_own_at_the_address_fails_naming_it(aws_ctx, account, plan):  # noqa: F811
    ec2 = account["ec2"]
    ec2.terminate_instances(InstanceIds=[account["instance"]])
    address = _planned(plan)[0].inputs["privateIp"]
    eni = ec2.create_network_interface(SubnetId=account["subnet"], PrivateIpAddress=address)["NetworkInterface"]
    outcome = _evidence(aws_ctx, account)
    assert outcome.status == "FAIL"
    assert f"{address}: held by network interface {eni['NetworkInterfaceId']} (attached to no instance)" in (
        outcome.evidence
    )


def test_an_interface_at_the_address_attached_to_an_instance_of_its_own_fails_naming_both(aws_ctx, account, plan):  # noqa: F811
    """CreateNetworkInterface at the address, then AttachNetworkInterface as the second interface of an instance of
    the deploy role's own (both ec2:*): that instance's root speaks from the address."""
    ec2 = account["ec2"]
    ec2.terminate_instances(InstanceIds=[account["instance"]])
    address = _planned(plan)[0].inputs["privateIp"]
    eni = ec2.create_network_interface(SubnetId=account["subnet"], PrivateIpAddress=address)["NetworkInterface"]
    own = ec2.run_instances(
        ImageId=_amazons_image(ec2)["ImageId"],
        InstanceType="t3.small",
        MinCount=1,
        MaxCount=1,
        SubnetId=account["subnet"],
    )["Instances"][0]["InstanceId"]
    ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"], InstanceId=own, DeviceIndex=1)
    outcome = _evidence(aws_ctx, account)
    assert outcome.status == "FAIL"
    assert f"{address}: held by network interface {eni['NetworkInterfaceId']} (device 1 of {own})" in outcome.evidence


def test_a_root_volume_made_from_another_snapshot_fails_naming_it(aws_ctx, account):  # noqa: F811
    """CreateReplaceRootVolumeTask from a snapshot of the deploy role's own (which VolumesStayWithTheirInstance
    refuses it), or a disk a role under the boundary attached: the instance boots what the snapshot holds."""
    ec2 = account["ec2"]
    (mapping,) = ec2.describe_instances(InstanceIds=[account["instance"]])["Reservations"][0]["Instances"][0][
        "BlockDeviceMappings"
    ]
    _moto_volume(mapping["Ebs"]["VolumeId"]).snapshot_id = "snap-0ffffffffffffffff"
    outcome = _evidence(aws_ctx, account)
    assert outcome.status == "FAIL"
    assert f"root volume {mapping['Ebs']['VolumeId']} from snapshot snap-0ffffffffffffffff, not its image's" in (
        outcome.evidence
    )


def test_an_image_not_amazons_fails_naming_its_owner(aws_ctx, account, plan):  # noqa: F811
    ec2 = account["ec2"]
    own = ec2.create_image(InstanceId=account["instance"], Name="layout-of-its-own")["ImageId"]
    relaunched = _relaunched(account, plan, image=ec2.describe_images(ImageIds=[own])["Images"][0])
    outcome = _evidence(aws_ctx, account)
    assert outcome.status == "FAIL"
    assert f"instance {relaunched}: image {own} of owner {ACCOUNT}, planned Amazon's AL2023" in outcome.evidence


def test_a_layout_client_with_a_key_pair_fails_naming_it(aws_ctx, account, plan):  # noqa: F811
    account["ec2"].create_key_pair(KeyName="way-in")
    own = _relaunched(account, plan, KeyName="way-in")
    outcome = _evidence(aws_ctx, account)
    assert outcome.status == "FAIL" and f"instance {own}: KeyName way-in, the plan sets none" in outcome.evidence


def test_a_layout_client_whose_group_admits_ssh_fails_naming_the_group(aws_ctx, account, plan):  # noqa: F811
    client, _ = _planned(plan)
    account["ec2"].authorize_security_group_ingress(
        GroupId=account["group"], IpPermissions=[{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
                                                  "IpRanges": [{"CidrIp": "10.0.0.0/8"}]}]
    )  # fmt: skip
    outcome = _evidence(aws_ctx, account)
    assert outcome.status == "FAIL"
    assert f"{client.name}-sg-0a1b2c3 admits traffic in, the plan none" in outcome.evidence


def test_a_second_address_exempted_from_root_squash_fails_naming_both(aws_ctx, account, plan):  # noqa: F811
    """UpdateFileSystem's RootSquashConfiguration, which no IAM condition key reads: an address of the deploy role's
    choosing made root on every team's directory."""
    planned = _planned(plan)[1].inputs["rootSquashConfiguration"]["noSquashNids"]
    nids = [*planned, "10.40.1.9@tcp"]
    outcome = _evidence(aws_ctx, account, _file_system(plan, account["subnet"], nids))
    assert outcome.status == "FAIL"
    assert f"exempting {', '.join(nids)}, planned 65534:65534 exempting {planned[0]}" in outcome.evidence


def test_a_missing_layout_client_fails(aws_ctx, account, plan):  # noqa: F811
    account["ec2"].terminate_instances(InstanceIds=[account["instance"]])
    outcome = _evidence(aws_ctx, account)
    address = _planned(plan)[0].inputs["privateIp"]
    assert outcome.status == "FAIL"
    assert f"{address}: no instance holds it, the planned layout client is missing" in outcome.evidence


def test_a_stack_without_a_file_system_skips_the_layout_client(aws_ctx, plan):  # noqa: F811
    """A plan with no layout client (higgsfield:fsx.enabled false makes neither it nor the file system)."""
    aws_ctx.plan = types.SimpleNamespace(
        config=plan.config, of_type=lambda kind: [] if kind in (checks.INSTANCE, checks.LUSTRE) else plan.of_type(kind)
    )
    assert one("aws.layout-client", aws_ctx).status == "SKIP"


def test_a_second_disk_on_the_layout_client_fails_naming_it(aws_ctx, account):  # noqa: F811
    """A volume beside the root one, attached while the client is stopped by a role under the boundary that may
    (the EBS CSI driver's: AttachVolume is its job) or given at a relaunch: made from a snapshot of an AL2023 root
    volume of the attacker's, its file system has the image's UUID and the instance may boot it as its root (AWS's
    troubleshooting page "instance booting from the wrong volume", not read here), its own root volume still
    Amazon's."""
    ec2 = account["ec2"]
    volume = ec2.create_volume(AvailabilityZone=f"{REGION}b", Size=8)
    _moto_volume(volume["VolumeId"]).snapshot_id = "snap-0ffffffffffffffff"
    ec2.attach_volume(VolumeId=volume["VolumeId"], InstanceId=account["instance"], Device="/dev/sdf")
    outcome = _evidence(aws_ctx, account)
    assert outcome.status == "FAIL"
    assert f"instance {account['instance']}: volume {volume['VolumeId']} at /dev/sdf beside its root" in (
        outcome.evidence
    )


def test_the_address_as_a_second_address_of_another_instances_interface_fails_naming_that_instance(
    aws_ctx, account, plan
):  # noqa: F811
    """AssignPrivateIpAddresses (ec2:*, no condition key on the address) puts the reserved address on the primary
    interface of an instance of the deploy role's own, a node of the file system's subnet included, once the layout
    client is gone: its first address is its own, so only the interface's second address says it."""
    ec2 = account["ec2"]
    ec2.terminate_instances(InstanceIds=[account["instance"]])
    image = _amazons_image(ec2)
    own = ec2.run_instances(
        ImageId=image["ImageId"], InstanceType="t3.small", MinCount=1, MaxCount=1, SubnetId=account["subnet"]
    )["Instances"][0]
    address = _planned(plan)[0].inputs["privateIp"]
    ec2.assign_private_ip_addresses(
        NetworkInterfaceId=own["NetworkInterfaces"][0]["NetworkInterfaceId"], PrivateIpAddresses=[address]
    )
    outcome = _evidence(aws_ctx, account)
    assert outcome.status == "FAIL"
    assert f"instance {own['InstanceId']}: layout untagged" in outcome.evidence


def _decoy(plan, subnet: str, vpc: str = "") -> dict:
    """A file system of the deploy role's own (CreateFileSystem: fsx:*) tagged as the stack's, squashing as planned."""
    return {
        **_file_system(plan, subnet, vpc=vpc),
        "FileSystemId": "fs-0decoy0000000000",
        "DNSName": f"fs-0decoy0000000000.fsx.{REGION}.amazonaws.com",
    }


def test_a_second_file_system_tagged_as_the_stacks_in_its_vpc_fails_naming_both(aws_ctx, account, plan):  # noqa: F811
    """A decoy listed first, with a layout client at the address mounting it, would stand in for the stack's file
    system, whose exemptions (UpdateFileSystem) would go unread."""
    ec2 = account["ec2"]
    decoy = _decoy(plan, account["subnet"])
    ec2.terminate_instances(InstanceIds=[account["instance"]])
    _launch(ec2, plan, account["subnet"], account["group"], UserData=_user_data(plan, decoy["DNSName"]))
    planned = _planned(plan)[1].inputs["rootSquashConfiguration"]["noSquashNids"]
    stacks = _file_system(plan, account["subnet"], [*planned, "10.40.1.9@tcp"])
    outcome = _evidence(aws_ctx, account, [decoy, stacks])
    assert outcome.status == "FAIL"
    assert f"2 Lustre file systems in the cluster's VPC {account['vpc']} ({decoy['FileSystemId']}, {FILE_SYSTEM})" in (
        outcome.evidence
    )


def test_the_stacks_file_system_untagged_for_a_decoy_in_another_vpc_fails_naming_it(aws_ctx, account, plan):  # noqa: F811
    """fsx:UntagResource takes the Name off the stack's file system; a decoy of that Name in a VPC of the deploy
    role's own (CreateVpc: ec2:*), of the same block, holds a layout client at the same address, mounting it."""
    ec2 = account["ec2"]
    other = ec2.create_vpc(CidrBlock=plan.config.vpc_cidr)["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=other, CidrBlock="10.40.48.0/20", AvailabilityZone=f"{REGION}b")["Subnet"]
    group = ec2.create_security_group(GroupName=f"{_planned(plan)[0].name}-sg-0d0d0d0", Description="l", VpcId=other)
    decoy = _decoy(plan, subnet["SubnetId"], vpc=other)
    _launch(ec2, plan, subnet["SubnetId"], group["GroupId"], UserData=_user_data(plan, decoy["DNSName"]))
    stacks = _file_system(plan, account["subnet"])
    stacks["Tags"] = [t for t in stacks["Tags"] if t["Key"] != "Name"]
    outcome = _evidence(aws_ctx, account, [decoy, stacks])
    assert outcome.status == "FAIL"
    name = _planned(plan)[1].inputs["tags"]["Name"]
    assert f"file system {FILE_SYSTEM} in the cluster's VPC {account['vpc']}: not tagged Name {name}" in (
        outcome.evidence
    )

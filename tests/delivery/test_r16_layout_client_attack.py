"""Round 16: the FSx layout client, the file system's one root-squash exemption (components/storage.py
LAYOUT_CLIENT_*), attacked by the holder of the CI deploy role, written as the requests it would send and decided by
the repo's evaluator (policies/iam_evaluation.py) on the policies the prod plan renders. The client, once it has run,
is stopped with no key, profile or open group; StartInstances and AuthorizeSecurityGroupIngress are the deploy role's
(ec2:*, which `pulumi up` needs), so what matters is whether anything then lets it in. What IAM lets through is
`higgsfield verify`'s to find (aws.layout-client: tests/cli/test_verify_layout_client.py).

Action names are the Service Authorization Reference's ("Actions, resources, and condition keys for Amazon EC2 Instance
Connect", list_amazonec2instanceconnect: SendSSHPublicKey, SendSerialConsoleSSHPublicKey, OpenTunnel; "... for AWS
Systems Manager", list_awssystemsmanager: StartSession, SendCommand, UpdateServiceSetting, the last of which turns on
Default Host Management Configuration, under which an instance with no profile registers with SSM)."""

from __future__ import annotations

import pytest

from policies.iam_evaluation import Request, evaluate
from tests.delivery.test_ci_identity import ACCOUNT, EVERYTHING, REGION, _boundary, _deploy

LAYOUT_CLIENT = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0layout0client000"

# The ways into a running instance with no key pair or instance profile of its own.
WAYS_IN = [
    # a key of the caller's, honoured by AL2023's EC2 Instance Connect for 60 seconds
    Request("ec2-instance-connect:SendSSHPublicKey", LAYOUT_CLIENT),
    # the serial console (after ec2:EnableSerialConsoleAccess, an ec2 action the deploy role has)
    Request("ec2-instance-connect:SendSerialConsoleSSHPublicKey", LAYOUT_CLIENT),
    # an Instance Connect Endpoint's tunnel to the client's private address (CreateInstanceConnectEndpoint is ec2:*)
    Request("ec2-instance-connect:OpenTunnel", f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance-connect-endpoint/eice-0a1b2c"),
    Request("ssm:StartSession", LAYOUT_CLIENT),
    Request("ssm:SendCommand", LAYOUT_CLIENT),
    Request(
        "ssm:UpdateServiceSetting",
        f"arn:aws:ssm:{REGION}:{ACCOUNT}:servicesetting/ssm/managed-instance/default-ec2-instance-management-role",
    ),
]


@pytest.mark.parametrize("request_", WAYS_IN, ids=lambda r: r.action)
def test_the_deploy_role_has_no_way_into_a_started_layout_client(request_):
    """Granted none (neither service is among DEPLOY_SERVICES): starting the stopped client and opening its group
    gives it a running root-exempt machine it cannot log in to."""
    decision = evaluate(request_, [_deploy()])
    assert decision.reason == "no identity policy allows it", decision.reason


@pytest.mark.parametrize("request_", WAYS_IN, ids=lambda r: r.action)
def test_no_role_the_deploy_role_makes_has_a_way_into_a_started_layout_client(request_):
    decision = evaluate(request_, [EVERYTHING], _boundary())
    assert decision.reason == "not allowed by the permissions boundary delivery-boundary", decision.reason


def test_the_deploy_role_gives_the_layout_client_no_profile():
    """AssociateIamInstanceProfile is ec2:*, but a profile's role is passed to EC2, which NoRoleToAnInstance refuses:
    a profile would make the client an SSM-managed instance and give its root the role's credentials."""
    role = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-0a1b2c3d4e5f6a7"
    decision = evaluate(Request("iam:PassRole", role, {"iam:PassedToService": "ec2.amazonaws.com"}), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "NoRoleToAnInstance"), decision.reason


# What IAM lets the deploy role do to the exemption, each with no condition key on what matters (the address, the
# NIDs, the tag's value on a file system), and the verify test that finds its result.
SEEN_ONLY = [
    # the reserved address on an interface of its own, the client terminated first
    (
        Request("ec2:AssignPrivateIpAddresses", f"arn:aws:ec2:{REGION}:{ACCOUNT}:network-interface/eni-0a1b2c3d"),
        "test_the_address_as_a_second_address_of_another_instances_interface_fails_naming_that_instance",
    ),
    # another NID exempted (UpdateFileSystem's RootSquashConfiguration; the program needs the call for every
    # in-place change of its file system: storage capacity, throughput, backups, logging)
    (
        Request("fsx:UpdateFileSystem", f"arn:aws:fsx:{REGION}:{ACCOUNT}:file-system/fs-0123456789abcdef0"),
        "test_a_second_address_exempted_from_root_squash_fails_naming_both",
    ),
    # the stack's Name moved to a file system of its own
    (
        Request("fsx:UntagResource", f"arn:aws:fsx:{REGION}:{ACCOUNT}:file-system/fs-0123456789abcdef0"),
        "test_the_stacks_file_system_untagged_for_a_decoy_in_another_vpc_fails_naming_it",
    ),
    (
        Request("fsx:CreateFileSystem", f"arn:aws:fsx:{REGION}:{ACCOUNT}:file-system/*"),
        "test_a_second_file_system_tagged_as_the_stacks_in_its_vpc_fails_naming_both",
    ),
]


@pytest.mark.parametrize(("request_", "found_by"), SEEN_ONLY, ids=lambda v: getattr(v, "action", ""))
def test_what_the_deploy_role_may_do_to_the_exemption_verify_finds(request_, found_by):
    from tests.cli import test_verify_layout_client

    assert evaluate(request_, [_deploy()]).allowed
    assert callable(getattr(test_verify_layout_client, found_by))


# The stack's file system's automatic backups (higgsfield:fsx.backupRetentionDays: 7 days on PERSISTENT_2), or one the
# deploy role takes (fsx:CreateBackup), hold every team's files.
BACKUP = f"arn:aws:fsx:{REGION}:{ACCOUNT}:backup/backup-0a1b2c3d4e5f67890"


def test_the_deploy_role_restores_no_backup_of_the_teams_files_to_a_file_system_of_its_own():
    """CreateFileSystemFromBackup takes the new file system's squash (LustreConfiguration.RootSquashConfiguration,
    none if left out: boto/botocore:botocore/data/fsx/2018-03-01/service-2.json@1.44.18) and its subnet: root on a
    copy of every team's directory, in a VPC of its own, where aws.layout-client looks at the stack's alone."""
    decision = evaluate(Request("fsx:CreateFileSystemFromBackup", BACKUP), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "AdministratorsOnly"), decision.reason


def test_no_role_the_deploy_role_makes_restores_a_backup_of_the_teams_files():
    decision = evaluate(Request("fsx:CreateFileSystemFromBackup", BACKUP), [EVERYTHING], _boundary())
    assert decision.denied_by == ("delivery-boundary", "AdministratorsOnly"), decision.reason


def test_the_deploy_role_cannot_point_the_stacks_vpc_at_name_servers_of_its_own():
    """A DHCP options set of its own (CreateDhcpOptions) associated with the stack's VPC: the nodes resolve the file
    system's name (the CSI driver mounts DNSNAME@tcp) through its servers, which may answer with a Lustre server of
    its own that every team's pods then write to."""
    vpc = f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc/vpc-0a1b2c3d4e5f67890"
    decision = evaluate(Request("ec2:AssociateDhcpOptions", vpc), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "NamesResolveAsAwsAnswers"), decision.reason

"""The deploy identity's ceiling (components/delivery.py): a permissions boundary on every role,
and the ways out of it, written as the requests an attacker holding the deploy role would send,
evaluated against the policies we render (policies/iam_evaluation.py). Each attack is refused by
a named boundary statement, and goes through once that statement is gone."""

from __future__ import annotations

import copy
import json

import pytest

from components.delivery import MANAGED_POLICIES, boundary_arn, deploy_denials_arn
from infra.offline.delivery_checks import account_findings
from policies.iam_evaluation import Policy, Request, evaluate
from tests.conftest import ROOT, STACKS, config_of, plan_of
from tests.policies.test_policies import R, stack_violations

ACCOUNT = config_of("prod").delivery.account_id
REGION = "us-east-2"
STACK_ROLE = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-lustre-csi-0123"
DEPLOY_ROLE = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-deploy"
BOUNDARY = boundary_arn(ACCOUNT, "prod")
ADMIN = "arn:aws:iam::aws:policy/AdministratorAccess"
OWN_KEY, FOREIGN_KEY = (f"arn:aws:kms:us-east-2:{ACCOUNT}:key/{k}" for k in ("logs", "someone-elses"))
OWN_TAG = {"aws:ResourceTag/higgsfield:stack": "prod"}  # cfg.resource_tags on every key of the stack
# CreateKey's Tags (pulumi-aws passes cfg.resource_tags there), which KeysCarryTheStacksTag asks of every key
TAGGED = {"aws:RequestTag/higgsfield:stack": "prod", "aws:TagKeys": ["higgsfield:stack"]}


def _document(plan, type_: str, name: str) -> Policy:
    r = next(r for r in plan.resources if r.type == type_ and r.name == name)
    return Policy.of(name, r.inputs["policy"])


def _boundary(plan=None) -> Policy:
    plan = plan or plan_of("prod")
    return _document(plan, "aws:iam/policy:Policy", "delivery-boundary")


def _deploy(plan=None) -> Policy:
    """What the deploy role may do: its inline policy and its managed one (components/delivery.py deploy_policy,
    deploy_denials_policy) as one Policy named after the inline one, for IAM decides on all of a role's policies
    together: a denial's Sid names its statement in either."""
    plan = plan or plan_of("prod")
    inline = _document(plan, "aws:iam/rolePolicy:RolePolicy", "delivery-deploy")
    managed = _document(plan, "aws:iam/policy:Policy", "delivery-deploy-denials")
    return Policy(inline.name, {"Statement": [*inline.document["Statement"], *managed.document["Statement"]]})


# A role the deploy role made (bounded) and gave `*` on `*`: the boundary alone must hold.
EVERYTHING = Policy("everything", {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
NOT_ALLOWED_BY_THE_BOUNDARY = "not allowed by the permissions boundary delivery-boundary"
# An attack the deploy role's policy refuses by granting no such action (IAM beyond its named role writes on
# higgsfield-STACK-* roles: deploy_policy), not by a denial of its own.
NOT_GRANTED = "not granted"

# (attack, request, the statement that refuses it: the deploy role's policy's and, unless the attack is an IAM
# write or sts (which the stack boundary does not allow), the stack boundary's)
ATTACKS = [
    ("rewrite the boundary", Request("iam:CreatePolicyVersion", BOUNDARY), "ManagedPoliciesAreFixed"),
    # the deploy role, unbounded, handed to a build, an instance profile or a pod
    ("pass the deploy role to a service", Request("iam:PassRole", DEPLOY_ROLE), "CiIdentitiesAreNotPassed"),
    (
        "change a node group of another cluster, named like the stack's cluster",
        Request(
            "eks:UpdateNodegroupConfig", f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/analytics/higgsfield-prod/0a1b"
        ),
        "OnlyTheStacksCluster",
    ),
    ("a carrier gateway out of the VPC", Request("ec2:CreateCarrierGateway", "*"), "AdministratorsOnly"),
    (
        "make a rewritten boundary the default",
        Request("iam:SetDefaultPolicyVersion", BOUNDARY),
        "ManagedPoliciesAreFixed",
    ),
    ("delete the boundary", Request("iam:DeletePolicy", BOUNDARY), "ManagedPoliciesAreFixed"),
    ("grant itself more", Request("iam:PutRolePolicy", DEPLOY_ROLE), "CiIdentitiesAreAdministeredByBootstrap"),
    (
        "attach AdministratorAccess to itself",
        Request("iam:AttachRolePolicy", DEPLOY_ROLE, {"iam:PolicyARN": ADMIN}),
        "CiIdentitiesAreAdministeredByBootstrap",
    ),
    (
        "let a pull request assume it",
        Request("iam:UpdateAssumeRolePolicy", DEPLOY_ROLE),
        "CiIdentitiesAreAdministeredByBootstrap",
    ),
    ("drop its own boundary", Request("iam:DeleteRolePermissionsBoundary", DEPLOY_ROLE), "BoundaryStaysAttached"),
    (
        "widen the preview role a pull request holds",
        Request("iam:PutRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-preview"),
        "CiIdentitiesAreAdministeredByBootstrap",
    ),
    (
        "give the deploy runner's role credentials a PR could read",
        Request(
            "iam:AttachRolePolicy",
            f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-deploy-runner",
            {"iam:PolicyARN": "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy"},
        ),
        "CiIdentitiesAreAdministeredByBootstrap",
    ),
    (
        "create a role without the boundary",
        Request("iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-escape"),
        "RolesOnlyWithTheBoundary",
    ),
    (
        "create a role with a boundary of its own",
        Request(
            "iam:CreateRole",
            f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-escape",
            {"iam:PermissionsBoundary": f"arn:aws:iam::{ACCOUNT}:policy/higgsfield-prod-open"},
        ),
        "RolesOnlyWithTheBoundary",
    ),
    (
        "swap a role's boundary",
        Request("iam:PutRolePermissionsBoundary", STACK_ROLE, {"iam:PermissionsBoundary": ADMIN}),
        "RolesOnlyWithTheBoundary",
    ),
    (
        "attach AdministratorAccess to a stack role",
        Request("iam:AttachRolePolicy", STACK_ROLE, {"iam:PolicyARN": ADMIN}),
        "OnlyTheProgramsManagedPolicies",
    ),
    (
        "create an unbounded role outside the stack's names",
        Request("iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/Escape", {"iam:PermissionsBoundary": BOUNDARY}),
        NOT_GRANTED,
    ),
    (
        "trust itself from the account's admin role",
        Request("iam:UpdateAssumeRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/OrganizationAccountAccessRole"),
        "TrustIsSetAtCreate",
    ),
    (
        "grant another stack's role",
        Request("iam:PutRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/higgsfield-staging-deploy"),
        "CiIdentitiesAreAdministeredByBootstrap",
    ),
    (
        "grant another stack's node role",
        Request("iam:PutRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/higgsfield-staging-node-0123"),
        NOT_GRANTED,
    ),
    (
        "pass an admin role to an instance, a build or a pod",
        Request(
            "iam:PassRole",
            f"arn:aws:iam::{ACCOUNT}:role/OrganizationAccountAccessRole",
            {"iam:PassedToService": "ec2.amazonaws.com"},
        ),
        "PassOnlyTheStacksRoles",
    ),
    (
        "assume the account's admin role",
        Request("sts:AssumeRole", f"arn:aws:iam::{ACCOUNT}:role/OrganizationAccountAccessRole"),
        "NoRoleChaining",
    ),
    ("a user of its own", Request("iam:CreateUser", f"arn:aws:iam::{ACCOUNT}:user/backdoor"), NOT_GRANTED),
    (
        "a long-lived key",
        Request("iam:CreateAccessKey", f"arn:aws:iam::{ACCOUNT}:user/backdoor"),
        NOT_GRANTED,
    ),
    (
        "a console password",
        Request("iam:CreateLoginProfile", f"arn:aws:iam::{ACCOUNT}:user/backdoor"),
        NOT_GRANTED,
    ),
    (
        "join the admins group",
        Request("iam:AddUserToGroup", f"arn:aws:iam::{ACCOUNT}:group/Admins"),
        NOT_GRANTED,
    ),
    (
        "an instance profile for a stack role",
        Request("iam:AddRoleToInstanceProfile", f"arn:aws:iam::{ACCOUNT}:instance-profile/x"),
        NOT_GRANTED,
    ),
    (
        "trust an identity provider of its own",
        Request("iam:CreateOpenIDConnectProvider", f"arn:aws:iam::{ACCOUNT}:oidc-provider/evil.example.com"),
        NOT_GRANTED,
    ),
    (
        "add an audience to GitHub's provider",
        Request(
            "iam:AddClientIDToOpenIDConnectProvider",
            f"arn:aws:iam::{ACCOUNT}:oidc-provider/token.actions.githubusercontent.com",
        ),
        NOT_GRANTED,
    ),
]


DATA_BUCKET = f"arn:aws:s3:::{config_of('prod').fsx.s3.bucket}"
# Issue 34: the ways the deploy role could still open the account's data to another account.
ATTACKS += [
    (
        "let another account pull the gate's image",
        Request("ecr:SetRepositoryPolicy", f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/higgsfield-prod-training"),
        "AdministratorsOnly",
    ),
    (
        "replicate every image to another account",
        Request("ecr:PutReplicationConfiguration", "*"),
        "AdministratorsOnly",
    ),
    ("a registry policy for another account", Request("ecr:PutRegistryPolicy", "*"), "AdministratorsOnly"),
    (
        "grant another account the FSx key",
        Request("kms:CreateGrant", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/fsx", {"kms:GrantIsForAWSResource": "false"}),
        "KmsGrantsOnlyForAwsResources",
    ),
    (
        "subscribe another account to the audit log",
        Request(
            "logs:PutSubscriptionFilter", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/eks/higgsfield-prod/cluster"
        ),
        "AdministratorsOnly",
    ),
    ("a log destination for another account", Request("logs:PutDestinationPolicy", "*"), "AdministratorsOnly"),
    (
        "delete the audit log",
        Request("logs:DeleteLogGroup", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/eks/higgsfield-prod/cluster"),
        "AuditLogsStay",
    ),
    (
        "delete the flow logs",
        Request("logs:DeleteLogGroup", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/vpc/higgsfield-prod/flow-logs"),
        "AuditLogsStay",
    ),
    ("peer the VPC with another account's", Request("ec2:CreateVpcPeeringConnection", "*"), "AdministratorsOnly"),
    ("accept another account's peering", Request("ec2:AcceptVpcPeeringConnection", "*"), "AdministratorsOnly"),
    ("share a snapshot of a node's disk", Request("ec2:ModifySnapshotAttribute", "*"), "AdministratorsOnly"),
    ("share an image", Request("ec2:ModifyImageAttribute", "*"), "AdministratorsOnly"),
    (
        "rewrite the unsquashed layout client's user data",
        Request("ec2:ModifyInstanceAttribute", f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0layout"),
        "AdministratorsOnly",
    ),
    (
        "a bucket policy for another account on the data",
        Request("s3:PutBucketPolicy", DATA_BUCKET),
        "AdministratorsOnly",
    ),
    (
        "replicate the data to another account",
        Request("s3:PutReplicationConfiguration", DATA_BUCKET),
        "AdministratorsOnly",
    ),
    ("expire the data", Request("s3:PutLifecycleConfiguration", DATA_BUCKET), "AdministratorsOnly"),
    ("make the data public", Request("s3:DeleteBucketPublicAccessBlock", DATA_BUCKET), "AdministratorsOnly"),
    ("an access point for another account", Request("s3:CreateAccessPoint", DATA_BUCKET), "AdministratorsOnly"),
    (
        "offer the VPC's services to another account",
        Request("ec2:ModifyVpcEndpointServicePermissions", "*"),
        "AdministratorsOnly",
    ),
    (
        "attach the VPC to another account's transit gateway",
        Request("ec2:CreateTransitGatewayVpcAttachment", "*"),
        "AdministratorsOnly",
    ),
    ("a VPN to another network", Request("ec2:CreateVpnConnection", "*"), "AdministratorsOnly"),
    (
        "make another account's role a cluster admin",
        Request(
            "eks:CreateAccessEntry",
            "arn:aws:eks:us-east-2:444455556666:cluster/higgsfield-prod",
            {"eks:principalArn": "arn:aws:iam::999999999999:role/attacker"},
        ),
        "ClusterAccessStaysInTheAccount",
    ),
    (
        "rewrite the policy of a key that is not the stack's (another stack's)",
        Request("kms:PutKeyPolicy", FOREIGN_KEY, {"aws:ResourceTag/higgsfield:stack": "staging"}),
        "AdministratorsOnly",
    ),
    (
        "rewrite the policy of an untagged key of the account",
        Request("kms:PutKeyPolicy", FOREIGN_KEY),
        "AdministratorsOnly",
    ),
    (
        # IAM cannot read the policy PutKeyPolicy writes: one naming another account looks like ours
        "rewrite the policy of one of the stack's own keys to open it to another account",
        Request("kms:PutKeyPolicy", OWN_KEY, OWN_TAG),
        "AdministratorsOnly",
    ),
    (
        "lock the account out of one of its keys",
        Request("kms:PutKeyPolicy", OWN_KEY, {**OWN_TAG, "kms:BypassPolicyLockoutSafetyCheck": "true"}),
        "AdministratorsOnly",
    ),
    (
        "create a key the account is locked out of",
        Request("kms:CreateKey", "*", {"kms:BypassPolicyLockoutSafetyCheck": "true"}),
        "NoKeyPolicyLockout",
    ),
]

# Issue 34, round 6: the paths beside those denials.
AUDIT_LOG = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/eks/higgsfield-prod/cluster"
FLOW_LOG = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/vpc/higgsfield-prod/flow-logs"
STATE_BUCKET = f"arn:aws:s3:::{config_of('prod').delivery.state_bucket}"
ENDPOINT = f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc-endpoint/*"
ATTACKS += [
    (
        "an outside OIDC issuer for the cluster",
        Request("eks:AssociateIdentityProviderConfig", f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/higgsfield-prod"),
        "AdministratorsOnly",
    ),
    (
        "an endpoint of another account's Gateway Load Balancer service",
        Request("ec2:CreateVpcEndpoint", ENDPOINT, {"ec2:VpceServiceOwner": "999999999999"}),
        "EndpointsOfAwsOrTheAccount",
    ),
    (
        "an endpoint of a marketplace service",
        Request("ec2:CreateVpcEndpoint", ENDPOINT, {"ec2:VpceServiceOwner": "aws-marketplace"}),
        "EndpointsOfAwsOrTheAccount",
    ),
    ("a traffic mirror target", Request("ec2:CreateTrafficMirrorTarget", "*"), "AdministratorsOnly"),
    ("a traffic mirror session on a node", Request("ec2:CreateTrafficMirrorSession", "*"), "AdministratorsOnly"),
    ("export the audit log to another bucket", Request("logs:CreateExportTask", AUDIT_LOG), "AdministratorsOnly"),
    ("a vended-log delivery elsewhere", Request("logs:CreateDelivery", "*"), "AdministratorsOnly"),
    ("shorten the audit log's retention", Request("logs:PutRetentionPolicy", AUDIT_LOG), "AuditLogsStay"),
    ("shorten the flow logs' retention", Request("logs:PutRetentionPolicy", FLOW_LOG), "AuditLogsStay"),
    ("put the audit log under another key", Request("logs:AssociateKmsKey", AUDIT_LOG), "AuditLogsStay"),
    ("take the flow logs' key away", Request("logs:DisassociateKmsKey", FLOW_LOG), "AuditLogsStay"),
    (
        "replicate one of the stack's keys with a policy of its own",
        Request("kms:ReplicateKey", OWN_KEY, {**OWN_TAG, "kms:ReplicaRegion": "eu-west-1"}),
        "AdministratorsOnly",
    ),
    ("make a replica the primary", Request("kms:UpdatePrimaryRegion", OWN_KEY, OWN_TAG), "AdministratorsOnly"),
    ("create a multi-Region key", Request("kms:CreateKey", "*", {"kms:MultiRegion": "true"}), "NoMultiRegionKeys"),
    (
        "encrypt the state under another account's key",
        Request("s3:PutEncryptionConfiguration", STATE_BUCKET),
        "TheDataOutlivesTheDeploy",
    ),
    (
        "encrypt the data under another account's key",
        Request("s3:PutEncryptionConfiguration", DATA_BUCKET),
        "TheDataOutlivesTheDeploy",
    ),
    (
        "an inventory of the data for another account",
        Request("s3:PutInventoryConfiguration", DATA_BUCKET),
        "TheDataOutlivesTheDeploy",
    ),
    (
        "an analytics export of the state",
        Request("s3:PutAnalyticsConfiguration", STATE_BUCKET),
        "TheDataOutlivesTheDeploy",
    ),
    (
        "the data's object events to another account's queue",
        Request("s3:PutBucketNotification", DATA_BUCKET),
        "TheDataOutlivesTheDeploy",
    ),
    ("share the runners' builds", Request("codebuild:PutResourcePolicy", "*"), "AdministratorsOnly"),
]

# Issue 34, round 6, second attack: a stack role trusted by another account, made cluster admin; and the
# inbound openings beside those denied.
CLUSTER = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/higgsfield-prod"
FRONT = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-front"  # created bounded, trusting another account
ATTACKS += [
    (
        "enter a stack role the program does not enter in the cluster's access",
        Request("eks:CreateAccessEntry", CLUSTER, {"eks:principalArn": FRONT}),
        "ClusterAccessStaysInTheAccount",
    ),
    (
        "make a stack role the program does not enter a cluster admin",
        Request(
            "eks:AssociateAccessPolicy",
            CLUSTER,
            {
                "eks:principalArn": FRONT,
                "eks:policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
            },
        ),
        "ClusterAccessStaysInTheAccount",
    ),
    (
        "let another account assume a stack role",
        Request("iam:UpdateAssumeRolePolicy", STACK_ROLE),
        "TrustIsSetAtCreate",
    ),
    (
        "an outside OIDC trust provider for Verified Access",
        Request("ec2:CreateVerifiedAccessTrustProvider", "*"),
        "AdministratorsOnly",
    ),
    (
        "a Verified Access endpoint in the VPC",
        Request("ec2:CreateVerifiedAccessEndpoint", "*"),
        "AdministratorsOnly",
    ),
    (
        "lend a node's interface to another account",
        Request("ec2:CreateNetworkInterfacePermission", "*"),
        "InterfacesLentOnlyToCodeBuild",
    ),
    ("an external key store", Request("kms:CreateCustomKeyStore", "*"), "AdministratorsOnly"),
    ("import key material", Request("kms:ImportKeyMaterial", OWN_KEY, OWN_TAG), "AdministratorsOnly"),
    (
        "a key in an external key store",
        Request("kms:CreateKey", "*", {"kms:KeyOrigin": "EXTERNAL_KEY_STORE"}),
        "NoForeignKeyMaterial",
    ),
    (
        "a key for imported material",
        Request("kms:CreateKey", "*", {"kms:KeyOrigin": "EXTERNAL"}),
        "NoForeignKeyMaterial",
    ),
    (
        "make prod's private API endpoint public",
        Request("eks:UpdateClusterConfig", CLUSTER, {"eks:endpointPublicAccess": "true"}),
        "EndpointStaysPrivate",
    ),
]


# Round 8: holes beside those denials.
FSX_S3_LINK_ROLE = (
    f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
    "AWSServiceRoleForFSxS3Access_fs-0123"
)
INTERFACE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:network-interface/*"
ATTACKS += [
    (
        # a request that carries no kms:GrantIsForAWSResource: `Bool ... false` did not match it
        "grant another account the FSx key in a request that does not say whom for",
        Request("kms:CreateGrant", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/fsx"),
        "KmsGrantsOnlyForAwsResources",
    ),
    (
        "link the file system to another account's bucket (export the teams' files there)",
        Request("fsx:CreateDataRepositoryAssociation", f"arn:aws:fsx:{REGION}:{ACCOUNT}:association/fs-0123/*"),
        "AdministratorsOnly",
    ),
    (
        "a file cache linked to another account's bucket",
        Request("fsx:CreateFileCache", "*"),
        "AdministratorsOnly",
    ),
    (
        # what FSx asks its caller for when a new file system links a bucket (an ImportPath)
        "create the S3 link role of a new file system",
        Request(
            "iam:CreateServiceLinkedRole",
            FSX_S3_LINK_ROLE,
            {"iam:AWSServiceName": "s3.data-source.lustre.fsx.amazonaws.com"},
        ),
        "OnlyTheProgramsServiceLinkedRoles",
    ),
    ("put the policy of FSx's S3 link role", Request("iam:PutRolePolicy", FSX_S3_LINK_ROLE), NOT_GRANTED),
    (
        "delete an old version of a dataset file",
        Request("s3:DeleteObjectVersion", f"{DATA_BUCKET}/train/shard-0001.tar"),
        "TheDataOutlivesTheDeploy",
    ),
    ("delete the data bucket", Request("s3:DeleteBucket", DATA_BUCKET), "TheDataOutlivesTheDeploy"),
    (
        "suspend the data bucket's versioning (each later write then replaces the only copy)",
        Request("s3:PutBucketVersioning", DATA_BUCKET),
        "TheDataOutlivesTheDeploy",
    ),
    (
        "launch an instance with a public address",
        Request("ec2:RunInstances", INTERFACE, {"ec2:AssociatePublicIpAddress": "true"}),
        "NoPublicAddressOnLaunch",
    ),
    (
        "give a node's interface a public address",
        Request("ec2:ModifyNetworkInterfaceAttribute", INTERFACE, {"ec2:AssociatePublicIpAddress": "true"}),
        "NoPublicAddressOnLaunch",
    ),
    (
        "attach an Elastic IP to an instance",
        Request("ec2:AssociateAddress", f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0node"),
        "AdministratorsOnly",
    ),
    (
        "make a private subnet hand out public addresses",
        Request("ec2:ModifySubnetAttribute", f"arn:aws:ec2:{REGION}:{ACCOUNT}:subnet/subnet-0private"),
        "AdministratorsOnly",
    ),
]


def _without(policy: Policy, sid: str) -> Policy:
    document = copy.deepcopy(dict(policy.document))
    document["Statement"] = [s for s in document["Statement"] if s.get("Sid") != sid]
    return Policy(policy.name, document)


def _refused_by_the_boundarys_allow(request_: Request) -> bool:
    """IAM writes, sts and EKS writes: the stack boundary allows no such action (IAM_ACTIONS is all of its IAM,
    BOUNDED_EKS_ACTIONS all of its EKS)."""
    return not evaluate(request_, [EVERYTHING], _allows_of(_boundary())).allowed


@pytest.mark.parametrize(("attack", "request_", "sid"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_the_deploy_role_cannot(attack, request_, sid):
    """The deploy role has no permissions boundary: its own policy refuses each attack."""
    decision = evaluate(request_, [_deploy()])
    if sid == NOT_GRANTED:
        assert decision.reason == "no identity policy allows it", decision.reason
    else:
        assert decision.denied_by == ("delivery-deploy", sid), decision.reason


# The deploy role's denials whose requests the boundary refuses whole, in AdministratorsOnly: no role under it makes a
# key (components/delivery.py NEVER_UNDER_THE_BOUNDARY).
IN_THE_BOUNDARY = dict.fromkeys(
    ("NoMultiRegionKeys", "NoKeyPolicyLockout", "NoForeignKeyMaterial"), "AdministratorsOnly"
)


@pytest.mark.parametrize(("attack", "request_", "sid"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_role_it_made_with_every_permission_cannot_either(attack, request_, sid):
    # refused by the denial named, or by the boundary's allow, which names no such action
    decision = evaluate(request_, [EVERYTHING], _boundary())
    if decision.denied_by is None:
        assert decision.reason == NOT_ALLOWED_BY_THE_BOUNDARY and _refused_by_the_boundarys_allow(request_)
    else:
        assert decision.denied_by == ("delivery-boundary", IN_THE_BOUNDARY.get(sid, sid)), decision.reason


def _allows_of(policy: Policy) -> Policy:
    return Policy(policy.name, {"Statement": [s for s in policy.document["Statement"] if s["Effect"] == "Allow"]})


def _named(sid: str, policy: Policy) -> bool:
    return any(s.get("Sid") == sid for s in policy.document["Statement"])


@pytest.mark.parametrize(("attack", "request_", "sid"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_each_attack_goes_through_once_its_statement_is_removed(attack, request_, sid):
    # The named statement is what refuses it: without it, the deploy role (or a bounded role with `*`) gets
    # through, or another named denial (never the same) still holds.
    for identity, boundary, policy in ((_deploy(), None, _deploy()), (EVERYTHING, _boundary(), _boundary())):
        if not _named(sid, policy):
            continue
        if boundary is None:
            decision = evaluate(request_, [_without(identity, sid)])
        else:
            decision = evaluate(request_, [identity], _without(boundary, sid))
        assert decision.denied_by is None or decision.denied_by[1] != sid
        # Or defended twice: the deploy policy grants no such request, or the boundary allows none.
        if decision.denied_by is None and not decision.allowed:
            assert decision.reason == "no identity policy allows it" or (
                boundary is not None and not evaluate(request_, [EVERYTHING], _allows_of(boundary)).allowed
            ), decision.reason


def test_every_attack_is_refused_by_a_statement_one_of_the_ceilings_names():
    assert all(sid == NOT_GRANTED or _named(sid, _deploy()) or _named(sid, _boundary()) for _, _, sid in ATTACKS)


# What `pulumi up` does must still be allowed: the ceiling is not a wall.
DEPLOYS = [
    Request("iam:CreateRole", STACK_ROLE, {"iam:PermissionsBoundary": BOUNDARY}),
    Request("iam:PutRolePolicy", STACK_ROLE),
    Request("iam:AttachRolePolicy", STACK_ROLE, {"iam:PolicyARN": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"}),
    Request("iam:PassRole", STACK_ROLE, {"iam:PassedToService": "pods.eks.amazonaws.com"}),
    Request("iam:DeleteRole", STACK_ROLE),
    Request(
        "iam:CreateServiceLinkedRole",
        f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/eks.amazonaws.com/AWSServiceRoleForAmazonEKS",
        {"iam:AWSServiceName": "eks.amazonaws.com"},
    ),
    Request("iam:GetRole", DEPLOY_ROLE),
    Request("ec2:RunInstances", "*"),
    # the layout client's interface, in a private subnet that maps no public address (the key absent or false)
    Request("ec2:RunInstances", f"arn:aws:ec2:us-east-2:{ACCOUNT}:network-interface/*"),
    Request(
        "ec2:RunInstances",
        f"arn:aws:ec2:us-east-2:{ACCOUNT}:network-interface/*",
        {"ec2:AssociatePublicIpAddress": "false"},
    ),
    # the NAT gateways' addresses (components/network.py): allocated, then named by CreateNatGateway
    Request("ec2:AllocateAddress", "*"),
    Request("ec2:CreateNatGateway", "*"),
    Request("ec2:CreateSubnet", "*"),
    # the file system, and its association's auto-import and auto-export policies (the association itself
    # is an administrator's: AdministratorsOnly)
    Request("fsx:CreateFileSystem", "*"),
    Request("fsx:UpdateDataRepositoryAssociation", f"arn:aws:fsx:us-east-2:{ACCOUNT}:association/fs-0123/dra-0123"),
    Request(
        "s3:PutObject", f"arn:aws:s3:::{config_of('prod').delivery.state_bucket}/.pulumi/stacks/higgsfield/prod.json"
    ),
    Request("kms:CreateKey", "*", TAGGED),
    Request("kms:CreateGrant", "*", {"kms:GrantIsForAWSResource": "true"}),  # EBS and FSx, for their volumes
    Request(
        "eks:CreateAccessEntry",
        "arn:aws:eks:us-east-2:444455556666:cluster/higgsfield-prod",
        {"eks:principalArn": f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-deploy"},
    ),
    Request("kms:CreateKey", "*", {"kms:BypassPolicyLockoutSafetyCheck": "false", **TAGGED}),  # its policy (logs.py)
    Request("kms:TagResource", "*", {"aws:TagKeys": ["higgsfield:stack"]}),  # CreateKey's tags, on no key yet
    Request("kms:TagResource", OWN_KEY, {"aws:TagKeys": ["team"], **OWN_TAG}),  # a configured tag changed
    Request("kms:UntagResource", OWN_KEY, {"aws:TagKeys": ["team"], **OWN_TAG}),  # a configured tag removed
    Request("logs:DeleteLogGroup", f"arn:aws:logs:us-east-2:{ACCOUNT}:log-group:/aws/codebuild/x"),
    Request("logs:CreateLogGroup", "*"),
    # the program's S3 gateway and AWS interface endpoints (components/network.py), and its single-Region keys
    Request(
        "ec2:CreateVpcEndpoint", f"arn:aws:ec2:us-east-2:{ACCOUNT}:vpc-endpoint/*", {"ec2:VpceServiceOwner": "amazon"}
    ),
    Request("ec2:CreateVpcEndpoint", f"arn:aws:ec2:us-east-2:{ACCOUNT}:subnet/subnet-0a"),
    Request("kms:CreateKey", "*", {"kms:MultiRegion": "false", **TAGGED}),
    Request("kms:CreateKey", "*", {"kms:KeyOrigin": "AWS_KMS", **TAGGED}),
    # the admins' access entries (components/cluster.py), and a private endpoint's logging or version changes
    *(Request("eks:CreateAccessEntry", CLUSTER, {"eks:principalArn": admin}) for admin in config_of("prod").admins),
    Request("eks:UpdateClusterConfig", CLUSTER, {"eks:endpointPublicAccess": "false"}),
    # the retention and key of the log groups that are not the audit trail (containers, runners)
    Request("logs:PutRetentionPolicy", f"arn:aws:logs:us-east-2:{ACCOUNT}:log-group:/aws/containerinsights/x"),
]


@pytest.mark.parametrize("request_", DEPLOYS, ids=lambda r: f"{r.action} {r.resource.rsplit(':', 1)[-1]}")
def test_the_deploy_role_can_still_do_what_pulumi_up_does(request_):
    decision = evaluate(request_, [_deploy()])
    assert decision.allowed, decision.reason


def test_the_deploy_role_cannot_reach_buckets_it_does_not_name():
    decision = evaluate(Request("s3:GetObject", "arn:aws:s3:::someone-elses-bucket/secret"), [_deploy()])
    assert not decision.allowed


def test_every_role_of_every_stack_but_the_deploy_role_carries_the_boundary():
    for stack in STACKS:
        plan = plan_of(stack)
        expected = boundary_arn(plan.config.delivery.account_id, stack)
        roles = [
            r
            for r in plan.resources
            if r.type == "aws:iam/role:Role" and r.inputs.get("name") != f"higgsfield-{stack}-deploy"
        ]
        assert roles and all(r.inputs.get("permissionsBoundary") == expected for r in roles), [
            r.name for r in roles if r.inputs.get("permissionsBoundary") != expected
        ]
        # ...and a name the deploy role may manage (the boundary confines it to higgsfield-STACK-*).
        assert all(
            str(r.inputs.get("name") or r.inputs.get("namePrefix")).startswith(f"higgsfield-{stack}-") for r in roles
        )


def test_the_deploy_role_has_no_boundary_its_ceiling_is_its_own_policy():
    """The stack boundary allows no IAM write, and a deploy makes roles: a boundary on the deploy
    role would stop every deploy (the refusals are its own policy's: test_the_deploy_role_cannot)."""
    for stack in STACKS:
        (deploy,) = [r for r in plan_of(stack).of_type("aws:iam/role:Role") if r.name == "delivery-deploy"]
        assert deploy.inputs["name"] == f"higgsfield-{stack}-deploy"
        assert deploy.inputs.get("permissionsBoundary") is None


def test_no_role_comes_from_inside_pulumi_eks():
    """pulumi-eks makes a cluster role itself unless given one (its roles are out of reach of
    our transformation): the cluster gets ours."""
    cluster = next(r for r in plan_of("prod").resources if r.type == "eks:index:Cluster")
    service = [r for r in plan_of("prod").resources if r.name == "cluster-service"]
    assert cluster.inputs.get("serviceRole") is not None
    assert {r.type for r in service} == {"aws:iam/role:Role", "aws:iam/rolePolicyAttachment:RolePolicyAttachment"}
    assert all(r.urn in cluster.dependencies for r in service)  # the policy is attached before EKS uses the role


def test_every_managed_policy_the_program_attaches_is_one_the_boundary_lets_it_attach():
    """But the deploy role's own denials, which an administrator attaches (test_deploy_denials.py)."""
    for stack in STACKS:
        plan = plan_of(stack)
        for r in plan.resources:
            if r.type == "aws:iam/rolePolicyAttachment:RolePolicyAttachment":
                arn = r.inputs["policyArn"]
                if arn == deploy_denials_arn(plan.config.delivery.account_id, stack):
                    continue
                assert arn.removeprefix("arn:aws:iam::aws:policy/") in MANAGED_POLICIES, arn
                request = Request(
                    "iam:AttachRolePolicy",
                    f"arn:aws:iam::{plan.config.delivery.account_id}:role/higgsfield-{stack}-x",
                    {"iam:PolicyARN": arn},
                )
                assert evaluate(request, [_deploy(plan)]).allowed


def test_every_action_our_inline_policies_grant_is_under_the_boundary():
    """The ceiling must not silently cut what a role of ours needs (the deploy role's is its own policy)."""
    for stack in STACKS:
        plan = plan_of(stack)
        boundary = _boundary(plan)
        for r in plan.resources:
            if r.type != "aws:iam/rolePolicy:RolePolicy" or not str(r.inputs.get("policy", "")).startswith("{"):
                continue
            if r.name == "delivery-deploy":
                continue
            for statement in json.loads(r.inputs["policy"])["Statement"]:
                if statement.get("Effect") != "Allow":
                    continue
                for action in statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]:
                    resources = (
                        statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
                    )
                    for resource in resources:
                        context = {
                            "iam:PermissionsBoundary": boundary_arn(plan.config.delivery.account_id, stack),
                            "iam:AWSServiceName": "eks.amazonaws.com",
                            "iam:PolicyARN": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
                        }
                        decision = evaluate(
                            Request(action.replace("*", "Anything"), resource.replace("*", "x"), context),
                            [EVERYTHING],
                            boundary,
                        )
                        assert decision.allowed, f"{stack} {r.name}: {action} on {resource}: {decision.reason}"


# --- the pack's rules for it ---------------------------------------------------------------------------


def test_roles_under_the_boundary_policy_flags_a_role_without_it():
    boundary = R("aws:iam/policy:Policy", {"name": "higgsfield-prod-boundary"})
    good = R("aws:iam/role:Role", {"permissionsBoundary": BOUNDARY})
    assert stack_violations("roles-under-the-boundary", [boundary, good]) == []
    assert stack_violations("roles-under-the-boundary", [boundary, R("aws:iam/role:Role", {})])
    assert stack_violations(
        "roles-under-the-boundary", [boundary, R("aws:iam/role:Role", {"permissionsBoundary": ADMIN})]
    )
    assert (
        stack_violations("roles-under-the-boundary", [R("aws:iam/role:Role", {})]) == []
    )  # no boundary in a stack CI does not deploy


def test_roles_under_the_boundary_policy_exempts_the_deploy_role_by_its_exact_name_only():
    """The deploy role's ceiling is its own policy; a role that merely says it is a CI identity, or is
    named like another stack's deploy role, still needs the boundary."""
    boundary = R("aws:iam/policy:Policy", {"name": "higgsfield-prod-boundary"})
    deploy = R("aws:iam/role:Role", {"name": "higgsfield-prod-deploy", "tags": {"higgsfield:ci-identity": "deploy"}})
    assert stack_violations("roles-under-the-boundary", [boundary, deploy]) == []
    for impostor in (
        {"name": "higgsfield-prod-escape", "tags": {"higgsfield:ci-identity": "deploy"}},
        {"name": "higgsfield-prod-deploy-runner", "tags": {"higgsfield:ci-identity": "deploy-runner"}},
        {"name": "higgsfield-staging-deploy"},
        {"namePrefix": "higgsfield-prod-deploy"},
    ):
        assert stack_violations("roles-under-the-boundary", [boundary, R("aws:iam/role:Role", impostor)]), impostor


def test_fsx_export_versioned_policy_flags_an_export_into_an_unversioned_bucket():
    link = R(
        "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
        {"dataRepositoryPath": "s3://data/set", "s3": {"autoExportPolicy": {"events": ["NEW", "CHANGED"]}}},
    )
    versioning = R(
        "aws:s3/bucketVersioning:BucketVersioning", {"bucket": "data", "versioningConfiguration": {"status": "Enabled"}}
    )
    assert stack_violations("fsx-export-versioned", [link, versioning]) == []
    assert stack_violations("fsx-export-versioned", [link])
    assert stack_violations(
        "fsx-export-versioned",
        [
            link,
            R(
                "aws:s3/bucketVersioning:BucketVersioning",
                {"bucket": "data", "versioningConfiguration": {"status": "Suspended"}},
            ),
        ],
    )
    assert (
        stack_violations(
            "fsx-export-versioned",
            [R("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", {"dataRepositoryPath": "s3://data"})],
        )
        == []
    )  # no export
    assert stack_violations(
        "fsx-export-versioned", [R("aws:fsx/lustreFileSystem:LustreFileSystem", {"exportPath": "s3://scratch/out"})]
    )


# --- one account, one environment, per stack ---------------------------------------------------------


def _entries(**changes):
    from infra.offline.stacks import stack_matrix

    entries = stack_matrix(ROOT)["include"]
    return [{**e, **changes.get(e["stack"], {})} for e in entries]


def test_shipped_stacks_each_have_their_own_account_and_environment():
    assert len({plan_of(s).config.delivery.account_id for s in STACKS}) == len(STACKS)
    for stack in STACKS:
        assert account_findings(plan_of(stack).config, _entries()) == []


def test_check_refuses_a_prod_sharing_its_account_with_staging():
    found = account_findings(config_of("prod"), _entries(staging={"account": ACCOUNT}))
    assert [(level, where) for level, where, _ in found] == [("mandatory", "higgsfield:delivery.accountId")], found
    assert "staging" in found[0][2]


def test_check_advises_against_dev_and_staging_sharing_an_account():
    staging = plan_of("staging").config
    found = account_findings(staging, _entries(dev={"account": staging.delivery.account_id}))
    assert [(level, where) for level, where, _ in found] == [("advisory", "higgsfield:delivery.accountId")]


def test_check_refuses_a_prod_deploying_in_devs_github_environment():
    found = account_findings(config_of("prod"), _entries(dev={"deployEnvironment": "prod"}))
    assert [(level, where) for level, where, _ in found] == [("mandatory", "higgsfield:delivery.deployEnvironment")]


def test_check_command_fails_a_prod_stack_sharing_its_account(project_copy, capsys):
    import yaml

    from infra.cli.main import main

    root = project_copy("prod", lambda config: None)
    staging = yaml.safe_load((ROOT / "stacks" / "Pulumi.staging.yaml").read_text())
    staging["config"]["higgsfield:delivery"]["accountId"] = ACCOUNT
    (root / "stacks" / "Pulumi.staging.yaml").write_text(yaml.safe_dump(staging))
    assert main(["check", "bad"]) == 1
    out = capsys.readouterr().out
    assert "higgsfield:delivery.accountId" in out and "staging" in out


def test_every_key_of_every_stack_is_created_with_a_key_policy_of_ours():
    """Issue 34: two keys (the Secrets and FSx keys) had none. The policy is CreateKey's, and no
    aws.kms.KeyPolicy (a PutKeyPolicy, which both ceilings refuse) is left in any plan."""
    for stack in STACKS:
        plan = plan_of(stack)
        keys = plan.of_type("aws:kms/key:Key")
        assert keys and all(k.inputs.get("policy") for k in keys), stack
        assert plan.of_type("aws:kms/keyPolicy:KeyPolicy") == [], stack


def _pod_roles(plan) -> dict[str, dict]:
    """Each role Pod Identity may assume: urn -> its trust statement."""
    roles = {}
    for role in plan.of_type("aws:iam/role:Role"):
        (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
        if statement["Principal"].get("Service") == "pods.eks.amazonaws.com":
            roles[role.urn] = statement
    return roles


@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_identity_role_trusts_one_service_account_of_its_own_cluster(stack):
    """Issue 34: Pod Identity trust policies named no source: any association of the account (another
    cluster, a team namespace) could be given the role. Each now names the session tags EKS puts on it."""
    plan = plan_of(stack)
    roles = _pod_roles(plan)
    assert roles
    for urn, statement in roles.items():
        tags = statement["Condition"]["StringEquals"]
        assert tags["aws:RequestTag/eks-cluster-name"] == f"higgsfield-{stack}", urn
        assert tags["aws:RequestTag/kubernetes-namespace"] and tags["aws:RequestTag/kubernetes-service-account"]
    for association in plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation"):
        (role,) = [u for u in association.dependencies if u in roles]
        tags = roles[role]["Condition"]["StringEquals"]
        assert (tags["aws:RequestTag/kubernetes-namespace"], tags["aws:RequestTag/kubernetes-service-account"]) == (
            association.inputs["namespace"],
            association.inputs["serviceAccount"],
        )


def test_a_team_namespaces_association_cannot_assume_a_platform_role():
    plan = plan_of("prod")
    statement = next(iter(_pod_roles(plan).values()))
    trust = Policy(
        "trust", {"Statement": [{k: v for k, v in statement.items() if k != "Principal"} | {"Resource": "*"}]}
    )
    own = {f"aws:RequestTag/{k.split('/')[-1]}": v for k, v in statement["Condition"]["StringEquals"].items()}
    assert evaluate(Request("sts:AssumeRole", "*", own), [trust]).allowed
    stolen = {**own, "aws:RequestTag/kubernetes-namespace": "vision"}
    assert not evaluate(Request("sts:AssumeRole", "*", stolen), [trust]).allowed


def test_check_names_an_admin_of_another_account_the_boundary_would_refuse():
    from infra.offline.delivery_checks import delivery_findings

    cfg = config_of("prod")
    assert not [w for w, _ in delivery_findings(cfg, {}) if w.startswith("higgsfield:admins")]
    other = cfg.model_copy(update={"admins": (*cfg.admins, "arn:aws:iam::999999999999:role/CentralAdmin")})
    (finding,) = [(w, m) for w, m in delivery_findings(other, {}) if w.startswith("higgsfield:admins")]
    assert finding[0] == f"higgsfield:admins[{len(cfg.admins)}]" and "ClusterAccessStaysInTheAccount" in finding[1]


def test_a_stack_with_a_public_endpoint_may_keep_it():
    """EndpointStaysPrivate is only a private stack's: a public one's UpdateClusterConfig carries
    endpointPublicAccess true on every change (its CIDRs have no condition key: diff watches them)."""
    from components.delivery import deploy_policy

    cfg = config_of("prod")
    public = Policy.of(
        "public", deploy_policy(cfg.delivery, "prod", [], cfg.admins, public_endpoint=True, region=cfg.region)
    )
    request = Request("eks:UpdateClusterConfig", CLUSTER, {"eks:endpointPublicAccess": "true"})
    assert evaluate(request, [public]).allowed


def test_a_role_under_the_boundary_makes_no_access_entry_even_for_a_configured_admin():
    """Only the deploy role enters principals in the cluster's access; the boundary lists no admin (a new
    admin changes the deploy role's policy alone) and refuses every access entry to the roles under it."""
    for admin in config_of("prod").admins:
        request = Request("eks:CreateAccessEntry", CLUSTER, {"eks:principalArn": admin})
        assert evaluate(request, [_deploy()]).allowed
        assert evaluate(request, [EVERYTHING], _boundary()).reason == NOT_ALLOWED_BY_THE_BOUNDARY


@pytest.mark.parametrize(
    "action",
    [
        "eks:CreateNodegroup",
        "eks:CreateAddon",
        "eks:CreatePodIdentityAssociation",
        "eks:UpdateClusterConfig",
        "eks:AssociateIdentityProviderConfig",
        "eks:DeleteCluster",
    ],
)
def test_a_role_under_the_boundary_writes_nothing_of_eks_even_in_the_stacks_cluster(action):
    """Only the deploy role writes EKS: a node group a role under the boundary added, of its own launch template,
    would join the cluster and run its pods; the boundary's allow names EKS reads alone."""
    assert evaluate(Request(action, CLUSTER), [EVERYTHING], _boundary()).reason == NOT_ALLOWED_BY_THE_BOUNDARY


@pytest.mark.parametrize(
    ("action", "resource"),
    [
        ("eks:DescribeCluster", CLUSTER),  # Karpenter's controller, a node (AmazonEKSWorkerNodePolicy)
        ("eks:DescribeNodegroup", f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/higgsfield-prod/gpu/0a1b"),  # autoscaler
    ],
)
def test_a_role_under_the_boundary_still_reads_its_cluster(action, resource):
    assert evaluate(Request(action, resource), [EVERYTHING], _boundary()).allowed

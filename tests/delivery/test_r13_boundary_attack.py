"""Round 13: the EKS paths beside the deploy identity's reshaped ceilings (components/delivery.py cluster_denials,
only_the_stacks_cluster, BOUNDED_EKS_ACTIONS), written as the requests a holder of the deploy role would send and
decided by the repo's evaluator (policies/iam_evaluation.py) on the policies the prod plan renders.

The EKS API's verbs and what each does are read from boto/botocore:botocore/data/eks/2017-11-01/service-2.json@1.44.18
(the operations' documentation is quoted where a test relies on it)."""

from __future__ import annotations

import datetime
import json

import pytest

from policies.iam_evaluation import Request, evaluate
from tests.cli.test_r10_verify_attack import _managed_policies_answer
from tests.cli.test_verify_checks import (  # noqa: F401 (fixtures)
    FRONT_ROLE,
    OTHER_ACCOUNT,
    _access_answered,
    _entry,
    aws,
    aws_ctx,
    one,
    plan,
    subnets,
)
from tests.delivery.test_ci_identity import ACCOUNT, CLUSTER, REGION, _deploy

# Another cluster of the account, which no stack of ours made: its access, its identity provider and its certificate
# authority are its administrators'.
OTHER = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/analytics"
OTHER_ADMIN_ENTRY = f"arn:aws:eks:{REGION}:{ACCOUNT}:access-entry/analytics/role/{ACCOUNT}/PlatformAdmin/0a1b"

# Writes to another cluster whose verb is none of Create, Update, Delete, Associate, each of which takes away what
# the cluster's administrators rely on.
ANOTHER_CLUSTERS_WRITES = [
    # DisassociateAccessPolicy: "Disassociates an access policy from an access entry": its admins lose the cluster
    (
        "strip another cluster's admin of their access policy",
        Request("eks:DisassociateAccessPolicy", OTHER_ADMIN_ENTRY),
    ),
    # DisassociateIdentityProviderConfig: its OIDC users are locked out
    (
        "take another cluster's identity provider away",
        Request(
            "eks:DisassociateIdentityProviderConfig",
            f"arn:aws:eks:{REGION}:{ACCOUNT}:identityproviderconfig/analytics/oidc/corp/0a1b",
        ),
    ),
    # ActivateCertificateAuthority: "Before you activate the successor CA, make sure the worker nodes you manage and
    # your external clients have been updated to trust it, so they maintain connectivity to the API server"
    (
        "make another cluster's successor CA its signer before its nodes trust it",
        Request("eks:ActivateCertificateAuthority", OTHER),
    ),
    # DeregisterCluster: a connected cluster leaves EKS
    ("deregister another (connected) cluster", Request("eks:DeregisterCluster", OTHER)),
    # CancelUpdate: "cancel an in-progress Kubernetes version update" of another cluster (Service Authorization
    # Reference, list_eks; the resource types of every request here are that page's)
    ("cancel another cluster's update", Request("eks:CancelUpdate", OTHER)),
]


@pytest.mark.parametrize(
    "request_", [r for _, r in ANOTHER_CLUSTERS_WRITES], ids=[a for a, _ in ANOTHER_CLUSTERS_WRITES]
)
def test_the_deploy_role_writes_nothing_of_another_cluster_whatever_the_verb(request_):
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "OnlyTheStacksCluster"), decision.reason


# Ways into the stack's own cluster's access that are not an access entry request, so ClusterAccessStaysInTheAccount
# (eks:principalArn, on CreateAccessEntry, UpdateAccessEntry, AssociateAccessPolicy) never sees the principal. The
# role named is one the deploy role may create (higgsfield-prod-*, bounded) and pass, with a trust of its choosing
# (IAM cannot read a trust policy's content): one that also trusts another account lets that account in.
ENTERED_BESIDE_AN_ACCESS_ENTRY = [
    # "Capabilities use this role to perform actions on AWS services and to access Kubernetes resources in your
    # cluster through automatically created access entries" (docs.aws.amazon.com/eks/latest/userguide/
    # capability-role.html); CreateCapability's roleArn. The program makes no capability.
    ("an EKS capability whose role EKS enters in the cluster's access", Request("eks:CreateCapability", CLUSTER)),
    # CreateFargateProfile: the pod execution role "is added to the cluster's Kubernetes Role Based Access Control
    # (RBAC) for authorization so that the kubelet that is running on the Fargate infrastructure can register with
    # your Amazon EKS cluster so that it can appear in your cluster as a node": whoever assumes it is a node
    # (system:nodes) under a name of its session's. The program runs nothing on Fargate.
    ("a Fargate profile whose pod execution role EKS enters as a node", Request("eks:CreateFargateProfile", CLUSTER)),
]


@pytest.mark.parametrize(
    "request_", [r for _, r in ENTERED_BESIDE_AN_ACCESS_ENTRY], ids=[a for a, _ in ENTERED_BESIDE_AN_ACCESS_ENTRY]
)
def test_the_deploy_role_enters_no_principal_in_its_clusters_access_beside_an_access_entry(request_):
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "AdministratorsOnly"), decision.reason


# The control plane's audit trail starts at the cluster: AuditLogsStay keeps its log group, but the deploy role, the
# cluster's admin, could switch the audit and authenticator logs off (UpdateClusterConfig's logging), act unrecorded,
# and switch them on again. eks:loggingType/${type} "Filters access by the cluster logging enabled and type parameter
# in the create / update cluster request" (Service Authorization Reference, list_eks).
@pytest.mark.parametrize("log_type", ["audit", "authenticator"])
def test_the_deploy_role_cannot_switch_its_clusters_audit_logs_off(log_type):
    request_ = Request("eks:UpdateClusterConfig", CLUSTER, {f"eks:loggingType/{log_type}": "false"})
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", f"{log_type[0].upper()}{log_type[1:]}LogStaysOn"), decision.reason


# A node group's role is entered by EKS too (an EC2_LINUX access entry, user system:node:{{EC2PrivateDNSName}}), and
# the program makes node groups: their node role is passed by the same request whatever its trust.
FRONT_NODE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-front"  # created bounded, trusting another account


@pytest.mark.xfail(
    strict=True,
    reason="IAM cannot tell the program's node role (higgsfield-prod-<random>, aws.iam.Role name_prefix) from one the "
    "deploy role created trusting another account: no condition key carries a trust policy's content or "
    "CreateNodegroup's nodeRole, so a node group of the stack's cluster may be given such a role and EKS enters it "
    "as a node; the pack's role-trust-in-the-account covers pulumi's roles only. `higgsfield verify` finds it after "
    "the fact: aws.node-groups the group the plan does not make, aws.cluster-access its role's entry and a node role "
    "trusting anything but EC2 (test_verify_finds_a_node_group_given_a_role_the_program_did_not_make)",
)
def test_the_deploy_role_cannot_give_a_node_group_a_role_the_program_did_not_make():
    decision = evaluate(Request("iam:PassRole", FRONT_NODE_ROLE), [_deploy()])
    assert not decision.allowed, decision.reason


def test_verify_finds_a_node_group_given_a_role_the_program_did_not_make(aws_ctx, aws, plan):  # noqa: F811
    """What IAM cannot refuse above, done in the stack's account (moto, the entries EKS makes stubbed): a role trusting
    another account, a node group of the stack's cluster on it, and the EC2_LINUX entry EKS makes for it. Each of the
    three is named by a check of `higgsfield verify`."""
    trust = {"Effect": "Allow", "Principal": {"AWS": OTHER_ACCOUNT}, "Action": "sts:AssumeRole"}
    aws.client("iam").create_role(
        RoleName=FRONT_ROLE.rpartition("/")[2], AssumeRolePolicyDocument=json.dumps({"Statement": [trust]})
    )
    aws.client("eks").create_nodegroup(
        clusterName=CLUSTER.rpartition("/")[2], nodegroupName="front", nodeRole=FRONT_ROLE, subnets=["s"]
    )
    _access_answered(aws_ctx, aws, plan, _entry(FRONT_ROLE, datetime.datetime.now(datetime.UTC), "EC2_LINUX"))
    groups, access = one("aws.node-groups", aws_ctx), one("aws.cluster-access", aws_ctx)
    assert groups.status == "FAIL" and "front: a node group the plan does not make" in groups.evidence
    assert access.status == "FAIL" and f"{FRONT_ROLE}: an entry (EC2_LINUX) the plan does not make" in access.evidence
    assert f"the node role {FRONT_ROLE} trusts AWS {OTHER_ACCOUNT}" in access.evidence


# `higgsfield verify` (aws.managed-policies) holds EKS actions of an attached AWS managed policy to the boundary's
# reads; IAM and SSM are narrowed by the boundary too (IAM_ACTIONS, ssm:GetParameter alone), not allowed whole.
@pytest.mark.parametrize(
    "action",
    [
        "ssm:GetParameters",  # CloudWatchAgentServerPolicy reads one parameter at a time today
        "iam:GetRole",
    ],
)
def test_verify_fails_a_managed_policy_aws_extended_to_an_iam_or_ssm_action_the_boundary_refuses(aws_ctx, action):  # noqa: F811
    _managed_policies_answer(aws_ctx, {"Effect": "Allow", "Action": action, "Resource": "*"})
    outcome = one("aws.managed-policies", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith(
        f"AmazonEKS_CNI_Policy (v8) acts in {action.lower()}"
    )


def test_the_deploy_role_creates_no_cluster_the_first_deploy_and_a_replacement_are_an_administrators():
    """CreateCluster has no resource type (Service Authorization Reference, list_eks): IAM decides it on `*`, which
    OnlyTheStacksCluster's NotResource never names. So the deploy role makes no cluster of any name in any region;
    the stack's own is made by the administrator's first deploy (higgsfield bootstrap), and its replacement is one
    `higgsfield diff` refuses."""
    decision = evaluate(Request("eks:CreateCluster", "*"), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "OnlyTheStacksCluster"), decision.reason


def test_the_deploy_role_writes_nothing_of_a_cluster_of_the_stacks_name_in_another_region():
    """A Pod Identity role trusts its cluster by name (the `eks-cluster-name` session tag): an association made on a
    `higgsfield-prod` of another region would hand that cluster's pods the stack's roles."""
    association = Request("eks:CreatePodIdentityAssociation", CLUSTER.replace(REGION, "eu-west-1"))
    assert evaluate(association, [_deploy()]).denied_by == ("delivery-deploy", "OnlyTheStacksCluster")


# TagResource and UntagResource act on any EKS resource type (Service Authorization Reference, list_eks: access-entry,
# addon, cluster, nodegroup, podidentityassociation... all optional): another cluster's tags are its administrators',
# a tag-based policy of theirs (aws:ResourceTag) deciding who may act on it. The stack's own resources keep theirs
# written by `pulumi up` (pulumi-aws tags an existing resource with TagResource on the resource's own ARN).
OTHER_NODEGROUP = f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/analytics/workers/0a1b2c3d"
OWN_NODEGROUP = f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/{CLUSTER.rpartition('/')[2]}/system-nodes-1a2b3c4/0a1b2c3d"


@pytest.mark.parametrize("action", ["eks:TagResource", "eks:UntagResource"])
def test_the_deploy_role_tags_no_resource_of_another_cluster(action):
    decision = evaluate(Request(action, OTHER_NODEGROUP), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "OnlyTheStacksCluster"), decision.reason


@pytest.mark.parametrize("action", ["eks:TagResource", "eks:UntagResource"])
def test_the_deploy_role_still_tags_its_own_clusters_node_group(action):
    decision = evaluate(Request(action, OWN_NODEGROUP), [_deploy()])
    assert decision.allowed, decision.reason

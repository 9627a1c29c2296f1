"""Round 15: the holder of a stack's CI deploy role after a change that gives it, or another account, lasting rights,
which `higgsfield verify` run afterwards must report. Each attack is first decided allowed by the repo's evaluator
(policies/iam_evaluation.py) on the deploy role's rendered policies (tests/delivery/test_ci_identity.py `_deploy`),
then replayed in moto's healthy prod account (tests/cli/test_verify_checks.py `aws`) against the real check."""

from __future__ import annotations

import json

import pytest

from policies.iam_evaluation import Request, evaluate
from tests.cli.test_verify_checks import (  # noqa: F401 (fixtures)
    NODE_ROLE,
    _access_answered,
    _new_template_version,
    aws,
    aws_ctx,
    cluster,
    ctx,
    one,
    plan,
)
from tests.conftest import plan_of
from tests.delivery.test_ci_identity import ACCOUNT, EVERYTHING, REGION, _boundary, _deploy

STACK_TEMPLATE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:launch-template/lt-0a1b2c3d4e5f67890"
STACK_GROUP = f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/higgsfield-prod/gpu-h100-1a2b3c4/0a1b"


# --- a planned group's launch template: the metadata service's other options ------------------------


def _with(aws, group: str, **changed) -> dict:  # noqa: F811
    """The data of the version `group` launches from, with `changed` merged into its dictionaries: what a new
    version made from it (SourceVersion, which moto does not copy) holds."""
    eks, ec2 = aws.client("eks"), aws.client("ec2")
    used = eks.describe_nodegroup(clusterName="higgsfield-prod", nodegroupName=f"{group}-1a2b3c4")["nodegroup"]
    template = used["launchTemplate"]
    (version,) = ec2.describe_launch_template_versions(LaunchTemplateId=template["id"], Versions=[template["version"]])[
        "LaunchTemplateVersions"
    ]
    data = version["LaunchTemplateData"]
    return {**data, **{k: {**data.get(k, {}), **v} for k, v in changed.items()}}


def test_the_deploy_role_may_give_its_own_launch_template_a_new_version_and_move_a_group_to_it():
    """The stack's own template (tagged higgsfield:stack = prod) takes a new version (OnlyTheStacksLaunchTemplates
    refuses other templates only) and the group is moved to it: no condition key carries the version's content."""
    own = {"aws:ResourceTag/higgsfield:stack": "prod"}
    assert evaluate(Request("ec2:CreateLaunchTemplateVersion", STACK_TEMPLATE, own), [_deploy()]).allowed
    assert evaluate(Request("eks:UpdateNodegroupVersion", STACK_GROUP), [_deploy()]).allowed


@pytest.mark.parametrize(
    ("options", "said"),
    [
        # the program's hop limit 1 keeps a pod's requests (one hop more, through its own network namespace) from
        # the node's instance metadata: at 2 every team's pod on the node gets the node role's credentials (ECR reads
        # of every repository, the CNI's network-interface writes, the kubelet's identity in the cluster)
        ({"HttpPutResponseHopLimit": 2}, "HttpPutResponseHopLimit 2, planned 1"),
        # the instance's tags in its metadata, which the program keeps off
        ({"InstanceMetadataTags": "enabled"}, "InstanceMetadataTags enabled, planned disabled"),
    ],
    ids=["hop-limit", "tags"],
)
def test_a_planned_group_moved_to_a_template_version_that_lets_pods_reach_the_metadata_fails(
    aws_ctx, aws, options, said
):
    version = _new_template_version(aws, "gpu-h100", **_with(aws, "gpu-h100", MetadataOptions=options))
    outcome = one("aws.node-groups", aws_ctx)
    assert outcome.status == "FAIL", outcome.evidence
    assert f"version {version}: metadata option {said}" in outcome.evidence


# --- the node role's rights -------------------------------------------------------------------------

# The plan's node role as IAM names it (aws.iam.Role namePrefix higgsfield-prod-: components/nodes.py NodeRole)
PLANNED_NODE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-0a1b2c3d4e5f6a7"


def test_the_deploy_role_may_widen_the_node_roles_rights_up_to_the_state_the_data_and_the_images():
    """The node role is a role of the stack's (higgsfield-prod-*): the deploy role may put any inline policy on it,
    and under the stack boundary `*` on `*` writes the Pulumi state, reads the teams' linked data and pushes images.
    Every node acts with it, and so does any instance launched with the instance profile EKS made for it
    (ec2:RunInstances and iam:PassRole of the stack's roles are the deploy role's)."""
    cfg = plan_of("prod").config
    assert evaluate(Request("iam:PutRolePolicy", PLANNED_NODE_ROLE), [_deploy()]).allowed
    assert evaluate(Request("iam:PassRole", PLANNED_NODE_ROLE), [_deploy()]).allowed
    for reach in (
        Request("s3:PutObject", f"arn:aws:s3:::{cfg.delivery.state_bucket}/.pulumi/stacks/higgsfield/prod.json"),
        Request("s3:GetObject", f"arn:aws:s3:::{cfg.fsx.s3.bucket}/datasets/part-0000"),
        Request("ecr:PutImage", f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/higgsfield/training"),
    ):
        assert evaluate(reach, [EVERYTHING], _boundary()).allowed, reach


def test_a_node_role_given_an_inline_policy_of_the_deploy_roles_fails_naming_it(aws_ctx, aws, plan):
    _access_answered(aws_ctx, aws, plan)
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    aws.client("iam").put_role_policy(
        RoleName=NODE_ROLE.rpartition("/")[2], PolicyName="debug", PolicyDocument=json.dumps(everything)
    )
    outcome = one("aws.cluster-access", aws_ctx)
    assert outcome.status == "FAIL", outcome.evidence
    assert f"the node role {NODE_ROLE}: inline policy debug not as planned" in outcome.evidence
    assert "aws iam delete-role-policy" in outcome.fix


# --- the admission policies' bindings ---------------------------------------------------------------

BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


def test_the_deploy_role_is_cluster_admin_so_it_may_rewrite_any_binding():
    """Inside Kubernetes no IAM policy looks: the deploy role's access entry has AmazonEKSClusterAdminPolicy across
    the cluster (components/delivery.py Delivery), every verb on every kind, admission policy bindings included."""
    (association,) = [
        r
        for r in plan_of("prod").of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
        if r.name == "delivery-deploy"
    ]
    assert association.inputs["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
    assert association.inputs["accessScope"] == {"type": "cluster"}


def test_a_guard_policy_whose_binding_is_gone_fails_naming_it(ctx, cluster):
    """Without its binding a policy judges nothing: the NetworkPolicy guard's gone, a team writes the NetworkPolicy
    that opens its pods' egress beside the platform's default deny, to anywhere, Lustre's port included."""
    cluster.delete_now(f"{BINDINGS}/higgsfield-tenant-network-policies")
    outcome = one("kube.admission-policies", ctx)
    assert outcome.status == "FAIL", outcome.evidence
    assert "binding higgsfield-tenant-network-policies: missing" in outcome.evidence


@pytest.mark.parametrize(
    ("name", "changed", "said"),
    [
        # a team's own policy no longer judges its pods: one running as another team's UID (the policy holds each
        # team's pods to its own) reads that team's directory on the shared file system; kube.tenant-attacks tries
        # jobs, a DaemonSet and a PodGroup, no pod
        (
            "higgsfield-team-llm",
            {
                "excludeResourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods"]}
                ]
            },
            "matchResources.excludeResourceRules",
        ),
        # the claim-name guard only audits: a team takes the name of the next dataset's claim
        ("higgsfield-tenant-claim-names", None, "validationActions"),
    ],
    ids=["team-policy-skips-pods", "guard-audits-only"],
)
def test_a_binding_that_no_longer_denies_what_its_policy_refuses_fails_naming_the_field(
    ctx, cluster, name, changed, said
):
    binding = cluster.get(f"{BINDINGS}/{name}")
    if changed:
        binding["spec"]["matchResources"] |= changed
    else:
        binding["spec"]["validationActions"] = ["Audit"]
    cluster.put(binding)
    outcome = one("kube.admission-policies", ctx)
    assert outcome.status == "FAIL", outcome.evidence
    assert f"binding {name}: {said} not as planned" in outcome.evidence


# --- instances of the deploy role's own in the stack's network ---------------------------------

EC2 = f"arn:aws:ec2:{REGION}:{ACCOUNT}:"


def test_the_deploy_role_cannot_launch_an_instance_of_its_own_with_the_node_role():
    """RunInstances with the instance profile EKS made for a node group asks iam:PassRole of the node role, passed to
    EC2: an instance of the deploy role's own user data would act with the node role and join the cluster as a node
    (the node role's EC2_LINUX entry admits any instance holding it), and no check of `higgsfield verify` relates the
    account's instances to the planned node groups."""
    decision = evaluate(
        Request("iam:PassRole", PLANNED_NODE_ROLE, {"iam:PassedToService": "ec2.amazonaws.com"}), [_deploy()]
    )
    assert decision.denied_by == ("delivery-deploy", "NoRoleToAnInstance"), decision.reason


def test_the_deploy_role_still_passes_the_node_role_to_eks_for_its_node_groups():
    decision = evaluate(
        Request("iam:PassRole", PLANNED_NODE_ROLE, {"iam:PassedToService": "eks.amazonaws.com"}), [_deploy()]
    )
    assert decision.allowed, decision.reason


LAYOUT_CLIENT = EC2 + "instance/i-0layout0client000"


@pytest.mark.parametrize(
    "action",
    [
        "ec2:CreateReplaceRootVolumeTask",  # from a snapshot of its own: the client boots what it holds
        "ec2:DetachVolume",  # the client stopped, its root disk swapped for one of its own
        "ec2:AttachVolume",
    ],
)
def test_the_deploy_role_cannot_swap_the_layout_clients_disk(action):
    """The FSx layout client is the file system's one root-squash exemption (NoSquashNids: its address,
    docs/security-platform.md): a root volume of the deploy role's making would boot as root on every team's
    directory, whatever its user data (which AdministratorsOnly keeps: ModifyInstanceAttribute)."""
    decision = evaluate(Request(action, LAYOUT_CLIENT), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "VolumesStayWithTheirInstance"), decision.reason


@pytest.mark.xfail(
    strict=True,
    reason="`pulumi up` terminates the layout client and launches a new one at its reserved address on a new layout "
    "(delete_before_replace; an explicit reservation hands the address to whoever asks for it), so the deploy role "
    "may too, with user data, an image or a key of its own: IAM has no condition key on an instance's address or "
    "user data. `higgsfield verify` finds it after the fact: aws.layout-client compares whatever holds the address "
    "with the plan (tests/cli/test_verify_layout_client.py "
    "test_an_instance_of_the_deploy_roles_own_at_the_address_fails_naming_its_user_data)",
)
def test_the_deploy_role_cannot_launch_an_instance_of_its_own_at_the_layout_clients_address():
    steps = [Request("ec2:TerminateInstances", LAYOUT_CLIENT), Request("ec2:RunInstances", EC2 + "network-interface/*")]
    assert not all(evaluate(r, [_deploy()]).allowed for r in steps)

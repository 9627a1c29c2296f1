"""IAM under the boundary is a list of the actions the program and its roles call (components/delivery.py
IAM_ACTIONS), not `iam:*` less a list of denials: round 8's attacker found IAM actions the denials forgot
and ones AWS added since (roles made from templates, delegation requests, workload identity providers,
outbound federation, an OIDC provider's other settings). Every operation of IAM's API, read from the
service model of the botocore this project pins, that is not on the list is refused by the boundary: to a
role the deploy role made with `*` on `*`, even on one of the stack's own roles with every condition key
in its favour. The deploy role, which has no boundary, is refused every IAM action its own policy does not name."""

from __future__ import annotations

import fnmatch

import botocore.session
import pytest

from components.delivery import (
    DEPLOY_IAM_READS,
    IAM_ACTIONS,
    INSTANCE_PROFILE_WRITES,
    ROLE_WRITES,
    ROLE_WRITES_REFUSED,
)
from components.karpenter import karpenter_policy
from policies.iam_evaluation import Policy, Request, evaluate
from tests.delivery.test_ci_identity import (
    ACCOUNT,
    BOUNDARY,
    EVERYTHING,
    REGION,
    STACK_ROLE,
    _boundary,
    _deploy,
)

# IAM's operations as the pinned botocore names them (its iam/2010-05-08/service-2.json); an IAM action is
# its operation's name, and iam:PassRole is the one action of ours with no operation.
IAM_OPERATIONS = sorted(f"iam:{o}" for o in botocore.session.get_session().get_service_model("iam").operation_names)
NOT_OURS = [a for a in IAM_OPERATIONS if a not in IAM_ACTIONS]
# Each condition key the boundary reads on IAM, at a value it allows.
IN_OUR_FAVOUR = {
    "iam:PermissionsBoundary": BOUNDARY,
    "iam:AWSServiceName": "eks.amazonaws.com",
    "iam:PolicyARN": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "iam:PassedToService": "eks.amazonaws.com",
}
NOT_ALLOWED = "not allowed by the permissions boundary delivery-boundary"


@pytest.mark.parametrize("action", NOT_OURS)
def test_an_iam_action_no_role_of_ours_calls_is_refused_to_a_role_with_every_permission(action):
    decision = evaluate(Request(action, STACK_ROLE, IN_OUR_FAVOUR), [EVERYTHING], _boundary())
    assert decision.reason == NOT_ALLOWED, decision.reason


# The ones round 8's attacker named, each open before (the deploy role's own policy did not grant them, but
# a role it made with `*` could call them: the boundary allowed `iam:*`).
FOUND = [
    # a role whose name, trust, policies and boundary come from a role template, not from CreateRole
    "iam:AcquireRole",
    # temporary delegation of the caller's access to a partner
    "iam:CreateDelegationRequest",
    "iam:AssociateDelegationRequest",
    "iam:AcceptDelegationRequest",
    "iam:SendDelegationToken",
    "iam:UpdateDelegationRequest",
    # an OIDC provider's other settings (IdentityProvidersAreFixed listed only the thumbprint and client IDs)
    "iam:UpdateOpenIDConnectProvider",
    # an issuer of workload identities, and JWTs of the account for outside services
    "iam:CreateWorkloadIdentityProvider",
    "iam:PutWorkloadIdentityProviderResourcePolicy",
    "iam:EnableOutboundWebIdentityFederation",
    # account-wide settings and the service-linked roles EKS and the others run as
    "iam:PutAccountProperties",
    "iam:SetSecurityTokenServicePreferences",
    "iam:DeleteServiceLinkedRole",
    "iam:UploadServerCertificate",
]


@pytest.mark.parametrize("action", FOUND)
def test_the_deploy_roles_own_policy_refuses_it_the_iam_actions_round_8_found(action):
    decision = evaluate(Request(action, STACK_ROLE, IN_OUR_FAVOUR), [_deploy()])
    assert not decision.allowed, decision.reason


# The deploy role has no boundary (its ceiling is its own policy): its IAM is the actions it names, on the stack's
# roles (DEPLOY_IAM_READS, the role writes of aws.iam.Role, RolePolicy and RolePolicyAttachment, PassRole,
# CreateServiceLinkedRole). The parameters below come from these constants, not from the deploy role's policy in
# the evaluated plan: every xdist worker collects this module, and an evaluation while collecting is paid by each.
# The test after them proves the planned policy names exactly these.
DEPLOY_IAM = {
    *DEPLOY_IAM_READS,
    *(set(ROLE_WRITES) - set(ROLE_WRITES_REFUSED)),
    "iam:PassRole",
    "iam:CreateServiceLinkedRole",
}


@pytest.mark.parametrize("action", sorted(set(IAM_OPERATIONS) - DEPLOY_IAM))
def test_an_iam_action_the_deploy_role_does_not_name_is_refused_to_it(action):
    decision = evaluate(Request(action, STACK_ROLE, IN_OUR_FAVOUR), [_deploy()])
    assert not decision.allowed, decision.reason


def test_the_deploy_role_names_no_iam_action_beyond_the_role_writes_and_reads_of_a_deploy():
    statements = _deploy().document["Statement"]
    named = {a for s in statements if s["Effect"] == "Allow" for a in s["Action"] if a.startswith("iam:")}
    assert named == DEPLOY_IAM


def test_the_iam_actions_round_8_found_are_iam_operations_of_the_pinned_botocore():
    assert set(FOUND) <= set(NOT_OURS)


def test_every_iam_action_the_boundary_allows_is_one_iam_has():
    assert set(IAM_ACTIONS) - {"iam:PassRole"} <= set(IAM_OPERATIONS)


def test_karpenters_iam_reads_and_pass_role_are_still_under_the_boundary():
    """Karpenter's controller is a stack role (no shipped stack runs it, so no plan checks its policy)."""
    node_role = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-node-0123"
    document = karpenter_policy("higgsfield-prod", REGION, ACCOUNT, node_role, "arn:aws:sqs:x")
    karpenter = Policy.of("karpenter", document)
    profile = f"arn:aws:iam::{ACCOUNT}:instance-profile/x"
    for request in (
        Request("iam:GetInstanceProfile", profile),
        Request("iam:ListInstanceProfiles", "*"),
        Request("iam:PassRole", node_role, {"iam:PassedToService": "ec2.amazonaws.com"}),
    ):
        assert evaluate(request, [karpenter], _boundary()).allowed, request


def test_the_instance_profile_pattern_matches_karpenters_writes_and_two_harmless_others():
    """INSTANCE_PROFILE_WRITES is one pattern (the boundary's characters): of IAM's operations it matches the five
    writes Karpenter's controller makes, the read IAM_ACTIONS already allows, and UntagInstanceProfile; nothing that
    makes or changes a role, a policy or a user."""
    matched = {a for a in IAM_OPERATIONS if fnmatch.fnmatchcase(a, INSTANCE_PROFILE_WRITES)}
    karpenters = {
        "iam:CreateInstanceProfile",
        "iam:TagInstanceProfile",
        "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile",
        "iam:DeleteInstanceProfile",
    }
    assert matched == karpenters | {"iam:GetInstanceProfile", "iam:UntagInstanceProfile"}

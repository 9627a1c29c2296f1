"""The deploy role's second ceiling (components/delivery.py deploy_denials_policy): a managed policy attached to it
beside its inline policy, for IAM caps a role's inline policies at 10,240 characters together. It holds denials, so
a deploy role that could detach, delete or re-version it would lift its own ceiling: each such request is refused
by the denials the inline policy keeps (ManagedPoliciesAreFixed, CiIdentitiesAreAdministeredByBootstrap)."""

from __future__ import annotations

import pytest

from components.delivery import deploy_denials_arn
from infra.core.names import deploy_denials_name, role_name
from policies.iam_evaluation import Request, evaluate
from tests.conftest import STACKS, plan_of
from tests.delivery.test_ci_identity import ACCOUNT, DEPLOY_ROLE, _deploy

DENIALS = deploy_denials_arn(ACCOUNT, "prod")


@pytest.mark.parametrize("stack", STACKS)
def test_the_deploy_role_of_every_stack_ci_deploys_carries_its_managed_denials(stack):
    plan = plan_of(stack)
    (policy,) = [r for r in plan.of_type("aws:iam/policy:Policy") if r.name == "delivery-deploy-denials"]
    (attachment,) = [
        r
        for r in plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if r.name == "delivery-deploy-denials"
    ]
    (deploy,) = [r for r in plan.of_type("aws:iam/role:Role") if r.inputs.get("name") == role_name(stack, "deploy")]
    assert policy.inputs["name"] == deploy_denials_name(stack)
    assert attachment.inputs["policyArn"] == deploy_denials_arn(plan.config.delivery.account_id, stack)
    assert deploy.urn in attachment.dependencies and policy.urn in attachment.dependencies


def test_the_managed_denials_are_attached_before_the_inline_policy_that_leaves_them_out_is_put():
    """The upgrade that moves them (an administrator's `pulumi up`) never leaves the deploy role without them."""
    plan = plan_of("prod")
    (attachment,) = [
        r
        for r in plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if r.name == "delivery-deploy-denials"
    ]
    (inline,) = [r for r in plan.of_type("aws:iam/rolePolicy:RolePolicy") if r.name == "delivery-deploy"]
    assert attachment.urn in inline.dependencies


@pytest.mark.parametrize(
    ("request_", "sid"),
    [
        (
            Request("iam:DetachRolePolicy", DEPLOY_ROLE, {"iam:PolicyARN": DENIALS}),
            "CiIdentitiesAreAdministeredByBootstrap",
        ),
        (Request("iam:DeletePolicy", DENIALS), "ManagedPoliciesAreFixed"),
        (Request("iam:CreatePolicyVersion", DENIALS), "ManagedPoliciesAreFixed"),
        (Request("iam:SetDefaultPolicyVersion", DENIALS), "ManagedPoliciesAreFixed"),
        (Request("iam:DeletePolicyVersion", DENIALS), "ManagedPoliciesAreFixed"),
    ],
    ids=lambda v: v.action if isinstance(v, Request) else v,
)
def test_the_deploy_role_cannot_lift_its_managed_denials(request_, sid):
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", sid), decision.reason

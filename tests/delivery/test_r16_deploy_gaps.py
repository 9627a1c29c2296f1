"""Round 16: small gaps of the deploy identity that its IAM denials or `higgsfield verify` left, each written as the
request a holder of the deploy role would send, decided by the repo's evaluator (policies/iam_evaluation.py) on the
policies the prod plan renders (tests/delivery/test_ci_identity.py `_deploy`)."""

from __future__ import annotations

from policies.iam_evaluation import Request, evaluate
from tests.delivery.test_ci_identity import ACCOUNT, CLUSTER, REGION, _deploy

# --- an add-on the plan does not make --------------------------------------------------------------


def test_the_deploy_role_may_add_an_addon_to_its_cluster_and_list_them_as_verify_does():
    """CreateAddon on the stack's own cluster is the deploy role's (OnlyTheStacksCluster refuses only another
    cluster's), so aws.addons lists every add-on (tests/cli/test_verify_checks.py
    test_an_addon_the_plan_does_not_make_fails_naming_it_and_its_removal), and the deploy workflow, which runs verify as
    the deploy role, may list them."""
    assert evaluate(Request("eks:CreateAddon", CLUSTER), [_deploy()]).allowed
    addon = f"arn:aws:eks:{REGION}:{ACCOUNT}:addon/higgsfield-prod/aws-guardduty-agent/0a1b"
    assert evaluate(Request("eks:DescribeAddon", addon), [_deploy()]).allowed
    assert evaluate(Request("eks:ListAddons", CLUSTER), [_deploy()]).allowed

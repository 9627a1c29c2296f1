"""Round 16: small gaps of the deploy identity that its IAM denials or `higgsfield verify` left, each written as the
request a holder of the deploy role would send, decided by the repo's evaluator (policies/iam_evaluation.py) on the
policies the prod plan renders (tests/delivery/test_ci_identity.py `_deploy`)."""

from __future__ import annotations

import pytest

from policies.iam_evaluation import Request, evaluate
from tests.conftest import plan_of
from tests.delivery.test_ci_identity import ACCOUNT, CLUSTER, REGION, _boundary, _deploy, _document, _without

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


# --- an image every team runs ------------------------------------------------------------------------

TRAINING_REPOSITORY = f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/higgsfield-prod/training"
IMAGE_WRITES = [
    ("push an image to the training repository", Request("ecr:PutImage", TRAINING_REPOSITORY)),
    # a rule of prefix higgsfield-prod makes higgsfield-prod/training a cache of an upstream registry's repository
    # (docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache-private-wildcards.html)
    ("make the training repository a cache of a public registry", Request("ecr:CreatePullThroughCacheRule", "*")),
    ("point a cache rule at another upstream", Request("ecr:UpdatePullThroughCacheRule", "*")),
    # the tag every team's jobs and the health gate pull, gone until the image workflow pushes it again
    ("delete the training image", Request("ecr:BatchDeleteImage", TRAINING_REPOSITORY)),
]


@pytest.mark.parametrize("request_", [r for _, r in IMAGE_WRITES], ids=[a for a, _ in IMAGE_WRITES])
def test_the_deploy_role_writes_no_image_teams_run(request_):
    """`pulumi up` makes the training repository and its lifecycle policy and pushes nothing (components/registry.py);
    the image workflow's role pushes. Without ImagesAreTheImageRoles the deploy role's ecr:* would let it through."""
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "ImagesAreTheImageRoles"), decision.reason
    assert evaluate(request_, [_without(_deploy(), "ImagesAreTheImageRoles")]).allowed


def test_the_image_role_still_pushes_the_training_image():
    """The image workflow's role carries the boundary, which the denial is not in."""
    image = _document(plan_of("prod"), "aws:iam/rolePolicy:RolePolicy", "delivery-image")
    assert evaluate(Request("ecr:PutImage", TRAINING_REPOSITORY), [image], _boundary()).allowed


# DeleteRepository: a dev stack's only (test_r17_deploy_gaps.py); production's repository is protected and kept
@pytest.mark.parametrize("action", ["ecr:CreateRepository", "ecr:PutLifecyclePolicy", "ecr:TagResource"])
def test_the_deploy_role_still_makes_the_training_repository(action):
    assert evaluate(Request(action, TRAINING_REPOSITORY), [_deploy()]).allowed

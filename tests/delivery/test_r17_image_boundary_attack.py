"""Round 17, attacked: the training repository's denials (components/delivery.py ImagesAreTheImageRoles) through a
role under the stack boundary. The deploy role may act as a stack role with any inline policy (tests/security/
test_red_team.py BECOME_A_STACK_ROLE: PutRolePolicy on a Pod Identity role, then a pod of its service account, the
deploy role being the cluster's admin), so what the boundary allows the deploy role reaches. aws.pod-identities finds
such a policy only while it is there, and no check reads the repository's tag mutability after: `pulumi up` reads no
live state (no refresh) and sets it back only when the plan's setting changes."""

from __future__ import annotations

import pytest

from policies.iam_evaluation import Request, evaluate
from tests.delivery.test_ci_identity import _boundary, _without
from tests.delivery.test_r17_deploy_gaps import TRAINING_REPOSITORY
from tests.security.test_red_team import EVERYTHING


@pytest.mark.parametrize(
    "action",
    [
        "ecr:PutImageTagMutability",
        "ecr:UpdateImageStorageClass",
        "ecr:DeleteRepository",
        "ecr:BatchDeleteImage",
        "ecr:PutLifecyclePolicy",
    ],
    ids=[
        "make its tags movable",
        "archive its image",
        "delete it to make it again movable",
        "delete its image to push another under the tag",
        "expire its image by a lifecycle rule to push another under the tag",
    ],
)
def test_a_role_under_the_boundary_given_every_permission_cannot_change_the_training_repository_either(action):
    """No role under the boundary needs these: the image role pushes (ECR_PUSH), the program's other roles pull."""
    decision = evaluate(Request(action, TRAINING_REPOSITORY), [EVERYTHING], _boundary())
    assert decision.denied_by == ("delivery-boundary", "AdministratorsOnly"), decision.reason
    assert evaluate(
        Request(action, TRAINING_REPOSITORY), [EVERYTHING], _without(_boundary(), "AdministratorsOnly")
    ).allowed


@pytest.mark.parametrize("action", ["ecr:CreatePullThroughCacheRule", "ecr:UpdatePullThroughCacheRule"])
def test_a_role_under_the_boundary_given_every_permission_may_not_make_a_pull_through_cache_rule(action):
    """A rule whose prefix is the training repository's (`higgsfield-prod`) makes a tag not pushed yet an upstream
    registry's image (components/delivery.py PULL_THROUGH_CACHE_RULES): refused to the deploy role by
    ImagesAreTheImageRoles, and to a stack role it gave `*` by the boundary. A rule is the registry's (no resource
    type: Service Authorization Reference, list_amazonelasticcontainerregistry)."""
    decision = evaluate(Request(action, "*"), [EVERYTHING], _boundary())
    assert decision.denied_by == ("delivery-boundary", "AdministratorsOnly"), decision.reason

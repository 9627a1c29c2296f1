"""Round 17: small gaps of the deploy identity (its inline and managed policies, components/delivery.py
deploy_policy, deploy_denials_policy) and of the stack boundary, each written as the request a holder of the role
would send, decided by the repo's evaluator (policies/iam_evaluation.py) on the policies the plans render."""

from __future__ import annotations

import json

import pytest

from components.delivery import boundary_policy, policy_characters
from policies.iam_evaluation import Request, evaluate
from tests.conftest import STACKS, config_of, plan_of
from tests.delivery.test_ci_identity import (
    ACCOUNT,
    EVERYTHING,
    NOT_ALLOWED_BY_THE_BOUNDARY,
    OWN_KEY,
    REGION,
    _boundary,
    _deploy,
    _without,
)

# --- the training image's tags stay immutable ---------------------------------------------------------------------

TRAINING_REPOSITORY = f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/higgsfield-prod/training"
# PutImageTagMutability's imageTagMutability: MUTABLE, IMMUTABLE, MUTABLE_WITH_EXCLUSION, IMMUTABLE_WITH_EXCLUSION
# (the last two with exclusion filters naming the tags that are the exception: boto/botocore:botocore/data/ecr/
# 2015-09-21/service-2.json@1.44.18); IAM sees none of it (ECR's PutImageTagMutability has no condition key: Service
# Authorization Reference, list_amazonelasticcontainerregistry), so the call is refused whole.
MUTABILITY_WRITES = [
    ("make the training image's tags movable", Request("ecr:PutImageTagMutability", TRAINING_REPOSITORY)),
    (
        "the training repository of the stack's name in another region",
        Request("ecr:PutImageTagMutability", f"arn:aws:ecr:eu-west-1:{ACCOUNT}:repository/higgsfield-prod/training"),
    ),
    (
        "another stack's training repository",
        Request("ecr:PutImageTagMutability", f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/higgsfield-staging/training"),
    ),
]


@pytest.mark.parametrize("request_", [r for _, r in MUTABILITY_WRITES], ids=[a for a, _ in MUTABILITY_WRITES])
def test_the_deploy_role_cannot_make_an_images_tags_movable(request_):
    """With movable tags a later push replaces the image every job pinned by its tag (components/registry.py makes
    the repository IMMUTABLE, in CreateRepository itself); `pulumi up` calls PutImageTagMutability only when that
    setting changes, which `higgsfield diff` hands to an administrator."""
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "ImagesAreTheImageRoles"), decision.reason
    assert evaluate(request_, [_without(_deploy(), "ImagesAreTheImageRoles")]).allowed


def test_the_deploy_role_cannot_archive_the_training_image():
    """An archived image cannot be pulled (docs.aws.amazon.com/AmazonECR/latest/userguide/archive-image.html): the same
    end as BatchDeleteImage, by UpdateImageStorageClass (targetStorageClass ARCHIVE: boto/botocore:botocore/data/ecr/
    2015-09-21/service-2.json@1.44.18). The program archives nothing."""
    request_ = Request("ecr:UpdateImageStorageClass", TRAINING_REPOSITORY)
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "ImagesAreTheImageRoles"), decision.reason
    assert evaluate(request_, [_without(_deploy(), "ImagesAreTheImageRoles")]).allowed


@pytest.mark.parametrize("stack", STACKS)
def test_every_repository_of_every_plan_is_created_with_immutable_tags_so_no_deploy_changes_them(stack):
    """The setting is CreateRepository's (resourceRepositoryCreate passes ImageTagMutability), so no plan the program
    makes needs the denied call: each repository's mutability is the one code fixes."""
    repositories = plan_of(stack).of_type("aws:ecr/repository:Repository")
    assert repositories and {r.inputs["imageTagMutability"] for r in repositories} == {"IMMUTABLE"}
    for repository in repositories:
        request_ = Request("ecr:CreateRepository", TRAINING_REPOSITORY, _tags_requested(repository.inputs["tags"]))
        assert evaluate(request_, [_deploy()]).allowed


def test_in_production_the_deploy_role_cannot_delete_the_training_repository_to_remake_it_with_movable_tags():
    """CreateRepository carries no condition key on imageTagMutability (aws:RequestTag and aws:TagKeys alone: Service
    Authorization Reference, list_amazonelasticcontainerregistry): a repository deleted, every image with it, and
    made again MUTABLE is refused at the delete. Production's repository is protected and kept on delete
    (components/registry.py), so no `pulumi up` deletes it."""
    request_ = Request("ecr:DeleteRepository", TRAINING_REPOSITORY)
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "ImagesAreTheImageRoles"), decision.reason
    assert evaluate(request_, [_without(_deploy(), "ImagesAreTheImageRoles")]).allowed


def test_a_dev_stacks_deploy_role_may_delete_its_training_repository_which_its_teardown_force_deletes():
    """Decided: a dev stack's repository is force-deleted with the stack (components/registry.py force_delete), by
    the deploy role's `pulumi destroy`; its images are rebuilt from main by the image workflow (docs/security-ci.md)."""
    dev = config_of("dev")
    repository = f"arn:aws:ecr:{dev.region}:{dev.delivery.account_id}:repository/higgsfield-dev/training"
    assert evaluate(Request("ecr:DeleteRepository", repository), [_deploy(plan_of("dev"))]).allowed


# --- every key the deploy role makes is the stack's, by its tag --------------------------------------------------


def _tags_requested(tags: dict[str, str]) -> dict:
    """A create's request context for the tags it carries: aws:RequestTag/KEY each, and aws:TagKeys."""
    return {**{f"aws:RequestTag/{k}": v for k, v in tags.items()}, "aws:TagKeys": list(tags)}


UNTAGGED_OR_FOREIGN_KEYS = [
    ("a key without the stack's tag", Request("kms:CreateKey", "*")),
    ("a key with other tags only", Request("kms:CreateKey", "*", _tags_requested({"team": "ml-platform"}))),
    (
        "a key tagged as another stack's",
        Request("kms:CreateKey", "*", _tags_requested({"higgsfield:stack": "staging"})),
    ),
    # tag values are case-sensitive (KMS's TagResource and CreateKey: "case-sensitive tag key and tag value pairs",
    # docs.aws.amazon.com/kms/latest/developerguide/manage-tags-api.html), and StringNotEquals compares them so
    (
        "a key tagged with the stack's name in another case",
        Request("kms:CreateKey", "*", _tags_requested({"higgsfield:stack": "Prod"})),
    ),
    ("a key tagged with an empty stack name", Request("kms:CreateKey", "*", _tags_requested({"higgsfield:stack": ""}))),
]


@pytest.mark.parametrize(
    "request_", [r for _, r in UNTAGGED_OR_FOREIGN_KEYS], ids=[a for a, _ in UNTAGGED_OR_FOREIGN_KEYS]
)
def test_the_deploy_role_makes_no_key_but_one_tagged_as_its_stacks(request_):
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "KeysCarryTheStacksTag"), decision.reason
    assert evaluate(request_, [_without(_deploy(), "KeysCarryTheStacksTag")]).allowed


# Ways beside CreateKey to the same end: a key made tagged, then untagged or given another stack's name.
RETAGS = [
    (
        "untag the stack's tag from a key",
        Request("kms:UntagResource", OWN_KEY, {"aws:TagKeys": ["higgsfield:stack"]}),
        "KeysKeepTheStacksTag",
    ),
    (
        "untag it among other tags",
        Request("kms:UntagResource", OWN_KEY, {"aws:TagKeys": ["team", "higgsfield:stack"]}),
        "KeysKeepTheStacksTag",
    ),
    (
        "give a key another stack's name",
        Request("kms:TagResource", OWN_KEY, _tags_requested({"higgsfield:stack": "staging"})),
        "KeysKeepTheStacksName",
    ),
    (
        "give it another stack's name among other tags",
        Request("kms:TagResource", OWN_KEY, _tags_requested({"team": "x", "higgsfield:stack": "staging"})),
        "KeysKeepTheStacksName",
    ),
    (
        "give it an empty stack name",
        Request("kms:TagResource", OWN_KEY, _tags_requested({"higgsfield:stack": ""})),
        "KeysKeepTheStacksName",
    ),
]


@pytest.mark.parametrize(("request_", "sid"), [r[1:] for r in RETAGS], ids=[r[0] for r in RETAGS])
def test_the_deploy_role_cannot_take_the_stacks_tag_off_a_key(request_, sid):
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", sid), decision.reason
    assert evaluate(request_, [_without(_deploy(), sid)]).allowed


@pytest.mark.parametrize(
    "request_",
    [
        Request("kms:TagResource", OWN_KEY, _tags_requested({"team": "research"})),
        Request("kms:UntagResource", OWN_KEY, {"aws:TagKeys": ["team"]}),
        Request("kms:TagResource", OWN_KEY, _tags_requested({"higgsfield:stack": "prod", "team": "research"})),
        # tagging on create, were its kms:TagResource check to carry the tag keys alone
        Request("kms:TagResource", "*", {"aws:TagKeys": ["higgsfield:stack", "team"]}),
    ],
    ids=[
        "retag a configured tag",
        "untag a configured tag",
        "tag with the stack's own name",
        "tag on create with the keys alone",
    ],
)
def test_the_deploy_role_still_changes_a_keys_configured_tags(request_):
    """A configured tag changed or removed is `pulumi up`'s TagResource and UntagResource (UpdateTags)."""
    assert evaluate(request_, [_deploy()]).allowed


@pytest.mark.parametrize("stack", STACKS)
def test_every_key_of_every_plan_is_one_its_deploy_role_may_create(stack):
    """What `pulumi up` sends for each key of the plan (CreateKey with the key's tags and the lockout check, and the
    kms:TagResource tagging on create asks) is allowed by that stack's deploy role."""
    plan = plan_of(stack)
    keys = plan.of_type("aws:kms/key:Key")
    assert keys
    for key in keys:
        tags = _tags_requested(key.inputs["tags"])
        for request_ in (
            Request("kms:CreateKey", "*", {**tags, "kms:BypassPolicyLockoutSafetyCheck": "false"}),
            Request("kms:TagResource", "*", tags),
        ):
            decision = evaluate(request_, [_deploy(plan)])
            assert decision.allowed, (stack, key.name, request_.action, decision.reason)


# --- instance profiles outside the stack's Karpenter path -----------------------------------------------------------

# Karpenter before its `/karpenter/REGION/CLUSTER/UID/` paths made each node class's profile at the root path, named
# CLUSTER_HASH; AWS's console and `aws iam create-instance-profile` make them at `/` too.
AT_THE_ROOT_PATH = f"arn:aws:iam::{ACCOUNT}:instance-profile/higgsfield-prod_4130381233412151342"
OUTSIDE_THE_STACKS_PATH = [
    ("at the root path", AT_THE_ROOT_PATH),
    ("under another cluster's path", f"arn:aws:iam::{ACCOUNT}:instance-profile/karpenter/{REGION}/analytics/0a1b/x"),
    (
        "under a cluster whose name starts with the stack's",
        f"arn:aws:iam::{ACCOUNT}:instance-profile/karpenter/{REGION}/higgsfield-prod-eu/0a1b/x",
    ),
    ("under a path of its own", f"arn:aws:iam::{ACCOUNT}:instance-profile/higgsfield-prod/x"),
]
PROFILE_WRITES = (
    "iam:CreateInstanceProfile",
    "iam:AddRoleToInstanceProfile",
    "iam:RemoveRoleFromInstanceProfile",
    "iam:DeleteInstanceProfile",
    "iam:TagInstanceProfile",
)


@pytest.mark.parametrize("action", PROFILE_WRITES)
@pytest.mark.parametrize(
    "profile", [p for _, p in OUTSIDE_THE_STACKS_PATH], ids=[a for a, _ in OUTSIDE_THE_STACKS_PATH]
)
def test_no_role_under_the_boundary_writes_an_instance_profile_outside_its_clusters_karpenter_path(action, profile):
    """The boundary allows instance-profile writes on `instance-profile/karpenter/*/CLUSTER/*` alone
    (INSTANCE_PROFILE_WRITES): an instance profile ARN holds its path, and IAM has no condition key on it."""
    decision = evaluate(Request(action, profile), [EVERYTHING], _boundary())
    assert decision.reason == NOT_ALLOWED_BY_THE_BOUNDARY, decision.reason


@pytest.mark.parametrize("action", PROFILE_WRITES)
def test_the_deploy_role_writes_no_instance_profile_at_all(action):
    """deploy_policy names no instance-profile write (the program makes none; Karpenter's controller does)."""
    assert evaluate(Request(action, AT_THE_ROOT_PATH), [_deploy()]).reason == "no identity policy allows it"


def test_the_deploy_role_launches_nothing_with_an_instance_profile_at_the_root_path():
    """RunInstances naming a profile asks iam:PassRole of its role, to EC2: NoRoleToAnInstance refuses it, whichever
    profile (at `/` or Karpenter's path) holds the node role."""
    node_role = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-node-0123"
    decision = evaluate(Request("iam:PassRole", node_role, {"iam:PassedToService": "ec2.amazonaws.com"}), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "NoRoleToAnInstance"), decision.reason


# --- eks:Describe* of every cluster of the account ------------------------------------------------------------------


def _boundary_with_describe_pinned(document: str, cluster: str) -> str:
    """The boundary with BOUNDED_EKS_ACTIONS on the stack's cluster and its node groups alone (what Karpenter's
    controller, the nodes and the Cluster Autoscaler read) instead of on every resource."""
    policy = json.loads(document)
    first = policy["Statement"][0]
    first["Action"] = [a for a in first["Action"] if a != "eks:Describe*"]
    policy["Statement"].insert(
        1,
        {
            "Effect": "Allow",
            "Action": ["eks:Describe*"],
            "Resource": [f"arn:aws:eks:*:*:cluster/{cluster}", f"arn:aws:eks:*:*:nodegroup/{cluster}/*"],
        },
    )
    return json.dumps(policy)


def test_pinning_eks_describe_to_the_stacks_cluster_would_not_fit_the_boundary_at_s3s_longest_bucket_names():
    """Why a role under the boundary may describe every cluster of the account (docs/security-ci.md): the pinned
    allow costs the boundary more than it has left at 63-character bucket names. The roles' own policies pin it
    (karpenter_policy's DescribeCluster, the Cluster Autoscaler's DescribeNodegroup); the node role's
    AmazonEKSWorkerNodePolicy allows eks:DescribeCluster on every cluster, and the deploy role describes them all."""
    cfg = config_of("prod")
    state, data = "higgsfield-prod-pulumi-state-".ljust(63, "x"), "higgsfield-prod-training-datasets-".ljust(63, "x")
    settings = cfg.delivery.model_copy(update={"state_bucket": state})
    today = boundary_policy(settings, cfg.stack, [data], region=cfg.region)
    pinned = _boundary_with_describe_pinned(today, "higgsfield-prod")
    assert policy_characters(today) <= 6144 < policy_characters(pinned), (
        policy_characters(today),
        policy_characters(pinned),
    )

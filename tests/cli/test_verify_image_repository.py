"""`higgsfield verify` aws.image-repository: the training image's repository (components/registry.py) as the plan
makes it. The deploy role may put any lifecycle policy (`pulumi up` does, and no IAM condition key carries a rule),
so a rule expiring the tag every team's jobs run is not refused; in a dev stack it may delete the repository and make
it again with movable tags. The account is moto's (ECR's repositories, tag mutability with exclusion filters,
lifecycle and repository policies: getmoto/moto:moto/ecr/models.py@5.2.6), holding the repository as `pulumi up`
made it from the plan's inputs (tests/cli/test_verify_checks.py _seed)."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest

from infra.cli.verify import checks
from policies.iam_evaluation import Request, evaluate
from tests.cli.test_verify_checks import aws, aws_ctx, make_repository, one, plan  # noqa: F401 (fixtures)
from tests.conftest import STACKS, plan_of
from tests.delivery.test_ci_identity import _deploy

CHECK = "aws.image-repository"
OTHER_ACCOUNT = "999999999999"


def _planned(plan) -> tuple[dict, str]:  # noqa: F811
    """The plan's repository inputs and its lifecycle policy's text."""
    (repository,) = plan.of_type(checks.REPOSITORY)
    (lifecycle,) = plan.of_type(checks.ECR_LIFECYCLE_POLICY)
    return repository.inputs, str(lifecycle.inputs["policy"])


def _with_inputs(plan, **inputs):  # noqa: F811
    """The plan whose repository has these inputs besides its own."""
    (repository,) = plan.of_type(checks.REPOSITORY)
    changed = dataclasses.replace(repository, inputs={**repository.inputs, **inputs})

    def of_type(type_: str):
        return [changed] if type_ == checks.REPOSITORY else plan.of_type(type_)

    return types.SimpleNamespace(config=plan.config, of_type=of_type)


@pytest.fixture
def ecr(aws):  # noqa: F811
    """The account's ECR, holding the planned repository and its lifecycle policy as `pulumi up` made them."""
    return aws.client("ecr")


def _made_again(ecr, plan, **changes) -> str:  # noqa: F811
    """The repository deleted and made again with `changes` to the plan's CreateRepository, the plan's lifecycle
    policy put back: what a dev stack's deploy role may do. Its name."""
    inputs, lifecycle = _planned(plan)
    ecr.delete_repository(repositoryName=inputs["name"], force=True)
    make_repository(ecr, inputs, **changes)
    ecr.put_lifecycle_policy(repositoryName=inputs["name"], lifecyclePolicyText=lifecycle)
    return str(inputs["name"])


@pytest.fixture
def name(plan) -> str:  # noqa: F811
    return str(_planned(plan)[0]["name"])


def test_the_planned_repository_passes(aws_ctx, ecr, name):  # noqa: F811
    outcome = one(CHECK, aws_ctx)
    assert outcome.status == "PASS" and outcome.evidence.startswith(f"{name}: IMMUTABLE"), outcome.evidence


def test_the_plans_lifecycle_policy_given_back_in_another_order_and_spacing_passes(aws_ctx, ecr, name, plan):  # noqa: F811
    """ECR may give the rules back in order of rulePriority and the text without the plan's spacing: the policy is
    compared parsed, rule by rule."""
    rules = json.loads(_planned(plan)[1])["rules"]
    text = json.dumps({"rules": rules[::-1]}, separators=(",", ":"))
    ecr.put_lifecycle_policy(repositoryName=name, lifecyclePolicyText=text)
    outcome = one(CHECK, aws_ctx)
    assert outcome.status == "PASS", outcome.evidence


def test_a_lifecycle_rule_expiring_the_training_tag_fails_naming_it(aws_ctx, ecr, name, plan):  # noqa: F811
    """The deploy role's PutLifecyclePolicy with a rule of its own: the image of every `src-` tag expires a day
    after its push, and every team's job then fails to pull it."""
    expiring = {
        "rulePriority": 1,
        "description": "expire the training image",
        "selection": {
            "tagStatus": "tagged",
            "tagPrefixList": ["src-"],
            "countType": "sinceImagePushed",
            "countUnit": "days",
            "countNumber": 1,
        },
        "action": {"type": "expire"},
    }
    rules = [{**rule, "rulePriority": rule["rulePriority"] + 1} for rule in json.loads(_planned(plan)[1])["rules"]]
    ecr.put_lifecycle_policy(repositoryName=name, lifecyclePolicyText=json.dumps({"rules": [expiring, *rules]}))
    outcome = one(CHECK, aws_ctx)
    assert outcome.status == "FAIL"
    assert f'{name}: lifecycle rule {{"action":{{"type":"expire"}},"description":"expire the training image"' in (
        outcome.evidence
    )
    assert '"tagPrefixList":["src-"]' in outcome.evidence and "is not the plan's" in outcome.evidence
    assert "`pulumi refresh` then `pulumi up`" in outcome.fix


def test_no_lifecycle_policy_fails(aws_ctx, ecr, name):  # noqa: F811
    ecr.delete_lifecycle_policy(repositoryName=name)
    outcome = one(CHECK, aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{name}: no lifecycle policy, planned one"


def test_movable_tags_fail_naming_the_mutability(aws_ctx, ecr, name):  # noqa: F811
    """A dev stack's deploy role may delete the repository and make it again MUTABLE: a later push replaces the
    image a job pinned by its tag."""
    ecr.put_image_tag_mutability(repositoryName=name, imageTagMutability="MUTABLE")
    outcome = one(CHECK, aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{name}: tag mutability MUTABLE, planned IMMUTABLE"
    assert "put-image-tag-mutability" in outcome.fix


def test_immutable_tags_but_for_an_exclusion_fail_naming_the_filter(aws_ctx, ecr, name):  # noqa: F811
    """IMMUTABLE_WITH_EXCLUSION: the tags its filters match move (ImageTagMutabilityExclusionFilter, filterType
    WILDCARD: boto/botocore:botocore/data/ecr/2015-09-21/service-2.json@1.44.18)."""
    ecr.put_image_tag_mutability(
        repositoryName=name,
        imageTagMutability="IMMUTABLE_WITH_EXCLUSION",
        imageTagMutabilityExclusionFilters=[{"filterType": "WILDCARD", "filter": "src-*"}],
    )
    outcome = one(CHECK, aws_ctx)
    assert outcome.status == "FAIL"
    assert outcome.evidence == (
        f"{name}: tag mutability IMMUTABLE_WITH_EXCLUSION, planned IMMUTABLE; "
        f"{name}: tag mutability exclusion filter(s) WILDCARD src-*, planned none"
    )


def test_the_same_mutability_with_another_exclusion_filter_fails_naming_it(aws_ctx, ecr, plan):  # noqa: F811
    """A plan's filters are compared as well as its mutability: another filter under the same setting is named."""
    aws_ctx.plan = _with_inputs(
        plan,
        imageTagMutability="IMMUTABLE_WITH_EXCLUSION",
        imageTagMutabilityExclusionFilters=[{"filterType": "WILDCARD", "filter": "release-*"}],
    )
    name = _made_again(
        ecr,
        plan,
        imageTagMutability="IMMUTABLE_WITH_EXCLUSION",
        imageTagMutabilityExclusionFilters=[{"filterType": "WILDCARD", "filter": "*"}],
    )
    outcome = one(CHECK, aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == (
        f"{name}: tag mutability exclusion filter(s) WILDCARD *, planned WILDCARD release-*"
    )


def test_a_repository_made_again_unscanned_under_aes256_fails_naming_both(aws_ctx, ecr, plan):  # noqa: F811
    name = _made_again(
        ecr,
        plan,
        imageScanningConfiguration={"scanOnPush": False},
        encryptionConfiguration={"encryptionType": "AES256"},
    )
    outcome = one(CHECK, aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == (
        f"{name}: encryption AES256, planned KMS; {name}: scan on push off, planned on"
    )


def test_a_repository_policy_letting_another_account_pull_fails_naming_it(aws_ctx, ecr, name):  # noqa: F811
    """The plan sets no repository policy: one letting another account pull gives it every team's image."""
    grant = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "pull",
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{OTHER_ACCOUNT}:root"},
                "Action": ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            }
        ],
    }
    ecr.set_repository_policy(repositoryName=name, policyText=json.dumps(grant))
    outcome = one(CHECK, aws_ctx)
    assert outcome.status == "FAIL"
    assert outcome.evidence.startswith(f"{name}: a repository policy the plan does not set (Allow ")
    assert f"arn:aws:iam::{OTHER_ACCOUNT}:root" in outcome.evidence
    assert "delete-repository-policy" in outcome.fix


def test_the_repository_missing_fails_naming_pulumi_up(aws_ctx, ecr, name):  # noqa: F811
    ecr.delete_repository(repositoryName=name, force=True)
    outcome = one(CHECK, aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == f"{name}: missing"
    assert "`pulumi up` makes it again" in outcome.fix


@pytest.mark.parametrize("stack", STACKS)
def test_the_deploy_role_may_make_every_call_the_check_makes_on_its_repository(stack):
    """The deploy workflow runs verify's read-only checks as the deploy role: each action of the check's rights on
    the stack's training repository is allowed it."""
    stack_plan = plan_of(stack)
    config = stack_plan.config
    (spec,) = [s for s in checks.specs() if s.id == CHECK]
    (repository,) = stack_plan.of_type(checks.REPOSITORY)
    arn = f"arn:aws:ecr:{config.region}:{config.delivery.account_id}:repository/{repository.inputs['name']}"
    actions = [a.strip() for a in spec.rights.split(",")]
    assert actions == ["ecr:DescribeRepositories", "ecr:GetLifecyclePolicy", "ecr:GetRepositoryPolicy"]
    refused = [a for a in actions if not evaluate(Request(a, arn), [_deploy(stack_plan)]).allowed]
    assert not refused

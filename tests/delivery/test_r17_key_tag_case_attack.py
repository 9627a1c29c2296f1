"""Round 17, attacked: the stack's tag on the deploy role's keys (components/delivery.py KeysCarryTheStacksTag,
KeysKeepTheStacksTag, KeysKeepTheStacksName) written in another case. IAM reads a context key's name whatever its
case ("Context key names are not case-sensitive": docs.aws.amazon.com/IAM/latest/UserGuide/
reference_policies_elements_condition.html), the tag key of aws:RequestTag/KEY too, while KMS keeps tag keys as
written ("case-sensitive tag key and tag value pairs": docs.aws.amazon.com/kms/latest/developerguide/
manage-tags-api.html), so `HIGGSFIELD:STACK` is the stack's tag to IAM and another tag to KMS."""

from __future__ import annotations

import pytest

from policies.iam_evaluation import Request, evaluate
from tests.delivery.test_ci_identity import FOREIGN_KEY, OWN_KEY, _boundary, _deploy, _without
from tests.security.test_red_team import EVERYTHING

SHOUTED = "HIGGSFIELD:STACK"


def test_the_deploy_role_cannot_untag_a_key_it_made_with_the_stacks_tag_key_in_capitals():
    """CreateKey tagged `HIGGSFIELD:STACK=prod` passes KeysCarryTheStacksTag (IAM reads aws:RequestTag/
    higgsfield:stack as prod); UntagResource of that key then names `HIGGSFIELD:STACK` in aws:TagKeys, whose values
    StringEquals compares with their case: the key would be left without the stack's tag."""
    create = Request("kms:CreateKey", "*", {f"aws:RequestTag/{SHOUTED}": "prod", "aws:TagKeys": [SHOUTED]})
    assert evaluate(create, [_deploy()]).allowed
    untag = Request("kms:UntagResource", OWN_KEY, {"aws:TagKeys": [SHOUTED]})
    decision = evaluate(untag, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "KeysKeepTheStacksTag"), decision.reason


def test_the_deploy_role_cannot_give_a_key_another_stacks_name_under_the_tag_key_in_capitals():
    """TagResource `HIGGSFIELD:STACK=staging` on a key of the stack's: IAM reads it as aws:RequestTag/
    higgsfield:stack, which KeysKeepTheStacksName refuses."""
    retag = Request("kms:TagResource", OWN_KEY, {f"aws:RequestTag/{SHOUTED}": "staging", "aws:TagKeys": [SHOUTED]})
    decision = evaluate(retag, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "KeysKeepTheStacksName"), decision.reason


@pytest.mark.xfail(
    strict=True,
    reason="a CreateKey carrying `higgsfield:stack=prod` and `HIGGSFIELD:STACK=staging` (KMS keeps both: tag keys are "
    "case-sensitive) gives IAM two values of aws:RequestTag/higgsfield:stack; which one StringNotEquals reads is in "
    "no AWS document, and the evaluator, reading both, lets the one that is the stack's name pass (read it off `aws "
    "iam simulate-principal-policy` with both context entries: docs/security-ci.md). A denial on aws:TagKeys would "
    "not rely on it, but no operator compares one value both without case and with it, and two conditions may hold "
    "for two different keys; StringLike (with case) needs one pattern per letter that can be the first capital (15, "
    "`H?????????:?????` to `higgsfield:stacK`), 453 characters, more than the managed policy has left at the longest "
    "stack name in the longest region (274; 472 for prod: tests/delivery/test_policy_sizes.py); the ten before the "
    "colon match keys that are no case of it (`Hyperparam:value`), and IAM's case folding beyond ASCII is undocumented",
)
def test_the_deploy_role_cannot_make_a_key_tagged_as_its_stacks_and_another_stacks_in_two_cases():
    tags = {"aws:RequestTag/higgsfield:stack": "prod", f"aws:RequestTag/{SHOUTED}": "staging"}
    create = Request("kms:CreateKey", "*", {**tags, "aws:TagKeys": ["higgsfield:stack", SHOUTED]})
    assert not evaluate(create, [_deploy()]).allowed


STAGING_KEY = {"aws:ResourceTag/higgsfield:stack": "staging"}  # another stack's key of the account, by its tag


def _retag(key_tags: dict, **tags: str) -> Request:
    requested = {f"aws:RequestTag/{k}": v for k, v in tags.items()}
    return Request("kms:TagResource", FOREIGN_KEY, {**key_tags, **requested, "aws:TagKeys": list(tags)})


def test_the_deploy_role_cannot_give_another_stacks_key_its_own_stacks_name():
    """KeysKeepTheStacksName lets the stack's own name through; on staging's key it would make the key the stack's
    and no longer staging's."""
    retag = _retag(STAGING_KEY, **{"higgsfield:stack": "prod"})
    decision = evaluate(retag, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "OtherStacksKeysStayTheirs"), decision.reason
    assert evaluate(retag, [_without(_deploy(), "OtherStacksKeysStayTheirs")]).allowed


def test_the_deploy_role_cannot_change_another_stacks_keys_other_tags():
    """A configured tag of staging's key (its `team`) is staging's deploy's to write, in either direction."""
    for request_ in (
        _retag(STAGING_KEY, team="research"),
        Request("kms:UntagResource", FOREIGN_KEY, {**STAGING_KEY, "aws:TagKeys": ["team"]}),
    ):
        decision = evaluate(request_, [_deploy()])
        assert decision.denied_by == ("delivery-deploy", "OtherStacksKeysStayTheirs"), decision.reason


def test_the_deploy_role_may_give_an_untagged_key_of_the_account_its_stacks_name():
    """Decided, allowed: a key no stack's tag names (a secrets key `higgsfield bootstrap` makes, any key of the
    account's own) is the deploy role's to use already (kms:* on every key), so taking it as the stack's gives the
    role nothing, and takes from another stack's deploy role only the tag writes on it, which no deploy makes on a
    key it did not create. Refusing it would need a denial on the absence of aws:ResourceTag/higgsfield:stack, which
    the tag-on-create kms:TagResource check of the program's own CreateKey carries too (no key exists yet)."""
    assert evaluate(_retag({}, **{"higgsfield:stack": "prod"}), [_deploy()]).allowed


def test_the_deploy_role_may_let_an_aws_service_use_another_stacks_key():
    """Decided, allowed: a grant EBS or FSx makes for a volume of the caller's (kms:GrantIsForAWSResource), on a key of
    another stack's as on any key of the account: the deploy role has kms:* on every key (Encrypt and Decrypt with it
    too), and another stack's keys are refused only their tag writes (OtherStacksKeysStayTheirs), their policy
    (AdministratorsOnly) and a grant to a principal (KmsGrantsOnlyForAwsResources)."""
    grant = Request("kms:CreateGrant", FOREIGN_KEY, {**STAGING_KEY, "kms:GrantIsForAWSResource": "true"})
    assert evaluate(grant, [_deploy()]).allowed
    to_a_principal = Request("kms:CreateGrant", FOREIGN_KEY, {**STAGING_KEY, "kms:GrantIsForAWSResource": "false"})
    decision = evaluate(to_a_principal, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "KmsGrantsOnlyForAwsResources"), decision.reason


@pytest.mark.parametrize(
    "request_",
    [
        Request("kms:UntagResource", OWN_KEY, {"aws:TagKeys": ["higgsfield:stack"]}),
        Request(
            "kms:TagResource",
            OWN_KEY,
            {"aws:RequestTag/higgsfield:stack": "staging", "aws:TagKeys": ["higgsfield:stack"]},
        ),
    ],
    ids=["untag", "retag as another stack's"],
)
def test_a_role_under_the_boundary_given_every_permission_cannot_take_the_stacks_tag_off_a_key_either(request_):
    """key_denials are the deploy role's alone, and a stack role it gives kms:* passes the boundary's allow
    (tests/security/test_red_team.py BECOME_A_STACK_ROLE); no role under the boundary tags a key at all."""
    decision = evaluate(request_, [EVERYTHING], _boundary())
    assert decision.denied_by == ("delivery-boundary", "AdministratorsOnly"), decision.reason
    assert evaluate(request_, [EVERYTHING], _without(_boundary(), "AdministratorsOnly")).allowed

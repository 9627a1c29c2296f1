"""Round 18, attacked: another stack's key (components/delivery.py OtherStacksKeysStayTheirs, AdministratorsOnly),
each way around the tag denial decided by the repo's evaluator (policies/iam_evaluation.py) on prod's deploy role.
The key staging's stack made carries `higgsfield:stack=staging` (tests/delivery/test_r17_key_tag_case_attack.py)."""

from __future__ import annotations

import pytest

from policies.iam_evaluation import Request, evaluate
from tests.delivery.test_ci_identity import FOREIGN_KEY, _deploy

STAGING = {"aws:ResourceTag/higgsfield:stack": "staging"}


@pytest.mark.parametrize(
    ("request_", "statement"),
    [
        # the key's stack tag written in capitals: IAM reads aws:ResourceTag/higgsfield:stack whatever its case
        (
            Request(
                "kms:TagResource",
                FOREIGN_KEY,
                {"aws:ResourceTag/HIGGSFIELD:STACK": "staging", "aws:RequestTag/team": "x", "aws:TagKeys": ["team"]},
            ),
            "OtherStacksKeysStayTheirs",
        ),
        # the stack's name among other tags of one request
        (
            Request(
                "kms:TagResource",
                FOREIGN_KEY,
                {
                    **STAGING,
                    "aws:RequestTag/higgsfield:stack": "prod",
                    "aws:RequestTag/team": "x",
                    "aws:TagKeys": ["higgsfield:stack", "team"],
                },
            ),
            "OtherStacksKeysStayTheirs",
        ),
        # what ends the key rather than retags it, and a copy in another region with a policy of the caller's
        (Request("kms:ScheduleKeyDeletion", FOREIGN_KEY, STAGING), "AdministratorsOnly"),
        (Request("kms:DisableKey", FOREIGN_KEY, STAGING), "AdministratorsOnly"),
        (Request("kms:ReplicateKey", FOREIGN_KEY, STAGING), "AdministratorsOnly"),
        (Request("kms:PutKeyPolicy", FOREIGN_KEY, STAGING), "AdministratorsOnly"),
    ],
    ids=["tag key in capitals", "several tags", "schedule deletion", "disable", "replicate", "key policy"],
)
def test_the_deploy_role_cannot_retag_end_or_copy_another_stacks_key(request_, statement):
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", statement), decision.reason


@pytest.mark.parametrize("action", ["kms:CreateAlias", "kms:UpdateAlias", "kms:DeleteAlias"])
def test_the_deploy_role_may_move_an_alias_to_or_from_another_stacks_key(action):
    """Decided, allowed: no policy, check or resource of the program resolves a key by its alias (the secrets and logs
    keys' aliases, components/cluster.py and components/logs.py, are names for people; every key is referred to by
    its ARN), so staging's alias moved onto prod's key, or prod's deleted, changes what no one reads; prod's next
    `pulumi up` puts its alias back. The deploy role's kms:* on every key (Decrypt included) is as decided in
    tests/delivery/test_r17_key_tag_case_attack.py."""
    assert evaluate(Request(action, FOREIGN_KEY, STAGING), [_deploy()]).allowed

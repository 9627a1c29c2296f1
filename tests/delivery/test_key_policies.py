"""Every key the program makes has a key policy of ours (issue 34 point 5), and that policy opens the
key to nobody outside the account: its principals are the account's root (IAM policies of the account
decide, under the deploy role's policy and the stack boundary) and the one AWS service that encrypts
with it. Neither ceiling can read a key policy's content (no IAM condition key on it), so this is where
a cross-account principal is refused."""

from __future__ import annotations

import json

import pytest

from components.logs import account_key_policy, log_key_policy

ACCOUNT = "444455556666"
KEY = f"arn:aws:kms:us-east-2:{ACCOUNT}:key/1234abcd"


def _principals(document: str) -> list[dict]:
    return [s["Principal"] for s in json.loads(document)["Statement"]]


@pytest.mark.parametrize(
    "document",
    [account_key_policy(KEY), log_key_policy(KEY, "us-east-2")],
    ids=["secrets-and-fsx-keys", "log-key"],
)
def test_a_key_policy_of_ours_names_only_this_account_and_aws_services(document):
    for principal in _principals(document):
        assert set(principal) <= {"AWS", "Service"}, principal
        if "AWS" in principal:
            assert principal["AWS"] == f"arn:aws:iam::{ACCOUNT}:root"
        else:
            assert principal["Service"].endswith(".amazonaws.com")


def test_the_log_keys_service_encrypts_only_this_accounts_log_groups():
    (service,) = [s for s in json.loads(log_key_policy(KEY, "us-east-2"))["Statement"] if "Service" in s["Principal"]]
    context = json.dumps(service["Condition"])
    assert f"arn:aws:logs:us-east-2:{ACCOUNT}:log-group:" in context


def test_the_program_asks_who_deploys_once_for_every_key_and_the_queue(plan):
    """The keys' and the interruption queue's policies take their account from one GetCallerIdentity."""
    asked = [token for token, _ in plan.invokes if token == "aws:index/getCallerIdentity:getCallerIdentity"]
    assert len(asked) == 1

"""The repository's IAM evaluator (policies/iam_evaluation.py) on the set operators our denials use, as the IAM User
Guide defines them (reference_policies_condition-single-vs-multi-valued-context-keys.html): `ForAnyValue:` with a
negated operator holds when at least one request value matches none of the policy's."""

from __future__ import annotations

from policies.iam_evaluation import Policy, Request, evaluate

OURS = "arn:aws:sqs:*:444455556666:ours"
DENY_OTHERS = Policy(
    "p",
    {
        "Statement": [
            {"Effect": "Allow", "Action": "events:PutTargets", "Resource": "*"},
            {
                "Sid": "OnlyOurs",
                "Effect": "Deny",
                "Action": "events:PutTargets",
                "Resource": "*",
                "Condition": {"ForAnyValue:ArnNotLike": {"events:TargetArn": OURS}},
            },
        ]
    },
)


def _put(*targets: str) -> Request:
    return Request("events:PutTargets", "arn:aws:events:us-east-2:444455556666:rule/r", {"events:TargetArn": targets})


def test_a_deny_for_any_value_not_like_refuses_a_request_with_one_value_outside_among_ours():
    decision = evaluate(
        _put("arn:aws:sqs:us-east-2:444455556666:ours", "arn:aws:sqs:us-east-2:1:theirs"), [DENY_OTHERS]
    )
    assert decision.denied_by == ("p", "OnlyOurs"), decision.reason


def test_a_deny_for_any_value_not_like_lets_a_request_whose_every_value_matches():
    assert evaluate(_put("arn:aws:sqs:us-east-2:444455556666:ours"), [DENY_OTHERS]).allowed


def test_a_deny_for_any_value_not_like_does_not_hold_for_a_request_without_the_key():
    """ForAnyValue is false where the request has no value for the key, with a negated operator too (IAM User Guide,
    reference_policies_condition-single-vs-multi-valued-context-keys.html): a Deny written so lets such a request
    through, and the evaluator must say so rather than refuse it."""
    request = Request("events:PutTargets", "arn:aws:events:us-east-2:444455556666:rule/r")
    assert evaluate(request, [DENY_OTHERS]).allowed


def test_an_allow_for_all_values_holds_for_a_request_without_the_key():
    """ "The ForAllValues set operator also returns true if there are no context keys in the request" (IAM User Guide,
    reference_policies_condition_examples-multi-valued-context-keys.html): an Allow on aws:TagKeys admits an
    untagged request."""
    allow = Policy(
        "p",
        {
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "ec2:CreateTags",
                    "Resource": "*",
                    "Condition": {"ForAllValues:StringEquals": {"aws:TagKeys": ["Name"]}},
                }
            ]
        },
    )
    assert evaluate(Request("ec2:CreateTags", "arn:aws:ec2:us-east-2:444455556666:instance/i-1"), [allow]).allowed

"""Round 11 attacker, on `higgsfield verify`'s new AWS checks (aws.karpenter-rules, aws.runner-projects): states of a
real account in which a check passes while what it claims is false. The account is moto's healthy prod stack with a
Karpenter pool (tests/cli/test_verify_checks.py `karpenter_rules`)."""

from __future__ import annotations

from tests.cli.test_verify_checks import (  # noqa: F401 (fixtures)
    SPOT_RULE,
    aws,
    aws_ctx,
    karpenter_plan,
    karpenter_rules,
    one,
    plan,
    subnets,
)


def test_a_disabled_interruption_rule_fails(aws_ctx, aws, karpenter_rules):  # noqa: F811
    """The deploy role may `events:DisableRule` on the stack's rules (its `events:*` on their names,
    components/delivery.py deploy_policy); a DISABLED rule keeps its target and sends nothing (EventBridge's
    RuleState, boto/botocore:botocore/data/events/2015-10-07/service-2.json@1.44.18). Karpenter then never hears of a
    spot interruption: its nodes die with their pods two minutes after the warning, undrained, and no checkpoint is
    saved. The check read the targets alone and passed. Verify on AWS: `aws events describe-rule --name
    higgsfield-STACK-karpenter-spot --query State`."""
    aws.client("events").disable_rule(Name=SPOT_RULE)
    outcome = one("aws.karpenter-rules", aws_ctx)
    assert outcome.status == "FAIL"
    assert f"{SPOT_RULE}: DISABLED" in outcome.evidence


def test_an_interruption_rule_matching_another_of_karpenters_events_fails(aws_ctx, aws, karpenter_rules):  # noqa: F811
    """The deploy role's PutRule on the spot rule is held to Karpenter's sources and detail types, in any pairing
    (components/delivery.py RuleSourcesAreKarpenters, RuleDetailTypesAreKarpenters): `aws.health` with the spot
    warning's detail type matches no event at all, and the rule, enabled and sending to the queue alone, passed.
    Verify on AWS: `aws events describe-rule --name higgsfield-STACK-karpenter-spot --query EventPattern`."""
    pattern = '{"source": ["aws.health"], "detail-type": ["EC2 Spot Instance Interruption Warning"]}'
    aws.client("events").put_rule(Name=SPOT_RULE, EventPattern=pattern)
    outcome = one("aws.karpenter-rules", aws_ctx)
    assert outcome.status == "FAIL"
    assert f"{SPOT_RULE}: matches {pattern}" in outcome.evidence

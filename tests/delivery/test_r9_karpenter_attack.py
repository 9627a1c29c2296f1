"""Round 9 attack on Karpenter in a stack CI deploys (components/delivery.py: the deploy role's `sqs:*` and
`events:*` on the stack's interruption queue and rules, RulesFeedOnlyTheStacksQueue, the boundary's allow on that
queue; components/karpenter.py queue_policy): requests the deploy role, or a role it makes under the stack boundary
(tests/delivery/test_ci_identity.py EVERYTHING), can send to open the account's events or the controller's queue to
another account. Decided by policies/iam_evaluation.py on the shipped prod plan's policies; each docstring names
what lets the request through, the source that says what the request does, the impact and the fix.

The queue's policy is only ever CreateQueue's (both ceilings refuse SetQueueAttributes and AddPermission), but
CreateQueue takes that policy itself: `Attributes` holds `Policy`, "the queue's policy"
(boto/botocore:botocore/data/sqs/2012-11-05/service-2.json@1.44.18, CreateQueueRequest), and SQS has no IAM
condition key on any attribute (Service Authorization Reference, list_amazonsqs: aws:RequestTag, aws:ResourceTag,
aws:TagKeys alone). So whoever may CreateQueue the stack's queue name may give that queue any policy: one that lets
another account receive from it, or send to it."""

from __future__ import annotations

import pytest

from components.karpenter import INTERRUPTION_EVENTS
from infra.core.names import interruption_queue, interruption_rule
from policies.iam_evaluation import Request, evaluate
from tests.delivery.test_ci_identity import ACCOUNT, EVERYTHING, REGION, _boundary, _deploy

QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{interruption_queue('prod')}"
ELSEWHERE = "eu-west-1"  # a region the prod stack does not run in
QUEUE_ELSEWHERE = f"arn:aws:sqs:{ELSEWHERE}:{ACCOUNT}:{interruption_queue('prod')}"


def _rule(event: str = "spot", region: str = REGION) -> str:
    return f"arn:aws:events:{region}:{ACCOUNT}:rule/{interruption_rule('prod', event)}"


def _pattern(event: str) -> dict[str, list[str]]:
    """PutRule's events:source and events:detail-type for the pattern components/karpenter.py gives an event's rule
    (`{"source": [SOURCE], "detail-type": [DETAIL_TYPE]}`): each key holds the values of its field
    (docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-conditions.html, examples 1 to 5)."""
    source, detail_type = INTERRUPTION_EVENTS[event]
    return {"events:source": [source], "events:detail-type": [detail_type]}


def test_the_deploy_role_makes_no_queue_of_the_stacks_name_in_another_region():
    """`_interruption_queue_arn` was `arn:aws:sqs:*:ACCOUNT:higgsfield-prod-interruptions`: the deploy role could
    CreateQueue that name in every region, with a Policy attribute letting another account ReceiveMessage. Impact:
    with the next test's rule, a standing feed of the account's events to that account, unseen by the stack (its
    queue is in its own region). Fix: the stack's region in the queue's ARN (deploy_policy, boundary_policy,
    RulesFeedOnlyTheStacksQueue)."""
    decision = evaluate(Request("sqs:CreateQueue", QUEUE_ELSEWHERE), [_deploy()])
    assert decision.reason == "no identity policy allows it", decision.reason


def test_the_stacks_rules_feed_no_queue_of_its_name_in_another_region():
    """RulesFeedOnlyTheStacksQueue matched the queue's name in any region: a rule named like the stack's (any event
    pattern: AWS API calls via CloudTrail included) could target the queue of that name made in another region with
    another account's reader in its policy (the test above)."""
    request = Request("events:PutTargets", _rule("audit"), {"events:TargetArn": [QUEUE_ELSEWHERE]})
    decision = evaluate(request, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RulesFeedOnlyTheStacksQueue"), decision.reason


def test_the_deploy_role_makes_no_rule_of_the_stacks_name_in_another_region():
    """The rules' ARN pattern had `*` for the region: rules of the stack's names in every region, where no
    interruption of the stack happens (a pattern of Karpenter's events, which the stack's own region allows)."""
    decision = evaluate(Request("events:PutRule", _rule("audit", ELSEWHERE), _pattern("spot")), [_deploy()])
    assert decision.reason == "no identity policy allows it", decision.reason


@pytest.mark.parametrize("action", ["sqs:CreateQueue", "sqs:DeleteQueue", "sqs:PurgeQueue", "sqs:SendMessage"])
def test_a_role_under_the_boundary_only_receives_from_the_interruption_queue(action):
    """The boundary allowed `sqs:*` on the queue, though Karpenter's controller, the one stack role that uses it,
    receives, deletes messages and reads the queue's URL alone (karpenter_policy AllowInterruptionQueueActions). A
    bounded role given `*` (its identity policy is the deploy role's to write) could DeleteQueue and, 60 seconds
    later ("If you delete a queue, you must wait at least 60 seconds before creating a queue with the same name":
    botocore's CreateQueue, as above), CreateQueue it with a policy that lets another account send the controller
    forged spot interruptions (on which it drains and deletes the node named) or read the stack's events; PurgeQueue
    drops the warnings the controller drains nodes on. Fix: the boundary allows the controller's calls alone."""
    decision = evaluate(Request(action, QUEUE), [EVERYTHING], _boundary())
    assert decision.reason == "not allowed by the permissions boundary delivery-boundary", decision.reason


def test_the_deploy_role_cannot_replace_the_interruption_queue_with_one_whose_policy_it_chose():
    """deploy_policy's `sqs:*` on the queue includes DeleteQueue and CreateQueue, and CreateQueue's Policy is
    unseen by IAM (module docstring): the deploy role deletes the live queue and, a minute later, makes it again
    under the same name and URL (the controller keeps polling it) with a policy that lets another account send or
    receive. Impact: forged interruptions from outside for as long as the queue stays, or, with a rule of the stack's
    name matching API calls (next test), the account's events read from outside. Fixed: the deploy role may not
    DeleteQueue (QueuesAreMadeOnce; a CreateQueue of a live name with other attributes fails), so a live queue's
    policy stays CreateQueue's, and removing Karpenter is an administrator's, which `higgsfield diff` refuses and
    names. A first CreateQueue of a stack with no karpenter pool yet stays open, as CreateKey's Policy is for keys
    (the policy pack's sqs-queue-policy-own-services checks it in `pulumi up`)."""
    decision = evaluate(Request("sqs:DeleteQueue", QUEUE), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "QueuesAreMadeOnce"), decision.reason


def test_the_stacks_rules_match_only_the_events_karpenter_handles():
    """`events:*` on `rule/higgsfield-prod-karpenter-*` let the deploy role PutRule any pattern under that name:
    AWS API calls via CloudTrail (every service's, with their request parameters), and PutRule's State
    ENABLED_WITH_ALL_CLOUDTRAIL_MANAGEMENT_EVENTS adds the read-only ones (RuleState:
    boto/botocore:botocore/data/events/2015-10-07/service-2.json@1.44.18). RulesFeedOnlyTheStacksQueue keeps them in
    the stack's queue, which is only as closed as its CreateQueue policy (the test above). Fixed: PutRule is
    refused where the pattern's detail-type is not one of Karpenter's (RuleDetailTypesAreKarpenters, in the deploy
    role's managed policy: components/delivery.py reach_denials)."""
    context = {"events:source": ["aws.iam"], "events:detail-type": ["AWS API Call via CloudTrail"]}
    decision = evaluate(Request("events:PutRule", _rule("audit"), context), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RuleSourcesAreKarpenters"), decision.reason


def test_a_rule_of_the_stacks_name_matches_no_api_call_of_karpenters_sources():
    """An aws.ec2 source is Karpenter's, but "AWS API Call via CloudTrail" of aws.ec2 carries every EC2 call's
    parameters (user data included): the detail type decides."""
    context = {"events:source": ["aws.ec2"], "events:detail-type": ["AWS API Call via CloudTrail"]}
    decision = evaluate(Request("events:PutRule", _rule("audit"), context), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RuleDetailTypesAreKarpenters"), decision.reason


def test_a_rule_of_the_stacks_name_adds_no_other_detail_type_beside_karpenters():
    context = _pattern("spot")
    context["events:detail-type"] = [*context["events:detail-type"], "AWS API Call via CloudTrail"]
    decision = evaluate(Request("events:PutRule", _rule(), context), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RuleDetailTypesAreKarpenters"), decision.reason


def test_a_rule_of_the_stacks_name_names_its_detail_type():
    """A pattern without `detail-type` matches every detail type of its source (CloudTrail's API calls of aws.ec2
    among them), and PutRule then carries no events:detail-type (eb-use-conditions.html, example 4, for
    events:source)."""
    context = {"events:source": ["aws.ec2"]}
    decision = evaluate(Request("events:PutRule", _rule(), context), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RulesNameTheirDetailType"), decision.reason


def test_a_rule_of_the_stacks_name_names_its_source():
    """A pattern of Karpenter's detail type alone matches an event of that detail type from any source: one an
    account's principal puts on the default bus with PutEvents, a forged spot interruption the controller drains
    a node on."""
    context = {"events:detail-type": [INTERRUPTION_EVENTS["spot"][1]]}
    decision = evaluate(Request("events:PutRule", _rule(), context), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RulesNameTheirSource"), decision.reason


@pytest.mark.parametrize("event", sorted(INTERRUPTION_EVENTS))
def test_the_deploy_role_puts_each_rule_karpenter_needs(event):
    """The pattern components/karpenter.py gives each rule, as PutRule's keys carry it (_pattern). Unverified: that
    EventBridge fills events:source and events:detail-type for a PutRule as the guide's examples show; the AWS CLI,
    as the deploy role of a staging stack, checks it: `aws events put-rule --name higgsfield-staging-karpenter-spot
    --event-pattern '{"source":["aws.ec2"],"detail-type":["EC2 Spot Instance Interruption Warning"]}'` succeeds,
    and with `"detail-type":["AWS API Call via CloudTrail"]` it is AccessDenied (docs/security-ci.md)."""
    decision = evaluate(Request("events:PutRule", _rule(event), _pattern(event)), [_deploy()])
    assert decision.allowed, decision.reason


@pytest.mark.xfail(
    strict=True,
    reason="open: no IAM key carries a target's DeadLetterConfig (list_amazoneventbridge: events:TargetArn is the "
    "target's ARN); unverified on AWS (docs/security-ci.md); `higgsfield verify` (aws.karpenter-rules) detects such a "
    "target once put",
)
def test_a_target_of_the_stacks_rule_sends_no_dead_letter_to_another_account():
    """PutTargets' Target has DeadLetterConfig.Arn, an SQS queue that receives every event the target could not take
    (boto/botocore:botocore/data/events/2015-10-07/service-2.json@1.44.18, Target), "for errors that result from
    missing permissions to a target, or a target resource that no longer exists" without a retry
    (docs.aws.amazon.com/eventbridge/latest/userguide/rule-dlq.html). RulesFeedOnlyTheStacksQueue reads
    events:TargetArn, which the Service Authorization Reference describes as the ARN of a target put to a rule; the
    request below carries what it documents (the target, the stack's queue) and not the dead-letter queue of
    another account. Impact, if EventBridge accepts a dead-letter queue of another account: a rule whose target
    fails sends its events out, which the rule-pattern denials keep to Karpenter's (the region's EC2 instance state
    changes and interruption warnings, AWS Health events). Verify on AWS, as the
    deploy role: `aws events put-targets --rule higgsfield-staging-karpenter-spot --targets
    'Id=1,Arn=<the queue ARN>,DeadLetterConfig={Arn=<another account's queue ARN>}'` must be AccessDenied."""
    decision = evaluate(Request("events:PutTargets", _rule("audit"), {"events:TargetArn": [QUEUE]}), [_deploy()])
    assert not decision.allowed, decision.reason

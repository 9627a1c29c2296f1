"""Round 18, attacked: `higgsfield verify` aws.node-claim-creators (infra/cli/verify/checks.py) reads from the API
server's audit log who made the NodeClaims under Karpenter's instances. The deploy role is the cluster's admin: each
attack here is a NodeClaim it makes, or hides, which the check must report. The audit log is answered as CloudWatch Logs
answers FilterLogEvents: the records of the cluster's group and the asked stream prefix, between startTime and endTime,
that the JSON filter pattern selects (the pattern's syntax: docs.aws.amazon.com/AmazonCloudWatch/latest/logs/
FilterAndPatternSyntax.html, `{ $.a.b = "text" }`, numbers, `&&`, `||` and parentheses)."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from infra.cli.verify import checks
from policies.iam_evaluation import Request, evaluate
from tests.cli.test_verify_checks import (  # noqa: F401 (fixtures)
    CLUSTER,
    DEPLOY_SESSION,
    GROUP_ASG,
    HOUR_AGO,
    NOW,
    REGION,
    _claims,
    _instance,
    _vpc_holding,
    aws,
    aws_ctx,
    one,
    plan,
)
from tests.cli.test_verify_checks import (
    audit_record as _record,
)
from tests.delivery.test_ci_identity import ACCOUNT, _deploy

STREAM = "kube-apiserver-audit-0123"


def _selects(pattern: str, record: dict) -> bool:
    """Whether the JSON filter pattern `pattern` selects `record` (the subset the check writes)."""
    tokens = re.findall(
        r'\(|\)|&&|\|\||!=|=|"[^"]*"|\$\.[\w.]+|-?\d+', pattern.strip().removeprefix("{").removesuffix("}")
    )
    at = 0

    def value(selector: str) -> Any:
        node: Any = record
        for key in selector[2:].split("."):
            node = node.get(key) if isinstance(node, dict) else None
        return node

    def atom() -> bool:
        nonlocal at
        if tokens[at] == "(":
            at += 1
            held = either()
            assert tokens[at] == ")", pattern
            at += 1
            return held
        selector, op, literal = tokens[at : at + 3]
        at += 3
        found = value(selector)
        wanted: Any = literal[1:-1] if literal.startswith('"') else int(literal)
        same = found == wanted and type(found) is type(wanted)
        return same if op == "=" else not same

    def both() -> bool:
        nonlocal at
        held = atom()
        while at < len(tokens) and tokens[at] == "&&":
            at += 1
            held = atom() and held
        return held

    def either() -> bool:
        nonlocal at
        held = both()
        while at < len(tokens) and tokens[at] == "||":
            at += 1
            held = both() or held
        return held

    held = either()
    assert at == len(tokens), pattern
    return held


def _audit_log(aws_ctx, records: list[tuple[datetime.datetime, dict]]) -> None:  # noqa: F811
    """The cluster's control-plane log group holding `records` (when each arrived), answering FilterLogEvents."""
    client = boto3.client("logs", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    asked: dict = {}

    def keep(params: dict, **_: Any) -> None:
        asked.clear()
        asked.update(params)

    def answer(**_: Any) -> tuple[AWSResponse, dict]:
        assert asked["logGroupName"] == f"/aws/eks/{CLUSTER}/cluster", asked
        events = [
            {"logStreamName": STREAM, "timestamp": ms, "message": json.dumps(record), "eventId": f"e{n}"}
            for n, (at, record) in enumerate(records)
            if STREAM.startswith(asked.get("logStreamNamePrefix", ""))
            and asked.get("startTime", 0) <= (ms := int(at.timestamp() * 1000)) <= asked.get("endTime", ms)
            and _selects(asked.get("filterPattern", '{ $.kind = "Event" }'), record)
        ]
        return AWSResponse(None, 200, {}, None), {"events": events}

    client.meta.events.register("before-parameter-build.logs.FilterLogEvents", keep)
    client.meta.events.register("before-call.logs.FilterLogEvents", answer)
    aws_ctx.clients["logs"] = client


KARPENTERS = (HOUR_AGO, _record(checks.KARPENTER_USER))


def test_the_filter_pattern_reader_selects_the_checks_claim_creates():
    """The reader above, on the check's own pattern: a create of a NodeClaim, not of a NodePool, not a get."""
    assert _selects(checks.CLAIM_CREATES, _record("u"))
    assert not _selects(checks.CLAIM_CREATES, _record("u", verb="get"))
    assert not _selects(checks.CLAIM_CREATES, _record("u", ref={"resource": "nodepools"}))


def test_a_claim_the_deploy_role_applies_server_side_fails(aws_ctx):
    """`kubectl apply --server-side -f claim.yaml`: an apply patch (PATCH, application/apply-patch+yaml) of a claim
    that does not exist creates it, answering 201 (patchResource's createNewObject, forceAllowCreate, wasCreated:
    kubernetes/kubernetes:staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go@00f75347), and the audit
    record's verb is the request's, `patch` (RequestInfoFactory: PATCH is "patch", kubernetes/kubernetes:staging/src/
    k8s.io/apiserver/pkg/endpoints/request/requestinfo.go@db8b216c). A PUT cannot create a custom resource
    (customResourceStrategy.AllowCreateOnUpdate is false: kubernetes/kubernetes:staging/src/k8s.io/
    apiextensions-apiserver/pkg/registry/customresource/strategy.go@f9cfc9d9) and a claim's spec is immutable once
    made (`self == oldSelf`: aws/karpenter-provider-aws:pkg/apis/crds/karpenter.sh_nodeclaims.yaml@v1.14.1), so a
    patch that answers 201 is the one other way a claim is made."""
    _claims(aws_ctx, [HOUR_AGO])
    uri = "/apis/karpenter.sh/v1/nodeclaims/forged?fieldManager=kubectl&force=true"
    applied = _record(DEPLOY_SESSION, verb="patch", code=201, uri=uri, ref={"name": "forged"}, audit_id="ab1e")
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, applied)])
    outcome = one("aws.node-claim-creators", aws_ctx)
    assert outcome.status == "FAIL" and f"{DEPLOY_SESSION} created NodeClaim forged (ab1e)" in outcome.evidence, outcome


def test_a_claim_created_with_a_query_parameter_that_only_names_dry_run_fails(aws_ctx):
    """The API server reads a create's options from the query's own keys (dryRun, fieldManager, fieldValidation:
    Convert_url_Values_To_v1_CreateOptions, kubernetes/kubernetes:staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/
    zz_generated.conversion.go@025f2834) and ignores the rest, so `kubectl create --raw
    '/apis/karpenter.sh/v1/nodeclaims?xdryRun=1' -f claim.yaml` makes the claim while its requestURI holds `dryRun=`."""
    _claims(aws_ctx, [HOUR_AGO])
    made = _record(DEPLOY_SESSION, uri="/apis/karpenter.sh/v1/nodeclaims?xdryRun=1", audit_id="d0d0")
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, made)])
    outcome = one("aws.node-claim-creators", aws_ctx)
    assert outcome.status == "FAIL" and f"{DEPLOY_SESSION} created NodeClaim" in outcome.evidence, outcome


def test_a_server_side_apply_that_changed_an_existing_claim_passes(aws_ctx):
    """Karpenter and others patch a claim's metadata and status (200): only a patch that made the claim is one."""
    _claims(aws_ctx, [HOUR_AGO])
    relabel = _record(DEPLOY_SESSION, verb="patch", code=200, uri="/apis/karpenter.sh/v1/nodeclaims/gpu-h100-x1b2c")
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, relabel)])
    assert one("aws.node-claim-creators", aws_ctx).status == "PASS"


def test_a_claim_created_with_a_token_the_deploy_role_requested_for_karpenters_account_fails(aws_ctx):
    """The cluster's admin acts as Karpenter's service account: `kubectl create token karpenter -n kube-system` (a
    TokenRequest, logged as a create of serviceaccounts/token by the deploy role; `--bound-object-kind Pod` of
    Karpenter's pod alike), then the claim created with that token is logged as Karpenter's. The kubelet asks the
    tokens a pod mounts (system:node:NAME): any other asker of Karpenter's is named."""
    _claims(aws_ctx, [HOUR_AGO])
    forged = _record(checks.KARPENTER_USER, user={"extra": {"authentication.kubernetes.io/credential-id": ["JTI=x"]}})
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, _token_request(DEPLOY_SESSION, "70ce")), (HOUR_AGO, forged)])
    outcome = one("aws.node-claim-creators", aws_ctx)
    assert outcome.status == "FAIL" and f"{DEPLOY_SESSION} asked a token of {checks.KARPENTER_USER} (70ce)" in (
        outcome.evidence
    ), outcome


def test_the_tokens_the_kubelet_asks_for_karpenters_pod_pass(aws_ctx):
    _claims(aws_ctx, [HOUR_AGO])
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, _token_request("system:node:ip-10-40-1-10.ec2.internal", "k1"))])
    assert one("aws.node-claim-creators", aws_ctx).status == "PASS"


@pytest.mark.xfail(
    strict=True,
    reason="a pod of the cluster's admin running as Karpenter's service account (any name, in kube-system), a legacy "
    "token Secret of that account, or an exec into Karpenter's pod: the kubelet asks the first's token, the token "
    "controller fills the second, the third is Karpenter's own, so the claim created with it is logged as "
    "Karpenter's, with no token asked by another. A pod's serviceAccountName is in its body: whether EKS's audit "
    "policy (AWS's, not the stack's) logs a pod's create at Request level is not read here; if it does, one more "
    "query finds a pod of Karpenter's account made by anyone but the ReplicaSet controller. The Secret's annotation "
    "and what an exec ran stay out of that record's reach",
)
def test_a_claim_created_from_a_pod_of_the_deploy_roles_own_running_as_karpenter_fails(aws_ctx):
    _claims(aws_ctx, [HOUR_AGO])
    pod = _record(
        DEPLOY_SESSION,
        uri=f"/api/v1/namespaces/{checks.KARPENTER_NAMESPACE}/pods",
        ref={"resource": "pods", "apiGroup": "", "namespace": checks.KARPENTER_NAMESPACE},
        audit_id="9od",
    )
    kubelet = _token_request("system:node:ip-10-40-1-11.ec2.internal", "k2")
    forged = _record(checks.KARPENTER_USER, audit_id="f0f0")
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, pod), (HOUR_AGO, kubelet), (HOUR_AGO, forged)])
    assert one("aws.node-claim-creators", aws_ctx).status == "FAIL"


def _token_request(who: str, audit_id: str) -> dict:
    """A TokenRequest for Karpenter's service account, as the audit log records it."""
    return _record(
        who,
        uri=f"/api/v1/namespaces/{checks.KARPENTER_NAMESPACE}/serviceaccounts/{checks.KARPENTER_ACCOUNT}/token",
        ref={
            "resource": "serviceaccounts",
            "subresource": "token",
            "apiGroup": "",
            "namespace": checks.KARPENTER_NAMESPACE,
            "name": checks.KARPENTER_ACCOUNT,
        },
        audit_id=audit_id,
    )


def test_the_deploy_role_may_take_karpenters_tags_off_an_instance():
    """Decided, allowed: the deploy role's DeleteTags on an instance of the cluster names no denial, so the forged
    claim's instance can leave the check's DescribeInstances filter (the cluster's owned tag, karpenter.sh/nodepool).
    Karpenter keeps running it: its Get of a claim's instance filters by state alone, its List (garbage collection) by
    these tags (DefaultProvider.Get and List, aws/karpenter-provider-aws:pkg/providers/instance/instance.go@v1.14.1),
    so an untagged instance is neither lost nor collected."""
    instance = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
    tags = {f"aws:ResourceTag/kubernetes.io/cluster/{CLUSTER}": "owned", "aws:ResourceTag/karpenter.sh/nodepool": "x"}
    for key in (f"kubernetes.io/cluster/{CLUSTER}", "karpenter.sh/nodepool"):
        assert evaluate(Request("ec2:DeleteTags", instance, {**tags, "aws:TagKeys": [key]}), [_deploy()]).allowed


def test_a_claim_whose_instance_the_deploy_role_untagged_is_found_by_the_vpcs_instances(aws_ctx):
    """aws.node-claim-creators reads the audit log from an hour before the oldest instance its DescribeInstances
    filter finds (the cluster's owned tag and karpenter.sh/nodepool), and the deploy role may delete either tag from an
    instance (test_the_deploy_role_may_take_karpenters_tags_off_an_instance): a claim it made days ago, its instance
    untagged, falls before the window of Karpenter's newer instances, so that check passes. The instance is still
    in the cluster's VPC, where aws.vpc-instances names every instance that is no planned group's (by the Auto
    Scaling tag no caller writes), no planned pool's and not the layout client."""
    two_days_ago = NOW - datetime.timedelta(days=2)
    _claims(aws_ctx, [HOUR_AGO])  # Karpenter's newer instance; the forged claim's no longer carries the tags
    _audit_log(aws_ctx, [KARPENTERS, (two_days_ago, _record(DEPLOY_SESSION, audit_id="01d"))])
    assert one("aws.node-claim-creators", aws_ctx).status == "PASS"
    untagged = {**_instance(7), "LaunchTime": two_days_ago}
    _vpc_holding(aws_ctx, _instance(1, **{checks.ASG_TAG: GROUP_ASG}), untagged)
    outcome = one("aws.vpc-instances", aws_ctx)
    assert outcome.status == "FAIL" and "i-00000000000000007" in outcome.evidence, outcome

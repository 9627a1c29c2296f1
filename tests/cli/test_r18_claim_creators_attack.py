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
from collections.abc import Callable
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
    """Whether the filter pattern `pattern` selects `record` (the subset the check writes): a JSON pattern, or terms
    in double quotes, each of which the event's text must hold."""
    if not pattern.strip().startswith("{"):
        return all(term in json.dumps(record) for term in re.findall(r'"([^"]*)"', pattern))
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

    def joined(operator: str, operand: Callable[[], bool], join: Callable[[bool, bool], bool]) -> bool:
        """Operands joined by `operator`, left to right; each read before it is joined, so every token is read."""
        nonlocal at
        held = operand()
        while at < len(tokens) and tokens[at] == operator:
            at += 1
            held = join(operand(), held)
        return held

    def both() -> bool:
        return joined("&&", atom, lambda a, b: a and b)

    def either() -> bool:  # `&&` binds tighter
        return joined("||", both, lambda a, b: a or b)

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
    _fails_naming(aws_ctx, [KARPENTERS, (HOUR_AGO, applied)], f"{DEPLOY_SESSION} created NodeClaim forged (ab1e)")


def test_a_claim_created_with_a_query_parameter_that_only_names_dry_run_fails(aws_ctx):
    """The API server reads a create's options from the query's own keys (dryRun, fieldManager, fieldValidation:
    Convert_url_Values_To_v1_CreateOptions, kubernetes/kubernetes:staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/
    zz_generated.conversion.go@025f2834) and ignores the rest, so `kubectl create --raw
    '/apis/karpenter.sh/v1/nodeclaims?xdryRun=1' -f claim.yaml` makes the claim while its requestURI holds `dryRun=`."""
    _claims(aws_ctx, [HOUR_AGO])
    made = _record(DEPLOY_SESSION, uri="/apis/karpenter.sh/v1/nodeclaims?xdryRun=1", audit_id="d0d0")
    _fails_naming(aws_ctx, [KARPENTERS, (HOUR_AGO, made)], f"{DEPLOY_SESSION} created NodeClaim")


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
    _fails_naming(
        aws_ctx,
        [KARPENTERS, (HOUR_AGO, _token_request(DEPLOY_SESSION, "70ce")), (HOUR_AGO, forged)],
        f"{DEPLOY_SESSION} asked a token of {checks.KARPENTER_USER} (70ce)",
    )


def test_the_tokens_the_kubelet_asks_for_karpenters_pod_pass(aws_ctx):
    _claims(aws_ctx, [HOUR_AGO])
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, _token_request("system:node:ip-10-40-1-10.ec2.internal", "k1"))])
    assert one("aws.node-claim-creators", aws_ctx).status == "PASS"


@pytest.mark.parametrize("account", checks.CONTROLLER_ACCOUNTS)
def test_a_pod_made_with_a_controllers_token_the_deploy_role_asked_for_fails(aws_ctx, account):
    """A pod running as Karpenter's account that the ReplicaSet controller made is Karpenter's own (and a ReplicaSet
    the Deployment controller made, a pod another workload controller made with no body in its record): the cluster's
    admin holding one of those controllers' tokens (`kubectl create token replicaset-controller -n kube-system`)
    would make them as that controller. kube-controller-manager asks its controllers' tokens itself."""
    _claims(aws_ctx, [HOUR_AGO])
    asked = _token_request(DEPLOY_SESSION, "c0de", account)
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, asked)])
    outcome = one("aws.node-claim-creators", aws_ctx)
    who = f"system:serviceaccount:{checks.KARPENTER_NAMESPACE}:{account}"
    assert outcome.status == "FAIL" and f"{DEPLOY_SESSION} asked a token of {who} (c0de)" in outcome.evidence, outcome


def test_the_tokens_kube_controller_manager_asks_for_its_controllers_pass(aws_ctx):
    _claims(aws_ctx, [HOUR_AGO])
    asked = [
        (HOUR_AGO, _token_request(checks.CONTROLLER_MANAGER, f"m{i}", a))
        for i, a in enumerate(checks.CONTROLLER_ACCOUNTS)
    ]
    _audit_log(aws_ctx, [KARPENTERS, *asked])
    assert one("aws.node-claim-creators", aws_ctx).status == "PASS"


KARPENTERS_POD = "karpenter-6f7d8c9b5-x2x4q"
KARPENTER_SPEC = {"serviceAccountName": checks.KARPENTER_ACCOUNT, "containers": [{"name": "c", "image": "busybox"}]}
# Karpenter's own pod template, as the chart renders it (charts/karpenter/templates/deployment.yaml@v1.14.1: one
# container, `controller`, the chart's image with its tag and digest), and its pod as stored once EKS's Pod Identity
# webhook has added the token volume of audience pods.eks.amazonaws.com and the agent's address to its container, its
# image kept (the webhook's expected patch: aws/amazon-eks-pod-identity-webhook:pkg/handler/testdata/
# containercredentials/rawPodWithoutVolumes.pod.yaml@0d3fed429b773932f451f844124edd8589925f08).
KARPENTERS_OWN = {
    "serviceAccountName": checks.KARPENTER_ACCOUNT,
    "containers": [{"name": "controller", "image": f"{checks.KARPENTER_IMAGE}:1.14.1@sha256:{'e' * 64}"}],
}
IDENTITY = {
    "name": "eks-pod-identity-token",
    "projected": {"sources": [{"serviceAccountToken": {"audience": "pods.eks.amazonaws.com", "path": "token"}}]},
}
KARPENTERS_POD_STORED = {
    **KARPENTERS_OWN,
    "containers": [
        {
            **KARPENTERS_OWN["containers"][0],
            "env": [{"name": "AWS_CONTAINER_CREDENTIALS_FULL_URI", "value": "http://169.254.170.23/v1/credentials"}],
        }
    ],
    "volumes": [IDENTITY],
}


def _pod_write(who: str, audit_id: str, verb: str = "create", name: str = "", sub: str = "", **more: Any) -> dict:
    """A write of a pod in Karpenter's namespace (a subresource of one: `sub`), as EKS's policy logs the core group's
    writes: at RequestResponse, with the request's body and the stored object when given in `more`."""
    ref = {"resource": "pods", "apiGroup": "", "namespace": checks.KARPENTER_NAMESPACE}
    ref |= {"name": name} if name else {}
    ref |= {"subresource": sub} if sub else {}
    uri = (
        f"/api/v1/namespaces/{checks.KARPENTER_NAMESPACE}/pods"
        + (f"/{name}" if name else "")
        + (f"/{sub}" if sub else "")
    )
    code = 201 if verb == "create" and not sub else 200
    return _record(
        who,
        verb=verb,
        code=more.pop("code", code),
        uri=uri,
        ref=ref,
        audit_id=audit_id,
        level=more.pop("level", "RequestResponse"),
        **more,
    )


def _workload_write(who: str, resource: str, name: str, verb: str = "create", pod_spec: dict | None = None) -> dict:
    """A write of a workload in Karpenter's namespace whose stored object's pod template runs `pod_spec`."""
    group = "batch" if resource in ("jobs", "cronjobs") else "" if resource == "replicationcontrollers" else "apps"
    template = {"template": {"spec": pod_spec or KARPENTER_SPEC}}
    stored = {
        "metadata": {"name": name},
        "spec": {"jobTemplate": {"spec": template}} if resource == "cronjobs" else template,
    }
    prefix = f"/apis/{group}/v1" if group else "/api/v1"
    return _record(
        who,
        verb=verb,
        code=201 if verb == "create" else 200,
        uri=f"{prefix}/namespaces/{checks.KARPENTER_NAMESPACE}/{resource}" + ("" if verb == "create" else f"/{name}"),
        ref={"resource": resource, "apiGroup": group, "namespace": checks.KARPENTER_NAMESPACE, "name": name},
        audit_id=f"w-{resource}",
        level="RequestResponse",
        responseObject=stored,
    )


FORGED = (HOUR_AGO, _record(checks.KARPENTER_USER, audit_id="f0f0"))


def test_a_claim_created_from_a_pod_of_the_deploy_roles_own_running_as_karpenter_fails(aws_ctx):
    """`kubectl run x -n kube-system --overrides '{"spec":{"serviceAccountName":"karpenter"}}'`: the kubelet asks the
    pod's token (system:node:NAME, as for Karpenter's own), and the claim created with it is logged as Karpenter's.
    The pod's create, logged with its body, names the account and who made it: Karpenter's own pods are the ReplicaSet
    controller's."""
    _claims(aws_ctx, [HOUR_AGO])
    pod = _pod_write(
        DEPLOY_SESSION, "9od", requestObject={"spec": KARPENTER_SPEC}, responseObject={"spec": KARPENTER_SPEC}
    )
    _fails_naming(
        aws_ctx,
        [KARPENTERS, (HOUR_AGO, pod), _kubelet(), FORGED],
        f"{DEPLOY_SESSION} created pod (a generated name) running as {checks.KARPENTER_USER} (9od)",
    )


def test_a_pod_a_webhook_set_to_run_as_karpenter_fails(aws_ctx):
    """A mutating webhook of the admin's sets serviceAccountName after the request: the body does not name Karpenter's
    account, the stored pod (responseObject) does."""
    _claims(aws_ctx, [HOUR_AGO])
    pod = _pod_write(DEPLOY_SESSION, "w3b", requestObject={"spec": {}}, responseObject={"spec": KARPENTER_SPEC})
    _fails_naming(aws_ctx, [KARPENTERS, (HOUR_AGO, pod), FORGED], "created pod (a generated name) running as")


@pytest.mark.parametrize("resource", checks.WORKLOADS)
def test_a_workload_of_the_deploy_roles_own_running_as_karpenter_fails(aws_ctx, resource):
    """`kubectl create deployment` (or a Job, DaemonSet, ...) in kube-system whose pods run as Karpenter's account: the
    controllers make the pods, so only the workload's record names who asked for them."""
    _claims(aws_ctx, [HOUR_AGO])
    _fails_naming(
        aws_ctx,
        [KARPENTERS, (HOUR_AGO, _workload_write(DEPLOY_SESSION, resource, "x")), FORGED],
        f"{DEPLOY_SESSION} created {resource} x running as",
    )


def test_a_workload_patched_to_run_as_karpenter_fails(aws_ctx):
    """`kubectl patch deployment coredns --type json -p '[{"op": "replace", "path":
    "/spec/template/spec/serviceAccountName", "value": "karpenter"}]'`: a JSON patch's body is a list of operations,
    the stored object (responseObject) holds the account."""
    _claims(aws_ctx, [HOUR_AGO])
    patched = _workload_write(DEPLOY_SESSION, "deployments", "coredns", verb="patch")
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, patched), FORGED])
    outcome = one("aws.node-claim-creators", aws_ctx)
    assert outcome.status == "FAIL" and f"{DEPLOY_SESSION} patched deployments coredns running as" in outcome.evidence


def test_a_claim_created_with_a_secret_based_token_of_karpenters_account_fails(aws_ctx):
    """A Secret of type kubernetes.io/service-account-token annotated with Karpenter's account, which the token
    controller fills: the API server annotates every request its token authenticates (authentication.k8s.io/
    legacy-token, the account; legacy-token-manual-secret, the Secret), the claim's create among them."""
    _claims(aws_ctx, [HOUR_AGO])
    notes = {checks.LEGACY_TOKEN: checks.KARPENTER_USER, f"{checks.LEGACY_TOKEN}-manual-secret": "kept"}
    forged = _record(checks.KARPENTER_USER, audit_id="1e9a", annotations=notes)
    _fails_naming(
        aws_ctx,
        [KARPENTERS, (HOUR_AGO, forged)],
        f"a Secret-based token of {checks.KARPENTER_USER} (Secret kept) was used (1e9a)",
    )


def test_another_accounts_secret_based_token_passes(aws_ctx):
    """The pattern selects a record holding both phrases anywhere: another account's legacy token reading Karpenter's
    service account is no token of Karpenter's."""
    _claims(aws_ctx, [HOUR_AGO])
    notes = {checks.LEGACY_TOKEN: "system:serviceaccount:default:ci"}
    read = _record(
        "system:serviceaccount:default:ci", verb="get", code=200, annotations=notes, ref={"name": checks.KARPENTER_USER}
    )
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, read)])
    assert one("aws.node-claim-creators", aws_ctx).status == "PASS"


@pytest.mark.parametrize(
    ("verb", "sub", "code"),
    [("get", "exec", 101), ("create", "exec", 101), ("create", "attach", 101), ("patch", "ephemeralcontainers", 200)],
    ids=["websocket-exec", "spdy-exec", "attach", "debug"],
)
def test_a_shell_in_karpenters_pod_fails(aws_ctx, verb, sub, code):
    """`kubectl exec` (kubectl's websocket exec is a GET, the audit verb `get`), `kubectl attach` or `kubectl debug`
    (an ephemeral container) into Karpenter's pod reads the token it mounts, and the claim made with it is
    Karpenter's own."""
    _claims(aws_ctx, [HOUR_AGO])
    shell = _pod_write(DEPLOY_SESSION, "3xec", verb=verb, name=KARPENTERS_POD, sub=sub, code=code)
    _fails_naming(
        aws_ctx,
        [KARPENTERS, (HOUR_AGO, shell), FORGED],
        f"{DEPLOY_SESSION} ran {sub} in Karpenter's pod {KARPENTERS_POD} (3xec)",
    )


@pytest.mark.parametrize("shell", ["exec", "attach", "run"])
def test_a_shell_in_karpenters_pod_through_the_kubelets_proxy_fails(aws_ctx, shell):
    """`kubectl get --raw` of /api/v1/nodes/NAME/proxy/exec/kube-system/POD/controller (over a websocket: a `get`
    answered 101): the kubelet's API runs it (its exec, attach and run paths, all behind nodes/proxy:
    kubernetes/kubernetes:pkg/kubelet/server/auth_test.go@7caff55fd9c4689bb393da2654ec1cbe06cf4f44 AuthzTestCases), and
    the audit log holds the node's proxy request alone, no pods/exec."""
    _claims(aws_ctx, [HOUR_AGO])
    node = "ip-10-40-1-10.ec2.internal"
    proxied = _record(
        DEPLOY_SESSION,
        verb="get",
        code=101,
        uri=f"/api/v1/nodes/{node}/proxy/{shell}/kube-system/{KARPENTERS_POD}/controller?command=cat&output=1",
        ref={"resource": "nodes", "apiGroup": "", "name": node, "subresource": "proxy"},
        audit_id="pr0x",
        level="Request",
    )
    _fails_naming(
        aws_ctx,
        [KARPENTERS, (HOUR_AGO, proxied), FORGED],
        f"{DEPLOY_SESSION} ran {shell} in Karpenter's pod {KARPENTERS_POD} through node {node}'s proxy (pr0x)",
    )


def test_a_refused_exec_into_karpenters_pod_passes(aws_ctx):
    _claims(aws_ctx, [HOUR_AGO])
    shell = _pod_write(DEPLOY_SESSION, "3xec", verb="get", name=KARPENTERS_POD, sub="exec", code=403)
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, shell)])
    assert one("aws.node-claim-creators", aws_ctx).status == "PASS"


def test_a_healthy_deploy_of_karpenter_passes(aws_ctx):
    """What `pulumi up` and the cluster write for Karpenter: Helm's release Secrets in kube-system (metadata only), its
    Deployment created and patched by the deploy role, the ReplicaSet the Deployment controller makes, the pod the
    ReplicaSet controller makes, the scheduler's binding and the kubelet's status patch of it and the token it asks
    for the pod; beside it a DaemonSet of another account's and its pod, and a read of a node's metrics through its
    proxy."""
    _claims(aws_ctx, [HOUR_AGO])
    helm_secret = _record(
        DEPLOY_SESSION,
        uri=f"/api/v1/namespaces/{checks.KARPENTER_NAMESPACE}/secrets",
        ref={
            "resource": "secrets",
            "apiGroup": "",
            "namespace": checks.KARPENTER_NAMESPACE,
            "name": "sh.helm.release.v1.karpenter.v2",
        },
    )
    stored = {"spec": KARPENTERS_POD_STORED}
    upgraded = {**KARPENTERS_OWN, "containers": [{"name": "controller", "image": f"{checks.KARPENTER_IMAGE}:1.15.0"}]}
    records = [
        KARPENTERS,
        (HOUR_AGO, helm_secret),
        (
            HOUR_AGO,
            _workload_write(DEPLOY_SESSION, "deployments", checks.KARPENTER_DEPLOYMENT, pod_spec=KARPENTERS_OWN),
        ),
        (
            HOUR_AGO,
            _workload_write(
                DEPLOY_SESSION, "deployments", checks.KARPENTER_DEPLOYMENT, verb="patch", pod_spec=upgraded
            ),
        ),
        (
            HOUR_AGO,
            _workload_write(
                "system:serviceaccount:kube-system:deployment-controller", "replicasets", "karpenter-6f7d8c9b5"
            ),
        ),
        (HOUR_AGO, _pod_write(checks.POD_MAKER, "rs", requestObject={"spec": KARPENTERS_OWN}, responseObject=stored)),
        (
            HOUR_AGO,
            _workload_write(DEPLOY_SESSION, "daemonsets", "aws-node", pod_spec={"serviceAccountName": "aws-node"}),
        ),
        (
            HOUR_AGO,
            _pod_write(
                "system:serviceaccount:kube-system:daemon-set-controller",
                "ds",
                responseObject={"spec": {"serviceAccountName": "aws-node"}},
            ),
        ),
        (HOUR_AGO, _pod_write("system:kube-scheduler", "bind", name=KARPENTERS_POD, sub="binding", code=201)),
        (
            HOUR_AGO,
            _pod_write(
                "system:node:ip-10-40-1-10.ec2.internal",
                "st",
                verb="patch",
                name=KARPENTERS_POD,
                sub="status",
                responseObject=stored,
            ),
        ),
        _kubelet(),
        (
            HOUR_AGO,
            _record(
                "system:serviceaccount:monitoring:prometheus",
                verb="get",
                code=200,
                uri="/api/v1/nodes/ip-10-40-1-10.ec2.internal/proxy/metrics/cadvisor",
                ref={"resource": "nodes", "apiGroup": "", "name": "ip-10-40-1-10.ec2.internal", "subresource": "proxy"},
                level="Request",
            ),
        ),
    ]
    _audit_log(aws_ctx, records)
    outcome = one("aws.node-claim-creators", aws_ctx)
    assert outcome.status == "PASS", outcome


def test_a_claim_created_from_a_container_the_deploy_role_adds_to_karpenters_deployment_fails(aws_ctx):
    """`kubectl patch deployment karpenter` adding a container of the admin's: every container of the pod mounts
    Karpenter's token, and the chart runs Karpenter's image alone, so a template running another image is named."""
    _claims(aws_ctx, [HOUR_AGO])
    sidecar = {**KARPENTERS_OWN, "containers": [*KARPENTERS_OWN["containers"], {"name": "forger", "image": "busybox"}]}
    patched = _workload_write(
        DEPLOY_SESSION, "deployments", checks.KARPENTER_DEPLOYMENT, verb="patch", pod_spec=sidecar
    )
    _fails_naming(
        aws_ctx,
        [KARPENTERS, (HOUR_AGO, patched), FORGED],
        f"{DEPLOY_SESSION} patched deployments {checks.KARPENTER_DEPLOYMENT} running busybox as "
        f"{checks.KARPENTER_USER}",
    )


@pytest.mark.xfail(
    strict=True,
    reason="Karpenter's own Deployment is the deploy role's to write, and only its images are judged: a template of "
    "Karpenter's image alone whose container is sent elsewhere (env KUBERNETES_SERVICE_HOST of the admin's and, in "
    "place of the mounted service-account volume, one of the admin's with the same token and the admin's ca.crt: "
    "client-go's in-cluster config reads both) hands the controller's token to the admin's server; telling that from "
    "the chart's template would need the planned Deployment rendered and compared with the stored one",
)
def test_a_claim_created_with_the_token_karpenters_redirected_controller_sent_fails(aws_ctx):
    _claims(aws_ctx, [HOUR_AGO])
    redirected = {
        **KARPENTERS_OWN,
        "automountServiceAccountToken": False,
        "containers": [
            {**KARPENTERS_OWN["containers"][0], "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": "10.40.9.9"}]}
        ],
    }
    patched = _workload_write(
        DEPLOY_SESSION, "deployments", checks.KARPENTER_DEPLOYMENT, verb="patch", pod_spec=redirected
    )
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, patched), FORGED])
    assert one("aws.node-claim-creators", aws_ctx).status == "FAIL"


def _a_webhooks_pod_fails_naming(aws_ctx: Any, asked: dict, stored: dict, audit_id: str, line: str) -> None:
    """The ReplicaSet controller creates a pod of spec `asked` (requestObject), a mutating webhook of the admin's has it
    stored as `stored` (responseObject), the forged claim follows: the check fails naming `line`."""
    _claims(aws_ctx, [HOUR_AGO])
    pod = _pod_write(checks.POD_MAKER, audit_id, requestObject={"spec": asked}, responseObject={"spec": stored})
    _fails_naming(aws_ctx, [KARPENTERS, (HOUR_AGO, pod), _kubelet(), FORGED], line)


def test_a_container_a_webhook_adds_to_karpenters_pod_fails(aws_ctx):
    """A mutating webhook of the admin's adds a container to the pod the ReplicaSet controller makes for Karpenter's
    Deployment: the Deployment's and ReplicaSet's records hold the chart's template, the stored pod
    (responseObject) the added container, which mounts Karpenter's token."""
    added = {**KARPENTERS_OWN, "containers": [*KARPENTERS_OWN["containers"], {"name": "forger", "image": "busybox"}]}
    _a_webhooks_pod_fails_naming(
        aws_ctx,
        KARPENTERS_OWN,
        added,
        "w3c",
        f"{checks.POD_MAKER} created pod (a generated name) running busybox as {checks.KARPENTER_USER} (w3c)",
    )


def test_a_pod_of_another_replicaset_a_webhook_set_to_run_as_karpenter_fails(aws_ctx):
    """A mutating webhook of the admin's sets serviceAccountName on the pod the ReplicaSet controller makes for
    another Deployment (coredns): the controller asked for coredns's account, the stored pod runs as Karpenter's."""
    asked = {"serviceAccountName": "coredns", "containers": [{"name": "coredns", "image": "coredns"}]}
    _a_webhooks_pod_fails_naming(
        aws_ctx,
        asked,
        {**asked, "serviceAccountName": checks.KARPENTER_ACCOUNT},
        "w3d",
        f"{checks.POD_MAKER} created pod (a generated name) running as {checks.KARPENTER_USER}, asked as coredns (w3d)",
    )


def test_a_claim_created_from_a_padded_pod_whose_body_the_log_lost_fails(aws_ctx):
    """A pod create whose record outgrows CloudWatch's 256 KB entry (a padded annotation) keeps its metadata only
    (aws/aws-eks-best-practices:content/security/docs/detective.md@1d3b1085713aeb200cca60f72392ac99811ce565): its
    account is not in the log, so a pod there with no body, made by anyone but a workload's controller, is named."""
    _claims(aws_ctx, [HOUR_AGO])
    pod = _pod_write(DEPLOY_SESSION, "b1g", level="Metadata")
    _fails_naming(
        aws_ctx,
        [KARPENTERS, (HOUR_AGO, pod), _kubelet(), FORGED],
        f"{DEPLOY_SESSION} created pod (a generated name), its body not in the log (b1g)",
    )


def test_a_padded_workload_whose_body_the_log_lost_fails(aws_ctx):
    """The same for a workload: its pods are a controller's, so a Deployment written with no body in its record is
    named, whoever wrote it."""
    _claims(aws_ctx, [HOUR_AGO])
    padded = _workload_write(DEPLOY_SESSION, "deployments", "x")
    del padded["responseObject"]
    _fails_naming(
        aws_ctx,
        [KARPENTERS, (HOUR_AGO, padded), FORGED],
        f"{DEPLOY_SESSION} created deployments x, its body not in the log",
    )


@pytest.mark.xfail(
    strict=True,
    reason="the kubelet writes each pod's token to the node's disk (/var/lib/kubelet/pods/UID/volumes/"
    "kubernetes.io~projected/), so a pod of the admin's in any namespace, privileged or with a hostPath volume, "
    "placed on Karpenter's node (`kubectl debug node/NAME` alike) reads Karpenter's token without running as its "
    "account; the check reads Karpenter's namespace only, not every pod of the cluster that may reach a node's files",
)
def test_a_claim_created_with_the_token_a_host_pod_read_from_karpenters_node_fails(aws_ctx):
    _claims(aws_ctx, [HOUR_AGO])
    host = {"nodeName": "ip-10-40-1-11.ec2.internal", "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}
    pod = _record(
        DEPLOY_SESSION,
        uri="/api/v1/namespaces/default/pods",
        ref={"resource": "pods", "apiGroup": "", "namespace": "default"},
        level="RequestResponse",
        requestObject={"spec": host},
        responseObject={"spec": {**host, "serviceAccountName": "default"}},
    )
    _audit_log(aws_ctx, [KARPENTERS, (HOUR_AGO, pod), FORGED])
    assert one("aws.node-claim-creators", aws_ctx).status == "FAIL"


def test_each_filter_pattern_fits_cloudwatchs_limit():
    """FilterLogEvents takes a filterPattern of 1,024 characters at most (its FilterPattern shape, read from the
    installed botocore's model of CloudWatch Logs)."""
    longest = boto3.client("logs", region_name=REGION).meta.service_model.shape_for("FilterPattern").metadata["max"]
    assert longest == 1024
    patterns = (
        checks.CLAIM_CREATES,
        checks.KARPENTER_TOKENS,
        checks.KARPENTER_PODS,
        checks.KARPENTER_WORKLOADS,
        checks.KARPENTER_LEGACY_TOKENS,
        checks.NODE_PROXIES,
    )
    assert all(len(p) <= longest for p in patterns)


def _kubelet() -> tuple[datetime.datetime, dict]:
    """The kubelet asking a token of Karpenter's account for a pod it runs."""
    return (HOUR_AGO, _token_request("system:node:ip-10-40-1-11.ec2.internal", "k2"))


def _fails_naming(aws_ctx: Any, events: list, line: str) -> None:
    """aws.node-claim-creators, over the audit log of `events`, fails naming `line` among its evidence."""
    _audit_log(aws_ctx, events)
    outcome = one("aws.node-claim-creators", aws_ctx)
    assert outcome.status == "FAIL" and line in outcome.evidence, outcome


def _token_request(who: str, audit_id: str, account: str = checks.KARPENTER_ACCOUNT) -> dict:
    """A TokenRequest for a service account of Karpenter's namespace (Karpenter's), as the audit log records it."""
    return _record(
        who,
        uri=f"/api/v1/namespaces/{checks.KARPENTER_NAMESPACE}/serviceaccounts/{account}/token",
        ref={
            "resource": "serviceaccounts",
            "subresource": "token",
            "apiGroup": "",
            "namespace": checks.KARPENTER_NAMESPACE,
            "name": account,
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

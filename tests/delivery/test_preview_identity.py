"""The preview identity sees what a preview needs and nothing else (issue 34 point 5): in the cluster
it reads the kinds the program manages and no Secret, pod, container log or event (RBAC rules evaluated
here as the API server's RBAC authorizer matches them); in AWS it decrypts with the stack's secrets
key alone and reads no logs or secrets (policies/iam_evaluation.py)."""

from __future__ import annotations

import pytest

from components.delivery import PREVIEW_GROUP, preview_cluster_role, preview_cluster_role_binding, preview_policy
from policies.iam_evaluation import Policy, Request, evaluate
from tests.conftest import STACKS, config_of, plan_of

# The Training Operator's upstream manifests, applied by the kustomize Directory (one resource in the
# plan): kubeflow/trainer:manifests/base and manifests/overlays/standalone@v1.9.4, and our overlay's Role.
OPERATOR_KINDS = {
    ("", "Namespace"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("", "ServiceAccount"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("", "Service"),
    ("apps", "Deployment"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
}
NOT_OBJECTS = {"helm.sh", "kustomize"}  # a Helm release and a kustomize directory are no kind of their own


def _resource(kind: str) -> str:
    """A kind's resource name as Kubernetes guesses it (UnsafeGuessKindToResource,
    kubernetes/kubernetes:staging/src/k8s.io/apimachinery/pkg/api/meta/restmapper.go@v1.35.0)."""
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


def can(verb: str, group: str, resource: str) -> bool:
    """Whether the preview group may `verb` `group`/`resource`: its one ClusterRole's rules, bound to it."""
    binding = preview_cluster_role_binding()
    role = preview_cluster_role()
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": PREVIEW_GROUP}]
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"] for rule in role["rules"]
    )


def _managed_kinds(stack: str) -> set[tuple[str, str]]:
    kinds = set(OPERATOR_KINDS)
    for r in plan_of(stack).resources:
        if not r.type.startswith("kubernetes:") or r.type.split(":")[1].split("/")[0] in NOT_OBJECTS:
            continue
        group_version, kind = r.type.split(":")[1], r.type.split(":")[2].removesuffix("Patch")
        group = group_version.split("/")[0]
        kinds.add(("" if group == "core" else group, kind))
    return kinds - {("", "Secret"), ("", "ConfigMap")}  # ConfigMaps: per namespace, below


@pytest.mark.parametrize("stack", STACKS)
def test_the_preview_reads_every_kind_the_program_manages(stack):
    for group, kind in _managed_kinds(stack):
        for verb in ("get", "list", "watch"):
            assert can(verb, group, _resource(kind)), (stack, group, kind, verb)


@pytest.mark.parametrize(
    ("group", "resource"),
    [
        ("", "pods/log"),
        ("", "secrets"),
        ("", "pods"),
        ("", "events"),
        ("", "pods/exec"),
        ("kubeflow.org", "pytorchjobs"),
    ],
)
def test_the_preview_reads_no_container_log_secret_pod_event_or_teams_job(group, resource):
    assert not any(can(verb, group, resource) for verb in ("get", "list", "watch", "create"))


def test_the_preview_reads_no_configmap_cluster_wide():
    """A team's ConfigMaps may hold anything: the ClusterRole grants none."""
    assert not any(can(verb, "", "configmaps") for verb in ("get", "list", "watch"))


@pytest.mark.parametrize("stack", STACKS)
def test_the_preview_reads_configmaps_in_each_namespace_the_program_keeps_its_own_in(stack):
    plan = plan_of(stack)
    objects = [r.inputs for r in plan.resources if r.type.startswith("kubernetes:")]
    holding = {o["metadata"]["namespace"] for o in objects if o.get("kind") == "ConfigMap"}
    granted = {
        o["metadata"]["namespace"]
        for o in objects
        if o.get("kind") == "RoleBinding"
        and o["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": PREVIEW_GROUP}]
    }
    roles = {
        o["metadata"]["namespace"]: o["rules"]
        for o in objects
        if o.get("kind") == "Role" and o["metadata"]["name"] == PREVIEW_GROUP
    }
    team_namespaces = {t.name for t in plan.config.scheduler.teams}
    assert holding and holding <= granted and not granted & team_namespaces, (holding, granted)
    for namespace in granted:
        assert roles[namespace] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]


@pytest.mark.parametrize("verb", ["create", "update", "patch", "delete", "escalate", "bind", "impersonate"])
def test_the_preview_changes_nothing_in_the_cluster(verb):
    role = preview_cluster_role()
    assert all(verb not in rule["verbs"] for rule in role["rules"])


def test_the_preview_role_and_binding_are_in_every_plan_with_ci():
    plan = plan_of("prod")
    names = {r.inputs["metadata"]["name"] for r in plan.resources if r.type.startswith("kubernetes:rbac")}
    assert PREVIEW_GROUP in names


def _preview() -> Policy:
    return Policy.of("preview", preview_policy(config_of("prod").delivery))


def test_the_preview_decrypts_with_the_stacks_secrets_key():
    key = config_of("prod").delivery.state_key_arn
    assert evaluate(Request("kms:Decrypt", key), [_preview()]).allowed


ACCOUNT = config_of("prod").delivery.account_id


@pytest.mark.parametrize(
    "request_",
    [
        Request("kms:Decrypt", f"arn:aws:kms:us-east-2:{ACCOUNT}:key/fsx-or-cluster-secrets"),
        Request("logs:GetLogEvents", f"arn:aws:logs:us-east-2:{ACCOUNT}:log-group:/aws/containerinsights/x"),
        Request("logs:FilterLogEvents", "*"),
        Request("logs:StartQuery", "*"),
        Request("secretsmanager:GetSecretValue", "*"),
        Request("ssm:GetParameter", "*"),
        Request("s3:GetObject", "arn:aws:s3:::the-datasets-bucket/weights.pt"),
        Request("eks:AccessKubernetesApi", "*"),
    ],
    ids=lambda r: r.action,
)
def test_the_preview_reads_no_logs_no_secrets_and_no_other_key(request_):
    assert not evaluate(request_, [_preview()]).allowed


def _state(key: str) -> str:
    return f"arn:aws:s3:::{config_of('prod').delivery.state_bucket}/.pulumi/{key}"


@pytest.mark.parametrize(
    "request_",
    [
        Request("s3:DeleteObject", _state("locks/organization/higgsfield/prod/0b1e-a-deploys-lock.json")),
        Request("s3:PutObject", _state("locks/organization/higgsfield/prod/a-lock-that-blocks-the-next-deploy.json")),
        Request("s3:PutObject", _state("stacks/organization/higgsfield/prod.json")),
        Request("s3:DeleteObject", _state("stacks/organization/higgsfield/prod.json")),
    ],
    ids=["delete-a-deploys-lock", "leave-a-lock", "write-the-state", "delete-the-state"],
)
def test_the_preview_writes_nothing_in_the_backend_not_even_a_lock(request_):
    """Attack: a pull request's preview deletes the lock of the deploy running beside it (a second `pulumi up`
    could then run), or leaves one that blocks the next deploy. A diy preview takes no lock: nothing to grant."""
    assert not evaluate(request_, [_preview()]).allowed


def test_the_preview_reads_the_state():
    assert evaluate(Request("s3:GetObject", _state("stacks/organization/higgsfield/prod.json")), [_preview()]).allowed

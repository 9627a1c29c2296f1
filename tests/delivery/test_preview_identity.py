"""The preview identity sees what a preview needs and nothing else (issue 34 point 5): in the cluster
it reads the kinds the program manages, those a team's namespace may hold anything in only where the
program keeps its own, and no Secret, pod, container log or event (the plan's RBAC objects evaluated
as the API server's RBAC authorizer matches them, infra/offline/rendered.py); in AWS it decrypts
with the stack's secrets key alone and reads no logs or secrets (policies/iam_evaluation.py)."""

from __future__ import annotations

import pytest

from components.delivery import PREVIEW_GROUP, preview_cluster_role, preview_cluster_role_binding, preview_policy
from infra.core.versions import TRAINING_OPERATOR_NAMESPACE
from infra.offline.rendered import Call, Scoped, allows, rule_allows, rules_for_group
from policies.iam_evaluation import Policy, Request, evaluate
from tests.conftest import STACKS, config_of, plan_of

# The Training Operator's upstream objects, applied by the kustomize Directory (one resource in the
# plan), by kind and namespace ("" cluster-scoped): kubeflow/trainer:manifests/base and
# manifests/overlays/standalone@v1.9.4 (the overlay's `namespace: kubeflow` puts every namespaced one
# there), and our overlay's Role and RoleBinding (components/kustomize/training-operator). Its one
# Secret (the overlay's secretGenerator) is left out with the plan's.
_OPERATOR = TRAINING_OPERATOR_NAMESPACE
OPERATOR_OBJECTS = {
    ("", "Namespace", ""),
    ("apiextensions.k8s.io", "CustomResourceDefinition", ""),
    ("", "ServiceAccount", _OPERATOR),
    ("rbac.authorization.k8s.io", "ClusterRole", ""),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding", ""),
    ("rbac.authorization.k8s.io", "Role", _OPERATOR),
    ("rbac.authorization.k8s.io", "RoleBinding", _OPERATOR),
    ("", "Service", _OPERATOR),
    ("apps", "Deployment", _OPERATOR),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", ""),
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


READS = ("get", "list", "watch")
# Namespaced kinds the preview reads only in the namespaces the program keeps its own in, never
# cluster-wide: a team's may hold anything (a ConfigMap's data; a workload's env, command and image;
# a Service per replica of every job, named after it).
PER_NAMESPACE = [
    ("", "configmaps"),
    ("", "services"),
    ("apps", "daemonsets"),
    ("apps", "deployments"),
    ("batch", "cronjobs"),
]


def preview_rules(stack: str) -> list[Scoped]:
    """The rules the plan's RBAC objects bind to the preview group, the ClusterRole's and each Role's."""
    plan = plan_of(stack)
    objects = [r.inputs for r in plan.resources if r.type.startswith("kubernetes:rbac.authorization.k8s.io/")]
    return rules_for_group(objects, PREVIEW_GROUP)


def _managed(stack: str) -> set[tuple[str, str, str]]:
    """Every object the program manages, as (API group, resource, namespace), but its Secrets."""
    managed = {(group, _resource(kind), namespace) for group, kind, namespace in OPERATOR_OBJECTS}
    for r in plan_of(stack).resources:
        if not r.type.startswith("kubernetes:") or r.type.split(":")[1].split("/")[0] in NOT_OBJECTS:
            continue
        group_version, kind = r.type.split(":")[1], r.type.split(":")[2].removesuffix("Patch")
        group = group_version.split("/")[0]
        managed.add(("" if group == "core" else group, _resource(kind), r.inputs["metadata"].get("namespace", "")))
    return {m for m in managed if m[:2] != ("", "secrets")}


@pytest.mark.parametrize("stack", STACKS)
def test_the_preview_reads_every_object_the_program_manages_where_it_is(stack):
    """A preview of an update first gets the live object (pulumi/pulumi-kubernetes:provider/pkg/await/
    await.go@v4.32.0 Update): it reads each kind the program manages in each namespace it keeps one in."""
    rules = preview_rules(stack)
    for group, resource, namespace in _managed(stack):
        for verb in READS:
            assert allows(rules, Call(verb, group, resource, namespace)), (stack, group, resource, namespace, verb)


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize(("group", "resource"), PER_NAMESPACE)
def test_the_preview_reads_no_deployment_daemonset_cronjob_service_or_configmap_of_a_team(stack, group, resource):
    rules = preview_rules(stack)
    for team in plan_of(stack).config.scheduler.teams:
        assert not any(allows(rules, Call(verb, group, resource, team.name)) for verb in READS), team.name


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize(("group", "resource"), PER_NAMESPACE)
def test_the_preview_reads_a_per_namespace_kind_only_where_the_program_keeps_one(stack, group, resource):
    """Granted by a Role in each namespace the plan keeps such an object in, by none cluster-wide,
    and in no team namespace."""
    rules = preview_rules(stack)
    everywhere = [s for s in rules if s.namespace is None and rule_allows(s.rule, Call("list", group, resource, ""))]
    granted = {
        s.namespace
        for s in rules
        if s.namespace is not None and rule_allows(s.rule, Call("list", group, resource, s.namespace))
    }
    keeping = {namespace for g, r, namespace in _managed(stack) if (g, r) == (group, resource)}
    team_namespaces = {t.name for t in plan_of(stack).config.scheduler.teams}
    assert not everywhere, everywhere
    assert keeping and keeping <= granted and not granted & team_namespaces, (keeping, granted)


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


@pytest.mark.parametrize("verb", ["create", "update", "patch", "delete", "escalate", "bind", "impersonate"])
def test_the_preview_changes_nothing_in_the_cluster(verb):
    assert all(verb not in s.rule["verbs"] for stack in STACKS for s in preview_rules(stack))


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

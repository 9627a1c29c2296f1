"""The preview identity sees what a preview needs and nothing else (issue 34 point 5): in the cluster
it gets each object the program manages, reads the kinds a team's namespace may hold anything in only
where the program keeps its own, gets a team namespace's objects by the program's names alone, and
reads no Secret, pod, container log or event (the plan's RBAC objects evaluated as the API server's
RBAC authorizer matches them, infra/offline/rendered.py); in AWS it decrypts with the stack's secrets
key alone and reads no logs or secrets (policies/iam_evaluation.py)."""

from __future__ import annotations

import pytest

from components.delivery import PREVIEW_GROUP, preview_cluster_role, preview_cluster_role_binding, preview_policy
from components.kubernetes_objects import PREVIEW_GETS
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
# cluster-wide: a team's may hold anything (a workload's env, command and image; a Service per replica of
# every job, named after it).
PER_NAMESPACE = [
    ("", "services"),
    ("apps", "daemonsets"),
    ("apps", "deployments"),
    ("batch", "cronjobs"),
]
# Namespaced kinds the program keeps in team namespaces, where the team makes its own too (a
# ServiceAccount's annotations, a claim's name and size, its Roles and their bindings), and ConfigMaps, which
# a team's may hold anything in, and a platform namespace's what the platform's programs write.
TEAM_KINDS = [
    ("", "configmaps"),
    ("", "limitranges"),
    ("", "persistentvolumeclaims"),
    ("", "resourcequotas"),
    ("", "serviceaccounts"),
    ("networking.k8s.io", "networkpolicies"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("rbac.authorization.k8s.io", "roles"),
]


def preview_rules(stack: str) -> list[Scoped]:
    """The rules the plan's RBAC objects bind to the preview group, the ClusterRole's and each Role's."""
    plan = plan_of(stack)
    objects = [r.inputs for r in plan.resources if r.type.startswith("kubernetes:rbac.authorization.k8s.io/")]
    return rules_for_group(objects, PREVIEW_GROUP)


def _managed_objects(stack: str) -> set[tuple[str, str, str, str | None]]:
    """Every object the program manages, as (API group, resource, namespace, name), but its Secrets;
    the Training Operator's by kind (name None: the upstream overlay names them)."""
    managed: set[tuple[str, str, str, str | None]] = {
        (group, _resource(kind), namespace, None) for group, kind, namespace in OPERATOR_OBJECTS
    }
    for r in plan_of(stack).resources:
        if not r.type.startswith("kubernetes:") or r.type.split(":")[1].split("/")[0] in NOT_OBJECTS:
            continue
        group_version, kind = r.type.split(":")[1], r.type.split(":")[2].removesuffix("Patch")
        group, metadata = group_version.split("/")[0], r.inputs["metadata"]
        managed.add(
            ("" if group == "core" else group, _resource(kind), metadata.get("namespace", ""), metadata["name"])
        )
    return {m for m in managed if m[:2] != ("", "secrets")}


def _managed(stack: str) -> set[tuple[str, str, str]]:
    """Every object the program manages, as (API group, resource, namespace), but its Secrets."""
    return {m[:3] for m in _managed_objects(stack)}


@pytest.mark.parametrize("stack", STACKS)
def test_the_preview_gets_every_object_the_program_manages_by_its_name(stack):
    """A preview's one read of an object in the state is a get by its name, when it previews an update
    (pulumi/pulumi-kubernetes:provider/pkg/await/await.go@v4.32.0 Update: `client.Get` of the old
    object's name; Check and Diff read the state and the discovery documents, not the object)."""
    rules = preview_rules(stack)
    for group, resource, namespace, name in _managed_objects(stack):
        assert allows(rules, Call("get", group, resource, namespace, name)), (stack, group, resource, namespace, name)


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize(("group", "resource"), TEAM_KINDS)
def test_the_preview_lists_and_watches_nothing_a_team_made_in_its_namespace(stack, group, resource):
    """Attack: a pull request's preview (its code runs with the preview identity) lists a team's
    ServiceAccounts and their annotations, its claims' names and sizes, its Roles. A preview never
    lists or watches (the get by name above is all it reads)."""
    rules = preview_rules(stack)
    for team in plan_of(stack).config.scheduler.teams:
        assert not any(allows(rules, Call(verb, group, resource, team.name)) for verb in ("list", "watch")), team.name


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize(("group", "resource"), TEAM_KINDS)
def test_in_a_team_namespace_the_preview_gets_the_programs_objects_and_no_other(stack, group, resource):
    """The program's ResourceQuotas, LimitRange, network policies, claims, its patch of the `default`
    ServiceAccount and its Roles in a team's namespace are read by name; an object of the same kind the
    team made beside them (a claim, a ServiceAccount for its jobs, a Role) is refused."""
    rules = preview_rules(stack)
    teams = {t.name for t in plan_of(stack).config.scheduler.teams}
    ours = {(ns, name) for g, r, ns, name in _managed_objects(stack) if (g, r) == (group, resource) and ns in teams}
    # claims only with FSx; no ConfigMap of the program's is in a team namespace (the team's own are refused below)
    assert ours or resource in ("persistentvolumeclaims", "configmaps"), (stack, resource)
    for namespace, name in ours:
        assert allows(rules, Call("get", group, resource, namespace, name)), (namespace, name)
    for team in teams:
        assert not allows(rules, Call("get", group, resource, team, "made-by-the-team")), team


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


def _waits_for(stack: str, urn: str) -> set[str]:
    """What a resource of the plan is created after: its dependencies, theirs, and a component's children."""
    plan = plan_of(stack)
    by_urn = {r.urn: r for r in plan.resources}
    children: dict[str, list[str]] = {}
    for r in plan.resources:
        children.setdefault(r.parent or "", []).append(r.urn)
    seen: set[str] = set()
    todo = list(by_urn[urn].dependencies)
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo += [*by_urn[current].dependencies, *children.get(current, [])] if current in by_urn else []
    return seen


@pytest.mark.parametrize("stack", STACKS)
def test_the_preview_gets_in_a_team_namespace_are_made_once_the_namespace_exists(stack):
    """A first deploy creates the Role and RoleBinding that let the preview get a team namespace's
    objects by name after the namespace, not before (the API server refuses an object in a namespace
    that does not exist)."""
    plan = plan_of(stack)
    namespaces = {
        r.inputs["metadata"]["name"]: r.urn for r in plan.resources if r.type == "kubernetes:core/v1:Namespace"
    }
    for team in plan.config.scheduler.teams:
        gets = [
            r
            for r in plan.resources
            if r.type.startswith("kubernetes:rbac.authorization.k8s.io/v1:Role")
            and r.inputs["metadata"] == {"name": PREVIEW_GETS, "namespace": team.name}
        ]
        assert len(gets) == 2, (team.name, gets)
        for r in gets:
            assert namespaces[team.name] in _waits_for(stack, r.urn), (team.name, r.type)


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

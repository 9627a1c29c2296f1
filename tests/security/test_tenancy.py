"""Teams can't touch each other's data or jump each other's queues: the admission policies'
CEL evaluated on compliant and violating objects (cel-expr-python: cel-cpp, the CEL spec's
semantics on the JSON the API server hands the policy), and the prod plan's namespaces, bindings, Pod Security
labels, NetworkPolicies, service accounts and CNI setting."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

import pytest

from components import tenancy
from components.teams import rules_of
from infra.core.names import KUBEFLOW_JOB_KINDS
from infra.offline import jobs, kubernetes_schema
from tests import admission_cel
from tests.conftest import STACKS, config_of, plan_of

VISION = tenancy.TeamRules(name="vision", queue="experiments", priority_classes=("batch-low",), uid=20003)


class Authorizer:
    """The `authorizer` of Kubernetes' CEL (k8s.io/apiserver/pkg/cel/library/authz.go):
    `authorizer.group(g).resource(r)[.namespace(ns)][.name(n)].check(verb).allowed()`, answered by
    `allow(group, resource, namespace, verb)` - the requester's RBAC rules, evaluated by the test."""

    def __init__(self, allow: admission_cel.Allow):
        self.allow = allow


NOBODY = Authorizer(lambda *_: False)


def verdicts(
    policy: dict,
    obj: dict | None,
    *,
    operation: str = "CREATE",
    user: str | None = None,
    old: dict | None = None,
    authorizer: Authorizer = NOBODY,
    options: dict | None = None,
    resource: tuple[str, str] | None = None,
) -> Iterator[tuple[str, bool]]:
    """(message, whether `obj` passes it) of each validation in turn, evaluated as the API server
    does: the variables in order, then the validations, with `object` the admitted object (null on
    DELETE), `oldObject` what it replaces, `request` the operation and the requester (by default
    `_creator`'s, with the DELETE's `options` and, where given, the (group, resource) requested), and
    `authorizer` the requester's rights."""
    request: dict = {"operation": operation, "userInfo": {"username": user or _creator(obj)}}
    if options is not None:
        request["options"] = options
    if resource is not None:
        request["resource"] = {"group": resource[0], "version": "v1", "resource": resource[1]}
    activation: dict = {**admission_cel.plain({"object": obj, "oldObject": old, "request": request}), "variables": {}}
    for variable in policy["spec"].get("variables", []):
        try:
            value = admission_cel.evaluate(variable["expression"], activation, authorizer.allow)
        except admission_cel.EvaluationError as error:
            raise AssertionError((variable["name"], error)) from error
        activation["variables"] = {**activation["variables"], variable["name"]: value}
    for validation in policy["spec"]["validations"]:
        try:
            value = admission_cel.evaluate(validation["expression"], activation, authorizer.allow)
        except admission_cel.EvaluationError as error:  # an evaluation error is a denial too
            raise AssertionError((validation["message"], error)) from error
        assert isinstance(value, bool), (validation["message"], value)
        yield validation["message"], value


# kube-controller-manager's account for the pods of each workload kind (its controllers run as their own
# service accounts in kube-system: components/tenancy.py CONTROLLER_USERS)
POD_CREATORS = {
    "ReplicaSet": "replicaset-controller",
    "StatefulSet": "statefulset-controller",
    "DaemonSet": "daemon-set-controller",
    "Job": "job-controller",
}


def _creator(obj: dict | None) -> str:
    """Who creates `obj`: a pod whose controller is a ReplicaSet, StatefulSet, DaemonSet or Job is that
    controller's (a team may not create one: test_volcano_groups.py), anything else a team member's."""
    owners = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    kinds = [r["kind"] for r in owners if r.get("controller") and r.get("kind") in POD_CREATORS]
    if (obj or {}).get("kind") == "Pod" and kinds:
        return f"{tenancy.CONTROLLER_USERS}{POD_CREATORS[kinds[0]]}"
    return "alice@vision"


def admitted(policy: dict, obj: dict | None, **request) -> dict[str, bool]:
    """Each validation's message -> whether `obj` passes it (every validation evaluated)."""
    return dict(verdicts(policy, obj, **request))


def denied_by(obj: dict, team: tenancy.TeamRules = VISION, **request) -> list[str]:
    return [message for message, ok in admitted(tenancy.admission_policy(team), obj, **request).items() if not ok]


def is_denied(obj: dict, team: tenancy.TeamRules, **request) -> bool:
    """Whether the API server refuses `obj`: one failed validation is enough, so this stops there."""
    return any(not ok for _, ok in verdicts(tenancy.admission_policy(team), obj, **request))


def _pod_spec(uid: int = 20003, **extra) -> dict:
    return {
        "securityContext": {"runAsUser": uid, "runAsGroup": uid, "fsGroup": uid},
        "containers": [
            {
                "name": "pytorch",
                "image": "x",
                "securityContext": {"allowPrivilegeEscalation": False},
                # as the platform renders a job's container (infra/offline/pods.py request_in_full): every limit
                # requested, and the LimitRange's CPU default beside them
                "resources": {
                    "requests": {"cpu": "500m", "memory": "64Gi", "nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32},
                    "limits": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32, "memory": "64Gi"},
                },
            }
        ],
        **extra,
    }


def _job(queue: str | None = "experiments", priority: str | None = "batch-low", **spec_changes) -> dict:
    policy = {k: v for k, v in {"queue": queue, "priorityClass": priority, "minAvailable": 2}.items() if v is not None}
    template = {"spec": _pod_spec(**spec_changes)}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "vision"},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "Running", "schedulingPolicy": policy},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": 1, "template": copy.deepcopy(template)},
            },
        },
    }


# The pods controllers make carry their controller's reference (a pod on a GPU node must: tenancy's
# node_share_validations); the API server's garbage collector removes one whose owner is not there.
OWNED_BY = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-1", "controller": True}]


def _pod(**spec_changes) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "vision", "ownerReferences": copy.deepcopy(OWNED_BY)},
        "spec": {"schedulerName": "volcano", **_pod_spec(**spec_changes)},
    }


def _podgroup(queue: str | None = "experiments", priority: str | None = None) -> dict:
    spec = {
        "minMember": 2,
        **({"queue": queue} if queue else {}),
        **({"priorityClassName": priority} if priority else {}),
    }
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "vision"},
        "spec": spec,
    }


# --- the CEL on sample objects ---------------------------------------------------------------


@pytest.mark.parametrize(
    "obj",
    [_job(), _job(priority=None), _pod(), _podgroup(), _podgroup(priority="batch-low")],
    ids=["job", "job-no-class", "pod", "podgroup", "podgroup-class"],
)
def test_a_compliant_object_passes_every_rule(obj):
    assert denied_by(obj) == []


VIOLATIONS = {
    "job_in_another_teams_queue": (_job(queue="production"), "submits to queue"),
    "job_naming_no_queue": (_job(queue=None), "submits to queue"),
    "job_jumping_to_production_critical": (_job(priority="production-critical"), "may use priority classes"),
    "podgroup_in_another_queue": (_podgroup(queue="production"), "PodGroups go to queue"),
    "podgroup_without_a_queue": (_podgroup(queue=None), "PodGroups go to queue"),
    "podgroup_with_a_forbidden_class": (
        _podgroup(priority="production-critical"),
        "PodGroups may use priority classes",
    ),
    "pod_with_a_forbidden_class": (_pod(priorityClassName="production-critical"), "pods may use priority classes"),
    "job_template_with_a_forbidden_class": (_job(priorityClassName="batch-high"), "pods may use priority classes"),
    "pod_as_another_teams_uid": (_pod(uid=20001), "run as UID 20003"),
    "job_without_an_identity": (_job(securityContext={}), "run as UID 20003"),
    "pod_joining_another_teams_group": (
        _pod(
            securityContext={"runAsUser": 20003, "runAsGroup": 20003, "fsGroup": 20003, "supplementalGroups": [20001]}
        ),
        "no other supplementalGroups",
    ),
    "privileged_container": (
        _pod(containers=[{"name": "c", "image": "x", "securityContext": {"privileged": True}}]),
        "no privileged containers",
    ),
    "added_capability": (
        _pod(containers=[{"name": "c", "image": "x", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]),
        "no privileged containers",
    ),
    "host_path_volume": (_pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}]), "no hostPath"),
    "inline_csi_volume_of_the_file_system_root": (
        _pod(volumes=[{"name": "fsx", "csi": {"driver": "fsx.csi.aws.com", "volumeAttributes": {"mountname": "abc"}}}]),
        "no hostPath",
    ),
    "host_network": (_pod(hostNetwork=True), "no host network"),
    "readiness_probe_of_another_host": (
        _pod(
            containers=[{"name": "c", "image": "x", "readinessProbe": {"httpGet": {"host": "10.0.7.9", "port": 8080}}}]
        ),
        "no probe or lifecycle hook names a host",
    ),
    "pre_stop_hook_to_another_host": (
        _pod(
            containers=[
                {"name": "c", "image": "x", "lifecycle": {"preStop": {"tcpSocket": {"host": "10.0.7.9", "port": 22}}}}
            ]
        ),
        "no probe or lifecycle hook names a host",
    ),
    "gpu_pod_outside_volcano": (_pod(schedulerName="default-scheduler"), "GPU pods are scheduled by volcano"),
}


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_a_violating_object_is_denied_with_the_rule_it_breaks(case):
    obj, message = VIOLATIONS[case]
    denied = denied_by(obj)
    assert any(message in d for d in denied), denied


def test_a_container_running_as_another_uid_is_denied():
    pod = _pod()
    pod["spec"]["initContainers"] = [{"name": "sneak", "image": "x", "securityContext": {"runAsUser": 20001}}]
    assert any("containers run as UID 20003" in d for d in denied_by(pod))


def test_pod_naming_another_queue_by_annotation_or_label_is_denied():
    for where, key in (
        ("annotations", "scheduling.volcano.sh/queue-name"),
        ("annotations", "volcano.sh/queue-name"),
        ("labels", "volcano.sh/queue-name"),
    ):
        pod = _pod()
        pod["metadata"][where] = {key: "production"}
        assert any("may name only queue" in d for d in denied_by(pod)), (where, key)
        pod["metadata"][where] = {key: "experiments"}
        assert denied_by(pod) == []


def test_a_cpu_pod_may_use_the_default_scheduler():
    pod = _pod(
        schedulerName="default-scheduler",
        containers=[
            {
                "name": "c",
                "image": "x",
                "resources": {"requests": {"cpu": "1"}},
                "securityContext": {"allowPrivilegeEscalation": False},
            }
        ],
    )
    assert denied_by(pod) == []


def test_mpi_launcher_with_the_operators_injected_init_container_is_admitted():
    """The operator adds `kubectl-delivery` (no securityContext) to the launcher; the pod-level
    identity covers it (kubeflow/trainer:pkg/controller.v1/mpi/mpijob_controller.go@v1.9.4)."""
    pod = _pod(containers=[{"name": "launcher", "image": "x", "securityContext": {"allowPrivilegeEscalation": False}}])
    pod["spec"]["initContainers"] = [{"name": "kubectl-delivery", "image": "mpioperator/kubectl-delivery"}]
    pod["metadata"]["labels"] = dict(tenancy.LAUNCHER)
    assert denied_by(pod, user=tenancy.OPERATOR_USER) == []


def test_every_job_kind_is_checked():
    for kind, key in zip(KUBEFLOW_JOB_KINDS, ("pytorch", "tf", "mpi", "xgb", "jax", "paddle"), strict=True):
        job = _job(queue="production")
        job["kind"] = kind
        job["spec"][f"{key}ReplicaSpecs"] = job["spec"].pop("pytorchReplicaSpecs")
        assert any("submits to queue" in d for d in denied_by(job)), kind
        job["spec"]["runPolicy"]["schedulingPolicy"]["queue"] = "experiments"
        job["spec"][f"{key}ReplicaSpecs"]["Worker"]["template"]["spec"]["hostPID"] = True
        assert any("no host network" in d for d in denied_by(job)), kind


RENDERED = [
    (s, e, t.name)
    for s in STACKS
    for e in jobs.examples_for(config_of(s))
    for t in config_of(s).scheduler.teams
    if jobs.fits(e, config_of(s), team=t.name)
]  # a team whose quota holds no job of an example renders none


HEALTH_CHECKS = [(s, p.name) for s in STACKS for p in config_of(s).gpu_pools]


@pytest.mark.parametrize(("stack", "pool"), HEALTH_CHECKS, ids=["-".join(h) for h in HEALTH_CHECKS])
def test_the_rendered_health_check_passes_its_teams_admission_policy(stack, pool):
    """`healthcheck render STACK POOL | kubectl apply -f -` goes into a team namespace: every pod
    it makes (the Job's, and the NCCL PyTorchJob's) must be admitted there."""
    from infra.offline import healthcheck

    cfg = plan_of(stack).config
    team = cfg.scheduler.teams[0]
    for obj in healthcheck.render(cfg, pool, nodes=min(2, next(p for p in cfg.gpu_pools if p.name == pool).max_size)):
        if obj["kind"] == "Job":  # the policy sees its pods
            obj = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": team.name, "ownerReferences": copy.deepcopy(OWNED_BY)},
                "spec": obj["spec"]["template"]["spec"],
            }
        if obj["kind"] != "ConfigMap":
            assert denied_by(obj, rules_of(team, cfg.scheduler.priority_classes, pools=cfg.gpu_pools)) == [], obj[
                "kind"
            ]


@pytest.mark.parametrize(("stack", "example", "team"), RENDERED, ids=["-".join(r) for r in RENDERED])
def test_every_rendered_example_passes_its_teams_policy_and_fails_anothers(stack, example, team):
    cfg = plan_of(stack).config
    rules = {t.name: rules_of(t, cfg.scheduler.priority_classes, pools=cfg.gpu_pools) for t in cfg.scheduler.teams}
    job = jobs.workload_of(jobs.render(example, cfg, team=team))
    if job["kind"] in ("Deployment", "Job"):  # the policy sees their pods
        (template,) = jobs.pod_templates(job)
        job = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "namespace": team,
                "ownerReferences": copy.deepcopy(OWNED_BY),
                **template.get("metadata", {}),
            },
            "spec": template["spec"],
        }
    assert denied_by(job, rules[team]) == []
    for other, other_rules in rules.items():
        if other != team:
            assert is_denied(job, other_rules), f"{team}'s job admitted in {other}"


def _operator_pod(template: dict, team: str) -> dict:
    """A replica's pod as the Training Operator creates it: schedulerName volcano where the
    template names none (VolcanoControl.DecoratePodTemplateSpec, kubeflow/trainer:pkg/controller.v1/
    control/podgroup_control.go@v1.9.4, for launchers too: mpi/mpijob_controller.go newLauncher)."""
    spec = copy.deepcopy(template["spec"])
    spec.setdefault("schedulerName", "volcano")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": team,
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "j", "uid": "u-2", "controller": True}
            ],
            **copy.deepcopy(template.get("metadata", {})),
        },
        "spec": spec,
    }


def test_the_pods_the_operator_makes_of_every_rendered_job_are_admitted_and_not_outside_volcano(stack):
    """Each of them is admitted, and each that asks GPUs only through Volcano (the MPI launcher asks none: it runs on
    the teams' CPU nodes, whatever its scheduler)."""
    cfg = plan_of(stack).config
    team = cfg.scheduler.teams[0]
    rules = rules_of(team, cfg.scheduler.priority_classes, pools=cfg.gpu_pools)
    for example in jobs.examples_for(cfg):
        job = jobs.workload_of(jobs.render(example, cfg, team=team.name))
        if job["kind"] in ("Deployment", "Job"):
            continue  # their pods are the templates, checked above
        for where, template in jobs.pod_templates(job, named=True):
            pod = _operator_pod(template, team.name)
            assert denied_by(pod, rules, user=tenancy.OPERATOR_USER) == [], (example, where)
            if not any(
                "nvidia.com/gpu" in (c.get("resources") or {}).get("limits", {}) for c in pod["spec"]["containers"]
            ):
                continue
            pod["spec"]["schedulerName"] = (
                "default-scheduler"  # the template named another scheduler: the operator keeps it
            )
            assert any("scheduled by volcano" in d for d in denied_by(pod, rules, user=tenancy.OPERATOR_USER)), (
                example,
                where,
            )


def test_a_health_check_edited_to_hold_efa_without_gpus_outside_volcano_is_denied():
    """An attacker's edit of `healthcheck render`: no GPU, EFA kept, the default scheduler, on the
    GPU pool - the autoscaler would buy a p5 for each pod, outside every queue."""
    from infra.offline import healthcheck

    cfg = plan_of("prod").config
    team = cfg.scheduler.teams[0]
    job = next(o for o in healthcheck.render(cfg, "h100", nodes=2) if o["kind"] == "Job")
    spec = job["spec"]["template"]["spec"]
    spec["schedulerName"] = "default-scheduler"
    limits = spec["containers"][0]["resources"]["limits"]
    del limits["nvidia.com/gpu"]
    assert limits["vpc.amazonaws.com/efa"] == 32
    assert any("scheduled by volcano" in d for d in denied_by(job, rules_of(team, cfg.scheduler.priority_classes)))


def test_rendered_pods_need_no_api_token_except_the_mpi_launcher(stack):
    cfg = plan_of(stack).config
    for example in jobs.examples_for(cfg):
        job = jobs.workload_of(jobs.render(example, cfg))
        for where, template in jobs.pod_templates(job, named=True):
            assert template["spec"].get("automountServiceAccountToken") is (None if ".Launcher." in where else False), (
                example,
                where,
            )


# --- the plan ------------------------------------------------------------------------------------

VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def _namespaces(plan) -> dict[str, dict]:
    return {
        n.inputs["metadata"]["name"]: n.inputs
        for n in plan.of_type("kubernetes:core/v1:Namespace")
        if tenancy.TEAM_LABEL in n.inputs["metadata"].get("labels", {})
    }


def test_every_team_has_its_own_admission_policy_bound_to_its_namespace_only(plan):
    teams = {t.name: t for t in plan.config.scheduler.teams}
    policies = {
        p.inputs["metadata"]["name"]: p
        for p in plan.of_type(VAP)
        if p.inputs["metadata"]["name"].startswith("higgsfield-team-")
    }
    bindings = {
        b.inputs["metadata"]["name"]: b
        for b in plan.of_type(BINDING)
        if b.inputs["metadata"]["name"].startswith("higgsfield-team-")
    }
    assert set(policies) == set(bindings) == {tenancy.policy_name(t) for t in teams}
    for name, team in teams.items():
        policy, binding = policies[tenancy.policy_name(name)], bindings[tenancy.policy_name(name)]
        assert policy.inputs == {
            **tenancy.admission_policy(
                rules_of(
                    team,
                    plan.config.scheduler.priority_classes,
                    plan.config.public_load_balancers,
                    plan.config.gpu_pools,
                )
            ),
            "metadata": policy.inputs["metadata"],
        }
        assert policy.inputs["spec"]["failurePolicy"] == "Fail"
        spec = binding.inputs["spec"]
        assert spec["policyName"] == tenancy.policy_name(name) and spec["validationActions"] == ["Deny"]
        assert spec["matchResources"] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}
        assert policy.urn in binding.dependencies


def test_admission_objects_validate_against_the_kubernetes_schema(plan):
    for r in [*plan.of_type(VAP), *plan.of_type(BINDING)]:
        kubernetes_schema.validate(r.inputs, plan.config.kubernetes_version)


def test_admission_policy_matches_the_kinds_it_checks():
    rules = tenancy.admission_policy(VISION)["spec"]["matchConstraints"]["resourceRules"]
    resources = {(g, res) for rule in rules for g in rule["apiGroups"] for res in rule["resources"]}
    workloads = {(g, r) for g, kinds in tenancy.WORKLOADS.items() for r in kinds.values()}
    assert {
        ("", "pods"),
        ("", "pods/ephemeralcontainers"),
        ("", "pods/resize"),
        ("", "services"),
        ("scheduling.volcano.sh", "podgroups"),
        ("autoscaling", "horizontalpodautoscalers"),
        *(("kubeflow.org", r) for r in KUBEFLOW_JOB_KINDS.values()),
        *workloads,
    } == resources
    assert all(set(rule["operations"]) == {"CREATE", "UPDATE"} for rule in rules)


def test_prod_team_namespaces_enforce_baseline_warn_restricted_at_the_cluster_version():
    plan = plan_of("prod")
    version = f"v{plan.config.kubernetes_version}"
    namespaces = _namespaces(plan)
    assert set(namespaces) == {"foundation", "llm", "vision"}
    for ns in namespaces.values():
        labels = ns["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
        assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"
        assert {labels[f"pod-security.kubernetes.io/{m}-version"] for m in ("enforce", "warn", "audit")} == {version}


def test_a_pod_that_names_no_queue_lands_in_its_teams_queue(plan):
    for team in plan.config.scheduler.teams:
        assert _namespaces(plan)[team.name]["metadata"]["annotations"] == {
            "scheduling.volcano.sh/queue-name": team.queue
        }


def test_prod_team_namespaces_deny_all_traffic_but_what_jobs_need():
    plan = plan_of("prod")
    for team in plan.config.scheduler.teams:
        policies = {
            p.inputs["metadata"]["name"]: p.inputs["spec"]
            for p in plan.of_type(NETPOL)
            if p.inputs["metadata"]["namespace"] == team.name
        }
        assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        own = policies["allow-own-namespace"]
        assert own["ingress"] == [{"from": [{"podSelector": {}}]}] and own["egress"] == [{"to": [{"podSelector": {}}]}]
        (dns,) = policies["allow-dns"]["egress"]
        assert dns["to"] == [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ]
        assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
        assert policies["allow-metrics-scrape"]["ingress"] == [
            {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}
        ]
        api = policies["allow-launcher-to-api-server"]
        assert api["podSelector"] == {"matchLabels": tenancy.LAUNCHER}
        service, vpc = (
            {"ipBlock": {"cidr": f"{plan.config.api_service_ip}/32"}},
            {"ipBlock": {"cidr": plan.config.vpc_cidr}},
        )
        assert api["egress"] == [{"to": [service, vpc], "ports": [{"protocol": "TCP", "port": 443}]}]
        # nothing reaches another team's namespace: no allowance names a namespace but the system ones
        named = {
            json.dumps(p)
            for spec in policies.values()
            for rule in spec.get("ingress", []) + spec.get("egress", [])
            for p in rule.get("from", []) + rule.get("to", [])
            if "namespaceSelector" in p
        }
        assert all(other.name not in n for n in named for other in plan.config.scheduler.teams)


def test_network_policies_validate_against_the_kubernetes_schema(plan):
    for r in plan.of_type(NETPOL):
        kubernetes_schema.validate(r.inputs, plan.config.kubernetes_version)


def test_every_team_default_service_account_mounts_no_token(plan):
    accounts = {
        a.inputs["metadata"]["namespace"]: a.inputs
        for a in plan.of_type("kubernetes:core/v1:ServiceAccountPatch")
        if a.inputs["metadata"]["name"] == "default"
    }
    assert set(accounts) >= {t.name for t in plan.config.scheduler.teams}
    assert all(accounts[t.name]["automountServiceAccountToken"] is False for t in plan.config.scheduler.teams)


def test_vpc_cni_enforces_network_policies(plan):
    (cni,) = [a for a in plan.of_type("aws:eks/addon:Addon") if a.inputs["addonName"] == "vpc-cni"]
    assert json.loads(cni.inputs["configurationValues"]) == {"enableNetworkPolicy": "true"}


def test_no_team_gets_cluster_wide_rights(plan):
    teams = {t.name for t in plan.config.scheduler.teams}
    for binding in plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"):
        assert not any(s.get("namespace") in teams for s in binding.inputs.get("subjects", [])), binding.name

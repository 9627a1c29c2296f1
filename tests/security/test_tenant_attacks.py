"""A tenant's attacks on the platform, written as the objects and requests it would send, run through
the mechanisms that refuse them.

The attacker: a member of one team with EKS's `AmazonEKSEditPolicy` scoped to the team's namespace
(README "Adding a team"). Its rules are EDIT_POLICY below, from the EKS user guide, "Review access
policy permissions" (awsdocs/amazon-eks-user-guide:latest/ug/manage-access/k8s-access/
access-policy-reference.adoc@c88259ae, section AmazonEKSEditPolicy); like Kubernetes' user-facing
`edit` role it writes pods, workloads, Services and NetworkPolicies in the namespace. So RBAC lets
each attack through (asserted below) and the admission policies we render must refuse it: they are
evaluated with cel-expr-python exactly as tests/security/test_tenancy.py does (same evaluator,
tests/admission_cel.py), and every attack names the validation that refuses it; each
`..._is_the_only_thing_refusing_it` test removes that validation and shows the attack then
passes, so a policy change that drops the rule fails here. What admission cannot see (envFrom, an
image's ENV) is closed on the GPU nodes, asserted on the plan. What only a live cluster confirms is
listed in docs/security-tenancy.md with the command.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
import json

import pytest

from components import device_plugins, gpu_pools, healthgate, tenancy
from components.cpu_nodes import ON_TEAM_CPU_NODES
from components.tenancy import TeamRules
from infra.config import STARTUP_TAINT_KEY, SYSTEM_TAINT_KEY
from infra.core.names import LONGEST_POD_DEADLINE
from tests.components.test_karpenter import karpenter_plan  # noqa: F401 (fixture)
from tests.conftest import STACKS, plan_of
from tests.security.test_tenancy import VISION, Authorizer, _creator, _job, _pod, admitted

# AmazonEKSEditPolicy, one (apiGroups, resources, verbs) per row of the user guide's table (cited above).
_WRITE = ("create", "delete", "deletecollection", "patch", "update")
_READ = ("get", "list", "watch")
EDIT_POLICY = [
    (
        ("apps",),
        (
            "daemonsets",
            "deployments",
            "deployments/rollback",
            "deployments/scale",
            "replicasets",
            "replicasets/scale",
            "statefulsets",
            "statefulsets/scale",
        ),
        _WRITE,
    ),
    (
        ("apps",),
        (
            "controllerrevisions",
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/scale",
            "deployments/status",
            "replicasets",
            "replicasets/scale",
            "replicasets/status",
            "statefulsets",
            "statefulsets/scale",
            "statefulsets/status",
        ),
        _READ,
    ),
    (("autoscaling",), ("horizontalpodautoscalers", "horizontalpodautoscalers/status"), _READ),
    (("autoscaling",), ("horizontalpodautoscalers",), _WRITE),
    (("batch",), ("cronjobs", "jobs"), _WRITE),
    (("batch",), ("cronjobs", "cronjobs/status", "jobs", "jobs/status"), _READ),
    (("discovery.k8s.io",), ("endpointslices",), _READ),
    (
        ("extensions",),
        (
            "daemonsets",
            "deployments",
            "deployments/rollback",
            "deployments/scale",
            "ingresses",
            "networkpolicies",
            "replicasets",
            "replicasets/scale",
            "replicationcontrollers/scale",
        ),
        _WRITE,
    ),
    (("networking.k8s.io",), ("ingresses", "networkpolicies"), _WRITE),
    (("networking.k8s.io",), ("ingresses", "ingresses/status", "networkpolicies"), _READ),
    (("policy",), ("poddisruptionbudgets",), _WRITE),
    (("policy",), ("poddisruptionbudgets", "poddisruptionbudgets/status"), _READ),
    (("",), ("namespaces",), _READ),
    (("",), ("pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"), _READ),
    (("",), ("serviceaccounts",), ("impersonate",)),
    (("",), ("pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"), _WRITE),
    (
        ("",),
        (
            "configmaps",
            "events",
            "persistentvolumeclaims",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "secrets",
            "serviceaccounts",
            "services",
            "services/proxy",
        ),
        _WRITE,
    ),
    (
        ("",),
        (
            "configmaps",
            "endpoints",
            "persistentvolumeclaims",
            "persistentvolumeclaims/status",
            "pods",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "serviceaccounts",
            "services",
            "services/status",
        ),
        _READ,
    ),
    (
        ("",),
        (
            "bindings",
            "events",
            "limitranges",
            "namespaces/status",
            "pods/log",
            "pods/status",
            "replicationcontrollers/status",
            "resourcequotas",
            "resourcequotas/status",
        ),
        _READ,
    ),
]


def edit_allows(group: str, resource: str, namespace: str, verb: str, scope: str = VISION.name) -> bool:
    """RBAC evaluation of AmazonEKSEditPolicy associated with access scope type=namespace, `scope`:
    its rules hold in that namespace only (a cluster-scoped resource has no namespace)."""
    return namespace == scope and any(
        group in groups and resource in resources and verb in verbs for groups, resources, verbs in EDIT_POLICY
    )


TEAM = Authorizer(lambda group, resource, namespace, verb: edit_allows(group, resource, namespace, verb))
CLUSTER_ADMIN = Authorizer(lambda *_: True)  # AmazonEKSClusterAdminPolicy: * on * (the deploy identity, stack admins)
MALLORY = "arn:aws:sts::123456789012:assumed-role/vision-dev/mallory"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NO_ESCALATION = {"allowPrivilegeEscalation": False}
LB_TEAM = TeamRules(
    name="vision", queue="experiments", priority_classes=("batch-low",), uid=20003, service_types=("LoadBalancer",)
)


def _container(name: str = "c", **fields) -> dict:
    return {"name": name, "image": "x", "securityContext": dict(NO_ESCALATION), **fields}


def _cpu_pod(**spec) -> dict:
    """A compliant pod that asks for no GPU (default scheduler allowed), with the deadline every pod without GPUs on
    a GPU node sets (its containers and sidecars asking none)."""
    pod = _pod(schedulerName="default-scheduler", containers=[_container()])
    pod["spec"].update(spec)
    sidecars = [i for i in pod["spec"].get("initContainers", []) if i.get("restartPolicy") == "Always"]
    running = pod["spec"]["containers"] + sidecars
    if not any("nvidia.com/gpu" in c.get("resources", {}).get("limits", {}) for c in running):
        pod["spec"].setdefault("activeDeadlineSeconds", LONGEST_POD_DEADLINE)
    return pod


def _workload(kind: str, pod: dict) -> dict:
    spec = dict(pod["spec"])
    if kind != "Job":  # the API server refuses a deadline in a Deployment's or DaemonSet's template
        spec.pop("activeDeadlineSeconds", None)
    template = {"metadata": pod["metadata"].get("labels") and {"labels": pod["metadata"]["labels"]} or {}, "spec": spec}
    group = {"DaemonSet": "apps/v1", "Deployment": "apps/v1", "Job": "batch/v1"}[kind]
    return {
        "apiVersion": group,
        "kind": kind,
        "metadata": {"name": "w", "namespace": "vision"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": template},
    }


def _service(**spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s", "namespace": "vision"},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}], **spec},
    }


def _gpu_env_job(env: dict) -> dict:
    """Every GPU of a GPU node: tolerate the GPU taint, select GPU nodes, ask the runtime by env (as a DaemonSet,
    on every GPU node, it is refused for that alone: test_r9_terminating_attack.py)."""
    pod = _cpu_pod(
        tolerations=[GPU_TOLERATION],
        nodeSelector={"higgsfield.io/pool": "h100"},
        containers=[_container(env=[env])],
    )
    return _workload("Job", _by_volcano(pod))


def _by_volcano(pod: dict) -> dict:
    """A pod that tolerates the GPU taint goes through Volcano (else that rule refuses it first)."""
    pod["spec"]["schedulerName"] = "volcano"
    return pod


def _launcher_labelled(pod: dict) -> dict:
    pod["metadata"]["labels"] = dict(tenancy.LAUNCHER)
    return pod


def _with_ephemeral(container: dict) -> dict:
    """What `kubectl debug` sends: the whole running Pod (nodeName set) with one more ephemeral container."""
    pod = _cpu_pod(nodeName="ip-10-0-1-5.ec2.internal")
    pod["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": "busybox", "targetContainerName": "c", **container}
    ]
    return pod


def _pytorchjob_with(**spec) -> dict:
    job = _job()
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"].update(copy.deepcopy(spec))
    return job


ENV = "no NVIDIA_VISIBLE_DEVICES"
VOLCANO = "GPU pods are scheduled by volcano"
INIT_GPUS = "no init container, sidecars included, asks for"
NODE_NAME = "no nodeName"
TOLERATIONS = "tolerations name a taint key"
ESCALATION = "allowPrivilegeEscalation: false"
LAUNCHER = "(egress to the API server) is the Training Operator's"
# a pod without GPUs on a GPU node: refused by its own rule too, whatever else it does
WITHOUT_GPUS = "a pod without GPUs runs on the teams' CPU nodes"
SERVICE_TYPE = "Services may be of type"
EXTERNAL_IPS = "no externalIPs"
INTERNAL_LB = "load balancers are internal in this stack"

# name -> (object, the validation that refuses it, the team's rules, the request)
ATTACKS = {
    # 2. GPUs outside the device plugin, Volcano and the quota
    "job_with_nvidia_visible_devices_all": (
        _gpu_env_job({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}),
        (ENV, WITHOUT_GPUS),
        VISION,
        {},
    ),
    "pod_with_nvidia_visible_devices_from_a_config_map_key": (
        _cpu_pod(
            containers=[
                _container(
                    env=[
                        {
                            "name": "NVIDIA_VISIBLE_DEVICES",
                            "valueFrom": {"configMapKeyRef": {"name": "gpus", "key": "all"}},
                        }
                    ]
                )
            ]
        ),
        ENV,
        VISION,
        {},
    ),
    "pod_with_nvidia_driver_capabilities": (
        _cpu_pod(containers=[_container(env=[{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}])]),
        ENV,
        VISION,
        {},
    ),
    "init_container_with_nvidia_visible_devices": (
        _cpu_pod(initContainers=[_container("init", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])]),
        ENV,
        VISION,
        {},
    ),
    "pod_created_by_a_deployments_replicaset_with_the_env": (
        _cpu_pod(containers=[_container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])]),
        ENV,
        VISION,
        {"user": "system:serviceaccount:kube-system:replicaset-controller"},
    ),
    # GPUs in an init container are refused whatever the scheduler (the counts read containers alone:
    # test_r18_tenant_attack.py); through Volcano, that rule is the only one refusing them
    "init_container_gpu_pod": (
        _cpu_pod(
            schedulerName="volcano", initContainers=[_container("init", resources={"limits": {"nvidia.com/gpu": 8}})]
        ),
        (INIT_GPUS, WITHOUT_GPUS),
        VISION,
        {},
    ),
    "sidecar_gpu_pod": (
        _cpu_pod(
            schedulerName="volcano",
            initContainers=[_container("sidecar", restartPolicy="Always", resources={"limits": {"nvidia.com/gpu": 8}})],
        ),
        INIT_GPUS,
        VISION,
        {},
    ),
    # GPU nodes bought and held without a GPU: EFA interfaces or huge pages, or only the GPU taint tolerated
    "efa_pod_outside_volcano": (
        _cpu_pod(containers=[_container(resources={"limits": {"vpc.amazonaws.com/efa": 32}})]),
        (VOLCANO, WITHOUT_GPUS),
        VISION,
        {},
    ),
    "huge_pages_pod_outside_volcano": (
        _cpu_pod(containers=[_container(resources={"requests": {"hugepages-2Mi": "5120Mi"}})]),
        (VOLCANO, WITHOUT_GPUS),
        VISION,
        {},
    ),
    "pod_tolerating_the_gpu_taint_outside_volcano": (
        _cpu_pod(tolerations=[GPU_TOLERATION], nodeSelector={"higgsfield.io/pool": "h100"}),
        (VOLCANO, WITHOUT_GPUS),
        VISION,
        {},
    ),
    "job_holding_efa_outside_volcano": (
        _workload(
            "Job",
            _cpu_pod(
                tolerations=[GPU_TOLERATION],
                containers=[_container(resources={"limits": {"vpc.amazonaws.com/efa": 32}})],
            ),
        ),
        (VOLCANO, WITHOUT_GPUS),
        VISION,
        {},
    ),
    # a pod kube-scheduler binds beside the MPI launchers, racing Volcano for their room (the kubelet fails the second)
    "job_on_the_teams_cpu_nodes_outside_volcano": (
        _workload("Job", _cpu_pod(**copy.deepcopy(ON_TEAM_CPU_NODES))),
        tenancy.ON_TEAM_CPU_NODES_BY_VOLCANO,
        VISION,
        {},
    ),
    "deployment_of_gpu_pods_outside_volcano": (
        _workload("Deployment", _cpu_pod(containers=[_container(resources={"limits": {"nvidia.com/gpu": 1}})])),
        VOLCANO,
        VISION,
        {},
    ),
    "pod_requesting_every_gpu_by_cdi_annotation": (
        {
            **_cpu_pod(),
            "metadata": {"name": "p", "namespace": "vision", "annotations": {"cdi.k8s.io/gpus": "nvidia.com/gpu=all"}},
        },
        "cdi.k8s.io/* annotations",
        VISION,
        {},
    ),
    "cronjob_with_nvidia_visible_devices": (
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "c", "namespace": "vision"},
            "spec": {
                "schedule": "* * * * *",
                "jobTemplate": {
                    "spec": {
                        "template": {
                            "spec": _cpu_pod(
                                containers=[_container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])]
                            )["spec"]
                        }
                    }
                },
            },
        },
        ENV,
        VISION,
        {},
    ),
    "pod_with_node_name": (_cpu_pod(nodeName="ip-10-0-1-5.ec2.internal"), NODE_NAME, VISION, {}),
    "deployment_template_with_node_name": (
        _workload("Deployment", _cpu_pod(nodeName="ip-10-0-1-5.ec2.internal")),
        NODE_NAME,
        VISION,
        {},
    ),
    "job_template_with_node_name": (
        _workload("Job", _cpu_pod(nodeName="ip-10-0-1-5.ec2.internal")),
        NODE_NAME,
        VISION,
        {},
    ),
    "pytorchjob_template_with_node_name": (
        _pytorchjob_with(nodeName="ip-10-0-1-5.ec2.internal"),
        NODE_NAME,
        VISION,
        {},
    ),
    "pod_tolerating_everything": (_cpu_pod(tolerations=[{"operator": "Exists"}]), TOLERATIONS, VISION, {}),
    "pod_tolerating_every_effect_with_an_empty_key": (
        _cpu_pod(tolerations=[{"key": "", "operator": "Exists"}]),
        TOLERATIONS,
        VISION,
        {},
    ),
    "pod_tolerating_the_system_nodes": (
        _cpu_pod(tolerations=[{"key": SYSTEM_TAINT_KEY, "operator": "Exists"}]),
        TOLERATIONS,
        VISION,
        {},
    ),
    "pod_tolerating_the_startup_taint": (
        _by_volcano(
            _cpu_pod(
                tolerations=[
                    GPU_TOLERATION,
                    {"key": STARTUP_TAINT_KEY, "operator": "Equal", "value": "pending", "effect": "NoSchedule"},
                ]
            )
        ),
        (TOLERATIONS, WITHOUT_GPUS),
        VISION,
        {},
    ),
    "pytorchjob_tolerating_everything": (
        _pytorchjob_with(tolerations=[{"operator": "Exists"}]),
        TOLERATIONS,
        VISION,
        {},
    ),
    # 8. privilege escalation, ephemeral containers
    "container_allowing_privilege_escalation": (
        _cpu_pod(containers=[_container(securityContext={"allowPrivilegeEscalation": True})]),
        ESCALATION,
        VISION,
        {},
    ),
    "container_leaving_privilege_escalation_unset": (
        _cpu_pod(containers=[{"name": "c", "image": "x"}]),
        ESCALATION,
        VISION,
        {},
    ),
    "init_container_named_like_the_operators_in_a_tenant_pod": (
        _cpu_pod(initContainers=[{"name": tenancy.KUBECTL_DELIVERY, "image": "x"}]),
        ESCALATION,
        VISION,
        {},
    ),
    "ephemeral_container_with_privilege_escalation": (
        _with_ephemeral({"securityContext": {"allowPrivilegeEscalation": True}}),
        ESCALATION,
        VISION,
        {"operation": "UPDATE"},
    ),
    "ephemeral_container_with_nvidia_visible_devices": (
        _with_ephemeral(
            {"securityContext": dict(NO_ESCALATION), "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
        ),
        ENV,
        VISION,
        {"operation": "UPDATE"},
    ),
    # 4. the launcher's allowance (TCP 443 to the VPC) on a tenant's pod
    "tenant_pod_with_the_launcher_label": (_launcher_labelled(_cpu_pod()), LAUNCHER, VISION, {}),
    "tenant_deployment_with_the_launcher_label": (
        _workload("Deployment", _launcher_labelled(_cpu_pod())),
        LAUNCHER,
        VISION,
        {},
    ),
    "tenant_relabelling_a_running_pod_as_launcher": (
        _launcher_labelled(_cpu_pod(nodeName="n")),
        LAUNCHER,
        VISION,
        {"operation": "UPDATE", "old": _cpu_pod(nodeName="n")},
    ),
    # 3. Services
    "service_with_external_ips": (_service(externalIPs=["10.0.0.2"]), EXTERNAL_IPS, VISION, {}),
    "load_balancer_service": (_service(type="LoadBalancer"), SERVICE_TYPE, VISION, {}),
    "node_port_service": (_service(type="NodePort"), SERVICE_TYPE, VISION, {}),
    "external_name_service": (
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s", "namespace": "vision"},
            "spec": {"type": "ExternalName", "externalName": "vision-fsx.internal"},
        },
        SERVICE_TYPE,
        VISION,
        {},
    ),
    "internet_facing_load_balancer_of_a_team_given_internal_ones": (
        _service(type="LoadBalancer"),
        INTERNAL_LB,
        LB_TEAM,
        {},
    ),
    "load_balancer_annotated_internal_false": (
        {
            **_service(type="LoadBalancer"),
            "metadata": {"name": "s", "namespace": "vision", "annotations": {tenancy.INTERNAL_LB_ANNOTATION: "false"}},
        },
        INTERNAL_LB,
        LB_TEAM,
        {},
    ),
}


def _denied(obj: dict, team: TeamRules, policy: dict | None = None, **request) -> list[str]:
    policy = policy or tenancy.admission_policy(team)
    # a pod a ReplicaSet, StatefulSet, DaemonSet or Job controls is its controller's to create (a tenant's own
    # pod may not name one: test_volcano_groups.py); every other object is the tenant's
    creator = _creator(obj)
    user = MALLORY if creator == _creator(None) else creator
    return [m for m, ok in admitted(policy, obj, **{"user": user, **request}).items() if not ok]


def _without(policy: dict, fragment: str | tuple[str, ...]) -> dict:
    """The policy less the validations whose messages hold `fragment` (each of a tuple's: an attack that two rules
    refuse, a pod without GPUs on a GPU node among them), one validation each."""
    fragments = fragment if isinstance(fragment, tuple) else (fragment,)
    trimmed = copy.deepcopy(policy)
    trimmed["spec"]["validations"] = [
        v for v in trimmed["spec"]["validations"] if not any(f in v["message"] for f in fragments)
    ]
    assert len(trimmed["spec"]["validations"]) == len(policy["spec"]["validations"]) - len(fragments), fragments
    return trimmed


def _rbac_resource(obj: dict, request: dict) -> tuple[str, str, str]:
    kind = obj["kind"]
    group = obj["apiVersion"].rpartition("/")[0]
    resource = {
        "Pod": "pods",
        "Service": "services",
        "DaemonSet": "daemonsets",
        "Deployment": "deployments",
        "Job": "jobs",
        "CronJob": "cronjobs",
        "PyTorchJob": "pytorchjobs",
    }[kind]
    if kind == "Pod" and obj["spec"].get("ephemeralContainers"):
        resource = "pods/ephemeralcontainers"
    return group, resource, "update" if request.get("operation") == "UPDATE" else "create"


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_attack_is_refused_by_the_validation_it_names(attack):
    obj, fragment, team, request = ATTACKS[attack]
    denied = _denied(obj, team, **request)
    assert all(any(f in d for d in denied) for f in (fragment if isinstance(fragment, tuple) else (fragment,))), denied


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_attack_passes_once_its_validation_is_removed_so_that_validation_is_the_only_thing_refusing_it(attack):
    obj, fragment, team, request = ATTACKS[attack]
    assert _denied(obj, team, _without(tenancy.admission_policy(team), fragment), **request) == []


@pytest.mark.parametrize("attack", sorted(a for a in ATTACKS if ATTACKS[a][3].get("user") is None))
def test_the_edit_policy_lets_the_attacker_send_it_so_admission_is_what_refuses_it(attack):
    obj, _, _, request = ATTACKS[attack]
    group, resource, verb = _rbac_resource(obj, request)
    if (
        group == "kubeflow.org"
    ):  # not in AmazonEKSEditPolicy: the team's own Role grants it (tests/security/test_team_job_rights.py)
        from tests.security.test_team_job_rights import role_allows

        assert role_allows(tenancy.job_submitter_role("vision"), group, resource, "vision", verb), (
            group,
            resource,
            verb,
        )
        return
    if resource == "pods/ephemeralcontainers":
        # Neither AmazonEKSEditPolicy nor AmazonEKSAdminPolicy lists the subresource: RBAC refuses
        # it today; the policy still matches it, so a later grant (kubectl debug) stays bounded.
        assert not edit_allows(group, resource, "vision", verb)
        return
    assert edit_allows(group, resource, "vision", verb), (group, resource, verb)


def test_the_team_policy_sees_ephemeral_containers_services_and_workloads():
    """Without these resources in matchConstraints the API server would not ask the policy at all."""
    rules = tenancy.admission_policy(VISION)["spec"]["matchConstraints"]["resourceRules"]
    matched = {
        (g, r, op) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for op in rule["operations"]
    }
    for needed in [
        ("", "pods/ephemeralcontainers", "UPDATE"),
        ("", "services", "CREATE"),
        ("", "services", "UPDATE"),
        ("apps", "daemonsets", "CREATE"),
        ("apps", "deployments", "UPDATE"),
        ("batch", "jobs", "CREATE"),
        ("batch", "cronjobs", "CREATE"),
        ("", "replicationcontrollers", "CREATE"),
    ]:
        assert needed in matched, needed


# --- what the attacks must not break ------------------------------------------------------------


def test_the_operators_mpi_launcher_keeps_its_label_and_its_injected_init_container():
    pod = _launcher_labelled(_pod(containers=[_container("launcher")]))
    pod["spec"]["initContainers"] = [{"name": tenancy.KUBECTL_DELIVERY, "image": "mpioperator/kubectl-delivery"}]
    assert _denied(pod, VISION, user=tenancy.OPERATOR_USER) == []
    assert (
        _denied(pod, VISION, user=MALLORY, operation="UPDATE", old=copy.deepcopy(pod)) == []
    )  # a tenant may still annotate it


def test_a_bound_pods_later_updates_and_its_ephemeral_debug_container_are_admitted():
    bound = _cpu_pod(nodeName="ip-10-0-1-5.ec2.internal")
    assert _denied(bound, VISION, operation="UPDATE", old=copy.deepcopy(bound)) == []
    assert _denied(_with_ephemeral({"securityContext": dict(NO_ESCALATION)}), VISION, operation="UPDATE") == []


def test_a_gpu_pod_that_tolerates_the_gpu_taint_and_asks_volcano_is_admitted():
    assert _denied(_pod(tolerations=[GPU_TOLERATION]), VISION) == []


def test_cluster_ip_and_headless_services_are_admitted_and_a_team_given_load_balancers_gets_internal_ones():
    assert (
        _denied(_service(), VISION) == []
        and _denied(_service(clusterIP="None"), VISION) == []
        and _denied(_service(type="ClusterIP"), VISION) == []
    )
    internal = {
        **_service(type="LoadBalancer"),
        "metadata": {"name": "s", "namespace": "vision", "annotations": {tenancy.INTERNAL_LB_ANNOTATION: "true"}},
    }
    assert _denied(internal, LB_TEAM) == []
    public_stack = TeamRules(**{**LB_TEAM.__dict__, "public_load_balancers": True})
    assert _denied(_service(type="LoadBalancer"), public_stack) == []
    assert any(
        SERVICE_TYPE in d for d in _denied(_service(type="NodePort"), LB_TEAM)
    )  # LoadBalancer given, NodePort not


def test_env_from_a_config_map_is_out_of_admissions_sight_and_the_gpu_nodes_close_it():
    """CEL sees `envFrom: [{configMapRef: gpus}]`, not the ConfigMap's keys (nor an image's ENV:
    CUDA base images set NVIDIA_VISIBLE_DEVICES=all). The policy admits a GPU pod's - honestly - and the GPU
    nodes' container toolkit ignores the variable in unprivileged containers; the device plugin
    hands GPUs over as volume mounts instead. A pod without GPUs never reaches a GPU node to ask."""
    env_from = [{"configMapRef": {"name": "gpus"}}]
    one_gpu = {"limits": {"nvidia.com/gpu": 1}}
    gpu_job = _workload(
        "Job",
        _by_volcano(
            _cpu_pod(tolerations=[GPU_TOLERATION], containers=[_container(envFrom=env_from, resources=one_gpu)])
        ),
    )
    assert _denied(gpu_job, VISION) == []
    cpu_job = _workload(
        "Job", _by_volcano(_cpu_pod(tolerations=[GPU_TOLERATION], containers=[_container(envFrom=env_from)]))
    )
    denied = _denied(cpu_job, VISION)
    assert denied and all(WITHOUT_GPUS in d for d in denied), denied
    assert gpu_pools.CONTAINER_TOOLKIT_SETTINGS["accept-nvidia-visible-devices-envvar-when-unprivileged"] == "false"
    assert device_plugins.DEVICE_LIST_STRATEGY == "volume-mounts"


# --- NetworkPolicies: out of the team's reach ------------------------------------------------------


def _netpol(name: str = "allow-all-egress") -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": "vision"},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]},
    }


NETPOL_WRITES = {
    "create_an_allow_all_egress_policy": ("CREATE", _netpol(), None),
    "edit_the_default_deny": (
        "UPDATE",
        {
            **_netpol("default-deny"),
            "spec": {"podSelector": {"matchLabels": {"nobody": "x"}}, "policyTypes": ["Egress"]},
        },
        tenancy.network_policies(
            "vision", monitoring_namespace="monitoring", api_server_cidr="10.0.0.0/16", api_service_ip="172.20.0.1"
        )[0],
    ),
    "delete_the_default_deny": (
        "DELETE",
        None,
        tenancy.network_policies(
            "vision", monitoring_namespace="monitoring", api_server_cidr="10.0.0.0/16", api_service_ip="172.20.0.1"
        )[0],
    ),
}


@pytest.mark.parametrize("write", sorted(NETPOL_WRITES))
def test_a_team_member_may_not_write_network_policies_though_the_edit_policy_allows_it(write):
    operation, obj, old = NETPOL_WRITES[write]
    verb = {"CREATE": "create", "UPDATE": "update", "DELETE": "delete"}[operation]
    assert edit_allows("networking.k8s.io", "networkpolicies", "vision", verb)  # RBAC lets it through
    guard = tenancy.network_policy_guard()
    result = admitted(guard, obj, operation=operation, old=old, user=MALLORY, authorizer=TEAM)
    assert result == {guard["spec"]["validations"][0]["message"]: False}
    assert all(
        admitted(
            {**guard, "spec": {**guard["spec"], "validations": []}}, obj, operation=operation, old=old, authorizer=TEAM
        ).values()
    )  # removed: nothing refuses it


def test_the_platform_identity_still_writes_network_policies():
    assert all(admitted(tenancy.network_policy_guard(), _netpol(), authorizer=CLUSTER_ADMIN).values())


def test_the_guard_covers_every_team_namespace_and_every_write():
    (rule,) = tenancy.network_policy_guard()["spec"]["matchConstraints"]["resourceRules"]
    assert (
        rule["apiGroups"] == ["networking.k8s.io"]
        and rule["resources"] == ["networkpolicies"]
        and set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    )
    binding = tenancy.network_policy_guard_binding()["spec"]
    assert binding["validationActions"] == ["Deny"]
    assert binding["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": tenancy.TEAM_LABEL, "operator": "Exists"}]
    }
    assert not edit_allows("", "namespaces", "vision", "patch")  # a team cannot relabel its namespace out of the guard


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_with_teams_renders_the_guard_and_its_binding(stack):
    plan = plan_of(stack)
    names = {
        r.inputs["metadata"]["name"]
        for t in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        for r in plan.of_type(f"kubernetes:admissionregistration.k8s.io/v1:{t}")
    }
    assert (tenancy.NETWORK_POLICY_GUARD in names) == bool(plan.config.scheduler.teams)


# --- Lustre: no pod reaches the file system's interfaces ------------------------------------------


def _egress_allowed(policies: list[dict], pod_labels: dict, ip: str, port: int, protocol: str = "TCP") -> bool:
    """NetworkPolicy egress semantics for a destination that is not a pod (an FSx interface): a pod
    selected by any Egress policy may send only what some selecting policy's rule allows."""
    selecting = [
        p["spec"]
        for p in policies
        if "Egress" in p["spec"]["policyTypes"]
        and all(pod_labels.get(k) == v for k, v in p["spec"]["podSelector"].get("matchLabels", {}).items())
    ]
    if not selecting:
        return True
    for spec in selecting:
        for rule in spec.get("egress", []):
            ports_ok = "ports" not in rule or any(
                p.get("protocol", "TCP") == protocol and p["port"] == port for p in rule["ports"]
            )
            to_ok = "to" not in rule or any(
                "ipBlock" in peer and ipaddress.ip_address(ip) in ipaddress.ip_network(peer["ipBlock"]["cidr"])
                for peer in rule["to"]
            )
            if ports_ok and to_ok:
                return True
    return False


LUSTRE_PORTS = (988, *range(1018, 1024))


@pytest.mark.parametrize("stack", STACKS)
def test_no_team_pod_launcher_included_may_reach_a_lustre_port_in_the_vpc(stack):
    plan = plan_of(stack)
    fsx_ip = str(
        next(iter(ipaddress.ip_network(plan.config.vpc_cidr).hosts()))
    )  # any VPC address: the FSx interface's is known only at deploy
    for team in plan.config.scheduler.teams:
        policies = [
            p.inputs
            for p in plan.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
            if p.inputs["metadata"]["namespace"] == team.name
        ]
        for labels in ({}, dict(tenancy.LAUNCHER)):
            assert not any(_egress_allowed(policies, labels, fsx_ip, port) for port in LUSTRE_PORTS), (
                team.name,
                labels,
            )
        assert _egress_allowed(policies, dict(tenancy.LAUNCHER), fsx_ip, 443)  # the launcher's allowance is 443 only


def test_an_allow_all_egress_policy_would_open_lustre_which_is_why_teams_write_none():
    policies = [
        *tenancy.network_policies(
            "vision", monitoring_namespace="monitoring", api_server_cidr="10.0.0.0/16", api_service_ip="172.20.0.1"
        ),
        _netpol(),
    ]
    assert _egress_allowed(policies, {}, "10.0.200.10", 988)


# --- the GPU nodes and the device plugin, in every stack's plan -------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_gpu_launch_template_turns_off_the_env_var_path_of_the_container_toolkit(stack):
    plan = plan_of(stack)
    templates = [t for t in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate") if t.name.startswith("gpu-")]
    assert templates
    for template in templates:
        user_data = base64.b64decode(template.inputs["userData"]).decode()
        assert gpu_pools.container_toolkit_script() in user_data, template.name
        for key, value in gpu_pools.CONTAINER_TOOLKIT_SETTINGS.items():
            assert f"--set {key}={value}" in user_data


@pytest.mark.parametrize("stack", STACKS)
def test_the_nvidia_device_plugin_passes_gpus_as_volume_mounts_not_as_an_env_var(stack):
    (release,) = [
        r
        for r in plan_of(stack).of_type("kubernetes:helm.sh/v3:Release")
        if r.inputs["chart"] == "nvidia-device-plugin"
    ]
    values = release.inputs["values"]
    values = json.loads(values) if isinstance(values, str) else values
    assert values["deviceListStrategy"] == "volume-mounts"


# --- Services: public subnets tagged for ELB only when the stack wants public load balancers ---------


@pytest.mark.parametrize("stack", STACKS)
def test_public_subnets_carry_the_elb_role_tag_only_with_public_load_balancers(stack):
    plan = plan_of(stack)
    public = [s.inputs for s in plan.of_type("aws:ec2/subnet:Subnet") if "-public-" in s.inputs["tags"]["Name"]]
    assert public
    assert all(("kubernetes.io/role/elb" in s["tags"]) == plan.config.public_load_balancers for s in public)
    private = [s.inputs for s in plan.of_type("aws:ec2/subnet:Subnet") if "-private-" in s.inputs["tags"]["Name"]]
    assert all(s["tags"]["kubernetes.io/role/internal-elb"] == "1" for s in private)


@pytest.mark.parametrize("stack", STACKS)
def test_shipped_teams_get_cluster_ip_services_only(stack):
    for team in plan_of(stack).config.scheduler.teams:
        assert team.service_types == ()


def test_karpenter_gpu_nodes_turn_off_the_env_var_path_too(karpenter_plan):
    (node_class,) = [r.inputs for r in karpenter_plan.resources if r.inputs.get("kind") == "EC2NodeClass"]
    assert gpu_pools.container_toolkit_script() in node_class["spec"]["userData"]


def test_on_a_karpenter_pool_the_gate_requests_no_gpu_so_karpenter_still_plans_room_for_jobs(karpenter_plan):
    pools = {p.name: p for p in karpenter_plan.config.gpu_pools if p.health_gate.enabled}
    for d in karpenter_plan.of_type("kubernetes:apps/v1:DaemonSet"):
        pool = d.inputs["metadata"]["labels"].get("higgsfield.io/pool")
        if pool not in pools:
            continue
        containers = {c["name"]: c for c in d.inputs["spec"]["template"]["spec"]["containers"]}
        container = containers["gate"]
        assert "nvidia.com/gpu" not in containers["dcgm"]["resources"]["requests"]  # DCGM beside it: none either
        expected = healthgate.gate_gpus(pools[pool])
        assert container["resources"]["requests"].get("nvidia.com/gpu") == (str(expected) if expected else None), pool
        assert (expected == 0) == (pools[pool].provisioner == "karpenter")
        assert ("NVIDIA_VISIBLE_DEVICES" in {e["name"] for e in container["env"]}) == (expected == 0)
        assert container["securityContext"] == {"privileged": True}

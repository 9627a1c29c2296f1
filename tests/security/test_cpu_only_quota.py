"""Pods without GPUs hold no GPU nodes their team's GPUs do not (issue 34, point 1, "one dimension at a time"): such a
pod runs on the teams' CPU nodes, never on a GPU node, and to a deadline, which puts it in the namespace's CPU-only
quota (a ResourceQuota scoped Terminating); no GPU pod carries one. The team admission policy's CEL evaluated with
cel-expr-python, as tests/security/test_tenancy.py does; the quota's admission modelled as the API server's pod
evaluator charges it (a pod at its CREATE, against every quota whose scope matches it:
kubernetes/api:core/v1/types.go@v0.35.0 ResourceQuotaScopeTerminating,
kubernetes/kubernetes:pkg/quota/v1/evaluator/core/pods.go@05e7cb29 isTerminating)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from components import teams, tenancy
from components.cpu_nodes import ON_TEAM_CPU_NODES
from components.training import SCHEDULER_CONFIG
from infra.config import CPU_SERVICE_PRIORITY_CLASS, Team
from infra.core.names import LONGEST_POD_DEADLINE
from infra.offline.pods import cores, mebibytes
from tests.conftest import config_of
from tests.security.test_node_share import GPU_TOLERATION, NO_GPU, ONE_GPU
from tests.security.test_tenancy import VISION, _job, _pod, denied_by

DEADLINE = "a pod without GPUs on the teams' CPU nodes sets spec.activeDeadlineSeconds"
WITHOUT_GPUS = "a pod without GPUs runs on the teams' CPU nodes"
TEAM_CPU_TOLERATION = ON_TEAM_CPU_NODES["tolerations"]
ADDED = "a pod's activeDeadlineSeconds is set when it is created"
# prod's p5.48xlarge: 192 vCPUs and 2,048 GiB for 8 GPUs
P5_SHARE = dataclasses.replace(VISION, gpu_share=(24.0, 256.0 * 2**30))


def _cpu_pod(**spec) -> dict:
    """A pod without GPUs where such pods run: on the teams' CPU nodes."""
    placed = {
        "tolerations": copy.deepcopy(TEAM_CPU_TOLERATION),
        "nodeSelector": dict(ON_TEAM_CPU_NODES["nodeSelector"]),
    }
    return _pod(containers=copy.deepcopy(NO_GPU), **{**placed, **spec})


def _refused_for_its_deadline(obj: dict, **request) -> bool:
    return any(m.startswith(DEADLINE) for m in denied_by(obj, **request))


def test_a_pod_without_gpus_on_the_teams_cpu_nodes_without_a_deadline_is_denied():
    assert _refused_for_its_deadline(_cpu_pod())


def test_a_pod_without_gpus_on_the_teams_cpu_nodes_with_a_deadline_is_admitted():
    assert denied_by(_cpu_pod(activeDeadlineSeconds=LONGEST_POD_DEADLINE)) == []


def test_a_pod_without_gpus_on_a_gpu_node_is_denied_even_with_a_deadline():
    pod = _pod(containers=copy.deepcopy(NO_GPU), tolerations=GPU_TOLERATION, activeDeadlineSeconds=LONGEST_POD_DEADLINE)
    assert any(m.startswith(WITHOUT_GPUS) for m in denied_by(pod))


def test_a_pod_with_gpus_and_a_deadline_is_denied():
    """It would count in the CPU-only quota: a GPU pod's CPU and memory are the compute quota's."""
    pod = _pod(containers=copy.deepcopy(ONE_GPU), tolerations=GPU_TOLERATION, activeDeadlineSeconds=3600)
    assert _refused_for_its_deadline(pod)


def test_a_pod_without_gpus_off_the_teams_nodes_needs_no_deadline():
    assert not _refused_for_its_deadline(_pod(containers=copy.deepcopy(NO_GPU)))


def test_a_job_whose_template_has_no_gpus_and_no_deadline_is_denied():
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "prep", "namespace": "vision"},
        "spec": {"template": {"spec": _cpu_pod()["spec"]}},
    }
    assert _refused_for_its_deadline(job)


def test_a_deployment_of_pods_without_gpus_on_the_teams_cpu_nodes_naming_no_class_is_denied_naming_the_class():
    """Its template cannot carry a deadline (the API server refuses one in a ReplicaSet's, Deployment's or
    StatefulSet's: pkg/apis/apps/validation): the message names the class a service without GPUs runs in instead."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "router", "namespace": "vision"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"spec": _cpu_pod()["spec"]}},
    }
    denied = [m for m in denied_by(deployment) if m.startswith(DEADLINE)]
    assert denied and f"priorityClassName {CPU_SERVICE_PRIORITY_CLASS}" in denied[0]


def test_a_kubeflow_job_whose_launcher_has_no_deadline_is_denied_before_the_operator_makes_a_pod():
    job = _job()
    job["kind"] = "MPIJob"
    specs = job["spec"].pop("pytorchReplicaSpecs")
    specs["Launcher"] = specs.pop("Master")
    launcher = specs["Launcher"]["template"]["spec"]
    launcher["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    launcher["tolerations"] = copy.deepcopy(TEAM_CPU_TOLERATION)
    launcher["nodeSelector"] = dict(ON_TEAM_CPU_NODES["nodeSelector"])
    job["spec"]["mpiReplicaSpecs"] = specs
    assert _refused_for_its_deadline(job)
    launcher["activeDeadlineSeconds"] = LONGEST_POD_DEADLINE
    assert not _refused_for_its_deadline(job)


def test_an_update_adding_a_deadline_to_a_pod_is_denied():
    """The quota charges a pod at its CREATE only: a pod made without one, then given the deadline and the teams'
    CPU nodes' toleration, would run there counted by no CPU-only quota."""
    made = _pod(containers=copy.deepcopy(NO_GPU))
    updated = copy.deepcopy(made)
    updated["spec"]["activeDeadlineSeconds"] = LONGEST_POD_DEADLINE
    assert any(m.startswith(ADDED) for m in denied_by(updated, operation="UPDATE", old=made))


def test_an_update_keeping_a_pod_made_before_the_rule_passes():
    """A pod without GPUs running on a GPU node before the upgrade may still have its labels changed."""
    made = _pod(containers=copy.deepcopy(NO_GPU), tolerations=GPU_TOLERATION)
    relabelled = copy.deepcopy(made)
    relabelled["metadata"]["labels"] = {"stage": "2"}
    assert denied_by(relabelled, operation="UPDATE", old=made) == []


def _prod_team(name: str = "vision") -> Team:
    """prod's team `name`, its quotas filled in (vision: 32 GPUs, 784 vCPUs and 8,256 GiB)."""
    return next(t for t in config_of("prod").scheduler.teams if t.name == name)


def test_the_cpu_only_quota_counts_exactly_the_pods_with_a_deadline():
    quota = teams.cpu_only_quota(_prod_team())
    assert quota["metadata"]["name"] == tenancy.CPU_ONLY_QUOTA
    assert quota["spec"]["scopes"] == ["Terminating"]


def test_the_cpu_only_quota_is_the_room_for_cpu_only_work_less_the_services_within_the_teams_quota():
    room = {"requests.cpu": "12", "requests.memory": "48Gi", "pods": "12"}
    assert teams.cpu_only_quota(_prod_team())["spec"]["hard"] == room
    small = _prod_team().model_copy(update={"cpu_quota": 4, "memory_quota_gib": 8})
    assert teams.cpu_only_quota(small)["spec"]["hard"] == {"requests.cpu": "4", "requests.memory": "8Gi", "pods": "12"}


@pytest.mark.parametrize("request_cpu", ["24", "8", "1"])
def test_pods_without_gpus_fill_no_more_than_the_cpu_only_room_however_they_are_cut(request_cpu):
    """The attack: team vision (32 GPUs on p5s: 768 vCPUs of quota) makes pods without GPUs before its GPU pods;
    768 vCPUs of them would buy the teams' CPU nodes for as long as they run. Each must carry a deadline, and the
    CPU-only quota admits 16 vCPUs of them in all: not a tenth of one p5's."""
    team = _prod_team()
    quotas = [teams.compute_quota(team, []), teams.cpu_only_quota(team)]
    used: dict[str, dict[str, float]] = {}
    pod = _cpu_pod(activeDeadlineSeconds=LONGEST_POD_DEADLINE)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": request_cpu, "memory": "1Gi"}}
    assert denied_by(pod, P5_SHARE) == []  # within one GPU's share: the team policy admits each
    admitted = sum(_quotas_admit(pod, quotas, used) for _ in range(800))
    assert admitted * cores(request_cpu) <= 16 < 192


def _in_scope(pod: dict, quota: dict) -> bool:
    """Whether `quota` counts `pod`: every one of its scopes matches (none: every pod). Terminating: the pod sets
    spec.activeDeadlineSeconds; a PriorityClass In expression: the pod's class is one of its values
    (kubernetes/kubernetes:pkg/quota/v1/evaluator/core/pods.go@05e7cb29 podMatchesScopeFunc)."""
    spec = quota["spec"]
    expressions = (spec.get("scopeSelector") or {}).get("matchExpressions", [])
    unmodelled = [x for x in spec.get("scopes", []) if x != "Terminating"] + [
        e for e in expressions if (e["scopeName"], e["operator"]) != ("PriorityClass", "In")
    ]
    assert not unmodelled, f"a scope this model does not read: {unmodelled}"
    terminating = "Terminating" not in spec.get("scopes", []) or "activeDeadlineSeconds" in pod["spec"]
    classes = [e["values"] for e in expressions]
    return terminating and all(pod["spec"].get("priorityClassName") in values for values in classes)


def _quotas_admit(pod: dict, quotas: list[dict], used: dict[str, dict[str, float]]) -> bool:
    """The API server's quota admission of a pod's CREATE: charged against every quota whose scopes match it, refused
    if any would go over in CPU, memory or pods."""
    asks = {"cpu": 0.0, "memory": 0.0, "pods": 1.0}
    for c in pod["spec"]["containers"]:
        requests = c.get("resources", {}).get("requests", {})
        asks["cpu"] += cores(requests.get("cpu", 0))
        asks["memory"] += mebibytes(requests.get("memory", 0))
    matching = [q for q in quotas if _in_scope(pod, q)]
    for q in matching:
        hard, now = q["spec"]["hard"], used.setdefault(q["metadata"]["name"], {"cpu": 0.0, "memory": 0.0, "pods": 0.0})
        if now["cpu"] + asks["cpu"] > cores(hard["requests.cpu"]):
            return False
        if now["memory"] + asks["memory"] > mebibytes(hard["requests.memory"]):
            return False
        if now["pods"] + asks["pods"] > int(hard["pods"]):
            return False
    for q in matching:
        for r in asks:
            used[q["metadata"]["name"]][r] += asks[r]
    return True


def test_volcano_runs_without_its_resourcequota_plugin_which_would_read_the_cpu_only_quota_as_every_gangs():
    """Volcano's `resourcequota` plugin weighs a job's PodGroup minimum against every quota of its namespace, scopes
    unread (pkg/scheduler/plugins/resourcequota/resourcequota.go@v1.15.1): with it, the CPU-only quota could hold
    back gangs it does not count."""
    plugins = [p["name"] for tier in SCHEDULER_CONFIG["tiers"] for p in tier["plugins"]]
    assert "resourcequota" not in plugins

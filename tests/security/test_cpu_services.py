"""A team's service without GPUs (a router, a tokenizer, a small dashboard) runs as a Deployment on the teams' CPU
nodes, in the platform's class of such services (infra/config/scheduler.py CPU_SERVICE_PRIORITY_CLASS), which its
own quota counts (components/teams.py cpu_service_quota): together with the `cpu-only` quota it holds no more than
CPU-only work's room, and the class goes on nothing else. The team policy's CEL evaluated with cel-expr-python, as
tests/security/test_tenancy.py does; the quotas' admission modelled as tests/security/test_cpu_only_quota.py does."""

from __future__ import annotations

import copy

import pytest
import yaml

from components import teams, tenancy
from components.cpu_nodes import ON_TEAM_CPU_NODES
from components.training import priority_classes
from infra.config import CPU_SERVICE_PRIORITY_CLASS
from infra.config.scheduler import CPU_ONLY_PODS, MIN_CPU_QUOTA, MIN_MEMORY_QUOTA_GIB
from infra.core.names import LONGEST_POD_DEADLINE
from infra.offline.pods import cores, mebibytes
from tests.conftest import ROOT, team_rules
from tests.security.test_cpu_only_quota import _prod_team, _quotas_admit
from tests.security.test_node_share import GPU_TOLERATION, NO_GPU
from tests.security.test_tenancy import _pod, denied_by

RULES = team_rules("prod", "vision")
SHAPE = tenancy.CPU_SERVICES_SHAPE
DEADLINE = "a pod without GPUs on the teams' CPU nodes sets spec.activeDeadlineSeconds"


def _service_pod(**spec) -> dict:
    """A pod of a team's service without GPUs, as its Deployment's ReplicaSet makes it."""
    placed = {
        "containers": copy.deepcopy(NO_GPU),
        "priorityClassName": CPU_SERVICE_PRIORITY_CLASS,
        "tolerations": copy.deepcopy(ON_TEAM_CPU_NODES["tolerations"]),
        "nodeSelector": dict(ON_TEAM_CPU_NODES["nodeSelector"]),
    }
    return _pod(**{**placed, **spec})


def _workload(kind: str, pod: dict | None = None) -> dict:
    """A workload of `kind` whose pod template is `pod`'s spec (a service pod's by default)."""
    spec = (pod or _service_pod())["spec"]
    template = {"metadata": {"labels": {"app": "router"}}, "spec": spec}
    if kind == "CronJob":
        body = {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}}
    elif kind == "Job":
        body = {"template": template}
    else:
        body = {"selector": {"matchLabels": {"app": "router"}}, "template": template}
    group = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    return {"apiVersion": group, "kind": kind, "metadata": {"name": "router", "namespace": "vision"}, "spec": body}


def _refused_for_its_shape(obj: dict, **request) -> bool:
    return any(m.startswith(SHAPE) for m in denied_by(obj, RULES, **request))


def test_a_deployment_of_a_service_without_gpus_on_the_teams_cpu_nodes_is_admitted():
    assert denied_by(_workload("Deployment"), RULES) == []


def test_the_pod_its_replicaset_makes_is_admitted():
    assert denied_by(_service_pod(), RULES) == []


def test_a_service_pod_asking_a_gpu_is_refused():
    pod = _service_pod()
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": 1}}
    assert _refused_for_its_shape(pod)


def test_a_service_pod_on_the_gpu_nodes_is_refused():
    assert _refused_for_its_shape(_service_pod(tolerations=copy.deepcopy(GPU_TOLERATION), nodeSelector={}))


def test_a_service_pod_off_the_teams_cpu_nodes_is_refused():
    """Without the CPU nodes' toleration it fits no node the platform gives teams; the class marks only those."""
    assert _refused_for_its_shape(_service_pod(tolerations=[], nodeSelector={}))


def test_a_service_pod_with_a_deadline_is_refused():
    """It would count in both quotas; the class is the mark of a pod without one."""
    assert _refused_for_its_shape(_service_pod(activeDeadlineSeconds=LONGEST_POD_DEADLINE))


@pytest.mark.parametrize("kind", ["Job", "CronJob", "StatefulSet", "DaemonSet"])
def test_another_workload_of_the_service_class_is_refused(kind):
    """A Job's pods run to a deadline in the `cpu-only` quota; a StatefulSet's or DaemonSet's have no place."""
    assert _refused_for_its_shape(_workload(kind))


def test_a_kubeflow_job_whose_launcher_names_the_service_class_is_refused():
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": "nccl", "namespace": "vision"},
        "spec": {
            "runPolicy": {"schedulingPolicy": {"queue": "experiments"}},
            "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": _service_pod()["spec"]}}},
        },
    }
    assert _refused_for_its_shape(job)


def test_a_pod_of_the_service_class_no_replicaset_controls_is_refused():
    """A Job's pod (or a bare one) of the class would run without the deadline its kind carries elsewhere."""
    pod = _service_pod()
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "prep", "uid": "u-2", "controller": True}
    ]
    assert _refused_for_its_shape(pod, user="alice@vision")


def test_a_service_pod_without_the_class_is_refused_naming_it():
    pod = _service_pod()
    del pod["spec"]["priorityClassName"]
    denied = [m for m in denied_by(pod, RULES) if m.startswith(DEADLINE)]
    assert denied and CPU_SERVICE_PRIORITY_CLASS in denied[0]


def test_the_service_class_is_the_platforms_never_preempting():
    found = next(c for c in priority_classes([]) if c["metadata"]["name"] == CPU_SERVICE_PRIORITY_CLASS)
    assert found["preemptionPolicy"] == "Never" and found["globalDefault"] is False


def test_the_two_quotas_of_pods_without_gpus_hold_cpu_only_works_room_together():
    team = _prod_team()
    only, services = teams.cpu_only_quota(team)["spec"]["hard"], teams.cpu_service_quota(team)["spec"]["hard"]
    assert cores(only["requests.cpu"]) + cores(services["requests.cpu"]) == MIN_CPU_QUOTA
    assert mebibytes(only["requests.memory"]) + mebibytes(services["requests.memory"]) == MIN_MEMORY_QUOTA_GIB * 1024
    assert int(only["pods"]) + int(services["pods"]) == CPU_ONLY_PODS


@pytest.mark.parametrize("request_cpu", ["4", "1", "10m"])
def test_a_teams_jobs_and_services_without_gpus_ask_no_more_than_cpu_only_works_room_however_they_are_cut(
    request_cpu,
):
    """The attack: team vision (32 GPUs, 784 vCPUs of quota) makes as many pods without GPUs as the quotas admit,
    half a Job's (with a deadline), half a service's: in all, no more than CPU-only work's room, 16 vCPUs and 16
    pods, whatever each asks."""
    team = _prod_team()
    quotas = [teams.compute_quota(team, []), teams.cpu_only_quota(team), teams.cpu_service_quota(team)]
    used: dict[str, dict[str, float]] = {}
    admitted = []
    for pod in (_service_pod(), _service_pod(activeDeadlineSeconds=LONGEST_POD_DEADLINE, priorityClassName=None)):
        if pod["spec"]["priorityClassName"] is None:
            del pod["spec"]["priorityClassName"]
        pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": request_cpu, "memory": "1Gi"}}
        assert denied_by(pod, RULES) == []
        admitted += [pod for _ in range(400) if _quotas_admit(pod, quotas, used)]
    assert sum(cores(request_cpu) for _ in admitted) <= MIN_CPU_QUOTA and len(admitted) <= CPU_ONLY_PODS


def test_every_team_namespace_of_the_plan_has_the_services_quota(plan):
    quotas = {
        (q.inputs["metadata"]["namespace"], q.inputs["metadata"]["name"]): q.inputs
        for q in plan.of_type("kubernetes:core/v1:ResourceQuota")
    }
    for team in plan.config.scheduler.teams:
        assert quotas[(team.name, tenancy.CPU_SERVICE_QUOTA)] == teams.cpu_service_quota(team)


def _manual_example() -> dict:
    """The Deployment docs/workload-classes.md "A service without GPUs" shows, as a user copies it."""
    text = (ROOT / "docs" / "workload-classes.md").read_text()
    section = text.split("## A service without GPUs", 1)[1]
    return yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])


def test_the_manuals_service_without_gpus_is_admitted_with_the_pods_its_replicaset_makes():
    deployment = _manual_example()
    assert denied_by(deployment, RULES) == []
    pod = _pod(**deployment["spec"]["template"]["spec"])
    assert denied_by(pod, RULES) == []


def test_the_garbage_collectors_update_dropping_an_orphaned_service_pods_owner_passes():
    """An administrator's `kubectl delete rs --cascade=orphan`: the garbage collector removes the pod's owner
    reference by an UPDATE that keeps its spec; refused, the ReplicaSet's orphan finalizer would never be removed."""
    old = _service_pod()
    orphaned = copy.deepcopy(old)
    del orphaned["metadata"]["ownerReferences"]
    collector = f"{tenancy.CONTROLLER_USERS}generic-garbage-collector"
    assert not _refused_for_its_shape(orphaned, operation="UPDATE", old=old, user=collector)

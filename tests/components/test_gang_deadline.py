"""Half-delivered gangs cost bounded money: the gang-deadline CronJob suspends
the job of a gang that waited past its pool's deadline while the pool has idle nodes (so the
autoscaler, which packs pending pods onto idle nodes before it looks for unneeded ones, can remove
them), resumes it later, and has only the rights that takes."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta

import gang_deadline
import pytest

from components import gang_deadline as component
from components.cpu_nodes import SYSTEM_LABELS
from infra.core.names import KUBEFLOW_JOB_KINDS, PREVIEW_GROUP
from infra.offline import cold_start, kubernetes_schema
from tests.conftest import STACKS, plan_of

NOW = datetime(2027, 1, 5, 12, 0, tzinfo=UTC)
DEADLINE = 1800.0


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(name: str, age_s: float, node: str | None = None, pool: str = "h100") -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "llm",
            "creationTimestamp": _iso(NOW - timedelta(seconds=age_s)),
            "annotations": {"scheduling.k8s.io/group-name": "pg-train"},
        },
        "spec": {
            "nodeSelector": {"higgsfield.io/pool": pool},
            **({"nodeName": node} if node else {}),
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
    }


def _podgroup(phase: str = "Inqueue") -> dict:
    return {
        "metadata": {
            "name": "pg-train",
            "namespace": "llm",
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train"}],
        },
        "status": {"phase": phase},
    }


IDLE_NODE = {"metadata": {"name": "ip-10-0-0-1", "labels": {"higgsfield.io/pool": "h100"}}}


def _decide(pods, nodes=(IDLE_NODE,), podgroups=None, jobs=()):
    return gang_deadline.decide(
        podgroups or [_podgroup()], list(pods), list(nodes), list(jobs), {"h100": DEADLINE}, 1800, NOW
    )


def test_a_gang_past_its_deadline_with_idle_nodes_is_suspended():
    (action,) = _decide([_pod("train-master-0", DEADLINE + 60), _pod("train-worker-0", DEADLINE + 60)])
    assert (action.verb, action.namespace, action.kind, action.name) == ("suspend", "llm", "PyTorchJob", "train")


def test_a_gang_within_its_deadline_keeps_waiting_for_its_nodes():
    assert _decide([_pod("train-master-0", DEADLINE - 60)]) == []


def test_a_gang_on_a_pool_without_idle_nodes_costs_nothing_and_is_left_queued():
    busy = _pod("other-0", 99999, node="ip-10-0-0-1")
    busy["metadata"]["annotations"] = {}
    assert _decide([_pod("train-master-0", DEADLINE + 60), busy]) == []


def test_a_node_held_by_another_teams_pod_without_a_gpu_is_not_idle():
    """A pod that asks no GPU (CPU, memory, EFA) still holds its node: the gangs waiting for that
    pool keep waiting instead of being suspended for nodes that are in use (issue 34)."""
    hog = _pod("hog-0", 99999, node="ip-10-0-0-1")
    hog["metadata"].update(namespace="vision", annotations={})
    hog["spec"]["containers"] = [{"resources": {"requests": {"cpu": "188", "vpc.amazonaws.com/efa": "32"}}}]
    assert _decide([_pod("train-master-0", DEADLINE + 60), hog]) == []


def test_a_node_with_only_the_platforms_daemonset_agents_is_idle():
    agent = _pod("node-exporter-x", 99999, node="ip-10-0-0-1")
    agent["metadata"].update(namespace="monitoring", annotations={}, ownerReferences=[{"kind": "DaemonSet"}])
    agent["spec"]["containers"] = [{"resources": {"requests": {"cpu": "100m"}}}]
    (action,) = _decide([_pod("train-master-0", DEADLINE + 60), agent])
    assert action.verb == "suspend"


def test_a_bound_gang_is_never_touched():
    assert _decide([_pod("train-master-0", DEADLINE + 60, node="ip-10-0-0-2")]) == []


@pytest.mark.parametrize("phase", ["Pending", "Running"])
def test_only_inqueue_gangs_count(phase):
    assert _decide([_pod("train-master-0", DEADLINE + 60)], podgroups=[_podgroup(phase)]) == []


def test_a_job_we_suspended_is_resumed_after_the_autoscalers_backoff():
    job = {
        "kind": "PyTorchJob",
        "metadata": {
            "name": "train",
            "namespace": "llm",
            "annotations": {gang_deadline.GAVE_BACK: _iso(NOW - timedelta(seconds=1801))},
        },
        "spec": {"runPolicy": {"suspend": True}},
    }
    (action,) = _decide([], jobs=[job])
    assert action.verb == "resume"
    assert gang_deadline.patch_for(action, NOW) == {
        "metadata": {"annotations": {gang_deadline.GAVE_BACK: None}},
        "spec": {"runPolicy": {"suspend": False}},
    }


def test_a_job_someone_else_suspended_is_never_resumed():
    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": "train", "namespace": "llm"},
        "spec": {"runPolicy": {"suspend": True}},
    }
    assert _decide([], jobs=[job]) == []


def test_suspending_sets_the_operators_suspend_and_records_when():
    """runPolicy.suspend makes the operator delete the job's pods (IsJobSuspended ->
    CleanUpResources, kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4)."""
    patch = gang_deadline.patch_for(gang_deadline.Action("suspend", "llm", "PyTorchJob", "train", ""), NOW)
    assert patch == {
        "metadata": {"annotations": {gang_deadline.GAVE_BACK: "2027-01-05T12:00:00Z"}},
        "spec": {"runPolicy": {"suspend": True}},
    }


def _objects(plan, kind: str) -> list[dict]:
    return [
        r.inputs for r in plan.resources if r.inputs.get("kind") == kind and r.name.startswith("teams-gang-deadline")
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_the_cronjob_carries_each_pools_deadline_the_timeline_states(stack):
    plan = plan_of(stack)
    (cron,) = _objects(plan, "CronJob")
    env = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    settings = json.loads(next(e["value"] for e in env if e["name"] == "GANG_DEADLINE_SETTINGS"))
    maps = [
        m
        for m in _objects(plan, "ConfigMap")
        if (m["metadata"].get("labels") or {}).get(settings["deadlineLabel"]) == "true"
    ]
    deadlines = {m["data"]["pool"]: float(m["data"]["deadlineSeconds"]) for m in maps}
    assert deadlines == {p.name: cold_start.give_back(p, None).deadline_s for p in plan.config.gpu_pools}
    assert set(settings["namespaces"]) == {t.name for t in plan.config.scheduler.teams}


def test_the_cronjob_is_a_valid_kubernetes_object_that_runs_restricted_on_the_system_nodes():
    (cron,) = _objects(plan_of("prod"), "CronJob")
    manifest = copy.deepcopy(cron)
    spec = manifest["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    spec["containers"][0]["image"] = "123456789012.dkr.ecr.us-east-2.amazonaws.com/x:src-1"
    kubernetes_schema.validate(manifest, "1.35")
    assert spec["nodeSelector"] == SYSTEM_LABELS and spec["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("stack", STACKS)
def test_the_cronjob_may_only_list_and_patch_jobs_in_team_namespaces_and_list_nodes(stack):
    plan = plan_of(stack)
    (cluster_role,) = _objects(plan, "ClusterRole")
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}]
    ours = [r for r in _objects(plan, "Role") if r["metadata"]["name"] != PREVIEW_GROUP]  # CI's, not the CronJob's
    roles = [r for r in ours if r["metadata"]["namespace"] != component.NAMESPACE]
    (own,) = [r for r in ours if r["metadata"]["namespace"] == component.NAMESPACE]
    assert own["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]
    assert {r["metadata"]["namespace"] for r in roles} == {t.name for t in plan.config.scheduler.teams}
    for role in roles:
        verbs = {
            (g, res): set(rule["verbs"])
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for res in rule["resources"]
        }
        assert all(v <= {"list", "patch"} for v in verbs.values())
        assert {k for k, v in verbs.items() if "patch" in v} == {
            ("kubeflow.org", r) for r in KUBEFLOW_JOB_KINDS.values()
        }
        assert not any(res in ("secrets", "pods/exec", "*") for _, res in verbs)

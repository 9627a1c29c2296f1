"""Plain workloads' GPU pods (Deployments, Jobs, StatefulSets and their pods) exist before Volcano
admits them, so each pending one is autoscaler demand whatever its queue says: the namespace's
`plain-gpu` quota counts the GPUs of every pod outside the training classes, at the team's GPU quota,
and the team policy keeps training classes off plain GPU pods (cel-expr-python, as test_tenancy.py)."""

from __future__ import annotations

import copy

import pytest

from components.teams import PLAIN_GPU_QUOTA, rules_of
from components.tenancy import OPERATOR_USER
from infra.config import DEFAULT_PRIORITY_CLASS
from tests.conftest import config_of, plan_of
from tests.security.test_tenancy import OWNED_BY, _pod_spec, denied_by

CONFIG = config_of("prod")
LLM = next(t for t in CONFIG.scheduler.teams if t.name == "llm")
RULES = rules_of(LLM, CONFIG.scheduler.priority_classes)
REFUSED = "a GPU pod outside a Kubeflow job names a serving or evaluation class"


def _deployment(priority: str | None, replicas: int = 100) -> dict:
    spec = _pod_spec(LLM.uid, schedulerName="volcano")
    if priority:
        spec["priorityClassName"] = priority
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "llm"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"a": "b"}}, "template": {"spec": spec}},
    }


def _pod(priority: str) -> dict:
    spec = _pod_spec(LLM.uid, schedulerName="volcano", priorityClassName=priority)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "llm"}, "spec": spec}


def _refused(obj: dict, **request) -> bool:
    return any(m.startswith(REFUSED) for m in denied_by(obj, RULES, **request))


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet", "Job", "ReplicationController"])
def test_a_plain_workload_of_gpu_pods_in_a_training_class_is_denied(kind):
    """Attack: 100 replicas of 8 GPUs in a training class, outside every GPU quota: Volcano holds them in the
    queue, but each pending pod is demand and the autoscaler buys a node for it."""
    workload = _deployment("batch-low")
    workload["kind"] = kind
    assert _refused(workload)


@pytest.mark.parametrize("priority", [None, DEFAULT_PRIORITY_CLASS], ids=["no class", "the default"])
def test_a_plain_workload_of_gpu_pods_in_the_default_class_is_denied(priority):
    """A template naming no class gets the platform's default, which the quota leaves to Kubeflow gangs."""
    assert _refused(_deployment(priority))


@pytest.mark.parametrize("priority", ["evaluation", "serving"])
def test_a_plain_workload_of_gpu_pods_in_a_class_the_quota_counts_is_admitted(priority):
    assert not _refused(_deployment(priority))


def test_a_cronjobs_gpu_pods_in_a_training_class_are_denied():
    template = _deployment("batch-low")["spec"]["template"]
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "c", "namespace": "llm"},
        "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}},
    }
    assert _refused(cron)


def test_a_team_member_creating_a_gpu_pod_in_a_training_class_is_denied():
    pod = _pod("batch-low")
    pod["metadata"]["ownerReferences"] = copy.deepcopy(OWNED_BY)  # a controller's reference, written by hand
    assert _refused(pod, user="alice@llm")


@pytest.mark.parametrize(
    "user", [OPERATOR_USER, "system:serviceaccount:kube-system:replicaset-controller"], ids=["operator", "controller"]
)
def test_pods_the_operator_or_a_controller_creates_are_not_refused_here(user):
    """The operator's pods are a Kubeflow gang's (created once it is Inqueue); a controller's come from a
    template the policy has checked."""
    assert not _refused(_pod("batch-low"), user=user)


def test_a_cpu_only_pod_in_a_training_class_is_admitted():
    deployment = _deployment("batch-low")
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    assert not _refused(deployment)


def _plain_quota(stack: str, team: str) -> dict:
    plan = plan_of(stack)
    (quota,) = [
        r.inputs
        for r in plan.of_type("kubernetes:core/v1:ResourceQuota")
        if r.inputs["metadata"] == {"name": PLAIN_GPU_QUOTA, "namespace": team}
    ]
    return quota


def test_every_team_namespace_bounds_its_plain_gpu_pods_at_its_gpu_quota_and_never_counts_a_training_gang():
    for team in CONFIG.scheduler.teams:
        quota = _plain_quota("prod", team.name)
        assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": str(team.gpu_quota)}
        training = [c.name for c in CONFIG.scheduler.priority_classes if c.workload == "training"]
        (scope,) = quota["spec"]["scopeSelector"]["matchExpressions"]
        assert scope["scopeName"] == "PriorityClass" and scope["operator"] == "NotIn"
        # a Kubeflow gang's pods carry its template's class, or the default where the template names none
        assert set(scope["values"]) == (set(training) & set(team.priority_classes)) | {DEFAULT_PRIORITY_CLASS}

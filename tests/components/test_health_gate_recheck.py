"""A node the pre-flight or the job watchdog names goes back through the health gate, by the gate's
own hand: the watchdog records a NodeRecheckRequested Event about the node (images/training/
job_watchdog.py), and the per-node program (health_gate.py --after-reboot) puts the startup taint back
and labels the node `recheck`, once per request. Against the fake API server over HTTP
(tests/fake_kube_api.py) and the own-node policy's CEL."""

from __future__ import annotations

import health_gate
import pytest

from components import healthgate
from infra.config import STARTUP_TAINT_KEY
from tests.fake_kube_api import FakeKubernetesApi
from tests.node_admission import node_update_denials

ENV = {"NODE_NAME": "n1", "STARTUP_TAINT": STARTUP_TAINT_KEY, "EVENTS_NAMESPACE": "default"}


@pytest.fixture
def kube():
    fake = FakeKubernetesApi()
    fake.put(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"higgsfield.io/health": "healthy"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
        }
    )
    yield fake
    fake.close()


def _ask(kube, node: str = "n1", name: str = "n1.watchdog-1") -> None:
    kube.put(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
            "reason": "NodeRecheckRequested",
            "message": "the pre-flight of llm/pretrain named it",
            "lastTimestamp": "2026-12-05T08:00:00Z",
        }
    )


def _api(kube) -> health_gate.KubernetesApi:
    return health_gate.KubernetesApi(kube.url, lambda: "token")


def test_a_requested_recheck_puts_the_startup_taint_back_and_the_gate_runs_again(kube):
    _ask(kube)
    done = health_gate.recheck(_api(kube), ENV)
    node = kube.get("/api/v1/nodes/n1")
    assert done and node["metadata"]["labels"]["higgsfield.io/health"] == "recheck"
    assert {"key": STARTUP_TAINT_KEY, "value": "recheck", "effect": "NoSchedule"} in node["spec"]["taints"]
    (term,) = healthgate.daemonset("img", pool="h100", gpus=8)["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert node["metadata"]["labels"]["higgsfield.io/health"] not in term["matchExpressions"][0]["values"]


def test_a_request_is_acted_on_once_even_after_the_node_passes_again(kube):
    _ask(kube)
    health_gate.recheck(_api(kube), ENV)
    node = kube.get("/api/v1/nodes/n1")
    node["metadata"]["labels"]["higgsfield.io/health"] = "healthy"  # the gate passed it again
    node["spec"]["taints"] = [t for t in node["spec"]["taints"] if t["key"] != STARTUP_TAINT_KEY]
    kube.put(node)
    assert health_gate.recheck(_api(kube), ENV) is None
    assert kube.get("/api/v1/nodes/n1")["metadata"]["labels"]["higgsfield.io/health"] == "healthy"


def test_a_request_about_another_node_changes_nothing_here(kube):
    _ask(kube, node="n2", name="n2.watchdog-1")
    assert health_gate.recheck(_api(kube), ENV) is None


def test_the_own_node_policy_admits_the_rechecks_patch():
    old = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"higgsfield.io/health": "healthy"}},
        "spec": {"taints": []},
    }
    new = {
        **old,
        "metadata": {"name": "n1", "labels": {"higgsfield.io/health": "recheck", health_gate.RECHECK_LABEL: "uid-1"}},
        "spec": {"taints": [{"key": STARTUP_TAINT_KEY, "value": "recheck", "effect": "NoSchedule"}]},
    }
    denied = node_update_denials(
        healthgate.own_node_policy(), old, new, healthgate.GATE_USER, healthgate.NODE_NAME_EXTRA, "n1"
    )
    assert denied == []


ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"


def test_the_gate_may_list_the_requests_in_default(plan):
    roles = [r.inputs for r in plan.of_type(ROLE) if r.inputs["metadata"]["name"] == "higgsfield-health-gate-events"]
    for role in roles:
        assert role["metadata"]["namespace"] == "default" and role["rules"] == [
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "list"]}
        ]

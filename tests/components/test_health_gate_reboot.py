"""A GPU node that reboots goes through the health gate again.

The kubelet applies its registration taints and labels only when it creates the Node object; after a
reboot the object exists, so the node comes back labelled `healthy`, without the startup taint
(tryRegisterWithAPIServer, kubernetes/kubernetes:pkg/kubelet/kubelet_node_status.go), and the gate's
DaemonSet (required affinity: not healthy) never runs there again. EKS node auto-repair reboots
managed nodes for some GPU faults (AcceleratedHardwareReady: "Replace or Reboot",
docs.aws.amazon.com/eks/latest/userguide/node-repair.html), and the stacks turn auto-repair on.
The gate stamps the kernel's boot id when it passes a node; the health-reboot-check DaemonSet
compares it at each boot and sends a rebooted node back through the gate. Against the fake API
server of tests/components/test_health_gate.py and the own-node policy's CEL.
"""

from __future__ import annotations

import copy

import health_gate
import pytest

from components import healthgate
from infra.config import STARTUP_TAINT_KEY
from infra.offline import kubernetes_schema
from tests.components.test_health_gate import PASS, FakeApiServer, _checks
from tests.node_admission import node_update_denials

BOOT_1, BOOT_2 = "3c1e6a0e-5b9f-4a4e-9f43-2f0d2b1f6a01", "8e2b7d44-0c6d-4c1b-b7f6-9a3e5d0c4b12"
DAEMONSET = "kubernetes:apps/v1:DaemonSet"


@pytest.fixture
def fake():
    server = FakeApiServer()
    server.config_maps[("higgsfield-health", "health-gate-h100")] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "data": {"expectations.json": '{"EXPECTED_GPUS": "8", "ON_FAILURE": "keep"}'},
    }
    yield server
    server.server.shutdown()


@pytest.fixture
def env():
    return {
        "NODE_NAME": "n1",
        "STARTUP_TAINT": STARTUP_TAINT_KEY,
        "EXPECTATIONS_NAMESPACE": "higgsfield-health",
        "EVENTS_NAMESPACE": "default",
        "EXPECTATIONS_WAIT_SECONDS": "0",
    }


def _passed_in(fake, env, boot: str) -> None:
    fake.add_node(
        taints=[
            {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
            {"key": STARTUP_TAINT_KEY, "value": "pending", "effect": "NoSchedule"},
        ]
    )
    health_gate.gate(fake.api, env, checks=_checks(PASS), boot=lambda: boot)


def _gate_runs_on(labels: dict) -> bool:
    """The gate DaemonSet's required node affinity (components/healthgate.py daemonset)."""
    (term,) = healthgate.daemonset("img", pool="h100", gpus=8)["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    (expr,) = term["matchExpressions"]
    assert expr["operator"] == "NotIn"
    return labels.get(expr["key"]) not in expr["values"]


def test_a_pass_records_the_boot_it_checked(fake, env):
    _passed_in(fake, env, BOOT_1)
    assert fake.labels()["higgsfield.io/health"] == "healthy"
    assert fake.labels()[health_gate.BOOT_LABEL] == BOOT_1


def test_a_rebooted_node_gets_the_startup_taint_back_and_the_gate_runs_there_again(fake, env):
    _passed_in(fake, env, BOOT_1)
    assert not _gate_runs_on(fake.labels())
    health_gate.after_reboot(fake.api, env, boot=lambda: BOOT_2)
    assert STARTUP_TAINT_KEY in fake.taint_keys() and "nvidia.com/gpu" in fake.taint_keys()
    assert fake.labels()["higgsfield.io/health"] == health_gate.REBOOTED
    assert _gate_runs_on(fake.labels())
    (event,) = [e for e in fake.events if e["reason"] == "RebootedSinceHealthCheck"]
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "n1"
    health_gate.gate(fake.api, env, checks=_checks(PASS), boot=lambda: BOOT_2)  # the gate passes it again
    assert STARTUP_TAINT_KEY not in fake.taint_keys() and fake.labels()[health_gate.BOOT_LABEL] == BOOT_2


def test_a_check_restarted_in_the_same_boot_changes_nothing(fake, env):
    _passed_in(fake, env, BOOT_1)
    writes = [m for m, _ in fake.requests if m != "GET"]
    health_gate.after_reboot(fake.api, env, boot=lambda: BOOT_1)
    assert [m for m, _ in fake.requests if m != "GET"] == writes
    assert STARTUP_TAINT_KEY not in fake.taint_keys()


def test_a_node_passed_before_boots_were_recorded_is_stamped_not_rechecked(fake, env):
    fake.add_node(taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}])
    fake._write("n1", {"metadata": {"labels": {"higgsfield.io/health": "healthy"}}})
    health_gate.after_reboot(fake.api, env, boot=lambda: BOOT_1)
    assert fake.labels()[health_gate.BOOT_LABEL] == BOOT_1 and STARTUP_TAINT_KEY not in fake.taint_keys()


def test_the_own_node_policy_admits_the_reboot_checks_patch():
    old = {
        "metadata": {
            "name": "ip-10-40-1-5.ec2.internal",
            "labels": {"higgsfield.io/pool": "h100", "higgsfield.io/health": "healthy", health_gate.BOOT_LABEL: BOOT_1},
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
    }
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["higgsfield.io/health"] = health_gate.REBOOTED
    new["spec"]["taints"].append({"key": STARTUP_TAINT_KEY, "value": health_gate.REBOOTED, "effect": "NoSchedule"})
    assert (
        node_update_denials(
            healthgate.own_node_policy(),
            old,
            new,
            healthgate.GATE_USER,
            healthgate.NODE_NAME_EXTRA,
            "ip-10-40-1-5.ec2.internal",
        )
        == []
    )


def test_every_stack_with_a_gate_runs_the_reboot_check_on_passed_gated_nodes(plan):
    checks = [d.inputs for d in plan.of_type(DAEMONSET) if d.inputs["metadata"]["name"] == healthgate.REBOOT_DAEMONSET]
    if not any(p.health_gate.enabled for p in plan.config.gpu_pools):
        assert checks == []
        return
    (check,) = checks
    spec = check["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true", "higgsfield.io/gated": "true"}
    healthy = {"key": "higgsfield.io/health", "operator": "In", "values": ["healthy"]}
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [healthy]}]
    }
    assert spec["tolerations"] == [{"operator": "Exists"}] and spec["serviceAccountName"] == healthgate.SERVICE_ACCOUNT
    (container,) = spec["containers"]
    assert container["command"][-1] == "--after-reboot"
    assert not any("nvidia.com/gpu" in part for part in container["resources"].values())  # a job keeps every GPU
    manifest = copy.deepcopy(check)
    image = "123456789012.dkr.ecr.us-east-2.amazonaws.com/x:src-1"
    manifest["spec"]["template"]["spec"]["containers"][0]["image"] = image
    kubernetes_schema.validate(manifest, "1.35")

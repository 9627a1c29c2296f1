"""The driver check survives AMI updates: every node has at least the driver its image's CUDA needs
(not one branch constant: the EKS NVIDIA AMI moved 570 -> 580 in v20251023/v20251029,
awslabs/amazon-eks-ami:CHANGELOG.md@81fec2e8), one driver on the node, the same driver as the
pool's healthy nodes on the same AMI (GFD's nvidia.com/cuda.driver-version.full label), and exactly
the driver of a pinned AMI release where it is known."""

from __future__ import annotations

import json

import health_gate
import node_check
import pytest
from node_check import Expectations, Gpu

from components import healthgate
from infra.core import versions
from infra.offline import day_one
from tests.components.test_health_gate import FakeApiServer
from tests.conftest import plan_of

BASE = dict(
    gpus=2,
    model="H100",
    efa_devices=0,
    min_matmul_fraction=0.6,
    min_memory_bandwidth_fraction=0.7,
    min_lustre_mb_s=200,
    min_bus_bandwidth_gb_s=50,
)


def _gpus(driver: str, n: int = 2) -> list[Gpu]:
    return [Gpu("NVIDIA H100 80GB HBM3", driver, 81559)] * n


def _driver_checks(gpus, **expected) -> dict[str, bool]:
    report = node_check.evaluate("n1", gpus, Expectations(**{**BASE, "min_driver_branch": 570, **expected}))
    return {r.check: r.ok for r in report.results if "driver" in r.check}


def test_the_image_cuda_is_the_base_images():
    assert f"-cuda{versions.TRAINING_IMAGE_CUDA}-" in versions.TRAINING_BASE_IMAGE.version


def test_a_pool_expects_the_minimum_driver_of_the_images_cuda_not_a_branch():
    cfg = plan_of("prod").config
    expected = healthgate.expectations(cfg.gpu_pools[0], cfg.observability.health, True)
    assert expected["MIN_DRIVER_BRANCH"] == str(versions.CUDA_MIN_DRIVER_BRANCH["12.8"]) == "570"
    assert "EXPECTED_DRIVER_BRANCH" not in expected and expected["EXPECTED_DRIVER_VERSION"] == ""


@pytest.mark.parametrize("driver", ["570.195.03", "580.95.05", "580.159.03", "595.10.01"])
def test_every_driver_the_ami_moved_to_passes_while_it_is_new_enough(driver):
    assert _driver_checks(_gpus(driver)) == {"NVIDIA driver": True}


def test_a_driver_older_than_the_cuda_needs_fails():
    assert _driver_checks(_gpus("565.57.01")) == {"NVIDIA driver": False}


def test_two_drivers_on_one_node_fail():
    assert _driver_checks([*_gpus("580.95.05", 1), *_gpus("580.105.08", 1)]) == {"NVIDIA driver": False}


def test_a_node_whose_driver_differs_from_its_pools_nodes_on_the_same_ami_fails():
    checks = _driver_checks(_gpus("580.95.05"), pool_drivers={"580.105.08": ["ip-10-0-0-2"]})
    assert checks == {"NVIDIA driver": True, "driver as the pool's": False}


def test_a_node_with_its_pools_driver_passes():
    assert _driver_checks(_gpus("580.95.05"), pool_drivers={"580.95.05": ["ip-10-0-0-2", "ip-10-0-0-3"]})[
        "driver as the pool's"
    ]


def test_a_pinned_release_expects_exactly_its_driver():
    cfg = plan_of("prod").config
    expected = healthgate.expectations(cfg.gpu_pools[0], cfg.observability.health, True, "12.8", "1.35.6-20260714")
    assert expected["EXPECTED_DRIVER_VERSION"] == "580.159.03"
    assert _driver_checks(_gpus("580.126.09"), driver_version="580.159.03") == {"NVIDIA driver": False}
    assert _driver_checks(_gpus("580.159.03"), driver_version="580.159.03") == {"NVIDIA driver": True}


def test_check_refuses_a_pinned_release_whose_driver_is_too_old_for_the_cuda():
    cfg = plan_of("prod").config.model_copy(update={"node_release_version": "1.32.9-20251023", "cuda_version": "13.0"})
    (finding,) = day_one.driver_findings(cfg)
    assert finding[1].startswith(
        "higgsfield:nodeReleaseVersion: 1.32.9-20251023 ships NVIDIA driver 570.195.03, older than the 580"
    )


def test_a_known_release_new_enough_is_accepted():
    cfg = plan_of("prod").config.model_copy(update={"node_release_version": "1.35.6-20260714"})
    assert day_one.driver_findings(cfg) == []


def _node(fake, name, driver, ami="ami-1", health="healthy", pool="h100"):
    fake.add_node(name, pool=pool)
    fake.nodes[name]["metadata"]["labels"].update(
        {health_gate.DRIVER_LABEL: driver, health_gate.AMI_LABEL: ami, "higgsfield.io/health": health}
    )


def test_the_gate_compares_with_the_pools_healthy_nodes_on_its_own_ami_only():
    fake = FakeApiServer()
    try:
        fake.add_node("new", pool="h100")
        fake.nodes["new"]["metadata"]["labels"][health_gate.AMI_LABEL] = "ami-2"
        _node(fake, "old", "580.126.09", ami="ami-1")  # the previous AMI during a node group update
        _node(fake, "peer", "580.159.03", ami="ami-2")
        _node(fake, "bad", "580.95.05", ami="ami-2", health="unhealthy")
        _node(fake, "other-pool", "570.1.1", ami="ami-2", pool="h200-block")
        assert health_gate.pool_drivers(fake.api, fake.nodes["new"], "h100") == {"580.159.03": ["peer"]}
    finally:
        fake.server.shutdown()


def test_the_gate_hands_the_pools_drivers_to_the_node_check(monkeypatch):
    fake = FakeApiServer()
    try:
        fake.add_node("n1", pool="h100")
        _node(fake, "peer", "580.159.03", ami="")  # no AMI label: status.nodeInfo decides (equal here)
        fake.nodes["n1"]["metadata"]["labels"][health_gate.AMI_LABEL] = ""
        fake.config_maps[("higgsfield-health", "health-gate-h100")] = {
            "data": {"expectations.json": json.dumps({"EXPECTED_GPUS": "8"})}
        }
        seen = {}

        def checks(expected, node, timeout):
            seen.update(expected)
            return {
                "node": node,
                "healthy": True,
                "results": [{"check": "GPU count", "value": "8", "expected": "8", "ok": True}],
            }

        env = {
            "NODE_NAME": "n1",
            "STARTUP_TAINT": health_gate_taint(),
            "EXPECTATIONS_NAMESPACE": "higgsfield-health",
            "EXPECTATIONS_WAIT_SECONDS": "0",
        }
        health_gate.gate(fake.api, env, checks=checks)
        assert json.loads(seen["POOL_DRIVERS"]) == {"580.159.03": ["peer"]}
    finally:
        fake.server.shutdown()


def health_gate_taint() -> str:
    from infra.config import STARTUP_TAINT_KEY

    return STARTUP_TAINT_KEY


def _verb(method: str, path: str) -> tuple[str, str, str | None]:
    """(verb, resource, namespace) of a core/v1 REST call, as the RBAC authorizer names it."""
    from urllib.parse import urlsplit

    parts = urlsplit(path).path.strip("/").split("/")[2:]  # after api/v1
    namespace = None
    if parts[0] == "namespaces":
        namespace, parts = parts[1], parts[2:]
    named = len(parts) > 1
    verb = {"GET": "get" if named else "list", "PATCH": "patch", "POST": "create", "PUT": "update", "DELETE": "delete"}[
        method
    ]
    return verb, parts[0], namespace


def test_every_call_the_gate_makes_is_granted_by_the_rbac_the_stack_renders():
    """The calls come from a real gate pass against the fake API server (replacement off); the
    rights from the prod plan's ClusterRole and Roles bound to the gate's account."""
    from tests.components.test_health_gate import PASS

    plan = plan_of("prod")
    cluster_rules = [
        rule
        for r in plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
        if r.inputs["metadata"]["name"] == "higgsfield-health-gate"
        for rule in r.inputs["rules"]
    ]
    namespaced = {}
    for r in plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role"):
        if r.inputs["metadata"]["name"] in ("health-gate-expectations", "higgsfield-health-gate-events"):
            namespaced.setdefault(r.inputs["metadata"]["namespace"], []).extend(r.inputs["rules"])

    def allowed(verb, resource, namespace):
        rules = cluster_rules + namespaced.get(namespace, [])
        return any(
            verb in rule["verbs"] and resource in rule["resources"] and "" in rule["apiGroups"] for rule in rules
        )

    fake = FakeApiServer()
    try:
        fake.add_node("n1", pool="h100")
        fake.config_maps[("higgsfield-health", "health-gate-h100")] = {
            "data": {"expectations.json": json.dumps({"EXPECTED_GPUS": "8"})}
        }
        env = {
            "NODE_NAME": "n1",
            "STARTUP_TAINT": health_gate_taint(),
            "EXPECTATIONS_NAMESPACE": "higgsfield-health",
            "EVENTS_NAMESPACE": "default",
            "EXPECTATIONS_WAIT_SECONDS": "0",
        }
        health_gate.gate(fake.api, env, checks=lambda expected, node, timeout: PASS)
        calls = {_verb(m, p) for m, p in fake.requests}
    finally:
        fake.server.shutdown()
    assert ("list", "nodes", None) in calls and ("create", "events", "default") in calls
    assert [c for c in calls if not allowed(*c)] == []

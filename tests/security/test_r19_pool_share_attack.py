"""Round 19's attacker on the per-pod share caps (issue 34, point 1): the cap was one GPU's share of the fleet's
roomiest node type, so on a stack whose pools differ a pod asked a bigger part of the smaller pool's node than its
GPUs: staging's 1-GPU pod took all 4 of a p4d's EFA interfaces (p5: 32 for 8 GPUs, 4 a GPU; p4d: 4 for 8), a
2-GPU pod all 8 of a p6-b200's in prod, a 4-GPU pod all 96 vCPUs of a p4d. Each such node was held from every EFA
gang, or held alone, by fewer GPUs than it has. A pod is now also held to the share of every pool it may land on:
the pool its nodeSelector names, else each pool whose nodes have its GPUs, EFA interfaces and huge pages. The team
admission policy's CEL evaluated with cel-expr-python, as tests/security/test_tenancy.py does."""

from __future__ import annotations

import copy

import pytest

from infra.core.names import EFA_RESOURCE, POOL_LABEL
from tests.conftest import team_rules
from tests.security.test_node_share import _on_gpu_node
from tests.security.test_tenancy import _job, denied_by

POOL_CAP = "a pod asks at most its GPUs' share of each pool's nodes it may land on"


def _vision(stack: str):
    return team_rules(stack, "vision")


def _in_pool(pod: dict, pool: str | None) -> dict:
    if pool is not None:
        pod["spec"]["nodeSelector"] = {POOL_LABEL: pool}
    return pod


def _pool_refusals(pod: dict, stack: str) -> list[str]:
    return [m for m in denied_by(pod, _vision(stack)) if m.startswith(POOL_CAP)]


def test_a_one_gpu_pod_asking_all_of_a_p4ds_efa_interfaces_is_denied():
    """staging: 4 interfaces are a p5's share of 1 GPU and all of a p4d's."""
    assert _pool_refusals(_in_pool(_on_gpu_node(1, efa="4"), "a100"), "staging")


def test_a_two_gpu_pod_asking_all_of_a_p6_b200s_efa_interfaces_is_denied():
    assert _pool_refusals(_in_pool(_on_gpu_node(2, efa="8"), "b200-odcr"), "prod")


def test_a_pod_naming_no_pool_is_held_to_the_share_of_every_pool_it_fits():
    """With no pool named the scheduler may place a 2-GPU pod asking 8 interfaces on a p6-b200, whose 8 they are."""
    assert _pool_refusals(_in_pool(_on_gpu_node(2, efa="8"), None), "prod")


def test_a_four_gpu_pod_asking_all_of_a_p4ds_cpus_is_denied():
    pod = _in_pool(_on_gpu_node(4), "a100")
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "96"
    assert _pool_refusals(pod, "staging")


def test_a_pod_within_its_named_pools_share_is_admitted():
    """A p5's share of 1 GPU is 4 interfaces: the same pod that a p4d refuses is the h100 pool's to have."""
    assert denied_by(_in_pool(_on_gpu_node(1, efa="4"), "h100"), _vision("staging")) == []


def test_a_whole_node_pod_naming_no_pool_is_admitted_where_only_one_pool_fits_it():
    """8 GPUs and 32 interfaces fit only a p5 (a p5en has 16, a p6-b200 8): nothing of a smaller pool to hold."""
    pod = _on_gpu_node(8, efa="32")
    assert EFA_RESOURCE in pod["spec"]["containers"][0]["resources"]["limits"]
    assert denied_by(pod, _vision("prod")) == []


def test_a_pod_asking_memory_in_the_largest_suffixes_is_refused_by_the_cap_not_by_an_error():
    """The API server hands the policy a Pod's quantities in canonical form, which may end in any suffix of
    apimachinery's (n, u, m, k, M, G, T, P, E; Ki to Ei: kubernetes/kubernetes:staging/src/k8s.io/apimachinery/pkg/
    api/resource/suffix.go@7125a5f0); the evaluator must read each as `quantity()` does, or a test of a pod asking
    `1Ei` of memory would stop at an evaluation error and prove nothing of the cap."""
    from tests.admission_cel import quantity_value

    assert [quantity_value(q) for q in ("1n", "5u", "2E", "1Ei", "+3k", "1.5e3")] == pytest.approx(
        [1e-9, 5e-6, 2e18, 2.0**60, 3e3, 1.5e3]
    )
    pod = _in_pool(_on_gpu_node(1), "h100")
    pod["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1Ei"
    assert _pool_refusals(pod, "staging")


def _job_holding_a_p4ds_efa() -> dict:
    """A staging job of 1-GPU workers with all 4 of a p4d's interfaces each, as one made before the pools' own
    shares were capped."""
    job = _job()
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        spec["nodeSelector"] = {POOL_LABEL: "a100"}
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        asked = {"nvidia.com/gpu": 1, EFA_RESOURCE: 4, "memory": "8Gi"}
        spec["containers"][0]["resources"] = {"requests": {"cpu": "2", **asked}, "limits": asked}
    return job


def test_the_gang_deadline_may_suspend_a_job_made_before_a_cap_that_refuses_it():
    """A cap added or narrowed (this round's, or a stack's pools changing) must not keep the gang deadline from
    suspending a job already holding nodes: its UPDATE keeps every pod template, so its pods ask nothing new, and
    refused it would leave the gang on its nodes past its deadline."""
    from components import gang_deadline

    old = _job_holding_a_p4ds_efa()
    assert _pool_refusals(old, "staging")  # as a CREATE it is refused now
    suspended = copy.deepcopy(old)
    suspended["spec"]["runPolicy"]["suspend"] = True
    assert denied_by(suspended, _vision("staging"), operation="UPDATE", old=old, user=gang_deadline.USER) == []

"""A team holds no more GPU nodes than its GPUs (issue 34, point 1): its pods on GPU nodes may not
spread themselves one to a node or pick a node by name, and only its GPU pods may keep a node from
being emptied. The team admission policy's CEL evaluated with cel-expr-python, as
tests/security/test_tenancy.py does."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from components.cpu_nodes import ON_TEAM_CPU_NODES
from infra.core.names import EFA_RESOURCE, HUGEPAGES_RESOURCE, LONGEST_POD_DEADLINE, POOL_LABEL
from tests.security.test_tenancy import VISION, _job, _pod, denied_by

ONE_GPU = [
    {
        "name": "c",
        "image": "x",
        "securityContext": {"allowPrivilegeEscalation": False},
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
]
NO_GPU = [
    {
        "name": "c",
        "image": "x",
        "securityContext": {"allowPrivilegeEscalation": False},
        "resources": {"requests": {"cpu": "1"}},
    }
]
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
HOST = "kubernetes.io/hostname"
ANTI = {
    "requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": HOST}
    ]
}
SPREADING = {
    "topology_spread": {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": HOST,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "x"}},
            }
        ]
    },
    "pod_anti_affinity": {"affinity": {"podAntiAffinity": ANTI}},
    "hostname_selector": {"nodeSelector": {HOST: "ip-10-0-0-7"}},
    "hostname_affinity": {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": HOST, "operator": "In", "values": ["a", "b"]}]}]
                }
            }
        }
    },
    "node_field_affinity": {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        }
    },
    "preferred_hostname": {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {"matchExpressions": [{"key": HOST, "operator": "NotIn", "values": ["a"]}]},
                    }
                ]
            }
        }
    },
}
PACKED = "pods on GPU nodes are packed"
PINS = "only a pod with GPUs may keep its node"


@pytest.mark.parametrize("spread", sorted(SPREADING))
def test_one_gpu_pods_spread_one_to_a_node_are_denied(spread):
    assert any(m.startswith(PACKED) for m in denied_by(_pod(containers=ONE_GPU, **SPREADING[spread])))


@pytest.mark.parametrize("spread", sorted(SPREADING))
def test_a_job_whose_workers_spread_one_to_a_node_is_denied(spread):
    assert any(m.startswith(PACKED) for m in denied_by(_job(containers=ONE_GPU, **SPREADING[spread])))


def test_a_gpu_less_pod_tolerating_the_gpu_taint_may_not_spread_either():
    pod = _pod(containers=NO_GPU, tolerations=GPU_TOLERATION, **SPREADING["pod_anti_affinity"])
    assert any(m.startswith(PACKED) for m in denied_by(pod))


def test_pods_off_the_gpu_nodes_and_gpu_pods_choosing_a_zone_or_pool_are_admitted():
    assert (
        denied_by(
            _pod(containers=NO_GPU, **SPREADING["pod_anti_affinity"]),
        )
        == []
    )
    zone = {"nodeSelector": {"topology.kubernetes.io/zone": "us-east-2a", "higgsfield.io/pool": "h100"}}
    assert denied_by(_pod(containers=ONE_GPU, **zone)) == []


@pytest.mark.parametrize(
    ("key", "value"),
    [("karpenter.sh/do-not-disrupt", "true"), ("cluster-autoscaler.kubernetes.io/safe-to-evict", "false")],
)
def test_a_pod_without_gpus_on_a_gpu_node_may_not_pin_it(key, value):
    pod = _pod(containers=NO_GPU, tolerations=GPU_TOLERATION)
    pod["metadata"]["annotations"] = {key: value}
    assert any(m.startswith(PINS) for m in denied_by(pod))
    zero = _pod(containers=[{**NO_GPU[0], "resources": {"limits": {"nvidia.com/gpu": 0}}}])
    zero["metadata"]["annotations"] = {key: value}
    assert any(m.startswith(PINS) for m in denied_by(zero))


def test_a_gpu_pod_keeps_the_do_not_disrupt_the_platform_gives_training_pods():
    pod = _pod(containers=ONE_GPU)
    pod["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
    assert denied_by(pod) == []
    job = _job(containers=NO_GPU, tolerations=GPU_TOLERATION)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    }
    assert any(m.startswith(PINS) for m in denied_by(job))


def test_a_pod_pinned_by_a_label_unique_to_its_node_is_denied():
    """Beside the hostname: the health gate stamps each node with its kernel's boot id."""
    pod = _pod(containers=ONE_GPU, nodeSelector={"higgsfield.io/health-boot": "6f1c0e2a-1b2c-4d5e-8f90-123456789abc"})
    assert any(m.startswith(PACKED) for m in denied_by(pod))
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "higgsfield.io/health-boot", "operator": "In", "values": ["x"]}]}
                ]
            }
        }
    }
    assert any(m.startswith(PACKED) for m in denied_by(_pod(containers=ONE_GPU, affinity=affinity)))


RESOURCES = "pods on GPU nodes ask for"


@pytest.mark.parametrize("resource", ["ephemeral-storage", "hugepages-1Gi", "vpc.amazonaws.com/pod-eni"])
def test_a_pod_on_a_gpu_node_asking_a_resource_no_quota_shares_is_denied(resource):
    """A GPU-less pod asking most of a node's disk holds a node alone: a team's pods quota of them held
    that many GPU nodes."""
    container = {**NO_GPU[0], "resources": {"requests": {"cpu": "1", resource: "3000Gi"}}}
    assert any(m.startswith(RESOURCES) for m in denied_by(_pod(containers=[container], tolerations=GPU_TOLERATION)))
    init = {**NO_GPU[0], "name": "init", "resources": {"limits": {resource: "3000Gi"}}}
    pod = _pod(containers=ONE_GPU, initContainers=[init])
    assert any(m.startswith(RESOURCES) for m in denied_by(pod))


SHARED_NODES = {
    "gpu-node": {"containers": ONE_GPU, "tolerations": GPU_TOLERATION},
    "teams-cpu-node": {
        "containers": NO_GPU,
        "tolerations": ON_TEAM_CPU_NODES["tolerations"],
        "nodeSelector": ON_TEAM_CPU_NODES["nodeSelector"],
        "activeDeadlineSeconds": LONGEST_POD_DEADLINE,
    },
}


@pytest.mark.parametrize("node", sorted(SHARED_NODES))
def test_a_bare_pod_on_a_shared_node_is_denied_and_a_controllers_pod_admitted(node):
    """The Cluster Autoscaler never removes the node of a pod no controller owns."""
    pod = _pod(**copy.deepcopy(SHARED_NODES[node]))
    assert denied_by(pod) == []
    del pod["metadata"]["ownerReferences"]
    assert any(m.startswith("a pod on a GPU node is made by a controller") for m in denied_by(pod))
    assert denied_by(_pod(containers=NO_GPU) | {"metadata": {"name": "cpu", "namespace": "vision"}}) == []


# prod's p5.48xlarge: 192 vCPUs and 2,048 GiB for 8 GPUs
P5_SHARE = dataclasses.replace(VISION, gpu_share=(24.0, 256.0 * 2**30))
CAP = "a pod on a GPU node asks at most its GPUs' share"


def _asking(gpus: int, *requests: dict, init: dict | None = None) -> dict:
    containers = [
        {
            **NO_GPU[0],
            "name": f"c{i}",
            "resources": {"requests": r, **({"limits": {"nvidia.com/gpu": gpus}} if gpus and i == 0 else {})},
        }
        for i, r in enumerate(requests)
    ]
    extra = {"initContainers": [{**NO_GPU[0], "name": "init", "resources": {"requests": init}}]} if init else {}
    return _pod(containers=containers, tolerations=GPU_TOLERATION, **extra)


@pytest.mark.parametrize(
    "pod",
    [
        _asking(0, {"cpu": "188", "memory": "1Gi"}),
        _asking(0, {"cpu": "1", "memory": "1025Gi"}),
        _asking(0, {"cpu": "20"}, {"cpu": 20}),
        _asking(1, {"cpu": "100"}),
        _asking(0, {"cpu": "1"}, init={"memory": "1800Gi"}),
    ],
    ids=["gpu-less-188-vcpus", "gpu-less-1025-gib", "two-containers-40-vcpus", "one-gpu-100-vcpus", "init-1800-gib"],
)
def test_a_pod_asking_more_than_its_gpus_share_of_a_node_is_denied(pod):
    """Issue 34: pods just above half a node's CPU or memory each held a node alone, so a team's quota
    covered twice the nodes its GPUs would."""
    assert any(m.startswith(CAP) for m in denied_by(pod, P5_SHARE))


@pytest.mark.parametrize(
    "pod",
    [_asking(0, {"cpu": "24", "memory": "256Gi"}), _asking(8, {"cpu": "188", "memory": "1800Gi"}), _asking(0, {})],
    ids=["gpu-less-one-share", "eight-gpus-almost-a-node", "no-requests"],
)
def test_a_pod_within_its_gpus_share_is_admitted(pod):
    assert not any(m.startswith(CAP) for m in denied_by(pod, P5_SHARE))


def test_a_pod_level_request_above_its_gpus_share_is_denied():
    """Attack: pod-level `resources` (PodLevelResources, on by default since 1.34) is what the scheduler
    counts when set; containers asking nothing passed the cap while the pod asked 188 vCPUs."""
    pod = _asking(0, {})
    pod["spec"]["resources"] = {"requests": {"cpu": "188", "memory": "1Gi"}}
    assert any(m.startswith(CAP) for m in denied_by(pod, P5_SHARE))


def test_sidecars_count_with_the_containers_they_run_beside():
    """Attack: a sidecar (an init container with restartPolicy Always) runs for the pod's whole life, so
    its requests add to the containers' (the pod's request is their sum); each alone within one share
    was admitted at twice it."""
    pod = _asking(0, {"cpu": "24"})
    pod["spec"]["initContainers"] = [
        {**NO_GPU[0], "name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "24"}}}
    ]
    assert any(m.startswith(CAP) for m in denied_by(pod, P5_SHARE))


def test_an_in_place_resize_is_checked_against_the_share_too():
    """Attack: in-place resize (GA in Kubernetes 1.35) updates a running pod's requests through the
    pods/resize subresource with the whole Pod; the policy did not match it, so a pod admitted within
    its share could grow to a whole node's CPU."""
    from components import tenancy

    rules = tenancy.admission_policy(P5_SHARE)["spec"]["matchConstraints"]["resourceRules"]
    assert any("pods/resize" in r["resources"] and "UPDATE" in r["operations"] for r in rules)
    grown = _asking(0, {"cpu": "188"})
    assert any(m.startswith(CAP) for m in denied_by(grown, P5_SHARE, operation="UPDATE", old=_asking(0, {"cpu": "1"})))


def _template_without_requests(containers: int) -> dict:
    """A PyTorchJob whose worker template has `containers` containers that name no CPU or memory, one of them a GPU."""
    job = _job()
    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["tolerations"] = GPU_TOLERATION
    spec["containers"] = [
        {**ONE_GPU[0], "name": f"c{i}", **({} if i == 0 else {"resources": {}})} for i in range(containers)
    ]
    return job


# a team whose LimitRange gives each container that names nothing 8 vCPUs (defaultCpuRequestMillicores: 8000)
GENEROUS_DEFAULTS = dataclasses.replace(P5_SHARE, container_defaults=(8.0, 2.0**30))


def test_a_job_whose_containers_name_no_requests_is_refused_when_its_pods_would_be():
    """The LimitRange gives each of the pod's containers its defaultRequest after the job is admitted: four
    containers of 8 vCPUs are 32 for one GPU, above its 24 (p5). Before, the job was admitted and every pod it
    made refused by the same cap."""
    assert any(m.startswith(CAP) for m in denied_by(_template_without_requests(4), GENEROUS_DEFAULTS))


def test_a_job_whose_containers_name_no_requests_within_its_share_is_admitted():
    assert not any(m.startswith(CAP) for m in denied_by(_template_without_requests(3), GENEROUS_DEFAULTS))


def test_the_teams_policy_counts_the_defaults_its_limit_range_gives():
    from components.teams import container_defaults, rules_of
    from tests.conftest import config_of

    team = config_of("prod").scheduler.teams[0].model_copy(update={"default_cpu_request_millicores": 8000})
    given = container_defaults(team)["spec"]["limits"][0]["defaultRequest"]
    assert given == {"cpu": "8000m", "memory": "1024Mi"}
    assert rules_of(team).container_defaults == (8.0, 1024.0 * 2**20)


# --- EFA interfaces and huge pages: none without a GPU, the GPUs' share with them ---------------------------------

EFA, HUGE_PAGES = EFA_RESOURCE, HUGEPAGES_RESOURCE
EFA_CAP = "EFA interfaces and huge pages go with GPUs"


def _prod_vision():
    """vision's policy in prod, whose pools' largest share per GPU is a p5's: 32 EFA interfaces / 8 GPUs = 4, and
    2 x 5128 huge pages of 2 MiB / 8 GPUs = 1282Mi (components/demand.py gpu_node_share, the queue's share)."""
    from tests.conftest import team_rules

    return team_rules("prod", "vision")


def _on_gpu_node(gpus: int, **limits: str) -> dict:
    """A pod as the platform renders one (infra/offline/pods.py prepare_gpu_pod): GPUs, EFA and huge pages limited
    in its main container, a little CPU requested."""
    named = {EFA: limits.pop("efa", None), HUGE_PAGES: limits.pop("huge_pages", None)}
    asked = {"memory": "1Gi", **({"nvidia.com/gpu": gpus} if gpus else {}), **{k: v for k, v in named.items() if v}}
    container = {**NO_GPU[0], "resources": {"requests": {"cpu": "1"}, "limits": asked}}
    return _pod(containers=[container], tolerations=GPU_TOLERATION)


def _efa_refusals(pod: dict) -> list[str]:
    return [m for m in denied_by(pod, _prod_vision()) if m.startswith(EFA_CAP)]


def test_a_one_gpu_pod_asking_all_of_a_p5s_efa_interfaces_is_denied():
    """Issue 34: a 1-GPU pod with all 32 of a p5's interfaces took the node from every EFA gang while its team's
    other GPUs held other nodes."""
    assert _efa_refusals(_on_gpu_node(1, efa="32"))


def test_a_gpu_less_pod_asking_an_efa_interface_is_denied():
    assert _efa_refusals(_on_gpu_node(0, efa="1"))


def test_a_one_gpu_pod_asking_a_whole_nodes_huge_pages_is_denied():
    assert _efa_refusals(_on_gpu_node(1, huge_pages="5120Mi"))


def test_a_gpu_less_pod_asking_huge_pages_is_denied():
    assert _efa_refusals(_on_gpu_node(0, huge_pages="2Mi"))


@pytest.mark.parametrize(("gpus", "efa", "huge_pages"), [(1, 4, 1282), (8, 32, 10256)], ids=["one-gpu", "eight-gpus"])
def test_the_cap_is_exactly_the_gpus_share_of_efa_and_huge_pages(gpus, efa, huge_pages):
    """At its share a pod is admitted (the platform's whole-node pods ask 32 and 5120Mi on a p5); one interface or
    one 2 MiB page more is refused. On the p5s' pool: elsewhere a pool's own, smaller share holds
    (tests/security/test_r19_pool_share_attack.py)."""

    def on_p5(pod: dict) -> dict:
        pod["spec"]["nodeSelector"] = {POOL_LABEL: "h100"}
        return pod

    assert denied_by(on_p5(_on_gpu_node(gpus, efa=str(efa), huge_pages=f"{huge_pages}Mi")), _prod_vision()) == []
    assert _efa_refusals(on_p5(_on_gpu_node(gpus, efa=str(efa + 1), huge_pages=f"{huge_pages}Mi")))
    assert _efa_refusals(on_p5(_on_gpu_node(gpus, efa=str(efa), huge_pages=f"{huge_pages + 2}Mi")))


def test_a_sidecars_efa_counts_with_the_containers_it_runs_beside():
    """A sidecar (an init container with restartPolicy Always) runs beside the containers, so the pod asks their sum:
    4 interfaces each is 8 for one GPU."""
    pod = _on_gpu_node(1, efa="4")
    side = {**NO_GPU[0], "name": "side", "restartPolicy": "Always", "resources": {"limits": {EFA: "4"}}}
    pod["spec"]["initContainers"] = [side]
    assert _efa_refusals(pod)


def test_pod_level_huge_pages_count_too():
    """Pod-level `resources` may name huge pages beside CPU and memory, and the scheduler then counts the pod's
    figure (IsSupportedPodLevelResource and PodRequests, kubernetes/kubernetes:staging/src/k8s.io/component-helpers/
    resource/helpers.go@0085214e): a pod whose containers ask none may not ask them there."""
    pod = _on_gpu_node(1)
    pod["spec"]["resources"] = {"limits": {HUGE_PAGES: "5120Mi"}}
    assert _efa_refusals(pod)

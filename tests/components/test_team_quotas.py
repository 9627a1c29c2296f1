"""CPU and memory per team: a ResourceQuota on requested CPU and memory and
a LimitRange of default requests in every team namespace, from settings on the Team model with
defaults and bounds; every shipped example still fits its team's quota."""

from __future__ import annotations

from fractions import Fraction

import pytest

from components.demand import queue_resources
from components.teams import compute_quota, container_defaults, cpu_only_quota
from components.tenancy import CPU_ONLY_QUOTA
from infra.config import Team
from infra.config.errors import Problems
from infra.config.gpu_pools import gpu_share
from infra.config.scheduler import gang_floor
from infra.offline import jobs, kubernetes_schema
from tests.conftest import STACKS, assert_plan_rejects, config_of, plan_of

QUOTA, LIMITS = "kubernetes:core/v1:ResourceQuota", "kubernetes:core/v1:LimitRange"


def _by_namespace(plan, type_, name):
    return {r.inputs["metadata"]["namespace"]: r for r in plan.of_type(type_) if r.inputs["metadata"]["name"] == name}


def test_every_team_namespace_has_a_cpu_and_memory_quota_and_default_requests(plan):
    quotas, defaults = _by_namespace(plan, QUOTA, "compute"), _by_namespace(plan, LIMITS, "container-defaults")
    for team in plan.config.scheduler.teams:
        hard = quotas[team.name].inputs["spec"]["hard"]
        assert (hard["requests.cpu"], hard["requests.memory"]) == (str(team.cpu_quota), f"{team.memory_quota_gib}Gi")
        (limit,) = defaults[team.name].inputs["spec"]["limits"]
        assert limit["type"] == "Container"
        assert limit["defaultRequest"] == {
            "cpu": f"{team.default_cpu_request_millicores}m",
            "memory": f"{team.default_memory_request_mib}Mi",
        }
        assert (
            defaults[team.name].urn in quotas[team.name].dependencies
        )  # defaults first, or pods in between are refused


def test_every_team_namespace_has_a_cpu_only_quota_made_after_its_default_requests(plan):
    """Pods without GPUs (their deadline set) are held to CPU-only work's room (tests/security/
    test_cpu_only_quota.py); the LimitRange first, or a pod made between the two would be refused."""
    quotas, defaults = _by_namespace(plan, QUOTA, CPU_ONLY_QUOTA), _by_namespace(plan, LIMITS, "container-defaults")
    for team in plan.config.scheduler.teams:
        assert quotas[team.name].inputs["spec"] == cpu_only_quota(team)["spec"]
        assert defaults[team.name].urn in quotas[team.name].dependencies


def test_quota_objects_validate_against_the_kubernetes_schema(plan):
    version = plan.config.kubernetes_version
    for team in plan.config.scheduler.teams:
        kubernetes_schema.validate(compute_quota(team, plan.config.gpu_pools), version)
        kubernetes_schema.validate(cpu_only_quota(team), version)
        kubernetes_schema.validate(container_defaults(team), version)


def _quantity(value: str) -> float:
    value = str(value)
    for suffix, factor in (("Gi", 1024), ("Mi", 1), ("m", 1 / 1000)):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def _queue(plan, name: str) -> dict:
    (queue,) = [
        r
        for r in plan.of_type("kubernetes:scheduling.volcano.sh/v1beta1:Queue")
        if r.inputs["metadata"]["name"] == name
    ]
    return queue.inputs["spec"]["capability"]


# prod's largest GPU node in each dimension (p5.48xlarge, p5en.48xlarge, p6-b200.48xlarge: 8 GPUs each): 192
# vCPUs, 2,048 GiB, 32 EFA interfaces, 2 x 5,128 MiB of huge pages (components/efa.py); the room is for CPU-only work.
PROD_NODE = {"cpu": (192, 16), "memory": (2048 * 1024, 64 * 1024), "vpc.amazonaws.com/efa": (32, 0)}
PROD_NODE["hugepages-2Mi"] = (2 * 5128, 0)


@pytest.mark.parametrize("resource", sorted(PROD_NODE))
def test_a_teams_queue_and_quota_cover_no_more_nodes_than_its_gpus_in_any_dimension(resource):
    """Not gpuQuota x the largest GPU node AWS sells (a team of 32 GPUs held every node of the fleet
    with pods that ask no GPU, issue 34): its queue's capability and namespace quota hold gpuQuota / 8
    of prod's nodes in each dimension, no more."""
    plan = plan_of("prod")
    quotas = _by_namespace(plan, QUOTA, "compute")
    node, room = PROD_NODE[resource]
    for team in plan.config.scheduler.teams:
        most = team.gpu_quota / 8 * node + room
        capability, hard = _queue(plan, team.queue), quotas[team.name].inputs["spec"]["hard"]
        assert _quantity(capability.get(resource, "0")) <= most, (team.name, capability)
        assert _quantity(hard[f"requests.{resource}"]) <= most, (team.name, hard)


def test_a_teams_pods_are_its_gpus_and_one_launcher_per_node_plus_cpu_only_room():
    plan = plan_of("prod")
    quotas = _by_namespace(plan, QUOTA, "compute")
    for team in plan.config.scheduler.teams:
        assert quotas[team.name].inputs["spec"]["hard"]["pods"] == str(team.gpu_quota + team.gpu_quota // 8 + 16)


def test_no_team_may_create_a_pod_disruption_budget(plan):
    for quota in _by_namespace(plan, QUOTA, "compute").values():
        assert quota.inputs["spec"]["hard"]["count/poddisruptionbudgets.policy"] == "0"


def test_no_team_claims_ebs_volumes_and_object_counts_are_bounded(plan):
    for quota in _by_namespace(plan, QUOTA, "compute").values():
        hard = quota.inputs["spec"]["hard"]
        assert hard["gp3-encrypted.storageclass.storage.k8s.io/requests.storage"] == "0"
        assert hard["gp2.storageclass.storage.k8s.io/requests.storage"] == "0"
        assert all(int(hard[f"count/{kind}"]) > 0 for kind in ("configmaps", "secrets", "services"))


COUNTED = (
    "jobs.batch",
    "cronjobs.batch",
    "deployments.apps",
    "daemonsets.apps",
    "replicasets.apps",
    "statefulsets.apps",
    "replicationcontrollers",
    "horizontalpodautoscalers.autoscaling",
    "serviceaccounts",
    *(f"{r}.kubeflow.org" for r in ("pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "jaxjobs", "paddlejobs")),
)


def test_every_kind_a_team_creates_is_counted(plan):
    """A suspended Job, a CronJob or a Kubeflow job makes no pod, so the pods quota bounds none of them, and
    each may carry ~1.5 MiB of annotations into the etcd every team shares."""
    for quota in _by_namespace(plan, QUOTA, "compute").values():
        hard = quota.inputs["spec"]["hard"]
        assert all(int(hard[f"count/{kind}"]) > 0 for kind in COUNTED), sorted(set(COUNTED) - set(hard))


def test_no_team_makes_ingresses(plan):
    """No ingress controller serves them: an Ingress would only fill etcd."""
    for quota in _by_namespace(plan, QUOTA, "compute").values():
        assert quota.inputs["spec"]["hard"]["count/ingresses.networking.k8s.io"] == "0"


def test_a_teams_events_are_bounded_far_above_what_its_pods_make():
    """An Event's message has no length limit; the kubelet's and the operators' events about the team's pods
    count in the same quota, so the bound is 50 a pod of its quota (at least 1000)."""
    pools = config_of("prod").gpu_pools
    small, big = (compute_quota(_team(gpuQuota=g), pools)["spec"]["hard"] for g in (8, 512))
    for hard in (small, big):
        assert int(hard["count/events"]) == max(1000, 50 * int(hard["pods"]))
    assert int(big["count/events"]) > int(small["count/events"])


def test_job_counts_grow_with_the_teams_share_and_follow_its_setting():
    from components.teams import JOBS_FLOOR

    pools = config_of("prod").gpu_pools
    small, big = (compute_quota(_team(gpuQuota=g), pools)["spec"]["hard"] for g in (8, 512))
    assert int(small["count/pytorchjobs.kubeflow.org"]) == JOBS_FLOOR
    assert int(big["count/pytorchjobs.kubeflow.org"]) == 2 * int(big["pods"]) > JOBS_FLOOR
    assert int(big["count/deployments.apps"]) == int(big["pods"])
    set_ = compute_quota(_team(gpuQuota=8, maxJobs=1000), pools)["spec"]["hard"]
    assert set_["count/jobs.batch"] == set_["count/mpijobs.kubeflow.org"] == "1000"


def _team(**fields) -> Team:
    return Team.model_validate(
        {"name": "vision", "queue": "q", "gpuQuota": 8, "priorityClasses": ["batch-low"], "uid": 20003, **fields}
    )


P5_SHARE = {"cpu": Fraction(192, 8), "memory": Fraction(2048 * 1024, 8), "nodes": Fraction(1, 8)}


def test_quota_defaults_are_the_teams_share_of_the_pools_plus_cpu_only_room():
    problems = Problems()
    team = _team().within_share(P5_SHARE, problems, "teams[0]")
    assert (team.cpu_quota, team.memory_quota_gib) == (192 + 16, 2048 + 64)
    cpu_only = _team(gpuQuota=0).within_share(P5_SHARE, problems, "teams[0]")
    assert (cpu_only.cpu_quota, cpu_only.memory_quota_gib) == (16, 64)
    assert not problems


def test_a_quota_above_the_teams_share_is_refused():
    problems = Problems()
    _team(gpuQuota=0, cpuQuota=40, memoryQuotaGiB=65).within_share(P5_SHARE, problems, "teams[0]")
    assert [where for where, _ in problems.found] == ["teams[0].cpuQuota", "teams[0].memoryQuotaGiB"]


def test_the_quota_floor_is_the_queues_host_capability(plan):
    """A ResourceQuota below what the queue admits would refuse part of an admitted gang, and the
    autoscaler would buy nodes for the rest (docs/design/autoscaler-demand.md): the floor is the queue's."""
    share = gpu_share(plan.config.gpu_pools)
    for gpus in (1, 8, 160):
        held = queue_resources(gpus, plan.config.gpu_pools)
        cpu, memory_gib = gang_floor(gpus, share)
        assert cpu == int(held["cpu"]) and memory_gib * 1024 >= int(held["memory"].removesuffix("Mi"))


def test_every_shipped_team_quota_covers_its_queue(plan):
    hard = {n: q.inputs["spec"]["hard"] for n, q in _by_namespace(plan, QUOTA, "compute").items()}
    for team in plan.config.scheduler.teams:
        (queue,) = [q for q in plan.config.scheduler.queues if q.name == team.queue]
        held = queue_resources(queue.gpu_capability, plan.config.gpu_pools)
        for resource, amount in held.items():
            if resource != "nvidia.com/gpu":
                assert _quantity(hard[team.name][f"requests.{resource}"]) >= _quantity(amount), (team.name, resource)


def _requests(job: dict) -> tuple[float, float, int]:
    """vCPUs, GiB and pods a job's pods request at most (containers without requests get the defaults)."""
    cpu = memory = 0.0
    pods = 0
    elastic = job["spec"].get("elasticPolicy")
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs"):
        for replica, spec in (job["spec"].get(key) or {}).items():
            count = elastic["maxReplicas"] if elastic and replica == "Worker" else spec["replicas"]
            pod = spec["template"]["spec"]
            pods += count
            for c in [*pod.get("containers", []), *pod.get("initContainers", [])]:
                req = c.get("resources", {}).get("requests", {})
                cpu += count * _cpu(req.get("cpu", "500m"))
                memory += count * _gib(req.get("memory", "1Gi"))
    return cpu, memory, pods


def _cpu(value) -> float:
    value = str(value)
    return int(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _gib(value) -> float:
    value = str(value)
    for suffix, factor in (("Ti", 1024), ("Gi", 1), ("Mi", 1 / 1024), ("Ki", 1 / 1024**2)):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value) / 1024**3


SHIPPED = [(s, e) for s in STACKS for e in jobs.examples_for(config_of(s))]


@pytest.mark.parametrize(("stack", "example"), SHIPPED, ids=["-".join(s) for s in SHIPPED])
def test_every_shipped_example_fits_its_teams_cpu_and_memory_quota(stack, example):
    cfg = plan_of(stack).config
    job = jobs.render(example, cfg)[-1]
    team = next(t for t in cfg.scheduler.teams if t.name == job["metadata"]["namespace"])
    cpu, memory, pods = _requests(job)
    hard = compute_quota(team, cfg.gpu_pools)["spec"]["hard"]
    assert cpu <= team.cpu_quota and memory <= team.memory_quota_gib and pods <= int(hard["pods"]), (
        cpu,
        memory,
        pods,
        hard,
    )


S = "higgsfield:scheduler"


def _teams(**fields):
    def change(config):
        teams = [dict(t) for t in config[S]["teams"]]
        teams[0].update(fields)
        config[S] = {**config[S], "teams": teams}

    return change


@pytest.mark.parametrize(
    ("change", "key", "detail"),
    [
        (_teams(cpuQuota=0), f"{S}.teams[0].cpuQuota", "must be at least 1"),
        (_teams(cpuQuota=1), f"{S}.teams[0].cpuQuota", "would create part of a gang"),
        (_teams(cpuQuota=1000), f"{S}.teams[0].cpuQuota", "more GPU nodes than its gpuQuota"),
        (_teams(memoryQuotaGiB=1), f"{S}.teams[0].memoryQuotaGiB", "would create part of a gang"),
        (_teams(memoryQuotaGiB=2_000_000_000), f"{S}.teams[0].memoryQuotaGiB", "must be at most 1,000,000,000"),
        (
            _teams(cpuQuota=1, defaultCpuRequestMillicores=2000),
            f"{S}.teams[0].defaultCpuRequestMillicores",
            "above the team's cpuQuota of 1 vCPUs",
        ),
        (_teams(defaultMemoryRequestMiB=8), f"{S}.teams[0].defaultMemoryRequestMiB", "must be at least 16"),
        (_teams(maxJobs=0), f"{S}.teams[0].maxJobs", "must be at least 1"),
    ],
    ids=[
        "cpu-zero",
        "cpu-below-queue",
        "cpu-above-share",
        "memory-below-queue",
        "memory-huge",
        "default-above-quota",
        "default-tiny",
        "max-jobs-zero",
    ],
)
def test_bad_quota_settings_name_the_key(project_copy, capsys, change, key, detail):
    assert_plan_rejects(project_copy, capsys, "dev", change, key, detail)

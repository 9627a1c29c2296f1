"""CPU and memory per team: a ResourceQuota on requested CPU and memory and
a LimitRange of default requests in every team namespace, from settings on the Team model with
defaults and bounds; every shipped example still fits its team's quota."""

from __future__ import annotations

import pytest

from components.demand import queue_resources
from components.teams import compute_quota, container_defaults
from infra.config import Team
from infra.config.scheduler import gang_floor
from infra.offline import jobs, kubernetes_schema
from tests.conftest import STACKS, assert_plan_rejects, config_of, plan_of

QUOTA, LIMITS = "kubernetes:core/v1:ResourceQuota", "kubernetes:core/v1:LimitRange"


def _by_namespace(plan, type_, name):
    return {r.inputs["metadata"]["namespace"]: r for r in plan.of_type(type_) if r.inputs["metadata"]["name"] == name}


def test_every_team_namespace_has_a_cpu_and_memory_quota_and_default_requests(plan):
    quotas, defaults = _by_namespace(plan, QUOTA, "compute"), _by_namespace(plan, LIMITS, "container-defaults")
    for team in plan.config.scheduler.teams:
        assert quotas[team.name].inputs["spec"]["hard"] == {
            "requests.cpu": str(team.cpu_quota),
            "requests.memory": f"{team.memory_quota_gib}Gi",
        }
        (limit,) = defaults[team.name].inputs["spec"]["limits"]
        assert limit["type"] == "Container"
        assert limit["defaultRequest"] == {
            "cpu": f"{team.default_cpu_request_millicores}m",
            "memory": f"{team.default_memory_request_mib}Mi",
        }
        assert (
            defaults[team.name].urn in quotas[team.name].dependencies
        )  # defaults first, or pods in between are refused


def test_quota_objects_validate_against_the_kubernetes_schema(plan):
    version = plan.config.kubernetes_version
    for team in plan.config.scheduler.teams:
        kubernetes_schema.validate(compute_quota(team), version)
        kubernetes_schema.validate(container_defaults(team), version)


def _team(**fields) -> Team:
    return Team.model_validate(
        {"name": "vision", "queue": "q", "gpuQuota": 8, "priorityClasses": ["batch-low"], "uid": 20003, **fields}
    )


def test_quota_defaults_cover_what_the_teams_queue_admits_plus_cpu_only_room():
    cpu_floor, memory_floor = gang_floor(8)
    team = _team()
    assert (team.cpu_quota, team.memory_quota_gib) == (cpu_floor + 16, memory_floor + 64)
    cpu_only = _team(gpuQuota=0)
    assert (cpu_only.cpu_quota, cpu_only.memory_quota_gib) == (16, 64)
    assert _team(gpuQuota=0, cpuQuota=40).cpu_quota == 40


def test_the_quota_floor_is_the_queues_host_capability():
    """A ResourceQuota below what the queue admits would refuse part of an admitted gang, and the
    autoscaler would buy nodes for the rest (docs/design/autoscaler-demand.md): the floor is the queue's."""
    for gpus in (1, 8, 160):
        held = queue_resources(gpus)
        cpu, memory_gib = gang_floor(gpus)
        assert cpu == int(held["cpu"]) and memory_gib * 1024 >= int(held["memory"].removesuffix("Mi"))


def test_every_shipped_team_quota_covers_its_queue(plan):
    for team in plan.config.scheduler.teams:
        (queue,) = [q for q in plan.config.scheduler.queues if q.name == team.queue]
        held = queue_resources(queue.gpu_capability)
        assert team.cpu_quota >= int(held.get("cpu", 0)) and team.memory_quota_gib * 1024 >= int(
            held.get("memory", "0Mi").removesuffix("Mi")
        )


def _requests(job: dict) -> tuple[float, float]:
    """vCPUs and GiB a job's pods request at most (containers without requests get the defaults)."""
    cpu = memory = 0.0
    elastic = job["spec"].get("elasticPolicy")
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs"):
        for replica, spec in (job["spec"].get(key) or {}).items():
            count = elastic["maxReplicas"] if elastic and replica == "Worker" else spec["replicas"]
            pod = spec["template"]["spec"]
            for c in [*pod.get("containers", []), *pod.get("initContainers", [])]:
                req = c.get("resources", {}).get("requests", {})
                cpu += count * _cpu(req.get("cpu", "500m"))
                memory += count * _gib(req.get("memory", "1Gi"))
    return cpu, memory


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
    cpu, memory = _requests(job)
    assert cpu <= team.cpu_quota and memory <= team.memory_quota_gib, (
        cpu,
        memory,
        team.cpu_quota,
        team.memory_quota_gib,
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
        (_teams(cpuQuota=100), f"{S}.teams[0].cpuQuota", "would create part of a gang"),
        (_teams(memoryQuotaGiB=100), f"{S}.teams[0].memoryQuotaGiB", "would create part of a gang"),
        (_teams(memoryQuotaGiB=2_000_000_000), f"{S}.teams[0].memoryQuotaGiB", "must be at most 1,000,000,000"),
        (
            _teams(cpuQuota=1, defaultCpuRequestMillicores=2000),
            f"{S}.teams[0].defaultCpuRequestMillicores",
            "above the team's cpuQuota of 1 vCPUs",
        ),
        (_teams(defaultMemoryRequestMiB=8), f"{S}.teams[0].defaultMemoryRequestMiB", "must be at least 16"),
    ],
    ids=["cpu-zero", "cpu-below-queue", "memory-below-queue", "memory-huge", "default-above-quota", "default-tiny"],
)
def test_bad_quota_settings_name_the_key(project_copy, capsys, change, key, detail):
    assert_plan_rejects(project_copy, capsys, "dev", change, key, detail)

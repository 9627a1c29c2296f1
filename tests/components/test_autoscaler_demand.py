"""No node for work that can't run (docs/design/autoscaler-demand.md).

Each upstream rule the mechanism rests on is written here as a small function, next to the file and
ref it was read in, and run over what we render: the Volcano scheduler configuration and queues of
the plan, the teams' ResourceQuotas, and the jobs `higgsfield jobs render` writes. The scenarios:
a gang over its queue's capability, a gang that fits with every pool at zero, a gang that a quota
would split; and the configuration without `enqueue` as the control that shows the rules bite."""

from __future__ import annotations

import pytest
import yaml

from infra.config import DEFAULT_PRIORITY_CLASS
from infra.offline import jobs
from infra.offline.pods import mebibytes
from tests.conftest import STACKS, plan_of

QUEUE = "kubernetes:scheduling.volcano.sh/v1beta1:Queue"
QUOTA = "kubernetes:core/v1:ResourceQuota"


# --- the upstream rules -----------------------------------------------------------------------------


def _amount(name: str, quantity) -> float:
    """A quantity in the unit Volcano compares: millicores for cpu, MiB for memory and huge pages."""
    text = str(quantity)
    if name == "cpu":
        return float(text[:-1]) if text.endswith("m") else float(text) * 1000
    if name == "memory" or name.startswith("hugepages-"):
        return mebibytes(text)
    return float(text)


def min_resources(job: dict) -> dict[str, float]:
    """The PodGroup's minResources the operator writes: requests of the first minMember pods, a
    container's limits standing in when it has no requests (CalcPGMinResources and AddResourceList,
    kubeflow/trainer:pkg/controller.v1/common/util.go@v1.9.4)."""
    total: dict[str, float] = {}
    left = job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"]
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs"):
        for spec in (job["spec"].get(key) or {}).values():
            for _ in range(spec.get("replicas", 1)):
                if left == 0:
                    break
                left -= 1
                for container in spec["template"]["spec"]["containers"]:
                    resources = container.get("resources") or {}
                    counted = (
                        resources.get("requests")
                        if resources.get("requests") is not None
                        else resources.get("limits") or {}
                    )
                    for name, quantity in counted.items():
                        total[name] = total.get(name, 0.0) + _amount(name, quantity)
    return total


def _resources(spec: dict | None) -> dict[str, float]:
    return {name: _amount(name, q) for name, q in (spec or {}).items()}


def real_capability(queue: dict, queues: list[dict], cluster_total: dict[str, float]) -> dict[str, float]:
    """realCapability = ExceededPart(total, totalGuarantee) + guarantee, then each dimension the
    capability names capped by it (proportion.go OnSessionOpen, api.ExceededPart,
    MinDimensionResource with api.Infinity: volcano-sh/volcano:pkg/scheduler/plugins/proportion/
    proportion.go and pkg/scheduler/api/resource_info.go@v1.15.1)."""
    guarantee = _resources((queue.get("guarantee") or {}).get("resource"))
    total_guarantee: dict[str, float] = {}
    for q in queues:
        for name, v in _resources((q.get("guarantee") or {}).get("resource")).items():
            total_guarantee[name] = total_guarantee.get(name, 0.0) + v
    names = set(cluster_total) | set(guarantee)
    real = {n: max(cluster_total.get(n, 0.0) - total_guarantee.get(n, 0.0), 0.0) + guarantee.get(n, 0.0) for n in names}
    for name, cap in _resources(queue.get("capability")).items():
        real[name] = min(real.get(name, 0.0), cap)
    return real


def proportion_admits(min_req: dict[str, float], held: dict[str, float], real: dict[str, float]) -> bool:
    """proportion's enqueue vote: minReq + allocated + inqueue fits realCapability in every
    dimension the job requests (LessEqualWithDimensionAndResourcesName, resource_info.go@v1.15.1)."""
    return all(min_req[n] + held.get(n, 0.0) <= real.get(n, 0.0) for n in min_req if min_req[n] > 0)


def podgroup_phase(actions: list[str], admitted: bool) -> str:
    """Without `enqueue`, allocate turns every Pending PodGroup Inqueue (actions/allocate/allocate.go
    @v1.15.1); with it, only an admitted one leaves Pending (actions/enqueue/enqueue.go)."""
    return "Inqueue" if ("enqueue" not in actions or admitted) else "Pending"


def operator_creates_pods(phase: str) -> bool:
    """DelayPodCreationDueToPodGroup: no pods while the phase is empty or Pending
    (kubeflow/trainer:pkg/controller.v1/control/podgroup_control.go@v1.9.4)."""
    return phase not in ("", "Pending")


def autoscaler_demand(pods_created: int) -> int:
    """Pods the Cluster Autoscaler scales up for: those that exist, unbound, which Volcano marks
    PodScheduled=False/Unschedulable (cache.go RecordJobStatusEvent@v1.15.1; ArrangePodsBySchedulability,
    kubernetes/autoscaler:cluster-autoscaler/utils/kubernetes/listers.go@cluster-autoscaler-1.35.2)."""
    return pods_created


def quota_admits(pods: list[dict], quotas: list[dict]) -> int:
    """How many of `pods`, created one by one, the namespace's ResourceQuotas let through: each is
    checked alone at creation against `hard` (requests.X and X count the pod's requests)."""
    used: dict[str, float] = {}
    admitted = 0
    for pod in pods:
        wants = {}
        for c in pod["containers"]:
            res = c.get("resources") or {}
            for name, q in (res.get("requests") or res.get("limits") or {}).items():
                wants[f"requests.{name}"] = wants.get(f"requests.{name}", 0.0) + _amount(name, q)
        wants["pods"] = 1.0
        fits = all(
            used.get(k, 0.0) + v <= _amount(k.removeprefix("requests."), hard)
            for quota in quotas
            if not quota["spec"].get("scopeSelector")
            for k, hard in quota["spec"]["hard"].items()
            for v in [wants.get(k, 0.0)]
            if k in wants
        )
        if not fits:
            break
        admitted += 1
        for k, v in wants.items():
            used[k] = used.get(k, 0.0) + v
    return admitted


# --- what we render ---------------------------------------------------------------------------------


def _actions(plan) -> list[str]:
    (release,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.name == "volcano"]
    config = yaml.safe_load(release.inputs["values"]["custom"]["scheduler_config_override"])
    return [a.strip() for a in config["actions"].split(",")], config


def _queues(plan) -> dict[str, dict]:
    return {q.inputs["metadata"]["name"]: q.inputs["spec"] for q in plan.of_type(QUEUE)}


def _system_nodes_only(plan) -> dict[str, float]:
    """What the cluster holds with every GPU pool at zero: the system nodes (their instance type's
    vCPUs and memory from moto's copy of AWS's instance-type catalog; no GPUs, no EFA)."""
    from infra.core.bundled import instance_types

    nodes = plan.config.cpu_nodes
    facts = instance_types()[nodes.instance_types[0]]
    return {
        "cpu": nodes.desired_size * facts["VCpuInfo"]["DefaultVCpus"] * 1000.0,
        "memory": nodes.desired_size * float(facts["MemoryInfo"]["SizeInMiB"]),
    }


def _gang(stack: str, example: str = "pytorch-ddp", **kw) -> tuple[dict, object]:
    cfg = plan_of(stack).config
    job = jobs.render(example, cfg, **kw)[-1]
    team = next(t for t in cfg.scheduler.teams if t.name == job["metadata"]["namespace"])
    return job, team


def _pods(job: dict) -> list[dict]:
    pods = []
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        pods += [spec["template"]["spec"]] * spec.get("replicas", 1)
    return pods


@pytest.mark.parametrize("stack", STACKS)
def test_the_scheduler_gates_podgroups_with_enqueue_before_allocate(stack):
    actions, config = _actions(plan_of(stack))
    assert actions[0] == "enqueue" and "allocate" in actions
    assert "proportion" in {p["name"] for tier in config["tiers"] for p in tier["plugins"]}


@pytest.mark.parametrize("stack", STACKS)
def test_no_overcommit_plugin_compares_a_gang_with_the_nodes_there_are_before_the_first(stack):
    _, config = _actions(plan_of(stack))
    assert "overcommit" not in {p["name"] for tier in config["tiers"] for p in tier["plugins"]}


@pytest.mark.parametrize("stack", STACKS)
def test_a_gang_that_fits_its_queue_is_admitted_with_every_pool_at_zero(stack):
    """Scale from zero (volcano-sh/volcano#3910): the gang's pods must exist for the autoscaler."""
    plan = plan_of(stack)
    job, team = _gang(stack)
    queues = _queues(plan)
    real = real_capability(queues[team.queue], list(queues.values()), _system_nodes_only(plan))
    admitted = proportion_admits(min_resources(job), {}, real)
    phase = podgroup_phase(_actions(plan)[0], admitted)
    assert admitted and operator_creates_pods(phase) and autoscaler_demand(len(_pods(job))) > 0


@pytest.mark.parametrize("stack", STACKS)
def test_a_gang_over_its_queues_capability_creates_no_pods_and_no_demand(stack):
    """The queue already holds all its GPUs (a running job): the next gang stays Pending."""
    plan = plan_of(stack)
    job, team = _gang(stack)
    queues = _queues(plan)
    spec = queues[team.queue]
    real = real_capability(spec, list(queues.values()), _system_nodes_only(plan))
    held = {"nvidia.com/gpu": _amount("nvidia.com/gpu", spec["capability"]["nvidia.com/gpu"])}
    admitted = proportion_admits(min_resources(job), held, real)
    phase = podgroup_phase(_actions(plan)[0], admitted)
    assert not admitted and phase == "Pending" and not operator_creates_pods(phase)


def test_control_without_enqueue_the_over_quota_gang_gets_pods_and_buys_nodes():
    """The control, without `enqueue` (actions "allocate, backfill"): the same gang is
    Inqueue at once, its pods exist and are marked Unschedulable - volcano-sh/volcano#4710."""
    phase = podgroup_phase(["allocate", "backfill"], admitted=False)
    assert operator_creates_pods(phase) and autoscaler_demand(4) == 4


def test_control_without_a_guarantee_a_gang_is_never_admitted_at_zero():
    """Why each queue guarantees its capability: realCapability follows the nodes there are."""
    plan = plan_of("prod")
    job, team = _gang("prod")
    queues = {n: {k: v for k, v in q.items() if k not in ("guarantee", "deserved")} for n, q in _queues(plan).items()}
    real = real_capability(queues[team.queue], list(queues.values()), _system_nodes_only(plan))
    assert not proportion_admits(min_resources(job), {}, real)


@pytest.mark.parametrize("stack", STACKS)
def test_queues_guarantee_what_they_may_hold_as_volcanos_webhook_accepts(stack):
    """guarantee <= deserved <= capability per resource (validateResourceQuantityOfQueue,
    volcano-sh/volcano:pkg/webhooks/admission/queues/validate/validate_queue.go@v1.15.1)."""
    for name, spec in _queues(plan_of(stack)).items():
        guarantee = _resources((spec.get("guarantee") or {}).get("resource"))
        deserved, capability = _resources(spec.get("deserved")), _resources(spec.get("capability"))
        for resource, amount in guarantee.items():
            assert resource in deserved and amount <= deserved[resource], (name, resource)
        for resource, amount in deserved.items():
            assert resource not in capability or amount <= capability[resource], (name, resource)


@pytest.mark.parametrize("stack", STACKS)
def test_no_quota_in_a_team_namespace_can_create_part_of_a_gang(stack):
    """Every pod of a rendered gang is admitted by the namespace's quotas, or none is."""
    plan = plan_of(stack)
    job, team = _gang(stack)
    quotas = [q.inputs for q in plan.of_type(QUOTA) if q.inputs["metadata"]["namespace"] == team.name]
    admitted = quota_admits(_pods(job), quotas)
    assert admitted in (0, len(_pods(job)))
    # serving's own quota is scoped to the serving classes, which no gang may carry (the team policy
    # refuses them on Kubeflow jobs: tests/offline/test_preemption.py
    # test_a_training_job_may_not_carry_the_serving_class); the plain workloads' quota to every class
    # but training, which the team policy keeps off plain GPU pods (components/tenancy.py plain_gpu_validations)
    classes = plan.config.scheduler.priority_classes
    serving = {c.name for c in classes if c.workload == "serving"}
    training = {c.name for c in classes if c.workload == "training" and c.name in team.priority_classes}
    training.add(DEFAULT_PRIORITY_CLASS)  # a gang's pods whose template names no class

    def counts_no_training_pod(q: dict) -> bool:
        scope = (q["spec"].get("scopeSelector") or {}).get("matchExpressions") or []
        return bool(scope) and all(
            e["scopeName"] == "PriorityClass"
            and (
                (e["operator"] == "In" and set(e["values"]) <= serving)
                or (e["operator"] == "NotIn" and set(e["values"]) >= training)
            )
            for e in scope
        )

    assert not [
        q for q in quotas if any("nvidia.com/gpu" in k for k in q["spec"]["hard"]) and not counts_no_training_pod(q)
    ]


def test_control_a_gpu_resource_quota_would_create_part_of_a_gang():
    """The rule the quota test rests on: a GPU ResourceQuota below the gang admits its first pods."""
    job, _ = _gang("staging", team="llm")
    pods = _pods(job)
    per_pod = _amount("nvidia.com/gpu", pods[0]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    quota = {"spec": {"hard": {"requests.nvidia.com/gpu": str(int(per_pod * (len(pods) - 1)))}}}
    assert 0 < quota_admits(pods, [quota]) < len(pods)


@pytest.mark.parametrize("stack", STACKS)
def test_every_shipped_example_gang_fits_its_queues_guarantee_in_every_dimension(stack):
    """The host dimensions of the guarantee never refuse a gang the GPUs admit."""
    plan = plan_of(stack)
    queues = _queues(plan)
    for example in jobs.examples_for(plan.config):
        job = jobs.render(example, plan.config)[-1]
        if "pytorchReplicaSpecs" not in job["spec"]:
            continue
        team = next(t for t in plan.config.scheduler.teams if t.name == job["metadata"]["namespace"])
        guarantee = _resources(queues[team.queue]["guarantee"]["resource"])
        wants = min_resources(job)
        assert all(v <= guarantee.get(n, 0.0) for n, v in wants.items() if v), (example, wants, guarantee)

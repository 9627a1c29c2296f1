"""`higgsfield plan STACK`: what the recorded offline plan holds, at a glance. Everything here is
read back from the recording (the resources the program registered, with their inputs), not from
the stack file, so the summary shows what would be deployed. The text is infra/cli/views/plan.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from infra.core.names import GPU_RESOURCE, QUEUE_ANNOTATION
from infra.offline.evaluate import Plan, Resource


def is_component(r: Resource) -> bool:
    return not r.custom


def get(inputs: Any, *path: str, default: Any = None) -> Any:
    value: Any = inputs
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return default
        value = value[key]
    return value


def lustre_throughput_mb_s(i: dict) -> float:
    """The throughput of a recorded FSx for Lustre file system's inputs."""
    from infra.config import lustre_throughput_mb_s as throughput

    return throughput(i.get("storageCapacity", 0), i.get("perUnitStorageThroughput"))


def gpu_pool_rows(plan: Plan) -> list[dict]:
    """Per GPU node group, what a reviewer decides by, read back from the recording (Karpenter
    pools: karpenter_pool_rows)."""
    rows = []
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        labels = group.inputs.get("labels") or {}
        if labels.get("nvidia.com/gpu.present") != "true":
            continue
        (template,) = plan.dependencies_of(group, "aws:ec2/launchTemplate:LaunchTemplate")
        zones = sorted({s.inputs.get("availabilityZone") for s in plan.dependencies_of(group, "aws:ec2/subnet:Subnet")})
        tags = {
            t.inputs["tag"]["key"].rsplit("/", 1)[-1]: t.inputs["tag"]["value"]
            for t in plan.of_type("aws:autoscaling/tag:Tag")
            if group.urn in t.dependencies and "/resources/" in t.inputs["tag"]["key"]
        }
        nics = template.inputs.get("networkInterfaces") or []
        scaling = group.inputs.get("scalingConfig") or {}
        reservation = get(
            template.inputs, "capacityReservationSpecification", "capacityReservationTarget", "capacityReservationId"
        )
        gpus = tags.get("gpu")
        rows.append(
            {
                "pool": labels.get("higgsfield.io/pool"),
                "instance_types": group.inputs.get("instanceTypes"),
                "gpus_per_node": gpus,
                "efa_interfaces": sum(1 for n in nics if n.get("interfaceType") == "efa-only"),
                "availability_zones": zones,
                "min": scaling.get("minSize"),
                "max": scaling.get("maxSize"),
                "max_gpus": int(gpus or 0) * (scaling.get("maxSize") or 0),
                "capacity": group.inputs.get("capacityType") + (f" {reservation}" if reservation else ""),
            }
        )
    return sorted(rows, key=lambda r: r["pool"])


def karpenter_pool_rows(plan: Plan) -> list[dict]:
    """Per Karpenter NodePool of a GPU pool, the same row as a node group's, read back from the
    NodePool and its EC2NodeClass: the GPUs per node from the instance catalog, the most nodes
    from the NodePool's GPU limit (components/karpenter.py: maxSize x GPUs per node)."""
    from infra.core.catalog import describe

    classes = {c["metadata"]["name"]: c for c in _manifests_of_kind(plan, "EC2NodeClass")}
    rows = []
    for pool in _manifests_of_kind(plan, "NodePool"):
        template = get(pool, "spec", "template", default={})
        labels = get(template, "metadata", "labels", default={})
        if labels.get("nvidia.com/gpu.present") != "true":
            continue
        requirements = {r["key"]: r.get("values", []) for r in get(template, "spec", "requirements", default=[])}
        types = requirements.get("node.kubernetes.io/instance-type", [])
        gpus = describe(types[0]).gpus if types else 0
        limit = int(get(pool, "spec", "limits", GPU_RESOURCE, default=0) or 0)
        nodeclass = classes.get(get(template, "spec", "nodeClassRef", "name", default=""), {})
        nics = get(nodeclass, "spec", "networkInterfaces", default=[]) or []
        rows.append(
            {
                "pool": labels.get("higgsfield.io/pool"),
                "instance_types": types,
                "gpus_per_node": str(gpus),
                "efa_interfaces": sum(1 for n in nics if n.get("interfaceType") == "efa-only"),
                "availability_zones": sorted(requirements.get("topology.kubernetes.io/zone", [])),
                "min": 0,
                "max": limit // gpus if gpus else 0,
                "max_gpus": limit,
                "capacity": " ".join(requirements.get("karpenter.sh/capacity-type", [])) + " (Karpenter)",
            }
        )
    return rows


def _manifests_of_kind(plan: Plan, kind: str) -> list[dict]:
    return [r.inputs for r in plan.resources if r.type.startswith("kubernetes:") and r.inputs.get("kind") == kind]


def queue_rows(plan: Plan) -> list[dict]:
    """Each Volcano queue with its weight and GPU capability, and the teams whose namespace sends
    jobs to it with their GPU quota (higgsfield:scheduler.teams[].gpuQuota: no Kubernetes
    ResourceQuota holds it, since one would admit part of a gang; tests/components/test_autoscaler_demand.py)."""
    quotas = {t.name: t.gpu_quota for t in plan.config.scheduler.teams}
    teams: dict[str, list[tuple[str, int | None]]] = {}
    for ns in _manifests_of_kind(plan, "Namespace"):
        queue = get(ns, "metadata", "annotations", QUEUE_ANNOTATION)
        if queue:
            name = get(ns, "metadata", "name")
            teams.setdefault(queue, []).append((name, quotas.get(name)))
    rows = []
    for q in _manifests_of_kind(plan, "Queue"):
        name = get(q, "metadata", "name")
        rows.append(
            {
                "queue": name,
                "weight": get(q, "spec", "weight"),
                "gpu_capability": int(get(q, "spec", "capability", GPU_RESOURCE, default=0)),
                "teams": [{"team": t, "gpu_quota": quota} for t, quota in sorted(teams.get(name, []))],
            }
        )
    return sorted(rows, key=lambda r: (-r["gpu_capability"], r["queue"]))


def file_system_rows(plan: Plan) -> list[dict]:
    return [
        {
            "name": fs.name,
            "deployment_type": fs.inputs.get("deploymentType"),
            "storage_gib": fs.inputs.get("storageCapacity"),
            "per_tib_mb_s": fs.inputs.get("perUnitStorageThroughput"),
            "throughput_mb_s": lustre_throughput_mb_s(fs.inputs),
            "availability_zones": sorted(
                {s.inputs.get("availabilityZone") for s in plan.dependencies_of(fs, "aws:ec2/subnet:Subnet")}
            ),
        }
        for fs in plan.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    ]


@dataclass(frozen=True)
class Summary:
    resources: int
    custom: int
    components: int
    kinds: list[tuple[str, int]]  # cloud/Kubernetes resource type -> count, most numerous first
    gpu_pools: list[dict]
    queues: list[dict]
    file_systems: list[dict]

    @property
    def gpu_nodes(self) -> int:
        return sum(p["max"] or 0 for p in self.gpu_pools)

    @property
    def gpu_capacity(self) -> int:
        """GPUs with every pool at maxSize."""
        return sum(p["max_gpus"] for p in self.gpu_pools)


def summarize(plan: Plan) -> Summary:
    kinds = Counter(r.type for r in plan.resources if r.custom)
    custom = sum(kinds.values())
    return Summary(
        resources=len(plan.resources),
        custom=custom,
        components=len(plan.resources) - custom,
        kinds=sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])),
        gpu_pools=sorted(gpu_pool_rows(plan) + karpenter_pool_rows(plan), key=lambda r: r["pool"]),
        queues=queue_rows(plan),
        file_systems=file_system_rows(plan),
    )

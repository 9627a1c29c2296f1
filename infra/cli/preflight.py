"""`higgsfield preflight STACK`: ask the AWS account, before `pulumi up`, whether the stack can
come up at all: GPU types offered where the pools are, EFA where asked, vCPU quotas for every
pool at maxSize, reservations and Capacity Blocks that exist and match, the EKS AL2023 NVIDIA
AMI for the Kubernetes version, FSx for Lustre reachable in the AZ.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from infra.config import GpuPool, StackConfig

# EC2 vCPU quotas (Service Quotas, service code ec2): on-demand and spot, per instance family group.
QUOTAS = {
    ("on-demand", "standard"): ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    ("on-demand", "g"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("on-demand", "p"): ("L-417A185B", "Running On-Demand P instances"),
    ("spot", "standard"): ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    ("spot", "g"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("spot", "p"): ("L-7212CCBC", "All P Spot Instance Requests"),
}
AMI_PARAMETER = "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/nvidia/recommended/image_id"


@dataclass(frozen=True)
class Check:
    check: str
    target: str
    ok: bool
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Clients:
    """The AWS clients preflight talks to (injected so tests can use moto and stubs)."""

    ec2: Any
    service_quotas: Any
    ssm: Any
    fsx: Any

    @classmethod
    def for_region(cls, region: str) -> Clients:
        import boto3

        session = boto3.Session(region_name=region)
        return cls(session.client("ec2"), session.client("service-quotas"), session.client("ssm"), session.client("fsx"))


def _family_group(instance_type: str) -> str:
    family = instance_type.split(".")[0]
    if family.startswith("p"):
        return "p"
    if family.startswith(("g", "vt")):
        return "g"
    return "standard"


def _offered(clients: Clients, pool: GpuPool) -> Iterable[Check]:
    for instance_type in pool.instance_types:
        found = clients.ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [instance_type]}, {"Name": "location", "Values": [pool.availability_zone]}],
        )["InstanceTypeOfferings"]
        yield Check("offered in AZ", f"{pool.name}: {instance_type} in {pool.availability_zone}", bool(found),
                    "offered" if found else "not offered", "" if found else _offered_instead(clients, instance_type, pool.availability_zone))


def _offered_instead(clients: Clients, instance_type: str, zone: str) -> str:
    """Where the account is offered the type in the region, else where AWS's bundled catalog has it."""
    from infra.bundled import where_offered

    rows = clients.ec2.describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
    )["InstanceTypeOfferings"]
    zones = sorted(r["Location"] for r in rows)
    if zones:
        return f"this account is offered it in {', '.join(zones)}: set the pool's availabilityZone to one of them"
    return f"offered to this account in no AZ of this region; {where_offered(instance_type, zone[:-1])}"


def _efa(clients: Clients, pool: GpuPool) -> Iterable[Check]:
    if not pool.efa:
        return
    for info in clients.ec2.describe_instance_types(InstanceTypes=list(pool.instance_types))["InstanceTypes"]:
        supported = bool(info.get("NetworkInfo", {}).get("EfaSupported"))
        yield Check("EFA supported", f"{pool.name}: {info['InstanceType']}", supported,
                    "EFA supported" if supported else "no EFA", "" if supported else "set efa: false or use an EFA type")


def _vcpus(clients: Clients, instance_type: str) -> int:
    (info,) = clients.ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    return int(info["VCpuInfo"]["DefaultVCpus"])


def _quotas(clients: Clients, cfg: StackConfig) -> Iterable[Check]:
    needed: dict[tuple[str, str], int] = defaultdict(int)
    for instance_type in cfg.cpu_nodes.instance_types[:1]:
        needed[("on-demand", _family_group(instance_type))] += cfg.cpu_nodes.max_size * _vcpus(clients, instance_type)
    for pool in cfg.gpu_pools:
        if pool.capacity_type == "capacity-block":
            continue  # Capacity Blocks are bought capacity, not drawn from the on-demand vCPU quota
        market = "spot" if pool.capacity_type == "spot" else "on-demand"
        needed[(market, _family_group(pool.instance_types[0]))] += pool.max_size * _vcpus(clients, pool.instance_types[0])
    for key, vcpus in sorted(needed.items()):
        code, label = QUOTAS[key]
        quota = int(clients.service_quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
        ok = quota >= vcpus
        yield Check("vCPU quota", f"{label} ({code})", ok, f"{vcpus} vCPUs needed at maxSize, quota {quota}",
                    "" if ok else f"request {vcpus} in Service Quotas (ec2 {code}) or lower maxSize")


def _reservations(clients: Clients, pool: GpuPool) -> Iterable[Check]:
    if not pool.reservation_id:
        return
    target = f"{pool.name}: {pool.reservation_id}"
    found = clients.ec2.describe_capacity_reservations(CapacityReservationIds=[pool.reservation_id])["CapacityReservations"]
    if not found:
        yield Check("reservation", target, False, "not found", "check the id and the region")
        return
    r = found[0]
    problems = []
    if r.get("State") not in ("active", "scheduled"):
        problems.append(f"state {r.get('State')}")
    if r.get("InstanceType") not in pool.instance_types:
        problems.append(f"instance type {r.get('InstanceType')}")
    if r.get("AvailabilityZone") != pool.availability_zone:
        problems.append(f"AZ {r.get('AvailabilityZone')} (pool is in {pool.availability_zone})")
    kind = "capacity-block" if pool.capacity_type == "capacity-block" else "default"
    if (r.get("ReservationType") or "default") != kind:
        problems.append(f"reservation type {r.get('ReservationType')} (pool expects {kind})")
    yield Check("reservation", target, not problems, "; ".join(problems) or f"{r['State']} {r['InstanceType']} x{r.get('TotalInstanceCount')} in {r['AvailabilityZone']}",
                "" if not problems else "point the pool at a matching active/scheduled reservation")


def _ami(clients: Clients, cfg: StackConfig) -> Iterable[Check]:
    architectures = {("x86_64" if "x86_64" in p.instance.architectures else "arm64") for p in cfg.gpu_pools}
    for arch in sorted(architectures):
        name = AMI_PARAMETER.format(k8s=cfg.kubernetes_version, arch=arch)
        try:
            image = clients.ssm.get_parameter(Name=name)["Parameter"]["Value"]
            yield Check("EKS NVIDIA AMI", f"Kubernetes {cfg.kubernetes_version} {arch}", True, image)
        except clients.ssm.exceptions.ParameterNotFound:
            yield Check("EKS NVIDIA AMI", f"Kubernetes {cfg.kubernetes_version} {arch}", False, f"{name} not found",
                        "use a Kubernetes version with an AL2023 NVIDIA AMI in this region")


def _fsx(clients: Clients, cfg: StackConfig) -> Iterable[Check]:
    if not cfg.fsx.enabled:
        return
    zone = cfg.fsx.availability_zone
    zones = clients.ec2.describe_availability_zones(ZoneNames=[zone])["AvailabilityZones"]
    available = bool(zones) and zones[0].get("State") == "available"
    reachable = True
    try:
        clients.fsx.describe_file_systems(MaxResults=1)
    except Exception:  # noqa: BLE001 - reported below; the error class varies
        reachable = False
    ok = available and reachable
    detail = f"AZ {'available' if available else 'not available'}, FSx API {'reachable' if reachable else 'not reachable'} in {cfg.region}"
    yield Check("FSx for Lustre", zone, ok, detail, "" if ok else "choose a region/AZ where FSx for Lustre is available")


def run(cfg: StackConfig, clients: Clients) -> list[Check]:
    checks: list[Check] = []
    for pool in cfg.gpu_pools:
        checks += [*_offered(clients, pool), *_efa(clients, pool), *_reservations(clients, pool)]
    checks += [*_quotas(clients, cfg), *_ami(clients, cfg), *_fsx(clients, cfg)]
    return checks


def render(stack: str, checks: list[Check]) -> str:
    lines = [f"Preflight of {stack}", f"  {'':4} {'check':<16} {'target':<58} detail"]
    for c in checks:
        lines.append(f"  {'ok' if c.ok else 'FAIL':<4} {c.check:<16} {c.target:<58} {c.detail}" + (f"  -> {c.fix}" if c.fix else ""))
    failed = sum(not c.ok for c in checks)
    lines.append(f"{len(checks) - failed} passed, {failed} failed")
    return "\n".join(lines)

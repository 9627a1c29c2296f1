"""`higgsfield types REGION`: the GPU instance types each availability zone of a region offers, with
their GPUs, memory, EFA and on-demand price, from the bundled catalog (AWS's DescribeInstanceTypes
and per-AZ DescribeInstanceTypeOfferings as moto ships them, infra/core/bundled.py) and the bundled
price file (infra/offline/data/prices.json). What to put in `--gpu-pool NAME:TYPE` or a pool's
instanceTypes, without trial and error; `higgsfield preflight STACK` re-checks against the account."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from infra.config import ConfigError, eks_regions
from infra.config.stack import not_an_eks_region
from infra.core.bundled import instance_types, source, zone_offerings
from infra.offline.cost import load_prices


@dataclass(frozen=True)
class GpuType:
    instance_type: str
    gpus: int
    gpu: str  # manufacturer and model, e.g. NVIDIA H100
    gpu_memory_gib: float  # all GPUs together
    vcpus: int
    memory_gib: float
    efa_interfaces: int  # 0: no EFA
    zones: tuple[str, ...]
    on_demand_hour: float | None  # None: not priced in the region

    @property
    def gib_per_gpu(self) -> int:
        """Memory of one GPU in whole GiB, rounded down: what a job file's `resources.gpuMemoryGiB`
        is compared with (infra/offline/team_job.py), so a value read here is one a job can ask for."""
        return int(self.gpu_memory_gib * 1024) // max(1, self.gpus) // 1024


def gpu_types(region: str) -> list[GpuType]:
    """Every GPU type offered in some AZ of `region`, by GPU model then size; a region EKS does not
    run in, or one the catalog has no offerings for, is refused in one line."""
    if region not in eks_regions():
        raise ConfigError("REGION", not_an_eks_region(region))
    offered = zone_offerings(region)
    if not offered:
        raise ConfigError("REGION", f"{source()} has no instance-type offerings for {region}")
    prices = load_prices()["regions"].get(region, {}).get("ec2_on_demand_hour", {})
    found = []
    for name in sorted({t for types in offered.values() for t in types}):
        facts = instance_types().get(name) or {}
        gpus = (facts.get("GpuInfo") or {}).get("Gpus") or []
        if not gpus:
            continue
        network = facts.get("NetworkInfo") or {}
        efa = (network.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0) if network.get("EfaSupported") else 0
        found.append(
            GpuType(
                instance_type=name,
                gpus=sum(g.get("Count", 0) for g in gpus),
                gpu=" ".join(dict.fromkeys(f"{g.get('Manufacturer', '')} {g.get('Name', '')}".strip() for g in gpus)),
                gpu_memory_gib=(facts.get("GpuInfo") or {}).get("TotalGpuMemoryInMiB", 0) / 1024,
                vcpus=(facts.get("VCpuInfo") or {}).get("DefaultVCpus", 0),
                memory_gib=(facts.get("MemoryInfo") or {}).get("SizeInMiB", 0) / 1024,
                efa_interfaces=efa,
                zones=tuple(sorted(z for z, types in offered.items() if name in types)),
                on_demand_hour=prices.get(name),
            )
        )
    return sorted(found, key=lambda t: (t.gpu, t.gpus, t.vcpus, t.instance_type))


def as_json(region: str, types: list[GpuType]) -> dict:
    return {
        "region": region,
        "source": source(),
        "types": [asdict(t) | {"gib_per_gpu": t.gib_per_gpu} for t in types],
    }

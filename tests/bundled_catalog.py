"""The instance-type catalog of the offline plan, for validating the config model directly."""

from __future__ import annotations

from infra.core.bundled import instance_types, zone_offerings
from infra.core.catalog import InstanceFacts


class BundledCatalog:
    """The instance-type catalog the offline plan answers invokes from (AWS's, bundled with moto),
    read directly: the config model validated without evaluating the program."""

    def describe(self, name: str) -> InstanceFacts:
        raw = instance_types()[name]
        net, gpus = raw.get("NetworkInfo", {}), raw.get("GpuInfo", {}).get("Gpus", [])
        return InstanceFacts(
            name=name,
            gpus=sum(g["Count"] for g in gpus),
            gpu_model=gpus[0]["Name"] if gpus else None,
            gpu_memory_mib=raw.get("GpuInfo", {}).get("TotalGpuMemoryInMiB", 0),
            efa_supported=bool(net.get("EfaSupported")),
            efa_max_interfaces=net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0),
            network_cards=tuple(sorted(c["NetworkCardIndex"] for c in net.get("NetworkCards", []))) or (0,),
            nvme_disks=sum(d["Count"] for d in raw.get("InstanceStorageInfo", {}).get("Disks", [])),
            vcpus=raw.get("VCpuInfo", {}).get("DefaultVCpus", 0),
            memory_mib=raw.get("MemoryInfo", {}).get("SizeInMiB", 0),
            architectures=tuple(raw.get("ProcessorInfo", {}).get("SupportedArchitectures", [])),
            pod_slots=net.get("MaximumNetworkInterfaces", 0) * (net.get("Ipv4AddressesPerInterface", 1) - 1) + 2,
        )

    def offered_in(self, name: str, location: str, location_type: str = "availability-zone") -> bool:
        region = location if location_type == "region" else location[:-1]
        offered = zone_offerings(region)
        return any(name in types for zone, types in offered.items() if location_type == "region" or zone == location)

"""What an EC2 instance type is: GPUs, EFA, network cards, local NVMe.

The program asks AWS through Pulumi invokes (`aws.ec2.get_instance_type`,
`aws.ec2.get_instance_type_offerings`), so on a real `pulumi up` the answer is AWS's own; the
offline plan answers the same invokes from AWS's catalog as bundled in moto. One code path.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import pulumi_aws as aws


@dataclass(frozen=True)
class InstanceFacts:
    name: str
    gpus: int
    gpu_model: str | None
    gpu_memory_mib: int
    efa_supported: bool
    efa_max_interfaces: int
    network_cards: tuple[int, ...]
    nvme_disks: int
    vcpus: int
    architectures: tuple[str, ...]
    network_gbps: float = 0.0  # sum of the network cards' baseline bandwidth
    memory_mib: int = 0
    # The pods a node of the type holds with the VPC CNI's secondary addresses (no prefix delegation): one per
    # address of each interface but its own, and the two host-network pods (aws-node, kube-proxy); EKS's AMIs
    # set the kubelet's max pods so (awslabs/amazon-eks-ami:templates/shared/runtime/eni-max-pods.txt and its
    # max-pods-calculator.sh, read through the code search).
    pod_slots: int = 0


@cache
def describe(instance_type: str) -> InstanceFacts:
    """Facts about `instance_type`. Ask `offered_in` first: describing a type AWS does not
    know fails the whole program run (invoke errors cannot be caught by the program)."""
    t = aws.ec2.get_instance_type(instance_type=instance_type)
    gpus = t.gpuses or []
    return InstanceFacts(
        name=instance_type,
        gpus=sum(int(g.count) for g in gpus),
        gpu_model=gpus[0].name if gpus else None,
        gpu_memory_mib=int(t.total_gpu_memory or 0),
        efa_supported=bool(t.efa_supported),
        efa_max_interfaces=int(t.efa_maximum_interfaces or 0),
        network_cards=tuple(sorted(int(c.index) for c in (t.network_cards or []))) or (0,),
        nvme_disks=sum(int(d.count) for d in (t.instance_disks or [])),
        vcpus=int(t.default_vcpus or 0),
        architectures=tuple(t.supported_architectures or ()),
        network_gbps=float(sum(c.baseline_bandwidth or 0 for c in (t.network_cards or []))),
        memory_mib=int(t.memory_size or 0),
        pod_slots=int(t.maximum_network_interfaces or 0) * (int(t.maximum_ipv4_addresses_per_interface or 1) - 1) + 2,
    )


@cache
def offered_in(instance_type: str, location: str, location_type: str = "availability-zone") -> bool:
    """Whether `instance_type` can be launched in `location` (an AZ, or a region with
    location_type="region"). An unknown type is simply offered nowhere."""
    found = aws.ec2.get_instance_type_offerings(
        location_type=location_type,
        filters=[
            aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=[instance_type]),
            aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="location", values=[location]),
        ],
    )
    return instance_type in (found.instance_types or [])

"""EFA on every network card: the interface layout, and the fabric an EFA pool sits in."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.catalog import InstanceFacts

# 2 MiB huge pages reserved at boot for libfabric/NCCL over EFA (EC2 User Guide, "Get started
# with EFA and NCCL": vm.nr_hugepages=5128). Pods request them as `hugepages-2Mi`.
EFA_HUGEPAGES_2MI = 5128


@dataclass(frozen=True)
class Interface:
    network_card: int
    device_index: int
    efa_only: bool


def efa_interfaces_for(instance: InstanceFacts) -> list[Interface]:
    """The launch-template interfaces for an EFA instance, per the EC2 User Guide "Maximize
    network bandwidth on Amazon EC2 instances with multiple network cards" (docs.aws.amazon.com/
    AWSEC2/latest/UserGuide/efa-acc-inst-types.html): an ENA primary at card 0 device 0; an
    EFA-only interface on card 0 at device 1; then one EFA-only interface on each further card
    at device 0 - as many as the instance's maximum EFA interfaces.
    p5.48xlarge: 32 cards -> 32 EFA; p5en.48xlarge 16; p4d.24xlarge 4; p6-b200.48xlarge 8."""
    layout = [Interface(network_card=0, device_index=0, efa_only=False)]
    for card in instance.network_cards[: instance.efa_max_interfaces]:
        layout.append(Interface(network_card=card, device_index=1 if card == 0 else 0, efa_only=True))
    return layout


def efa_count(layout: list[Interface]) -> int:
    return sum(1 for i in layout if i.efa_only)


def efa_resources(instance: InstanceFacts) -> dict[str, int | str]:
    """What an EFA node offers and an EFA pod asks for: every EFA interface of the instance,
    and the huge pages reserved at boot. One place, so that the autoscaler's node template and
    the jobs that must fit on it can never disagree."""
    return {"vpc.amazonaws.com/efa": efa_count(efa_interfaces_for(instance)), "hugepages-2Mi": f"{EFA_HUGEPAGES_2MI * 2}Mi"}


def node_user_data(raid0: bool, hugepages: int) -> str | None:
    """AL2023 user data (MIME multipart, merged by EKS with its own): a nodeadm NodeConfig that
    builds a RAID0 array of the local NVMe drives for kubelet and containerd, and a script
    that reserves huge pages before kubelet starts so that it can advertise them."""
    parts = []
    if raid0:
        parts.append(
            "Content-Type: application/node.eks.aws\n\n"
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  instance:\n    localStorage:\n      strategy: RAID0\n"
        )
    if hugepages:
        parts.append(
            'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
            "#!/bin/bash\nset -euo pipefail\n"
            f"echo 'vm.nr_hugepages = {hugepages}' > /etc/sysctl.d/90-efa-hugepages.conf\n"
            f"sysctl -w vm.nr_hugepages={hugepages}\n"
        )
    if not parts:
        return None
    body = 'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="//"\n\n'
    body += "".join(f"--//\n{part}\n" for part in parts) + "--//--\n"
    return base64.b64encode(body.encode()).decode()


class EfaFabric(pulumi.ComponentResource):
    """What an EFA pool's nodes share: a security group that allows all traffic to and from
    itself (EFA's OS-bypass traffic needs it on every interface) and, unless the capacity
    brings its own placement, a cluster placement group.

    Creates: security group, optional placement group. Replaced when: the VPC changes, or the
    placement group is switched on or off.
    """

    def __init__(
        self,
        name: str,
        vpc_id: pulumi.Input[str],
        placement_group: bool,
        tags: Mapping[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("higgsfield:efa:EfaFabric", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self_all = {"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}
        group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=vpc_id,
            description="EFA: all traffic to and from members of this group",
            ingress=[aws.ec2.SecurityGroupIngressArgs(**self_all, description="EFA peers")],
            egress=[aws.ec2.SecurityGroupEgressArgs(**self_all, description="EFA peers")],
            tags=dict(tags),
            opts=child,
        )
        self.security_group_id = group.id
        self.placement_group_name: pulumi.Output[str] | None = None
        if placement_group:
            pg = aws.ec2.PlacementGroup(f"{name}-pg", strategy="cluster", tags=dict(tags), opts=child)
            self.placement_group_name = pg.name
        self.register_outputs({"security_group_id": self.security_group_id})

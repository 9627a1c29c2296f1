"""The CPU node group that runs the platform's own pods."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.nodes import MAX_UNAVAILABLE_NODES, NodeVersion, launch_template
from infra.config import SYSTEM_TAINT_EFFECT, SYSTEM_TAINT_KEY

SYSTEM_LABELS = {"higgsfield.io/role": "system"}
# The system nodes are tainted, so that nothing but the platform's own pods runs beside the
# autoscaler, the operators and the CSI controllers. Every platform workload that runs here
# carries SYSTEM_TOLERATION with the node selector (ON_SYSTEM_NODES); node daemons tolerate every
# taint (components/device_plugins.py EVERY_TAINT). EKS managed add-ons that run Deployments get
# the toleration through their configuration values (components/addons.py SYSTEM_ADDON_CONFIGURATION),
# or CoreDNS would never schedule on a new cluster whose only untainted nodes are none.
SYSTEM_TAINT = {"key": SYSTEM_TAINT_KEY, "value": "true", "effect": SYSTEM_TAINT_EFFECT}
SYSTEM_TOLERATION = {"key": SYSTEM_TAINT_KEY, "operator": "Exists", "effect": SYSTEM_TAINT_EFFECT}
ON_SYSTEM_NODES = {"nodeSelector": SYSTEM_LABELS, "tolerations": [SYSTEM_TOLERATION]}
# EKS's API spells taint effects in upper snake case (Taint.effect: NO_SCHEDULE, NO_EXECUTE,
# PREFER_NO_SCHEDULE: botocore/data/eks/2017-11-01/service-2.json TaintEffect).
_EKS_EFFECT = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}


@dataclass(frozen=True, kw_only=True)
class CpuNodesArgs:
    cluster_name: str
    instance_types: Sequence[str]
    min_size: int
    desired_size: int
    max_size: int
    ami_type: str
    subnet_ids: Sequence[pulumi.Input[str]]
    node_role_arn: pulumi.Input[str]
    security_group_ids: Sequence[pulumi.Input[str]]
    depends_on: Sequence[pulumi.Resource]
    tags: Mapping[str, str]
    version: NodeVersion
    root_volume_gib: int = 50


class CpuNodes(pulumi.ComponentResource):
    """A managed node group for system pods (controllers, autoscaler, monitoring).

    Creates: a launch template (IMDSv2 only, hop limit 1, encrypted gp3 root) and an on-demand
    managed node group across the private subnets, labelled `higgsfield.io/role=system` and
    tainted `higgsfield.io/system=true:NoSchedule` (SYSTEM_TAINT).
    `desiredSize` is left to the autoscaler after creation (ignore_changes). It runs the cluster's
    Kubernetes version (and the stack's AMI release, if pinned): an upgrade rolls its nodes in
    place, one at a time, after the control plane and the add-ons it depends on.
    Replaced when: instance types, AMI type or subnets change (EKS replaces the node group).
    """

    def __init__(self, name: str, args: CpuNodesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:nodes:CpuNodes", name, None, opts)
        template = launch_template(
            f"{name}-lt",
            root_volume_gib=args.root_volume_gib,
            security_group_ids=args.security_group_ids,
            tags={**args.tags, "Name": f"{args.cluster_name}-system"},
            parent=self,
        )
        self.node_group = aws.eks.NodeGroup(
            f"{name}",
            cluster_name=args.cluster_name,
            node_role_arn=args.node_role_arn,
            subnet_ids=list(args.subnet_ids),
            instance_types=list(args.instance_types),
            ami_type=args.ami_type,
            capacity_type="ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=args.min_size, desired_size=args.desired_size, max_size=args.max_size
            ),
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=MAX_UNAVAILABLE_NODES),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=template.id, version=template.latest_version.apply(str)
            ),
            **args.version.node_group_args(),
            labels=SYSTEM_LABELS,
            taints=[
                aws.eks.NodeGroupTaintArgs(
                    key=SYSTEM_TAINT["key"], value=SYSTEM_TAINT["value"], effect=_EKS_EFFECT[SYSTEM_TAINT["effect"]]
                )
            ],
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=list(args.depends_on), ignore_changes=["scalingConfig.desiredSize"]
            ),
        )
        self.register_outputs({"node_group_name": self.node_group.node_group_name})

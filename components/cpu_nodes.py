"""The CPU node groups: the platform's own pods (the system nodes), and the teams' pods without GPUs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from components.nodes import (
    MAX_UNAVAILABLE_NODES,
    NodeVersion,
    autoscaling_group_name,
    launch_template,
    node_template_tags,
    tag_autoscaling_group,
)
from infra.config import SYSTEM_TAINT_EFFECT, SYSTEM_TAINT_KEY
from infra.core.names import AUTOSCALER_TEMPLATE, SCALE_DOWN_UNNEEDED_TAG, TEAM_CPU_LABEL, TEAM_CPU_TAINT_KEY

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
# The teams' CPU nodes: a team's pod without GPUs (an MPI job's launcher, a CPU-only Job) runs here and nowhere else,
# never on a GPU node (components/tenancy.py); no platform workload but the node daemons (which tolerate every taint).
TEAM_CPU_LABELS = {TEAM_CPU_LABEL: "true"}
TEAM_CPU_TAINT = {"key": TEAM_CPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
# Room on a team CPU node's root volume for the training image its launchers run (a CUDA image of several GB,
# unpacked beside its layers) and the logs.
TEAM_CPU_ROOT_VOLUME_GIB = 100
# The ephemeral storage the autoscaler's node of an empty group offers: it builds that node from the instance type's
# CPU, memory and GPUs, 110 pods, and of any other resource only the `resources/` tags (buildNodeFromTemplate,
# kubernetes/autoscaler:cluster-autoscaler/cloudprovider/aws/aws_manager.go@cluster-autoscaler-1.35.2;
# cloudprovider/aws/README.md, same ref), so without one no pod asking ephemeral storage fits it, and every MPI
# launcher does (the operator's
# kubectl-delivery asks 5Gi: components/tenancy.py LAUNCHER_INIT_EPHEMERAL_STORAGE). The root volume less what the
# image and the kubelet's eviction threshold keep: an estimate, not measured here.
TEAM_CPU_EPHEMERAL_STORAGE_GIB = TEAM_CPU_ROOT_VOLUME_GIB // 2
ON_TEAM_CPU_NODES: dict[str, Any] = {
    "nodeSelector": TEAM_CPU_LABELS,
    "tolerations": [{"key": TEAM_CPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
}
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
    role: str = "system"  # the Name tag's suffix of its instances
    labels: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(SYSTEM_LABELS))
    taint: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(SYSTEM_TAINT))
    # what the Cluster Autoscaler reads off the group's Auto Scaling group to plan a node while it has none
    autoscaler_tags: Mapping[str, str] = dataclasses.field(default_factory=dict)


class CpuNodes(pulumi.ComponentResource):
    """A managed node group of CPU instances: the system nodes (controllers, autoscaler, monitoring) or the teams'
    CPU nodes (their pods without GPUs), by its labels and taint.

    Creates: a launch template (IMDSv2 only, hop limit 1, encrypted gp3 root) and an on-demand
    managed node group across the private subnets, labelled and tainted as asked (the system nodes:
    `higgsfield.io/role=system`, `higgsfield.io/system=true:NoSchedule`, SYSTEM_TAINT); the
    autoscaler's node-template tags, where given, on its Auto Scaling group (managed node group tags do
    not reach it), so that the autoscaler scales it up from zero.
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
            tags={**args.tags, "Name": f"{args.cluster_name}-{args.role}"},
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
            labels=dict(args.labels),
            taints=[
                aws.eks.NodeGroupTaintArgs(
                    key=args.taint["key"], value=args.taint["value"], effect=_EKS_EFFECT[args.taint["effect"]]
                )
            ],
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=list(args.depends_on), ignore_changes=["scalingConfig.desiredSize"]
            ),
        )
        if args.autoscaler_tags:
            tag_autoscaling_group(
                name, autoscaling_group_name(self.node_group), args.autoscaler_tags, pulumi.ResourceOptions(parent=self)
            )
        self.register_outputs({"node_group_name": self.node_group.node_group_name})


def team_cpu_autoscaler_tags(scale_down_unneeded_time: str) -> dict[str, str]:
    """The teams' CPU nodes as the autoscaler plans one while the group has none (their label, taint and ephemeral
    storage), and how long one stays empty before it goes (higgsfield:teamCpuNodes.scaleDownUnneededTime: a gang's
    launcher's node, bought first, stands empty until Volcano binds the whole gang)."""
    tags = node_template_tags(
        TEAM_CPU_LABELS, [(TEAM_CPU_TAINT["key"], TEAM_CPU_TAINT["value"], TEAM_CPU_TAINT["effect"])]
    )
    tags[f"{AUTOSCALER_TEMPLATE}/resources/ephemeral-storage"] = f"{TEAM_CPU_EPHEMERAL_STORAGE_GIB}Gi"
    tags[SCALE_DOWN_UNNEEDED_TAG] = scale_down_unneeded_time
    return tags

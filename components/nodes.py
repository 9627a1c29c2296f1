"""What every node group shares: its IAM role and a hardened launch template."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from components.identity import trust_policy
from infra.config.names import asg_tag_resource_name
from infra.core.names import AUTOSCALER_TEMPLATE

# Managed policies a node needs, and nothing more: join the cluster, pull images, and the
# VPC CNI's ENI management (aws-node runs with the node's credentials).
# docs.aws.amazon.com/eks/latest/userguide/create-node-role.html, checked 2026-12-02.
NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
)
ROOT_DEVICE = "/dev/xvda"  # root device of the EKS-optimized AL2023 AMIs
# Nodes replaced at once while a node group updates (EKS default 1; API_NodegroupUpdateConfig).
# EKS drains each before terminating it, and fails the update with PodEvictionFailure when a pod
# will not leave within 15 minutes (docs.aws.amazon.com/eks/latest/userguide/
# managed-node-update-behavior.html): a running job is evicted, never cut off mid-step silently.
MAX_UNAVAILABLE_NODES = 1


@dataclass(frozen=True)
class NodeVersion:
    """What every managed node group runs: the cluster's Kubernetes version and, if the stack
    pins one, an EKS-optimized AMI release (`1.35.2-20261120`). Changing either updates the node
    groups in place (a rolling replacement of their nodes), never replaces them."""

    kubernetes: str
    release: str | None = None

    def node_group_args(self) -> dict[str, Any]:
        """The `aws.eks.NodeGroup` inputs for this version."""
        return {"version": self.kubernetes, "release_version": self.release}


class NodeRole(pulumi.ComponentResource):
    """The IAM role shared by all managed node groups.

    Creates: the role (trusted by EC2) and one attachment per managed policy in NODE_POLICIES.
    EKS creates the access entry for a managed node group's role itself.
    Replaced when: never by config; the role name is generated.
    """

    def __init__(self, name: str, tags: Mapping[str, str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:nodes:NodeRole", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # No aws:SourceAccount/aws:SourceArn: the EKS user guide's node role trusts ec2.amazonaws.com
        # without them (awsdocs/amazon-eks-user-guide:latest/ug/security/iam-reference/create-node-role.adoc
        # @4d52b4d0) and EC2 documents no source key for an instance profile's role; EC2 assumes it only
        # for an instance whose profile someone of this account passed it to (iam:PassRole).
        role = aws.iam.Role(
            f"{name}", assume_role_policy=trust_policy("ec2.amazonaws.com"), tags=dict(tags), opts=child
        )
        attachments = [
            aws.iam.RolePolicyAttachment(f"{name}-{arn.rsplit('/', 1)[1]}", role=role.name, policy_arn=arn, opts=child)
            for arn in NODE_POLICIES
        ]
        self.arn = role.arn
        # A node group may only start once its role can pull images and join.
        self.ready: list[pulumi.Resource] = [role, *attachments]
        self.register_outputs({"arn": self.arn})


def node_template_tags(labels: Mapping[str, str], taints: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """The Cluster Autoscaler's node-template tags of a group's labels and taints (key, value, effect): what it
    reads off the ASG to plan a node of a group that has none (cluster-autoscaler/cloudprovider/aws/README.md
    @cluster-autoscaler-1.35.2)."""
    tags = {f"{AUTOSCALER_TEMPLATE}/label/{k}": v for k, v in labels.items()}
    tags.update({f"{AUTOSCALER_TEMPLATE}/taint/{key}": f"{value}:{effect}" for key, value, effect in taints})
    return tags


def autoscaling_group_name(node_group: aws.eks.NodeGroup) -> pulumi.Output[Any]:
    """The name of the ASG EKS made for a managed node group."""
    return node_group.resources.apply(lambda r: r[0].autoscaling_groups[0].name)  # type: ignore[index]


def tag_autoscaling_group(
    group: str, asg_name: pulumi.Input[str], tags: Mapping[str, str], opts: pulumi.ResourceOptions
) -> None:
    """Write `tags` onto a managed node group's ASG, one aws.autoscaling.Tag each (asg_tag_resource_name), not
    propagated to its instances: managed node group tags do not reach the ASG, where the autoscaler reads them
    (an open request, aws/containers-roadmap#608)."""
    for key, value in tags.items():
        aws.autoscaling.Tag(
            asg_tag_resource_name(group, key),
            autoscaling_group_name=asg_name,
            tag=aws.autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=False),
            opts=opts,
        )


def launch_template(
    name: str,
    *,
    root_volume_gib: int,
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    security_group_ids: Sequence[pulumi.Input[str]] | None = None,
    network_interfaces: Sequence[aws.ec2.LaunchTemplateNetworkInterfaceArgs] | None = None,
    user_data: str | None = None,
    **extra: Any,
) -> aws.ec2.LaunchTemplate:
    """A launch template with IMDSv2 only (hop limit 1: pods cannot reach the node's
    credentials) and an encrypted gp3 root volume. The AMI is left to the node group's AMI type.
    Either `security_group_ids` or `network_interfaces` (which then carry the groups) is given."""
    return aws.ec2.LaunchTemplate(
        name,
        update_default_version=True,
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_endpoint="enabled",
            http_tokens="required",
            http_put_response_hop_limit=1,
            instance_metadata_tags="disabled",
        ),
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=ROOT_DEVICE,
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=root_volume_gib, volume_type="gp3", encrypted="true", delete_on_termination="true"
                ),
            )
        ],
        vpc_security_group_ids=list(security_group_ids) if security_group_ids is not None else None,
        network_interfaces=list(network_interfaces) if network_interfaces is not None else None,
        user_data=user_data,
        tag_specifications=[
            aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=dict(tags))
            for kind in ("instance", "volume", "network-interface")
        ],
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=parent),
        **extra,
    )

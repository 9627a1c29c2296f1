"""Cluster Autoscaler: turns a pending GPU pod into a node, and an idle node into nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.charts import helm_release
from components.cpu_nodes import SYSTEM_LABELS, SYSTEM_TOLERATION
from components.identity import pod_identity_role
from infra.config import Autoscaler
from infra.versions import Chart

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"


def autoscaler_policy(cluster_name: str, region: str) -> str:
    """Least privilege from the autoscaler's AWS guide (kubernetes/autoscaler cluster-autoscaler/
    cloudprovider/aws/README.md): read ASGs, launch templates and instance types; describe this
    cluster's node groups (scale from zero reads their labels and taints); change the size only
    of groups tagged as owned by this cluster."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": [
                        "autoscaling:DescribeAutoScalingGroups",
                        "autoscaling:DescribeAutoScalingInstances",
                        "autoscaling:DescribeLaunchConfigurations",
                        "autoscaling:DescribeScalingActivities",
                        "autoscaling:DescribeTags",
                        "ec2:DescribeImages",
                        "ec2:DescribeInstanceTypes",
                        "ec2:DescribeLaunchTemplateVersions",
                        "ec2:GetInstanceTypesFromInstanceRequirements",
                    ],
                    "Resource": "*",
                },
                {
                    "Effect": "Allow",
                    "Action": ["eks:DescribeNodegroup"],
                    "Resource": f"arn:aws:eks:{region}:*:nodegroup/{cluster_name}/*/*",
                },
                {
                    "Effect": "Allow",
                    "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
                    "Resource": "*",
                    "Condition": {"StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"}},
                },
            ],
        }
    )


@dataclass(frozen=True)
class ClusterAutoscalerArgs:
    cluster_name: str
    region: str
    settings: Autoscaler
    chart: Chart
    image_tag: str
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]
    tags: Mapping[str, str]


class ClusterAutoscaler(pulumi.ComponentResource):
    """The Cluster Autoscaler, from its official chart, on the system nodes.

    Creates: an IAM role for EKS Pod Identity with a least-privilege inline policy, the Pod
    Identity association for its service account, and the Helm release (auto-discovery of
    this cluster's node groups by tag, balance-similar-node-groups, configurable expander and
    scale-down delay). Replaced when: the cluster name changes.
    """

    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:autoscaler:ClusterAutoscaler", name, None, opts)
        role, policy = pod_identity_role(f"{name}-role", args.tags, self, inline_policy=autoscaler_policy(args.cluster_name, args.region))
        association = aws.eks.PodIdentityAssociation(
            f"{name}-identity",
            cluster_name=args.cluster_name,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            role_arn=role.arn,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.release = helm_release(
            name,
            args.chart,
            NAMESPACE,
            {
                "cloudProvider": "aws",
                "awsRegion": args.region,
                "autoDiscovery": {"clusterName": args.cluster_name},
                "image": {"tag": args.image_tag},
                "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
                "nodeSelector": SYSTEM_LABELS,
                # the chart's `tolerations` (kubernetes/autoscaler:charts/cluster-autoscaler/values.yaml@cluster-autoscaler-chart-9.59.0)
                "tolerations": [SYSTEM_TOLERATION],
                "extraArgs": {
                    "balance-similar-node-groups": True,
                    "expander": args.settings.expander,
                    "scale-down-unneeded-time": args.settings.scale_down_unneeded_time,
                    "scale-down-delay-after-add": args.settings.scale_down_unneeded_time,
                    "skip-nodes-with-local-storage": False,
                    "skip-nodes-with-system-pods": False,
                },
            },
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[association, policy, *args.depends_on]),
        )
        self.register_outputs({"role_arn": role.arn})

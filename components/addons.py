"""EKS managed add-ons, installed one way everywhere, at the version EKS picks for the cluster."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pulumi
import pulumi_aws as aws

from infra import versions
from infra.config import StackConfig
from infra.versions import AddonVersion

# Add-ons that must run before a node can become Ready (pod network, Service routing, Pod
# Identity credentials): node groups wait for them, so a Kubernetes upgrade updates them before
# the nodes roll. CoreDNS is not among them: its add-on turns ACTIVE only once its pods run on a
# node (create times out DEGRADED without one: pulumi/pulumi-eks#1819,
# terraform-aws-modules/terraform-aws-eks#3001), so it follows the system node group.
BEFORE_NODES = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
CLUSTER_ADDONS = (*BEFORE_NODES, "coredns")
OBSERVABILITY_ADDONS = ("aws-ebs-csi-driver", "amazon-cloudwatch-observability", "eks-node-monitoring-agent")
FSX_ADDONS = ("aws-fsx-csi-driver",)


def stack_addons(cfg: StackConfig) -> dict[str, AddonVersion]:
    """The managed add-ons `cfg` installs, each with the stack's pin (`higgsfield:addonVersions`)
    or None: EKS's default for `cfg.kubernetes_version`, resolved at deploy."""
    names = [*CLUSTER_ADDONS, *(FSX_ADDONS if cfg.fsx.enabled else ()), *(OBSERVABILITY_ADDONS if cfg.observability.enabled else ())]
    return versions.addon_versions(cfg.kubernetes_version, dict(cfg.addon_versions), tuple(names))


def addon_version(addon: AddonVersion) -> pulumi.Input[str]:
    """The stack's pin, else the version EKS marks default for the cluster's Kubernetes version
    (DescribeAddonVersions through `aws.eks.get_addon_version`; versions.py says why default)."""
    if addon.pin:
        return addon.pin
    return aws.eks.get_addon_version_output(
        addon_name=addon.name, kubernetes_version=addon.kubernetes_version, most_recent=versions.ADDON_MOST_RECENT
    ).version


def managed_addon(
    name: str,
    cluster_name: str,
    addon: AddonVersion,
    *,
    tags: Mapping[str, str],
    opts: pulumi.ResourceOptions,
    identity: tuple[pulumi.Input[str], str] | None = None,
    configuration: Mapping[str, object] | None = None,
) -> aws.eks.Addon:
    """`addon` at its resolved version. On create it takes over whatever EKS bootstrapped in its
    place (OVERWRITE); on update it keeps settings someone changed in the cluster (PRESERVE).
    `identity` is (role ARN, service account) for a Pod Identity association; `configuration`
    the add-on's configuration values (its schema: `aws eks describe-addon-configuration`)."""
    return aws.eks.Addon(
        name,
        cluster_name=cluster_name,
        addon_name=addon.name,
        addon_version=addon_version(addon),
        pod_identity_associations=[aws.eks.AddonPodIdentityAssociationArgs(role_arn=identity[0], service_account=identity[1])] if identity else None,
        configuration_values=json.dumps(configuration) if configuration else None,
        resolve_conflicts_on_create="OVERWRITE",
        resolve_conflicts_on_update="PRESERVE",
        tags=dict(tags),
        opts=opts,
    )

"""EKS managed add-ons, installed one way everywhere."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pulumi
import pulumi_aws as aws

from infra.versions import AddonVersion


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
    """`addon` at its pinned version. On create it takes over whatever EKS bootstrapped in its
    place (OVERWRITE); on update it keeps settings someone changed in the cluster (PRESERVE).
    `identity` is (role ARN, service account) for a Pod Identity association; `configuration`
    the add-on's configuration values (its schema: `aws eks describe-addon-configuration`)."""
    return aws.eks.Addon(
        name,
        cluster_name=cluster_name,
        addon_name=addon.name,
        addon_version=addon.version,
        pod_identity_associations=[aws.eks.AddonPodIdentityAssociationArgs(role_arn=identity[0], service_account=identity[1])] if identity else None,
        configuration_values=json.dumps(configuration) if configuration else None,
        resolve_conflicts_on_create="OVERWRITE",
        resolve_conflicts_on_update="PRESERVE",
        tags=dict(tags),
        opts=opts,
    )

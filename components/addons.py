"""EKS managed add-ons that need running nodes (coredns, and later CSI drivers and agents)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.versions import AddonVersion


@dataclass(frozen=True)
class ClusterAddonsArgs:
    cluster_name: str
    addons: Sequence[AddonVersion]
    depends_on: Sequence[pulumi.Resource]
    tags: Mapping[str, str]


class ClusterAddons(pulumi.ComponentResource):
    """Managed add-ons installed once nodes exist, each at its pinned version.

    Creates: one `aws.eks.Addon` per entry. Replaced when: an add-on's name changes.
    """

    def __init__(self, name: str, args: ClusterAddonsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:addons:ClusterAddons", name, None, opts)
        self.addons = [
            aws.eks.Addon(
                f"{name}-{addon.name}",
                cluster_name=args.cluster_name,
                addon_name=addon.name,
                addon_version=addon.version,
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="PRESERVE",
                tags=dict(args.tags),
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )
            for addon in args.addons
        ]
        self.register_outputs({"addons": [a.addon_name for a in self.addons]})

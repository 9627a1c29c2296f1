"""Team namespaces: where jobs run, what they may use."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from components.kubernetes_objects import KubernetesObject

from infra.config import PriorityClassSpec, Team

TEAM_LABEL = "higgsfield.io/team"


@dataclass(frozen=True)
class TeamsArgs:
    teams: Sequence[Team]
    priority_classes: Sequence[PriorityClassSpec]
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]


class Teams(pulumi.ComponentResource):
    """One namespace per team with its GPU quota and the priority classes it may use.

    Creates per team: a Namespace, a ResourceQuota on `requests.nvidia.com/gpu`, and for each
    priority class the team is *not* given a quota scoped to that class allowing zero pods
    (EKS has no admission config to deny classes by default, so each is denied explicitly).
    Replaced when: a team is renamed (its namespace, and everything in it, is deleted).
    """

    def __init__(self, name: str, args: TeamsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:teams:Teams", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        self.namespaces: dict[str, KubernetesObject] = {}
        for team in args.teams:
            ns = KubernetesObject(
                f"{name}-{team.name}",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team.name, "labels": {TEAM_LABEL: team.name}}},
                opts=child,
            )
            self.namespaces[team.name] = ns
            in_ns = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns])
            KubernetesObject(
                f"{name}-{team.name}-gpu",
                {
                    "apiVersion": "v1",
                    "kind": "ResourceQuota",
                    "metadata": {"name": "gpu", "namespace": team.name},
                    "spec": {"hard": {"requests.nvidia.com/gpu": str(team.gpu_quota)}},
                },
                opts=in_ns,
            )
            for cls in args.priority_classes:
                if cls.name in team.priority_classes:
                    continue
                KubernetesObject(
                    f"{name}-{team.name}-deny-{cls.name}",
                    {
                        "apiVersion": "v1",
                        "kind": "ResourceQuota",
                        "metadata": {"name": f"deny-{cls.name}", "namespace": team.name},
                        "spec": {
                            "hard": {"pods": "0"},
                            "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": [cls.name]}]},
                        },
                    },
                    opts=in_ns,
                )
        self.register_outputs({"namespaces": list(self.namespaces)})

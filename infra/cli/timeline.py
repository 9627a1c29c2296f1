"""`higgsfield timeline STACK`: the deployment's critical path, from the recorded dependency graph
and typical create times per resource type.

Every resource starts when the last thing it depends on has finished (a dependency on a
component means all of that component's resources). The report gives the critical path, its
total, and the ratio to the chain no deployment can avoid: VPC -> subnet -> EKS cluster -> the
add-ons a node needs (DESIGN.md decision 9: node groups follow them, so that upgrades go control
plane -> add-ons -> node groups) -> a node group -> a device plugin. A ratio well above 1 means
something waits on what it does not need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from infra.cli.offline import Plan, Resource

# Typical minutes to create, per resource type, and where the figure comes from. Figures are
# planning numbers, not guarantees; none could be measured from this build machine.
CREATE_MINUTES: dict[str, tuple[float, str]] = {
    "eks:index:Cluster": (12.0, "EKS control plane creation takes about 10 minutes (EKS user guide, 'Create a cluster'), plus pulumi-eks's security groups and OIDC provider"),
    "aws:eks/nodeGroup:NodeGroup": (5.0, "managed node group: instances launch, join and report Ready; typical 3-6 minutes (operator experience, unverified)"),
    "aws:eks/addon:Addon": (2.0, "managed add-on reaches ACTIVE once its pods run (operator experience, unverified)"),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": (0.2, "API call"),
    "aws:ec2/natGateway:NatGateway": (2.0, "NAT gateway becomes available in a few minutes (VPC user guide, 'NAT gateways')"),
    "aws:ec2/vpcEndpoint:VpcEndpoint": (2.0, "interface endpoint ENIs become available in about 2 minutes (operator experience, unverified)"),
    "aws:fsx/lustreFileSystem:LustreFileSystem": (15.0, "FSx for Lustre creation: 10-20 minutes depending on size (operator experience, unverified)"),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": (5.0, "metadata import on create (operator experience, unverified)"),
    "kubernetes:helm.sh/v3:Release": (2.0, "chart install waiting for its pods to be ready (operator experience, unverified)"),
    "kubernetes:kustomize/v2:Directory": (1.0, "fetch the upstream overlay and apply it (operator experience, unverified)"),
}
DEFAULT_MINUTES = (0.2, "a single API call")
CHAIN = ("aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet", "eks:index:Cluster", "aws:eks/addon:Addon", "aws:eks/nodeGroup:NodeGroup", "kubernetes:helm.sh/v3:Release")


def minutes(type_: str, custom: bool = True) -> float:
    if not custom and type_.startswith("higgsfield:"):
        return 0.0  # our own components take no time themselves
    return CREATE_MINUTES.get(type_, DEFAULT_MINUTES)[0]


@dataclass(frozen=True)
class Timeline:
    finish: Mapping[str, float]        # URN -> earliest finish (minutes)
    critical_path: list[Resource]
    total: float
    unavoidable: float

    @property
    def ratio(self) -> float:
        return self.total / self.unavoidable


def compute(plan: Plan) -> Timeline:
    by_urn = {r.urn: r for r in plan.resources}
    children: dict[str, list[str]] = {}
    for r in plan.resources:
        if r.parent in by_urn:
            children.setdefault(r.parent, []).append(r.urn)

    @cache
    def start(urn: str) -> float:
        return max((finish(d) for d in by_urn[urn].dependencies if d in by_urn), default=0.0)

    @cache
    def finish(urn: str) -> float:
        r = by_urn[urn]
        own = start(urn) + minutes(r.type, r.custom)
        if not r.custom and r.type.startswith("higgsfield:"):  # a component is done when its resources are
            return max([own, *(finish(c) for c in children.get(urn, []))])
        return own

    ends = {r.urn: finish(r.urn) for r in plan.resources}
    last = max(plan.resources, key=lambda r: ends[r.urn])
    path = [last]
    while True:
        current = path[-1]
        feeders = [d for d in current.dependencies if d in by_urn]
        if not current.custom and current.type.startswith("higgsfield:"):
            feeders += children.get(current.urn, [])
        if not feeders:
            break
        path.append(by_urn[max(feeders, key=lambda u: ends[u])])
    path.reverse()
    path = [r for r in path if not (not r.custom and r.type.startswith("higgsfield:"))]
    return Timeline(ends, path, ends[last.urn], _unavoidable(plan))


def _unavoidable(plan: Plan) -> float:
    """VPC -> subnet -> cluster -> the fastest node group -> a device plugin release."""
    return sum(minutes(t) for t in CHAIN)


def render(plan: Plan, t: Timeline) -> str:
    lines = [f"Deployment timeline of {plan.stack}: {t.total:.1f} min on the critical path; unavoidable chain {t.unavoidable:.1f} min; ratio {t.ratio:.2f}"]
    for r in t.critical_path:
        mins, source = CREATE_MINUTES.get(r.type, DEFAULT_MINUTES)
        lines.append(f"  {t.finish[r.urn]:6.1f}  +{mins:4.1f}  {r.type} {r.name}")
    lines.append("Create times (minutes) and their sources:")
    for type_, (mins, source) in CREATE_MINUTES.items():
        lines.append(f"  {mins:5.1f}  {type_}: {source}")
    lines.append(f"  {DEFAULT_MINUTES[0]:5.1f}  anything else: {DEFAULT_MINUTES[1]}")
    return "\n".join(lines)

"""`higgsfield timeline STACK`: the deployment's critical path, from the recorded dependency graph
and typical create times per resource type.

Every resource starts when the last thing it depends on has finished (a dependency on a
component means all of that component's resources). The report gives the critical path, its
total, and the ratio to the chain no deployment can avoid: VPC -> subnet -> EKS cluster -> the
add-ons a node needs (docs/design/versions.md: node groups follow them, so that upgrades go control
plane -> add-ons -> node groups) -> a node group -> a device plugin. A ratio well above 1 means
something waits on what it does not need.
Beside the critical path it finds the longest chains that leave it (in prod, the storage branch).
The Gantt chart and Mermaid text are infra/cli/views/timeline.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from infra.offline.evaluate import Plan, Resource

# Typical minutes to create, per resource type, and where the figure comes from. Figures are
# planning numbers, not guarantees; none could be measured from this build machine.
CREATE_MINUTES: dict[str, tuple[float, str]] = {
    "eks:index:Cluster": (
        12.0,
        "EKS control plane creation takes about 10 minutes (EKS user guide, 'Create a cluster'), plus pulumi-eks's "
        "security groups and OIDC provider",
    ),
    "aws:eks/nodeGroup:NodeGroup": (
        5.0,
        "managed node group: instances launch, join and report Ready; typical 3-6 minutes (operator experience, "
        "unverified)",
    ),
    "aws:eks/addon:Addon": (2.0, "managed add-on reaches ACTIVE once its pods run (operator experience, unverified)"),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": (0.2, "API call"),
    "aws:ec2/natGateway:NatGateway": (
        2.0,
        "NAT gateway becomes available in a few minutes (VPC user guide, 'NAT gateways')",
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": (
        2.0,
        "interface endpoint ENIs become available in about 2 minutes (operator experience, unverified)",
    ),
    "aws:fsx/lustreFileSystem:LustreFileSystem": (
        15.0,
        "FSx for Lustre creation: 10-20 minutes depending on size (operator experience, unverified)",
    ),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": (
        5.0,
        "metadata import on create (operator experience, unverified)",
    ),
    "kubernetes:helm.sh/v3:Release": (
        2.0,
        "chart install waiting for its pods to be ready (operator experience, unverified)",
    ),
    "kubernetes:kustomize/v2:Directory": (
        1.0,
        "fetch the upstream overlay and apply it (operator experience, unverified)",
    ),
}
DEFAULT_MINUTES = (0.2, "a single API call")
CHAIN = (
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "eks:index:Cluster",
    "aws:eks/addon:Addon",
    "aws:eks/nodeGroup:NodeGroup",
    "kubernetes:helm.sh/v3:Release",
)


def minutes(type_: str, custom: bool = True) -> float:
    if not custom and type_.startswith("higgsfield:"):
        return 0.0  # our own components take no time themselves
    return CREATE_MINUTES.get(type_, DEFAULT_MINUTES)[0]


@dataclass(frozen=True)
class Step:
    resource: Resource
    start: float  # minutes from the start of the deployment
    finish: float

    @property
    def minutes(self) -> float:
        return self.finish - self.start


@dataclass(frozen=True)
class Branch:
    """A chain that runs beside the critical path: its steps after it leaves the critical path
    (`after`, None when it shares nothing with it), ending where the chain ends."""

    steps: list[Step]
    after: Resource | None

    @property
    def finish(self) -> float:
        return self.steps[-1].finish


@dataclass(frozen=True)
class Timeline:
    finish: Mapping[str, float]  # URN -> earliest finish (minutes)
    critical_path: list[Resource]
    total: float
    unavoidable: float
    steps: tuple[Step, ...] = ()  # the critical path with start and finish
    branches: tuple[Branch, ...] = ()  # the longest other chains, longest first

    @property
    def ratio(self) -> float:
        return self.total / self.unavoidable


def _is_component(r: Resource) -> bool:
    return not r.custom and r.type.startswith("higgsfield:")


def compute(plan: Plan, branches: int = 3) -> Timeline:
    """Earliest finish of every resource, the critical path, and the `branches` longest chains
    that leave it (each the longest of the chains that leave it at the same place)."""
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
        if _is_component(r):  # a component is done when its resources are
            return max([own, *(finish(c) for c in children.get(urn, []))])
        return own

    def chain(last: Resource) -> list[Resource]:
        path = [last]
        while True:
            current = path[-1]
            feeders = [d for d in current.dependencies if d in by_urn]
            if _is_component(current):
                feeders += children.get(current.urn, [])
            if not feeders:
                break
            path.append(by_urn[max(feeders, key=lambda u: (ends[u], u))])
        return [r for r in reversed(path) if not _is_component(r)]

    def steps_of(resources: list[Resource]) -> list[Step]:
        return [Step(r, ends[r.urn] - minutes(r.type, r.custom), ends[r.urn]) for r in resources]

    ends = {r.urn: finish(r.urn) for r in plan.resources}
    last = max(plan.resources, key=lambda r: (ends[r.urn], r.urn))
    path = chain(last)
    on_path = {r.urn for r in path}
    found: dict[str, Branch] = {}
    depended_on = {d for r in plan.resources for d in r.dependencies}
    ends_of_chains = [r for r in plan.resources if r.custom and r.urn not in depended_on and r.urn not in on_path]
    for end in sorted(ends_of_chains, key=lambda r: (-ends[r.urn], r.urn)):
        resources = chain(end)
        shared = 0
        while shared < len(resources) and shared < len(path) and resources[shared].urn == path[shared].urn:
            shared += 1
        own = resources[shared:]
        if own and own[0].urn not in found and own[0].urn not in on_path:
            found[own[0].urn] = Branch(steps_of(own), path[shared - 1] if shared else None)
    ranked = sorted(found.values(), key=lambda b: (-b.finish, b.steps[-1].resource.urn))[:branches]
    return Timeline(ends, path, ends[last.urn], _unavoidable(plan), tuple(steps_of(path)), tuple(ranked))


def _unavoidable(plan: Plan) -> float:
    """VPC -> subnet -> cluster -> the fastest node group -> a device plugin release."""
    return sum(minutes(t) for t in CHAIN)


def source_of(type_: str) -> tuple[float, str]:
    """The create time of a resource type and where the figure comes from."""
    return CREATE_MINUTES.get(type_, DEFAULT_MINUTES)


def as_json(plan: Plan, t: Timeline) -> dict:
    def step(s: Step) -> dict:
        return {
            "type": s.resource.type,
            "name": s.resource.name,
            "start": round(s.start, 3),
            "finish": round(s.finish, 3),
            "minutes": round(s.minutes, 3),
        }

    return {
        "stack": plan.stack,
        "total_minutes": round(t.total, 3),
        "unavoidable_minutes": round(t.unavoidable, 3),
        "ratio": round(t.ratio, 4),
        "critical_path": [step(s) for s in t.steps],
        "branches": [
            {
                "after": None if b.after is None else {"type": b.after.type, "name": b.after.name},
                "finish": round(b.finish, 3),
                "slack_minutes": round(t.total - b.finish, 3),
                "steps": [step(s) for s in b.steps],
            }
            for b in t.branches
        ],
        "create_minutes": {
            type_: {"minutes": m, "source": src}
            for type_, (m, src) in [*CREATE_MINUTES.items(), ("*", DEFAULT_MINUTES)]
        },
    }

"""Volcano queues, priority classes and teams."""

from __future__ import annotations

from pydantic import (
    field_validator,
    model_validator,
)

from infra.config.base import DnsLabel, Setting, Str, items, number
from infra.config.errors import Problems, _duplicates

_MAX_USER_PRIORITY = 1_000_000_000  # above this Kubernetes reserves values for system classes


# Volcano's scheduler creates the queues `root` and `default` itself at start (default: reclaimable,
# jobs naming no queue land there): volcano-sh/volcano:pkg/scheduler/cache/cache.go@v1.15.1
# newDefaultAndRootQueue. The Volcano component manages `default` (never reclaimable, no GPUs); a
# configured queue may not take either name.
VOLCANO_QUEUES = ("root", "default")


class Queue(Setting):
    """A Volcano queue (never reclaimed from)."""

    name: DnsLabel
    """Lowercase DNS label, at most 30 characters."""
    weight: number(1, 65535, "ours: shares, not counts") = 1
    """Share of the cluster when queues compete (drf)."""
    gpu_capability: number(0, 1_000_000, "ours: a million GPUs")
    """GPUs the queue may hold at most; no more than the pools can provide."""

    @field_validator("name")
    @classmethod
    def _not_volcanos(cls, name: str) -> str:
        if name in VOLCANO_QUEUES:
            raise ValueError(f"{name!r} is a queue Volcano creates and the platform manages (root, default: no GPUs); name the team's queue")
        return name


class PriorityClassSpec(Setting):
    """A PriorityClass teams may use (never preempts)."""

    name: DnsLabel
    """Lowercase DNS label, at most 30 characters."""
    value: number(-2_147_483_648)
    """Higher runs first; at most 1,000,000,000 (above is reserved for system classes)."""

    @field_validator("name")
    @classmethod
    def _not_system(cls, name: str) -> str:
        if name.startswith("system-"):
            raise ValueError(f"{name!r}: Kubernetes reserves the system- prefix for its own priority classes")
        return name

    @field_validator("value")
    @classmethod
    def _user_range(cls, value: int) -> int:
        if value > _MAX_USER_PRIORITY:
            raise ValueError(f"{value} is above {_MAX_USER_PRIORITY:,}, which Kubernetes reserves for system classes")
        return value


# Namespaces Kubernetes, EKS add-ons and this platform own; a team may not be named like one
# (its namespace would be the platform's). kube-* is Kubernetes' own prefix; higgsfield-* ours.
RESERVED_NAMESPACES = ("default", "monitoring", "volcano-system", "kubeflow", "amazon-cloudwatch")
RESERVED_NAMESPACE_PREFIXES = ("kube-", "higgsfield-", "volcano-", "aws-", "amazon-", "eks-")
# POSIX ids: below 1000 are the system's, 65534 is nobody; Lustre ids are 32-bit unsigned, but
# Kubernetes runAsUser is checked against int32 by PSA tooling, so stay below 2^31.
TEAM_UID_MIN, TEAM_UID_MAX = 1000, 2_147_483_647


class Team(Setting):
    """A team gets a namespace, a GPU quota, the priority classes it may use, a queue, and a
    POSIX identity its pods run as and its files on Lustre belong to."""

    name: DnsLabel
    """The team's namespace; lowercase DNS label, at most 30 characters."""
    queue: Str
    """One of scheduler.queues."""
    gpu_quota: number(0, 1_000_000, "ours: a million GPUs")
    """GPUs the namespace may hold at most: equal to its own queue's gpuCapability, which enforces it whole gangs at a time."""
    priority_classes: tuple[Str, ...] = items(1)
    """Names from scheduler.priorityClasses the team may use."""
    uid: number(TEAM_UID_MIN, TEAM_UID_MAX, "below 2^31")
    """POSIX UID and GID (the same number) of the team's pods and Lustre directory; unique per team, never reused."""

    @field_validator("name")
    @classmethod
    def _not_a_platform_namespace(cls, name: str) -> str:
        if name in RESERVED_NAMESPACES or name.startswith(RESERVED_NAMESPACE_PREFIXES):
            raise ValueError(f"{name!r} is a namespace Kubernetes or the platform owns ({', '.join(RESERVED_NAMESPACES)}, {', '.join(p + '*' for p in RESERVED_NAMESPACE_PREFIXES)}); pick another team name")
        return name

    @field_validator("uid")
    @classmethod
    def _not_nobody(cls, uid: int) -> int:
        if uid == 65534:
            raise ValueError("65534 is nobody (Lustre and NFS squash to it); pick another")
        return uid



class Scheduler(Setting):
    """Volcano queues, the priority classes, and the teams that submit to them."""

    queues: tuple[Queue, ...] = items()
    priority_classes: tuple[PriorityClassSpec, ...] = items()
    teams: tuple[Team, ...] = items()

    @model_validator(mode="after")
    def _references(self) -> Scheduler:
        problems = Problems()
        _duplicates(problems, "queues", [q.name for q in self.queues])
        _duplicates(problems, "priorityClasses", [c.name for c in self.priority_classes])
        by_queue = {q.name: q for q in self.queues}
        class_names = {c.name for c in self.priority_classes}
        queue_owner: dict[str, str] = {}
        for i, team in enumerate(self.teams):
            queue = by_queue.get(team.queue)
            if queue is None:
                problems.add(f"teams[{i}].queue", f"unknown queue {team.queue!r}; queues: {', '.join(by_queue) or 'none'}")
            elif team.gpu_quota > queue.gpu_capability:
                problems.add(f"teams[{i}].gpuQuota", f"{team.gpu_quota} GPUs is above queue {team.queue!r}'s capability of {queue.gpu_capability}")
            elif team.gpu_quota < queue.gpu_capability:
                problems.add(f"teams[{i}].gpuQuota", f"{team.gpu_quota} GPUs is below queue {team.queue!r}'s capability of {queue.gpu_capability}: "
                             "the team's queue is its GPU quota (Volcano admits whole gangs against it; a ResourceQuota would admit part "
                             "of one), so give the queue the team's quota")
            if queue is not None and team.queue in queue_owner and queue_owner[team.queue] != team.name:
                problems.add(f"teams[{i}].queue", f"queue {team.queue!r} is team {queue_owner[team.queue]!r}'s: each team has a queue of its own, "
                             "which holds its GPU quota whole gangs at a time (docs/design/autoscaler-demand.md)")
            queue_owner.setdefault(team.queue, team.name)
            for j, cls in enumerate(team.priority_classes):
                if cls not in class_names:
                    problems.add(f"teams[{i}].priorityClasses[{j}]", f"unknown priority class {cls!r}; classes: {', '.join(sorted(class_names)) or 'none'}")
        _duplicates(problems, "teams", [t.name for t in self.teams])
        owners: dict[int, str] = {}
        for i, team in enumerate(self.teams):
            if team.uid in owners and owners[team.uid] != team.name:
                problems.add(f"teams[{i}].uid", f"{team.uid} is team {owners[team.uid]!r}'s: every team needs its own UID (it owns the team's files)")
            owners.setdefault(team.uid, team.name)
        problems.raise_any()
        return self



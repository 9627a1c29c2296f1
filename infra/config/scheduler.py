"""Volcano queues, priority classes and teams."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from math import ceil
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from infra.config.base import DnsLabel, Setting, Str, derived, items, number
from infra.config.errors import Problems, _duplicates

_MAX_USER_PRIORITY = 1_000_000_000  # above this Kubernetes reserves values for system classes


# Volcano's scheduler creates the queues `root` and `default` itself at start (default: reclaimable,
# jobs naming no queue land there; components/cluster_created.py cites the code). The Volcano
# component manages `default` (never reclaimable, no GPUs); a configured queue may not take either name.
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
            raise ValueError(
                f"{name!r} is a queue Volcano creates and the platform manages (root, default: no GPUs); name the "
                "team's queue"
            )
        return name


# The three classes of work (docs/design/workload-classes.md). What each may take
# from the others is proven by `higgsfield check` from the rendered scheduler configuration
# (infra/offline/preemption.py): only `serving` preempts, and only what lies above a training gang's
# minimum or an evaluation pod; `training` and `evaluation` never preempt.
Workload = Literal["training", "serving", "evaluation"]
WORKLOADS: tuple[str, ...] = ("training", "serving", "evaluation")
# The platform's own PriorityClass for pods that name none (globalDefault, preemptionPolicy Never):
# without it such a pod - every Training Operator pod, whose template names no class - would get
# preemptionPolicy PreemptLowerPriority and could preempt (infra/offline/preemption.py). Config may not
# use the name, nor the platform's higgsfield- prefix.
DEFAULT_PRIORITY_CLASS = "higgsfield-default"
# The platform's PriorityClass of a team's services without GPUs (a Deployment's pods on the teams' CPU nodes, which
# cannot carry the deadline that marks the other pods without GPUs): its own quota scope (components/teams.py
# cpu_service_quota), never preempts.
CPU_SERVICE_PRIORITY_CLASS = "higgsfield-cpu-service"


class PriorityClassSpec(Setting):
    """A PriorityClass teams may use, for one class of work: `training` and `evaluation` never
    preempt; `serving` may take back what lies above a training gang's minimum (and evaluation pods)."""

    name: DnsLabel
    """Lowercase DNS label, at most 30 characters."""
    value: number(-2_147_483_648)
    """Higher runs first; at most 1,000,000,000 (above is reserved for system classes)."""
    workload: Workload = "training"
    """training (gangs, never preempted below their minimum, never preempt), serving (its own quota, may
    preempt elastic surplus and evaluation), evaluation (the scavenger: lowest, first to give back, never preempts)."""

    @field_validator("name")
    @classmethod
    def _not_system(cls, name: str) -> str:
        if name.startswith("system-"):
            raise ValueError(f"{name!r}: Kubernetes reserves the system- prefix for its own priority classes")
        if name.startswith("higgsfield-"):
            raise ValueError(
                f"{name!r}: the higgsfield- prefix is the platform's ({DEFAULT_PRIORITY_CLASS} is the class of pods "
                "that name none)"
            )
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
# A team's CPU and memory quota (a ResourceQuota, checked pod by pod) must never refuse a pod of a
# gang the team's queue has admitted: that is part of a gang, for which the autoscaler would buy
# nodes (docs/design/autoscaler-demand.md). Its queue admits whole gangs up to its capability, whose
# host dimensions are the team's GPUs x one GPU's share of its node, the most of any instance type
# of the stack's pools (infra/config/gpu_pools.py gpu_share; components/demand.py queue_resources).
# So the quota is at least that floor; and at most the floor plus a little room for CPU-only work
# (data preparation, evaluation): a quota above the team's share would let it hold more GPU nodes
# than its GPUs would, with pods that request no GPU. The default is that most.
MIN_CPU_QUOTA, MIN_MEMORY_QUOTA_GIB = 16, 64
# Pods of CPU-only work a team may run beside its gangs (data preparation, evaluation, its MPI launchers, its
# services), in that room: so few that one team's pods of a millicore each fill at most one of the teams' CPU nodes'
# pod slots on a node of 58 (infra/config/stack.py _team_cpu_nodes_defaults).
CPU_ONLY_PODS = 16
# The part of that room a team's services without GPUs may ask (CPU_SERVICE_PRIORITY_CLASS); its jobs' pods without
# GPUs ask the rest.
CPU_SERVICE_CPU, CPU_SERVICE_MEMORY_GIB, CPU_SERVICE_PODS = 4, 16, 4
MAX_CPU_QUOTA, MAX_MEMORY_QUOTA_GIB = 10_000_000, 1_000_000_000


def gang_floor(gpu_quota: int, share: Mapping[str, Fraction]) -> tuple[int, int]:
    """(vCPUs, GiB) the team's queue may admit for gangs: its GPUs x one GPU's share of the
    stack's GPU nodes (vCPUs, MiB), as components/demand.py queue_resources, rounded up."""
    return ceil(gpu_quota * share["cpu"]), ceil(gpu_quota * share["memory"] / 1024)


class Team(Setting):
    """A team gets a namespace, a GPU quota, the priority classes it may use, a queue, and a
    POSIX identity its pods run as and its files on Lustre belong to."""

    name: DnsLabel
    """The team's namespace; lowercase DNS label, at most 30 characters."""
    queue: Str
    """One of scheduler.queues."""
    gpu_quota: number(0, 1_000_000, "ours: a million GPUs")
    """GPUs the namespace may hold at most: equal to its own queue's gpuCapability, which enforces it whole gangs at a
    time."""
    priority_classes: tuple[Str, ...] = items(1)
    """Names from scheduler.priorityClasses the team may use."""
    service_types: tuple[Literal["NodePort", "LoadBalancer"], ...] = items(maximum=2)
    """Service types beyond ClusterIP the team may create (NodePort, LoadBalancer); empty: ClusterIP and headless only.
    A LoadBalancer is internal unless the stack sets publicLoadBalancers."""
    uid: number(TEAM_UID_MIN, TEAM_UID_MAX, "below 2^31")
    """POSIX UID and GID (the same number) of the team's pods and Lustre directory; unique per team, never reused."""
    serving_gpu_quota: number(0) | None = None
    """GPUs the team's serving-class pods may request at most (a quota of their own, within gpuQuota); required with a
    serving class."""
    cpu_quota: number(1, MAX_CPU_QUOTA, "a bound against typos") = derived(
        "vCPUs the namespace's pods may request in all; at least what its queue admits for gangs (gpuQuota x one "
        "GPU's share of the pools' nodes' vCPUs), at most that + 16 (the default)."
    )
    memory_quota_gib: number(1, MAX_MEMORY_QUOTA_GIB, "a bound against typos") = derived(
        "GiB the namespace's pods may request in all; at least what its queue admits for gangs (gpuQuota x one "
        "GPU's share of the pools' nodes' memory), at most that + 64 (the default).",
        alias="memoryQuotaGiB",
    )
    default_cpu_request_millicores: number(10, 64_000) = 500
    """CPU a container that names none requests (LimitRange defaultRequest), in millicores."""
    default_memory_request_mib: number(16, 1_048_576) = Field(1024, alias="defaultMemoryRequestMiB")
    """Memory a container that names none requests (LimitRange defaultRequest), in MiB."""
    max_jobs: number(1, 100_000, "ours: a bound against typos") | None = None
    """Jobs of each kind (batch Jobs, and each Kubeflow job kind) the namespace may hold at once, finished ones
    included until they are deleted or expire (ttlSecondsAfterFinished); unset: 100 or twice the namespace's pods
    quota, whichever is more."""

    @field_validator("name")
    @classmethod
    def _not_a_platform_namespace(cls, name: str) -> str:
        if name in RESERVED_NAMESPACES or name.startswith(RESERVED_NAMESPACE_PREFIXES):
            raise ValueError(
                f"{name!r} is a namespace Kubernetes or the platform owns ({', '.join(RESERVED_NAMESPACES)}, "
                f"{', '.join(p + '*' for p in RESERVED_NAMESPACE_PREFIXES)}); pick another team name"
            )
        return name

    @field_validator("uid")
    @classmethod
    def _not_nobody(cls, uid: int) -> int:
        if uid == 65534:
            raise ValueError("65534 is nobody (Lustre and NFS squash to it); pick another")
        return uid

    def within_share(self, share: Mapping[str, Fraction], problems: Problems, where: str) -> Team:
        """The team with its CPU and memory quota filled in and checked against its share of the
        stack's GPU fleet (`share`: infra/config/gpu_pools.py gpu_share); problems under `where`."""
        cpu_floor, memory_floor = gang_floor(self.gpu_quota, share)
        cpu_most, memory_most = cpu_floor + MIN_CPU_QUOTA, memory_floor + MIN_MEMORY_QUOTA_GIB
        cpu = self.cpu_quota if self.cpu_quota is not None else cpu_most
        memory = self.memory_quota_gib if self.memory_quota_gib is not None else memory_most
        gang = "the quota, checked pod by pod, would create part of a gang; raise it or leave it unset"
        fleet = (
            "the team could hold more GPU nodes than its gpuQuota with pods that request no GPU; lower it or leave "
            "it unset"
        )
        share_of = f"({self.gpu_quota} GPUs x one GPU's share of the pools' nodes)"
        if cpu < cpu_floor:
            problems.add(
                f"{where}.cpuQuota",
                f"{cpu} vCPUs is below the {cpu_floor:,} its queue admits for gangs {share_of}: {gang}",
            )
        elif cpu > cpu_most:
            problems.add(
                f"{where}.cpuQuota",
                f"{cpu} vCPUs is above the team's share of {cpu_floor:,} {share_of} + {MIN_CPU_QUOTA}: {fleet}",
            )
        if memory < memory_floor:
            problems.add(
                f"{where}.memoryQuotaGiB",
                f"{memory} GiB is below the {memory_floor:,} its queue admits for gangs {share_of}: {gang}",
            )
        elif memory > memory_most:
            problems.add(
                f"{where}.memoryQuotaGiB",
                f"{memory} GiB is above the team's share of {memory_floor:,} "
                f"{share_of} + {MIN_MEMORY_QUOTA_GIB}: {fleet}",
            )
        if self.default_cpu_request_millicores > cpu * 1000:
            problems.add(
                f"{where}.defaultCpuRequestMillicores",
                f"{self.default_cpu_request_millicores}m is above the team's cpuQuota of {cpu} vCPUs",
            )
        if self.default_memory_request_mib > memory * 1024:
            problems.add(
                f"{where}.defaultMemoryRequestMiB",
                f"{self.default_memory_request_mib} MiB is above the team's memoryQuotaGiB of {memory} GiB",
            )
        filled = self.model_copy()
        filled._fill(cpu_quota=cpu, memory_quota_gib=memory)
        return filled


class Scheduler(Setting):
    """Volcano queues, the priority classes, and the teams that submit to them."""

    queues: tuple[Queue, ...] = items()
    priority_classes: tuple[PriorityClassSpec, ...] = items()
    teams: tuple[Team, ...] = items()

    def within_share(self, share: Mapping[str, Fraction]) -> Scheduler:
        """The teams' CPU and memory quotas filled in from their share of the GPU fleet, or refused."""
        problems = Problems()
        teams = tuple(t.within_share(share, problems, f"teams[{i}]") for i, t in enumerate(self.teams))
        problems.raise_any()
        return self.model_copy(update={"teams": teams})

    @property
    def team_uids(self) -> dict[str, int]:
        """Each team's UID (= GID): who owns its files on shared storage, and the UID its pods run as."""
        return {team.name: team.uid for team in self.teams}

    def classes_of(self, team: Team, workload: str) -> tuple[str, ...]:
        """The team's priority classes of one class of work, in the team's order."""
        kinds = {c.name: c.workload for c in self.priority_classes}
        return tuple(c for c in team.priority_classes if kinds.get(c) == workload)

    @model_validator(mode="after")
    def _references(self) -> Scheduler:
        problems = Problems()
        _duplicates(problems, "queues", [q.name for q in self.queues])
        _duplicates(problems, "priorityClasses", [c.name for c in self.priority_classes])
        by_queue = {q.name: q for q in self.queues}
        class_names = {c.name for c in self.priority_classes}
        self._class_order(problems)
        queue_owner: dict[str, str] = {}
        for i, team in enumerate(self.teams):
            queue = by_queue.get(team.queue)
            if queue is None:
                problems.add(
                    f"teams[{i}].queue", f"unknown queue {team.queue!r}; queues: {', '.join(by_queue) or 'none'}"
                )
            elif team.gpu_quota > queue.gpu_capability:
                problems.add(
                    f"teams[{i}].gpuQuota",
                    f"{team.gpu_quota} GPUs is above queue {team.queue}'s capability of {queue.gpu_capability}",
                )
            elif team.gpu_quota < queue.gpu_capability:
                problems.add(
                    f"teams[{i}].gpuQuota",
                    f"{team.gpu_quota} GPUs is below queue {team.queue}'s capability of {queue.gpu_capability}: "
                    "the team's queue is its GPU quota (Volcano admits whole gangs against it; a ResourceQuota would "
                    "admit part "
                    "of one), so give the queue the team's quota",
                )
            if queue is not None and team.queue in queue_owner and queue_owner[team.queue] != team.name:
                problems.add(
                    f"teams[{i}].queue",
                    f"queue {team.queue!r} is team {queue_owner[team.queue]!r}'s: each team has a queue of its own, "
                    "which holds its GPU quota whole gangs at a time (docs/design/autoscaler-demand.md)",
                )
            queue_owner.setdefault(team.queue, team.name)
            for j, cls in enumerate(team.priority_classes):
                if cls not in class_names:
                    problems.add(
                        f"teams[{i}].priorityClasses[{j}]",
                        f"unknown priority class {cls!r}; classes: {', '.join(sorted(class_names)) or 'none'}",
                    )
            if not self.classes_of(team, "training") and all(c in class_names for c in team.priority_classes):
                problems.add(
                    f"teams[{i}].priorityClasses",
                    f"team {team.name} needs a training class (its training jobs and health checks use the first)",
                )
            if self.classes_of(team, "serving"):
                if team.serving_gpu_quota is None:
                    problems.add(
                        f"teams[{i}].servingGpuQuota",
                        f"team {team.name} is given a serving class: set the GPUs its serving pods may hold (within "
                        f"gpuQuota {team.gpu_quota})",
                    )
                elif team.serving_gpu_quota > team.gpu_quota:
                    problems.add(
                        f"teams[{i}].servingGpuQuota",
                        f"{team.serving_gpu_quota} GPUs is above the team's gpuQuota of {team.gpu_quota}",
                    )
        _duplicates(problems, "teams", [t.name for t in self.teams])
        owners: dict[int, str] = {}
        for i, team in enumerate(self.teams):
            if team.uid in owners and owners[team.uid] != team.name:
                problems.add(
                    f"teams[{i}].uid",
                    f"{team.uid} is team {owners[team.uid]!r}'s: every team needs its own UID (it owns the team's "
                    "files)",
                )
            owners.setdefault(team.uid, team.name)
        problems.raise_any()
        return self

    def _class_order(self, problems: Problems) -> None:
        """serving above every training class, every training class above every evaluation class:
        Volcano's priority plugin lets a preemptor take only pods of lower-priority jobs, and evicts
        the lowest first (volcano-sh/volcano:pkg/scheduler/plugins/priority/priority.go@v1.15.1
        preemptableFn; framework/session_plugins.go BuildVictimsPriorityQueue)."""
        by_kind = {k: [(i, c) for i, c in enumerate(self.priority_classes) if c.workload == k] for k in WORKLOADS}
        for higher, lower in (("serving", "training"), ("training", "evaluation")):
            floor = max((c.value for _, c in by_kind[lower]), default=None)
            if floor is None:
                continue
            for i, c in by_kind[higher]:
                if c.value <= floor:
                    below = max((c2 for _, c2 in by_kind[lower]), key=lambda c2: c2.value)
                    problems.add(
                        f"priorityClasses[{i}].value",
                        f"{higher} class {c.name!r} ({c.value}) must be above every {lower} class ({below.name!r} is "
                        f"{below.value})",
                    )

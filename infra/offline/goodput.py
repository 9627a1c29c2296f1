"""Goodput: the share of a job's (and a team's) allocated GPU-hours spent training, and where the rest
went.

A job's timeline is a list of intervals, each with the GPUs the job held then and what they did:
  waiting     nodes held while the gang waits for the rest of its capacity (PodGroup Inqueue, some
              pods bound: Volcano's PodGroup status and the pods' bind times)
  gate        nodes held while a node of the gang is in the health gate (the gate's Events)
  preflight   the pre-flight gang check (each rank's `preflight rank ... in Xs` line)
  training    steps made (the ranks' progress series, images/training/progress.py)
  checkpoint  steps stalled by a synchronous checkpoint save (each save's line in the log, the ranks'
              higgsfield_training_checkpoint_seconds_total series on the dashboard)
  hung        from a job's last step to its restart (the watchdog's TrainingHung Event)
  restart     from a restart to the first step after it: pods recreated, checkpoint loaded
An hour of 8 GPUs is 8 GPU-hours. Intervals may come in any order; an overlap is counted once, for
the phase listed first in PHASES (training wins over everything: a step made is a step made).
The dashboard's panels (components/observability.py TRAINING_SHARE_EXPR) show the in-run share from
the progress series alone; this module keeps the whole account.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from infra.core.names import MIN_MEMBER_ANNOTATION
from infra.offline.pods import gpus_of

PHASES = ("training", "checkpoint", "preflight", "gate", "waiting", "hung", "restart")


@dataclass(frozen=True)
class Interval:
    start: float  # seconds (any epoch, the same for one job)
    end: float
    phase: str
    gpus: int

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r}; phases: {', '.join(PHASES)}")
        if self.end < self.start or self.gpus < 0:
            raise ValueError(f"an interval ends before it starts or holds negative GPUs: {self}")


@dataclass(frozen=True)
class Job:
    namespace: str  # the team
    name: str
    intervals: tuple[Interval, ...]


@dataclass
class Goodput:
    """GPU-hours per phase; `share` is training over all of them."""

    gpu_hours: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    @property
    def allocated(self) -> float:
        return sum(self.gpu_hours.values())

    @property
    def share(self) -> float | None:
        return self.gpu_hours["training"] / self.allocated if self.allocated else None

    def add(self, other: Goodput) -> None:
        for phase, hours in other.gpu_hours.items():
            self.gpu_hours[phase] += hours

    def line(self) -> str:
        if self.share is None:
            return "no GPU-hours allocated"
        rest = ", ".join(
            f"{phase} {hours / self.allocated:.0%}"
            for phase, hours in self.gpu_hours.items()
            if phase != "training" and hours
        )
        return f"goodput {self.share:.0%} of {self.allocated:.1f} GPU-hours" + (f" (lost to {rest})" if rest else "")


def _segments(intervals: Iterable[Interval]) -> list[tuple[float, float, str, int]]:
    """The timeline cut at every boundary, each piece given to its highest-ranked phase."""
    items = list(intervals)
    cuts = sorted({t for i in items for t in (i.start, i.end)})
    pieces = []
    for left, right in zip(cuts, cuts[1:], strict=False):
        covering = [i for i in items if i.start <= left and i.end >= right]
        if covering:
            best = min(covering, key=lambda i: PHASES.index(i.phase))
            pieces.append((left, right, best.phase, best.gpus))
    return pieces


def of_job(job: Job) -> Goodput:
    result = Goodput()
    for left, right, phase, gpus in _segments(job.intervals):
        result.gpu_hours[phase] += (right - left) * gpus / 3600
    return result


def of_teams(jobs: Iterable[Job]) -> dict[str, Goodput]:
    """Each team's (namespace's) goodput: its jobs' GPU-hours summed, phase by phase."""
    teams: dict[str, Goodput] = defaultdict(Goodput)
    for job in jobs:
        teams[job.namespace].add(of_job(job))
    return dict(teams)


# --- a job's timeline from what the Kubernetes API server holds --------------------------------------

# The watchdog's Event on a job it restarts (images/training/job_watchdog.py HUNG_REASON and its message,
# "no training step for 1234s, over ..."), and the pre-flight's one line per rank and its exit code
# (images/training/preflight.py line() and EXIT_RETRY); tests/offline/test_goodput.py ties these to them.
HUNG_REASON = "TrainingHung"
STALLED = re.compile(r"no training step for (\d+(?:\.\d+)?)s")
PREFLIGHT_LINE = re.compile(r"^preflight rank \d+/\d+ node \S+: .*? in (\d+(?:\.\d+)?)s(?:;|$)")
PREFLIGHT_EXIT = 151
# A checkpoint save's line in the training log (images/training/progress.py checkpoint_note, printed by
# rank 0 of examples/train_ddp.py): the save's blocking time and the run's total so far.
CHECKPOINT_NOTE = re.compile(r"\(blocked \d+(?:\.\d+)?s, (\d+(?:\.\d+)?)s in all\)")
# The scheduler's Event when it binds a pod (Volcano records it as kube-scheduler does); Events outlive
# the pods the operator or the watchdog deleted, for the API server's event TTL (one hour on EKS).
SCHEDULED_REASON = "Scheduled"


def seconds(stamp: str | None) -> float | None:
    """An RFC 3339 time as the API server writes it (`2026-01-01T00:00:00Z`, a fraction allowed)."""
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Observed:
    """What `jobs status` reads for one job: the job, its current pods, the Events of its namespace,
    the nodes its pods are bound to (empty where the user may not read nodes), each pod's log lines
    as (time, text), and the time now."""

    job: dict
    pods: list[dict]
    events: list[dict]
    nodes: dict[str, dict]
    logs: dict[str, list[tuple[float, str]]]
    now: float


def _bound(pod: dict) -> float | None:
    """When the pod was bound to its node: its PodScheduled condition turning True."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return seconds(condition.get("lastTransitionTime"))
    return seconds(pod["metadata"].get("creationTimestamp"))


def _event_time(event: dict) -> float | None:
    return seconds(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp"))


def _replicas(job: dict) -> int:
    return sum(
        int(replica.get("replicas", 1))
        for key, replicas in (job.get("spec") or {}).items()
        if key.endswith("ReplicaSpecs")
        for replica in (replicas or {}).values()
    )


def _hangs(observed: Observed) -> list[tuple[float, float]]:
    """(when, seconds stalled) of each watchdog restart of the job, oldest first."""
    name = observed.job["metadata"]["name"]
    found = []
    for event in observed.events:
        involved = event.get("involvedObject") or {}
        stalled = STALLED.search(event.get("message") or "")
        when = _event_time(event)
        if event.get("reason") == HUNG_REASON and involved.get("name") == name and stalled and when is not None:
            found.append((when, float(stalled.group(1))))
    return sorted(found)


def _container_runs(pod: dict) -> tuple[list[tuple[float, float, int]], float | None, bool]:
    """The pod's ended runs (start, end, exit code), its current run's start, and whether that run ended."""
    ended, started, over = [], None, False
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        last = (status.get("lastState") or {}).get("terminated")
        state = status.get("state") or {}
        for run in (last, state.get("terminated")):
            if run and seconds(run.get("startedAt")) is not None and seconds(run.get("finishedAt")) is not None:
                ended.append((seconds(run["startedAt"]), seconds(run["finishedAt"]), int(run.get("exitCode", 0))))
        now = state.get("running") or state.get("terminated") or {}
        started = seconds(now.get("startedAt")) or started
        over = over or "terminated" in state
    return ended, started, over  # type: ignore[return-value]


def _min_member(job: dict) -> int:
    """A batch Job's gang: the minMember of the PodGroup Volcano's controller makes for its pods, the Job's
    MIN_MEMBER_ANNOTATION, 1 where absent, negative or no 32-bit integer (strconv.ParseInt in getMinMemberFromUpperRes,
    volcano-sh/volcano:pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1)."""
    text = str((job["metadata"].get("annotations") or {}).get(MIN_MEMBER_ANNOTATION, ""))
    value = int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else -1
    return value if 0 <= value < 2**31 else 1


def _gang_size(job: dict, pods: int) -> int:
    """How many pods are bound before the gang runs: a Kubeflow job's every replica (and any pod beyond them); a
    batch Job's (a pod template, no replica specs) its PodGroup's minMember, its other pods running as they are
    bound (an Indexed Job's later shards among them)."""
    if "template" in (job.get("spec") or {}):
        return _min_member(job)
    return max(_replicas(job), pods)


class _Gang:
    """The job's current pods, when its gang was complete (its gang's last pod bound, `_gang_size`), and the nodes'
    health-gate windows."""

    def __init__(self, observed: Observed) -> None:
        self.observed = observed
        self.binds = {p["metadata"]["name"]: _bound(p) for p in observed.pods}
        held = sorted(b for b in self.binds.values() if b is not None)
        size = max(_gang_size(observed.job, len(observed.pods)), 1)
        self.complete = held[size - 1] if len(held) >= size else observed.now
        self.windows: list[tuple[dict, tuple[float, float]]] = []  # each pod's node's gate window, once a job
        for other in observed.pods:
            node = observed.nodes.get((other.get("spec") or {}).get("nodeName") or "")
            joined = seconds((node or {}).get("metadata", {}).get("creationTimestamp"))
            bound = self.binds[other["metadata"]["name"]]
            if joined is not None and bound is not None and joined < bound:
                self.windows.append((other, (joined, bound)))

    def gated(self, pod: dict) -> list[tuple[float, float]]:
        """While this pod waited, the windows in which another pod's node was in its health gate:
        from the node's registration to that pod's bind (the gate's taint keeps pods off it until then)."""
        return [window for other, window in self.windows if other is not pod]


def _pod_intervals(observed: Observed, gang: _Gang, pod: dict, gpus: int) -> list[Interval]:
    name, now = pod["metadata"]["name"], observed.now
    bound = gang.binds[name]
    ended, started, over = _container_runs(pod)
    end = max((e for _, e, _ in ended), default=now) if over else now
    out: list[Interval] = []

    def add(start: float | None, stop: float | None, phase: str) -> None:
        if start is not None and stop is not None and stop > start:
            out.append(Interval(start, stop, phase, gpus))

    if bound is not None:
        add(bound, min(gang.complete, end), "waiting")
        for joined, passed in gang.gated(pod):
            add(max(bound, joined), min(passed, end), "gate")
    checked = [
        (t - float(m.group(1)), t) for t, text in observed.logs.get(name, []) if (m := PREFLIGHT_LINE.match(text))
    ]
    checked += [(s, e) for s, e, code in ended if code == PREFLIGHT_EXIT]
    for start, stop in checked:
        add(start, stop, "preflight")
    for start, stop, code in ended:
        if code != PREFLIGHT_EXIT and (start, stop) != (started, end):
            add(max(start, gang.complete), stop, "training")  # an earlier run of this container
            add(stop, started, "restart")
    preflight_failed = any(code == PREFLIGHT_EXIT and s == started for s, _, code in ended)
    if started is not None and not preflight_failed:
        since = max([started, gang.complete, *(stop for _, stop in checked if stop >= started)])
        add(since, end, "training")
    first = bound if bound is not None else now
    _earlier(observed, name, first, since_restart=started if started is not None else first, add=add)
    return out


def _earlier(observed: Observed, pod: str, first: float, since_restart: float, add: Any) -> None:
    """Before this pod's current run: each watchdog restart's hang and restart, and the runs before it
    as training from the pod's bind (its Scheduled Events, while the API server keeps them)."""
    binds = sorted(
        t
        for e in observed.events
        if e.get("reason") == SCHEDULED_REASON
        and (e.get("involvedObject") or {}).get("kind") == "Pod"
        and (e.get("involvedObject") or {}).get("name") == pod
        and (t := _event_time(e)) is not None
        and t < first
    )
    era_start = binds[0] if binds else None
    for when, stalled in _hangs(observed):
        if when > first:
            continue
        add(era_start, when - stalled, "training")
        add(when - stalled, when, "hung")
        after = [t for t in binds if t > when]
        era_start = after[0] if after else None
        add(when, era_start if era_start is not None else since_restart, "restart")


def timeline(observed: Observed) -> list[Job]:
    """The job's account, one timeline per pod that holds GPUs (each with its own GPUs), from the objects
    alone: waiting from a pod's bind until the whole gang is bound; gate while a node of the gang was in
    its health check; pre-flight from each rank's line (or its pod's run that exited 151); training from
    the later of the gang complete and the pre-flight to the pod's end (or now); before the current pods,
    each TrainingHung Event's stall as hung and the time to the next bind as restart. Not here: the
    checkpoint stalls (`of_objects` moves them from training, as the log says them), and anything older
    than the Events the API server keeps."""
    gang = _Gang(observed)
    namespace, name = observed.job["metadata"].get("namespace", ""), observed.job["metadata"]["name"]
    return [
        Job(namespace, f"{name}/{pod['metadata']['name']}", tuple(_pod_intervals(observed, gang, pod, gpus)))
        for pod in observed.pods
        if (gpus := gpus_of(pod))
    ]


def checkpoint_stall(observed: Observed) -> float:
    """Seconds the gang's current run has been blocked in checkpoint saves: the largest total any of
    its pods' log lines says (every rank waits for a save together, so rank 0's total is the gang's)."""
    totals = [
        float(m.group(1))
        for lines in observed.logs.values()
        for _, text in lines
        if (m := CHECKPOINT_NOTE.search(text))
    ]
    return max(totals, default=0.0)


def of_objects(observed: Observed) -> Goodput:
    """The job's goodput from what the API server holds (`timeline`), with the current run's
    checkpoint stalls (`checkpoint_stall`, from the log) moved from training to checkpoint: a
    stall lies inside the training stretch, where an interval would lose to training."""
    result = Goodput()
    for part in timeline(observed):
        result.add(of_job(part))
    stalled = checkpoint_stall(observed) * sum(gpus_of(p) for p in observed.pods) / 3600
    moved = min(stalled, result.gpu_hours["training"])
    result.gpu_hours["training"] -= moved
    result.gpu_hours["checkpoint"] += moved
    return result

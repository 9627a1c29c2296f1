"""Goodput: the share of a job's (and a team's) allocated GPU-hours spent training, and where the rest
went.

A job's timeline is a list of intervals, each with the GPUs the job held then and what they did:
  waiting     nodes held while the gang waits for the rest of its capacity (PodGroup Inqueue, some
              pods bound: Volcano's PodGroup status and the pods' bind times)
  gate        nodes held while a node of the gang is in the health gate (the gate's Events)
  preflight   the pre-flight gang check (each rank's `preflight rank ... in Xs` line)
  training    steps made (the ranks' progress series, images/training/progress.py)
  checkpoint  steps stalled by a synchronous checkpoint save
  hung        from a job's last step to its restart (the watchdog's TrainingHung Event)
  restart     from a restart to the first step after it: pods recreated, checkpoint loaded
An hour of 8 GPUs is 8 GPU-hours. Intervals may come in any order; an overlap is counted once, for
the phase listed first in PHASES (training wins over everything: a step made is a step made).
The dashboard's panels (components/observability.py TRAINING_SHARE_EXPR) show the in-run share from
the progress series alone; this module keeps the whole account.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

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

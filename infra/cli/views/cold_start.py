"""The text of `higgsfield timeline --job POOL`: a job's cold and warm start, each step with its source."""

from __future__ import annotations

from components.gang_deadline import GANG_DEADLINE_MARGIN_S
from infra.cli.views.table import wrap
from infra.config import GpuPool
from infra.offline.cold_start import GiveBack, Path


def render(pool: GpuPool, nodes: int, paths: list[Path], bound: GiveBack) -> str:
    """The two paths step by step, each step's source below it, and the half-delivered gang's
    bound; within 120 columns (a citation is never broken inside a word)."""
    lines = [f"Job submitted -> first step on pool {pool.name} ({nodes} x {pool.instance.name}):"]
    for path in paths:
        lines.append(f"  {path.name}: {path.seconds / 60:.1f} min ({path.seconds:.0f} s)")
    for path in paths:
        lines.append("")
        lines.append(f"{path.name}:")
        at = 0.0
        for s in path.steps:
            at += s.seconds
            mark = " (estimate)" if s.estimate else ""
            lines += wrap(f"+{s.seconds:6.0f} s  ={at:6.0f} s  {s.what}{mark}", indent=2, hanging=22)
            lines += wrap(f"source: {s.source}", indent=13, hanging=2)
    lines.append("")
    money = "not priced" if bound.usd is None else f"${bound.usd:,.2f}"
    lines += wrap(
        f"Half-delivered gang: the nodes that arrived are given back within {bound.seconds / 60:.0f} min "
        f"(deadline {bound.deadline_s / 60:.0f} min = boot + healthGate.timeout + {GANG_DEADLINE_MARGIN_S / 60:.0f} "
        "min, "
        f"+ check {bound.check_s:.0f} s + scaleDownUnneededTime {bound.unneeded_s / 60:.0f} min + one autoscaler "
        "loop); "
        f"at most {bound.arrived_at_most} node(s): {money}",
        indent=0,
    )
    return "\n".join(lines)

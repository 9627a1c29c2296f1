"""The text of `higgsfield timeline`: an ASCII Gantt chart of the critical path and the longest
branches beside it, the create times' sources (verbose), and the same chart as a Mermaid `gantt`
block for a pull request or a wiki."""

from __future__ import annotations

import re

from infra.cli.views import WIDTH
from infra.cli.views.table import wrap
from infra.offline.evaluate import Plan, Resource
from infra.offline.timeline import CREATE_MINUTES, DEFAULT_MINUTES, Step, Timeline

LABEL = 44  # characters of the step column
TIMES = 13  # "  12.6  17.8 "


def label(r: Resource) -> str:
    """`Cluster cluster-eks`: the type's last segment and the resource's name."""
    text = f"{r.type.rsplit(':', 1)[-1]} {r.name}"
    return text if len(text) <= LABEL - 4 else text[: LABEL - 7] + "..."


def _title(plan: Plan, t: Timeline) -> str:
    return (
        f"Deployment timeline of {plan.stack}: {t.total:.1f} min on the critical path; "
        f"no deploy is faster than {t.unavoidable:.1f} min (x{t.ratio:.2f})"
    )


def _branch_title(t: Timeline, index: int) -> str:
    b = t.branches[index]
    longest = max(b.steps, key=lambda s: s.minutes)
    where = f"after {label(b.after)}" if b.after is not None else "from the start"
    return (
        f"branch {index + 1}: {label(longest.resource)}, {where}; ends at {b.finish:.1f} min, "
        f"{t.total - b.finish:.1f} min of slack"
    )


def gantt(plan: Plan, t: Timeline) -> list[str]:
    bar_width = WIDTH - 2 - LABEL - TIMES
    scale = max(t.total, 1e-9) / bar_width  # minutes per column
    tick = next(m for m in (1, 2, 5, 10, 15, 30, 60, 120) if m / scale >= 6)

    def bar(s: Step, mark: str) -> str:
        first = min(round(s.start / scale), bar_width - 1)
        last = max(first + 1, min(bar_width, round(s.finish / scale)))
        return " " * first + mark * (last - first)

    axis = [" "] * bar_width
    for minute in range(0, int(t.total) + 1, tick):
        text = str(minute)
        at = int(minute / scale)
        if at + len(text) <= bar_width and all(c == " " for c in axis[max(0, at - 1) : at + len(text)]):
            axis[at : at + len(text)] = text
    lines = [f"  {'step':<{LABEL - 2}}{'start':>6}{'end':>6} " + "".join(axis).rstrip() + " min"]

    def rows(title: str, steps: list[Step], mark: str) -> None:
        lines.append(f"  {title}")
        for s in steps:
            lines.append(f"    {label(s.resource):<{LABEL - 4}}{s.start:6.1f}{s.finish:6.1f} " + bar(s, mark))

    rows(f"critical path ({t.total:.1f} min), '#'", list(t.steps), "#")
    for i, b in enumerate(t.branches):
        rows(_branch_title(t, i), b.steps, "=")
    return lines


def sources() -> list[str]:
    lines = ["Create times (minutes) and their sources:"]
    for type_, (mins, source) in [*CREATE_MINUTES.items(), ("anything else", DEFAULT_MINUTES)]:
        lines += wrap(f"{mins:5.1f}  {type_}: {source}", hanging=7)
    return lines


def render(plan: Plan, t: Timeline, verbose: bool = False) -> str:
    lines = [
        _title(plan, t),
        "  (VPC, subnet, cluster, a node group and a chart each wait for the one before: no deploy is faster than "
        "those in a row)",
        "  one row per resource created; --verbose for where each create time comes from",
        "",
    ]
    lines += gantt(plan, t)
    if verbose:
        lines += ["", *sources()]
    return "\n".join(lines)


# --- Mermaid ----------------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9 ,()._/-]")  # ':' ends a task name, '#' and ';' start entities and statements


def _text(text: str) -> str:
    return _UNSAFE.sub("", text.replace(": ", " - ").replace("; ", ", "))


def _clock(minutes: float) -> str:
    seconds = round(minutes * 60)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def mermaid(plan: Plan, t: Timeline) -> str:
    """A Mermaid `gantt` block: one section for the critical path (tasks marked `crit`), one per
    branch; times as HH:mm:ss from the start of the deployment."""
    lines = ["gantt", f"    title {_text(_title(plan, t))}", "    dateFormat HH:mm:ss", "    axisFormat %H:%M"]
    sections = [("Critical path", list(t.steps), "crit, ")]
    sections += [(_branch_title(t, i), b.steps, "") for i, b in enumerate(t.branches)]
    number = 0
    for title, steps, tag in sections:
        lines.append(f"    section {_text(title)}")
        for s in steps:
            number += 1
            end = max(s.finish, s.start + 1 / 60)  # a task lasts at least a second
            lines.append(f"    {_text(label(s.resource))} :{tag}t{number}, {_clock(s.start)}, {_clock(end)}")
    return "\n".join(lines) + "\n"

"""`higgsfield timeline STACK`: how long a first deploy takes, or (--job POOL) a job's start."""

from __future__ import annotations

import argparse
from pathlib import Path

from infra.cli.arguments import stack_argument
from infra.cli.output import UsageError, add_report_options, emit


def register(sub: argparse._SubParsersAction) -> None:
    timeline = sub.add_parser(
        "timeline", help="how long a first deploy takes: the critical path against the longest single resource"
    )
    stack_argument(timeline)
    add_report_options(timeline)
    timeline.add_argument(
        "--mermaid", action="store_true", help="print the chart as a Mermaid gantt block (for a PR or wiki)"
    )
    timeline.add_argument("--verbose", action="store_true", help="also list every create time and its source")
    timeline.add_argument(
        "--job",
        metavar="POOL",
        help="instead: a job's path from submitted to first step on POOL, cold and warm, each step cited",
    )
    timeline.add_argument(
        "--nodes", type=int, metavar="N", help="with --job: the gang's nodes (default: the pool's maxSize)"
    )
    timeline.add_argument(
        "--measured",
        metavar="FILE",
        help="with --job: timings `higgsfield verify STACK --allow-cost --save FILE` measured, before the estimates",
    )
    timeline.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.cli.views import timeline as view
    from infra.offline import timeline
    from infra.offline.evaluate import record

    plan = record(args.stack)
    if args.job is not None:  # a job's cold and warm start on a pool (infra/offline/cold_start.py)
        from infra.cli.views.cold_start import render
        from infra.offline import cold_start, measured

        try:
            timings = measured.for_stack(measured.load(Path(args.measured)), args.stack) if args.measured else None
        except measured.MeasuredError as exc:
            raise UsageError(str(exc)) from None
        start = cold_start.report(plan, args.job, args.nodes, timings)
        emit(args, lambda: cold_start.as_json(*start), lambda: render(*start))
        return 0
    if args.measured:
        raise UsageError("--measured goes with --job POOL (a job's start on a pool)")
    t = timeline.compute(plan)
    if args.mermaid:
        emit(args, lambda: timeline.as_json(plan, t), lambda: view.mermaid(plan, t))
        return 0
    emit(args, lambda: timeline.as_json(plan, t), lambda: view.render(plan, t, verbose=args.verbose))
    return 0

"""`higgsfield diff STACK --base REF`: the offline plan at a git ref against the working tree."""

from __future__ import annotations

import argparse

from infra.cli.arguments import stack_argument
from infra.cli.output import add_report_options, emit, error


def register(sub: argparse._SubParsersAction) -> None:
    diff = sub.add_parser(
        "diff", help="compare the offline plan at a git ref with the working tree; refuse destroying data"
    )
    stack_argument(diff)
    diff.add_argument("--base", required=True, metavar="REF", help="git ref to compare with, e.g. origin/main")
    diff.add_argument(
        "--allow", action="append", metavar="NAME", help="allow replacing/deleting this resource (repeatable)"
    )
    add_report_options(diff)
    diff.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.offline.diff import as_json, diff_stack, render_diff
    from infra.offline.evaluate import project_root

    diff = diff_stack(args.stack, args.base, project_root(), set(args.allow or []))
    emit(args, lambda: as_json(args.stack, args.base, diff), lambda: render_diff(args.stack, args.base, diff))
    for refusal in diff.refused:
        error(f"refused: {refusal}")
    return 1 if diff.refused else 0

"""`higgsfield plan STACK`: what the program would create, evaluated under mocks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra.cli.arguments import stack_argument
from infra.cli.output import add_report_options, emit, report_folder
from infra.core.stack_values import terminal_safe


def register(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser("plan", help="evaluate the program for a stack under mocks and print what it would create")
    stack_argument(plan)
    add_report_options(plan)
    plan.add_argument("--manifests", metavar="DIR", help="write each Kubernetes object the program builds as YAML")
    plan.add_argument(
        "--verbose", action="store_true", help="list every resource (repeated ones are collapsed by default)"
    )
    plan.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.cli.views.plan import render
    from infra.offline.evaluate import record

    folder = report_folder("--manifests", Path(args.manifests)) if args.manifests else None
    plan = record(args.stack)
    emit(args, plan.as_dict, lambda: render(plan, verbose=args.verbose))
    if folder is not None:
        from infra.offline.manifests import write_manifests

        written = write_manifests(plan, folder)
        print(f"wrote {len(written)} Kubernetes manifests to {terminal_safe(args.manifests)}", file=sys.stderr)
    return 0

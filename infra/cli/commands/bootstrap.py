"""`higgsfield bootstrap STACK`: the first-deploy steps of a stack, before CI can deploy it."""

from __future__ import annotations

import argparse

from infra.cli.arguments import stack_argument
from infra.cli.output import add_report_options, emit


def register(sub: argparse._SubParsersAction) -> None:
    boot = sub.add_parser("bootstrap", help="print the first-deploy steps of a stack (before CI can deploy it)")
    stack_argument(boot)
    add_report_options(boot)
    boot.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.cli import bootstrap
    from infra.offline.evaluate import load_stack

    config = load_stack(args.stack)
    emit(args, lambda: bootstrap.as_json(config), lambda: bootstrap.render(config))
    return 0

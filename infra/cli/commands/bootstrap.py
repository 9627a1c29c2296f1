"""`higgsfield bootstrap STACK`: the first-deploy steps of a stack, before CI can deploy it."""

from __future__ import annotations

import argparse

from infra.cli.arguments import stack_argument


def register(sub: argparse._SubParsersAction) -> None:
    boot = sub.add_parser("bootstrap", help="print the first-deploy steps of a stack (before CI can deploy it)")
    stack_argument(boot)
    boot.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.cli import bootstrap
    from infra.offline.evaluate import load_stack

    print(bootstrap.render(load_stack(args.stack)))
    return 0

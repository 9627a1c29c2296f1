"""`higgsfield check STACK`: the policy pack, the Kubernetes schema and the example jobs' fit over
the offline plan."""

from __future__ import annotations

import argparse
from pathlib import Path

from infra.cli.arguments import stack_argument
from infra.cli.output import add_report_options, emit, error


def register(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser(
        "check", help="run the policy pack, the Kubernetes schema and the example jobs' fit over the offline plan"
    )
    stack_argument(check)
    check.add_argument(
        "--policy-config", metavar="FILE", help="policy pack config JSON (default: policies/config/STACK.json)"
    )
    check.add_argument(
        "--verbose",
        action="store_true",
        help="also list the policies that cannot run offline (values known only at deploy)",
    )
    add_report_options(check)
    check.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.cli.views.check import render
    from infra.offline import check

    result = check.check_stack(args.stack, Path(args.policy_config) if args.policy_config else None)
    emit(args, lambda: check.as_json(result), lambda: render(result, verbose=args.verbose, colour=args.colour))
    if result.mandatory:
        error(f"check of {args.stack} failed: {len(result.mandatory)} mandatory violation(s) (listed above)")
        return 1
    return 0

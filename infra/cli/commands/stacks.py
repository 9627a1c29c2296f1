"""`higgsfield stacks`: the workflows' stack matrix (JSON), from stacks/Pulumi.STACK.yaml."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    stacks = sub.add_parser("stacks", help="the stack matrix of the workflows (JSON), from stacks/Pulumi.STACK.yaml")
    stacks.add_argument(
        "--delivered", action="store_true", help="only stacks with higgsfield:delivery (CI previews and deploys those)"
    )
    stacks.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.offline.evaluate import StackNotFound, not_a_project, project_root
    from infra.offline.stacks import stack_matrix

    root = project_root()
    outside = not_a_project(root)
    if outside:  # as every command that reads a stack says it
        raise StackNotFound(outside)
    broken: list[str] = []
    print(json.dumps(stack_matrix(root, args.delivered, broken), separators=(",", ":")))
    for message in broken:  # listed as broken (so only its own jobs fail), and said here
        print(f"error: {message} (only this stack's jobs fail on it)", file=sys.stderr)
    return 0

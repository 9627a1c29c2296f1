"""`higgsfield completion SHELL`: the shell completion script."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    completion = sub.add_parser(
        "completion", help='print the shell completion script: eval "$(higgsfield completion bash)"'
    )
    completion.add_argument("shell", choices=["bash", "zsh", "fish", "tcsh"], help="your shell")
    completion.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.cli import completion

    print(completion.script(args.shell), end="")
    return 0

"""What several commands' options share: the stack argument, the old `NAME --stack STACK` form and
the image option's help."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from infra.cli.completion import stacks_here
from infra.cli.output import UsageError

IMAGE_HELP = (
    "image to run (default: the stack's training image, built from images/training into the stack's ECR repository; "
    "on EFA pools only images of that repository or of higgsfield:trainingImage)"
)


def stack_argument(
    command: argparse.ArgumentParser, help: str = "the stack: stacks/Pulumi.STACK.yaml", optional: bool = False
) -> None:
    """The STACK positional; `optional` where an option of the command needs none (`verify --list`)."""
    command.add_argument("stack", metavar="STACK", help=help, nargs="?" if optional else None).completer = stacks_here  # type: ignore[attr-defined]


def stack_then(args: argparse.Namespace, name: str, known: Callable[[str], list[str]] | None = None) -> None:
    """Every command names the stack first (`higgsfield jobs render STACK EXAMPLE`). The old
    form of jobs/healthcheck render (`NAME --stack STACK`) still works, with a note. A missing
    NAME is refused naming what the stack offers (`known(stack)`), where it can be read."""
    if args.old_stack is None:
        if getattr(args, name) is None:
            offered = ""
            if known is not None:
                try:
                    offered = f" ({name}s of {args.stack}: {', '.join(known(args.stack)) or 'none'})"
                except Exception:  # a stack that does not load says so when named right
                    offered = ""
            raise UsageError(f"{args.usage}: name the {name} after the stack{offered}")
        return
    if getattr(args, name) is not None:
        raise UsageError(f"{args.usage}: the stack is named twice (first argument and --stack)")
    setattr(args, name, args.stack)
    args.stack = args.old_stack
    usage = args.usage.replace("STACK", args.stack).replace(name.upper(), getattr(args, name))
    print(f"note: --stack is deprecated: every command names the stack first: {usage}", file=sys.stderr)

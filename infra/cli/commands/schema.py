"""`higgsfield schema`: the stack-file JSON Schema and the settings reference, generated from infra/config/."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    schema = sub.add_parser(
        "schema", help="the stack-file JSON Schema and the settings reference, generated from infra/config/"
    )
    schema.add_argument(
        "--write", action="store_true", help="write schemas/stack.schema.json and the settings reference"
    )
    schema.add_argument("--check", action="store_true", help="exit 1 if either is stale")
    schema.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.cli import schema
    from infra.offline.evaluate import project_root

    root = project_root()
    if args.write:
        print("wrote " + ", ".join(schema.write(root, args.parser)))
        return 0
    if args.check:
        stale = schema.stale(root, args.parser)
        for path in stale:
            print(f"error: {path} is stale: run `{schema.REGENERATE}`", file=sys.stderr)
        return 1 if stale else 0
    print(schema.schema_text(), end="")
    return 0

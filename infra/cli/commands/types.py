"""`higgsfield types REGION`: the GPU instance types each AZ of a region offers."""

from __future__ import annotations

import argparse

from infra.cli.output import add_report_options, emit


def register(sub: argparse._SubParsersAction) -> None:
    types = sub.add_parser(
        "types", help="list the GPU instance types each AZ of a region offers (GPUs, memory, EFA, price)"
    )
    types.add_argument("region", metavar="REGION", help="AWS region, e.g. eu-north-1")
    add_report_options(types)
    types.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.cli.views.gpu_types import render
    from infra.core.bundled import source
    from infra.offline.gpu_types import as_json, gpu_types

    found = gpu_types(args.region)
    emit(args, lambda: as_json(args.region, found), lambda: render(args.region, found, source()))
    return 0

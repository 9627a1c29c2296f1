"""`higgsfield charts STACK --out DIR`: every Helm release of the plan, for `helm template`."""

from __future__ import annotations

import argparse
from pathlib import Path

from infra.cli.arguments import stack_argument
from infra.cli.output import add_json_option, emit, report_folder
from infra.core.stack_values import terminal_safe


def register(sub: argparse._SubParsersAction) -> None:
    charts = sub.add_parser(
        "charts", help="write every Helm release of the plan (chart, repo, version, values) for helm template"
    )
    stack_argument(charts)
    charts.add_argument("--out", required=True, metavar="DIR", help="folder to write into")
    add_json_option(charts, "the files written")
    charts.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.offline import charts
    from infra.offline.evaluate import record

    out = report_folder("--out", Path(args.out))
    written = charts.export(record(args.stack), out)
    where = terminal_safe(args.out)
    emit(
        args,
        lambda: {"stack": args.stack, "out": args.out, "written": [str(p) for p in written]},
        lambda: f"wrote {len(written) - 2} Helm releases' values, releases.tsv and kubernetes-version to {where}",
    )
    return 0

"""`higgsfield init STACK --region REGION`: a new stack (and its policy config) from an existing one."""

from __future__ import annotations

import argparse

from infra.cli.completion import stacks_here
from infra.cli.output import add_json_option, emit


def register(sub: argparse._SubParsersAction) -> None:
    init = sub.add_parser("init", help="write a new stack (and its policy config) for a region from an existing one")
    init.add_argument("stack", metavar="STACK", help="name of the new stack: stacks/Pulumi.STACK.yaml")
    init.add_argument("--region", required=True, metavar="REGION", help="AWS region of the new stack, e.g. eu-north-1")
    init.add_argument(
        "--from", dest="source", default="dev", metavar="EXISTING", help="stack to start from (default: dev)"
    ).completer = stacks_here
    init.add_argument(
        "--gpu-pool",
        action="append",
        metavar="NAME:TYPE[,TYPE][:MIN-MAX]",
        help="an on-demand GPU pool, e.g. h100:p5.48xlarge:0-4, its nodes from 0 to 2 if no MIN-MAX "
        "(repeatable; replaces the existing stack's pools)",
    )
    init.add_argument(
        "--cpu-type", action="append", metavar="TYPE", help="instance type of the system nodes (repeatable)"
    )
    init.add_argument(
        "--team",
        action="append",
        metavar="NAME[:GPUS]",
        help="a team on the first queue (repeatable; replaces the teams)",
    )
    init.add_argument("--environment", choices=["dev", "staging", "prod"], help="default: the existing stack's")
    init.add_argument(
        "--admin",
        action="append",
        metavar="ARN",
        help="IAM role/user ARN with cluster-admin (required, repeatable; the existing stack's are not copied: "
        "their account names the image registry)",
    )
    init.add_argument(
        "--public-access-cidr",
        action="append",
        metavar="CIDR",
        help="public egress range of your office or VPN that may reach the API endpoint "
        "(repeatable; default: the existing stack's, less example ranges)",
    )
    init.add_argument(
        "--ci",
        action="store_true",
        help="also write the GitHub workflows that preview and deploy the project's stacks (.github/workflows, "
        "requirements/); Pulumi.yaml then runs the program from .venv here, as they do",
    )
    add_json_option(init, "what was written (files, notes, next commands)")
    init.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from infra.cli import init
    from infra.core.project import find_project

    found = find_project()
    root = found or Path.cwd()  # no project here or above: this folder becomes one
    choices = init.Choices(
        pools=tuple(init.PoolSpec.parse(p) for p in args.gpu_pool or ()),
        cpu_types=tuple(args.cpu_type or ()),
        teams=tuple(init.TeamSpec.parse(t) for t in args.team or ()),
        environment=args.environment,
        admins=tuple(args.admin or ()),
        public_access_cidrs=tuple(args.public_access_cidr or ()),
    )
    stack = init.create(
        args.stack,
        args.region,
        args.source,
        root,
        choices,
        flags=tuple(args.gpu_pool or ()),
        new_project=found is None,
        ci=args.ci,
    )
    emit(args, lambda: init.as_json(stack, root), lambda: init.render(stack, root))
    return 0

"""`higgsfield jobs render STACK EXAMPLE`: an example training job filled in for a stack."""

from __future__ import annotations

import argparse

from infra.cli.arguments import IMAGE_HELP, stack_argument, stack_then
from infra.cli.output import add_report_options, emit
from infra.core.assets import shipped


def register(sub: argparse._SubParsersAction) -> None:
    jobs = sub.add_parser("jobs", help="example training jobs for a stack")
    actions = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    render = actions.add_parser("render", help="print an example job filled in for a stack, for kubectl apply -f -")
    stack_argument(render)
    examples = " | ".join(sorted(p.stem for p in shipped("examples").glob("*.yaml")))  # every shipped example
    render.add_argument("example", nargs="?", metavar="EXAMPLE", help=examples)
    render.add_argument("--stack", dest="old_stack", help=argparse.SUPPRESS)  # the old form: EXAMPLE --stack STACK
    render.add_argument(
        "--pool", metavar="POOL", help="GPU pool (default: the first on-demand pool; EFA pools first for NCCL tests)"
    )
    render.add_argument("--team", metavar="TEAM", help="team namespace (default: the first team)")
    render.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker replicas (elastic: the most it grows to); default: 2, or what fits "
        "the pool's maxSize, the team's gpuQuota and its queue's gpuCapability",
    )
    render.add_argument("--image", metavar="IMAGE", help=IMAGE_HELP)
    render.add_argument(
        "--checkpoints",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="PyTorch examples: checkpoint and resume (default: where they can resume; a multi-node job needs "
        "higgsfield:fsx)",
    )
    add_report_options(render)
    render.set_defaults(func=run, usage="higgsfield jobs render STACK EXAMPLE")


def run(args: argparse.Namespace) -> int:
    from infra.offline import jobs
    from infra.offline.evaluate import load_stack

    stack_then(args, "example")
    cfg = load_stack(args.stack)
    objects = jobs.render(
        args.example,
        cfg,
        pool=args.pool,
        team=args.team,
        workers=args.workers,
        image=args.image,
        checkpoints=args.checkpoints,
    )
    if args.output == "yaml":  # the text is YAML already, comments and all
        args.output = None
    # JSON as a List, which kubectl apply -f takes like the YAML documents
    emit(args, lambda: {"apiVersion": "v1", "kind": "List", "items": objects}, lambda: jobs.to_yaml(objects))
    return 0

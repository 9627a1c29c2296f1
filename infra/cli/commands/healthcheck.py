"""`higgsfield healthcheck render STACK POOL`: the post-deploy GPU node health check of a pool."""

from __future__ import annotations

import argparse

from infra.cli.arguments import IMAGE_HELP, stack_argument, stack_then


def register(sub: argparse._SubParsersAction) -> None:
    health = sub.add_parser("healthcheck", help="post-deploy GPU node health check")
    actions = health.add_subparsers(dest="health_command", required=True, metavar="ACTION")
    render = actions.add_parser(
        "render", help="print the health-check Job (and NCCL PyTorchJob) of a pool, for kubectl apply -f -"
    )
    stack_argument(render)
    render.add_argument("pool", nargs="?", metavar="POOL", help="GPU pool to check")
    render.add_argument("--stack", dest="old_stack", help=argparse.SUPPRESS)  # the old form: POOL --stack STACK
    render.add_argument("--team", metavar="TEAM", help="namespace to run in (default: the first team)")
    render.add_argument("--nodes", type=int, metavar="N", help="nodes to check (default: min(2, maxSize))")
    render.add_argument("--image", metavar="IMAGE", help=IMAGE_HELP)
    render.set_defaults(func=run, usage="higgsfield healthcheck render STACK POOL")


def run(args: argparse.Namespace) -> int:
    from infra.offline import healthcheck, jobs
    from infra.offline.evaluate import load_stack

    stack_then(args, "pool")
    cfg = load_stack(args.stack)
    objects = healthcheck.render(cfg, args.pool, team=args.team, nodes=args.nodes, image=args.image)
    print(jobs.to_yaml(objects), end="")
    return 0

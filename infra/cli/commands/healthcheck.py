"""`higgsfield healthcheck render STACK POOL`: the post-deploy GPU node health check of a pool;
`higgsfield healthcheck dcgm STACK POOL NODE`: DCGM's deeper diagnostics on one node, on demand."""

from __future__ import annotations

import argparse

from infra.cli.arguments import IMAGE_HELP, stack_argument, stack_then
from infra.cli.completion import pools_of_stack
from infra.cli.output import add_report_options, emit


def register(sub: argparse._SubParsersAction) -> None:
    health = sub.add_parser("healthcheck", help="post-deploy GPU node health check")
    actions = health.add_subparsers(dest="health_command", required=True, metavar="ACTION")
    render = actions.add_parser(
        "render",
        help="print the health-check Job (and NCCL PyTorchJob) of a pool, for kubectl apply -f -",
        usage="higgsfield healthcheck render [-h] STACK POOL [--team TEAM] [--nodes N] [--image IMAGE] [--json] "
        "[-o FORMAT|FILE]",
    )
    stack_argument(render)
    render.add_argument("pool", nargs="?", metavar="POOL", help="GPU pool to check").completer = pools_of_stack
    render.add_argument("--stack", dest="old_stack", help=argparse.SUPPRESS)  # the old form: POOL --stack STACK
    render.add_argument("--team", metavar="TEAM", help="namespace to run in (default: the first team)")
    render.add_argument("--nodes", type=int, metavar="N", help="nodes to check (default: min(2, maxSize))")
    render.add_argument("--image", metavar="IMAGE", help=IMAGE_HELP)
    add_report_options(render)
    render.set_defaults(func=run, usage="higgsfield healthcheck render STACK POOL")
    dcgm = actions.add_parser(
        "dcgm",
        help="print a one-off Job running DCGM's diagnostics (level 3: ~15 min) on one node, for kubectl apply -f -",
    )
    stack_argument(dcgm)
    dcgm.add_argument("pool", metavar="POOL", help="the node's GPU pool (its GPU count)")
    dcgm.add_argument("node", metavar="NODE", help="the node to check (kubectl get nodes)")
    dcgm.add_argument("--level", type=int, default=3, metavar="N", help="dcgmi diag -r N: 1, 2 or 3 (default 3)")
    dcgm.add_argument("--image", metavar="IMAGE", help=IMAGE_HELP)
    dcgm.set_defaults(func=run_dcgm, usage="higgsfield healthcheck dcgm STACK POOL NODE [--level 3]")


def run(args: argparse.Namespace) -> int:
    from infra.offline import healthcheck, jobs
    from infra.offline.evaluate import load_stack

    stack_then(args, "pool", lambda stack: [p.name for p in load_stack(stack).gpu_pools])
    cfg = load_stack(args.stack)
    objects = healthcheck.render(cfg, args.pool, team=args.team, nodes=args.nodes, image=args.image)
    if args.output == "yaml":  # the text is YAML already, comments and all
        args.output = None
    # JSON as a List, which kubectl apply -f takes like the YAML documents (as jobs render)
    emit(args, lambda: {"apiVersion": "v1", "kind": "List", "items": objects}, lambda: jobs.to_yaml(objects))
    return 0


def run_dcgm(args: argparse.Namespace) -> int:
    from infra.offline import healthcheck, jobs
    from infra.offline.evaluate import load_stack

    cfg = load_stack(args.stack)
    objects = healthcheck.render_dcgm(cfg, args.pool, args.node, level=args.level, image=args.image)
    print(jobs.to_yaml(objects), end="")
    return 0

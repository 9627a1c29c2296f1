"""`higgsfield jobs render STACK EXAMPLE | -f JOB.yaml`: an example, or a team's own job file, filled in for a
stack; `jobs submit/status/logs/cancel` (infra/cli/client.py) run a job file on the stack's cluster."""

from __future__ import annotations

import argparse

from infra.cli.arguments import IMAGE_HELP, stack_argument, stack_then
from infra.cli.completion import examples_shipped
from infra.cli.output import add_report_options, emit
from infra.core.assets import shipped


def register(sub: argparse._SubParsersAction) -> None:
    jobs = sub.add_parser(
        "jobs",
        help="a team's job file or an example, rendered for a stack; submit, status, logs, suspend, resume, cancel",
    )
    actions = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    render = actions.add_parser(
        "render",
        help="print a team's job file (-f) or an example filled in for a stack, for review or kubectl apply -f -",
    )
    stack_argument(render)
    # every shipped example (a team's own job file, *.job.yaml, goes with -f)
    examples = " | ".join(sorted(p.stem for p in shipped("examples").glob("*.yaml") if not p.stem.endswith(".job")))
    render.add_argument("example", nargs="?", metavar="EXAMPLE", help=examples).completer = examples_shipped
    render.add_argument(
        "-f",
        "--filename",
        metavar="JOB.yaml",
        help="a team's own job file (docs/reference/job-file.md; - reads standard input) instead of an example",
    )
    render.add_argument("--stack", dest="old_stack", help=argparse.SUPPRESS)  # the old form: EXAMPLE --stack STACK
    render.add_argument(
        "--pool",
        metavar="POOL",
        help="GPU pool (default: the first pool the example fits: on-demand first; for serving and evaluation the "
        "fewest GPUs a node; EFA pools for NCCL tests)",
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
    from infra.cli.commands import job_actions

    job_actions.register(actions)


def run(args: argparse.Namespace) -> int:
    from infra.offline import jobs
    from infra.offline.evaluate import load_stack

    if args.filename is not None:
        return _render_file(args)
    _no_job_file_without_f(args)
    stack_then(args, "example", lambda stack: jobs.examples_for(load_stack(stack)))
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
    placed = jobs.placement_comment(args.example, cfg, pool=args.pool, team=args.team)
    emit(args, lambda: {"apiVersion": "v1", "kind": "List", "items": objects}, lambda: placed + jobs.to_yaml(objects))
    return 0


def _as_path(word: str | None) -> str | None:
    """`file` or `path` where `word` is written as a path (stack and example names are DNS labels: no `/` nor `.`)."""
    import os

    if word is None or not (word.endswith((".yaml", ".yml")) or os.sep in word):
        return None
    return "file" if os.path.isfile(word) else "path"


def _no_job_file_without_f(args: argparse.Namespace) -> None:
    """A job file written where the stack or the example goes (-f left out) is refused saying where it goes."""
    from infra.cli.output import UsageError
    from infra.offline.evaluate import project_root, stack_names

    if args.old_stack is not None:
        return
    if args.example is not None and _as_path(args.example):
        raise UsageError(
            f"{args.example} is a {_as_path(args.example)}, not an example: a job file goes after -f: "
            f"higgsfield jobs render {args.stack} -f {args.example}"
        )
    if args.example is None and _as_path(args.stack):
        stacks = ", ".join(stack_names(project_root())) or "none"
        raise UsageError(
            f"{args.stack} is a {_as_path(args.stack)}, not a stack: higgsfield jobs render STACK -f {args.stack} "
            f"(stacks here: {stacks})"
        )


def _render_file(args: argparse.Namespace) -> int:
    from infra.cli.output import UsageError
    from infra.config.job import INSTEAD
    from infra.offline import team_job
    from infra.offline.evaluate import load_stack

    if args.example is not None or args.old_stack is not None:
        raise UsageError("higgsfield jobs render STACK -f JOB.yaml: a job file or an example, not both")
    instead = {  # what a job file says in place of each example flag (the keys' as a job file's own hints say it)
        "pool": INSTEAD["pool"],
        "team": "team:",
        "workers": INSTEAD["workers"],
        "image": "image:",
        "checkpoints": f"checkpoints: {'shared' if args.checkpoints else 'off'}",
    }
    for option, key in instead.items():
        if getattr(args, option) is not None:
            flag = "--no-checkpoints" if option == "checkpoints" and not args.checkpoints else f"--{option}"
            raise UsageError(f"{flag} is for examples; in a job file: {key} (docs/reference/job-file.md)")
    cfg = load_stack(args.stack)
    job, objects, placed = team_job.render_file(args.filename, cfg)
    if args.output == "yaml":
        args.output = None
    emit(
        args,
        lambda: {"apiVersion": "v1", "kind": "List", "items": objects},
        lambda: team_job.to_yaml(job, cfg, objects, placed),
    )
    return 0

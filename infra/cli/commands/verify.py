"""`higgsfield verify STACK`: check the live account and cluster of a stack (read-only unless --allow-cost)."""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from infra.cli.arguments import stack_argument
from infra.cli.output import (
    UsageError,
    add_report_options,
    check_report_options,
    emit,
    error,
    json_text,
    report_folder,
    write_report,
)

if TYPE_CHECKING:
    from infra.cli.verify import connect, trial


def register(sub: argparse._SubParsersAction) -> None:
    verify = sub.add_parser(
        "verify",
        help="check the live account and cluster of a stack: PASS/FAIL/SKIP per check, read-only by default",
        description="Ordered checks against the stack's AWS account (boto3, your AWS credentials) and cluster "
        "(your kubeconfig): each with a timeout, the evidence it saw and what to do on failure (docs/verify.md). "
        "Read-only unless --allow-cost; nothing it did not create is touched unless --disruptive too.",
    )
    stack_argument(verify, help="the stack: stacks/Pulumi.STACK.yaml (not needed with --list)", optional=True)
    add_report_options(verify)
    verify.add_argument(
        "--list", action="store_true", help="list the checks, what each proves and the rights it needs (offline)"
    )
    verify.add_argument(
        "--only", action="append", default=[], metavar="ID", help="run only these checks (ids or prefixes: kube.)"
    )
    verify.add_argument("--skip", action="append", default=[], metavar="ID", help="leave these checks out")
    verify.add_argument(
        "--allow-cost",
        action="store_true",
        help="also run the checks that create and cost (a trial gang on a pool at zero, estimated before it starts)",
    )
    verify.add_argument(
        "--disruptive",
        action="store_true",
        help="with --allow-cost: also trial.node-loss, which TERMINATES the EC2 instance under one node of its own "
        "checkpointing job and times the resume",
    )
    verify.add_argument("--pool", help="with --allow-cost: the trial's pool (default: the first that scales from zero)")
    verify.add_argument("--nodes", type=int, metavar="N", help="with --allow-cost: the trial's nodes (1)")
    verify.add_argument(
        "--save",
        metavar="FILE",
        help="write the trial's measured timings (JSON) for timeline --job and cost --measured",
    )
    verify.add_argument("--context", help="the kubeconfig context (default: the current one)")
    verify.add_argument("--keep", action="store_true", help="keep the trial's namespace for a look (delete it after)")
    verify.set_defaults(func=run)


def _split(values: list[str], option: str = "--only") -> list[str]:
    """The ids of every --only (or --skip) value; one that names none (`--only "$UNSET"`) is refused,
    never read as no filter: it would run every check, with --allow-cost a trial too."""
    names = []
    for value in values:
        ids = [v.strip() for v in value.split(",") if v.strip()]
        if not ids:
            raise UsageError(f"{option} {value!r}: names no check (`higgsfield verify --list` lists them)")
        names += ids
    return names


def run(args: argparse.Namespace) -> int:
    from infra.cli import verify
    from infra.cli.verify import checks, connect
    from infra.core.project import project_root
    from infra.offline.evaluate import stack_file

    if args.stack is None and not args.list:
        raise UsageError("higgsfield verify STACK: name the stack to check (only --list needs none)")
    if args.stack is not None:
        stack_file(project_root(), args.stack)  # StackNotFound before anything else
    try:
        specs = verify.select(checks.specs(), _split(args.only), _split(args.skip, "--skip"))
    except verify.Selection as exc:
        raise UsageError(f"--only/--skip: {exc}") from None
    if not specs:
        raise UsageError("--only/--skip: leave no check to run (`higgsfield verify --list` lists them)")
    # a report that could not be written is refused now, not once the checks (and a trial) have run
    check_report_options(args, ("--save", args.save))
    if args.list:
        emit(args, lambda: verify.listing_json(specs), lambda: verify.listing(specs))
        return 0
    _refuse_disruption(args, specs)
    _refuse_trial_options(args, specs)
    ctx = _context(args, specs)
    if ctx is None:
        return 2
    # the text report is what stdout shows, line by line as each check ends; where stdout takes JSON or
    # YAML, or the report goes to a file, the same lines go to stderr (a trial runs for minutes)
    text_out = args.output in (None, "text") and args.json != "-"
    progress = sys.stdout if text_out else sys.stderr
    who = ctx.found.get("identity")
    print(
        f"verify {args.stack}: {len(specs)} check(s)"
        + ("" if args.allow_cost else " (read-only)")
        + (" (DISRUPTIVE: terminates an instance under its own job)" if args.disruptive else "")
        + (f" as {who} in {ctx.config.region}" if who else "")
        + (f", cluster {ctx.kube.host}" if ctx.kube else ""),
        file=progress,
    )
    results = verify.run(
        specs,
        ctx,
        allow_cost=args.allow_cost,
        disruptive=args.disruptive,
        on_result=lambda r: print(verify.line(r), file=progress, flush=True),
        describe_error=lambda spec, exc: connect.describe_error(spec, exc, ctx.config.region),
    )
    counts = verify.as_json(args.stack, results)["counts"]
    summary = f"verify {args.stack}: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped"
    print(summary, file=progress)

    def report() -> dict:
        return {
            **verify.as_json(args.stack, results),
            "identity": ctx.found.get("identity"),
            "cluster": ctx.kube.host if ctx.kube else None,
        }

    if text_out:
        if args.json is not None:  # --json PATH: the JSON to that file, the text already shown
            write_report("--json", Path(args.json), json_text(report()))
    else:
        emit(args, report, lambda: "\n".join(map(verify.line, results)) + "\n" + summary)
    if args.save:
        _save(args, ctx)
    return 1 if counts["FAIL"] else 0


def _refuse_disruption(args: argparse.Namespace, specs: list) -> None:
    """--disruptive only beside --allow-cost; a disruptive check named in --only only with --disruptive."""
    if args.disruptive and not args.allow_cost:
        raise UsageError("--disruptive: needs --allow-cost too (the node-loss trial runs a job and replaces a node)")
    named = [s.id for s in specs if s.disrupts and s.id in _split(args.only)]
    if named and not args.disruptive:
        raise UsageError(
            f"{named[0]} terminates an EC2 instance under its own job: rerun with --allow-cost --disruptive"
        )


TRIAL_OPTIONS = ("--pool", "--nodes", "--keep", "--save")


def _refuse_trial_options(args: argparse.Namespace, specs: list) -> None:
    """The trial's options only where a trial runs (--allow-cost, a trial among the checks): never silently ignored."""
    if args.allow_cost and any(s.costs for s in specs):
        return
    given = [o for o in TRIAL_OPTIONS if getattr(args, o[2:]) not in (None, False)]
    if given:
        which = "--only/--skip leave out" if args.allow_cost else "run only with --allow-cost"
        raise UsageError(f"{given[0]}: is for the trials (trial.*), which {which}")


def _context(args: argparse.Namespace, specs: list) -> connect.Context | None:
    """The checks' context, or None after one line saying why nothing can be checked."""
    from infra.cli.verify import connect, trial
    from infra.core import names
    from infra.offline.evaluate import record

    runs = [
        s for s in specs if not s.manual and (args.allow_cost or not s.costs) and (args.disruptive or not s.disrupts)
    ]
    needs = {part for s in runs for part in s.needs.split("+")}
    plan = record(args.stack)
    trials = args.allow_cost and any(s.costs for s in runs)
    # the trial's --pool and --nodes are checked before any credential is looked up
    chosen = trial.choose(plan.config, args.pool, 1 if args.nodes is None else args.nodes) if trials else None
    update = f"aws eks update-kubeconfig --name {names.cluster_name(args.stack)} --region {plan.config.region}"
    try:
        session = connect.aws_session(plan.config.region) if "aws" in needs else None
        kube = connect.kube_client(args.context, update) if "kube" in needs else None
        identity = connect.caller(session) if session else None
    except connect.Refused as exc:
        error(f"verify {args.stack}: {exc}")
        return None
    ctx = connect.Context(args.stack, plan, session, kube)
    ctx.found["keep"] = args.keep
    ctx.found["identity"] = identity
    if chosen is not None:
        ctx.found["trial"] = chosen
        print(f"verify {args.stack}: {chosen.describe()}", file=sys.stderr)
        if any(s.disrupts for s in runs):
            _plan_node_loss(args, ctx, chosen)
    return ctx


def _plan_node_loss(args: argparse.Namespace, ctx: connect.Context, chosen: trial.Plan) -> None:
    """The node-loss trial's estimate, printed before anything runs, or why it cannot run (its SKIP line)."""
    from infra.cli.verify import node_loss
    from infra.config import ConfigError

    try:
        loss = node_loss.choose(ctx.config, chosen)
    except ConfigError as exc:
        ctx.found["node_loss"] = f"cannot run here: {' '.join(str(exc).split())}"
        return
    ctx.found["node_loss"] = loss
    print(f"verify {args.stack}: {loss.describe()}", file=sys.stderr)


def _save(args: argparse.Namespace, ctx: connect.Context) -> None:
    from infra.offline import measured

    found = ctx.found.get("timings")
    if not found:
        error(f"--save {args.save}: nothing was measured (the trial runs only with --allow-cost, and it must pass)")
        return
    pools = {
        name: measured.PoolTimings(t["instance_type"], t["nodes"], *(t[f] for f in measured.FIELDS))
        for name, t in found.items()
    }
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    report_folder("--save", Path(args.save).parent)
    measured.save(Path(args.save), measured.Measured(args.stack, now, pools))
    print(f"wrote {args.save}", file=sys.stderr)

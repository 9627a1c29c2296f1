"""`higgsfield jobs submit|status|logs|suspend|resume|cancel STACK ...`: a team's job file run on the stack's
cluster with the user's kubeconfig (infra/cli/client.py), kubectl's way: server-side apply, `--dry-run`,
`-f JOB.yaml` or the job's NAME with `-n TEAM`, `logs -f` to follow."""

from __future__ import annotations

import argparse
import json
import sys

from infra.cli.arguments import stack_argument


def _cluster(command: argparse.ArgumentParser) -> None:
    command.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    command.add_argument("--context", metavar="NAME", help="kubeconfig context (default: its current context)")


def _job(command: argparse.ArgumentParser) -> None:
    """The job by its file (`-f JOB.yaml`) or by NAME and namespace (`-n TEAM`) and its kind (`--kind`)."""
    from infra.cli.client import BATCH_KIND, JOB_KINDS, SERVING_KIND, TRAINING_KINDS

    stack_argument(command)
    command.add_argument("name", nargs="?", metavar="NAME", help="the job's name (or -f JOB.yaml)")
    command.add_argument("-f", "--filename", metavar="JOB.yaml", help="the job file (its name, team and framework)")
    command.add_argument("-n", "--namespace", "--team", dest="team", metavar="TEAM", help="the job's team namespace")
    command.add_argument(
        "--kind",
        default="PyTorchJob",
        choices=JOB_KINDS,
        metavar="KIND",
        help=f"the job's kind with NAME: {', '.join(TRAINING_KINDS)} (default: PyTorchJob); "
        f"{SERVING_KIND}: a serving job; {BATCH_KIND}: a batch Job (-f knows the kind)",
    )
    _cluster(command)


def register(actions: argparse._SubParsersAction) -> None:
    submit = actions.add_parser("submit", help="apply a job file to the stack's cluster (server-side apply)")
    stack_argument(submit)
    submit.add_argument("-f", "--filename", metavar="JOB.yaml", required=True, help="the team's job file")
    submit.add_argument(
        "--dry-run", action="store_true", help="the API server admits and validates everything, stores nothing"
    )
    _cluster(submit)
    submit.set_defaults(func=run_submit)
    status = actions.add_parser(
        "status",
        help="the job's gang: state, queue position, why it waits, its nodes, its goodput; "
        "with only -n TEAM: the team's goodput, every job's and their sum by phase",
    )
    _job(status)
    status.add_argument("--json", action="store_true", help="the status as JSON on stdout")
    status.set_defaults(func=run_status)
    logs = actions.add_parser("logs", help="every rank's log merged by time, each line prefixed with node and rank")
    _job(logs)
    logs.add_argument(
        "--follow",
        action="store_true",
        help="stream the lines as they are written, from every pod that starts (restarts too), until all have ended",
    )
    logs.add_argument("--timestamps", action="store_true", help="each line's time first")
    logs.set_defaults(func=run_logs)
    suspend = actions.add_parser(
        "suspend", help="pause the job: its pods and PodGroup go, its nodes are given back (resume queues it again)"
    )
    _job(suspend)
    suspend.set_defaults(func=run_suspend)
    resume = actions.add_parser(
        "resume",
        help="queue a paused job again (not one the gang deadline suspended: it resumes that one itself)",
    )
    _job(resume)
    resume.set_defaults(func=run_resume)
    cancel = actions.add_parser("cancel", help="delete the job (its pods, Service and PodGroup go with it)")
    _job(cancel)
    cancel.add_argument("--dry-run", action="store_true", help="ask the API server, delete nothing")
    cancel.set_defaults(func=run_cancel)


def _which(args: argparse.Namespace) -> tuple[str, str, str]:
    """(name, namespace, kind) from -f or NAME -n TEAM."""
    from infra.cli.output import UsageError

    if args.filename is not None:
        if args.name is not None:
            raise UsageError("name the job by -f JOB.yaml or by NAME, not both")
        from infra.offline.evaluate import load_stack
        from infra.offline.team_job import read_job_file_of

        # the file's team checked against the stack before the cluster is asked (as submit renders it first)
        job = read_job_file_of(args.filename, load_stack(args.stack))
        return job.name, job.team, job.kind
    if args.name is None or args.team is None:
        extra = " (or -n TEAM alone: the team's goodput)" if args.jobs_command == "status" else ""
        raise UsageError(f"higgsfield jobs {args.jobs_command} STACK NAME -n TEAM (or -f JOB.yaml){extra}")
    return args.name, args.team, args.kind


def _api(args: argparse.Namespace):  # noqa: ANN202 - the kubernetes client's ApiClient
    from infra.cli import client

    return client.connect(args.kubeconfig, args.context, getattr(args, "stack", None))


def _refused(exc: Exception, args: argparse.Namespace | None = None) -> int:
    print(f"error: {exc}{_unknown_team(args) if getattr(exc, 'code', 0) == 404 else ''}", file=sys.stderr)
    return 2 if getattr(exc, "code", 0) in (0, 400, 403, 404, 409, 422) else 1


def _no_such_team(args: argparse.Namespace) -> str | None:
    """`-n TEAM: stack S has no team TEAM (...)` where TEAM is no team of the stack; else None."""
    from infra.offline.evaluate import load_stack

    teams = [t.name for t in load_stack(args.stack).scheduler.teams]
    if args.team in teams:
        return None
    return (
        f"-n {args.team}: stack {args.stack} has no team {args.team} "
        f"(higgsfield:scheduler.teams: {', '.join(teams) or 'none'})"
    )


def _unknown_team(args: argparse.Namespace | None) -> str:
    """Why a job named by NAME -n TEAM was not found, where TEAM is no team of the stack (a job file's team is
    checked before the cluster is asked); empty otherwise."""
    if args is None or args.filename is not None or not args.team:
        return ""
    unknown = _no_such_team(args)
    return f"; {unknown}" if unknown else ""


def run_submit(args: argparse.Namespace) -> int:
    from infra.cli import client
    from infra.offline import team_job
    from infra.offline.evaluate import load_stack

    cfg = load_stack(args.stack)
    job, objects, placed = team_job.render_file(args.filename, cfg)
    try:
        applied = client.apply(_api(args), objects, dry_run=args.dry_run)
    except client.ApiError as exc:
        return _refused(exc, args)
    suffix = " (server dry run)" if args.dry_run else ""
    for obj in applied:
        print(f"{obj['kind'].lower()}/{obj['metadata']['name']} serverside-applied{suffix}")
    print(
        f"{job.name}: {placed.pods} pod(s) on pool {placed.pool.name}, team {job.team}; "
        f"higgsfield jobs status {args.stack} -f {args.filename}",
        file=sys.stderr,
    )
    return 0


def run_status(args: argparse.Namespace) -> int:
    from infra.cli import client
    from infra.cli.output import UsageError

    try:
        if args.filename is None and args.name is None and args.team is not None:
            # a team's goodput reads whatever namespace it is given: a team the stack lacks would be "0 job(s)"
            unknown = _no_such_team(args)
            if unknown:
                raise UsageError(unknown)
            found: client.Status | client.TeamGoodput = client.read_team_goodput(_api(args), args.team)
        else:
            name, team, kind = _which(args)
            found = client.read_status(_api(args), name, team, kind)
    except client.ApiError as exc:
        return _refused(exc, args)
    print(json.dumps(found.as_dict(), indent=2) if args.json else "\n".join(found.lines()))
    return 0


def run_logs(args: argparse.Namespace) -> int:
    from infra.cli import client

    name, team, kind = _which(args)
    try:
        api = _api(args)
        lines = (
            client.follow_logs(api, name, team, kind)
            if args.follow
            else iter(client.read_logs(api, name, team, kind=kind))
        )
        for line in lines:
            print(f"{line.stamp} {line}" if args.timestamps else str(line), flush=args.follow)
    except client.ApiError as exc:
        return _refused(exc, args)
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    from infra.cli import client

    name, team, kind = _which(args)
    try:
        deleted = client.delete(_api(args), name, team, kind, dry_run=args.dry_run)
    except client.ApiError as exc:
        return _refused(exc, args)
    for what in deleted:
        print(f"{what} deleted" + (" (server dry run)" if args.dry_run else ""))
    return 0


def run_suspend(args: argparse.Namespace) -> int:
    return _set_suspended(args, suspend=True)


def run_resume(args: argparse.Namespace) -> int:
    return _set_suspended(args, suspend=False)


def _set_suspended(args: argparse.Namespace, suspend: bool) -> int:
    from infra.cli import client

    name, team, kind = _which(args)
    try:
        changed = client.set_suspended(_api(args), name, team, kind, suspend=suspend)
    except (client.StaysSuspended, client.ApiError) as exc:  # the gang deadline's to resume, or the API's refusal
        return _refused(exc, args)
    what = f"{kind.lower()}/{name}"
    if not changed:
        print(f"{what} is already suspended" if suspend else f"{what} is not suspended: nothing to resume")
    elif suspend:
        again = f"higgsfield jobs resume {args.stack} {name} -n {team}" + (f" --kind {kind}" if args.name else "")
        print(f"{what} suspended: its pods go and its nodes are given back ({again} queues it again)")
    else:
        print(f"{what} resumed: its gang queues again")
    return 0

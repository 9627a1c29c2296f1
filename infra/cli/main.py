"""`higgsfield`: offline tools around the Pulumi program (no CLI, no credentials needed).

    higgsfield plan STACK [--json PATH] [--manifests DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from infra.cli.offline import StackNotFound, record
from infra.cli.option_files import OptionFileError
from infra.cli.stack_file import StackFileError, shown as _shown

# --- commands ---------------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> int:
    from infra.cli.views.plan import render

    plan = record(args.stack)
    print(render(plan, verbose=args.verbose))
    if args.json:
        Path(args.json).write_text(json.dumps(plan.as_dict(), indent=2, sort_keys=True))
        print(f"wrote {args.json}")
    if args.manifests:
        from infra.cli.manifests import write_manifests

        written = write_manifests(plan, Path(args.manifests))
        print(f"wrote {len(written)} Kubernetes manifests to {args.manifests}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from infra.cli import check

    result = check.check_stack(args.stack, Path(args.policy_config) if args.policy_config else None)
    print(check.render(result))
    return 1 if result.mandatory else 0


def _diff(args: argparse.Namespace) -> int:
    from infra.cli.diff import diff_stack, render_diff
    from infra.cli.offline import project_root

    diff = diff_stack(args.stack, args.base, project_root(), set(args.allow or []))
    print(render_diff(args.stack, args.base, diff))
    return 1 if diff.refused else 0


def _report(json_target: str | None, data: Any, text: Callable[[], str]) -> int:
    """Print a report: its text, or with `--json` its JSON on stdout; `--json PATH` writes the JSON
    to PATH and prints the text."""
    if json_target == "-":
        print(json.dumps(data, indent=2))
        return 0
    if json_target:
        Path(json_target).write_text(json.dumps(data, indent=2) + "\n")
    print(text())
    return 0


JSON_HELP = "print the report as JSON instead of text; --json PATH writes it to PATH and prints the text"


def _cost(args: argparse.Namespace) -> int:
    from infra.cli import cost

    plan = record(args.stack)
    price_file = Path(args.prices) if args.prices else cost.PRICE_FILE
    prices = cost.load_prices(price_file)
    if args.refresh:
        import datetime

        import boto3

        types = [t for g in plan.of_type("aws:eks/nodeGroup:NodeGroup") for t in g.inputs["instanceTypes"]]
        try:
            client = boto3.client("pricing", region_name="us-east-1")
            prices = cost.refresh(prices, types, plan.config.region, client, datetime.date.today().isoformat())
        except cost.PriceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:  # noqa: BLE001 - credentials or API errors, said in one line
            print(f"error: --refresh needs AWS credentials allowed pricing:GetProducts ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
        price_file.write_text(json.dumps(prices, indent=2) + "\n")
        print(f"refreshed {len(set(types))} instance prices into {price_file}")
    from infra.cli.views.cost import render

    est = cost.estimate(plan, prices)
    return _report(args.json, cost.as_json(est), lambda: render(est))


def _timeline(args: argparse.Namespace) -> int:
    from infra.cli import timeline

    from infra.cli.views import timeline as view

    plan = record(args.stack)
    if args.job is not None:  # a job's cold and warm start on a pool (infra/cli/cold_start.py)
        from infra.cli import cold_start

        data, text = cold_start.report(plan, args.job, args.nodes)
        return _report(args.json, data, lambda: text)
    t = timeline.compute(plan)
    if args.mermaid:
        print(view.mermaid(plan, t), end="")
        return 0
    return _report(args.json, timeline.as_json(plan, t), lambda: view.render(plan, t, verbose=args.verbose))


def _preflight(args: argparse.Namespace) -> int:
    from botocore.exceptions import NoRegionError

    from infra.cli import preflight

    plan = record(args.stack)  # the add-ons the program installs, and their pins
    cfg = plan.config
    try:
        checks = preflight.run(cfg, preflight.Clients.for_region(cfg.region), preflight.addon_pins(plan))
    except (*preflight.NO_CREDENTIALS, NoRegionError) as exc:
        print(f"error: no AWS credentials ({type(exc).__name__}): set AWS_PROFILE (or run `aws configure` / `aws sso login`) for the stack's account, then rerun", file=sys.stderr)
        return 2
    except preflight.CredentialsRejected as exc:
        print(f"error: {exc}: refresh them (`aws sso login`, or new keys) and rerun", file=sys.stderr)
        return 2
    print(preflight.render(args.stack, checks))
    return 0 if all(c.ok for c in checks) else 1


def _charts(args: argparse.Namespace) -> int:
    from infra.cli import charts

    written = charts.export(record(args.stack), Path(args.out))
    print(f"wrote {len(written) - 2} Helm releases' values, releases.tsv and kubernetes-version to {args.out}")
    return 0


def _healthcheck_render(args: argparse.Namespace) -> int:
    from infra.cli import healthcheck, jobs
    from infra.cli.offline import load_stack

    _stack_then(args, "pool")
    cfg = load_stack(args.stack)
    print(jobs.to_yaml(healthcheck.render(cfg, args.pool, team=args.team, nodes=args.nodes, image=args.image)), end="")
    return 0


def _jobs_render(args: argparse.Namespace) -> int:
    from infra.cli import jobs
    from infra.cli.offline import load_stack

    _stack_then(args, "example")
    cfg = load_stack(args.stack)
    print(jobs.to_yaml(jobs.render(args.example, cfg, pool=args.pool, team=args.team, workers=args.workers, image=args.image,
                                      checkpoints=args.checkpoints)), end="")
    return 0


def _init(args: argparse.Namespace) -> int:
    from infra.cli import init
    from infra.cli.offline import project_root

    root = project_root()
    stack = init.new_stack(args.stack, args.region, args.source, root)
    init.write(stack, root)
    print(init.render(stack, root))
    return 0


IMAGE_HELP = ("image to run (default: the stack's training image, built from images/training into the stack's ECR repository; "
              "on EFA pools only images of that repository or of higgsfield:trainingImage)")


def _stacks(args: argparse.Namespace) -> int:
    from infra.cli.offline import project_root
    from infra.cli.stacks import stack_matrix

    print(json.dumps(stack_matrix(project_root(), args.delivered), separators=(",", ":")))
    return 0


def _bootstrap(args: argparse.Namespace) -> int:
    from infra.cli import bootstrap
    from infra.cli.offline import load_stack

    print(bootstrap.render(load_stack(args.stack)))
    return 0


def _image(args: argparse.Namespace) -> int:
    from infra.cli import image
    from infra.cli.offline import load_stack

    cfg = load_stack(args.stack)
    if args.print:
        print(image.script(cfg, args.image_command))
        return 0
    return image.run(cfg, args.image_command)


def _schema(args: argparse.Namespace) -> int:
    from infra.cli import schema
    from infra.cli.offline import project_root

    root = project_root()
    if args.write:
        print("wrote " + ", ".join(schema.write(root)))
        return 0
    if args.check:
        stale = schema.stale(root)
        for path in stale:
            print(f"error: {path} is stale: run `{schema.REGENERATE}`", file=sys.stderr)
        return 1 if stale else 0
    print(schema.schema_text(), end="")
    return 0


class UsageError(Exception):
    """The command line itself is wrong (exit 2, like argparse's own errors)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """argparse's usage errors in one line, like every other failure."""
        print(f"error: {self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def _stack_then(args: argparse.Namespace, name: str) -> None:
    """Every command names the stack first (`higgsfield jobs render STACK EXAMPLE`). The old
    form of jobs/healthcheck render (`NAME --stack STACK`) still works, with a note."""
    if args.old_stack is None:
        if getattr(args, name) is None:
            raise UsageError(f"{args.usage}: name the {name} after the stack")
        return
    if getattr(args, name) is not None:
        raise UsageError(f"{args.usage}: the stack is named twice (first argument and --stack)")
    setattr(args, name, args.stack)
    args.stack = args.old_stack
    print(f"note: --stack is deprecated: every command names the stack first: {args.usage.replace('STACK', args.stack)}"
          .replace(name.upper(), getattr(args, name)), file=sys.stderr)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"higgsfield {version('higgsfield')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "higgsfield (not installed: pip install -e .)"


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="higgsfield", description="Offline tools for the Higgsfield Pulumi program. Every command names the stack first.")
    p.add_argument("--version", action="version", version=_version())
    p.add_argument("--debug", action="store_true", help="print the traceback of a failure (anywhere on the command line)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("plan", help="evaluate the program for a stack under mocks and print what it would create")
    plan.add_argument("stack", help="stack name: stacks/Pulumi.<stack>.yaml")
    plan.add_argument("--json", metavar="PATH", help="write the recorded plan as JSON")
    plan.add_argument("--manifests", metavar="DIR", help="write each Kubernetes object the program builds as YAML")
    plan.add_argument("--verbose", action="store_true", help="list every resource (repeated ones are collapsed by default)")
    plan.set_defaults(func=_plan)

    check = sub.add_parser("check", help="run the policy pack, the Kubernetes schema and the example jobs' fit over the offline plan")
    check.add_argument("stack")
    check.add_argument("--policy-config", help="policy pack config JSON (default: policies/config/STACK.json)")
    check.set_defaults(func=_check)

    diff = sub.add_parser("diff", help="compare the offline plan at a git ref with the working tree; refuse destroying data")
    diff.add_argument("stack")
    diff.add_argument("--base", required=True, help="git ref to compare with, e.g. origin/main")
    diff.add_argument("--allow", action="append", metavar="NAME", help="allow replacing/deleting this resource (repeatable)")
    diff.set_defaults(func=_diff)

    cost_cmd = sub.add_parser("cost", help="hourly and monthly cost, idle and at full scale, per resource")
    cost_cmd.add_argument("stack")
    cost_cmd.add_argument("--json", metavar="PATH", nargs="?", const="-", help=JSON_HELP)
    cost_cmd.add_argument("--prices", metavar="FILE", help="price file (default: the one shipped in infra/cli/data)")
    cost_cmd.add_argument("--refresh", action="store_true", help="update EC2 prices from the AWS Pricing API (needs credentials)")
    cost_cmd.set_defaults(func=_cost)

    timeline_cmd = sub.add_parser("timeline", help="the deployment's critical path and its ratio to the unavoidable chain")
    timeline_cmd.add_argument("stack")
    timeline_cmd.add_argument("--json", metavar="PATH", nargs="?", const="-", help=JSON_HELP)
    timeline_cmd.add_argument("--mermaid", action="store_true", help="print the chart as a Mermaid gantt block (for a PR or wiki)")
    timeline_cmd.add_argument("--verbose", action="store_true", help="also list every create time and its source")
    timeline_cmd.add_argument("--job", metavar="POOL", help="instead: a job's path from submitted to first step on POOL, cold and warm, each step cited")
    timeline_cmd.add_argument("--nodes", type=int, metavar="N", help="with --job: the gang's nodes (default: the pool's maxSize)")
    timeline_cmd.set_defaults(func=_timeline)

    pre = sub.add_parser("preflight", help="check the AWS account can run the stack (quotas, offerings, reservations, AMI, FSx, add-on versions)")
    pre.add_argument("stack")
    pre.set_defaults(func=_preflight)

    charts_cmd = sub.add_parser("charts", help="write every Helm release of the plan (chart, repo, version, values) for helm template")
    charts_cmd.add_argument("stack")
    charts_cmd.add_argument("--out", required=True, metavar="DIR")
    charts_cmd.set_defaults(func=_charts)

    init = sub.add_parser("init", help="write a new stack (and its policy config) for a region from an existing one")
    init.add_argument("stack", help="name of the new stack: stacks/Pulumi.<stack>.yaml")
    init.add_argument("--region", required=True, help="AWS region of the new stack, e.g. eu-north-1")
    init.add_argument("--from", dest="source", default="dev", metavar="EXISTING", help="stack to start from (default: dev)")
    init.set_defaults(func=_init)

    health = sub.add_parser("healthcheck", help="post-deploy GPU node health check").add_subparsers(dest="health_command", required=True)
    health_render = health.add_parser("render", help="print the health-check Job (and NCCL PyTorchJob) of a pool, for kubectl apply -f -")
    health_render.add_argument("stack")
    health_render.add_argument("pool", nargs="?", metavar="POOL", help="GPU pool to check")
    health_render.add_argument("--stack", dest="old_stack", help=argparse.SUPPRESS)  # the old form: POOL --stack STACK
    health_render.add_argument("--team", help="namespace to run in (default: the first team)")
    health_render.add_argument("--nodes", type=int, help="nodes to check (default: min(2, maxSize))")
    health_render.add_argument("--image", help=IMAGE_HELP)
    health_render.set_defaults(func=_healthcheck_render, usage="higgsfield healthcheck render STACK POOL")

    jobs = sub.add_parser("jobs", help="example training jobs for a stack").add_subparsers(dest="jobs_command", required=True)
    render = jobs.add_parser("render", help="print an example job filled in for a stack, for kubectl apply -f -")
    render.add_argument("stack")
    render.add_argument("example", nargs="?", metavar="EXAMPLE", help="pytorch-ddp | pytorch-elastic | mpi-nccl-tests")
    render.add_argument("--stack", dest="old_stack", help=argparse.SUPPRESS)  # the old form: EXAMPLE --stack STACK
    render.add_argument("--pool", help="GPU pool (default: the first on-demand pool; EFA pools first for NCCL tests)")
    render.add_argument("--team", help="team namespace (default: the first team)")
    render.add_argument("--workers", type=int, help="worker replicas (elastic: the most it grows to); default: 2, or what fits "
                        "the pool's maxSize, the team's gpuQuota and its queue's gpuCapability")
    render.add_argument("--image", help=IMAGE_HELP)
    render.add_argument("--checkpoints", action=argparse.BooleanOptionalAction, default=None,
                        help="PyTorch examples: checkpoint and resume (default: where they can resume; a multi-node job needs higgsfield:fsx)")
    render.set_defaults(func=_jobs_render, usage="higgsfield jobs render STACK EXAMPLE")
    stacks_cmd = sub.add_parser("stacks", help="the stack matrix of the workflows (JSON), from stacks/Pulumi.<stack>.yaml")
    stacks_cmd.add_argument("--delivered", action="store_true", help="only stacks with higgsfield:delivery (CI previews and deploys those)")
    stacks_cmd.set_defaults(func=_stacks)
    boot = sub.add_parser("bootstrap", help="print the first-deploy steps of a stack (before CI can deploy it)")
    boot.add_argument("stack")
    boot.set_defaults(func=_bootstrap)
    image_cmd = sub.add_parser("image", help="build or push the training image (images/training) into the stack's ECR repository, with docker")
    image_actions = image_cmd.add_subparsers(dest="image_command", required=True)
    for action, what in (("build", "docker build the image, tagged as the stack's jobs and health gate name it"),
                         ("push", "build it, log in to the stack's ECR repository and push it (unless the tag is there); print its digest")):
        step = image_actions.add_parser(action, help=what)
        step.add_argument("stack")
        step.add_argument("--print", action="store_true", help="print the commands instead of running them")
        step.set_defaults(func=_image)
    schema_cmd = sub.add_parser("schema", help="the stack-file JSON Schema and README config table, generated from infra/config/")
    schema_cmd.add_argument("--write", action="store_true", help="write schemas/stack.schema.json and the README table")
    schema_cmd.add_argument("--check", action="store_true", help="exit 1 if either is stale")
    schema_cmd.set_defaults(func=_schema)
    return p


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Every failure is one line on stderr (exit 2: the stack or the command
    line is wrong; 1: anything else), with its traceback only under --debug."""
    from infra.config import ConfigError

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # wherever it stands: `higgsfield plan dev --debug` too
    args = parser().parse_args([a for a in argv if a != "--debug"])
    args.debug = debug
    try:
        return args.func(args)
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except ConfigError as exc:
        if args.debug:
            raise
        source = getattr(exc, "source", None)
        lines = source.report(exc.problems) if source else [f"error: {p.key}: {p.message}" for p in exc.problems]
        print("\n".join(lines), file=sys.stderr)
        return 2
    except StackFileError as exc:
        if args.debug:
            raise
        print(f"{_shown(exc.path)}:{exc.line}: {exc.message}", file=sys.stderr)
        return 2
    except (StackNotFound, UsageError, OptionFileError) as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - what nobody foresaw still ends in one line
        if args.debug:
            raise
        print(f"error: {_one_line(exc)} ({type(exc).__name__}; rerun with --debug for the traceback)", file=sys.stderr)
        return 1


def _reader_went_away() -> int:
    """stdout's reader closed the pipe (`higgsfield check prod | head -1`): what is left to print
    goes nowhere, and the exit status is a SIGPIPE death's, as for any Unix filter."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + 13  # SIGPIPE


def run() -> None:
    """The console script, tuned for a short-lived process (measured on 2 cores with
    `benchmarks/plan_time.py` and `/usr/bin/time`):
    - no cyclic garbage collection: importing the Pulumi SDKs creates hundreds of thousands of
      typing objects, and collecting them while nothing is garbage cost 0.6 s of a 3 s `plan`;
      reference counting still frees what a run drops;
    - no interpreter teardown of the SDK's module graph and threads (0.6-0.9 s), with nothing to
      flush but stdout and stderr (files are written and closed by then)."""
    gc.disable()
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_went_away()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except SystemExit as exc:  # --help, --version and usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            code = _reader_went_away()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()

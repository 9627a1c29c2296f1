"""`higgsfield`: offline tools around the Pulumi program (no CLI, no credentials needed).

    higgsfield COMMAND STACK ...   (`higgsfield --help` lists the commands; docs/reference/cli.md)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from infra.offline.evaluate import StackNotFound, record
from infra.offline.option_files import OptionFileError
from infra.cli.completion import stacks_here
from infra.cli.output import UsageError, add_report_options, colour_on, emit, error
from infra.offline.stack_file import StackFileError, shown as _shown

# --- commands ---------------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> int:
    from infra.cli.views.plan import render

    plan = record(args.stack)
    emit(args, plan.as_dict, lambda: render(plan, verbose=args.verbose))
    if args.manifests:
        from infra.offline.manifests import write_manifests

        written = write_manifests(plan, Path(args.manifests))
        print(f"wrote {len(written)} Kubernetes manifests to {args.manifests}", file=sys.stderr)
    return 0


def _check(args: argparse.Namespace) -> int:
    from infra.offline import check

    result = check.check_stack(args.stack, Path(args.policy_config) if args.policy_config else None)
    emit(args, lambda: check.as_json(result), lambda: check.render(result, verbose=args.verbose, colour=args.colour))
    if result.mandatory:
        error(f"check of {args.stack} failed: {len(result.mandatory)} mandatory violation(s) (listed above)")
        return 1
    return 0


def _diff(args: argparse.Namespace) -> int:
    from infra.offline.diff import as_json, diff_stack, render_diff
    from infra.offline.evaluate import project_root

    diff = diff_stack(args.stack, args.base, project_root(), set(args.allow or []))
    emit(args, lambda: as_json(args.stack, args.base, diff), lambda: render_diff(args.stack, args.base, diff))
    for refusal in diff.refused:
        error(f"refused: {refusal}")
    return 1 if diff.refused else 0


def _cost(args: argparse.Namespace) -> int:
    from infra.offline import cost

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
            error(str(exc))
            return 2
        except Exception as exc:  # noqa: BLE001 - credentials or API errors, said in one line
            error(f"--refresh needs AWS credentials allowed pricing:GetProducts ({type(exc).__name__}: {exc})")
            return 2
        price_file.write_text(json.dumps(prices, indent=2) + "\n")
        left = prices["regions"][plan.config.region]["not_refreshed"]
        print(f"refreshed {len(set(types))} instance prices and every other service's into {price_file}"
              + (f"; no product in the Price List for {', '.join(left)} (kept as they were)" if left else ""), file=sys.stderr)
    from infra.cli.views.cost import render

    est = cost.estimate(plan, prices)
    emit(args, lambda: cost.as_json(est), lambda: render(est))
    if args.strict and est.unpriced:
        error(f"cost of {args.stack}: {len(est.unpriced)} item(s) not priced (--strict): {', '.join(sorted({l.resource for l in est.unpriced}))}")
        return 1
    return 0


def _timeline(args: argparse.Namespace) -> int:
    from infra.offline import timeline

    from infra.cli.views import timeline as view

    plan = record(args.stack)
    if args.job is not None:  # a job's cold and warm start on a pool (infra/offline/cold_start.py)
        from infra.offline import cold_start

        data, text = cold_start.report(plan, args.job, args.nodes)
        emit(args, lambda: data, lambda: text)
        return 0
    t = timeline.compute(plan)
    if args.mermaid:
        emit(args, lambda: timeline.as_json(plan, t), lambda: view.mermaid(plan, t))
        return 0
    emit(args, lambda: timeline.as_json(plan, t), lambda: view.render(plan, t, verbose=args.verbose))
    return 0


def _preflight(args: argparse.Namespace) -> int:
    from botocore.exceptions import NoRegionError

    from infra.cli import preflight

    plan = record(args.stack)  # the add-ons the program installs, and their pins
    cfg = plan.config
    try:
        checks = preflight.run(cfg, preflight.Clients.for_region(cfg.region), preflight.addon_pins(plan))
    except (*preflight.NO_CREDENTIALS, NoRegionError) as exc:
        error(f"no AWS credentials ({type(exc).__name__}): set AWS_PROFILE (or run `aws configure` / `aws sso login`) for the stack's account, then rerun")
        return 2
    except preflight.CredentialsRejected as exc:
        error(f"{exc}: refresh them (`aws sso login`, or new keys) and rerun")
        return 2
    unreachable = preflight.one_cause(checks)
    if unreachable:
        error(unreachable)
        return 2
    emit(args, lambda: preflight.as_json(args.stack, checks), lambda: preflight.render(args.stack, checks, colour=args.colour))
    failed = [c for c in checks if not c.ok]
    if failed:
        error(f"preflight of {args.stack}: {sum(c.checked for c in failed)} failed, {sum(not c.checked for c in failed)} not checked (listed above)")
    return 0 if not failed else 1


def _charts(args: argparse.Namespace) -> int:
    from infra.offline import charts

    written = charts.export(record(args.stack), Path(args.out))
    print(f"wrote {len(written) - 2} Helm releases' values, releases.tsv and kubernetes-version to {args.out}")
    return 0


def _healthcheck_render(args: argparse.Namespace) -> int:
    from infra.offline import healthcheck, jobs
    from infra.offline.evaluate import load_stack

    _stack_then(args, "pool")
    cfg = load_stack(args.stack)
    print(jobs.to_yaml(healthcheck.render(cfg, args.pool, team=args.team, nodes=args.nodes, image=args.image)), end="")
    return 0


def _jobs_render(args: argparse.Namespace) -> int:
    from infra.offline import jobs
    from infra.offline.evaluate import load_stack

    _stack_then(args, "example")
    cfg = load_stack(args.stack)
    print(jobs.to_yaml(jobs.render(args.example, cfg, pool=args.pool, team=args.team, workers=args.workers, image=args.image,
                                      checkpoints=args.checkpoints)), end="")
    return 0


def _init(args: argparse.Namespace) -> int:
    from infra.cli import init
    from infra.offline.evaluate import project_root

    root = project_root()
    choices = init.Choices(pools=tuple(init.PoolSpec.parse(p) for p in args.gpu_pool or ()), cpu_types=tuple(args.cpu_type or ()),
                           teams=tuple(init.TeamSpec.parse(t) for t in args.team or ()), environment=args.environment,
                           admins=tuple(args.admin or ()), public_access_cidrs=tuple(args.public_access_cidr or ()))
    stack = init.create(args.stack, args.region, args.source, root, choices, flags=tuple(args.gpu_pool or ()))
    print(init.render(stack, root))
    return 0


IMAGE_HELP = ("image to run (default: the stack's training image, built from images/training into the stack's ECR repository; "
              "on EFA pools only images of that repository or of higgsfield:trainingImage)")


def _stacks(args: argparse.Namespace) -> int:
    from infra.offline.evaluate import project_root
    from infra.offline.stacks import stack_matrix

    print(json.dumps(stack_matrix(project_root(), args.delivered), separators=(",", ":")))
    return 0


def _bootstrap(args: argparse.Namespace) -> int:
    from infra.cli import bootstrap
    from infra.offline.evaluate import load_stack

    print(bootstrap.render(load_stack(args.stack)))
    return 0


def _image(args: argparse.Namespace) -> int:
    from infra.offline import image
    from infra.offline.evaluate import load_stack

    cfg = load_stack(args.stack)
    if args.print:
        print(image.script(cfg, args.image_command))
        return 0
    return image.run(cfg, args.image_command)


def _schema(args: argparse.Namespace) -> int:
    from infra.cli import schema
    from infra.offline.evaluate import project_root

    root = project_root()
    if args.write:
        print("wrote " + ", ".join(schema.write(root, parser)))
        return 0
    if args.check:
        stale = schema.stale(root, parser)
        for path in stale:
            print(f"error: {path} is stale: run `{schema.REGENERATE}`", file=sys.stderr)
        return 1 if stale else 0
    print(schema.schema_text(), end="")
    return 0


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


def _stack_argument(command: argparse.ArgumentParser, help: str = "the stack: stacks/Pulumi.STACK.yaml") -> None:
    command.add_argument("stack", metavar="STACK", help=help).completer = stacks_here  # type: ignore[attr-defined]


def _completion(args: argparse.Namespace) -> int:
    from infra.cli import completion

    print(completion.script(args.shell), end="")
    return 0


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="higgsfield", description="Offline tools for the Higgsfield Pulumi program: no cloud, no credentials "
                "(except preflight and cost --refresh). Every command names the stack first.",
                epilog="Reports take --json (stable JSON on stdout) and --output FILE; failures are one line on stderr "
                "(exit 2: the stack or command line is wrong, 1: a check failed). Completion: higgsfield completion bash.")
    p.add_argument("--version", action="version", version=_version())
    p.add_argument("--debug", action="store_true", help="also print the traceback of a failure (anywhere on the command line; same exit status)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    plan = sub.add_parser("plan", help="evaluate the program for a stack under mocks and print what it would create")
    _stack_argument(plan)
    add_report_options(plan)
    plan.add_argument("--manifests", metavar="DIR", help="write each Kubernetes object the program builds as YAML")
    plan.add_argument("--verbose", action="store_true", help="list every resource (repeated ones are collapsed by default)")
    plan.set_defaults(func=_plan)

    check = sub.add_parser("check", help="run the policy pack, the Kubernetes schema and the example jobs' fit over the offline plan")
    _stack_argument(check)
    check.add_argument("--policy-config", metavar="FILE", help="policy pack config JSON (default: policies/config/STACK.json)")
    check.add_argument("--verbose", action="store_true", help="also list the policies that cannot run offline (values known only at deploy)")
    add_report_options(check)
    check.set_defaults(func=_check)

    diff = sub.add_parser("diff", help="compare the offline plan at a git ref with the working tree; refuse destroying data")
    _stack_argument(diff)
    diff.add_argument("--base", required=True, metavar="REF", help="git ref to compare with, e.g. origin/main")
    diff.add_argument("--allow", action="append", metavar="NAME", help="allow replacing/deleting this resource (repeatable)")
    add_report_options(diff)
    diff.set_defaults(func=_diff)

    cost_cmd = sub.add_parser("cost", help="hourly and monthly cost, idle and at full scale, per resource")
    _stack_argument(cost_cmd)
    add_report_options(cost_cmd)
    cost_cmd.add_argument("--prices", metavar="FILE", help="price file (default: the one shipped in infra/offline/data)")
    cost_cmd.add_argument("--refresh", action="store_true", help="update the prices of everything the stack creates from the AWS Pricing API (needs credentials)")
    cost_cmd.add_argument("--strict", action="store_true", help="exit 1 when anything the stack creates is not priced")
    cost_cmd.set_defaults(func=_cost)

    timeline_cmd = sub.add_parser("timeline", help="how long a first deploy takes: the critical path against the longest single resource")
    _stack_argument(timeline_cmd)
    add_report_options(timeline_cmd)
    timeline_cmd.add_argument("--mermaid", action="store_true", help="print the chart as a Mermaid gantt block (for a PR or wiki)")
    timeline_cmd.add_argument("--verbose", action="store_true", help="also list every create time and its source")
    timeline_cmd.add_argument("--job", metavar="POOL", help="instead: a job's path from submitted to first step on POOL, cold and warm, each step cited")
    timeline_cmd.add_argument("--nodes", type=int, metavar="N", help="with --job: the gang's nodes (default: the pool's maxSize)")
    timeline_cmd.set_defaults(func=_timeline)

    pre = sub.add_parser("preflight", help="check the AWS account can run the stack (quotas, offerings, reservations, AMI, FSx, add-on versions)")
    _stack_argument(pre)
    add_report_options(pre)
    pre.set_defaults(func=_preflight)

    charts_cmd = sub.add_parser("charts", help="write every Helm release of the plan (chart, repo, version, values) for helm template")
    _stack_argument(charts_cmd)
    charts_cmd.add_argument("--out", required=True, metavar="DIR", help="folder to write into")
    charts_cmd.set_defaults(func=_charts)

    init = sub.add_parser("init", help="write a new stack (and its policy config) for a region from an existing one")
    init.add_argument("stack", metavar="STACK", help="name of the new stack: stacks/Pulumi.STACK.yaml")
    init.add_argument("--region", required=True, metavar="REGION", help="AWS region of the new stack, e.g. eu-north-1")
    init.add_argument("--from", dest="source", default="dev", metavar="EXISTING", help="stack to start from (default: dev)").completer = stacks_here  # type: ignore[attr-defined]
    init.add_argument("--gpu-pool", action="append", metavar="NAME:TYPE[,TYPE]:MIN-MAX",
                      help="an on-demand GPU pool, e.g. h100:p5.48xlarge:0-4 (repeatable; replaces the existing stack's pools)")
    init.add_argument("--cpu-type", action="append", metavar="TYPE", help="instance type of the system nodes (repeatable)")
    init.add_argument("--team", action="append", metavar="NAME[:GPUS]", help="a team on the first queue (repeatable; replaces the teams)")
    init.add_argument("--environment", choices=["dev", "staging", "prod"], help="default: the existing stack's")
    init.add_argument("--admin", action="append", metavar="ARN", help="IAM role/user ARN with cluster-admin (required, repeatable; the existing stack's are not copied: their account names the image registry)")
    init.add_argument("--public-access-cidr", action="append", metavar="CIDR",
                      help="public egress range of your office or VPN that may reach the API endpoint (repeatable; default: the existing stack's, less example ranges)")
    init.set_defaults(func=_init)

    health = sub.add_parser("healthcheck", help="post-deploy GPU node health check").add_subparsers(dest="health_command", required=True, metavar="ACTION")
    health_render = health.add_parser("render", help="print the health-check Job (and NCCL PyTorchJob) of a pool, for kubectl apply -f -")
    _stack_argument(health_render)
    health_render.add_argument("pool", nargs="?", metavar="POOL", help="GPU pool to check")
    health_render.add_argument("--stack", dest="old_stack", help=argparse.SUPPRESS)  # the old form: POOL --stack STACK
    health_render.add_argument("--team", metavar="TEAM", help="namespace to run in (default: the first team)")
    health_render.add_argument("--nodes", type=int, metavar="N", help="nodes to check (default: min(2, maxSize))")
    health_render.add_argument("--image", metavar="IMAGE", help=IMAGE_HELP)
    health_render.set_defaults(func=_healthcheck_render, usage="higgsfield healthcheck render STACK POOL")

    jobs = sub.add_parser("jobs", help="example training jobs for a stack").add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    render = jobs.add_parser("render", help="print an example job filled in for a stack, for kubectl apply -f -")
    _stack_argument(render)
    render.add_argument("example", nargs="?", metavar="EXAMPLE", help="pytorch-ddp | pytorch-elastic | mpi-nccl-tests")
    render.add_argument("--stack", dest="old_stack", help=argparse.SUPPRESS)  # the old form: EXAMPLE --stack STACK
    render.add_argument("--pool", metavar="POOL", help="GPU pool (default: the first on-demand pool; EFA pools first for NCCL tests)")
    render.add_argument("--team", metavar="TEAM", help="team namespace (default: the first team)")
    render.add_argument("--workers", type=int, metavar="N", help="worker replicas (elastic: the most it grows to); default: 2, or what fits "
                        "the pool's maxSize, the team's gpuQuota and its queue's gpuCapability")
    render.add_argument("--image", metavar="IMAGE", help=IMAGE_HELP)
    render.add_argument("--checkpoints", action=argparse.BooleanOptionalAction, default=None,
                        help="PyTorch examples: checkpoint and resume (default: where they can resume; a multi-node job needs higgsfield:fsx)")
    render.set_defaults(func=_jobs_render, usage="higgsfield jobs render STACK EXAMPLE")
    stacks_cmd = sub.add_parser("stacks", help="the stack matrix of the workflows (JSON), from stacks/Pulumi.STACK.yaml")
    stacks_cmd.add_argument("--delivered", action="store_true", help="only stacks with higgsfield:delivery (CI previews and deploys those)")
    stacks_cmd.set_defaults(func=_stacks)
    boot = sub.add_parser("bootstrap", help="print the first-deploy steps of a stack (before CI can deploy it)")
    _stack_argument(boot)
    boot.set_defaults(func=_bootstrap)
    image_cmd = sub.add_parser("image", help="build or push the training image (images/training) into the stack's ECR repository, with docker")
    image_actions = image_cmd.add_subparsers(dest="image_command", required=True, metavar="ACTION")
    for action, what in (("build", "docker build the image, tagged as the stack's jobs and health gate name it"),
                         ("push", "build it, log in to the stack's ECR repository and push it (unless the tag is there); print its digest")):
        step = image_actions.add_parser(action, help=what)
        _stack_argument(step)
        step.add_argument("--print", action="store_true", help="print the commands instead of running them")
        step.set_defaults(func=_image)
    schema_cmd = sub.add_parser("schema", help="the stack-file JSON Schema and the settings reference, generated from infra/config/")
    schema_cmd.add_argument("--write", action="store_true", help="write schemas/stack.schema.json and the settings reference")
    schema_cmd.add_argument("--check", action="store_true", help="exit 1 if either is stale")
    schema_cmd.set_defaults(func=_schema)
    completion = sub.add_parser("completion", help="print the shell completion script: eval \"$(higgsfield completion bash)\"")
    completion.add_argument("shell", choices=["bash", "zsh", "fish", "tcsh"], help="your shell")
    completion.set_defaults(func=_completion)
    return p


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Every failure is one line on stderr (exit 2: the stack or the command
    line is wrong; 1: anything else); --debug adds its traceback, the exit status stays the same."""
    from infra.config import ConfigError

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # wherever it stands: `higgsfield plan dev --debug` too
    p = parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (argcomplete's protocol)
        import argcomplete

        argcomplete.autocomplete(p)
    args = p.parse_args([a for a in argv if a != "--debug"])
    args.debug = debug
    args.colour = colour_on(sys.stdout) and not getattr(args, "output", None) and getattr(args, "json", None) is None

    def failed(code: int, *lines: str) -> int:
        if debug:
            traceback.print_exc(file=sys.stderr)
        for line in lines:
            print(line, file=sys.stderr)
        return code

    try:
        return args.func(args)
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except ConfigError as exc:
        source = getattr(exc, "source", None)
        return failed(2, *(source.report(exc.problems) if source else [f"error: {p.key}: {p.message}" for p in exc.problems]))
    except StackFileError as exc:
        return failed(2, f"{_shown(exc.path)}:{exc.line}: {exc.message}")
    except (StackNotFound, UsageError, OptionFileError) as exc:
        return failed(2, f"error: {exc}")
    except Exception as exc:  # noqa: BLE001 - what nobody foresaw still ends in one line
        hint = "" if debug else "; rerun with --debug for the traceback"
        return failed(1, f"error: {_one_line(exc)} ({type(exc).__name__}{hint})")


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

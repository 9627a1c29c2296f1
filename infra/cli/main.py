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

import yaml

from infra.cli.offline import Plan, StackFileError, StackNotFound, record
from infra.cli.stack_file import shown as _shown

# --- Kubernetes objects the program builds itself --------------------------------------------

_NOT_MANIFESTS = ("kubernetes:helm.sh/", "kubernetes:kustomize", "kubernetes:yaml", "pulumi:providers:")


def manifests(plan: Plan) -> list[dict]:
    """Every Kubernetes object the program declares directly (not Helm/kustomize contents)."""
    found = []
    for r in plan.resources:
        if r.type.startswith("kubernetes:") and not r.type.startswith(_NOT_MANIFESTS):
            found.append(dict(r.inputs))  # KubernetesObject's inputs are the manifest itself
    return found


def write_manifests(plan: Plan, folder: Path) -> list[Path]:
    """The program's own Kubernetes objects, one file each, and the example jobs filled in for
    the stack under examples/ (those are for `kubectl apply`, not deployed by `pulumi up`)."""
    from infra.cli import jobs

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for example in jobs.examples_for(plan.config):
        (folder / "examples").mkdir(exist_ok=True)
        path = folder / "examples" / f"{example}.yaml"
        path.write_text(jobs.to_yaml(jobs.render(example, plan.config)))
        written.append(path)
    for obj in manifests(plan):
        meta = obj.get("metadata") or {}
        name = "-".join(p for p in (obj.get("kind", "object").lower(), meta.get("namespace"), meta.get("name")) if p)
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))  # apiVersion and kind first, as kubectl users expect
        written.append(path)
    return written


# --- commands ---------------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> int:
    from infra.cli.views.plan import render

    plan = record(args.stack)
    print(render(plan, verbose=args.verbose))
    if args.json:
        Path(args.json).write_text(json.dumps(plan.as_dict(), indent=2, sort_keys=True))
        print(f"wrote {args.json}")
    if args.manifests:
        written = write_manifests(plan, Path(args.manifests))
        print(f"wrote {len(written)} Kubernetes manifests to {args.manifests}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from infra.cli.check import load_pack_config, run_policies, validate_manifests
    from infra.cli.offline import project_root

    plan = record(args.stack)
    config_path = Path(args.policy_config) if args.policy_config else project_root() / "policies" / "config" / f"{args.stack}.json"
    violations, skipped = run_policies(plan, load_pack_config(config_path))
    violations += validate_manifests(plan)
    names = {r.urn: f"{r.type.split(':')[-1]} {r.name}" for r in plan.resources}
    print(f"Policy check of {plan.project}/{plan.stack}: {len(plan.resources)} resources, policy config {config_path.name if config_path.is_file() else 'none'}")
    print(f"  {'level':<10} {'policy':<34} {'resource':<40} message")
    for f in sorted(violations, key=lambda f: (f.level != "mandatory", f.policy)):
        print(f"  {f.level:<10} {f.policy:<34} {names.get(f.urn or '', '(stack)'):<40} {f.message}")
    for f in skipped:
        print(f"  {'not run':<10} {f.policy:<34} {names.get(f.urn or '', '(stack)'):<40} {f.message}")
    mandatory = [f for f in violations if f.level == "mandatory"]
    print(f"{len(mandatory)} mandatory, {len(violations) - len(mandatory)} advisory violations, {len(skipped)} not run")
    return 1 if mandatory else 0


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
    from infra.cli import healthcheck, jobs  # noqa: F401
    from infra.cli.offline import load_stack

    cfg = load_stack(args.stack)
    print(jobs.to_yaml(healthcheck.render(cfg, args.pool, team=args.team, nodes=args.nodes, image=args.image)), end="")
    return 0


def _jobs_render(args: argparse.Namespace) -> int:
    from infra.cli import jobs
    from infra.cli.offline import load_stack

    cfg = load_stack(args.stack)
    print(jobs.to_yaml(jobs.render(args.example, cfg, pool=args.pool, team=args.team, workers=args.workers, image=args.image)), end="")
    return 0


IMAGE_HELP = ("image to run (default: the stack's training image, built from images/training into the stack's ECR repository; "
              "on EFA pools only images of that repository or of higgsfield:trainingImage)")


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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="higgsfield", description="Offline tools for the Higgsfield Pulumi program.")
    sub = p.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="evaluate the program for a stack under mocks and print what it would create")
    plan.add_argument("stack", help="stack name: stacks/Pulumi.<stack>.yaml")
    plan.add_argument("--json", metavar="PATH", help="write the recorded plan as JSON")
    plan.add_argument("--manifests", metavar="DIR", help="write each Kubernetes object the program builds as YAML")
    plan.add_argument("--verbose", action="store_true", help="list every resource (repeated ones are collapsed by default)")
    plan.set_defaults(func=_plan)

    check = sub.add_parser("check", help="run the policy pack and the Kubernetes schema over the offline plan")
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
    timeline_cmd.set_defaults(func=_timeline)

    pre = sub.add_parser("preflight", help="check the AWS account can run the stack (quotas, offerings, reservations, AMI, FSx, add-on versions)")
    pre.add_argument("stack")
    pre.set_defaults(func=_preflight)

    charts_cmd = sub.add_parser("charts", help="write every Helm release of the plan (chart, repo, version, values) for helm template")
    charts_cmd.add_argument("stack")
    charts_cmd.add_argument("--out", required=True, metavar="DIR")
    charts_cmd.set_defaults(func=_charts)

    health = sub.add_parser("healthcheck", help="post-deploy GPU node health check").add_subparsers(dest="health_command", required=True)
    health_render = health.add_parser("render", help="print the health-check Job (and NCCL PyTorchJob) of a pool, for kubectl apply -f -")
    health_render.add_argument("pool")
    health_render.add_argument("--stack", required=True)
    health_render.add_argument("--team", help="namespace to run in (default: the first team)")
    health_render.add_argument("--nodes", type=int, help="nodes to check (default: min(2, maxSize))")
    health_render.add_argument("--image", help=IMAGE_HELP)
    health_render.set_defaults(func=_healthcheck_render)

    jobs = sub.add_parser("jobs", help="example training jobs for a stack").add_subparsers(dest="jobs_command", required=True)
    render = jobs.add_parser("render", help="print an example job filled in for a stack, for kubectl apply -f -")
    render.add_argument("example", help="pytorch-ddp | pytorch-elastic | mpi-nccl-tests")
    render.add_argument("--stack", required=True)
    render.add_argument("--pool", help="GPU pool (default: the first on-demand pool; EFA pools first for NCCL tests)")
    render.add_argument("--team", help="team namespace (default: the first team)")
    render.add_argument("--workers", type=int, default=2, help="worker replicas (default 2)")
    render.add_argument("--image", help=IMAGE_HELP)
    render.set_defaults(func=_jobs_render)
    schema_cmd = sub.add_parser("schema", help="the stack-file JSON Schema and README config table, generated from infra/config.py")
    schema_cmd.add_argument("--write", action="store_true", help="write schemas/stack.schema.json and the README table")
    schema_cmd.add_argument("--check", action="store_true", help="exit 1 if either is stale")
    schema_cmd.set_defaults(func=_schema)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from infra.config import ConfigError

    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        source = getattr(exc, "source", None)
        lines = source.report(exc.problems) if source else [f"error: {p.key}: {p.message}" for p in exc.problems]
        print("\n".join(lines), file=sys.stderr)
        return 2
    except StackFileError as exc:
        print(f"{_shown(exc.path)}:{exc.line}: {exc.message}", file=sys.stderr)
        return 2
    except StackNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def run() -> None:
    """The console script, tuned for a short-lived process (measured on 2 cores with
    `benchmarks/plan_time.py` and `/usr/bin/time`):
    - no cyclic garbage collection: importing the Pulumi SDKs creates hundreds of thousands of
      typing objects, and collecting them while nothing is garbage cost 0.6 s of a 3 s `plan`;
      reference counting still frees what a run drops;
    - no interpreter teardown of the SDK's module graph and threads (0.6-0.9 s), with nothing to
      flush but stdout and stderr (files are written and closed by then)."""
    gc.disable()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()

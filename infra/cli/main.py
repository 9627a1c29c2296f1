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

from infra.cli.offline import COMPUTED, Plan, Resource, StackNotFound, record

# --- what a reviewer wants to see per resource type ---------------------------------------


def _get(inputs: dict, *path: str, default: Any = None) -> Any:
    value: Any = inputs
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return default
        value = value[key]
    return value


def _cluster(i: dict) -> str:
    public = ", ".join(i.get("publicAccessCidrs") or []) if i.get("endpointPublicAccess") else "none"
    logs = ",".join(i.get("enabledClusterLogTypes") or [])
    return f"k8s {i.get('version')}, auth {i.get('authenticationMode')}, endpoint private + public [{public}], logs {logs}, secrets KMS"


def _node_group(i: dict) -> str:
    s = i.get("scalingConfig") or {}
    return (
        f"{','.join(i.get('instanceTypes') or [])} {i.get('capacityType')} {i.get('amiType')}, "
        f"min {s.get('minSize')} / desired {s.get('desiredSize')} / max {s.get('maxSize')}"
    )


def _launch_template(i: dict) -> str:
    md = i.get("metadataOptions") or {}
    root = _get((i.get("blockDeviceMappings") or [{}])[0], "ebs", default={})
    nics = i.get("networkInterfaces") or []
    efa = sum(1 for n in nics if n.get("interfaceType") in ("efa", "efa-only"))
    text = f"IMDS tokens {md.get('httpTokens')} hop {md.get('httpPutResponseHopLimit')}, root {root.get('volumeSize')} GiB {root.get('volumeType')} encrypted={root.get('encrypted')}"
    return text + (f", {efa} EFA interfaces" if nics else "")


def lustre_throughput_mb_s(i: dict) -> float:
    """The throughput of a recorded FSx for Lustre file system's inputs."""
    from infra.config import lustre_throughput_mb_s as throughput

    return throughput(i.get("storageCapacity", 0), i.get("perUnitStorageThroughput"))


def _lustre(i: dict) -> str:
    from components.storage import MOUNT_PATH, PVC_NAME

    per_tib = i.get("perUnitStorageThroughput") or "200 (fixed)"
    return (
        f"{i.get('deploymentType')} {i.get('storageCapacity')} GiB x {per_tib} MB/s/TiB = {lustre_throughput_mb_s(i):,.0f} MB/s, "
        f"{i.get('dataCompressionType')}, backups {i.get('automaticBackupRetentionDays')} d; jobs mount PVC {PVC_NAME} at {MOUNT_PATH}"
    )


SUMMARIES: dict[str, Callable[[dict], str]] = {
    "aws:fsx/lustreFileSystem:LustreFileSystem": _lustre,
    "aws:ec2/vpc:Vpc": lambda i: f"cidr {i.get('cidrBlock')}",
    "aws:ec2/subnet:Subnet": lambda i: f"{i.get('availabilityZone')} {i.get('cidrBlock')}",
    "aws:ec2/vpcEndpoint:VpcEndpoint": lambda i: f"{i.get('vpcEndpointType')} {i.get('serviceName')}",
    "aws:kms/key:Key": lambda i: f"rotation {i.get('enableKeyRotation')}, deletion window {i.get('deletionWindowInDays')} days",
    "aws:eks/addon:Addon": lambda i: f"{i.get('addonName')} {i.get('addonVersion')}",
    "aws:eks/nodeGroup:NodeGroup": _node_group,
    "aws:ec2/launchTemplate:LaunchTemplate": _launch_template,
    "eks:index:Cluster": _cluster,
}


def _flags(r: Resource) -> str:
    flags = [name for name, on in (("protected", r.protect), ("retained", r.retain_on_delete)) if on]
    if r.ignore_changes:
        flags.append("ignores " + ",".join(r.ignore_changes))
    return f"  [{'; '.join(flags)}]" if flags else ""


def gpu_pool_rows(plan: Plan) -> list[dict]:
    """Per GPU node group, what a reviewer decides by, read back from the recording."""
    rows = []
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        labels = group.inputs.get("labels") or {}
        if labels.get("nvidia.com/gpu.present") != "true":
            continue
        (template,) = plan.dependencies_of(group, "aws:ec2/launchTemplate:LaunchTemplate")
        zones = sorted({s.inputs.get("availabilityZone") for s in plan.dependencies_of(group, "aws:ec2/subnet:Subnet")})
        tags = {
            t.inputs["tag"]["key"].rsplit("/", 1)[-1]: t.inputs["tag"]["value"]
            for t in plan.of_type("aws:autoscaling/tag:Tag")
            if group.urn in t.dependencies and "/resources/" in t.inputs["tag"]["key"]
        }
        nics = template.inputs.get("networkInterfaces") or []
        scaling = group.inputs.get("scalingConfig") or {}
        reservation = _get(template.inputs, "capacityReservationSpecification", "capacityReservationTarget", "capacityReservationId")
        rows.append(
            {
                "pool": labels.get("higgsfield.io/pool"),
                "instance_types": group.inputs.get("instanceTypes"),
                "gpus_per_node": tags.get("gpu"),
                "efa_interfaces": sum(1 for n in nics if n.get("interfaceType") == "efa-only"),
                "availability_zones": zones,
                "min": scaling.get("minSize"),
                "max": scaling.get("maxSize"),
                "capacity": group.inputs.get("capacityType") + (f" {reservation}" if reservation else ""),
            }
        )
    return rows


def gpu_pool_section(plan: Plan) -> list[str]:
    rows = gpu_pool_rows(plan)
    if not rows:
        return []
    lines = ["GPU pools:", f"  {'pool':<12} {'instance types':<30} {'GPUs':>4} {'EFA':>4} {'AZ':<12} {'min':>3} {'max':>3}  capacity"]
    for r in sorted(rows, key=lambda r: r["pool"]):
        lines.append(
            f"  {r['pool']:<12} {','.join(r['instance_types']):<30} {r['gpus_per_node']:>4} {r['efa_interfaces']:>4} "
            f"{','.join(r['availability_zones']):<12} {r['min']:>3} {r['max']:>3}  {r['capacity']}"
        )
    return lines


def render_plan(plan: Plan, extra: Sequence[Callable[[Plan], list[str]]] = (gpu_pool_section,)) -> str:
    """The resource tree grouped by component, with the settings that matter, and a count."""
    children: dict[str | None, list[Resource]] = {}
    for r in plan.resources:
        children.setdefault(r.parent, []).append(r)
    lines = [f"Offline plan of {plan.project}/{plan.stack} (preview under mocks; {COMPUTED} = known after deploy)"]

    def walk(parent: str | None, depth: int) -> None:
        for r in sorted(children.get(parent, []), key=lambda r: (r.custom, r.type, r.name)):
            summary = SUMMARIES.get(r.type, lambda i: "")(r.inputs)
            lines.append(f"{'  ' * depth}{'+' if r.custom else '▸'} {r.type} {r.name}" + (f": {summary}" if summary else "") + _flags(r))
            walk(r.urn, depth + 1)

    roots = {r.parent for r in plan.resources} - {r.urn for r in plan.resources}
    for root in sorted(roots, key=str):
        walk(root, 1)
    for section in extra:
        lines.extend(section(plan))
    custom = sum(1 for r in plan.resources if r.custom)
    lines.append(f"{len(plan.resources)} resources ({custom} cloud/Kubernetes resources, {len(plan.resources) - custom} components)")
    lines.append("Outputs: " + ", ".join(f"{k}={v}" for k, v in sorted(plan.outputs.items())))
    return "\n".join(lines)


# --- commands ---------------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> int:
    plan = record(args.stack)
    print(render_plan(plan))
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
        except Exception as exc:  # noqa: BLE001 - credentials or API errors, said in one line
            print(f"error: --refresh needs AWS credentials allowed pricing:GetProducts ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
        price_file.write_text(json.dumps(prices, indent=2) + "\n")
        print(f"refreshed {len(set(types))} instance prices into {price_file}")
    try:
        est = cost.estimate(plan, prices)
    except cost.PriceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(cost.as_json(est), indent=2))
    print(cost.render(est))
    return 0


def _timeline(args: argparse.Namespace) -> int:
    from infra.cli import timeline

    plan = record(args.stack)
    print(timeline.render(plan, timeline.compute(plan)))
    return 0


def _preflight(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    from infra.cli import preflight
    from infra.cli.offline import load_stack

    cfg = load_stack(args.stack)
    try:
        checks = preflight.run(cfg, preflight.Clients.for_region(cfg.region))
    except (NoCredentialsError, NoRegionError):
        print("error: no AWS credentials: set AWS_PROFILE (or run `aws configure` / `aws sso login`) for the stack's account, then rerun", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError) as exc:
        print(f"error: AWS refused a preflight call ({exc}); the credentials need ec2:Describe*, servicequotas:GetServiceQuota, ssm:GetParameter, fsx:DescribeFileSystems", file=sys.stderr)
        return 2
    print(preflight.render(args.stack, checks))
    return 0 if all(c.ok for c in checks) else 1


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
    print(jobs.to_yaml(jobs.render(args.example, cfg, pool=args.pool, team=args.team, workers=args.workers, image=args.image)), end="")
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
    cost_cmd.add_argument("--json", metavar="PATH")
    cost_cmd.add_argument("--prices", metavar="FILE", help="price file (default: the one shipped in infra/cli/data)")
    cost_cmd.add_argument("--refresh", action="store_true", help="update EC2 prices from the AWS Pricing API (needs credentials)")
    cost_cmd.set_defaults(func=_cost)

    timeline_cmd = sub.add_parser("timeline", help="the deployment's critical path and its ratio to the unavoidable chain")
    timeline_cmd.add_argument("stack")
    timeline_cmd.set_defaults(func=_timeline)

    pre = sub.add_parser("preflight", help="check the AWS account can run the stack (quotas, offerings, reservations, AMI, FSx)")
    pre.add_argument("stack")
    pre.set_defaults(func=_preflight)

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
    render.set_defaults(func=_jobs_render, usage="higgsfield jobs render STACK EXAMPLE")
    schema_cmd = sub.add_parser("schema", help="the stack-file JSON Schema and README config table, generated from infra/config.py")
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
        print("\n".join(f"error: {p.key}: {p.message}" for p in exc.problems), file=sys.stderr)
        return 2
    except (StackNotFound, UsageError) as exc:
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

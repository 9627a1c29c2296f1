"""The offline plan: the real program evaluated in-process under Pulumi's mocks.

No Pulumi CLI, no credentials, no network. A recording monitor keeps every resource the
program registers (type, name, parent, inputs, options, dependencies); that recording is what
`higgsfield plan` prints and what the tests assert on. The run is a *preview*: outputs that
only exist after a deploy (ids, ARNs, kubeconfig) stay unknown and print as `<computed>`.
Invokes are answered from real data bundled with moto (AWS's instance-type and AZ catalog, infra/core/bundled.py);
an invoke with no bundled answer fails loudly rather than inventing a value.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from infra.config import ConfigError
from infra.core.bundled import instance_types, zone_offerings
from infra.core.bundled import source as bundled_source
from infra.core.names import NAMESPACE as PROJECT
from infra.offline.stack_file import StackFile, read, read_project

COMPUTED = "<computed>"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the engine's "unknown during preview" sentinel
_SIG = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"


class StackNotFound(Exception):
    pass


# --- stack files ---------------------------------------------------------------------------


from infra.core.project import not_a_project, project_root, stack_names  # noqa: E402,F401 - where the project is (used by every command)


def _cli_string(value: Any) -> str:
    """A stack value as the Pulumi CLI hands it to the program: scalars as text, the rest JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def stack_file(root: Path, stack: str) -> StackFile:
    """The stack file of `stack`, read safely (raises StackNotFound, StackFileError)."""
    if (
        not stack
        or len(stack) > 100
        or any(c in stack for c in "/\\\0")
        or stack.startswith(".")
        or not stack.isprintable()
    ):
        raise StackNotFound(
            f"{stack[:60]!r} is not a stack name (a lowercase DNS label: stacks/Pulumi.<stack>.yaml); stacks here: "
            f"{', '.join(stack_names(root)) or 'none'}"
        )
    path = root / "stacks" / f"Pulumi.{stack}.yaml"
    outside = not_a_project(root)
    if outside:
        raise StackNotFound(outside)
    if not path.is_file():
        known = ", ".join(stack_names(root)) or "none"
        raise StackNotFound(f"stack {stack!r}: {path.relative_to(root)} not found; stacks here: {known}")
    return read(path)


def stack_config(
    root: Path, stack: str, overrides: Mapping[str, Any] | None = None, source: StackFile | None = None
) -> dict[str, str]:
    """The config the CLI would pass for `stack`: project defaults from Pulumi.yaml, then
    the stack file's `config:`, then `overrides` (full keys), all as CLI strings. Encrypted
    values are placeholders where they stand (the offline plan has no secrets provider)."""
    source = source or stack_file(root, stack)
    lines: dict[tuple, int] = {}
    project = read_project(root / "Pulumi.yaml", lines)
    values: dict[str, Any] = {}
    for key, decl in (project.get("config") or {}).items():
        full = key if ":" in key else f"{project['name']}:{key}"
        for given in ("default", "value"):
            if isinstance(decl, dict) and given in decl:
                values[full] = decl[given]
                source.defaults[full] = (root / "Pulumi.yaml", lines.get(("config", key, given), 1))
                break
    values.update((k, v) for k, v in source.config.items() if v is not None)  # `key: ~` is unset, not the text "None"
    values.update(overrides or {})
    return {k: _cli_string(v) for k, v in values.items()}


# --- bundled AWS data ------------------------------------------------------------------------


def _instance_type_result(name: str) -> dict:
    """Translate a DescribeInstanceTypes entry into the shape of `aws.ec2.get_instance_type`."""
    raw = instance_types().get(name)
    if raw is None:
        raise UnansweredInvoke(f"instance type {name!r} is not in AWS's bundled catalog")
    net = raw.get("NetworkInfo", {})
    gpus = raw.get("GpuInfo", {}).get("Gpus", [])
    storage = raw.get("InstanceStorageInfo", {})
    return {
        "instanceType": name,
        "id": name,
        "defaultVcpus": raw.get("VCpuInfo", {}).get("DefaultVCpus"),
        "memorySize": raw.get("MemoryInfo", {}).get("SizeInMiB"),
        "supportedArchitectures": raw.get("ProcessorInfo", {}).get("SupportedArchitectures", []),
        "gpuses": [
            {
                "count": g["Count"],
                "manufacturer": g["Manufacturer"],
                "name": g["Name"],
                "memorySize": g["MemoryInfo"]["SizeInMiB"],
            }
            for g in gpus
        ],
        "totalGpuMemory": raw.get("GpuInfo", {}).get("TotalGpuMemoryInMiB", 0),
        "efaSupported": bool(net.get("EfaSupported")),
        "efaMaximumInterfaces": net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0),
        "maximumNetworkCards": net.get("MaximumNetworkCards", 1),
        "maximumNetworkInterfaces": net.get("MaximumNetworkInterfaces"),
        "maximumIpv4AddressesPerInterface": net.get("Ipv4AddressesPerInterface"),
        "defaultNetworkCardIndex": net.get("DefaultNetworkCardIndex", 0),
        "networkPerformance": net.get("NetworkPerformance"),
        "networkCards": [
            {
                "index": c["NetworkCardIndex"],
                "maximumInterfaces": c["MaximumNetworkInterfaces"],
                "baselineBandwidth": c.get("BaselineBandwidthInGbps"),
                "peakBandwidth": c.get("PeakBandwidthInGbps"),
                "performance": c.get("NetworkPerformance"),
            }
            for c in net.get("NetworkCards", [])
        ],
        "instanceStorageSupported": bool(storage),
        "totalInstanceStorage": storage.get("TotalSizeInGB", 0),
        "instanceDisks": [
            {"count": d["Count"], "size": d["SizeInGB"], "type": d["Type"]} for d in storage.get("Disks", [])
        ],
        "ebsNvmeSupport": raw.get("EbsInfo", {}).get("NvmeSupport"),
        "supportedPlacementStrategies": raw.get("PlacementGroupInfo", {}).get("SupportedStrategies", []),
    }


def _instance_type_offerings(args: dict, region: str) -> dict:
    """DescribeInstanceTypeOfferings by AZ, or by region (the union of its AZs)."""
    filters = {f["name"]: set(f["values"]) for f in args.get("filters") or []}
    offered = dict(zone_offerings(region))
    if not offered:  # a region with EKS the bundled catalog has no offerings for: each known type as asked
        known = filters.get("instance-type", set()) & set(instance_types())  # (the plan's note says so)
        offered = {where: frozenset(known) for where in filters.get("location", ())}
    location_type = args.get("locationType", "region")
    if location_type == "region":
        offered = {region: frozenset().union(*offered.values())}
    locations = filters.get("location", set(offered))
    wanted = filters.get("instance-type")
    rows = [
        (where, t)
        for where in sorted(locations)
        for t in sorted(offered.get(where, ()))
        if wanted is None or t in wanted
    ]
    return {
        "id": region,
        "instanceTypes": [t for _, t in rows],
        "locations": [z for z, _ in rows],
        "locationTypes": [location_type] * len(rows),
    }


class UnansweredInvoke(Exception):
    """The program asked AWS for something no bundled data can answer offline."""


# --- the recording -----------------------------------------------------------------------------


@dataclass
class Resource:
    urn: str
    type: str
    name: str
    parent: str | None
    custom: bool
    provider: str | None
    inputs: dict
    dependencies: list[str]
    protect: bool
    retain_on_delete: bool
    ignore_changes: list[str]
    replace_on_changes: list[str]
    delete_before_replace: bool

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Plan:
    project: str
    stack: str
    resources: list[Resource]
    outputs: dict[str, Any]
    invokes: list[tuple[str, dict]] = field(default_factory=list)
    config: Any = None  # the StackConfig the program was built from
    code_root: str = str(Path(__file__).resolve().parents[2])  # the checkout whose code built it
    notes: list[str] = field(default_factory=list)  # what the offline plan cannot know (secrets, ESC)
    secrets: dict[str, str] = field(
        default_factory=dict
    )  # each encrypted value's key -> its placeholder (a ciphertext digest)

    def of_type(self, type_: str) -> list[Resource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str) -> Resource:
        found = self.of_type(type_)
        if len(found) != 1:
            raise AssertionError(f"expected one {type_}, found {len(found)}")
        return found[0]

    @cached_property
    def _index(self) -> dict[str, Resource]:
        return {r.urn: r for r in self.resources}

    def by_urn(self, urn: str) -> Resource:
        return self._index[urn]

    def dependencies_of(self, resource: Resource, type_: str | None = None) -> list[Resource]:
        """What `resource` depends on (of one type, if given)."""
        return [self._index[u] for u in resource.dependencies if type_ is None or self._index[u].type == type_]

    def children(self, parent: Resource, type_: str | None = None) -> list[Resource]:
        """Resources whose parent chain passes through `parent`."""
        found = []
        for r in self.resources:
            p = r.parent
            while p in self._index and p != parent.urn:
                p = self._index[p].parent
            if p == parent.urn and (type_ is None or r.type == type_):
                found.append(r)
        return found

    def as_dict(self) -> dict:
        return {
            "project": self.project,
            "stack": self.stack,
            "resources": [r.as_dict() for r in self.resources],
            "outputs": self.outputs,
            "code_root": self.code_root,
            "secrets": self.secrets,
        }


def _plain(value: Any) -> Any:
    """Engine wire values to plain JSON: unknowns as <computed>, secrets unwrapped as [secret]."""
    if isinstance(value, str):
        return COMPUTED if value == _UNKNOWN else value
    if isinstance(value, dict):
        sig = value.get(_SIG)
        if sig == _SECRET_SIG:
            return "[secret]"
        if sig == _RESOURCE_SIG:
            return value.get("urn")
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire format carries every number as a double
    return value


def _make_monitor(mocks: Any, stack: str, resources_out: list[Resource], outputs_out: dict, invokes_out: list) -> Any:
    from google.protobuf import json_format
    from pulumi.runtime.mocks import MockMonitor
    from pulumi.runtime.proto import resource_pb2

    class RecordingMonitor(MockMonitor):
        """MockMonitor that records every registration. It does not advertise resource
        references (docs/design/offline-evidence.md: that keeps remote components such as eks.Cluster from hanging)."""

        def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
            response = super().RegisterResource(request)
            if request.type != "pulumi:pulumi:Stack":
                inputs = json_format.MessageToDict(request.object)
                deps = set(request.dependencies)
                for prop in request.propertyDependencies.values():
                    deps.update(prop.urns)
                provider = request.provider.split("::")[0] if request.provider else None
                resources_out.append(
                    Resource(
                        urn=response.urn,
                        type=request.type,
                        name=request.name,
                        parent=request.parent or None,
                        custom=request.custom,
                        provider=(request.provider.rsplit("::", 1)[0] if provider else None),
                        inputs=_plain(inputs),
                        dependencies=sorted(deps),
                        protect=bool(request.protect),
                        retain_on_delete=bool(request.retainOnDelete),
                        ignore_changes=list(request.ignoreChanges),
                        replace_on_changes=list(request.replaceOnChanges),
                        delete_before_replace=bool(request.deleteBeforeReplace),
                    )
                )
            return response

        def RegisterResourceOutputs(self, request):  # noqa: N802
            if request.urn.endswith(f"::pulumi:pulumi:Stack::{PROJECT}-{stack}"):
                outputs_out.update(_plain(json_format.MessageToDict(request.outputs)))
            return super().RegisterResourceOutputs(request)

        def Invoke(self, request):  # noqa: N802
            invokes_out.append((request.tok, _plain(json_format.MessageToDict(request.args))))
            return super().Invoke(request)

        def GetDeploymentInfo(self, request):  # noqa: N802
            info = super().GetDeploymentInfo(request)
            keep = [f for f in info.supportedFeatures if f != resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES]
            return resource_pb2.DeploymentInfo(supportedFeatures=keep)

        def SupportsFeature(self, request):  # noqa: N802
            supported = request.id not in ("outputValues", "resourceReferences")
            return type("SupportsFeatureResponse", (object,), {"hasSupport": supported})

    return RecordingMonitor(mocks)


def _addon_version_at_deploy(args: dict) -> dict:
    """DescribeAddonVersions needs AWS: the plan says the version is EKS's, picked at deploy."""
    from infra.core.versions import ADDON_RESOLVED_AT_DEPLOY

    return {**args, "id": args["addonName"], "version": ADDON_RESOLVED_AT_DEPLOY.format(k8s=args["kubernetesVersion"])}


# Who deploys is known only against AWS: the plan names the account so (the key policies made from it
# read `arn:aws:iam::<account at deploy>:root`).
ACCOUNT_AT_DEPLOY = "<account at deploy>"


def _deploying_identity(region: str) -> dict:
    partition = "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"
    arn = f"arn:{partition}:sts::{ACCOUNT_AT_DEPLOY}:assumed-role/deploy/higgsfield"
    return {"accountId": ACCOUNT_AT_DEPLOY, "arn": arn, "id": ACCOUNT_AT_DEPLOY, "userId": "deploy:higgsfield"}


def _make_mocks(region: str) -> Any:
    import pulumi

    class OfflineMocks(pulumi.runtime.Mocks):
        def new_resource(self, args):
            # Preview semantics: the id and every output not echoed from inputs is unknown.
            return "", dict(args.inputs)

        def call(self, args):
            handlers: dict[str, Callable[[dict], dict]] = {
                "aws:ec2/getInstanceType:getInstanceType": lambda a: _instance_type_result(a["instanceType"]),
                "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings": lambda a: _instance_type_offerings(
                    a, region
                ),
                "aws:eks/getAddonVersion:getAddonVersion": _addon_version_at_deploy,
                "aws:index/getCallerIdentity:getCallerIdentity": lambda _: _deploying_identity(region),
            }
            handler = handlers.get(args.token)
            if handler is None:
                raise UnansweredInvoke(
                    f"{args.token} has no offline answer; it is only known against a real AWS account"
                )
            return handler(args.args)

    return OfflineMocks()


def record(stack: str, root: Path | None = None, overrides: Mapping[str, Any] | None = None) -> Plan:
    """Evaluate the real program for `stack` under mocks and return what it registered.

    Raises `infra.config.ConfigError` for a bad config (before anything is registered; its
    `source` is the stack file, for lines), `StackFileError` for a file that is no stack file
    and `StackNotFound` for a missing one.
    """
    root = root or project_root()
    source = stack_file(root, stack)
    config = stack_config(root, stack, overrides, source)
    secret = sorted(source.secret_keys)
    with _located(source):
        if source.problems:  # the file's own mistakes, with the settings' (without running the program)
            contextvars.Context().run(_load_in_fresh_context, stack, config, secret)
            raise ConfigError(source.problems[0].key, source.problems[0].message, list(source.problems))
        plan = contextvars.Context().run(_record_in_fresh_context, stack, config, secret)
    plan.notes = source.notes()
    if not zone_offerings(plan.config.region):
        plan.notes.append(
            f"aws:region {plan.config.region}: {bundled_source()} has no instance-type offerings for it, so "
            f"the stack's instance types and zones are not checked offline: `higgsfield preflight {stack}` "
            "checks them against your account"
        )
    apart = plan.config.fsx_away_from_efa_pools
    if apart:
        plan.notes.append(apart)
    plan.secrets = dict(source.secrets)
    return plan


def load_stack(stack: str, root: Path | None = None) -> Any:
    """The validated StackConfig of `stack`, read through the same config loader (and the same
    offline invokes) as the plan, without evaluating the program."""
    root = root or project_root()
    source = stack_file(root, stack)
    config = stack_config(root, stack, source=source)
    with _located(source):
        loaded = contextvars.Context().run(_load_in_fresh_context, stack, config, sorted(source.secret_keys))
        if source.problems:
            raise ConfigError(source.problems[0].key, source.problems[0].message, list(source.problems))
        from components.delivery import refuse_oversized_policies

        refuse_oversized_policies(loaded)  # as the program does first (infra/__main__.py build)
    return loaded


@contextlib.contextmanager
def _located(source: StackFile) -> Iterator[None]:
    """A ConfigError raised inside, with the stack file's own problems first and the file
    attached (`source`), so the CLI prints `file:line key: message` lines."""
    try:
        yield
    except ConfigError as exc:
        problems = [*source.problems, *(p for p in exc.problems if p not in source.problems)]
        located = ConfigError(problems[0].key, problems[0].message, problems)
        located.source = source  # type: ignore[attr-defined]
        located.registered_before_error = getattr(exc, "registered_before_error", 0)  # type: ignore[attr-defined]
        raise located from None


def _without_source_positions() -> None:
    """The SDK walks the whole Python stack at every resource it registers, a file URI per frame
    (pulumi/runtime/resource.py _get_stack_trace), to send the engine each resource's source
    position. The RecordingMonitor records neither the trace nor the position, so offline the SDK
    sends the empty trace it sends itself when it finds no resource constructor on the stack: the
    plan is the same, `plan prod` takes about a tenth less CPU, a test process a third less per
    evaluation (its stack is deeper). Only this process's offline evaluations: `pulumi up` runs
    the program in the engine's own process."""
    from pulumi.runtime import resource
    from pulumi.runtime.proto import source_pb2

    if hasattr(resource, "_get_stack_trace"):  # a private function: an SDK without it walks no stack here
        resource._get_stack_trace = source_pb2.StackTrace


def _start_runtime(
    stack: str,
    config: dict[str, str],
    resources_out: list,
    outputs_out: dict,
    invokes_out: list,
    secret_keys: list[str] | None = None,
) -> None:
    """Point the Pulumi SDK of the current (fresh) context at our mocks, as a preview."""
    import pulumi

    _without_source_positions()
    mocks = _make_mocks(config.get("aws:region", ""))
    monitor = _make_monitor(mocks, stack, resources_out, outputs_out, invokes_out)
    pulumi.runtime.set_all_config(config, secret_keys or [])
    pulumi.runtime.set_mocks(
        mocks,
        project=PROJECT,
        stack=stack,
        preview=True,
        monitor=monitor,
        logger=logging.getLogger("higgsfield.offline"),
    )


def _load_in_fresh_context(stack: str, config: dict[str, str], secret_keys: list[str] | None = None) -> Any:
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    from infra.config import load

    _start_runtime(stack, config, [], {}, [], secret_keys)
    loaded: list = []
    _sync_await(run_pulumi_func(lambda: loaded.append(load(from_environment=False))))
    return loaded[0]


def _record_in_fresh_context(stack: str, config: dict[str, str], secret_keys: list[str] | None = None) -> Plan:
    import pulumi
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    from infra.__main__ import build
    from infra.config import load

    resources_out: list[Resource] = []
    outputs_out: dict = {}
    invokes_out: list = []
    _start_runtime(stack, config, resources_out, outputs_out, invokes_out, secret_keys)

    loaded: list = []

    def program() -> None:
        loaded.append(load(from_environment=False))
        build(loaded[0])

    try:
        _sync_await(run_pulumi_func(program))
    except Exception as exc:
        exc.registered_before_error = len(resources_out)  # type: ignore[attr-defined]
        raise
    root_stack = pulumi.runtime.settings.get_root_resource()
    root_stack._outputs_registered = False  # set_mocks finished the stack before the program ran
    root_stack._finish()
    _sync_await(run_pulumi_func(lambda: None))
    return Plan(PROJECT, stack, resources_out, outputs_out, invokes_out, config=loaded[0])

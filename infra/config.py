"""The typed stack configuration: the only module that reads `pulumi.Config`.

`load()` turns the stack's config into frozen dataclasses and rejects nonsense before any
resource is registered. Every error names the full key (`higgsfield:cpuNodes.minSize`) and
what is allowed, and is a `pulumi.RunError`, so `pulumi up` prints one line, no traceback.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pulumi

from infra import versions

NAMESPACE = "higgsfield"
ENVIRONMENTS = ("dev", "staging", "prod")
_MISSING: Any = object()
T = TypeVar("T")


class ConfigError(pulumi.RunError):
    """A stack setting is wrong. `key` is the full config key, e.g. `higgsfield:vpcCidr`."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


# --- reading helpers ----------------------------------------------------------------------


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else repr(value)


class _Obj:
    """One config object being read. Remembers the fields read so that typos are rejected."""

    def __init__(self, path: str, value: Any, sep: str = ".") -> None:
        if not isinstance(value, Mapping):
            raise ConfigError(path, f"must be an object, got {_show(value)}")
        self.path, self.value, self.sep, self.read = path, value, sep, set()

    def key(self, name: str) -> str:
        return f"{self.path}{self.sep}{name}"

    def get(self, name: str, default: Any = _MISSING) -> Any:
        self.read.add(name)
        value = self.value.get(name)
        if value is None:
            if default is _MISSING:
                raise ConfigError(self.key(name), "is required")
            return default
        return value

    def obj(self, name: str, default: Any = _MISSING) -> _Obj:
        return _Obj(self.key(name), self.get(name, default))

    def done(self) -> None:
        unknown = sorted(set(self.value) - self.read)
        if unknown:
            raise ConfigError(self.key(unknown[0]), f"unknown setting; allowed: {', '.join(sorted(self.read))}")


def _int(key: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer, got {_show(value)}")
    if value < minimum:
        raise ConfigError(key, f"must be at least {minimum}, got {value}")
    return value


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {_show(value)}")
    return value


def _str(key: str, value: Any, choices: Sequence[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"must be a non-empty string, got {_show(value)}")
    if choices is not None and value not in choices:
        raise ConfigError(key, f"{value!r} is not one of: {', '.join(choices)}")
    return value


def _list(key: str, value: Any, item: Callable[[str, Any], T], min_items: int = 0) -> tuple[T, ...]:
    if not isinstance(value, list):
        raise ConfigError(key, f"must be a list, got {_show(value)}")
    if len(value) < min_items:
        raise ConfigError(key, f"needs at least {min_items} entries, got {len(value)}")
    return tuple(item(f"{key}[{i}]", v) for i, v in enumerate(value))


def _unique(key: str, names: Sequence[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise ConfigError(f"{key}[{i}]", f"duplicate name {name!r}")
        seen.add(name)


def _cidr(key: str, value: Any) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(_str(key, value))
    except ValueError as exc:
        raise ConfigError(key, f"{value!r} is not an IPv4 CIDR ({exc})") from None


# --- the typed config ---------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where the Kubernetes API is reachable from. Private access is always on."""

    public_access_cidrs: tuple[str, ...] = ()

    @property
    def public(self) -> bool:
        return bool(self.public_access_cidrs)


@dataclass(frozen=True)
class NodeSizes:
    instance_types: tuple[str, ...]
    min_size: int
    desired_size: int
    max_size: int


@dataclass(frozen=True)
class StackConfig:
    stack: str
    region: str
    environment: str
    kubernetes_version: str
    vpc_cidr: str
    availability_zones: tuple[str, ...]
    endpoint: Endpoint
    cpu_nodes: NodeSizes
    admins: tuple[str, ...]
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def production(self) -> bool:
        return self.environment == "prod"

    @property
    def name(self) -> str:
        """The base name of this stack's cloud resources, e.g. `higgsfield-dev`."""
        return f"{NAMESPACE}-{self.stack}"

    @property
    def resource_tags(self) -> dict[str, str]:
        """Tags on every taggable resource: the configured ones plus where it comes from."""
        return {"higgsfield:stack": self.stack, "higgsfield:environment": self.environment, **self.tags}


# --- parsing ------------------------------------------------------------------------------

_ADMIN_ARN = re.compile(r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:(role|user|assumed-role)/[\w+=,.@/-]+$")
_TAG_KEY = re.compile(r"^[\w .:/=+\-@]{1,128}$")


def _region(value: Any) -> str:
    import botocore.session  # the region list ships with botocore: no network needed

    key = "aws:region"
    region = _str(key, value)
    known = botocore.session.get_session().get_available_regions("eks")
    if region not in known:
        raise ConfigError(key, f"{region!r} is not an AWS region with EKS; known: {', '.join(sorted(known))}")
    return region


def _availability_zones(key: str, value: Any, region: str) -> tuple[str, ...]:
    def zone(k: str, v: Any) -> str:
        name = _str(k, v)
        if not re.fullmatch(re.escape(region) + r"[a-z]", name):
            raise ConfigError(k, f"{name!r} is not an availability zone of region {region} (e.g. {region}a)")
        return name

    zones = _list(key, value, zone, min_items=2)
    _unique(key, zones)
    return zones


def _vpc_cidr(key: str, value: Any) -> str:
    net = _cidr(key, value)
    if not net.is_private or not any(net.subnet_of(ipaddress.IPv4Network(p)) for p in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")):
        raise ConfigError(key, f"{net} is not inside an RFC 1918 range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16)")
    if not 16 <= net.prefixlen <= 20:
        raise ConfigError(key, f"{net} must be a /16 to /20 so every AZ gets room for pods")
    return str(net)


def _endpoint(key: str, value: Any, environment: str) -> Endpoint:
    obj = _Obj(key, value)
    if not _bool(obj.key("private"), obj.get("private", True)):
        raise ConfigError(obj.key("private"), "must be true: nodes reach the API server privately")
    cidrs_key = obj.key("publicAccessCidrs")
    cidrs = _list(cidrs_key, obj.get("publicAccessCidrs", []), lambda k, v: str(_cidr(k, v)))
    obj.done()
    for i, cidr in enumerate(cidrs):
        if ipaddress.IPv4Network(cidr).prefixlen == 0 and environment == "prod":
            raise ConfigError(f"{cidrs_key}[{i}]", "0.0.0.0/0 opens the API server to the internet; prod allows only an allow-list")
    return Endpoint(public_access_cidrs=cidrs)


def _node_sizes(key: str, value: Any) -> NodeSizes:
    obj = _Obj(key, value)
    types = _list(obj.key("instanceTypes"), obj.get("instanceTypes"), _str, min_items=1)
    min_size = _int(obj.key("minSize"), obj.get("minSize"))
    desired = _int(obj.key("desiredSize"), obj.get("desiredSize", min_size))
    max_size = _int(obj.key("maxSize"), obj.get("maxSize"), minimum=1)
    obj.done()
    if not min_size <= desired <= max_size:
        raise ConfigError(key, f"needs minSize <= desiredSize <= maxSize, got {min_size} <= {desired} <= {max_size}")
    return NodeSizes(types, min_size, desired, max_size)


def _admin(key: str, value: Any) -> str:
    arn = _str(key, value)
    if not _ADMIN_ARN.match(arn):
        raise ConfigError(key, f"{arn!r} is not an IAM role or user ARN (arn:aws:iam::123456789012:role/name)")
    return arn


def _tags(key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"must be a map of tag names to values, got {_show(value)}")
    for name, tag in value.items():
        if not _TAG_KEY.match(name) or name.lower().startswith("aws:"):
            raise ConfigError(f"{key}.{name}", "is not a valid tag key (1-128 chars, not starting with aws:)")
        _str(f"{key}.{name}", tag)
    return dict(value)


def parse(stack: str, region: Any, values: Mapping[str, Any]) -> StackConfig:
    """Build the typed config from raw values (`values` keyed without the namespace)."""
    root = _Obj(NAMESPACE, values, sep=":")
    environment = _str(root.key("environment"), root.get("environment"), ENVIRONMENTS)
    region = _region(region)
    k8s = _str(root.key("kubernetesVersion"), root.get("kubernetesVersion", versions.KUBERNETES_DEFAULT))
    if k8s not in versions.KUBERNETES_SUPPORTED:
        raise ConfigError(root.key("kubernetesVersion"), f"{k8s!r} is not supported; use one of: {', '.join(versions.KUBERNETES_SUPPORTED)}")
    config = StackConfig(
        stack=stack,
        region=region,
        environment=environment,
        kubernetes_version=k8s,
        vpc_cidr=_vpc_cidr(root.key("vpcCidr"), root.get("vpcCidr", "10.0.0.0/16")),
        availability_zones=_availability_zones(root.key("availabilityZones"), root.get("availabilityZones"), region),
        endpoint=_endpoint(root.key("endpoint"), root.get("endpoint", {}), environment),
        cpu_nodes=_node_sizes(root.key("cpuNodes"), root.get("cpuNodes")),
        admins=_list(root.key("admins"), root.get("admins", []), _admin),
        tags=_tags(root.key("tags"), root.get("tags", {})),
    )
    root.done()
    return config


def _decode(raw: str) -> Any:
    """Stack values arrive as strings; objects and lists as JSON text."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, (dict, list)) else raw


def load() -> StackConfig:
    """Read this stack's config through `pulumi.Config` and validate it."""
    prefix = f"{NAMESPACE}:"
    config = pulumi.Config(NAMESPACE)
    # The SDK has no "list keys" call: the engine hands config over as set_all_config or PULUMI_CONFIG.
    every_key = {*pulumi.runtime.config.CONFIG.get(), *pulumi.runtime.config.get_config_env()}
    keys = sorted(k[len(prefix):] for k in every_key if k.startswith(prefix))
    values = {}
    for key in keys:
        raw = config.get(key)
        if raw is not None:
            values[key] = _decode(raw)
    return parse(pulumi.get_stack(), pulumi.Config("aws").get("region"), values)

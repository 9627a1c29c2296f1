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
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import pulumi

from infra import versions
from infra.catalog import InstanceFacts

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


CAPACITY_TYPES = ("on-demand", "spot", "capacity-block", "reservation")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
EXPANDERS = ("least-waste", "most-pods", "priority", "random", "price")
GPU_TAINT_KEY = "nvidia.com/gpu"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class GpuPool:
    """One GPU node group. `instance` holds the facts of its (first) instance type; all its
    types share GPU count and EFA support (checked)."""

    name: str
    instance_types: tuple[str, ...]
    availability_zone: str
    min_size: int
    max_size: int
    capacity_type: str
    reservation_id: str | None
    efa: bool
    placement_group: bool
    root_volume_gib: int
    local_nvme: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    instance: InstanceFacts

    @property
    def gpus_per_node(self) -> int:
        return self.instance.gpus


FSX_DEPLOYMENT_TYPES = ("PERSISTENT_2", "SCRATCH_2")
FSX_THROUGHPUT_PER_TIB = (125, 250, 500, 1000)  # MB/s per TiB, PERSISTENT_2 (SCRATCH_2 is fixed at 200)
SCRATCH_2_THROUGHPUT_PER_TIB = 200


@dataclass(frozen=True)
class S3Link:
    bucket: str
    import_path: str
    export_path: str
    auto_import: bool


@dataclass(frozen=True)
class Fsx:
    """FSx for Lustre shared storage (throughput: `lustre_throughput_mb_s`)."""

    enabled: bool = False
    deployment_type: str = "PERSISTENT_2"
    storage_capacity_gib: int = 1200
    throughput_per_tib: int = 250
    compression: str = "LZ4"
    s3: S3Link | None = None
    availability_zone: str | None = None
    backup_retention_days: int = 0



def lustre_throughput_mb_s(capacity_gib: int, per_tib: int | None) -> float:
    """Throughput in MB/s = capacity in TiB as FSx counts it (1200 GiB is 1.2 TiB) x the per-TiB
    rate; SCRATCH_2 (no rate set) has a fixed 200 MB/s per TiB."""
    return capacity_gib / 1000 * (per_tib or SCRATCH_2_THROUGHPUT_PER_TIB)


@dataclass(frozen=True)
class Queue:
    name: str
    weight: int
    gpu_capability: int


@dataclass(frozen=True)
class PriorityClassSpec:
    name: str
    value: int


@dataclass(frozen=True)
class Team:
    """A team gets a namespace, a GPU quota, the priority classes it may use, and a queue."""

    name: str
    queue: str
    gpu_quota: int
    priority_classes: tuple[str, ...]


@dataclass(frozen=True)
class Scheduler:
    queues: tuple[Queue, ...] = ()
    priority_classes: tuple[PriorityClassSpec, ...] = ()
    teams: tuple[Team, ...] = ()


LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)


@dataclass(frozen=True)
class HealthThresholds:
    """What a healthy GPU node reaches, as fractions of the GPU's peak or absolute figures."""

    min_matmul_fraction: float = 0.6          # bf16 dense matmul TFLOP/s / peak
    min_memory_bandwidth_fraction: float = 0.7  # device-to-device copy GB/s / peak
    min_lustre_mb_s: float = 200.0            # write then read of a file on /fsx, per node
    min_bus_bandwidth_gb_s: float = 50.0      # NCCL all-reduce bus bandwidth across nodes


@dataclass(frozen=True)
class Observability:
    enabled: bool = True
    metrics_retention_days: int = 15
    metrics_storage_gib: int = 100
    log_retention_days: int = 30
    node_auto_repair: bool = True
    health: HealthThresholds = HealthThresholds()


@dataclass(frozen=True)
class Autoscaler:
    scale_down_unneeded_time: str = "10m"
    expander: str = "least-waste"


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
    gpu_pools: tuple[GpuPool, ...] = ()
    cuda_version: str | None = None
    autoscaler: Autoscaler = Autoscaler()
    fsx: Fsx = Fsx()
    scheduler: Scheduler = Scheduler()
    allow_replace: tuple[str, ...] = ()
    observability: Observability = Observability()

    @property
    def total_gpus(self) -> int:
        """The most GPUs the pools can ever provide: every pool at maxSize."""
        return sum(p.max_size * p.gpus_per_node for p in self.gpu_pools)

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


def eks_regions() -> list[str]:
    """AWS regions (aws partition) with an EKS endpoint, from the endpoint data botocore ships
    (read as a file: importing botocore.session costs more than the whole lookup)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("botocore")
    assert spec is not None and spec.submodule_search_locations, "botocore ships with boto3, a dependency"
    data = json.loads(Path(spec.submodule_search_locations[0], "data", "endpoints.json").read_text())
    aws = next(p for p in data["partitions"] if p["partition"] == "aws")
    return sorted(set(aws["services"]["eks"]["endpoints"]) & set(aws["regions"]))


def _region(value: Any) -> str:
    key = "aws:region"
    region = _str(key, value)
    known = eks_regions()
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


class Catalog(Protocol):
    """Where instance-type facts come from: AWS through invokes (the module infra.catalog)."""

    def describe(self, instance_type: str) -> InstanceFacts: ...

    def offered_in(self, instance_type: str, location: str, location_type: str = ...) -> bool: ...


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?$")
_RESERVATION = re.compile(r"^cr-[0-9a-f]{8,17}$")
_DURATION = re.compile(r"^\d+(s|m|h)$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _labels(key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"must be a map of label names to values, got {_show(value)}")
    for name, label in value.items():
        if not _LABEL_KEY.match(name):
            raise ConfigError(f"{key}.{name}", "is not a valid Kubernetes label key")
        if not isinstance(label, str):
            raise ConfigError(f"{key}.{name}", f"label values are strings, got {_show(label)}")
    return dict(value)


def _taint(key: str, value: Any) -> Taint:
    obj = _Obj(key, value)
    taint = Taint(
        key=_str(obj.key("key"), obj.get("key")),
        value=_str(obj.key("value"), obj.get("value", "true")),
        effect=_str(obj.key("effect"), obj.get("effect", "NoSchedule"), TAINT_EFFECTS),
    )
    obj.done()
    return taint


def _instance_types(key: str, value: Any, zone: str, region: str, catalog: Catalog) -> tuple[tuple[str, ...], InstanceFacts]:
    names = _list(key, value, _str, min_items=1)
    facts: list[InstanceFacts] = []
    for i, name in enumerate(names):
        if not catalog.offered_in(name, zone):
            where = f"anywhere in {region}" if not catalog.offered_in(name, region, "region") else f"in {zone}"
            raise ConfigError(f"{key}[{i}]", f"instance type {name!r} is not offered {where}")
        found = catalog.describe(name)
        if found.gpus == 0:
            raise ConfigError(f"{key}[{i}]", f"{name} has no GPU; GPU pools need GPU instance types (g6e, p4d, p5, ...)")
        facts.append(found)
    first = facts[0]
    for i, other in enumerate(facts[1:], start=1):
        if (other.gpus, other.efa_supported, other.efa_max_interfaces) != (first.gpus, first.efa_supported, first.efa_max_interfaces):
            raise ConfigError(
                key,
                f"{names[0]} ({first.gpus} GPUs, {first.efa_max_interfaces} EFA) and {names[i]} ({other.gpus} GPUs, "
                f"{other.efa_max_interfaces} EFA) differ; one pool holds types with the same GPU count and EFA support",
            )
        if set(other.architectures) != set(first.architectures):
            raise ConfigError(key, f"{names[0]} and {names[i]} have different CPU architectures")
    return names, first


def _gpu_pool(key: str, value: Any, zones: Sequence[str], region: str, catalog: Catalog) -> GpuPool:
    obj = _Obj(key, value)
    name = _dns_name(obj.key("name"), obj.get("name"))
    zone = _str(obj.key("availabilityZone"), obj.get("availabilityZone"))
    if zone not in zones:
        raise ConfigError(obj.key("availabilityZone"), f"{zone!r} is not one of higgsfield:availabilityZones ({', '.join(zones)})")
    types, facts = _instance_types(obj.key("instanceTypes"), obj.get("instanceTypes"), zone, region, catalog)
    min_size = _int(obj.key("minSize"), obj.get("minSize", 0))
    max_size = _int(obj.key("maxSize"), obj.get("maxSize"), minimum=1)
    if min_size > max_size:
        raise ConfigError(obj.key("minSize"), f"{min_size} is above maxSize {max_size}")

    capacity = obj.obj("capacity", {})
    capacity_type = _str(capacity.key("type"), capacity.get("type", "on-demand"), CAPACITY_TYPES)
    reservation = capacity.get("reservationId", None)
    capacity.done()
    reserved = capacity_type in ("capacity-block", "reservation")
    if reserved:
        if reservation is None:
            raise ConfigError(capacity.key("reservationId"), f"is required for capacity type {capacity_type}: the capacity reservation id (cr-0123456789abcdef0)")
        if not isinstance(reservation, str) or not _RESERVATION.match(reservation):
            raise ConfigError(capacity.key("reservationId"), f"{reservation!r} is not a capacity reservation id (cr-0123456789abcdef0)")
    elif reservation is not None:
        raise ConfigError(capacity.key("reservationId"), f"only capacity types capacity-block and reservation take a reservation id, not {capacity_type}")
    if capacity_type == "capacity-block" and len(types) != 1:
        raise ConfigError(obj.key("instanceTypes"), "a Capacity Block is for exactly one instance type")

    efa = _bool(obj.key("efa"), obj.get("efa", facts.efa_supported))
    if efa and not facts.efa_supported:
        raise ConfigError(obj.key("efa"), f"{facts.name} does not support EFA")
    placement = _bool(obj.key("placementGroup"), obj.get("placementGroup", efa and not reserved))
    if placement and reserved:
        raise ConfigError(obj.key("placementGroup"), f"must be false for capacity type {capacity_type}: the reservation brings its own placement")
    local_nvme = _str(obj.key("localNvme"), obj.get("localNvme", "raid0" if facts.nvme_disks else "none"), ("raid0", "none"))
    if local_nvme == "raid0" and not facts.nvme_disks:
        raise ConfigError(obj.key("localNvme"), f"{facts.name} has no local NVMe drives")
    if not set(facts.architectures) & set(versions.GPU_AMI_TYPES):
        raise ConfigError(obj.key("instanceTypes"), f"{facts.name} has no EKS AL2023 NVIDIA AMI for {', '.join(facts.architectures)}")
    pool = GpuPool(
        name=name,
        instance_types=types,
        availability_zone=zone,
        min_size=min_size,
        max_size=max_size,
        capacity_type=capacity_type,
        reservation_id=reservation if reserved else None,
        efa=efa,
        placement_group=placement,
        root_volume_gib=_int(obj.key("rootVolumeGiB"), obj.get("rootVolumeGiB", 200), minimum=50),
        local_nvme=local_nvme,
        labels=_labels(obj.key("labels"), obj.get("labels", {})),
        taints=_list(obj.key("taints"), obj.get("taints", []), _taint),
        instance=facts,
    )
    obj.done()
    return pool


def _cuda_version(key: str, value: Any) -> str | None:
    if value is None:
        return None
    cuda = _str(key, value)
    needed = versions.CUDA_MIN_DRIVER_BRANCH.get(cuda)
    if needed is None:
        raise ConfigError(key, f"unknown CUDA version {cuda!r}; known: {', '.join(versions.CUDA_MIN_DRIVER_BRANCH)}")
    if needed > versions.EKS_NVIDIA_DRIVER_BRANCH:
        raise ConfigError(
            key,
            f"CUDA {cuda} needs NVIDIA driver {needed} or newer, but the EKS AL2023 NVIDIA AMI ships driver "
            f"{versions.EKS_NVIDIA_DRIVER_BRANCH} (supports up to CUDA {_newest_cuda()})",
        )
    return cuda


def _newest_cuda() -> str:
    return max((c for c, d in versions.CUDA_MIN_DRIVER_BRANCH.items() if d <= versions.EKS_NVIDIA_DRIVER_BRANCH), key=lambda c: tuple(map(int, c.split("."))))


def _autoscaler(key: str, value: Any) -> Autoscaler:
    obj = _Obj(key, value)
    delay = _str(obj.key("scaleDownUnneededTime"), obj.get("scaleDownUnneededTime", Autoscaler.scale_down_unneeded_time))
    if not _DURATION.match(delay):
        raise ConfigError(obj.key("scaleDownUnneededTime"), f"{delay!r} is not a duration like 10m, 600s or 1h")
    expander = _str(obj.key("expander"), obj.get("expander", Autoscaler.expander), EXPANDERS)
    obj.done()
    return Autoscaler(delay, expander)


def _s3_url(key: str, value: Any, bucket: str) -> str:
    url = _str(key, value)
    if not re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?", url):
        raise ConfigError(key, f"{url!r} is not an s3:// URL (s3://bucket/prefix)")
    if url[len("s3://"):].split("/", 1)[0] != bucket:
        raise ConfigError(key, f"{url!r} is not in bucket {bucket!r} (the s3.bucket setting)")
    return url


def _fsx(key: str, value: Any, pools: Sequence[GpuPool], zones: Sequence[str]) -> Fsx:
    obj = _Obj(key, value)
    enabled = _bool(obj.key("enabled"), obj.get("enabled", False))
    kind = _str(obj.key("deploymentType"), obj.get("deploymentType", Fsx.deployment_type), FSX_DEPLOYMENT_TYPES)
    capacity = _int(obj.key("storageCapacityGiB"), obj.get("storageCapacityGiB", Fsx.storage_capacity_gib), minimum=1)
    if capacity != 1200 and capacity % 2400:
        raise ConfigError(obj.key("storageCapacityGiB"), f"{capacity} is not a valid {kind} size: use 1200 or a multiple of 2400 GiB")
    if kind == "SCRATCH_2":
        if obj.get("throughputPerTiB", None) is not None:
            raise ConfigError(obj.key("throughputPerTiB"), f"SCRATCH_2 has a fixed {SCRATCH_2_THROUGHPUT_PER_TIB} MB/s per TiB; remove the setting or use PERSISTENT_2")
        throughput = SCRATCH_2_THROUGHPUT_PER_TIB
    else:
        throughput = _int(obj.key("throughputPerTiB"), obj.get("throughputPerTiB", Fsx.throughput_per_tib))
        if throughput not in FSX_THROUGHPUT_PER_TIB:
            raise ConfigError(obj.key("throughputPerTiB"), f"{throughput} is not allowed for {kind}; use one of: {', '.join(map(str, FSX_THROUGHPUT_PER_TIB))}")
    compression = _str(obj.key("compression"), obj.get("compression", Fsx.compression), ("LZ4", "NONE"))
    backups = _int(obj.key("backupRetentionDays"), obj.get("backupRetentionDays", 7 if kind == "PERSISTENT_2" else 0))
    if backups > 90 or (kind == "SCRATCH_2" and backups):
        raise ConfigError(obj.key("backupRetentionDays"), f"{backups} is not allowed: 0-90 days for PERSISTENT_2, 0 for SCRATCH_2")
    efa_zones = sorted({p.availability_zone for p in pools if p.efa})
    default_zone = efa_zones[0] if efa_zones else (pools[0].availability_zone if pools else zones[0])
    zone = _str(obj.key("availabilityZone"), obj.get("availabilityZone", default_zone))
    if zone not in zones:
        raise ConfigError(obj.key("availabilityZone"), f"{zone!r} is not one of higgsfield:availabilityZones ({', '.join(zones)})")
    if enabled and efa_zones and zone not in efa_zones:
        raise ConfigError(
            obj.key("availabilityZone"),
            f"{zone} differs from the EFA GPU pools' zone {', '.join(efa_zones)}: every read and checkpoint would cross AZs (latency, cost)",
        )
    s3 = None
    if obj.get("s3", None) is not None:
        link = obj.obj("s3")
        bucket = _str(link.key("bucket"), link.get("bucket"))
        import_path = _s3_url(link.key("importPath"), link.get("importPath", f"s3://{bucket}"), bucket)
        export_path = _s3_url(link.key("exportPath"), link.get("exportPath", import_path), bucket)
        auto_import = _bool(link.key("autoImport"), link.get("autoImport", True))
        link.done()
        if kind == "PERSISTENT_2" and export_path != import_path:
            raise ConfigError(link.key("exportPath"), "PERSISTENT_2 links one S3 path both ways (a data repository association); make it equal importPath")
        s3 = S3Link(bucket, import_path, export_path, auto_import)
    obj.done()
    return Fsx(enabled, kind, capacity, throughput, compression, s3, zone, backups)


_MAX_USER_PRIORITY = 1_000_000_000  # above this Kubernetes reserves values for system classes


def _dns_name(key: str, value: Any) -> str:
    name = _str(key, value)
    if not _DNS_LABEL.match(name):
        raise ConfigError(key, f"{name!r} must be a lowercase DNS label of at most 30 characters")
    return name


def _queue(key: str, value: Any) -> Queue:
    obj = _Obj(key, value)
    queue = Queue(
        _dns_name(obj.key("name"), obj.get("name")),
        _int(obj.key("weight"), obj.get("weight", 1), minimum=1),
        _int(obj.key("gpuCapability"), obj.get("gpuCapability"), minimum=0),
    )
    obj.done()
    return queue


def _priority_class(key: str, value: Any) -> PriorityClassSpec:
    obj = _Obj(key, value)
    spec = PriorityClassSpec(_dns_name(obj.key("name"), obj.get("name")), _int(obj.key("value"), obj.get("value")))
    if spec.value > _MAX_USER_PRIORITY:
        raise ConfigError(obj.key("value"), f"{spec.value} is above {_MAX_USER_PRIORITY:,}, which Kubernetes reserves for system classes")
    obj.done()
    return spec


def _scheduler(key: str, value: Any, total_gpus: int) -> Scheduler:
    obj = _Obj(key, value)
    queues = _list(obj.key("queues"), obj.get("queues", []), _queue)
    classes = _list(obj.key("priorityClasses"), obj.get("priorityClasses", []), _priority_class)
    _unique(obj.key("queues"), [q.name for q in queues])
    _unique(obj.key("priorityClasses"), [c.name for c in classes])
    for i, queue in enumerate(queues):
        if queue.gpu_capability > total_gpus:
            raise ConfigError(
                f"{obj.key('queues')}[{i}].gpuCapability",
                f"{queue.gpu_capability} GPUs is more than the GPU pools can ever provide ({total_gpus}: every pool at maxSize)",
            )
    by_queue = {q.name: q for q in queues}
    class_names = {c.name for c in classes}
    teams = []
    for tkey, raw in _list(obj.key("teams"), obj.get("teams", []), lambda k, v: (k, v)):
        team = _Obj(tkey, raw)
        name = _dns_name(team.key("name"), team.get("name"))
        queue = _str(team.key("queue"), team.get("queue"))
        if queue not in by_queue:
            raise ConfigError(team.key("queue"), f"unknown queue {queue!r}; queues: {', '.join(by_queue) or 'none'}")
        quota = _int(team.key("gpuQuota"), team.get("gpuQuota"))
        if quota > by_queue[queue].gpu_capability:
            raise ConfigError(team.key("gpuQuota"), f"{quota} GPUs is above queue {queue!r}'s capability of {by_queue[queue].gpu_capability}")
        allowed = _list(team.key("priorityClasses"), team.get("priorityClasses"), _str, min_items=1)
        for j, cls in enumerate(allowed):
            if cls not in class_names:
                raise ConfigError(f"{team.key('priorityClasses')}[{j}]", f"unknown priority class {cls!r}; classes: {', '.join(sorted(class_names)) or 'none'}")
        team.done()
        teams.append(Team(name, queue, quota, allowed))
    _unique(obj.key("teams"), [t.name for t in teams])
    obj.done()
    return Scheduler(queues, classes, tuple(teams))


def _fraction(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(key, f"must be a number in (0, 1], got {_show(value)}")
    return float(value)


def _positive(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(key, f"must be a positive number, got {_show(value)}")
    return float(value)


def _observability(key: str, value: Any) -> Observability:
    obj = _Obj(key, value)
    default = Observability()
    retention = _int(obj.key("logRetentionDays"), obj.get("logRetentionDays", default.log_retention_days), minimum=1)
    if retention not in LOG_RETENTION_DAYS:
        raise ConfigError(obj.key("logRetentionDays"), f"{retention} is not a CloudWatch Logs retention; use one of: {', '.join(map(str, LOG_RETENTION_DAYS))}")
    health = obj.obj("healthcheck", {})
    thresholds = HealthThresholds(
        min_matmul_fraction=_fraction(health.key("minMatmulFraction"), health.get("minMatmulFraction", HealthThresholds.min_matmul_fraction)),
        min_memory_bandwidth_fraction=_fraction(health.key("minMemoryBandwidthFraction"), health.get("minMemoryBandwidthFraction", HealthThresholds.min_memory_bandwidth_fraction)),
        min_lustre_mb_s=_positive(health.key("minLustreMBps"), health.get("minLustreMBps", HealthThresholds.min_lustre_mb_s)),
        min_bus_bandwidth_gb_s=_positive(health.key("minBusBandwidthGBps"), health.get("minBusBandwidthGBps", HealthThresholds.min_bus_bandwidth_gb_s)),
    )
    health.done()
    result = Observability(
        enabled=_bool(obj.key("enabled"), obj.get("enabled", default.enabled)),
        metrics_retention_days=_int(obj.key("metricsRetentionDays"), obj.get("metricsRetentionDays", default.metrics_retention_days), minimum=1),
        metrics_storage_gib=_int(obj.key("metricsStorageGiB"), obj.get("metricsStorageGiB", default.metrics_storage_gib), minimum=10),
        log_retention_days=retention,
        node_auto_repair=_bool(obj.key("nodeAutoRepair"), obj.get("nodeAutoRepair", default.node_auto_repair)),
        health=thresholds,
    )
    obj.done()
    return result


def _gpu_pools(key: str, value: Any, zones: Sequence[str], region: str, catalog: Catalog) -> tuple[GpuPool, ...]:
    pools = _list(key, value, lambda k, v: _gpu_pool(k, v, zones, region, catalog))
    _unique(key, [p.name for p in pools])
    return pools


def parse(stack: str, region: Any, values: Mapping[str, Any], catalog: Catalog | None = None) -> StackConfig:
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
    pools_value = root.get("gpuPools", [])
    if pools_value and catalog is None:
        raise ConfigError(root.key("gpuPools"), "GPU pools need an instance-type catalog to be validated")
    config = replace(
        config,
        gpu_pools=_gpu_pools(root.key("gpuPools"), pools_value, config.availability_zones, region, catalog) if pools_value else (),
        cuda_version=_cuda_version(root.key("cudaVersion"), root.get("cudaVersion", None)),
        autoscaler=_autoscaler(root.key("autoscaler"), root.get("autoscaler", {})),
    )
    config = replace(
        config,
        fsx=_fsx(root.key("fsx"), root.get("fsx", {}), config.gpu_pools, config.availability_zones),
        scheduler=_scheduler(root.key("scheduler"), root.get("scheduler", {}), config.total_gpus),
        allow_replace=_list(root.key("allowReplace"), root.get("allowReplace", []), _str),
        observability=_observability(root.key("observability"), root.get("observability", {})),
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
    from infra import catalog

    return parse(pulumi.get_stack(), pulumi.Config("aws").get("region"), values, catalog=catalog)

"""The typed stack configuration: the only module that reads `pulumi.Config`.

The stack file's settings are declared once, as frozen pydantic models (`Setting` subclasses):
attribute names are what the components read, aliases are the stack-file keys (camelCase; the
root model's are the full keys, `higgsfield:gpuPools`), constraints and defaults live on the
fields, and what only we know (AWS catalog facts, cross-field rules) are validators on the
models. `parse()` validates everything at once and raises one `ConfigError` listing every
problem with its full key (`higgsfield:gpuPools[1].availabilityZone: ...`); it is a
`pulumi.RunError`, so `pulumi up` prints the lines without a traceback. The JSON Schema of
stack files (`schemas/stack.schema.json`) and the README's config table are generated from
these models (`higgsfield schema --write`).
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Annotated, Any, Literal, Protocol, get_args, get_origin

import pulumi
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from infra import versions
from infra.bundled import where_offered
from infra.catalog import InstanceFacts

NAMESPACE = "higgsfield"
ENVIRONMENTS = ("dev", "staging", "prod")


# --- errors --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One wrong setting: where (`loc`, the path of stack-file keys and list indexes, the first
    one a full key) and what is wrong."""

    loc: tuple[str | int, ...]
    message: str
    line: int | None = None  # where in the stack file, when the reader knows better than the key

    @property
    def key(self) -> str:
        return key_of(self.loc)


def key_of(loc: tuple[str | int, ...]) -> str:
    """`("higgsfield:gpuPools", 1, "availabilityZone")` -> `higgsfield:gpuPools[1].availabilityZone`."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part != "[key]":  # pydantic's marker for "the key of this map entry"
            text += f".{part}" if text else str(part)
    return text


class ConfigError(pulumi.RunError):
    """Stack settings are wrong. `key` is the full config key of the first problem (e.g.
    `higgsfield:vpcCidr`), `problems` all of them; the message has one line per problem."""

    def __init__(self, key: str, message: str, problems: list[Problem] | None = None) -> None:
        self.problems = problems or [Problem((key,), message)]
        super().__init__("\n".join(f"{p.key}: {p.message}" for p in self.problems))
        self.key = key


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _parse_where(where: str) -> tuple[str | int, ...]:
    """`capacity.reservationId` / `instanceTypes[0]` / `[1]` / `` -> loc parts."""
    parts: list[str | int] = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", where):
        parts.append(int(index) if index else name)
    return tuple(parts)


class Problems:
    """What one validator found wrong, each relative to the object it validates (`where` is a
    path of stack-file keys: `minSize`, `capacity.reservationId`, `instanceTypes[0]`, `` for
    the object itself). `raise_any()` ends the validator with all of them at once."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []

    def add(self, where: str, message: str) -> None:
        self.found.append((where, message))

    def __bool__(self) -> bool:
        return bool(self.found)

    def raise_any(self) -> None:
        if self.found:
            raise PydanticCustomError("higgsfield", "{text}", {"text": "; ".join(m for _, m in self.found), "problems": list(self.found)})


def _expected(ctx: Mapping[str, Any]) -> str:
    """pydantic's "'a', 'b' or 'c'" as `a, b, c`."""
    text = str(ctx.get("expected", ""))
    quoted = re.findall(r"'([^']*)'", text)
    return ", ".join(quoted) if quoted else text.replace(" or ", ", ")


_MESSAGES: dict[str, Callable[[Any, Mapping[str, Any]], str]] = {
    "missing": lambda v, c: "is required",
    "literal_error": lambda v, c: f"{_show(v)} is not one of: {_expected(c)}",
    "int_type": lambda v, c: f"must be an integer, got {_show(v)}",
    "int_parsing": lambda v, c: f"must be an integer, got {_show(v)}",
    "int_from_float": lambda v, c: f"must be an integer, got {_show(v)}",
    "bool_type": lambda v, c: f"must be true or false, got {_show(v)}",
    "bool_parsing": lambda v, c: f"must be true or false, got {_show(v)}",
    "float_type": lambda v, c: f"must be a number, got {_show(v)}",
    "float_parsing": lambda v, c: f"must be a number, got {_show(v)}",
    "string_type": lambda v, c: f"must be a string, got {_show(v)}",
    "string_too_short": lambda v, c: "must not be empty",
    "string_too_long": lambda v, c: f"has at most {c.get('max_length')} characters, got {len(v) if isinstance(v, str) else '?'}",
    "too_short": lambda v, c: f"needs at least {c.get('min_length')} entries, got {c.get('actual_length')}",
    "too_long": lambda v, c: f"takes at most {c.get('max_length')} entries, got {c.get('actual_length')}",
    "greater_than_equal": lambda v, c: f"must be at least {c.get('ge')}, got {_show(v)}",
    "greater_than": lambda v, c: f"must be more than {c.get('gt')}, got {_show(v)}",
    "less_than_equal": lambda v, c: f"must be at most {c.get('le')}, got {_show(v)}",
    "tuple_type": lambda v, c: f"must be a list, got {_show(v)}",
    "list_type": lambda v, c: f"must be a list, got {_show(v)}",
    "dict_type": lambda v, c: f"must be a map of names to values, got {_show(v)}",
    "model_type": lambda v, c: f"must be an object (a map of settings), got {_show(v)}",
    "model_attributes_type": lambda v, c: f"must be an object (a map of settings), got {_show(v)}",
    "value_error": lambda v, c: str(c.get("error", "")),
}


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class that holds the setting at `loc` (for "did you mean")."""
    model: Any = StackConfig
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        if part not in fields:
            return None
        model = _model_in(fields[part].annotation)
        if model is None:
            return None
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _suggest(name: str, allowed: list[str]) -> str | None:
    """The allowed key `name` most likely means: close spelling, or the same key in our namespace."""
    if ":" not in name and f"{NAMESPACE}:{name}" in allowed:
        return f"{NAMESPACE}:{name}"
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    if close:
        return close[0]
    short = {a.split(":", 1)[-1]: a for a in allowed}
    close = difflib.get_close_matches(name.split(":", 1)[-1], list(short), n=1, cutoff=0.75)
    return short[close[0]] if close else None


def _unknown(loc: tuple[str | int, ...]) -> str:
    name = str(loc[-1])
    parent = _model_at(loc[:-1])
    allowed = sorted(f.alias or n for n, f in parent.model_fields.items() if n not in _HIDDEN) if parent else []
    guess = _suggest(name, allowed)
    hint = f"; did you mean {guess}?" if guess else ""
    if len(loc) > 1:
        return f"unknown setting{hint} (allowed: {', '.join(allowed)})"
    namespace = name.split(":", 1)[0] if ":" in name else None
    if namespace is None:
        return f"config keys carry a namespace (NAMESPACE:key){hint or f'; this program reads {NAMESPACE}:* and aws:region'}"
    if namespace == "aws":
        return f"not an aws setting this program reads (it reads aws:region, and the provider, encrypted, {', '.join(SECRET_ONLY_KEYS)}; set AWS_PROFILE in your shell){hint}"
    if namespace != NAMESPACE:
        return f"unknown config namespace {namespace!r} (this program reads {NAMESPACE}:* and aws:region){hint}"
    return f"unknown setting{hint}"


def problems_of(error: ValidationError) -> list[Problem]:
    """pydantic's errors as our problems: full keys, our wording, one per wrong setting."""
    found = []
    for e in error.errors(include_url=False):
        loc, ctx = tuple(e["loc"]), e.get("ctx") or {}
        if e["type"] == "higgsfield":
            found += [Problem(loc + _parse_where(where), message) for where, message in ctx["problems"]]
        elif e["type"] == "extra_forbidden":
            found.append(Problem(loc, _unknown(loc)))
        else:
            message = _MESSAGES.get(e["type"], lambda v, c: e["msg"])(e.get("input"), ctx)
            found.append(Problem(loc, message))
    return found


# --- building blocks of settings ------------------------------------------------------------


class Setting(BaseModel):
    """The base of every config object: immutable, stack-file keys are camelCase aliases of
    the attribute names, unknown keys are errors, and `null` means "use the default".
    In code, objects are built with attribute names as keywords: `Taint(key="k", value="v")`
    (no `__init__` override: pydantic would then validate twice, the second time without context)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, validate_by_name=True, validate_by_alias=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    def _fill(self, **values: Any) -> None:
        """Set derived defaults from an after-validator (the object is not yet shared)."""
        for name, value in values.items():
            object.__setattr__(self, name, value)


def derived(description: str, **kwargs: Any) -> Any:
    """A field whose default depends on other settings; an after-validator fills it in with
    `self._fill(...)`. (The JSON Schema shows no default for it: `infra/cli/schema.py`.)"""
    return Field(None, description=description, **kwargs)


Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict(), Field(min_length=1)]


def number(minimum: int, maximum: int | None = None, why: str = "") -> Any:
    """An integer setting with bounds; `why` says where an upper bound comes from."""

    def check(value: int) -> int:
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ValueError(f"must be at most {maximum:,}{f' ({why})' if why else ''}, got {value:,}")
        return value

    bounds = {"minimum": minimum, **({"maximum": maximum} if maximum is not None else {})}
    return Annotated[int, Strict(), AfterValidator(check), Field(json_schema_extra=bounds)]


def matching(pattern: str, explain: str) -> Any:
    """A string setting that matches `pattern` (anchored; also written into the JSON Schema)."""
    rx = re.compile(pattern)

    def check(value: str) -> str:
        if not rx.fullmatch(value):
            raise ValueError(f"{value!r} {explain}")
        return value

    return Annotated[str, Strict(), AfterValidator(check), Field(json_schema_extra={"pattern": pattern})]


# Kubernetes object names, label keys and values, as the API server checks them:
# kubernetes/apimachinery:pkg/util/validation/validation.go@v0.35.7 (IsDNS1123Label: dns1123LabelFmt,
# 63 chars; IsDNS1123Subdomain: 253) and pkg/api/validate/content/kube.go@v0.35.7 (IsLabelKey, the
# qualified name: optional DNS-subdomain prefix + "/" + labelKeyFmt name of 63; IsLabelValue:
# labelValueFmt, 63). Taint keys are qualified names and taint values label values
# (kubernetes/kubernetes:pkg/apis/core/validation/validation.go validateTaints). Our names are
# DNS labels of at most 30: they are prefixed (higgsfield-<stack>-...) into names of 63.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?$"
DnsLabel = matching(DNS_LABEL, "must be a lowercase DNS label of at most 30 characters (a-z, 0-9, '-'; starts and ends alphanumeric)")
QUALIFIED_NAME = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"


def _qualified_name(value: str) -> str:
    prefix, _, name = value.rpartition("/")
    if not re.fullmatch(QUALIFIED_NAME, value) or len(prefix) > 253 or len(name) > 63:
        raise ValueError(f"{value!r} is not a Kubernetes qualified name ([prefix/]name: name up to 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric; prefix a DNS subdomain)")
    return value


QualifiedName = Annotated[str, Strict(), AfterValidator(_qualified_name), Field(json_schema_extra={"pattern": QUALIFIED_NAME})]
LabelValue = matching(LABEL_VALUE, "is not a Kubernetes label value (up to 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric, or empty)")
InstanceTypeName = matching(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", "is not an EC2 instance type name (family.size, e.g. p5.48xlarge)")

# EKS managed node groups: NodegroupScalingConfig minSize/desiredSize >= 0, maxSize >= 1
# (botocore/data/eks/2017-11-01/service-2.json shapes ZeroCapacity, Capacity); "Nodes per managed
# node group: 450" is the EKS service quota (docs.aws.amazon.com/eks/latest/userguide/service-quotas.html).
NODES_PER_GROUP = 450
_NODE_QUOTA = "the EKS quota of nodes per managed node group; split the pool"
NodeCount = number(0, NODES_PER_GROUP, _NODE_QUOTA)
MaxNodes = number(1, NODES_PER_GROUP, _NODE_QUOTA)
# gp3 volumes: 1 - 65,536 GiB (botocore/data/ec2/2016-11-15/service-2.json EbsBlockDevice.VolumeSize).
GP3_MAX_GIB = 65536


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.IPv4Network(value))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not an IPv4 CIDR ({exc})") from None


Cidr = Annotated[str, Strict(), AfterValidator(_cidr)]


# --- the typed config ---------------------------------------------------------------------


class Endpoint(Setting):
    """Where the Kubernetes API is reachable from. Private access is always on."""

    private: Bool = True
    """Must be true: nodes reach the API server privately."""
    public_access_cidrs: tuple[Cidr, ...] = ()
    """CIDRs allowed to reach the public endpoint; empty keeps the API private (prod: no 0.0.0.0/0)."""

    @field_validator("private")
    @classmethod
    def _always_private(cls, value: bool) -> bool:
        if not value:
            raise ValueError("must be true: nodes reach the API server privately")
        return value

    @property
    def public(self) -> bool:
        return bool(self.public_access_cidrs)


class NodeSizes(Setting):
    """The system (CPU) node group."""

    instance_types: tuple[InstanceTypeName, ...] = Field(min_length=1)
    """EC2 instance types, offered in aws:region, one CPU architecture (x86_64)."""
    min_size: NodeCount
    """Nodes the autoscaler never goes below."""
    desired_size: NodeCount = derived("Nodes at creation; default minSize (the autoscaler owns it afterwards).")
    max_size: MaxNodes
    """Nodes the autoscaler never goes above."""

    @model_validator(mode="after")
    def _sizes(self, info: ValidationInfo) -> NodeSizes:
        problems = Problems()
        if self.desired_size is None:
            self._fill(desired_size=self.min_size)
        if not self.min_size <= self.desired_size <= self.max_size:
            problems.add("", f"needs minSize <= desiredSize <= maxSize, got {self.min_size} <= {self.desired_size} <= {self.max_size}")
        catalog, region = _catalog(info)
        if catalog is not None:
            for i, name in enumerate(self.instance_types):
                if not catalog.offered_in(name, region, "region"):
                    problems.add(f"instanceTypes[{i}]", f"instance type {name!r} is not offered anywhere in {region}; {where_offered(name, region)}")
                elif "x86_64" not in catalog.describe(name).architectures:
                    problems.add(f"instanceTypes[{i}]", f"{name} is not x86_64; the system nodes run {versions.CPU_AMI_TYPE}")
        problems.raise_any()
        return self


CAPACITY_TYPES = ("on-demand", "spot", "capacity-block", "reservation")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
EXPANDERS = ("least-waste", "most-pods", "priority", "random", "price")
GPU_TAINT_KEY = "nvidia.com/gpu"
# The health gate's taint on every new node of a gated pool (components/healthgate.py): the Cluster
# Autoscaler's startup-taint prefix (StartupTaintPrefix, kubernetes/autoscaler:cluster-autoscaler/
# utils/taints/taints.go@cluster-autoscaler-1.35.0), so scale-from-zero plans ignore it.
STARTUP_TAINT_KEY = "startup-taint.cluster-autoscaler.kubernetes.io/higgsfield-health"


class Taint(Setting):
    """A Kubernetes taint on a pool's nodes."""

    key: QualifiedName
    """A qualified name, e.g. dedicated or example.com/team."""
    value: LabelValue = "true"
    """A label value (up to 63 characters)."""
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"] = "NoSchedule"


UTC_TIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?Z$"
UtcTime = matching(UTC_TIME, "is not a UTC time like \"2027-01-04T11:30:00Z\" (quote it: unquoted, YAML reads a timestamp)")
Duration = matching(r"^\d+(s|m|h)$", "is not a duration like 10m, 600s or 1h")


def seconds_of(duration: str) -> int:
    """`10m` -> 600 (the Duration settings: s, m or h)."""
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# EC2 terminates what still runs in a Capacity Block at its end; AWS asks to scale to zero "more
# than 30 minutes before the Capacity Block reservation end time" (EC2 Auto Scaling user guide,
# launch-template-capacity-blocks, "Operational guidelines"; EKS user guide, capacity-blocks).
CAPACITY_BLOCK_END_MARGIN_S = 30 * 60


class Capacity(Setting):
    """How a GPU pool buys its instances."""

    type: Literal["on-demand", "spot", "capacity-block", "reservation"] = "on-demand"
    """reservation: an On-Demand Capacity Reservation; capacity-block: an EC2 Capacity Block for ML."""
    reservation_id: Annotated[str, Strict(), AfterValidator(lambda v: _reservation_id(v))] | None = None
    """The capacity reservation (cr-0123456789abcdef0); required for capacity-block and reservation, else not allowed."""
    start: UtcTime | None = None
    """capacity-block only (required): when the block begins, UTC ("2027-01-04T11:30:00Z"); the pool's ASG opens then."""
    end: UtcTime | None = None
    """capacity-block only (required): when the block ends, UTC; EC2 terminates what still runs then."""
    drain_before: Duration = "1h"
    """capacity-block: how long before the end the pool scales to zero (jobs get SIGTERM and flush a checkpoint); more than 30m plus higgsfield:checkpoints.terminationGracePeriod."""

    @property
    def window(self) -> tuple[datetime, datetime] | None:
        """(start, end) of a Capacity Block, else None."""
        return (utc(self.start), utc(self.end)) if self.start and self.end else None

    @property
    def drain_at(self) -> datetime | None:
        """When the pool scales to zero: drainBefore ahead of the block's end."""
        return utc(self.end) - timedelta(seconds=seconds_of(self.drain_before)) if self.end else None

    @property
    def reserved(self) -> bool:
        return self.type in ("capacity-block", "reservation")

    @model_validator(mode="after")
    def _reservation(self) -> Capacity:
        problems = Problems()
        if self.reserved and self.reservation_id is None:
            problems.add("reservationId", f"is required for capacity type {self.type}: the capacity reservation id (cr-0123456789abcdef0)")
        if not self.reserved and self.reservation_id is not None:
            problems.add("reservationId", f"only capacity types capacity-block and reservation take a reservation id, not {self.type}")
        for where in ("start", "end"):
            if self.type == "capacity-block" and getattr(self, where) is None:
                problems.add(where, f"is required for capacity type capacity-block: the block's {where} time in UTC, from `aws ec2 describe-capacity-reservations`")
            if self.type != "capacity-block" and getattr(self, where) is not None:
                problems.add(where, f"only capacity type capacity-block has a window, not {self.type}")
        if self.window and self.drain_at is not None:
            start, end = self.window
            if end <= start:
                problems.add("end", f"{self.end} is not after start {self.start}")
            elif self.drain_at <= start:
                problems.add("drainBefore", f"{self.drain_before} before the end leaves no time in the block ({self.start} to {self.end})")
        problems.raise_any()
        return self


def _reservation_id(value: str) -> str:
    if not re.fullmatch(r"cr-[0-9a-f]{8,17}", value):
        raise ValueError(f"{value!r} is not a capacity reservation id (cr-0123456789abcdef0)")
    return value


class Catalog(Protocol):
    """Where instance-type facts come from: AWS through invokes (the module infra.catalog)."""

    def describe(self, instance_type: str) -> InstanceFacts: ...

    def offered_in(self, instance_type: str, location: str, location_type: str = ...) -> bool: ...


def _catalog(info: ValidationInfo) -> tuple[Catalog | None, str]:
    """The instance-type catalog and the (valid) region the validation runs with, if any."""
    context = info.context or {}
    region = context.get("region")
    return (context.get("catalog") if region else None), region or ""


# A GPU pool's scale-down-unneeded time unless set: long enough for the last node of a gang to
# launch, boot the NVIDIA AMI, pass the health gate and join while its first nodes wait idle. Not
# measured here: a judgement for P-family instances (minutes to boot, capacity arriving in batches).
GPU_SCALE_DOWN_UNNEEDED_DEFAULT = "30m"


class HealthGate(Setting):
    """The node checks every new node of a GPU pool passes before jobs may use it (components/healthgate.py)."""

    enabled: Bool = True
    """Nodes join with the startup taint and the gate removes it on a pass; prod needs a reason to turn it off."""
    reason: Str | None = None
    """Why the gate is off (required with enabled: false in prod)."""
    on_failure: Literal["keep", "replace"] = "keep"
    """keep: a failed node stays tainted for a person to look at; replace: it is also marked Unhealthy in its Auto Scaling group, which terminates and replaces it."""
    timeout: Duration = "20m"
    """How long the checks may take (GPU burn, memory, EFA, Lustre) before the node counts as failed."""


class GpuPool(Setting):
    """One GPU node group. `instance` holds the facts of its (first) instance type; all its
    types share GPU count and EFA support (checked)."""

    name: DnsLabel
    """Nodes carry the label higgsfield.io/pool=NAME."""
    instance_types: tuple[InstanceTypeName, ...] = Field(min_length=1)
    """GPU instance types, all with the same GPU count, EFA support and architecture, offered in availabilityZone."""
    availability_zone: Str
    """One of higgsfield:availabilityZones."""
    min_size: NodeCount = 0
    """0 costs nothing while idle."""
    max_size: MaxNodes
    """The most nodes the autoscaler adds."""
    capacity: Capacity = Capacity()
    efa: Bool = derived("Attach every EFA card; default true when the type supports EFA.")
    placement_group: Bool = derived("Cluster placement group; default true with EFA, must be false for reservation / capacity-block.")
    root_volume_gib: number(50, GP3_MAX_GIB, "the gp3 maximum") = Field(200, alias="rootVolumeGiB")
    """Root gp3 volume, GiB."""
    local_nvme: Literal["raid0", "none"] = derived("raid0 stripes the local NVMe drives; default raid0 when the type has them, else none.")
    labels: dict[QualifiedName, LabelValue] = {}
    """Kubernetes labels on the nodes."""
    taints: tuple[Taint, ...] = ()
    """Taints in addition to nvidia.com/gpu=true:NoSchedule."""
    scale_down_unneeded_time: Duration = GPU_SCALE_DOWN_UNNEEDED_DEFAULT
    """How long a node of this pool stays unneeded before the autoscaler removes it (its ASG's autoscaling-options tag); long enough for a gang's last node to boot and join."""
    health_gate: HealthGate = HealthGate()
    _instance: InstanceFacts | None = PrivateAttr(None)

    @property
    def instance(self) -> InstanceFacts:
        assert self._instance is not None, "GpuPool validated without an instance-type catalog"
        return self._instance

    @property
    def gpus_per_node(self) -> int:
        return self.instance.gpus

    @property
    def capacity_type(self) -> str:
        return self.capacity.type

    @property
    def reservation_id(self) -> str | None:
        return self.capacity.reservation_id

    @model_validator(mode="after")
    def _facts(self, info: ValidationInfo) -> GpuPool:
        problems = Problems()
        if self.min_size > self.max_size:
            problems.add("minSize", f"{self.min_size} is above maxSize {self.max_size}")
        catalog, region = _catalog(info)
        if catalog is None or not re.fullmatch(re.escape(region) + r"[a-z]", self.availability_zone):
            problems.raise_any()  # the zone itself is reported by the stack (not in its availabilityZones)
            return self
        facts = self._instance_facts(catalog, region, problems)
        if facts is None:
            problems.raise_any()
            return self
        reserved = self.capacity.reserved
        if self.capacity.type == "capacity-block" and len(self.instance_types) != 1:
            problems.add("instanceTypes", "a Capacity Block is for exactly one instance type")
        efa = facts.efa_supported if self.efa is None else self.efa
        if efa and not facts.efa_supported:
            problems.add("efa", f"{facts.name} does not support EFA")
        placement = (efa and not reserved) if self.placement_group is None else self.placement_group
        if placement and reserved:
            problems.add("placementGroup", f"must be false for capacity type {self.capacity.type}: the reservation brings its own placement")
        local_nvme = ("raid0" if facts.nvme_disks else "none") if self.local_nvme is None else self.local_nvme
        if local_nvme == "raid0" and not facts.nvme_disks:
            problems.add("localNvme", f"{facts.name} has no local NVMe drives")
        if not set(facts.architectures) & set(versions.GPU_AMI_TYPES):
            problems.add("instanceTypes", f"{facts.name} has no EKS AL2023 NVIDIA AMI for {', '.join(facts.architectures)}")
        problems.raise_any()
        self._fill(efa=efa, placement_group=placement, local_nvme=local_nvme)
        self._instance = facts
        return self

    def _instance_facts(self, catalog: Catalog, region: str, problems: Problems) -> InstanceFacts | None:
        zone, facts = self.availability_zone, []
        for i, name in enumerate(self.instance_types):
            if not catalog.offered_in(name, zone):
                where = f"anywhere in {region}" if not catalog.offered_in(name, region, "region") else f"in {zone}"
                problems.add(f"instanceTypes[{i}]", f"instance type {name!r} is not offered {where}; {where_offered(name, region)}")
                continue
            found = catalog.describe(name)
            if found.gpus == 0:
                problems.add(f"instanceTypes[{i}]", f"{name} has no GPU; GPU pools need GPU instance types (g6e, p4d, p5, ...)")
                continue
            facts.append(found)
        if problems or not facts:
            return None
        first = facts[0]
        for other in facts[1:]:
            if (other.gpus, other.efa_supported, other.efa_max_interfaces) != (first.gpus, first.efa_supported, first.efa_max_interfaces):
                problems.add(
                    "instanceTypes",
                    f"{first.name} ({first.gpus} GPUs, {first.efa_max_interfaces} EFA) and {other.name} ({other.gpus} GPUs, "
                    f"{other.efa_max_interfaces} EFA) differ; one pool holds types with the same GPU count and EFA support",
                )
            elif set(other.architectures) != set(first.architectures):
                problems.add("instanceTypes", f"{first.name} and {other.name} have different CPU architectures")
        return None if problems else first


FSX_DEPLOYMENT_TYPES = ("PERSISTENT_2", "SCRATCH_2")
FSX_THROUGHPUT_PER_TIB = (125, 250, 500, 1000)  # MB/s per TiB, PERSISTENT_2 (SCRATCH_2 is fixed at 200)
SCRATCH_2_THROUGHPUT_PER_TIB = 200
# StorageCapacity: 0 - 2,147,483,647 GiB in the API (botocore/data/fsx/2018-03-01/service-2.json
# shape StorageCapacity); for SSD Lustre "1200 GiB, 2400 GiB, and increments of 2400 GiB" (same
# file, CreateFileSystemRequest.StorageCapacity). The account quota on total Lustre storage is lower.
FSX_MAX_GIB = 2_147_483_647
S3_BUCKET = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"


class S3Link(Setting):
    """An S3 data repository linked to the file system."""

    bucket: matching(S3_BUCKET, "is not an S3 bucket name (3-63 of a-z 0-9 . -)")
    """The S3 bucket holding the data set."""
    import_path: Str = derived("s3://bucket/prefix read into the file system; default s3://BUCKET.")
    export_path: Str = derived("Where changes are written back; default importPath (PERSISTENT_2: must equal it).")
    auto_import: Bool = True
    """Import new, changed and deleted S3 objects automatically (a delete in S3 removes the file)."""
    export_deletions: Bool = False
    """Also export deletions to S3 (PERSISTENT_2): off, so an `rm -rf` on Lustre never deletes the S3 copy."""
    dataset: DnsLabel | None = None
    """The shared dataset (higgsfield:fsx.datasets) the link fills, at /datasets/NAME (PERSISTENT_2: required)."""

    @model_validator(mode="after")
    def _paths(self) -> S3Link:
        problems = Problems()
        import_path = self.import_path or f"s3://{self.bucket}"
        for where, url in (("importPath", import_path), ("exportPath", self.export_path)):
            if url is None:
                continue
            if not re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?", url):
                problems.add(where, f"{url!r} is not an s3:// URL (s3://bucket/prefix)")
            elif url[len("s3://"):].split("/", 1)[0] != self.bucket:
                problems.add(where, f"{url!r} is not in bucket {self.bucket!r} (the s3.bucket setting)")
        problems.raise_any()
        self._fill(import_path=import_path, export_path=self.export_path or import_path)
        return self


class Dataset(Setting):
    """A shared dataset directory on Lustre."""

    name: DnsLabel
    owner: DnsLabel
    """The team that writes it (higgsfield:scheduler.teams)."""
    readers: tuple[DnsLabel, ...] = ()
    """Teams that mount it read-only."""


class Fsx(Setting):
    """FSx for Lustre shared storage (throughput: `lustre_throughput_mb_s`)."""

    enabled: Bool = False
    """Create the file system, its CSI driver and the shared PVC."""
    deployment_type: Literal["PERSISTENT_2", "SCRATCH_2"] = "PERSISTENT_2"
    """PERSISTENT_2 keeps data (and is protected in prod); SCRATCH_2 is cheaper and not replicated."""
    storage_capacity_gib: number(1200, FSX_MAX_GIB, "the FSx API maximum") = Field(1200, alias="storageCapacityGiB")
    """1200 or a multiple of 2400 GiB."""
    throughput_per_tib: Literal[125, 250, 500, 1000] = derived(
        "PERSISTENT_2 MB/s per TiB, default 250; SCRATCH_2 is fixed at 200 (leave unset).", alias="throughputPerTiB")
    compression: Literal["LZ4", "NONE"] = "LZ4"
    """Data compression on the file system."""
    s3: S3Link | None = None
    availability_zone: Str = derived("Default: the EFA GPU pools' zone (else the first pool's, else the first AZ); must be the EFA pools' zone.")
    backup_retention_days: number(0, 90, "the FSx maximum") = derived("0-90 days for PERSISTENT_2 (default 7); 0 for SCRATCH_2.")
    datasets: tuple[Dataset, ...] = ()
    """Shared directories /datasets/NAME: read-write for the owner team, read-only for the readers, invisible to the rest."""

    @model_validator(mode="after")
    def _kind(self) -> Fsx:
        problems = Problems()
        _duplicates(problems, "datasets", [d.name for d in self.datasets])
        if self.s3 is not None and self.deployment_type == "PERSISTENT_2":
            if self.s3.dataset is None:
                problems.add("s3.dataset", "name the dataset (higgsfield:fsx.datasets) the S3 link fills: it appears at /datasets/NAME for that dataset's teams")
            elif self.s3.dataset not in {d.name for d in self.datasets}:
                problems.add("s3.dataset", f"unknown dataset {self.s3.dataset!r}; datasets: {', '.join(d.name for d in self.datasets) or 'none'}")
        kind, capacity = self.deployment_type, self.storage_capacity_gib
        if capacity != 1200 and capacity % 2400:
            problems.add("storageCapacityGiB", f"{capacity} is not a valid {kind} size: use 1200 or a multiple of 2400 GiB")
        throughput = self.throughput_per_tib
        if kind == "SCRATCH_2":
            if throughput is not None:
                problems.add("throughputPerTiB", f"SCRATCH_2 has a fixed {SCRATCH_2_THROUGHPUT_PER_TIB} MB/s per TiB; remove the setting or use PERSISTENT_2")
            throughput = SCRATCH_2_THROUGHPUT_PER_TIB
        backups = self.backup_retention_days
        if backups is None:
            backups = 7 if kind == "PERSISTENT_2" else 0
        if kind == "SCRATCH_2" and backups:
            problems.add("backupRetentionDays", f"{backups} is not allowed: 0-90 days for PERSISTENT_2, 0 for SCRATCH_2")
        if self.s3 is not None and kind == "PERSISTENT_2" and self.s3.export_path != self.s3.import_path:
            problems.add("s3.exportPath", "PERSISTENT_2 links one S3 path both ways (a data repository association); make it equal importPath")
        problems.raise_any()
        self._fill(throughput_per_tib=throughput or 250, backup_retention_days=backups)
        return self

    @property
    def linked_buckets(self) -> list[str]:
        """The S3 buckets the file system is linked to (the deploy role may manage them)."""
        return [self.s3.bucket] if self.enabled and self.s3 else []


def lustre_throughput_mb_s(capacity_gib: int, per_tib: int | None) -> float:
    """Throughput in MB/s = capacity in TiB as FSx counts it (1200 GiB is 1.2 TiB) x the per-TiB
    rate; SCRATCH_2 (no rate set) has a fixed 200 MB/s per TiB."""
    return capacity_gib / 1000 * (per_tib or SCRATCH_2_THROUGHPUT_PER_TIB)


_MAX_USER_PRIORITY = 1_000_000_000  # above this Kubernetes reserves values for system classes


# Volcano's scheduler creates the queues `root` and `default` itself at start (default: reclaimable,
# jobs naming no queue land there): volcano-sh/volcano:pkg/scheduler/cache/cache.go@v1.15.1
# newDefaultAndRootQueue. The Volcano component manages `default` (never reclaimable, no GPUs); a
# configured queue may not take either name.
VOLCANO_QUEUES = ("root", "default")


class Queue(Setting):
    """A Volcano queue (never reclaimed from)."""

    name: DnsLabel
    """Lowercase DNS label, at most 30 characters."""
    weight: number(1) = 1
    """Share of the cluster when queues compete (drf)."""
    gpu_capability: number(0)
    """GPUs the queue may hold at most; no more than the pools can provide."""

    @field_validator("name")
    @classmethod
    def _not_volcanos(cls, name: str) -> str:
        if name in VOLCANO_QUEUES:
            raise ValueError(f"{name!r} is a queue Volcano creates and the platform manages (root, default: no GPUs); name the team's queue")
        return name


class PriorityClassSpec(Setting):
    """A PriorityClass teams may use (never preempts)."""

    name: DnsLabel
    """Lowercase DNS label, at most 30 characters."""
    value: number(-2_147_483_648)
    """Higher runs first; at most 1,000,000,000 (above is reserved for system classes)."""

    @field_validator("name")
    @classmethod
    def _not_system(cls, name: str) -> str:
        if name.startswith("system-"):
            raise ValueError(f"{name!r}: Kubernetes reserves the system- prefix for its own priority classes")
        return name

    @field_validator("value")
    @classmethod
    def _user_range(cls, value: int) -> int:
        if value > _MAX_USER_PRIORITY:
            raise ValueError(f"{value} is above {_MAX_USER_PRIORITY:,}, which Kubernetes reserves for system classes")
        return value


# Namespaces Kubernetes, EKS add-ons and this platform own; a team may not be named like one
# (its namespace would be the platform's). kube-* is Kubernetes' own prefix; higgsfield-* ours.
RESERVED_NAMESPACES = ("default", "monitoring", "volcano-system", "kubeflow", "amazon-cloudwatch")
RESERVED_NAMESPACE_PREFIXES = ("kube-", "higgsfield-", "volcano-", "aws-", "amazon-", "eks-")
# POSIX ids: below 1000 are the system's, 65534 is nobody; Lustre ids are 32-bit unsigned, but
# Kubernetes runAsUser is checked against int32 by PSA tooling, so stay below 2^31.
TEAM_UID_MIN, TEAM_UID_MAX = 1000, 2_147_483_647


class Team(Setting):
    """A team gets a namespace, a GPU quota, the priority classes it may use, a queue, and a
    POSIX identity its pods run as and its files on Lustre belong to."""

    name: DnsLabel
    """The team's namespace; lowercase DNS label, at most 30 characters."""
    queue: Str
    """One of scheduler.queues."""
    gpu_quota: number(0)
    """GPUs the namespace may request at most; no more than its queue's gpuCapability."""
    priority_classes: tuple[Str, ...] = Field(min_length=1)
    """Names from scheduler.priorityClasses the team may use."""
    uid: number(TEAM_UID_MIN, TEAM_UID_MAX, "below 2^31")
    """POSIX UID and GID (the same number) of the team's pods and Lustre directory; unique per team, never reused."""

    @field_validator("name")
    @classmethod
    def _not_a_platform_namespace(cls, name: str) -> str:
        if name in RESERVED_NAMESPACES or name.startswith(RESERVED_NAMESPACE_PREFIXES):
            raise ValueError(f"{name!r} is a namespace Kubernetes or the platform owns ({', '.join(RESERVED_NAMESPACES)}, {', '.join(p + '*' for p in RESERVED_NAMESPACE_PREFIXES)}); pick another team name")
        return name

    @field_validator("uid")
    @classmethod
    def _not_nobody(cls, uid: int) -> int:
        if uid == 65534:
            raise ValueError("65534 is nobody (Lustre and NFS squash to it); pick another")
        return uid


def _duplicates(problems: Problems, where: str, names: list[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            problems.add(f"{where}[{i}]", f"duplicate name {name!r}")
        seen.add(name)


class Scheduler(Setting):
    """Volcano queues, the priority classes, and the teams that submit to them."""

    queues: tuple[Queue, ...] = ()
    priority_classes: tuple[PriorityClassSpec, ...] = ()
    teams: tuple[Team, ...] = ()

    @model_validator(mode="after")
    def _references(self) -> Scheduler:
        problems = Problems()
        _duplicates(problems, "queues", [q.name for q in self.queues])
        _duplicates(problems, "priorityClasses", [c.name for c in self.priority_classes])
        by_queue = {q.name: q for q in self.queues}
        class_names = {c.name for c in self.priority_classes}
        for i, team in enumerate(self.teams):
            queue = by_queue.get(team.queue)
            if queue is None:
                problems.add(f"teams[{i}].queue", f"unknown queue {team.queue!r}; queues: {', '.join(by_queue) or 'none'}")
            elif team.gpu_quota > queue.gpu_capability:
                problems.add(f"teams[{i}].gpuQuota", f"{team.gpu_quota} GPUs is above queue {team.queue!r}'s capability of {queue.gpu_capability}")
            for j, cls in enumerate(team.priority_classes):
                if cls not in class_names:
                    problems.add(f"teams[{i}].priorityClasses[{j}]", f"unknown priority class {cls!r}; classes: {', '.join(sorted(class_names)) or 'none'}")
        _duplicates(problems, "teams", [t.name for t in self.teams])
        owners: dict[int, str] = {}
        for i, team in enumerate(self.teams):
            if team.uid in owners and owners[team.uid] != team.name:
                problems.add(f"teams[{i}].uid", f"{team.uid} is team {owners[team.uid]!r}'s: every team needs its own UID (it owns the team's files)")
            owners.setdefault(team.uid, team.name)
        problems.raise_any()
        return self


LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)


def _fraction(value: float) -> float:
    if not 0 < value <= 1:
        raise ValueError(f"must be a number in (0, 1], got {value}")
    return value


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError(f"must be a positive number, got {value}")
    return value


Fraction = Annotated[float, Strict(), AfterValidator(_fraction), Field(json_schema_extra={"exclusiveMinimum": 0, "maximum": 1})]
Positive = Annotated[float, Strict(), AfterValidator(_positive), Field(json_schema_extra={"exclusiveMinimum": 0})]


class HealthThresholds(Setting):
    """What a healthy GPU node reaches, as fractions of the GPU's peak or absolute figures."""

    min_matmul_fraction: Fraction = 0.6
    """bf16 dense matmul TFLOP/s / peak."""
    min_memory_bandwidth_fraction: Fraction = 0.7
    """Device-to-device copy GB/s / peak."""
    min_lustre_mb_s: Positive = Field(200.0, alias="minLustreMBps")
    """Write then read of a file on /fsx, per node."""
    min_bus_bandwidth_gb_s: Positive = Field(50.0, alias="minBusBandwidthGBps")
    """NCCL all-reduce bus bandwidth across nodes."""


class Observability(Setting):
    """Prometheus, DCGM, logs and node auto-repair."""

    enabled: Bool = True
    """Prometheus, Grafana dashboards, the DCGM exporter."""
    metrics_retention_days: number(1) = 15
    """Days Prometheus keeps metrics."""
    metrics_storage_gib: number(10, GP3_MAX_GIB, "the gp3 maximum") = Field(100, alias="metricsStorageGiB")
    """Prometheus's encrypted gp3 volume, GiB."""
    log_retention_days: Int = 30
    """A CloudWatch Logs retention: 1, 3, 5, 7, 14, 30, 60, 90, ... 3653 days."""
    node_auto_repair: Bool = True
    """EKS node auto-repair on GPU pools."""
    health: HealthThresholds = Field(HealthThresholds(), alias="healthcheck")

    @field_validator("log_retention_days")
    @classmethod
    def _cloudwatch_retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(f"{value} is not a CloudWatch Logs retention; use one of: {', '.join(map(str, LOG_RETENTION_DAYS))}")
        return value


class Checkpoints(Setting):
    """How the rendered training jobs checkpoint and resume (examples/checkpointing.py)."""

    keep_last: number(1) = 3
    """Complete checkpoints kept on shared storage per job (older ones are deleted once a newer one is complete)."""
    flush_time: Duration = "10m"
    """How long a final checkpoint may take on SIGTERM (write the shards to local NVMe, then publish them to FSx); minutes for a large model."""
    termination_grace_period: Duration = derived("The pods' terminationGracePeriodSeconds; default flushTime + 2m, never shorter than flushTime.")
    export_to_s3: Bool = False
    """Write checkpoints under the directory the S3 data repository association exports (higgsfield:fsx.s3.dataset), so they reach S3; only its owner team can."""

    @model_validator(mode="after")
    def _grace(self) -> Checkpoints:
        problems = Problems()
        if self.termination_grace_period is None:
            self._fill(termination_grace_period=f"{seconds_of(self.flush_time) + 120}s")
        elif seconds_of(self.termination_grace_period) < seconds_of(self.flush_time):
            problems.add("terminationGracePeriod", f"{self.termination_grace_period} is shorter than flushTime {self.flush_time}: the kubelet would kill a pod before its final checkpoint is written")
        problems.raise_any()
        return self

    @property
    def grace_seconds(self) -> int:
        return seconds_of(self.termination_grace_period)

    @property
    def flush_seconds(self) -> int:
        return seconds_of(self.flush_time)


class Autoscaler(Setting):
    """Cluster Autoscaler settings."""

    scale_down_unneeded_time: Duration = "10m"
    """How long a node stays unneeded before it is removed (10m, 600s, 1h)."""
    expander: Literal["least-waste", "most-pods", "priority", "random", "price"] = "least-waste"
    """Which node group grows when several could."""


class Runner(Setting):
    """GitHub Actions runners hosted on AWS CodeBuild, in the stack's private subnets, one ephemeral build per job."""

    enabled: Bool = True
    """Previews and deploys run inside the VPC (required unless the endpoint is open to 0.0.0.0/0, which prod refuses)."""
    connection_arn: matching(r"^arn:aws[a-z-]*:(codeconnections|codestar-connections):[a-z0-9-]+:\d{12}:connection/[0-9a-f-]{36}$",
                             "is not an AWS CodeConnections connection ARN (arn:aws:codeconnections:REGION:ACCOUNT:connection/UUID)") | None = None
    """The CodeConnections connection to GitHub the runner project uses (created once in the console); required when enabled."""
    compute_type: Literal["BUILD_GENERAL1_SMALL", "BUILD_GENERAL1_MEDIUM", "BUILD_GENERAL1_LARGE"] = "BUILD_GENERAL1_MEDIUM"
    """The CodeBuild compute type of a runner (pulumi and the Helm charts need about 4 GB)."""

    @model_validator(mode="after")
    def _connection_when_enabled(self) -> Runner:
        problems = Problems()
        if self.enabled and self.connection_arn is None:
            problems.add("connectionArn", "is required when the runner is enabled: CodeBuild reaches GitHub through a CodeConnections connection")
        problems.raise_any()
        return self


class Delivery(Setting):
    """The CI identities and runners of .github/workflows (components/delivery.py): a preview role for pull requests, a deploy role for the stack's GitHub environment, an image-push role for main."""

    repository: matching(r"^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$", "is not a GitHub repository (owner/name)")
    """The GitHub repository (owner/name) whose workflows may assume the roles."""
    account_id: matching(r"^\d{12}$", "is not a 12-digit AWS account id")
    """The AWS account of this stack; the workflows build the role ARNs from it (higgsfield stacks)."""
    oidc_provider_arn: matching(r"^arn:aws[a-z-]*:iam::\d{12}:oidc-provider/token\.actions\.githubusercontent\.com$",
                                "is not the ARN of GitHub's OIDC provider (arn:aws:iam::ACCOUNT:oidc-provider/token.actions.githubusercontent.com)") | None = None
    """GitHub's OIDC provider in the account, if it exists already (it is one per account); unset: the stack creates it."""
    deploy_environment: matching(r"^[A-Za-z0-9._-]{1,255}$", "is not one GitHub environment name (letters, digits, . _ -; no wildcards)") | None = derived(
        "The GitHub environment whose jobs may assume the deploy role (OIDC subject repo:OWNER/REPO:environment:NAME); default the stack name.")
    state_bucket: matching(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", "is not an S3 bucket name")
    """The S3 bucket (in aws:region) of this stack's Pulumi backend, s3://BUCKET: the workflows log in to it, the preview role may read it and take its lock."""
    state_key_arn: matching(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]{36}$", "is not a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/UUID; IAM grants on an alias ARN do not cover the key)")
    """The KMS key (key ARN, not an alias) of the stack's awskms:// secrets provider: no passphrase in CI; the preview role may decrypt with it."""
    runner: Runner
    """Where previews and deploys run: `connectionArn` for CodeBuild runners in the VPC, or `enabled: false` (only for an endpoint open to 0.0.0.0/0)."""


# --- the stack ----------------------------------------------------------------------------

IMAGE_REFERENCE = r"^[a-z0-9][a-z0-9.-]*(:\d+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$"
# Images known to lack the EFA provider and aws-ofi-nccl (the stock PyTorch images, issue #11).
NOT_EFA_READY = ("pytorch/pytorch", "docker.io/pytorch/pytorch", "index.docker.io/pytorch/pytorch")
_ADMIN_ARN = r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:(role|user|assumed-role)/[\w+=,.@/-]+$"
_TAG_KEY = re.compile(r"^[\w .:/=+\-@]{1,128}$")


def _tag_key(name: str) -> str:
    if not _TAG_KEY.match(name) or name.lower().startswith("aws:"):
        raise ValueError(f"{name!r} is not a valid tag key (1-128 chars, not starting with aws:)")
    if name.lower().startswith(f"{NAMESPACE}:"):
        raise ValueError(f"{name!r}: {NAMESPACE}:* tags are set by the program (higgsfield:stack, higgsfield:environment), not by config")
    return name


TagKey = Annotated[str, Strict(), AfterValidator(_tag_key)]
TagValue = Annotated[str, Strict(), Field(max_length=256)]


@cache
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


def _root_alias(name: str) -> str:
    return {"stack": "stack", "region": "aws:region"}.get(name, f"{NAMESPACE}:{to_camel(name)}")


def _version_hint(value: str, known: tuple[str, ...] | list[str]) -> str:
    """`1.3` for a version YAML read as a number (1.30): say so."""
    for candidate in (f"{value}0", f"{value}00"):
        if candidate in known:
            return f" (an unquoted {candidate} in YAML is the number {value}: write \"{candidate}\")"
    if re.fullmatch(r"\d+\.\d", value):
        return f" (if you wrote {value}0: unquoted, YAML reads it as the number {value}; quote versions)"
    return ""


def _addon_name(name: str) -> str:
    if name not in versions.EKS_ADDONS:
        suggestion = _suggest(name, list(versions.EKS_ADDONS))
        hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
        raise ValueError(f"{name!r} is not an add-on this platform installs{hint}; add-ons: {', '.join(versions.EKS_ADDONS)}")
    return name


_HIDDEN = ("stack",)


class StackConfig(Setting):
    """A stack: the `config:` of stacks/Pulumi.<stack>.yaml."""

    model_config = ConfigDict(alias_generator=_root_alias)

    stack: SkipJsonSchema[matching(DNS_LABEL, "is not a valid stack name: a lowercase DNS label of at most 30 characters (it names the cluster, PVs and namespaces)")]
    region: Str
    """An AWS region with EKS."""
    environment: Literal["dev", "staging", "prod"]
    """prod: cluster, FSx and KMS keys protected, a NAT gateway per AZ, VPC interface endpoints."""
    kubernetes_version: Annotated[str, Field(json_schema_extra={"enum": list(versions.KUBERNETES_SUPPORTED)})] = versions.KUBERNETES_DEFAULT
    """EKS Kubernetes minor version (infra/versions.py KUBERNETES_SUPPORTED); quote it: "1.35". Raising it upgrades in place: control plane, add-ons, node groups."""
    addon_versions: dict[Annotated[str, AfterValidator(_addon_name), Field(json_schema_extra={"enum": list(versions.EKS_ADDONS)})], matching(versions.ADDON_VERSION_PATTERN, "is not an EKS add-on version (v1.20.4-eksbuild.1)")] = {}
    """Exact EKS add-on versions by add-on name (vpc-cni: v1.20.4-eksbuild.1); unset add-ons take EKS's default for kubernetesVersion at deploy."""
    node_release_version: matching(r"^\d+\.\d+\.\d+-\d{8}$", "is not an EKS AMI release version (1.35.2-20261120)") | None = None
    """EKS-optimized AMI release for every node group (1.35.2-20261120); unset: the latest for kubernetesVersion when a node group is created or updated."""
    vpc_cidr: Cidr = "10.0.0.0/16"
    """RFC 1918, /16 to /20. Each AZ gets 1/8 of it for nodes and pods; public subnets share the last 1/8."""
    availability_zones: tuple[Str, ...] = Field(min_length=2)
    """Two or more AZs of aws:region; one private and one public subnet each."""
    endpoint: Endpoint = Endpoint()
    cpu_nodes: NodeSizes
    admins: tuple[matching(_ADMIN_ARN, "is not an IAM role or user ARN (arn:aws:iam::123456789012:role/name)"), ...] = ()
    """IAM role/user ARNs granted cluster-admin through EKS access entries."""
    tags: dict[TagKey, TagValue] = {}
    """Added to every taggable resource (with higgsfield:stack and higgsfield:environment)."""
    gpu_pools: tuple[GpuPool, ...] = ()
    training_image: matching(IMAGE_REFERENCE, "is not an image reference with a tag or digest (registry/repository:tag or registry/repository@sha256:...)") | None = None
    """Your own EFA-ready image (libfabric's efa provider and aws-ofi-nccl inside), registry/repository:tag or @sha256:..., for every rendered job instead of the one built from images/training/Dockerfile into the stack's ECR repository; stock pytorch/pytorch is refused when the stack has EFA pools."""
    cuda_version: Annotated[str, Field(json_schema_extra={"enum": list(versions.CUDA_MIN_DRIVER_BRANCH)})] | None = None
    """The CUDA version the training images need, e.g. "12.8"; rejected if the GPU AMI's driver is too old."""
    autoscaler: Autoscaler = Autoscaler()
    fsx: Fsx = Field(Fsx(), validate_default=True)
    scheduler: Scheduler = Field(Scheduler(), validate_default=True)
    allow_replace: tuple[Str, ...] = ()
    """Resource names (lustre, cluster-secrets, ...) whose replacement or deletion this change intends; read by higgsfield diff."""
    observability: Observability = Observability()
    checkpoints: Checkpoints = Field(Checkpoints(), validate_default=True)
    delivery: Delivery | None = None
    """CI identities (preview, deploy, image push) and CodeBuild runners; unset: CI neither previews nor deploys this stack."""

    @field_validator("training_image")
    @classmethod
    def _efa_ready_image(cls, image: str | None, info: ValidationInfo) -> str | None:
        pools = info.data.get("gpu_pools") or ()
        repository = re.split(r"[:@]", image.rsplit("/", 1)[-1])[0] if image else ""
        if image and any(p.efa for p in pools) and f"{image.rsplit('/', 1)[0]}/{repository}" in NOT_EFA_READY:
            raise ValueError(f"{image!r} has no EFA provider and no aws-ofi-nccl, so NCCL would fall back to TCP on the EFA pools; "
                             "leave it unset for the image built from images/training/Dockerfile")
        return image

    @field_validator("region")
    @classmethod
    def _eks_region(cls, region: str) -> str:
        known = eks_regions()
        if region not in known:
            raise ValueError(f"{region!r} is not an AWS region with EKS; known: {', '.join(known)}")
        return region

    @field_validator("kubernetes_version")
    @classmethod
    def _supported(cls, version: str) -> str:
        if version not in versions.KUBERNETES_SUPPORTED:
            hint = _version_hint(version, versions.KUBERNETES_SUPPORTED)
            raise ValueError(f"{version!r} is not supported; use one of: {', '.join(versions.KUBERNETES_SUPPORTED)}{hint}")
        problems = Problems()
        for outside in versions.components_outside(version):
            problems.add("", f"{version!r} is outside what {outside.component} supports (Kubernetes {outside}, {outside.source}); change the pin in infra/versions.py or the version")
        problems.raise_any()
        return version

    @field_validator("node_release_version")
    @classmethod
    def _release_of_the_cluster_minor(cls, release: str | None, info: ValidationInfo) -> str | None:
        cluster = info.data.get("kubernetes_version")
        if release and cluster and not release.startswith(f"{cluster}."):
            raise ValueError(f"{release!r} is an AMI release for Kubernetes {'.'.join(release.split('.')[:2])}, but higgsfield:kubernetesVersion is {cluster!r}")
        return release

    @field_validator("vpc_cidr")
    @classmethod
    def _private_range(cls, cidr: str) -> str:
        net = ipaddress.IPv4Network(cidr)
        if not net.is_private or not any(net.subnet_of(ipaddress.IPv4Network(p)) for p in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")):
            raise ValueError(f"{net} is not inside an RFC 1918 range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16)")
        if not 16 <= net.prefixlen <= 20:
            raise ValueError(f"{net} must be a /16 to /20 so every AZ gets room for pods")
        return cidr

    @field_validator("availability_zones")
    @classmethod
    def _zones_of_region(cls, zones: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        problems, region = Problems(), info.data.get("region")
        for i, zone in enumerate(zones):
            if region and not re.fullmatch(re.escape(region) + r"[a-z]", zone):
                problems.add(f"[{i}]", f"{zone!r} is not an availability zone of region {region} (e.g. {region}a)")
        _duplicates(problems, "", list(zones))
        problems.raise_any()
        return zones

    @field_validator("endpoint")
    @classmethod
    def _not_open_in_prod(cls, endpoint: Endpoint, info: ValidationInfo) -> Endpoint:
        from policies.rules import MAX_INTERNET_SHARE, internet_share  # the pack's rule, the same numbers

        problems = Problems()
        for i, cidr in enumerate(endpoint.public_access_cidrs):
            if ipaddress.IPv4Network(cidr).prefixlen == 0 and info.data.get("environment") == "prod":
                problems.add(f"publicAccessCidrs[{i}]", "0.0.0.0/0 opens the API server to the internet; prod allows only an allow-list")
        share = internet_share(endpoint.public_access_cidrs)
        if not problems and info.data.get("environment") == "prod" and share > MAX_INTERNET_SHARE:
            problems.add("publicAccessCidrs", f"together these cover {share:.4%} of the internet (at most {MAX_INTERNET_SHARE:.4%}, a /16's worth): list your VPN/office ranges")
        problems.raise_any()
        return endpoint

    @field_validator("gpu_pools")
    @classmethod
    def _pools_in_stack_zones(cls, pools: tuple[GpuPool, ...], info: ValidationInfo) -> tuple[GpuPool, ...]:
        problems, zones = Problems(), info.data.get("availability_zones")
        if pools and not (info.context or {}).get("catalog"):
            problems.add("", "GPU pools need an instance-type catalog to be validated")
        for i, pool in enumerate(pools):
            if zones is not None and pool.availability_zone not in zones:
                problems.add(f"[{i}].availabilityZone", f"{pool.availability_zone!r} is not one of higgsfield:availabilityZones ({', '.join(zones)})")
        _duplicates(problems, "", [p.name for p in pools])
        problems.raise_any()
        return pools

    @field_validator("cuda_version")
    @classmethod
    def _cuda_fits_driver(cls, cuda: str | None) -> str | None:
        if cuda is None:
            return None
        needed = versions.CUDA_MIN_DRIVER_BRANCH.get(cuda)
        if needed is None:
            hint = _version_hint(cuda, list(versions.CUDA_MIN_DRIVER_BRANCH))
            raise ValueError(f"unknown CUDA version {cuda!r}; known: {', '.join(versions.CUDA_MIN_DRIVER_BRANCH)}{hint}")
        if needed > versions.EKS_NVIDIA_DRIVER_BRANCH:
            newest = max((c for c, d in versions.CUDA_MIN_DRIVER_BRANCH.items() if d <= versions.EKS_NVIDIA_DRIVER_BRANCH), key=lambda c: tuple(map(int, c.split("."))))
            raise ValueError(
                f"CUDA {cuda} needs NVIDIA driver {needed} or newer, but the EKS AL2023 NVIDIA AMI ships driver "
                f"{versions.EKS_NVIDIA_DRIVER_BRANCH} (supports up to CUDA {newest})"
            )
        return cuda

    @field_validator("fsx")
    @classmethod
    def _fsx_next_to_the_pools(cls, fsx: Fsx, info: ValidationInfo) -> Fsx:
        zones, pools = info.data.get("availability_zones"), info.data.get("gpu_pools")
        if zones is None or pools is None:
            return fsx  # what it depends on is wrong, and reported
        problems = Problems()
        efa_zones = sorted({p.availability_zone for p in pools if p.efa})
        zone = fsx.availability_zone or (efa_zones[0] if efa_zones else (pools[0].availability_zone if pools else zones[0]))
        if zone not in zones:
            problems.add("availabilityZone", f"{zone!r} is not one of higgsfield:availabilityZones ({', '.join(zones)})")
        elif fsx.enabled and efa_zones and zone not in efa_zones:
            problems.add(
                "availabilityZone",
                f"{zone} differs from the EFA GPU pools' zone {', '.join(efa_zones)}: every read and checkpoint would cross AZs (latency, cost)",
            )
        problems.raise_any()
        return fsx.model_copy(update={"availability_zone": zone})

    @field_validator("scheduler")
    @classmethod
    def _capability_within_pools(cls, scheduler: Scheduler, info: ValidationInfo) -> Scheduler:
        pools = info.data.get("gpu_pools")
        if pools is None or any(p._instance is None for p in pools):
            return scheduler
        total = sum(p.max_size * p.gpus_per_node for p in pools)
        problems = Problems()
        for i, queue in enumerate(scheduler.queues):
            if queue.gpu_capability > total:
                problems.add(f"queues[{i}].gpuCapability", f"{queue.gpu_capability} GPUs is more than the GPU pools can ever provide ({total}: every pool at maxSize)")
        problems.raise_any()
        return scheduler

    @model_validator(mode="after")
    def _pools_survive_bad_nodes(self) -> StackConfig:
        """Prod turns a pool's health gate off only with a reason; a Capacity Block drains early
        enough for AWS's margin and the pods' grace period; S3 checkpoints need the S3 link."""
        problems, pools = Problems(), f"{NAMESPACE}:gpuPools"
        for i, pool in enumerate(self.gpu_pools):
            if self.production and not pool.health_gate.enabled and pool.health_gate.reason is None:
                problems.add(f"{pools}[{i}].healthGate.enabled", "false in prod needs healthGate.reason: without the gate a node with a bad GPU or EFA link joins and fails every job on it")
            drain = seconds_of(pool.capacity.drain_before)
            needed = CAPACITY_BLOCK_END_MARGIN_S + self.checkpoints.grace_seconds
            if pool.capacity.type == "capacity-block" and drain < needed:
                problems.add(f"{pools}[{i}].capacity.drainBefore", f"{pool.capacity.drain_before} is too short: AWS asks for zero nodes 30m before the end, and pods take up to "
                             f"{self.checkpoints.termination_grace_period} (higgsfield:checkpoints.terminationGracePeriod) to stop; use at least {needed // 60 + (needed % 60 > 0)}m")
        if self.checkpoints.export_to_s3 and (not self.fsx.enabled or self.fsx.s3 is None or self.fsx.s3.dataset is None):
            problems.add(f"{NAMESPACE}:checkpoints.exportToS3", "needs higgsfield:fsx with an s3 link to a dataset (fsx.s3.dataset): that directory is what reaches S3")
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _datasets_name_teams(self) -> StackConfig:
        problems, teams = Problems(), {t.name for t in self.scheduler.teams}
        where = f"{NAMESPACE}:fsx.datasets"
        for i, dataset in enumerate(self.fsx.datasets):
            for key, team in [("owner", dataset.owner), *((f"readers[{j}]", r) for j, r in enumerate(dataset.readers))]:
                if team not in teams:
                    problems.add(f"{where}[{i}].{key}", f"unknown team {team!r}; teams: {', '.join(sorted(teams)) or 'none'}")
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _deploy_environment_default(self) -> StackConfig:
        if self.delivery is not None and self.delivery.deploy_environment is None:
            object.__setattr__(self, "delivery", self.delivery.model_copy(update={"deploy_environment": self.stack}))
        return self

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
        return {**self.tags, "higgsfield:stack": self.stack, "higgsfield:environment": self.environment}


# --- parsing ------------------------------------------------------------------------------


# --- credentials --------------------------------------------------------------------------

# AWS provider credentials Pulumi hands the provider from stack config: accepted only encrypted
# (`pulumi config set --secret`); they never reach the model. (aws:profile is refused like any
# other aws: key: it names credentials on one machine, and CI deploys with OIDC roles.)
SECRET_ONLY_KEYS = ("aws:accessKey", "aws:secretKey", "aws:token")
PROVIDER_KEYS = SECRET_ONLY_KEYS
# What an encrypted (`secure:`) value is to a reader without the stack's secrets provider: the
# offline plan shows it as this and never validates it as if it were the value.
UNKNOWN_SECRET = "[secret: encrypted in the stack file, unknown offline]"
_SECRET_NAME = re.compile(r"(secret|passw(or)?d|token|credential|private.?key|api.?key|access.?key)", re.I)
_SECRET_VALUES = (
    (re.compile(r"(AKIA|ASIA)[0-9A-Z]{16}"), "an AWS access key id"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}|github_pat_\w{22,}"), "a GitHub token"),
    (re.compile(r"xox[abprs]-[A-Za-z0-9-]{10,}"), "a Slack token"),
    (re.compile(r"(?=[A-Za-z0-9/+]*[0-9])(?=[A-Za-z0-9/+]*[A-Z])(?=[A-Za-z0-9/+]*[a-z])[A-Za-z0-9/+]{40}"), "an AWS secret access key"),
)


def _secret_hint(key: str) -> str:
    return (f"store it encrypted: `pulumi config set --secret {key} ...` (and rotate it: the plaintext is in "
            "the file's history); for AWS, prefer AWS_PROFILE or the CI's OIDC role over keys in config")


def credential_problems(config: Mapping[str, Any], secret_keys: frozenset[str] | set[str] = frozenset()) -> list[Problem]:
    """Plaintext credentials among the stack's settings: a credential key (aws:secretKey, anything
    named like a password, token or secret) or a value that looks like one (an AWS key, a private
    key, a GitHub or Slack token). Encrypted values (`secret_keys`) are fine."""
    found: list[Problem] = []

    def walk(loc: tuple[str | int, ...], value: Any) -> None:
        if isinstance(value, Mapping):
            for name, item in value.items():
                if _SECRET_NAME.search(str(name)) and isinstance(item, (str, int, float)) and str(item):
                    found.append(Problem((*loc, str(name)), f"looks like a credential in plaintext; {_secret_hint(key_of(loc))}"))
                else:
                    walk((*loc, str(name)), item)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk((*loc, i), item)
        elif isinstance(value, str):
            what = next((what for rx, what in _SECRET_VALUES if rx.search(value) if what != "an AWS secret access key" or rx.fullmatch(value)), None)
            if what:
                found.append(Problem(loc, f"looks like {what} in plaintext; {_secret_hint(key_of(loc[:1]))}"))

    for key, value in config.items():
        if key in secret_keys or value == UNKNOWN_SECRET:
            continue
        name = key.partition(":")[2] or key
        if key in SECRET_ONLY_KEYS or _SECRET_NAME.search(name):
            found.append(Problem((key,), f"is a credential in plaintext; {_secret_hint(key)}"))
        else:
            walk((key,), value)
    return found


# --- parsing ------------------------------------------------------------------------------


def validate(stack: str, config: Mapping[str, Any], catalog: Catalog | None = None, secret_keys: frozenset[str] | set[str] = frozenset()) -> StackConfig:
    """Build the typed config from a stack's settings keyed by full key (`aws:region`,
    `higgsfield:gpuPools`, ...). Raises one ConfigError listing every problem: plaintext
    credentials, unknown keys (each with its likely meaning, the rest checked as if meant, so
    a typo is reported as the typo and not as what its absence breaks), and every wrong value.
    `secret_keys` were encrypted in the stack file; a value of `UNKNOWN_SECRET` (offline: not
    decryptable) is not checked, and the setting's default stands in for it."""
    problems = credential_problems(config, secret_keys)
    unknown = {k for k, v in config.items() if v == UNKNOWN_SECRET and k not in PROVIDER_KEYS}
    fields = {f.alias: f for f in StackConfig.model_fields.values()}
    for key in sorted(unknown):
        if key in fields and fields[key].is_required():
            problems.append(Problem((key,), "is encrypted (secure:) and required: the offline plan cannot decrypt it; keep it in plaintext, it is not a credential"))
    config = {k: v for k, v in config.items() if k not in PROVIDER_KEYS and k not in unknown}
    region = config.get("aws:region")
    context = {"catalog": catalog, "region": region if isinstance(region, str) and region in eks_regions() else None}
    config = {k: _scalar(v) if k in _non_string_keys() else v for k, v in config.items()}
    meant, renamed = _as_meant({**config, "stack": stack}, StackConfig, ())
    problems += [Problem(written, _unknown(written)) for written in renamed.values()]
    try:
        result = StackConfig.model_validate(meant, context=context, by_alias=True, by_name=False)
    except ValidationError as exc:
        problems += [Problem(_as_written(p.loc, renamed), p.message, p.line) for p in problems_of(exc) if not (p.key in unknown and p.message == "is required")]
    else:
        if not problems:
            return result
    raise ConfigError(problems[0].key, problems[0].message, problems)


def _as_meant(data: Any, model: type[BaseModel] | None, loc: tuple[str | int, ...]) -> tuple[Any, dict[tuple, tuple]]:
    """`data` with every unknown key renamed to the setting it most likely means, when that one
    is not set (`higgsfield:gpuPool` -> `higgsfield:gpuPools`, `maxSzie` -> `maxSize`), and the
    renames (meant loc -> written loc)."""
    if model is None or not isinstance(data, dict):
        return data, {}
    fields = {f.alias or n: f for n, f in model.model_fields.items()}
    allowed = sorted(a for a, f in fields.items() if a not in _HIDDEN)
    out: dict[Any, Any] = {}
    renamed: dict[tuple, tuple] = {}
    for key, value in data.items():
        target = key
        if key not in fields and isinstance(key, str):
            guess = _suggest(key, allowed)
            if guess and guess not in data and guess not in out:
                target = guess
                renamed[(*loc, guess)] = (*loc, key)
        out[target] = value
    for key, value in list(out.items()):
        if key not in fields:
            continue
        inner = _model_in(fields[key].annotation)
        if isinstance(value, dict):
            out[key], more = _as_meant(value, inner, (*loc, key))
            renamed.update(more)
        elif isinstance(value, list) and inner is not None:
            items = []
            for i, item in enumerate(value):
                fixed, more = _as_meant(item, inner, (*loc, key, i))
                items.append(fixed)
                renamed.update(more)
            out[key] = items
    return out, renamed


def _as_written(loc: tuple[str | int, ...], renamed: dict[tuple, tuple]) -> tuple[str | int, ...]:
    """A loc in the meant data as the stack file spells it."""
    for n in range(len(loc), 0, -1):
        if loc[:n] in renamed:
            return renamed[loc[:n]] + loc[n:]
    return loc


@cache
def _non_string_keys() -> frozenset[str]:
    """Top-level keys whose value is a number or a boolean: Pulumi hands every top-level value
    over as a string ("3", "true"), so these are decoded before validation."""

    def scalar(annotation: Any) -> bool:
        if annotation in (int, float, bool):
            return True
        return get_origin(annotation) is not tuple and any(scalar(a) for a in get_args(annotation) if a is not type(None))

    return frozenset(f.alias for f in StackConfig.model_fields.values() if f.alias and scalar(f.annotation))


def _scalar(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def parse(stack: str, region: Any, values: Mapping[str, Any], catalog: Catalog | None = None) -> StackConfig:
    """Build the typed config from raw values (`values` keyed without the namespace)."""
    return validate(stack, {"aws:region": region, **{f"{NAMESPACE}:{k}": v for k, v in values.items()}}, catalog)


def _decode(raw: str) -> Any:
    """Stack values arrive as strings; objects and lists as JSON text."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, (dict, list)) else raw


def load() -> StackConfig:
    """Read this stack's config through `pulumi.Config` and validate it."""
    # The SDK has no "list keys" call: the engine hands config over as set_all_config or PULUMI_CONFIG.
    every_key = {*pulumi.runtime.config.CONFIG.get(), *pulumi.runtime.config.get_config_env()}
    values = {}
    for key in sorted(every_key):
        namespace, _, name = key.partition(":")
        raw = pulumi.Config(namespace).get(name) if name else pulumi.runtime.config.get_config(key)  # unnamespaced: reported
        if raw is not None:
            values[key] = _decode(raw)
    secret = {k for k in values if pulumi.runtime.config.is_config_secret(k)} | set(pulumi.runtime.config.get_config_secret_keys_env())
    from infra import catalog

    return validate(pulumi.get_stack(), values, catalog=catalog, secret_keys=frozenset(secret))

"""The building blocks of settings: the base model, bounded numbers, patterns, Kubernetes names."""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    model_validator,
)
from pydantic.alias_generators import to_camel

from infra.core.names import DNS_LABEL as DNS_LABEL
from infra.core.names import DNS_LABEL_RULE
from infra.core.names import ENVIRONMENTS as ENVIRONMENTS
from infra.core.names import NAMESPACE as NAMESPACE
from infra.core.names import SYSTEM_TAINT_KEY as SYSTEM_TAINT_KEY

# The taint on the system (CPU) node group, `higgsfield.io/system=true:NoSchedule`: only platform
# components tolerate it (components/cpu_nodes.py SYSTEM_TOLERATION); a team pod may not (its
# admission policy refuses the toleration). The GPU pools' taint is GPU_TAINT_KEY (gpu_pools.py).
SYSTEM_TAINT_EFFECT = "NoSchedule"

# --- building blocks of settings ------------------------------------------------------------


class Setting(BaseModel):
    """The base of every config object: immutable, stack-file keys are camelCase aliases of
    the attribute names, unknown keys are errors, and `null` means "use the default".
    In code, objects are built with attribute names as keywords: `Taint(key="k", value="v")`
    (no `__init__` override: pydantic would then validate twice, the second time without context)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
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


# --- bounds: every value a stack file can hold has a size ---------------------------
# Text, lists and maps carry their bound on the model (maxLength / maxItems / maxProperties in the
# JSON Schema, checked by pydantic before any pattern or validator runs, so every later check is
# over a bounded value); the nesting depth is the models' own (unknown keys are refused) and the
# reader's (infra/offline/stack_file.py MAX_DEPTH). Where AWS or Kubernetes sets the bound, the
# constant says so; the others are ours, far above any real stack.
MAX_TEXT = 1024  # free text (a reason, a path); names and ids are bounded by their own patterns
MAX_ITEMS = 100  # entries of a list or map whose bound is ours (100 GPU pools, teams, datasets)
MAX_INT = 2_147_483_647  # int32: what Kubernetes and Volcano store counts and quantities in


def items(minimum: int = 0, maximum: int = MAX_ITEMS, default: Any = (), **kwargs: Any) -> Any:
    """A list (or, with `default={}`, map) setting's size bounds, at most MAX_ITEMS entries unless
    said; with a `minimum` it is required."""
    if minimum:
        return Field(min_length=minimum, max_length=maximum, **kwargs)
    return Field(default, max_length=maximum, **kwargs)


Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
# Characters no free-text setting may hold: control characters (a NUL, a tab, an escape: AWS and
# Kubernetes refuse or mangle them, a terminal obeys them) and the bidirectional controls that make
# text read differently from what it is ("Trojan Source", CVE-2021-42574: U+202A-U+202E, U+2066-U+2069).
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def plain_text(value: str) -> str:
    bad = next((c for c in value if unicodedata.category(c) == "Cc" or c in _BIDI_CONTROLS), None)
    if bad is not None:
        raise ValueError(f"{shown(value)} holds the control character {bad!r}: free text is printable characters only")
    return value


Str = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_TEXT), AfterValidator(plain_text)]


def number(minimum: int, maximum: int = MAX_INT, why: str = "") -> Any:
    """An integer setting with bounds; `why` says where an upper bound comes from (default:
    int32, what Kubernetes and Volcano store it in)."""

    def check(value: int) -> int:
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ValueError(f"must be at most {maximum:,}{f' ({why})' if why else ''}, got {value:,}")
        return value

    bounds = {"minimum": minimum, **({"maximum": maximum} if maximum is not None else {})}
    return Annotated[int, Strict(), AfterValidator(check), Field(json_schema_extra=bounds)]


def matching(pattern: str, explain: str, max_length: int = MAX_TEXT) -> Any:
    """A string setting that matches `pattern` (anchored; also written into the JSON Schema), of at
    most `max_length` characters (checked first: the pattern only ever runs on bounded text). ASCII
    only: `\\d` and `\\w` match ASCII digits and letters alone (re.ASCII), as AWS and Kubernetes
    read them; Python's Unicode `\\d` takes Arabic-Indic or fullwidth digits that no API accepts."""
    rx = re.compile(pattern, re.ASCII)

    def check(value: str) -> str:
        if not rx.fullmatch(value):
            raise ValueError(f"{shown(value)} {explain}")
        return value

    return Annotated[
        str,
        Strict(),
        Field(max_length=max_length),
        AfterValidator(check),
        Field(json_schema_extra={"pattern": pattern}),
    ]


def shown(value: str, limit: int = 80) -> str:
    """`value` quoted for a message, cut to `limit` characters (a message never echoes a megabyte)."""
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value):,} characters)"


# Kubernetes object names, label keys and values, as the API server checks them:
# kubernetes/apimachinery:pkg/util/validation/validation.go@v0.35.7 (IsDNS1123Label: dns1123LabelFmt,
# 63 chars; IsDNS1123Subdomain: 253) and pkg/api/validate/content/kube.go@v0.35.7 (IsLabelKey, the
# qualified name: optional DNS-subdomain prefix + "/" + labelKeyFmt name of 63; IsLabelValue:
# labelValueFmt, 63). Taint keys are qualified names and taint values label values
# (kubernetes/kubernetes:pkg/apis/core/validation/validation.go validateTaints). Our names are
# DNS labels of at most 30: they are prefixed (higgsfield-<stack>-...) into names of 63.
DnsLabel = matching(
    DNS_LABEL,
    f"must be {DNS_LABEL_RULE}",
    30,
)
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"  # an optional DNS prefix
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"


def _qualified_name(value: str) -> str:
    prefix, _, name = value.rpartition("/")
    if not re.fullmatch(QUALIFIED_NAME, value, re.ASCII) or len(prefix) > 253 or len(name) > 63:
        raise ValueError(
            f"{shown(value)} is not a Kubernetes qualified name ([prefix/]name: name up to 63 of A-Z a-z 0-9 - _ . "
            "starting and ending alphanumeric; prefix a DNS subdomain)"
        )
    return value


# A qualified name is at most 253 + 1 + 63 characters; a label value at most 63.
QualifiedName = Annotated[
    str,
    Strict(),
    Field(max_length=317),
    AfterValidator(_qualified_name),
    Field(json_schema_extra={"pattern": QUALIFIED_NAME}),
]
LabelValue = matching(
    LABEL_VALUE,
    "is not a Kubernetes label value (up to 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric, or empty)",
    63,
)
InstanceTypeName = matching(
    r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", "is not an EC2 instance type name (family.size, e.g. p5.48xlarge)", 64
)

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
        raise ValueError(f"{shown(value)} is not an IPv4 CIDR ({exc})") from None


Cidr = Annotated[str, Strict(), Field(max_length=18), AfterValidator(_cidr)]

"""GPU pools: instance types, capacity (on-demand, spot, reservations, Capacity Blocks), taints, the health gate."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Annotated, Literal, Protocol

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    Strict,
    ValidationInfo,
    model_validator,
)

from infra.config.base import (
    GP3_MAX_GIB,
    Bool,
    DnsLabel,
    InstanceTypeName,
    LabelValue,
    MaxNodes,
    NodeCount,
    QualifiedName,
    Setting,
    Str,
    derived,
    items,
    matching,
    number,
)
from infra.config.errors import Problems
from infra.config.limits import GPU_TAINT_KEY, STARTUP_TAINT_KEY, karpenter_label, pool_label, pool_taint  # noqa: F401
from infra.core import versions
from infra.core.bundled import where_offered
from infra.core.catalog import InstanceFacts

CAPACITY_TYPES = ("on-demand", "spot", "capacity-block", "reservation")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
EXPANDERS = ("least-waste", "most-pods", "priority", "random", "price")
# GPU_TAINT_KEY and STARTUP_TAINT_KEY (the health gate's taint) are defined with the other
# reserved keys in infra/config/limits.py and importable from here as before.


# EKS node groups: label keys and values 1-63 characters, taint keys 1-63, taint values 0-63
# (botocore/data/eks/2017-11-01/service-2.json shapes labelKey, labelValue, taintKey, taintValue) --
# tighter than Kubernetes' qualified names; 0-20 instanceTypes (CreateNodegroupRequest.instanceTypes);
# "You can apply a maximum of 50 taints to each node group"
# (docs.aws.amazon.com/eks/latest/userguide/node-taints-managed-node-groups.html).
EKS_LABEL_LENGTH = 63
EKS_MAX_INSTANCE_TYPES = 20
EKS_MAX_TAINTS = 50
# Each label and taint of a pool is also a Cluster Autoscaler node-template tag on its Auto Scaling
# group (components/gpu_pools.py autoscaler_template_tags), and "You can add up to 50 tags to each
# Auto Scaling group" (docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-tagging.html).
# Already on it: the platform's labels (5, and the driver branch's), taints (2), extended resources (up to 3), the
# scale-down time and the pool tag (2), and the tags EKS adds to a managed node group's group
# (eks:cluster-name, eks:nodegroup-name, and the autoscaler's discovery tags: counted as 5, not
# checked here -- `aws autoscaling describe-tags --filters Name=auto-scaling-group,Values=ASG`).
ASG_TAGS_DOC = "docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-tagging.html"
ASG_TAG_ROOM = 50 - (6 + 2 + 3 + 2 + 5)
EksLabelKey = Annotated[QualifiedName, Field(max_length=EKS_LABEL_LENGTH)]
EksLabelValue = Annotated[LabelValue, Field(min_length=1)]


class Taint(Setting):
    """A Kubernetes taint on a pool's nodes."""

    key: Annotated[QualifiedName, Field(max_length=EKS_LABEL_LENGTH)]
    """A qualified name, e.g. dedicated or example.com/team."""
    value: LabelValue = "true"
    """A label value (up to 63 characters)."""
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"] = "NoSchedule"


UTC_TIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?Z$"


def _a_real_time(text: str) -> str:
    """A time the pattern takes may still be no date (2027-02-30, 25:00): refused at its own key."""
    try:
        utc(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a real time ({exc})") from None
    return text


UtcTime = Annotated[
    matching(UTC_TIME, 'is not a UTC time like "2027-01-04T11:30:00Z" (quote it: unquoted, YAML reads a timestamp)'),
    AfterValidator(_a_real_time),
]
# At most six digits (999999h is 114 years): the arithmetic on a duration never overflows a datetime.
Duration = matching(r"^\d{1,6}(s|m|h)$", "is not a duration like 10m, 600s or 1h (at most six digits)", 16)
# A duration where zero means failure (a health check with no time to run fails every node; a pod
# with no grace period is killed before its checkpoint).
PositiveDuration = matching(
    r"^(?!0+[smh]$)\d{1,6}(s|m|h)$",
    "is not a duration like 10m, 600s or 1h, above zero (zero leaves no time at all)",
    16,
)


def now() -> datetime:
    """The one clock of the program: Capacity Block windows are checked against it and the pools'
    sizes and scheduled actions read from it (components/gpu_pools.py). The test suite pins it."""
    return datetime.now(UTC)


def seconds_of(duration: str) -> int:
    """`10m` -> 600 (the Duration settings: s, m or h)."""
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# EC2 terminates what still runs in a Capacity Block at its end; AWS asks to scale to zero "more
# than 30 minutes before the Capacity Block reservation end time" (EC2 Auto Scaling user guide,
# launch-template-capacity-blocks, "Operational guidelines"; EKS user guide, capacity-blocks).
CAPACITY_BLOCK_END_MARGIN_S = 30 * 60
# What a Capacity Block can be ("Find and purchase Capacity Blocks",
# docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-purchase.html): "reservation durations
# in 1-day increments up to 14 days, and in 7-day increments up to 182 days"; "Each Capacity Block
# can have up to 64 instances, and you can have up to 256 instances across Capacity Blocks"; "All
# Capacity Blocks end at 11:30AM UTC" (a block bought for today may start at another time, so its
# length is then no whole number of days). Not checked here what EC2 answers for another:
# `aws ec2 describe-capacity-block-offerings --instance-type p5.48xlarge --instance-count 3
#  --capacity-duration-hours 36`.
CAPACITY_BLOCK_DOC = "docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-purchase.html"
CAPACITY_BLOCK_END_UTC = (11, 30)
CAPACITY_BLOCK_DAYS = (*range(1, 15), *range(21, 183, 7))
CAPACITY_BLOCK_MAX_INSTANCES = 64
CAPACITY_BLOCKS_MAX_INSTANCES = 256


class Capacity(Setting):
    """How a GPU pool buys its instances."""

    type: Literal["on-demand", "spot", "capacity-block", "reservation"] = "on-demand"
    """reservation: an On-Demand Capacity Reservation; capacity-block: an EC2 Capacity Block for ML."""
    reservation_id: (
        Annotated[str, Strict(), Field(max_length=20), AfterValidator(lambda v: _reservation_id(v))] | None
    ) = None
    """The capacity reservation (cr-0123456789abcdef0); required for capacity-block and reservation, else not
    allowed."""
    start: UtcTime | None = None
    """capacity-block only (required): when the block begins, UTC ("2027-01-04T11:30:00Z"); the pool's ASG opens
    then."""
    end: UtcTime | None = None
    """capacity-block only (required): when the block ends, UTC; EC2 terminates what still runs then."""
    drain_before: Duration = "1h"
    """capacity-block: how long before the end the pool scales to zero (jobs get SIGTERM and flush a checkpoint); more
    than 30m plus higgsfield:checkpoints.terminationGracePeriod."""
    warm: Bool = derived(
        "reservation and capacity-block (default true): hold the reserved count (the pool's maxSize) running while "
        "the reservation is billed - "
        "an ODCR always, a Capacity Block from its start to drainBefore ahead of its end - so its nodes pass the "
        "health gate before the first job; "
        "false lets the pool scale to zero like an on-demand one (the reservation is billed all the same). Not "
        "allowed for on-demand and spot."
    )

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

    def _block_shape(self, problems: Problems) -> None:
        assert self.window is not None
        for key, why in _block_shape_problems(*self.window):
            problems.add(key, why)

    @model_validator(mode="after")
    def _reservation(self) -> Capacity:
        problems = Problems()
        if self.reserved and self.reservation_id is None:
            problems.add(
                "reservationId",
                f"is required for capacity type {self.type}: the capacity reservation id (cr-0123456789abcdef0)",
            )
        if not self.reserved and self.reservation_id is not None:
            problems.add(
                "reservationId",
                f"only capacity types capacity-block and reservation take a reservation id, not {self.type}",
            )
        for where in ("start", "end"):
            if self.type == "capacity-block" and getattr(self, where) is None:
                problems.add(
                    where,
                    f"is required for capacity type capacity-block: the block's {where} time in UTC, from `aws ec2 "
                    "describe-capacity-reservations`",
                )
            if self.type != "capacity-block" and getattr(self, where) is not None:
                problems.add(where, f"only capacity type capacity-block has a window, not {self.type}")
        if self.warm and not self.reserved:
            problems.add(
                "warm",
                "only capacity types capacity-block and reservation are held warm (they are billed whether "
                f"instances run or not), not {self.type}",
            )
        if self.type == "capacity-block" and self.window:
            self._block_shape(problems)
        if self.window and self.drain_at is not None:
            start, end = self.window
            if end <= start:
                problems.add("end", f"{self.end} is not after start {self.start}")
            elif self.drain_at <= start:
                problems.add(
                    "drainBefore",
                    f"{self.drain_before} before the end leaves no time in the block ({self.start} to {self.end})",
                )
            elif end <= now():
                # EC2 ends a Capacity Block at its end date and its reservation is "expired"
                # (docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html): the pool
                # would be held at zero for ever.
                problems.add(
                    "end",
                    f"{self.end} is in the past: the Capacity Block is over and its reservation expired; "
                    "buy a new block and set its id and window, or change the capacity type",
                )
        problems.raise_any()
        if self.warm is None:
            self._fill(warm=self.reserved)
        return self


def _block_shape_problems(start: datetime, end: datetime) -> list[tuple[str, str]]:
    """(key, why) for a Capacity Block window EC2 never sells (CAPACITY_BLOCK_DOC)."""
    found = []
    if (end.hour, end.minute, end.second) != (*CAPACITY_BLOCK_END_UTC, 0):
        found.append(
            (
                "end",
                (
                    f"{end:%Y-%m-%dT%H:%M:%SZ}: every Capacity Block ends at 11:30 UTC ({CAPACITY_BLOCK_DOC}); "
                    "copy EndDate from `aws ec2 describe-capacity-reservations`"
                ),
            )
        )
    elif end > start:
        days = (end - start).total_seconds() / 86400
        if days > CAPACITY_BLOCK_DAYS[-1]:
            found.append(
                (
                    "start",
                    f"the block would last {days:.1f} days: a Capacity Block lasts at most "
                    f"{CAPACITY_BLOCK_DAYS[-1]} days ({CAPACITY_BLOCK_DOC})",
                )
            )
        elif (
            (start.hour, start.minute) == CAPACITY_BLOCK_END_UTC
            and days == int(days)
            and int(days) not in CAPACITY_BLOCK_DAYS
        ):
            found.append(
                (
                    "start",
                    (
                        f"the block would last {int(days)} days: Capacity Blocks last 1 to 14 days, "
                        "or 21 to 182 in whole weeks "
                        f"({CAPACITY_BLOCK_DOC}); copy StartDate from `aws ec2 describe-capacity-reservations`"
                    ),
                )
            )
    return found


def _reservation_id(value: str) -> str:
    if not re.fullmatch(r"cr-[0-9a-f]{8,17}", value):
        raise ValueError(f"{value!r} is not a capacity reservation id (cr-0123456789abcdef0)")
    return value


class Catalog(Protocol):
    """Where instance-type facts come from: AWS through invokes (the module infra.core.catalog)."""

    def describe(self, instance_type: str) -> InstanceFacts: ...

    def offered_in(self, instance_type: str, location: str, location_type: str = ...) -> bool: ...


ZONES_SOURCE = "EC2 DescribeInstanceTypeOfferings by availability zone, as bundled with moto"


def zones_of(region: str) -> tuple[str, ...]:
    """The availability zones of `region` in AWS's offerings catalog (moto's bundled copy, the one
    the offline plan answers invokes from: infra/core/bundled.py); empty when the catalog lacks the region."""
    from infra.core.bundled import zone_offerings

    return tuple(sorted(zone_offerings(region)))


def _catalog(info: ValidationInfo) -> tuple[Catalog | None, str]:
    """The instance-type catalog and the (valid) region the validation runs with, if any."""
    context = info.context or {}
    region = context.get("region")
    return (context.get("catalog") if region else None), region or ""


# A GPU pool's scale-down-unneeded time unless set: long enough for the last node of a gang to
# launch, boot the NVIDIA AMI, pass the health gate and join while its first nodes wait idle. Not
# measured here: a judgement for P-family instances (minutes to boot, capacity arriving in batches).
GPU_SCALE_DOWN_UNNEEDED_DEFAULT = "30m"
# From a GPU node's registration to Ready with its GPUs advertised (NVIDIA device plugin up) and the
# gate's CUDA image pulled: a judgement, not measured here (see docs/autoscaling.md for the command
# that measures it on a cluster).
GPU_BOOT_TIME_DEFAULT = "10m"


class HealthGate(Setting):
    """The node checks every new node of a GPU pool passes before jobs may use it (components/healthgate.py)."""

    enabled: Bool = True
    """Nodes join with the startup taint and the gate removes it on a pass; prod needs a reason to turn it off."""
    reason: Str | None = None
    """Why the gate is off (required with enabled: false in prod)."""
    on_failure: Literal["keep", "replace"] = "keep"
    """keep: a failed node stays tainted for a person to look at; replace: it is also marked Unhealthy in its Auto
    Scaling group, which terminates and replaces it. On a Karpenter pool a failed node is always removed (its
    NodeClaim deleted); keep is refused there."""
    timeout: PositiveDuration = "20m"
    """How long the checks may take (GPU burn, memory, EFA, Lustre) before the node counts as failed."""


class GpuPool(Setting):
    """One GPU node group. `instance` holds the facts of its (first) instance type; all its
    types share GPU count and EFA support (checked)."""

    name: DnsLabel
    """Nodes carry the label higgsfield.io/pool=NAME."""
    instance_types: tuple[InstanceTypeName, ...] = items(1, EKS_MAX_INSTANCE_TYPES)
    """GPU instance types, all with the same GPU count, EFA support and architecture, offered in availabilityZone."""
    availability_zone: Str
    """One of higgsfield:availabilityZones."""
    min_size: NodeCount = 0
    """0 costs nothing while idle."""
    max_size: MaxNodes
    """The most nodes the autoscaler adds."""
    capacity: Capacity = Capacity()
    efa: Bool = derived("Attach every EFA card; default true when the type supports EFA.")
    placement_group: Bool = derived(
        "Cluster placement group; default true with EFA, must be false for reservation / capacity-block."
    )
    root_volume_gib: number(50, GP3_MAX_GIB, "the gp3 maximum") = Field(200, alias="rootVolumeGiB")
    """Root gp3 volume, GiB."""
    local_nvme: Literal["raid0", "none"] = derived(
        "raid0 stripes the local NVMe drives; default raid0 when the type has them, else none."
    )
    labels: dict[EksLabelKey, EksLabelValue] = items(maximum=EKS_MAX_TAINTS, default={})
    """Kubernetes labels on the nodes (not the platform's: higgsfield.io/*, nvidia.com/gpu.present, ...; not
    kubernetes.io/* or k8s.io/*, which the kubelet refuses)."""
    taints: tuple[Taint, ...] = items(maximum=EKS_MAX_TAINTS)
    """Taints in addition to nvidia.com/gpu=true:NoSchedule."""
    scale_down_unneeded_time: PositiveDuration = GPU_SCALE_DOWN_UNNEEDED_DEFAULT
    """How long a node of this pool stays unneeded before the autoscaler removes it (its ASG's autoscaling-options tag);
    long enough for a gang's last node to boot and join."""
    health_gate: HealthGate = HealthGate()
    boot_time: Duration = GPU_BOOT_TIME_DEFAULT
    """How long a node of this pool takes from registering with the cluster to Ready with its GPUs advertised and the
    health gate's image pulled (the autoscaler's --max-node-startup-time counts from registration; the gate's timeout
    comes on top)."""
    provisioner: Literal["node-group", "karpenter"] = "node-group"
    """node-group: an EKS managed node group scaled by the Cluster Autoscaler; karpenter (on-demand and spot only): a
    Karpenter NodePool that never disrupts a running training pod (docs/karpenter.md)."""
    _instance: InstanceFacts | None = PrivateAttr(None)
    _instances: tuple[InstanceFacts, ...] = PrivateAttr(())

    @property
    def instance(self) -> InstanceFacts:
        assert self._instance is not None, "GpuPool validated without an instance-type catalog"
        return self._instance

    @property
    def gpus_per_node(self) -> int:
        return self.instance.gpus

    @property
    def instances(self) -> tuple[InstanceFacts, ...]:
        """Every instance type a node of the pool may be (the autoscaler or Karpenter picks one)."""
        return self._instances or (self.instance,)

    @property
    def capacity_type(self) -> str:
        return self.capacity.type

    @property
    def reservation_id(self) -> str | None:
        return self.capacity.reservation_id

    def _karpenter_rules(self, problems: Problems) -> None:
        """What a Karpenter pool cannot be: reserved, with its restricted labels, kept on failure, or held warm."""
        if self.provisioner == "karpenter" and self.capacity.reserved:
            problems.add(
                "provisioner",
                f"karpenter is for on-demand and spot pools; {self.capacity.type} pools stay on managed node groups "
                "until Karpenter selects capacity across several reservations and Capacity Blocks "
                "(aws/karpenter-provider-aws#8514)",
            )
        if self.provisioner == "karpenter":
            for key in self.labels:
                why = karpenter_label(key)
                if why:
                    problems.add(f"labels.{key}", why)
        kept = self.health_gate.on_failure == "keep" and "on_failure" in self.health_gate.model_fields_set
        if self.provisioner == "karpenter" and kept:
            problems.add(
                "healthGate.onFailure",
                "keep: a failed Karpenter node keeps its startup taint, Karpenter "
                "never removes it (no initialization timeout) and counts it as room for the waiting pods "
                "(kubernetes-sigs/karpenter: pkg/controllers/state/statenode.go Taints), so the gang waits "
                "and the node is billed until someone deletes it; on a Karpenter pool a failed node's "
                "NodeClaim is always deleted: leave onFailure unset or use replace",
            )
        if self.provisioner == "karpenter" and self.min_size:
            problems.add(
                "minSize",
                f"{self.min_size}: a Karpenter NodePool has no minimum (it launches for pending pods only); use 0 or "
                "provisioner node-group",
            )

    @model_validator(mode="after")
    def _facts(self, info: ValidationInfo) -> GpuPool:
        problems = Problems()
        self._own_labels_and_taints(problems)
        if self.min_size > self.max_size:
            problems.add("minSize", f"{self.min_size} is above maxSize {self.max_size}")
        if self.capacity.type == "capacity-block" and self.max_size > CAPACITY_BLOCK_MAX_INSTANCES:
            problems.add(
                "maxSize",
                f"{self.max_size}: a Capacity Block holds at most {CAPACITY_BLOCK_MAX_INSTANCES} instances "
                f"({CAPACITY_BLOCK_DOC}), and the pool's maxSize is its block's instance count",
            )
        self._karpenter_rules(problems)
        catalog, region = _catalog(info)
        if catalog is None or not re.fullmatch(re.escape(region) + r"[a-z]", self.availability_zone):
            problems.raise_any()  # the zone itself is reported by the stack (not in its availabilityZones)
            return self
        known = zones_of(region)
        if known and self.availability_zone not in known:  # a typo, not a zone without the type
            problems.add(
                "availabilityZone",
                f"{self.availability_zone!r} does not exist in {region}: its zones are {', '.join(known)} "
                f"({ZONES_SOURCE})",
            )
            problems.raise_any()
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
            problems.add(
                "placementGroup",
                f"must be false for capacity type {self.capacity.type}: the reservation brings its own placement",
            )
        local_nvme = ("raid0" if facts.nvme_disks else "none") if self.local_nvme is None else self.local_nvme
        if local_nvme == "raid0" and not facts.nvme_disks:
            problems.add("localNvme", f"{facts.name} has no local NVMe drives")
        if not set(facts.architectures) & set(versions.GPU_AMI_TYPES):
            problems.add(
                "instanceTypes", f"{facts.name} has no EKS AL2023 NVIDIA AMI for {', '.join(facts.architectures)}"
            )
        problems.raise_any()
        self._fill(efa=efa, placement_group=placement, local_nvme=local_nvme)
        self._instance = facts
        return self

    def _own_labels_and_taints(self, problems: Problems) -> None:
        """The pool's labels and taints leave the platform's alone, register with the kubelet, and
        are unique by key and effect as the API server requires ("taints must be unique by key and
        effect pair": kubernetes/kubernetes:pkg/apis/core/validation/validation.go validateNodeTaints)."""
        if len(self.labels) + len(self.taints) > ASG_TAG_ROOM:
            problems.add(
                "labels",
                f"{len(self.labels)} labels and {len(self.taints)} taints are more than the {ASG_TAG_ROOM} the "
                "pool's Auto Scaling group has room for: "
                "each is an autoscaler node-template tag on it, and an Auto Scaling group takes at most 50 tags "
                f"({ASG_TAGS_DOC})",
            )
        for key in self.labels:
            why = pool_label(key)
            if why:
                problems.add(f"labels.{key}", why)
        seen: dict[tuple[str, str], int] = {}
        for i, taint in enumerate(self.taints):
            why = pool_taint(taint.key)
            if why:
                problems.add(f"taints[{i}].key", why)
            pair = (taint.key, taint.effect)
            if pair in seen:
                problems.add(
                    f"taints[{i}]",
                    f"duplicates taints[{seen[pair]}] ({taint.key}:{taint.effect}): the API server refuses a node "
                    "whose taints repeat a key and effect",
                )
            seen.setdefault(pair, i)

    def _instance_facts(self, catalog: Catalog, region: str, problems: Problems) -> InstanceFacts | None:
        zone, facts = self.availability_zone, []
        for i, name in enumerate(self.instance_types):
            if not catalog.offered_in(name, zone):
                where = f"anywhere in {region}" if not catalog.offered_in(name, region, "region") else f"in {zone}"
                problems.add(
                    f"instanceTypes[{i}]",
                    f"instance type {name!r} is not offered {where}; {where_offered(name, region)}",
                )
                continue
            found = catalog.describe(name)
            if found.gpus == 0:
                problems.add(
                    f"instanceTypes[{i}]", f"{name} has no GPU; GPU pools need GPU instance types (g6e, p4d, p5, ...)"
                )
                continue
            facts.append(found)
        if problems or not facts:
            return None
        self._instances = tuple(facts)
        first = facts[0]
        for other in facts[1:]:
            if (other.gpus, other.efa_supported, other.efa_max_interfaces) != (
                first.gpus,
                first.efa_supported,
                first.efa_max_interfaces,
            ):
                problems.add(
                    "instanceTypes",
                    f"{first.name} ({first.gpus} GPUs, {first.efa_max_interfaces} EFA) and {other.name} "
                    f"({other.gpus} GPUs, "
                    f"{other.efa_max_interfaces} EFA) differ; one pool holds types with the same GPU count and EFA "
                    "support",
                )
            elif set(other.architectures) != set(first.architectures):
                problems.add("instanceTypes", f"{first.name} and {other.name} have different CPU architectures")
        return None if problems else first


def gpu_share(pools: Sequence[GpuPool]) -> dict[str, Fraction]:
    """What one GPU of the fleet brings of its node, at most over every instance type of every pool:
    vCPUs (`cpu`), memory in MiB (`memory`) and the node itself (`nodes`: 1/GPUs per node). A team of
    `gpuQuota` GPUs may hold `gpuQuota x` this in each dimension and so covers no more nodes in any
    dimension than its GPUs would (the node's capacity; allocatable is less by kubelet's reservations,
    so the share bounds a node from above). No pools: nothing (a team then holds no GPU node)."""
    types = [t for p in pools for t in p.instances if t.gpus]
    if not types:
        return {"cpu": Fraction(0), "memory": Fraction(0), "nodes": Fraction(0)}
    return {
        "cpu": max(Fraction(t.vcpus, t.gpus) for t in types),
        "memory": max(Fraction(t.memory_mib, t.gpus) for t in types),
        "nodes": max(Fraction(1, t.gpus) for t in types),
    }

"""The stack: the root model, with the rules that span concerns."""

from __future__ import annotations

import ipaddress
import json
import re
from functools import cache
from math import ceil
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema

from infra.config.base import DNS_LABEL, NAMESPACE, Bool, Cidr, Setting, Str, items, matching
from infra.config.checkpoints import Checkpoints
from infra.config.cluster import (
    TEAM_CPU_NODE_DAEMON_PODS,
    Autoscaler,
    Endpoint,
    NodeSizes,
    TeamCpuNodes,
    api_service_ip,
)
from infra.config.delivery import Delivery
from infra.config.errors import Problems, _duplicates, _suggest
from infra.config.gpu_pools import (
    CAPACITY_BLOCK_DOC,
    CAPACITY_BLOCK_END_MARGIN_S,
    CAPACITY_BLOCKS_MAX_INSTANCES,
    GPU_SCALE_DOWN_UNNEEDED_DEFAULT,
    ZONES_SOURCE,
    GpuPool,
    _catalog,
    gpu_share,
    seconds_of,
    zones_of,
)
from infra.config.limits import (
    MAX_TAGS,
    PROGRAM_TAGS,
    STACK_PARTITION,
    TAG_KEY_LENGTH,
    TAG_VALUE_LENGTH,
    access_entry_principal,
    tag_key,
    tag_value,
)
from infra.config.observability import Observability
from infra.config.scheduler import CPU_ONLY_PODS, MIN_CPU_QUOTA, MIN_MEMORY_QUOTA_GIB, Scheduler
from infra.config.storage import Fsx
from infra.core import versions
from infra.core.internet import MAX_INTERNET_SHARE, internet_share  # the policy pack's rule too
from infra.core.names import STACK_TAG, cluster_name

# --- the stack ----------------------------------------------------------------------------

NOT_AN_IMAGE = (
    "is not an image reference with a tag or digest (registry/repository:tag or registry/repository@sha256:...)"
)
IMAGE_REFERENCE = (
    r"^[a-z0-9][a-z0-9.-]*(:\d+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)+"  # registry[:port]/path
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$"
)  # :tag or @digest
# Addresses in a node subnet: "The first four IP addresses and the last IP address in each subnet CIDR
# block are not available" (docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html). Each node
# takes one for its primary (ENA) interface; its EFA interfaces are efa-only (components/efa.py),
# which take none ("You can't assign an IP address to an EFA-only network interface",
# docs.aws.amazon.com/AWSEC2/latest/UserGuide/create-efa.html); the VPC CNI gives every pod that is not on
# the host network an address of its node's subnet, a training pod at least. A floor: the CNI's warm
# pool and the daemon sets take more, which `kubectl get eniconfig`/the CNI's metrics show on a cluster.
SUBNET_RESERVED_ADDRESSES = 5
ADDRESSES_PER_NODE = 2
# The share of a CPU node's vCPUs and memory its pods may ask (the rest the kubelet's reservations, its eviction
# threshold and the node daemons keep): an estimate for sizing the teams' CPU nodes, not measured here; on a cluster,
# `kubectl get node NAME -o jsonpath='{.status.allocatable}'` less the DaemonSets' requests.
ALLOCATABLE_SHARE = 0.85
# Images known to lack the EFA provider and aws-ofi-nccl (the stock PyTorch images).
NOT_EFA_READY = ("pytorch/pytorch", "docker.io/pytorch/pytorch", "index.docker.io/pytorch/pytorch")
_ADMIN_ARN = r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:(role|user|assumed-role)/[\w+=,.@/-]+$"
TagKey = Annotated[str, Strict(), Field(max_length=TAG_KEY_LENGTH), AfterValidator(tag_key)]
TagValue = Annotated[str, Strict(), Field(max_length=TAG_VALUE_LENGTH), AfterValidator(tag_value)]


@cache
def _partitions() -> dict[str, dict]:
    """botocore's endpoint data by partition (read as a file: importing botocore.session costs more
    than the whole lookup)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("botocore")
    assert spec is not None and spec.submodule_search_locations, "botocore ships with boto3, a dependency"
    data = json.loads(Path(spec.submodule_search_locations[0], "data", "endpoints.json").read_text())
    return {p["partition"]: p for p in data["partitions"]}


@cache
def eks_regions() -> list[str]:
    """AWS regions (aws partition) with an EKS endpoint, from the endpoint data botocore ships."""
    aws = _partitions()[STACK_PARTITION]
    return sorted(set(aws["services"]["eks"]["endpoints"]) & set(aws["regions"]))


def not_an_eks_region(region: str) -> str:
    """Why `region` is refused, in one short line: the closest EKS regions, not all of them."""
    import difflib

    known = eks_regions()
    why = f"{region!r} is not one of the {len(known)} AWS regions with EKS (botocore's endpoint data)"
    other = next((p for p in _partitions().values() if region.lower() in p["regions"]), None)
    if other is not None and other["partition"] != STACK_PARTITION:
        return (
            f"{region!r} is a region of {other['partitionName']} (partition {other['partition']}); this platform "
            f"runs in the {STACK_PARTITION} partition only, in one of its {len(known)} regions with EKS"
        )
    if region.lower() in known:
        return f"{why}; did you mean {region.lower()}? (region names are lowercase)"
    close = difflib.get_close_matches(region, known, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}?" if close else f"e.g. {', '.join(known[:3])}, ..."
    return f"{why}; {hint}"


def _root_alias(name: str) -> str:
    return {"stack": "stack", "region": "aws:region"}.get(name, f"{NAMESPACE}:{to_camel(name)}")


def _version_hint(value: str, known: tuple[str, ...] | list[str]) -> str:
    """`1.3` for a version YAML read as a number (1.30): say so."""
    for candidate in (f"{value}0", f"{value}00"):
        if candidate in known:
            return f' (an unquoted {candidate} in YAML is the number {value}: write "{candidate}")'
    if re.fullmatch(r"[0-9]+\.[0-9]", value):
        return f" (if you wrote {value}0: unquoted, YAML reads it as the number {value}; quote versions)"
    return ""


def _addon_name(name: str) -> str:
    if name not in versions.EKS_ADDONS:
        suggestion = _suggest(name, list(versions.EKS_ADDONS))
        hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
        raise ValueError(
            f"{name!r} is not an add-on this platform installs{hint}; add-ons: {', '.join(versions.EKS_ADDONS)}"
        )
    return name


_HIDDEN = ("stack",)


# The admins' ARNs of a stack CI deploys, all together: the deploy role's policy lists each of them
# (components/delivery.py ClusterAccessStaysInTheAccount), and the widest shipped stack (prod) has room for this
# much beside its other statements under IAM's 10,240 characters of a role's inline policies
# (ROLE_POLICY_CHARACTERS: tests/delivery/test_policy_sizes.py renders prod with as many admins of this length
# together as IAM's shortest role ARNs make). The rendered policy is what IAM counts, and longer bucket or stack
# names leave less room: components/delivery.py oversized_policies refuses the stack where it would not fit.
ADMINS_CHARACTERS = 450


class StackConfig(Setting):
    """A stack: the `config:` of stacks/Pulumi.<stack>.yaml."""

    model_config = ConfigDict(alias_generator=_root_alias)

    stack: SkipJsonSchema[
        matching(
            DNS_LABEL,
            "is not a valid stack name: a lowercase DNS label of at most 30 characters (it names the cluster, PVs "
            "and namespaces)",
        )
    ]
    region: Str
    """An AWS region with EKS."""
    environment: Literal["dev", "staging", "prod"]
    """prod: cluster, FSx and KMS keys protected, a NAT gateway per AZ, VPC interface endpoints."""
    kubernetes_version: Annotated[str, Field(json_schema_extra={"enum": list(versions.KUBERNETES_SUPPORTED)})] = (
        versions.KUBERNETES_DEFAULT
    )
    """EKS Kubernetes minor version (infra/core/versions.py KUBERNETES_SUPPORTED); quote it: "1.35". Raising it upgrades
    in place: control plane, add-ons, node groups."""
    addon_versions: dict[
        Annotated[str, AfterValidator(_addon_name), Field(json_schema_extra={"enum": list(versions.EKS_ADDONS)})],
        matching(versions.ADDON_VERSION_PATTERN, "is not an EKS add-on version (v1.20.4-eksbuild.1)", 64),
    ] = items(maximum=len(versions.EKS_ADDONS), default={})
    """Exact EKS add-on versions by add-on name (vpc-cni: v1.20.4-eksbuild.1); unset add-ons take EKS's default for
    kubernetesVersion at deploy. Not below the oldest the platform runs (eks-node-monitoring-agent v1.6.4: infra/core/
    versions.py ADDON_FLOORS)."""
    node_release_version: (
        matching(r"^\d+\.\d+\.\d+-\d{8}$", "is not an EKS AMI release version (1.35.2-20261120)") | None
    ) = None
    """EKS-optimized AMI release for every node group (1.35.2-20261120); unset: the latest for kubernetesVersion when a
    node group is created or updated."""
    vpc_cidr: Cidr = "10.0.0.0/16"
    """RFC 1918, /16 to /20. Each AZ gets 1/8 of it for nodes and pods; public subnets share the last 1/8."""
    availability_zones: tuple[
        matching(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$", "is not an availability zone name (us-west-2a)", 32), ...
    ] = items(2, 16)
    """Two or more AZs of aws:region; one private and one public subnet each."""
    public_load_balancers: Bool = False
    """Tag the public subnets for internet-facing load balancers (kubernetes.io/role/elb) and let teams given
    LoadBalancer Services make them; off: teams' load balancers must be internal."""
    endpoint: Endpoint = Endpoint()
    cpu_nodes: NodeSizes
    team_cpu_nodes: TeamCpuNodes = TeamCpuNodes()
    admins: tuple[
        Annotated[
            matching(_ADMIN_ARN, "is not an IAM role or user ARN (arn:aws:iam::123456789012:role/name)", 2048),
            AfterValidator(access_entry_principal),
        ],
        ...,
    ] = items()
    """IAM role/user ARNs (not STS sessions) granted cluster-admin through EKS access entries; each once. In a stack CI
    deploys, at most 450 characters of ARNs together: the deploy role's policy lists them."""
    tags: dict[TagKey, TagValue] = items(maximum=MAX_TAGS - PROGRAM_TAGS, default={})
    """Added to every taggable resource (with higgsfield:stack and higgsfield:environment); AWS allows 50 tags per
    resource, the program sets up to 6 itself."""
    gpu_pools: tuple[GpuPool, ...] = items()
    training_image: matching(IMAGE_REFERENCE, NOT_AN_IMAGE) | None = None
    """Your own EFA-ready image (libfabric's efa provider and aws-ofi-nccl inside), registry/repository:tag or
    @sha256:..., for every rendered job instead of the one built from images/training/Dockerfile into the stack's ECR
    repository; stock pytorch/pytorch is refused when the stack has EFA pools."""
    health_gate_image: matching(IMAGE_REFERENCE, NOT_AN_IMAGE) | None = None
    """The image the GPU health gate runs: one built from images/training (it holds health_gate.py and node_check.py),
    best pinned by digest (`higgsfield image push STACK` prints it); unset: the stack's ECR repository at this
    project's images/training tag, which `higgsfield image push` or the image workflow must have pushed before the
    first GPU node joins."""
    cuda_version: Annotated[str, Field(json_schema_extra={"enum": list(versions.CUDA_MIN_DRIVER_BRANCH)})] | None = None
    """The CUDA version the training images need, e.g. "12.8"; rejected if the GPU AMI's driver is too old."""
    autoscaler: Autoscaler = Autoscaler()
    fsx: Fsx = Field(Fsx(), validate_default=True)
    scheduler: Scheduler = Field(Scheduler(), validate_default=True)
    allow_replace: tuple[Str, ...] = items()
    """Resource names (lustre, cluster-secrets, ...) whose replacement or deletion this change intends; read by
    higgsfield diff."""
    observability: Observability = Observability()
    checkpoints: Checkpoints = Field(Checkpoints(), validate_default=True)
    delivery: Delivery | None = None
    """CI identities (preview, deploy, image push) and CodeBuild runners; unset: CI neither previews nor deploys this
    stack."""

    @field_validator("training_image")
    @classmethod
    def _efa_ready_image(cls, image: str | None, info: ValidationInfo) -> str | None:
        pools = info.data.get("gpu_pools") or ()
        repository = re.split(r"[:@]", image.rsplit("/", 1)[-1])[0] if image else ""
        if image and any(p.efa for p in pools) and f"{image.rsplit('/', 1)[0]}/{repository}" in NOT_EFA_READY:
            raise ValueError(
                f"{image!r} has no EFA provider and no aws-ofi-nccl, so NCCL would fall back to TCP on the EFA pools; "
                "leave it unset for the image built from images/training/Dockerfile"
            )
        return image

    @field_validator("region")
    @classmethod
    def _eks_region(cls, region: str) -> str:
        known = eks_regions()
        if region not in known:
            raise ValueError(not_an_eks_region(region))
        return region

    @field_validator("kubernetes_version")
    @classmethod
    def _supported(cls, version: str) -> str:
        if version not in versions.KUBERNETES_SUPPORTED:
            hint = _version_hint(version, versions.KUBERNETES_SUPPORTED)
            raise ValueError(
                f"{version!r} is not supported; use one of: {', '.join(versions.KUBERNETES_SUPPORTED)}{hint}"
            )
        problems = Problems()
        for outside in versions.components_outside(version):
            problems.add(
                "",
                f"{version!r} is outside what {outside.component} supports (Kubernetes {outside}, {outside.source}); "
                "change the pin in infra/core/versions.py or the version",
            )
        problems.raise_any()
        return version

    @field_validator("node_release_version")
    @classmethod
    def _release_of_the_cluster_minor(cls, release: str | None, info: ValidationInfo) -> str | None:
        cluster = info.data.get("kubernetes_version")
        if release and cluster and not release.startswith(f"{cluster}."):
            raise ValueError(
                f"{release!r} is an AMI release for Kubernetes {'.'.join(release.split('.')[:2])}, but "
                f"higgsfield:kubernetesVersion is {cluster!r}"
            )
        return release

    @field_validator("vpc_cidr")
    @classmethod
    def _private_range(cls, cidr: str) -> str:
        net = ipaddress.IPv4Network(cidr)
        if not net.is_private or not any(
            net.subnet_of(ipaddress.IPv4Network(p)) for p in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
        ):
            raise ValueError(f"{net} is not inside an RFC 1918 range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16)")
        if not 16 <= net.prefixlen <= 20:
            raise ValueError(f"{net} must be a /16 to /20 so every AZ gets room for pods")
        return cidr

    @field_validator("availability_zones")
    @classmethod
    def _zones_of_region(cls, zones: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        problems, region = Problems(), info.data.get("region")
        known = zones_of(region) if region else ()
        for i, zone in enumerate(zones):
            if region and not re.fullmatch(re.escape(region) + r"[a-z]", zone):
                problems.add(f"[{i}]", f"{zone!r} is not an availability zone of region {region} (e.g. {region}a)")
            elif known and zone not in known:
                problems.add(
                    f"[{i}]", f"{zone!r} does not exist in {region}: its zones are {', '.join(known)} ({ZONES_SOURCE})"
                )
        _duplicates(problems, "", list(zones))
        problems.raise_any()
        return zones

    @field_validator("endpoint")
    @classmethod
    def _not_open_in_prod(cls, endpoint: Endpoint, info: ValidationInfo) -> Endpoint:
        problems, seen = Problems(), set()
        for i, cidr in enumerate(endpoint.public_access_cidrs):
            network = ipaddress.IPv4Network(cidr, strict=False)
            if network in seen:  # one range named twice: a typo for another, most likely
                problems.add(f"publicAccessCidrs[{i}]", f"{cidr} is listed already")
            seen.add(network)
            if network.prefixlen == 0 and info.data.get("environment") == "prod":
                problems.add(
                    f"publicAccessCidrs[{i}]",
                    "0.0.0.0/0 opens the API server to the internet; prod allows only an allow-list",
                )
        share = internet_share(endpoint.public_access_cidrs)
        if not problems and info.data.get("environment") == "prod" and share > MAX_INTERNET_SHARE:
            problems.add(
                "publicAccessCidrs",
                f"together these cover {share:.4%} of the internet (at most {MAX_INTERNET_SHARE:.4%}, a /16's "
                "worth): list your VPN/office ranges",
            )
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
                problems.add(
                    f"[{i}].availabilityZone",
                    f"{pool.availability_zone!r} is not one of higgsfield:availabilityZones ({', '.join(zones)})",
                )
        _duplicates(problems, "", [p.name for p in pools])
        reserved: dict[str, int] = {}
        for i, pool in enumerate(pools):
            rid = pool.capacity.reservation_id
            if rid is not None and rid in reserved:
                problems.add(
                    f"[{i}].capacity.reservationId",
                    f"{rid} is gpuPools[{reserved[rid]}]'s reservation too: each pool targets its own "
                    "(one node group launches into one reservation, and two would each count on all of its instances)",
                )
            if rid is not None:
                reserved.setdefault(rid, i)
        blocks = sum(p.max_size for p in pools if p.capacity.type == "capacity-block")
        if blocks > CAPACITY_BLOCKS_MAX_INSTANCES:
            problems.add(
                "",
                f"the capacity-block pools' maxSize add up to {blocks} instances: "
                f"an account holds at most {CAPACITY_BLOCKS_MAX_INSTANCES} "
                f"across its Capacity Blocks ({CAPACITY_BLOCK_DOC})",
            )
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
            raise ValueError(
                f"unknown CUDA version {cuda!r}; known: {', '.join(versions.CUDA_MIN_DRIVER_BRANCH)}{hint}"
            )
        if needed > versions.EKS_NVIDIA_DRIVER_BRANCH:
            newest = max(
                (c for c, d in versions.CUDA_MIN_DRIVER_BRANCH.items() if d <= versions.EKS_NVIDIA_DRIVER_BRANCH),
                key=lambda c: tuple(map(int, c.split("."))),
            )
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
        zone = fsx.availability_zone or (
            efa_zones[0] if efa_zones else (pools[0].availability_zone if pools else zones[0])
        )
        if zone not in zones:
            problems.add(
                "availabilityZone", f"{zone!r} is not one of higgsfield:availabilityZones ({', '.join(zones)})"
            )
        elif fsx.enabled and efa_zones and zone not in efa_zones:
            problems.add(
                "availabilityZone",
                f"{zone} differs from the EFA GPU pools' zone {', '.join(efa_zones)}: every read and checkpoint "
                "would cross AZs (latency, cost)",
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
                problems.add(
                    f"queues[{i}].gpuCapability",
                    f"{queue.gpu_capability} GPUs is more than the GPU pools can ever provide ({total}: every pool "
                    "at maxSize)",
                )
        problems.raise_any()
        # each team's CPU and memory quota: its GPUs' share of these pools' nodes (infra/config/scheduler.py)
        return scheduler.within_share(gpu_share(pools))

    @model_validator(mode="after")
    def _pools_survive_bad_nodes(self) -> StackConfig:
        """Prod turns a pool's health gate off only with a reason; a Capacity Block drains early
        enough for AWS's margin and the pods' grace period; S3 checkpoints need the S3 link."""
        problems, pools = Problems(), f"{NAMESPACE}:gpuPools"
        for i, pool in enumerate(self.gpu_pools):
            if self.production and not pool.health_gate.enabled and pool.health_gate.reason is None:
                problems.add(
                    f"{pools}[{i}].healthGate.enabled",
                    "false in prod needs healthGate.reason: without the gate a node with a bad GPU or EFA link joins "
                    "and fails every job on it",
                )
            drain = seconds_of(pool.capacity.drain_before)
            needed = CAPACITY_BLOCK_END_MARGIN_S + self.checkpoints.grace_seconds
            if pool.capacity.type == "capacity-block" and drain < needed:
                problems.add(
                    f"{pools}[{i}].capacity.drainBefore",
                    f"{pool.capacity.drain_before} is too short: AWS asks for zero nodes 30m before the end, and "
                    "pods take up to "
                    f"{self.checkpoints.termination_grace_period} (higgsfield:checkpoints.terminationGracePeriod) to "
                    f"stop; use at least {needed // 60 + (needed % 60 > 0)}m",
                )
        if self.checkpoints.export_to_s3 and (
            not self.fsx.enabled or self.fsx.s3 is None or self.fsx.s3.dataset is None
        ):
            problems.add(
                f"{NAMESPACE}:checkpoints.exportToS3",
                "needs higgsfield:fsx with an s3 link to a dataset (fsx.s3.dataset): that directory is what reaches S3",
            )
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _team_cpu_nodes_defaults(self, info: ValidationInfo) -> StackConfig:
        """The teams' CPU nodes take the system nodes' instance types unless set, and unless a maximum is set, room for
        every team's launchers however each other team spends its CPU-only work's room: a pod asking more than half
        a node's CPU or memory stands alone on it, so a team's MIN_CPU_QUOTA vCPUs and MIN_MEMORY_QUOTA_GIB GiB make
        at most 2 x room / node nodes unfit for another team's launcher in each of the two, on the smallest of those
        types (ALLOCATABLE_SHARE of it), and its `cpu-only` and `cpu-services` quotas' pods (CPU_ONLY_PODS in all) the
        slots of as many nodes as they fill, past the node daemons' (TEAM_CPU_NODE_DAEMON_PODS), on the type with the
        fewest; and unless one is set an unneeded time as long as the GPU
        pools' longest scale-down-unneeded time and each pool's boot and health gate (a launcher's node, up first,
        stands empty until its gang's last GPU node has passed the gate). A type whose pod slots the node daemons take,
        set or taken from cpuNodes, is refused."""
        nodes = self.team_cpu_nodes
        types = nodes.instance_types or self.cpu_nodes.instance_types
        setting = f"{NAMESPACE}:{'teamCpuNodes' if nodes.instance_types else 'cpuNodes'}.instanceTypes"
        catalog, _ = _catalog(info)
        facts = [catalog.describe(t) for t in types] if catalog is not None else []
        problems = Problems()
        for i, fact in enumerate(facts):
            if fact.pod_slots <= TEAM_CPU_NODE_DAEMON_PODS:
                problems.add(
                    f"{setting}[{i}]",
                    f"{fact.name} holds {fact.pod_slots} pods, and the node daemons take about "
                    f"{TEAM_CPU_NODE_DAEMON_PODS} of them: no team's pod would fit on the teams' CPU nodes (they take "
                    "cpuNodes' types unless teamCpuNodes.instanceTypes is set); pick a larger type",
                )
        problems.raise_any()
        size = nodes.max_size
        if size is None:
            # what a node has for pods: less the kubelet's reservations and the node daemons (an estimate)
            vcpus = min((f.vcpus for f in facts), default=0) * ALLOCATABLE_SHARE
            gib = min((f.memory_mib for f in facts), default=0) / 1024 * ALLOCATABLE_SHARE
            # the pod slots a node has for teams: less the node daemons' (an estimate; types without any are refused)
            slots = min((f.pod_slots for f in facts), default=0) - TEAM_CPU_NODE_DAEMON_PODS
            pods = ceil(CPU_ONLY_PODS / slots) if slots > 0 else 1
            per_team = int(2 * MIN_CPU_QUOTA // vcpus + 2 * MIN_MEMORY_QUOTA_GIB // gib) + pods if vcpus and gib else 1
            size = max(1, per_team * len(self.scheduler.teams))
        startups = (
            f"{seconds_of(p.boot_time) + (seconds_of(p.health_gate.timeout) if p.health_gate.enabled else 0)}s"
            for p in self.gpu_pools
        )
        unneeded = nodes.scale_down_unneeded_time or max(
            (*(p.scale_down_unneeded_time for p in self.gpu_pools), *startups),
            key=seconds_of,
            default=GPU_SCALE_DOWN_UNNEEDED_DEFAULT,
        )
        filled = {"instance_types": types, "max_size": size, "scale_down_unneeded_time": unneeded}
        if filled != {k: getattr(nodes, k) for k in filled}:
            object.__setattr__(self, "team_cpu_nodes", nodes.model_copy(update=filled))
        return self

    @model_validator(mode="after")
    def _subnets_hold_the_pools(self) -> StackConfig:
        """Each AZ's private subnet (an eighth of the VPC: components/network.py subnet_plan) has
        room for the nodes its pools can grow to, and their pods' addresses."""
        private = ipaddress.IPv4Network(self.vpc_cidr).prefixlen + 3
        usable = 2 ** (32 - private) - SUBNET_RESERVED_ADDRESSES
        zones = len(self.availability_zones)
        # each CPU group spreads its nodes over every zone on its own
        cpu_nodes = sum(-(-size // zones) for size in (self.cpu_nodes.max_size, self.team_cpu_nodes.max_size))
        need = {zone: cpu_nodes for zone in self.availability_zones}
        for pool in self.gpu_pools:
            if pool.availability_zone in need:
                need[pool.availability_zone] += pool.max_size
        problems = Problems()
        for zone, nodes in need.items():
            if nodes * ADDRESSES_PER_NODE > usable:
                problems.add(
                    f"{NAMESPACE}:vpcCidr",
                    f"{self.vpc_cidr} gives {zone} a /{private} private subnet of {usable} usable addresses "
                    f"(AWS reserves {SUBNET_RESERVED_ADDRESSES}), but its pools and system nodes can grow to "
                    f"{nodes} nodes, which need at least "
                    f"{nodes * ADDRESSES_PER_NODE} ({ADDRESSES_PER_NODE} a node: its primary interface and a pod's; "
                    "EFA-only interfaces take none): "
                    f"a larger vpcCidr (a /16 gives {2**13 - SUBNET_RESERVED_ADDRESSES}) or smaller maxSize",
                )
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _addons_at_their_floor(self) -> StackConfig:
        problems = Problems()
        for name, pin in self.addon_versions.items():
            floor = versions.below_floor(name, pin)
            if floor:
                problems.add(
                    f"{NAMESPACE}:addonVersions.{name}",
                    f"{pin} is below {floor}, the oldest this platform runs (infra/core/versions.py ADDON_FLOORS says "
                    "why); pin a newer one or none",
                )
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _datasets_name_teams(self) -> StackConfig:
        problems, teams = Problems(), {t.name for t in self.scheduler.teams}
        where = f"{NAMESPACE}:fsx.datasets"
        for i, dataset in enumerate(self.fsx.datasets):
            for key, team in [("owner", dataset.owner), *((f"readers[{j}]", r) for j, r in enumerate(dataset.readers))]:
                if team not in teams:
                    problems.add(
                        f"{where}[{i}].{key}", f"unknown team {team!r}; teams: {', '.join(sorted(teams)) or 'none'}"
                    )
        problems.raise_any()
        return self

    @model_validator(mode="after")
    def _deploy_environment_default(self) -> StackConfig:
        # Every role of a CI-deployed stack is named higgsfield-STACK-... (components/delivery.py
        # bound_every_role): IAM's name prefix holds at most 38 characters.
        if self.delivery is not None and len(f"higgsfield-{self.stack}-") > 38:
            problems = Problems()
            problems.add(
                f"{NAMESPACE}:delivery",
                f"stack name {self.stack!r} is too long for a stack CI deploys: at most 26 characters (its roles are "
                "named higgsfield-STACK-...)",
            )
            problems.raise_any()
        if self.delivery is not None and sum(map(len, self.admins)) > ADMINS_CHARACTERS:
            problems = Problems()
            problems.add(
                f"{NAMESPACE}:admins",
                f"{sum(map(len, self.admins))} characters of ARNs, over the {ADMINS_CHARACTERS} a stack CI deploys has "
                "room for: its deploy role's policy lists every admin and IAM caps a role's inline policies at 10,240 "
                "characters; name one admin role the others assume",
            )
            problems.raise_any()
        if self.delivery is not None and self.delivery.deploy_environment is None:
            object.__setattr__(self, "delivery", self.delivery.model_copy(update={"deploy_environment": self.stack}))
        return self

    @model_validator(mode="after")
    def _derived_names_are_unique(self) -> StackConfig:
        """No two settings derive the same name (access entry, resource, PV, namespace, ASG tag):
        a duplicate would be a duplicate URN or object, refused by Pulumi or the API server midway
        through a deploy (infra/config/names.py)."""
        from infra.config.names import collisions

        problems = Problems()
        for where, message in collisions(self):
            problems.add(where, message)
        problems.raise_any()
        return self

    @property
    def total_gpus(self) -> int:
        """The most GPUs the pools can ever provide: every pool at maxSize."""
        return sum(p.max_size * p.gpus_per_node for p in self.gpu_pools)

    @property
    def fsx_away_from_efa_pools(self) -> str | None:
        """Where FSx is on and EFA pools sit in more than one AZ: the line that says which pools
        read and checkpoint across AZs, naming the settings (plan's note, check's advisory; init
        says the same when the region leaves no choice). None: FSx is off or beside every EFA pool."""
        efa = [(i, p) for i, p in enumerate(self.gpu_pools) if p.efa]
        zone = self.fsx.availability_zone
        away = [(i, p) for i, p in efa if p.availability_zone != zone]
        if not self.fsx.enabled or not away:
            return None
        pools = ", ".join(
            f"{p.name} in {p.availability_zone} (higgsfield:gpuPools[{i}].availabilityZone)" for i, p in away
        )
        return (
            f"higgsfield:fsx: FSx is in {zone} (fsx.availabilityZone, default the first EFA pool's zone), but EFA "
            f"pool{'s' if len(away) > 1 else ''} {pools} read and checkpoint across AZs (latency, cross-AZ "
            "traffic): put every EFA pool in one zone with FSx"
        )

    @property
    def api_service_ip(self) -> str:
        """The `kubernetes` Service's ClusterIP in this stack's cluster (infra/config/cluster.py)."""
        return api_service_ip(self.vpc_cidr)

    @property
    def production(self) -> bool:
        return self.environment == "prod"

    @property
    def name(self) -> str:
        """The base name of this stack's cloud resources, e.g. `higgsfield-dev`."""
        return cluster_name(self.stack)

    @property
    def node_group_pools(self) -> tuple[GpuPool, ...]:
        """The GPU pools EKS managed node groups provide (`provisioner: node-group`)."""
        return tuple(p for p in self.gpu_pools if p.provisioner == "node-group")

    @property
    def karpenter_pools(self) -> tuple[GpuPool, ...]:
        """The GPU pools Karpenter provisions (`provisioner: karpenter`)."""
        return tuple(p for p in self.gpu_pools if p.provisioner == "karpenter")

    @property
    def gated_pools(self) -> tuple[GpuPool, ...]:
        """The GPU pools whose nodes pass the health gate before any job (`healthGate.enabled`)."""
        return tuple(p for p in self.gpu_pools if p.health_gate.enabled)

    @property
    def efa_pools(self) -> bool:
        """Whether any GPU pool has EFA interfaces (the EFA device plugin is installed then)."""
        return any(p.efa for p in self.gpu_pools)

    @property
    def resource_tags(self) -> dict[str, str]:
        """Tags on every taggable resource: the configured ones plus where it comes from."""
        return {**self.tags, STACK_TAG: self.stack, "higgsfield:environment": self.environment}

"""`higgsfield timeline STACK --job POOL`: from "job submitted" to "first step" on a GPU pool,
cold (no node yet: the autoscaler buys one) and warm (a gated node is up, e.g. a reservation held
warm), each step with its figure and where the figure comes from - a cited default, our config,
or an estimate (marked so; the command that measures it is in docs/cold-start.md).

The model holds what shortens the path, so the numbers say what each buys:
- the training image is built on PyTorch's *runtime* image in a multi-stage build
  (images/training/Dockerfile): fewer bytes per new node;
- the health gate runs in the training image (components/healthgate.py), so every new node has
  pulled it before the gate passes, and the job's pull is a cache hit - tests/offline/test_cold_start.py
  keeps the two images the same;
- GPU nodes turn on nodeadm's FastImagePull feature gate (parallel pull and unpack through the
  SOCI snapshotter; components/efa.py node_user_data), read at awslabs/amazon-eks-ami.

The third path (`shortened=False`) is the cold path with the devel image and containerd's default
pull, for comparison.
Also the bound of a half-delivered gang (docs/capacity.md): what the nodes that arrived cost
before they are given back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from components.gang_deadline import DEADLINE_CHECK_S, ESTIMATE, boot_seconds, empty_node_s, gang_deadline_s
from infra.config import GpuPool, StackConfig, seconds_of
from infra.core import versions
from infra.offline.measured import Measured, PoolTimings

# Where each cited figure was read: the pinned component's code (the autoscaler of the default
# Kubernetes minor).
CA = "kubernetes/autoscaler:cluster-autoscaler/{path}@cluster-autoscaler-" + versions.CLUSTER_AUTOSCALER_IMAGE[
    versions.KUBERNETES_DEFAULT
].removeprefix("v")
VOLCANO = "volcano-sh/volcano:{path}@v" + versions.VOLCANO.version
EKS_AMI = "awslabs/amazon-eks-ami:{path}@" + versions.EKS_AMI_READ
TRAINING_OPERATOR = "kubeflow/trainer:{path}@" + versions.TRAINING_OPERATOR_REF
KARPENTER = "aws/karpenter-provider-aws:{path}@v" + versions.KARPENTER.version

# Image sizes (compressed, what a node downloads). Estimates: no registry is reachable here.
# Measure: `crane manifest IMAGE | jq '[.layers[].size] | add'` (or `docker buildx imagetools
# inspect --raw`) on the image the workflow pushed.
IMAGE_GB_DEVEL = 10.0  # pytorch/pytorch:*-devel (CUDA toolkit, compilers) + EFA + build tools
IMAGE_GB_RUNTIME = 4.5  # pytorch/pytorch:*-runtime + EFA user space + the built plugin and nccl-tests
# Pull and unpack throughput per node (MB/s). containerd's default pull downloads 3 layers at a time
# and unpacks serially; FastImagePull downloads up to 20 chunks per image and unpacks 12 layers at
# once with unpigz (max_concurrent_downloads_per_image, max_concurrent_unpacks_per_image,
# nodeadm/internal/containerd/snapshotter/soci-snapshotter.config.toml). Rates are estimates.
PULL_MB_S_DEFAULT = 120.0
PULL_MB_S_FAST = 300.0


@dataclass(frozen=True)
class Step:
    what: str
    seconds: float
    source: str  # a cited file, "config: key", or "estimate: ..."

    @property
    def estimate(self) -> bool:
        return self.source.startswith(ESTIMATE)


@dataclass(frozen=True)
class Path:
    name: str  # "cold" or "warm"
    steps: tuple[Step, ...]

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)


DEVICE_PLUGINS_S = 30.0  # estimate: the NVIDIA and EFA device plugin pods start and register (small images)
GATE_TYPICAL_S = 180.0  # matmul burn, memory copy, EFA/NCCL loopback, Lustre write (node_check.py)


def gate_seconds(pool: GpuPool) -> tuple[float, str]:
    """The gate's checks: typical figure, and the pool's own bound (healthGate.timeout)."""
    if not pool.health_gate.enabled:
        return 0.0, "config: healthGate.enabled is false (no gate)"
    bound = seconds_of(pool.health_gate.timeout)
    return min(GATE_TYPICAL_S, bound), (
        f"{ESTIMATE}: typical run of images/training/node_check.py; at most "
        f"config healthGate.timeout = {pool.health_gate.timeout}"
    )


def _pull(gb: float, mb_s: float, fast: bool) -> Step:
    how = "FastImagePull (nodeadm feature gate, parallel pull + unpack)" if fast else "containerd's default pull"
    return Step(
        f"pull the training image ({gb:g} GB at {mb_s:g} MB/s, {how})",
        gb * 1000 / mb_s,
        f"{ESTIMATE}: image bytes and throughput (infra/offline/cold_start.py IMAGE_GB_*, PULL_MB_S_*); "
        + (
            EKS_AMI.format(path="nodeadm/internal/containerd/snapshotter/soci-snapshotter.config.toml")
            if fast
            else "containerd defaults"
        ),
    )


def _admission() -> list[Step]:
    period = Step(
        "Volcano's next session: enqueue admits the gang, its PodGroup turns Inqueue",
        1.0,
        VOLCANO.format(path="cmd/scheduler/app/options/options.go")
        + " defaultSchedulerPeriod = 1s (--schedule-period)",
    )
    pods = Step(
        "the Training Operator creates the gang's pods (it waited for Inqueue)",
        1.0,
        f"{ESTIMATE}: one reconcile ({TRAINING_OPERATOR.format(path='pkg/controller.v1/common/job.go')}"
        " DelayPodCreationDueToPodGroup)",
    )
    return [period, pods]


def _first_step(nodes: int) -> list[Step]:
    return [
        Step("containers start (image already on the node)", 5.0, f"{ESTIMATE}: kubelet + containerd start, no pull"),
        Step(
            f"torchrun rendezvous + NCCL init over EFA ({nodes} node(s))",
            30.0 + 1.0 * nodes,
            f"{ESTIMATE}: NCCL communicator init and the first all-reduce; measure with NCCL_DEBUG=INFO timestamps",
        ),
    ]


def _autoscaler_notices() -> list[Step]:
    return [
        Step(
            "the autoscaler waits until the oldest GPU pod is 30 s old",
            30.0,
            CA.format(path="core/static_autoscaler.go") + " unschedulablePodWithGpuTimeBuffer = 30s",
        ),
        Step(
            "the autoscaler's next loop sees them and scales the ASG up",
            10.0,
            CA.format(path="config/const.go") + " DefaultScanInterval = 10s (--scan-interval, worst case)",
        ),
    ]


def _karpenter_batch() -> list[Step]:
    return [
        Step(
            "Karpenter batches the pending pods and launches (CreateFleet)",
            10.0,
            KARPENTER.format(path="charts/karpenter/values.yaml")
            + " settings.batchIdleDuration 1s, batchMaxDuration 10s (worst case)",
        )
    ]


def cold_path(pool: GpuPool, nodes: int, *, shortened: bool = True) -> Path:
    """A pool at zero: the autoscaler buys `nodes` nodes for the gang."""
    boot, boot_src = boot_seconds(pool)
    gate, gate_src = gate_seconds(pool)
    gb = IMAGE_GB_RUNTIME if shortened else IMAGE_GB_DEVEL
    steps = _admission() + [
        Step(
            "Volcano marks the pods Unschedulable (next session)",
            1.0,
            VOLCANO.format(path="pkg/scheduler/cache/cache.go") + " RecordJobStatusEvent; session every 1s",
        ),
        *(_karpenter_batch() if pool.provisioner == "karpenter" else _autoscaler_notices()),
        Step("EC2 launch, boot, join, node Ready", boot, boot_src),
    ]
    pull = _pull(gb, PULL_MB_S_FAST if shortened else PULL_MB_S_DEFAULT, fast=shortened)
    steps += [
        # The gate's DaemonSet pod runs in the training image (components/healthgate.py) and starts
        # when the node is Ready, beside the device plugins: the job's image is on the node before
        # the gate passes, and the job's own pull is a cache hit (tests/offline/test_cold_start.py).
        Step(
            "the health gate pod pulls the training image it runs in, while the device plugins register; "
            f"{pull.what.removeprefix('pull the training image ')}",
            max(pull.seconds, DEVICE_PLUGINS_S),
            pull.source,
        ),
        Step("health gate checks pass, the startup taint comes off", gate, gate_src),
        Step(
            "Volcano binds the whole gang (next session)",
            1.0,
            VOLCANO.format(path="cmd/scheduler/app/options/options.go") + " 1s period",
        ),
    ]
    return Path("cold" if shortened else "cold, devel image + default pull", tuple(steps + _first_step(nodes)))


def measured_path(timings: PoolTimings, source: str) -> Path:
    """The cold path as `higgsfield verify --allow-cost` measured it on the live cluster
    (infra/offline/measured.py): each step between two moments the API server recorded."""
    where = f"measured: {source}"
    steps = (
        Step("pods created -> node registered (Volcano, the autoscaler, EC2 launch)", timings.scale_up_s, where),
        Step("node registered -> Ready (boot, nodeadm, kubelet)", timings.node_boot_s, where),
        Step("Ready -> the gate passed, startup taint off (its image pull and checks)", timings.gate_s, where),
        Step("the job's own image pull (a cache hit after the gate's)", timings.image_pull_s, where),
    )
    rest = timings.first_step_s - sum(s.seconds for s in steps)
    return Path(
        f"cold, measured ({timings.nodes} x {timings.instance_type})",
        (*steps, Step("bind, containers start -> first step", max(rest, 0.0), where)),
    )


def warm_path(pool: GpuPool, nodes: int) -> Path:
    """Gated nodes are up and idle (a reservation held warm, or nodes not yet scaled down)."""
    steps = _admission() + [
        Step(
            "Volcano binds the whole gang (next session)",
            1.0,
            VOLCANO.format(path="cmd/scheduler/app/options/options.go") + " 1s period",
        )
    ]
    return Path("warm", tuple(steps + _first_step(nodes)))


# --- the bound of a half-delivered gang ------------------------------------------------------------


@dataclass(frozen=True)
class GiveBack:
    """How long the nodes that arrived for a gang that cannot be whole are paid for (docs/capacity.md)."""

    deadline_s: float  # the gang waits this long for its last node: boot + gate bound + margin
    check_s: float  # the gang-deadline CronJob's period
    unneeded_s: float  # the pool's scaleDownUnneededTime, once the gang's pods are gone
    scan_s: float  # one autoscaler loop
    node_hour_usd: float | None
    arrived_at_most: int  # nodes: maxSize - 1 (one short of a whole gang of the pool)

    @property
    def seconds(self) -> float:
        return self.deadline_s + self.check_s + self.unneeded_s + self.scan_s

    @property
    def usd(self) -> float | None:
        return None if self.node_hour_usd is None else self.arrived_at_most * self.node_hour_usd * self.seconds / 3600


def give_back(pool: GpuPool, node_hour_usd: float | None) -> GiveBack:
    """The nodes go once empty for as long as the pool keeps an empty node (components/gang_deadline.py
    empty_node_s)."""
    return GiveBack(
        gang_deadline_s(pool), DEADLINE_CHECK_S, empty_node_s(pool), 10.0, node_hour_usd, max(pool.max_size - 1, 0)
    )


def pool_of(cfg: StackConfig, name: str, option: str = "--job") -> GpuPool:
    """The GPU pool `name`, else a ConfigError naming the command's `option` that named it."""
    from infra.config import ConfigError

    for pool in cfg.gpu_pools:
        if pool.name == name:
            return pool
    raise ConfigError(
        option,
        f"no GPU pool {name!r} in stack {cfg.stack}; pools: {', '.join(p.name for p in cfg.gpu_pools) or 'none'}",
    )


def as_json(pool: GpuPool, nodes: int, paths: list[Path], bound: GiveBack) -> dict:
    return {
        "pool": pool.name,
        "instance_type": pool.instance.name,
        "nodes": nodes,
        "paths": [
            {
                "path": p.name,
                "seconds": round(p.seconds, 1),
                "steps": [
                    {"what": s.what, "seconds": round(s.seconds, 1), "source": s.source, "estimate": s.estimate}
                    for s in p.steps
                ],
            }
            for p in paths
        ],
        "half_delivered_gang": {
            "deadline_s": bound.deadline_s,
            "check_s": bound.check_s,
            "scale_down_unneeded_s": bound.unneeded_s,
            "scan_s": bound.scan_s,
            "bound_s": bound.seconds,
            "nodes_at_most": bound.arrived_at_most,
            "usd_at_most": None if bound.usd is None else round(bound.usd, 2),
        },
    }


class JobStart(NamedTuple):
    """A job's start on a pool: the pool, the gang's nodes, the paths and the half-delivered gang's bound."""

    pool: GpuPool
    nodes: int
    paths: list[Path]
    bound: GiveBack


def report(plan, pool_name: str, nodes: int | None, measured: Measured | None = None) -> JobStart:
    """The `timeline --job` report of a recorded plan (`as_json(*report)` is its JSON); with
    `measured` timings of the pool, the measured cold path comes first, the estimates after it."""
    from infra.config import ConfigError
    from infra.offline import cost

    cfg = plan.config
    pool = pool_of(cfg, pool_name)
    count = pool.max_size if nodes is None else nodes
    if not 1 <= count <= pool.max_size:
        raise ConfigError("--nodes", f"must be between 1 and pool {pool.name}'s maxSize {pool.max_size}, got {count}")
    prices = cost.load_prices()
    rate = prices["regions"].get(cfg.region, {}).get("ec2_on_demand_hour", {}).get(pool.instance.name)
    if pool.capacity_type in ("spot", "capacity-block"):
        rate = None  # spot moves, a block is prepaid (infra/offline/cost.py)
    paths = [cold_path(pool, count), warm_path(pool, count), cold_path(pool, count, shortened=False)]
    timings = measured.pools.get(pool.name) if measured else None
    if measured and timings:
        paths.insert(0, measured_path(timings, f"{measured.source} ({measured.measured_at})"))
    bound = give_back(pool, rate)
    return JobStart(pool, count, paths, bound)

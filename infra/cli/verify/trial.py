"""The trial gang (`verify --allow-cost`): a gang of pods on a GPU pool at zero, in a namespace of
its own, timed from "submitted" to "first step" by what the API server recorded, then deleted with
its namespace whatever happened. Its cost is estimated (infra/offline/cost.py prices, the pool's
cold start and scale-down time) and printed before anything is created.

The gang: a Volcano PodGroup (minMember = the nodes) in the first queue whose GPU capability holds
it (Volcano's `default` queue holds no GPUs: components/training.py; no admission policy binds a
queue outside the team namespaces, components/tenancy.py), and one pod per node that asks for
all the node's GPUs, tolerates the pool's taints but not the gate's startup taint (so it binds
only once the gate passed the node), runs the training image the gate runs (a cache hit, as a
job's) and prints one line: its first step."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any

from infra.cli.verify import Outcome, Spec, failed, skipped
from infra.core import names

NAMESPACE_PREFIX = "higgsfield-verify-"
VERIFY_LABEL = "higgsfield.io/verify"
FIRST_STEP = "higgsfield-verify: first step"
GROUP_ANNOTATION = (
    "scheduling.k8s.io/group-name"  # a pod's PodGroup (volcano-sh/apis:pkg/apis/scheduling/v1beta1/labels.go)
)


@dataclass(frozen=True)
class Plan:
    pool: Any
    nodes: int
    image: str
    queue: str
    rate_usd_h: float | None
    seconds: float  # the cold start (estimated) plus the pool's scale-down time: how long nodes are paid for

    @property
    def usd(self) -> float | None:
        return None if self.rate_usd_h is None else self.rate_usd_h * self.nodes * self.seconds / 3600

    def describe(self) -> str:
        money = f"about ${self.usd:,.2f}" if self.usd is not None else "not priced (spot or Capacity Block)"
        return (
            f"trial gang on pool {self.pool.name} (queue {self.queue}): {self.nodes} x {self.pool.instance.name} "
            f"for about {self.seconds / 60:.0f} min (cold start + scale-down), {money}"
        )


def choose(cfg: Any, pool_name: str | None, nodes: int) -> Plan:
    """The trial's pool (named, else the first pool at zero), node count and cost estimate."""
    from infra.config import ConfigError, seconds_of
    from infra.offline import cold_start, cost
    from infra.offline.pods import default_image

    found = (
        cold_start.pool_of(cfg, pool_name, "--pool")
        if pool_name
        else next((p for p in cfg.gpu_pools if p.min_size == 0), None)
    )
    if found is None:
        raise ConfigError("--pool", "no GPU pool scales from zero in this stack: name one with --pool")
    pool = found
    if not 1 <= nodes <= pool.max_size:
        raise ConfigError("--nodes", f"must be between 1 and pool {pool.name}'s maxSize {pool.max_size}, got {nodes}")
    rate = cost.load_prices()["regions"].get(cfg.region, {}).get("ec2_on_demand_hour", {}).get(pool.instance.name)
    if pool.capacity_type in ("spot", "capacity-block"):
        rate = None
    gpus = pool.gpus_per_node * nodes
    queue = next((q.name for q in cfg.scheduler.queues if (q.gpu_capability or 0) >= gpus), None)
    if queue is None:
        raise ConfigError("--nodes", f"no queue of the stack holds {gpus} GPUs (higgsfield:scheduler.queues)")
    cold = cold_start.cold_path(pool, nodes).seconds
    return Plan(pool, nodes, default_image(cfg), queue, rate, cold + seconds_of(pool.scale_down_unneeded_time))


def objects(plan: Plan, namespace: str) -> tuple[dict, dict, list[dict]]:
    """The namespace, the PodGroup and the pods of the trial."""
    from components.device_plugins import GPU_TOLERATION
    from infra.offline.pods import tolerate_pool

    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {VERIFY_LABEL: "true"}}}
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "trial", "namespace": namespace},
        "spec": {"minMember": plan.nodes, "queue": plan.queue},
    }
    pods = []
    for i in range(plan.nodes):
        spec: dict = {
            "schedulerName": "volcano",
            "restartPolicy": "Never",
            "nodeSelector": {names.POOL_LABEL: plan.pool.name},
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {
                    "name": "trial",
                    "image": plan.image,
                    "command": ["sh", "-c", f"nvidia-smi -L; echo '{FIRST_STEP}'"],
                    "resources": {"limits": {names.GPU_RESOURCE: str(plan.pool.gpus_per_node)}},
                }
            ],
        }
        tolerate_pool(spec, plan.pool)
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"trial-{i}",
                    "namespace": namespace,
                    "labels": {VERIFY_LABEL: "true"},
                    "annotations": {GROUP_ANNOTATION: "trial"},
                },
                "spec": spec,
            }
        )
    return ns, group, pods


def _at(text: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _ready_at(node: dict) -> datetime.datetime | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return _at(condition.get("lastTransitionTime"))
    return None


def _event_at(events: list[dict], pod: str, reason: str) -> datetime.datetime | None:
    times = [
        _at(e.get("eventTime") or e.get("firstTimestamp"))
        for e in events
        if (e.get("involvedObject") or {}).get("name") == pod and e.get("reason") == reason
    ]
    return min((t for t in times if t), default=None)


def _first_step_at(log: str) -> datetime.datetime | None:
    for row in log.splitlines():
        stamp, _, text = row.partition(" ")
        if FIRST_STEP in text:
            return _at(stamp[:26] + "Z" if len(stamp) > 27 else stamp)
    return None


class Watch:
    """What the trial saw so far: when each node's startup taint was first seen gone."""

    def __init__(self) -> None:
        self.untainted: dict[str, datetime.datetime] = {}

    def observe(self, nodes: list[dict], now: datetime.datetime) -> None:
        for node in nodes:
            taints = {t["key"] for t in (node.get("spec") or {}).get("taints") or []}
            if names.STARTUP_TAINT_KEY not in taints:
                self.untainted.setdefault(node["metadata"]["name"], now)


def timings(kube: Any, namespace: str, watch: Watch) -> dict[str, float] | None:
    """The trial's timings once every pod logged its first step (the slowest pod's), else None."""
    pods = kube.pods(namespace)
    nodes = {n["metadata"]["name"]: n for n in kube.nodes(names.POOL_LABEL)}
    events = kube.events(namespace)
    worst: dict[str, float] = {}
    for pod in pods:
        created, node_name = _at(pod["metadata"].get("creationTimestamp")), (pod.get("spec") or {}).get("nodeName")
        node = nodes.get(node_name or "")
        first = _first_step_at(kube.pod_log(namespace, pod["metadata"]["name"])) if node else None
        if not (created and node and first):
            return None
        registered, ready = _at(node["metadata"].get("creationTimestamp")), _ready_at(node)
        untainted = watch.untainted.get(node_name or "", ready)
        pulling, pulled = (_event_at(events, pod["metadata"]["name"], r) for r in ("Pulling", "Pulled"))
        if not (registered and ready and untainted):
            return None
        warm = registered <= created  # a node that was up before the trial: no scale-up, boot or gate to time
        figures: dict[str, float] = {
            "warm_nodes": float(warm),
            "scale_up_s": 0.0 if warm else (registered - created).total_seconds(),
            "node_boot_s": 0.0 if warm else (ready - registered).total_seconds(),
            "gate_s": 0.0 if warm else (untainted - ready).total_seconds(),
            "image_pull_s": (pulled - pulling).total_seconds() if pulling and pulled else 0.0,
            "first_step_s": (first - created).total_seconds(),
        }
        worst = {k: max(v, worst.get(k, 0.0)) for k, v in figures.items()}
    return {k: max(0.0, round(v, 1)) for k, v in worst.items()} if pods else None


def _said(plan: Plan, measured: dict[str, float], warm: bool) -> str:
    start = f"{plan.nodes} node(s) of {plan.pool.name}"
    if warm:
        return (
            f"{start}: a node was already up (the pool was not at zero): first step in "
            f"{measured['first_step_s']:.0f} s, nothing of a cold start measured"
        )
    return (
        f"{start} from zero to first step in {measured['first_step_s']:.0f} s (scale-up {measured['scale_up_s']:.0f}, "
        f"boot {measured['node_boot_s']:.0f}, gate {measured['gate_s']:.0f}, pull {measured['image_pull_s']:.0f})"
    )


def run(ctx: Any) -> Outcome:
    plan: Plan | None = ctx.found.get("trial")
    if plan is None:
        return skipped("no trial planned")
    kube = ctx.kube
    namespace = NAMESPACE_PREFIX + ctx.now().strftime("%Y%m%d%H%M%S")
    ns, group, pods = objects(plan, namespace)
    watch, deadline = Watch(), time.monotonic() + ctx.trial_timeout_s
    kube.create_namespace(ns)
    try:
        kube.create_namespaced("scheduling.volcano.sh", "v1beta1", namespace, "podgroups", group, dry_run=False)
        for pod in pods:
            kube.create_pod(namespace, pod)
        while time.monotonic() < deadline and not ctx.cancel.is_set():
            watch.observe(kube.nodes(names.POOL_LABEL), ctx.now())
            measured = timings(kube, namespace, watch)
            if measured is not None:
                warm = bool(measured.pop("warm_nodes"))
                if not warm:  # only a cold start's figures replace the estimates
                    entry = {"instance_type": plan.pool.instance.name, "nodes": plan.nodes, **measured}
                    ctx.found["timings"] = {plan.pool.name: entry}
                return Outcome("PASS", _said(plan, measured, warm), timings=measured)
            ctx.cancel.wait(ctx.poll_s)
        return failed(
            "stopped before a first step (interrupted, or out of time)"
            if ctx.cancel.is_set()
            else f"no first step within {ctx.trial_timeout_s:.0f} s",
            f"`kubectl -n {namespace} get podgroup,pods -o wide`, `kubectl -n kube-system get configmap "
            "cluster-autoscaler-status -o yaml` (rerun with --keep to look before it is deleted)",
        )
    finally:
        if not ctx.found.get("keep"):
            kube.delete_namespace(namespace)
            ctx.found["deleted"] = namespace


def specs() -> list[Spec]:
    return [
        Spec(
            "trial.gang",
            "a gang on a pool at zero scales it up past the gate to a first step, timed (then deleted)",
            run,
            "kube",
            "create/delete namespaces; create podgroups, pods; list pods, events, nodes; get pods/log",
            timeout_s=3700.0,
            after=("kube.api", "kube.leases", "kube.daemon-sets"),
            costs=True,
        )
    ]

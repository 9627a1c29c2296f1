"""Autoscaler demand only from work that can run (docs/design/autoscaler-demand.md
has the decision and its evidence).

The rule chain, each link read at the pinned ref:
1. The Cluster Autoscaler scales up only for pods whose PodScheduled condition is False with
   reason Unschedulable (ArrangePodsBySchedulability, kubernetes/autoscaler:cluster-autoscaler/
   utils/kubernetes/listers.go@cluster-autoscaler-1.35.2); a pod that does not exist is no demand.
2. The Training Operator creates no pod of a gang while its PodGroup's phase is empty or Pending
   (VolcanoControl.DelayPodCreationDueToPodGroup, kubeflow/trainer:pkg/controller.v1/control/
   podgroup_control.go, called from ReconcileJobs in pkg/controller.v1/common/job.go@v1.9.4), and
   sets the PodGroup's minResources to the requests of its minMember pods (CalcPGMinResources,
   pkg/controller.v1/common/util.go@v1.9.4).
3. With the `enqueue` action a PodGroup leaves Pending only when every enqueue vote permits it
   (enqueue.go, framework/session_plugins.go JobEnqueueable@v1.15.1); without it, `allocate`
   turns every Pending PodGroup Inqueue at once ("If not config enqueue action, change Pending pg
   into Inqueue state", actions/allocate/allocate.go@v1.15.1), so every gang's pods exist and
   Volcano marks each pending one Unschedulable (RecordJobStatusEvent, cache/cache.go@v1.15.1):
   volcano-sh/volcano#4710.
4. `proportion` votes for a job only when its minResources plus what its queue holds (allocated +
   inqueue - elastic) fits the queue's realCapability in every dimension the job requests
   (plugins/proportion/proportion.go@v1.15.1, LessEqualWithDimensionAndResourcesName in
   api/resource_info.go). realCapability = (cluster total - all guarantees) + the queue's
   guarantee, capped by its capability: with no nodes, no GPUs - the scale-from-zero deadlock of
   volcano-sh/volcano#3910. So each queue *guarantees* what it may hold (queue_resources): its
   realCapability is its capability whether the pools are at zero or not.
5. No `overcommit` plugin: its vote compares a job with the cluster's idle resources, which are
   zero before the first node (plugins/overcommit/overcommit.go@v1.15.1).
6. No ResourceQuota on GPUs: it is checked pod by pod at creation, so it lets the operator create
   part of a gang; the queue's capability (whole gangs) is the team's GPU limit instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from math import ceil, floor

from components.efa import EFA_HUGEPAGES_2MI, efa_resources
from infra.config import GpuPool
from infra.config.gpu_pools import gpu_share
from infra.core.names import EFA_RESOURCE as EFA
from infra.core.names import GPU_RESOURCE as GPU
from infra.core.names import HUGEPAGES_RESOURCE as HUGEPAGES


def gpu_node_share(pools: Sequence[GpuPool]) -> dict[str, Fraction]:
    """What one GPU brings of its node, the most over the pools' instance types, in every dimension
    a pod can ask of a GPU node: vCPUs, memory (MiB), EFA interfaces and huge pages (MiB, what the
    EFA pools' user data reserves), and pods (`pods`: one per GPU, the finest a gang splits, and
    one per node, the MPIJob launcher beside its workers). infra/config/gpu_pools.py gpu_share."""
    share = gpu_share(pools)
    efa = [p for p in pools if p.efa]
    node_efa = {p.name: efa_resources(p.instance) for p in efa}
    return {
        "cpu": share["cpu"],
        "memory": share["memory"],
        EFA: max((Fraction(int(node_efa[p.name][EFA]), p.gpus_per_node) for p in efa), default=Fraction(0)),
        HUGEPAGES: max((Fraction(EFA_HUGEPAGES_2MI * 2, p.gpus_per_node) for p in efa), default=Fraction(0)),
        "pods": 1 + share["nodes"],
    }


def queue_resources(gpu_capability: int, pools: Sequence[GpuPool]) -> dict[str, str]:
    """What a queue of `gpu_capability` GPUs may hold, in every dimension a gang's pods request:
    the GPUs, and its GPUs' share of the pools' nodes in CPU, memory, EFA interfaces and huge
    pages (gpu_node_share): no mix of requests covers more nodes than its GPUs would. Rendered
    as the queue's capability, deserved and guarantee alike (Volcano's queue webhook wants
    guarantee <= deserved <= capability: validateResourceQuantityOfQueue, pkg/webhooks/admission/
    queues/validate/validate_queue.go@v1.15.1)."""
    resources = {GPU: str(gpu_capability)}
    if gpu_capability == 0:
        return resources
    share = gpu_node_share(pools)
    resources["cpu"] = str(ceil(gpu_capability * share["cpu"]))
    resources["memory"] = f"{ceil(gpu_capability * share['memory'])}Mi"
    for name in (EFA, HUGEPAGES):
        if share[name]:
            amount = floor(gpu_capability * share[name])
            resources[name] = f"{amount}Mi" if name == HUGEPAGES else str(amount)
    return resources


def queue_spec(weight: int, gpu_capability: int, pools: Sequence[GpuPool]) -> dict:
    """A Volcano Queue's spec: never reclaimable, and capability = deserved = guarantee."""
    held = queue_resources(gpu_capability, pools)
    spec: dict = {"weight": weight, "reclaimable": False, "capability": held}
    if len(held) > 1:  # a queue that may hold GPUs guarantees them (Volcano's `default` holds none)
        spec["deserved"] = dict(held)
        spec["guarantee"] = {"resource": dict(held)}
    return spec

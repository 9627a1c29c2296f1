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

from functools import cache

from components.efa import EFA_HUGEPAGES_2MI
from infra.core.bundled import instance_types
from infra.core.names import GPU_RESOURCE as GPU


@cache
def largest_gpu_node() -> dict[str, int]:
    """The most vCPUs, memory (MiB) and EFA interfaces of any GPU instance type in AWS's catalog
    (the copy moto ships, infra/core/bundled.py): a bound that does not move when a pool is added."""
    gpu_types = [t for t in instance_types().values() if t.get("GpuInfo")]
    return {
        "cpu": max(t["VCpuInfo"]["DefaultVCpus"] for t in gpu_types),
        "memory": max(t["MemoryInfo"]["SizeInMiB"] for t in gpu_types),
        "efa": max(
            ((t.get("NetworkInfo") or {}).get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0) for t in gpu_types
        ),
    }


def queue_resources(gpu_capability: int) -> dict[str, str]:
    """What a queue of `gpu_capability` GPUs may hold, in every dimension a gang's pods request:
    the GPUs, and host resources (CPU, memory, EFA interfaces, huge pages) for as many of the
    largest GPU nodes AWS sells as it has GPUs (one GPU pod per node is the most nodes its GPUs can
    occupy). The GPUs bind first; the host dimensions only keep `proportion` from comparing a
    gang's memory with the memory of the system nodes while the GPU pools are at zero. Rendered
    as the queue's capability, deserved and guarantee alike (Volcano's queue webhook wants
    guarantee <= deserved <= capability: validateResourceQuantityOfQueue, pkg/webhooks/admission/
    queues/validate/validate_queue.go@v1.15.1)."""
    resources = {GPU: str(gpu_capability)}
    if gpu_capability == 0:
        return resources
    node = largest_gpu_node()
    resources["cpu"] = str(gpu_capability * node["cpu"])
    resources["memory"] = f"{gpu_capability * node['memory']}Mi"
    resources["vpc.amazonaws.com/efa"] = str(gpu_capability * node["efa"])
    resources["hugepages-2Mi"] = f"{gpu_capability * EFA_HUGEPAGES_2MI * 2}Mi"
    return resources


def queue_spec(weight: int, gpu_capability: int) -> dict:
    """A Volcano Queue's spec: never reclaimable, and capability = deserved = guarantee."""
    held = queue_resources(gpu_capability)
    spec: dict = {"weight": weight, "reclaimable": False, "capability": held}
    if len(held) > 1:  # a queue that may hold GPUs guarantees them (Volcano's `default` holds none)
        spec["deserved"] = dict(held)
        spec["guarantee"] = {"resource": dict(held)}
    return spec

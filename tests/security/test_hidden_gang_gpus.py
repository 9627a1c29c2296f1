"""GPUs the operator leaves out of a gang's minResources (red team, round 7).

The enqueue check counts a Kubeflow gang by its PodGroup's minResources, in the dimensions that
minResources names only (proportion's JobEnqueueableFn: `LessEqualWithDimensionAndResourcesName(
realCapability, minReq)`, volcano-sh/volcano:pkg/scheduler/plugins/proportion/proportion.go@v1.15.1),
and minResources is not the pods' requests (CalcPGMinResources and AddResourceList, kubeflow/trainer:
pkg/controller.v1/common/util.go@v1.9.4):

- only `template.spec.containers` are summed: init containers, sidecars included, are not;
- a container's `limits` stand in only when it has no `requests` at all: `requests: {cpu: 1}` with
  `limits: {nvidia.com/gpu: 8}` adds one CPU and no GPU. The pod the operator creates from that
  template asks for the 8 GPUs all the same, for the API server defaults each missing request to its
  limit on a Pod, never on a template (SetDefaults_Pod, kubernetes/kubernetes:pkg/apis/core/v1/
  defaults.go).

So a gang of any number of GPUs passes its queue's enqueue check as zero GPUs, turns Inqueue, and the
operator creates every pod at once (DelayPodCreationDueToPodGroup, pkg/controller.v1/control/
podgroup_control.go@v1.9.4): each pending pod is Unschedulable demand (RecordJobStatusEvent,
volcano-sh/volcano:pkg/scheduler/cache/cache.go@v1.15.1), which docs/design/autoscaler-demand.md
says a gang over its queue's capability never is. Volcano's allocate still counts the pods' GPUs
against the queue, so the nodes bought wait, idle, for a gang that cannot be whole; and since such a
gang adds no GPU to the queue's inqueue share, every job of the team written this way is Inqueue at
once. The shipped xgboost-iris example is written this way (requests cpu/memory, GPU in limits only).
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from components.tenancy import REPLICA_SPECS
from infra.offline import jobs
from tests.conftest import plan_of
from tests.security.test_tenancy import _job, denied_by

GPU = "nvidia.com/gpu"


def _gang(workers: int = 16) -> dict:
    """PyTorchJob `j`: a master and `workers` workers of 8 GPUs (and 32 EFA interfaces) each."""
    job = _job()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
    job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = workers + 1
    return job


def _templates(job: dict) -> list[dict]:
    return [r["template"] for key in REPLICA_SPECS for r in (job["spec"].get(key) or {}).values()]


def min_resources(job: dict) -> Counter:
    """What the operator writes as the PodGroup's minResources, minAvailable being every replica:
    each replica's containers (not its init containers), a container's requests where it has any,
    else its limits (CalcPGMinResources, AddResourceList, kubeflow/trainer:pkg/controller.v1/common/
    util.go@v1.9.4)."""
    total: Counter = Counter()
    for key in REPLICA_SPECS:
        for replica in (job["spec"].get(key) or {}).values():
            for container in replica["template"]["spec"]["containers"]:
                resources = container.get("resources") or {}
                counted = resources["requests"] if resources.get("requests") is not None else resources.get("limits")
                for name, quantity in (counted or {}).items():
                    if name == GPU:
                        total[name] += int(quantity) * replica.get("replicas", 1)
    return total


def pods_gpus(job: dict) -> int:
    """The GPUs the job's pods ask once the API server has defaulted them (a missing request is its
    limit, per resource, in every container and init container: SetDefaults_Pod)."""
    total = 0
    for key in REPLICA_SPECS:
        for replica in (job["spec"].get(key) or {}).values():
            spec = replica["template"]["spec"]
            for container in spec["containers"] + spec.get("initContainers", []):
                resources = container.get("resources") or {}
                asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
                total += int(asked.get(GPU, 0)) * replica.get("replicas", 1)
    return total


def _gpus_in_limits_beside_requests(job: dict) -> dict:
    for template in _templates(job):
        container = template["spec"]["containers"][0]
        container["resources"] = {
            "requests": {"cpu": "8", "memory": "64Gi"},
            "limits": {GPU: 8, "vpc.amazonaws.com/efa": 32, "memory": "64Gi"},
        }
    return job


def _gpus_in_an_init_container(job: dict, sidecar: bool) -> dict:
    for template in _templates(job):
        main = template["spec"]["containers"][0]
        trainer = copy.deepcopy(main)
        trainer["name"] = "trainer"
        if sidecar:
            trainer["restartPolicy"] = "Always"
        main["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
        template["spec"]["initContainers"] = [trainer]
    return job


def test_the_model_counts_a_plain_gang_as_the_operator_does():
    """The control: GPUs requested as limited, in the containers, as the rendered pytorch-ddp.yaml has them."""
    job = _gang()
    assert min_resources(job)[GPU] == pods_gpus(job) == 17 * 8
    assert denied_by(job) == []


def test_a_gang_whose_gpus_are_limits_beside_cpu_requests_is_denied():
    """minResources: 17 x 8 CPUs and no GPU; the 17 pods ask 136 GPUs."""
    job = _gpus_in_limits_beside_requests(_gang())
    assert min_resources(job)[GPU] == 0 and pods_gpus(job) == 136
    assert denied_by(job)


@pytest.mark.parametrize("sidecar", [True, False], ids=["sidecar", "init-container"])
def test_a_gang_whose_gpus_are_in_init_containers_is_denied(sidecar):
    job = _gpus_in_an_init_container(_gang(), sidecar)
    assert min_resources(job)[GPU] == 0 and pods_gpus(job) == 136
    assert denied_by(job)


def test_a_gang_asking_its_gpus_in_requests_and_limits_is_admitted():
    """What a fix must keep: requests and limits both naming the GPUs count them."""
    job = _gang()
    for template in _templates(job):
        template["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "8", "memory": "64Gi", GPU: 8, "vpc.amazonaws.com/efa": 32},
            "limits": {GPU: 8, "vpc.amazonaws.com/efa": 32, "memory": "64Gi"},
        }
    assert min_resources(job)[GPU] == pods_gpus(job)
    assert denied_by(job) == []


def test_every_shipped_kubeflow_example_counts_all_its_gpus_in_its_gangs_min_resources():
    """xgboost-iris.yaml asks `requests: {cpu: "2", memory: 8Gi}` and `limits: {nvidia.com/gpu: 1, ...}`:
    its gang enters its queue as no GPU at all, whatever `--workers` says."""
    cfg = plan_of("prod").config
    short = {}
    for example in jobs.examples_for(cfg):
        job = jobs.workload_of(jobs.render(example, cfg))
        if job["apiVersion"].startswith("kubeflow.org/") and min_resources(job)[GPU] != pods_gpus(job):
            short[example] = (min_resources(job)[GPU], pods_gpus(job))
    assert short == {}

"""Round 10's attacker, on the counting of a Kubeflow job's containers that name no CPU or memory (components/
tenancy.py `_request_sum`, gang_validations; components/teams.py container_defaults): the team policy now counts
them at the LimitRange's defaultRequest for the share cap, but the gang its queue admits is the operator's
minResources, which counts them at nothing.

The attacker is a team member (AmazonEKSEditPolicy's `edit` in the namespace and tenancy.job_submitter_role's
Kubeflow jobs); admission through cel-expr-python (tests/security/test_tenancy.py `denied_by`)."""

from __future__ import annotations

import copy

import pytest

from tests.admission_cel import quantity_value
from tests.security.test_tenancy import VISION, _job, denied_by


def _min_resources(job: dict, resource: str) -> float:
    """The operator's minResources of `resource` for a job whose gang is all its replicas: each replica's
    containers' requests, or a container's limits where it has no requests at all, and nothing for a container
    that names neither (CalcPGMinResources and AddResourceList, kubeflow/trainer:pkg/controller.v1/common/
    util.go@v1.9.4)."""
    total = 0.0
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        for container in replica["template"]["spec"]["containers"]:
            asked = container.get("resources", {})
            listed = asked["requests"] if "requests" in asked else asked.get("limits", {})
            total += replica.get("replicas", 1) * quantity_value(str(listed.get(resource, 0)))
    return total


def _pods_request(job: dict, resource: str) -> float:
    """What the job's pods request of `resource` once the LimitRange has given each container that names none its
    defaultRequest (the team's container_defaults: the limit first, SetDefaults_Pod, kubernetes/kubernetes:
    pkg/apis/core/v1/defaults.go@v1.35.0; else the default, plugin/pkg/admission/limitranger/admission.go)."""
    cpu, memory = VISION.container_defaults
    default = {"cpu": cpu, "memory": memory}[resource]
    total = 0.0
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        for container in replica["template"]["spec"]["containers"]:
            asked = container.get("resources", {})
            stated = asked.get("requests", {}).get(resource, asked.get("limits", {}).get(resource))
            total += replica.get("replicas", 1) * (default if stated is None else quantity_value(str(stated)))
    return total


def _bare(containers: int) -> dict:
    """Team vision's PyTorchJob whose replicas each have a GPU container and `containers - 1` more that name no
    resources at all (a log shipper, a profiler, each given the LimitRange's defaultRequest)."""
    job = _job()
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        gpu = spec["containers"][0]
        spec["containers"] = [gpu] + [{**gpu, "name": f"helper-{i}", "resources": {}} for i in range(containers - 1)]
    return job


def test_the_gang_its_queue_admits_counts_the_cpu_its_pods_ask():
    """Each replica's four containers ask 0.5 vCPU each from the LimitRange (2 vCPUs a pod) and the gang Volcano
    enqueues against the queue counts none of them: the queue's CPU dimension is bypassed by any job whose
    containers name no CPU, the base job of the tests included. Bounded per pod by the share cap (which counts
    the defaults); the ResourceQuota still counts the pods. Severity low. On a cluster: submit such a job and
    compare `kubectl get podgroup -n vision <job> -o jsonpath='{.spec.minResources}'` (no cpu) with
    `kubectl get pods -n vision -l training.kubeflow.org/job-name=<job> -o jsonpath='{..resources.requests.cpu}'`."""
    job = _bare(4)
    assert denied_by(job) or _min_resources(job, "cpu") >= _pods_request(job, "cpu")


# what the team policy says to a Kubeflow job with a container that names no CPU or memory (components/tenancy.py)
NAMES_CPU_AND_MEMORY = "each container of a Kubeflow job names cpu and memory"


@pytest.mark.parametrize("missing", ["cpu", "memory"])
def test_a_kubeflow_job_whose_container_requests_no_cpu_or_memory_is_refused_saying_what_to_add(missing):
    job = _job()
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        resources = replica["template"]["spec"]["containers"][0]["resources"]
        del resources["requests"][missing]
    assert any(m.startswith(NAMES_CPU_AND_MEMORY) and "requests" in m for m in denied_by(job))


def test_a_job_made_before_the_rule_whose_container_names_no_cpu_may_still_be_suspended():
    """A job admitted before the team policy asked for CPU keeps its templates: an UPDATE that leaves them as they
    were (a suspension by its team or by the gang deadline) is no new gang, and is admitted."""
    running = _job()
    for replica in running["spec"]["pytorchReplicaSpecs"].values():
        del replica["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    suspended = copy.deepcopy(running)
    suspended["spec"]["runPolicy"]["suspend"] = True
    assert not any(m.startswith(NAMES_CPU_AND_MEMORY) for m in denied_by(suspended, operation="UPDATE", old=running))

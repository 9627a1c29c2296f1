"""Round 10's attacker, beside the gang deadline's team clock: per (team namespace, pool) the CronJob keeps since
when the team's gangs have waited there beside idle nodes, and a new gang of the team waiting there while that
clock is live starts at the team's start (images/training/gang_deadline.py next_team_clocks). The clock ends where a
clocked gang of the team runs, or where the deadline queues one of the team's jobs again (running_team_clocks).

A job's pools, as the CronJob reads them, are those its templates may land on (keep_job): a template that selects
its nodes by a label other than the pool's (an instance type; the team policy admits it: each attack checks) may
land on every pool as far as its templates tell. So the pools a job's templates name are not where its gang waits or
runs: a decoy waiting, running or retried on one pool must not end its team's clock on another, where the team's
real gang holds idle on-demand nodes.

The attacker is a team member (AmazonEKSEditPolicy's `edit` in its namespace, the Kubeflow job rights of
tenancy.job_submitter_role). The CronJob runs for real (`run`) against tests/fake_kube_api.py; the team's
controllers (the Training Operator, Volcano) are played by the test.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import gang_deadline

from components import gang_deadline as component
from tests.components.test_gang_deadline import DEADLINE, NOW, _iso, _pod
from tests.components.test_gang_deadline_team_clock import PASS_S, SETTINGS, _annotations, _cluster, _path
from tests.fake_kube_api import FakeKubernetesApi
from tests.security.test_r8_attack7 import ATTACKER
from tests.security.test_tenancy import _job, denied_by

# Two pools: on-demand h100, where the team's real gang waits, and b200-odcr (stacks/Pulumi.prod.yaml: an On-Demand
# Capacity Reservation of p6-b200.48xlarge, paid whether used or not), where its decoy does.
REAL, DECOY = "h100", "b200-odcr"
POOLS = {REAL: DEADLINE, DECOY: DEADLINE}
RETRY_S = SETTINGS["retryAfterSeconds"]
# The well-known label of a node's instance type (LabelInstanceTypeStable, kubernetes/api:core/v1/
# well_known_labels.go, read through the code search, its ref not pinned here), one of the labels the team policy
# lets a pod select (tenancy.NODE_SELECTOR_KEYS).
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ON_REAL = {gang_deadline.POOL_LABEL: REAL}
ON_DECOY = {INSTANCE_TYPE: "p6-b200.48xlarge"}  # the decoy's pods land on b200-odcr alone, its templates name no pool


def _decoy_job() -> dict:
    """The decoy PyTorchJob as a team member submits it (the team policy's view: a team's job as
    tests/security/test_tenancy.py makes it): one pod, selecting b200-odcr's instance type. The attacks' jobs below
    are its shape as the gang deadline reads it."""
    job = _job()
    job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = 1
    replicas = job["spec"]["pytorchReplicaSpecs"]
    del replicas["Worker"]
    replicas["Master"]["template"]["spec"]["nodeSelector"] = dict(ON_DECOY)
    return job


def _cluster_of_two_pools(kube: FakeKubernetesApi) -> gang_deadline.Api:
    """An idle node of each pool, b200-odcr's labelled with its instance type."""
    api = _cluster(kube, POOLS)
    node = kube.get(f"/api/v1/nodes/idle-{DECOY}")
    assert node is not None
    node["metadata"]["labels"][INSTANCE_TYPE] = ON_DECOY[INSTANCE_TYPE]
    kube.put(node)
    return api


def _submit(kube: FakeKubernetesApi, name: str, at: datetime, selector: dict[str, str]) -> None:
    """Team llm submits PyTorchJob `name` of one pod selecting its nodes by `selector`; its queue admits it and the
    operator makes its PodGroup, Inqueue, and the pod, pending."""
    replicas = {"Master": {"replicas": 1, "template": {"spec": {"nodeSelector": dict(selector)}}}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": "llm"}}
    job["spec"] = {"runPolicy": {}, "pytorchReplicaSpecs": replicas}
    kube.put(job)
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name}
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup"}
    group["metadata"] = {"name": name, "namespace": "llm", "ownerReferences": [owner]}
    group["status"] = {"phase": "Inqueue"}
    kube.put(group)
    pod = _pod(f"{name}-master-0", 0, pool=None)
    pod.update(apiVersion="v1", kind="Pod")
    pod["spec"]["nodeSelector"] = dict(selector)
    pod["metadata"].update(
        namespace="llm", creationTimestamp=_iso(at), annotations={gang_deadline.GROUP_ANNOTATION: name}
    )
    kube.put(pod)


def _pod_path(name: str) -> str:
    return f"/api/v1/namespaces/llm/pods/{name}-master-0"


def _group_path(name: str) -> str:
    return f"/apis/scheduling.volcano.sh/v1beta1/namespaces/llm/podgroups/{name}"


def _delete(kube: FakeKubernetesApi, name: str) -> None:
    """The team deletes its job; the garbage collector deletes its PodGroup and pod with it."""
    for path in (_path("llm", name), _group_path(name), _pod_path(name)):
        kube.delete_now(path)


def _pass(api: gang_deadline.Api, at: datetime) -> None:
    assert gang_deadline.run(api, SETTINGS, component.NAMESPACE, at) == 0


def _given_back(kube: FakeKubernetesApi, name: str) -> bool:
    return kube.get(_path("llm", name)) is not None and gang_deadline.GAVE_BACK in _annotations(kube, "llm", name)


def _held_from(kube: FakeKubernetesApi, real: list[str], at: datetime) -> None:
    """Between two passes the team deletes its waiting gang on h100 and submits it again under a new name."""
    _delete(kube, real[-1])
    real.append(f"train-{len(real)}")
    _submit(kube, real[-1], at, ON_REAL)


def test_a_decoy_the_deadline_retries_on_another_pool_does_not_restart_the_teams_clock_on_this_one():
    """Team llm's decoy waits beside an idle node of the reserved b200-odcr pool (the reservation's nodes are paid
    anyway) and is given back at its deadline; retryAfterSeconds later the deadline queues it again. The team times
    its real gang on h100 (the decoy's gave-back-at is on the job, retryAfterSeconds is public): it submits it a
    deadline less five minutes before that retry and replaces it just before it. The decoy's template names no pool
    (it selects an instance type), so it may land on h100 as far as it tells; but the team's clock there is its
    real gang's, not the decoy's: the retry leaves it, and the replacement is given back within the first gang's
    deadline and one pass."""
    assert denied_by(_decoy_job(), user=ATTACKER) == [], "the team policy refuses the decoy"
    kube = FakeKubernetesApi()
    try:
        api = _cluster_of_two_pools(kube)
        start = NOW - timedelta(hours=4)
        _submit(kube, "decoy", start, ON_DECOY)
        real: list[str] = []
        retry_at: datetime | None = None  # the first pass after the decoy's retryAfterSeconds
        first_waits: datetime | None = None
        moment = start
        while moment <= start + timedelta(hours=3):
            if retry_at is None and _given_back(kube, "decoy"):
                gave_back = gang_deadline._stamp(_annotations(kube, "llm", "decoy")[gang_deadline.GAVE_BACK])
                assert gave_back is not None
                kube.delete_now(_pod_path("decoy"))  # the operator deletes a suspended job's pod and PodGroup
                kube.delete_now(_group_path("decoy"))
                retry_at = moment + timedelta(seconds=PASS_S) * (
                    1 + (gave_back + timedelta(seconds=RETRY_S) - moment) // timedelta(seconds=PASS_S)
                )
            if retry_at is not None and first_waits is None and moment == retry_at - timedelta(seconds=DEADLINE - 300):
                first_waits = moment
                real.append("train-0")
                _submit(kube, "train-0", moment, ON_REAL)
            if retry_at is not None and moment == retry_at:
                _held_from(kube, real, moment - timedelta(seconds=30))
            _pass(api, moment)
            if first_waits is not None and moment >= first_waits + timedelta(seconds=DEADLINE + PASS_S):
                break
            moment += timedelta(seconds=PASS_S)
        assert first_waits is not None and len(real) == 2, "the attack was not played"
        assert _given_back(kube, real[-1]), (
            "the idle h100 node bought for the team's first gang is held past its deadline and one pass"
        )
    finally:
        kube.close()


def _bind(kube: FakeKubernetesApi, name: str, node: str) -> None:
    """Volcano binds the gang's one pod to `node` and the gang runs."""
    pod = kube.get(_pod_path(name))
    group = kube.get(_group_path(name))
    assert pod is not None and group is not None
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    group["status"] = {"phase": "Running"}
    kube.put(pod)
    kube.put(group)


def test_a_decoy_that_runs_on_another_pool_does_not_restart_the_teams_clock_on_this_one():
    """Team llm's gang waits beside an idle on-demand h100 node. A deadline less five minutes later the team submits
    a one-pod decoy selecting the instance type of the reserved b200-odcr pool (paid whether used or not; its
    template names no pool, so it may land on h100 as far as it tells): the decoy waits beside an idle b200-odcr
    node for a pass (its clock), then binds there and runs, and in that minute the team replaces its h100 gang. The
    decoy ran on b200-odcr only, so the team's clock on h100 goes on: the replacement is given back within the first
    gang's deadline and one pass."""
    assert denied_by(_decoy_job(), user=ATTACKER) == [], "the team policy refuses the decoy"
    kube = FakeKubernetesApi()
    try:
        api = _cluster_of_two_pools(kube)
        start = NOW - timedelta(hours=2)
        real = ["train-0"]
        _submit(kube, "train-0", start, ON_REAL)
        moment = start
        while moment <= start + timedelta(seconds=DEADLINE + PASS_S):
            if moment == start + timedelta(seconds=DEADLINE - 300):
                _submit(kube, "decoy", moment, ON_DECOY)
            if moment == start + timedelta(seconds=DEADLINE - 240):
                _bind(kube, "decoy", f"idle-{DECOY}")
                _held_from(kube, real, moment - timedelta(seconds=30))
            _pass(api, moment)
            moment += timedelta(seconds=PASS_S)
        assert _given_back(kube, real[-1]), (
            "the idle h100 node bought for the team's first gang is held past its deadline and one pass"
        )
    finally:
        kube.close()

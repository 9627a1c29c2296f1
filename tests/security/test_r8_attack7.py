"""Round 8's attacker again, beside the fixes that keep a job the platform's to stop: runPolicy.managedBy
only the operator's, a deadline's suspension undone only by the deadline, no orphaning DELETE (explicit
propagationPolicy Orphan or orphanDependents) and no `orphan` finalizer on a Kubeflow job, a gang judged
by its unfinished members, and a plain batch Job's gang suspended by spec.suspend.

The attacker is a team member: AmazonEKSEditPolicy's `edit` in the team's namespace (pods, workloads
including batch Jobs and CronJobs, delete with any DeleteOptions) and the Kubeflow jobs of
tenancy.job_submitter_role. Each test states what the platform should refuse or do, and fails on
today's code: admission through cel-expr-python (tests/security/test_tenancy.py `denied_by`, and the
bound guards through tests/security/test_r8_attack.py `_refused_in_team_namespace`), the gang deadline
through its pure `decide` or its `run` against tests/fake_kube_api.py.
"""

from __future__ import annotations

import io
import json
import tracemalloc
from collections.abc import Callable
from datetime import datetime, timedelta

import gang_deadline
import pytest

from components import gang_deadline as component
from infra.core.names import GAVE_BACK_ANNOTATION, WAITING_SINCE_ANNOTATION
from infra.offline.pods import mebibytes
from tests.components.test_gang_deadline import (
    DEADLINE,
    IDLE_NODE,
    NOW,
    _iso,
    _pod,
    _podgroup,
    _seed_gang,
    train_job,
)
from tests.fake_kube_api import FakeKubernetesApi
from tests.security.test_r8_attack import _refused_in_team_namespace
from tests.security.test_tenancy import _job, denied_by

ATTACKER = "alice@vision"


def _deadline_cluster(kube: FakeKubernetesApi) -> gang_deadline.Api:
    """An idle h100 node and the h100 pool's deadline, in the fake API server."""
    kube.put({"apiVersion": "v1", "kind": "Node", **IDLE_NODE})
    kube.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "d", "namespace": component.NAMESPACE, "labels": {component.DEADLINE_LABEL: "true"}},
            "data": {"pool": "h100", "deadlineSeconds": str(int(DEADLINE))},
        }
    )
    return gang_deadline.Api(kube.url, "token")


# --- 1. a batch Job deleted the way the API does by default leaves its gang behind ----------------------


def test_a_plain_job_deleted_without_a_propagation_policy_may_not_leave_its_gang_behind():
    """The pod release guard refuses a batch Job's DELETE only when it names propagationPolicy Orphan or
    orphanDependents. But orphaning is the batch/v1 Job's own default: its strategy's
    DefaultGarbageCollectionPolicy returns OrphanDependents for batch/v1 "for backwards compatibility"
    (kubernetes/kubernetes:pkg/registry/batch/job/strategy.go@36f36813ae40015c94d2df1493447edaa145dd5a),
    and the store orphans when the DeleteOptions name no policy and the object no finalizer
    (shouldOrphanDependents, kubernetes/kubernetes:staging/src/k8s.io/apiserver/pkg/registry/generic/
    registry/store.go@f565665e0604a5aebe7116339096b961becf7e23). `kubectl delete job` sends Background,
    but a bare API DELETE (curl, client-go with empty DeleteOptions, the Python client's
    delete_namespaced_job without a body, a DeleteCollection) carries no policy at all.

    Impact: the garbage collector takes the Job's ownerReference off its pods and off the PodGroup
    Volcano made for it (podgroup-<job uid>, newPGOwnerReferences, volcano-sh/volcano:pkg/controllers/
    podgroup/pg_controller_handler.go@v1.15.1). The Inqueue PodGroup keeps its phase (getPodGroupPhase,
    volcano-sh/volcano:pkg/scheduler/framework/session.go@v1.15.1), its pending pods keep the nodes EC2
    half-delivered (the autoscaler packs them there), and the gang deadline passes over a PodGroup no
    job owns (`_owner_job` None in images/training/gang_deadline.py decide): the idle GPU nodes stay
    until the team deletes the pods - exactly the hole fix (3) closed for an explicit Orphan."""
    assert _refused_in_team_namespace("batch", "jobs", "DELETE", {})


# --- 2. one team's annotation stops the gang deadline for every team -------------------------------------


@pytest.mark.parametrize("stamp", ["not-a-time", "2027-01-05T11:00:00"], ids=["garbage", "no-zone"])
def test_a_teams_malformed_gave_back_annotation_does_not_stop_other_teams_gangs_being_given_back(stamp):
    """The team policy guards the gang deadline's annotation only on UPDATE of a job that already
    carries it while suspended (suspension_validations): a team CREATEs a suspended job - a Kubeflow
    job, a batch Job, or a CronJob whose jobTemplate carries it - with `higgsfield.io/gave-back-at`
    set to any string. decide() parses it for every suspended job of every team namespace
    (`_time(gave_back)`, datetime.fromisoformat: ValueError on garbage, and an offset-naive datetime
    that `now - ...` refuses with TypeError), outside run()'s per-action try, so every pass of the
    CronJob dies before it patches anything.

    Impact: one team turns the gang deadline off for the whole cluster with one object it is allowed
    to create; every other team's half-delivered gang keeps its idle GPU nodes for as long as the
    object exists (the CronJob's failed runs are the only sign)."""
    kube = FakeKubernetesApi()
    try:
        _seed_gang(kube, "llm", train_job())
        poison = _job()
        poison["metadata"]["annotations"] = {GAVE_BACK_ANNOTATION: stamp}
        poison["spec"]["runPolicy"]["suspend"] = True
        kube.put(poison)  # made before the rule below, or by someone the team policy does not bind
        api = _deadline_cluster(kube)
        try:
            gang_deadline.run(api, component.settings_of(["llm", "vision"]), component.NAMESPACE, NOW)
        except (ValueError, TypeError):
            pass  # the pass died: what matters is whether llm's gang was given back
        run_policy = kube.get("/apis/kubeflow.org/v1/namespaces/llm/pytorchjobs/train")["spec"]["runPolicy"]
        assert run_policy.get("suspend") is True
    finally:
        kube.close()


@pytest.mark.parametrize("kind", ["PyTorchJob", "Job"])
def test_a_team_may_not_set_the_gang_deadlines_annotation(kind):
    job = _job()
    if kind == "Job":
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "eval", "namespace": "vision"}, "spec": {}}
    job["metadata"]["annotations"] = {GAVE_BACK_ANNOTATION: "not-a-time"}
    assert any(m.startswith(GAVE_BACK_ANNOTATION) for m in denied_by(job, user=ATTACKER))


def test_a_teams_cronjob_may_not_stamp_its_jobs_with_the_gang_deadlines_annotation():
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "vision"},
        "spec": {"jobTemplate": {"metadata": {"annotations": {GAVE_BACK_ANNOTATION: "x"}}, "spec": {}}},
    }
    assert any(GAVE_BACK_ANNOTATION in m for m in denied_by(cron, user=ATTACKER))


# --- 3. the deadline's clock is the team's to restart ----------------------------------------------------


def _members(kube: FakeKubernetesApi, created: datetime) -> None:
    """The gang's two waiting pods (pg-train, namespace llm), created at `created`, in place of any before."""
    for i in range(2):
        pod = _pod(f"train-worker-{i}", 0)
        pod.update(apiVersion="v1", kind="Pod")
        pod["metadata"]["creationTimestamp"] = _iso(created)
        kube.put(pod)


def test_a_gang_whose_pods_the_team_recreated_is_still_given_back_past_its_deadline():
    """decide() measures a gang's wait from its oldest waiting member's creationTimestamp, and the CronJob
    keeps nothing between passes. A team resets that clock at will: it deletes its job's pending pods
    (`kubectl delete pods -l training.kubeflow.org/job-name=train`; `edit` allows it, and the pod release
    guard only bounds the grace and refuses Orphan), and the operator creates them again at once -
    ReconcilePods creates every replica index that has no pod (kubeflow/trainer:pkg/controller.v1/common/
    pod.go@v1.9.4), and does so because the PodGroup is Inqueue (DelayPodCreationDueToPodGroup holds back
    only an empty or Pending phase, pkg/controller.v1/control/podgroup_control.go@v1.9.4). The PodGroup
    stays Inqueue throughout (getPodGroupPhase keeps Inqueue while fewer than minMember are scheduled,
    volcano-sh/volcano:pkg/scheduler/framework/session.go@v1.15.1), and the team cannot write PodGroups
    (tenancy.job_submitter_role: get/list/watch). Volcano records no time of enqueueing on the PodGroup
    (its conditions are Unschedulable and Scheduled: staging/src/volcano.sh/apis/pkg/apis/scheduling/
    v1beta1/types.go@v1.15.1), so the wait must be remembered by the CronJob itself from the pass that
    first saw the gang waiting beside idle nodes.

    Impact: repeating the delete every few minutes (any period under the pool's deadline), a team keeps
    the nodes EC2 half-delivered for its gang for as long as it likes - the autoscaler packs the
    recreated pending pods onto them - and fix (2) is moot: the team never needs to resume anything.
    Deleting and recreating the whole job, or a CronJob starting a new gang each minute, does the same."""
    kube = FakeKubernetesApi()
    try:
        api = _deadline_cluster(kube)
        kube.put(train_job())
        podgroup = _podgroup()
        podgroup.update(apiVersion="scheduling.volcano.sh/v1beta1", kind="PodGroup")
        kube.put(podgroup)
        settings = component.settings_of(["llm"])
        first_pass = NOW - timedelta(seconds=DEADLINE + 120)
        _members(kube, first_pass - timedelta(seconds=60))
        assert gang_deadline.run(api, settings, component.NAMESPACE, first_pass) == 0  # within its deadline
        _members(kube, NOW - timedelta(seconds=60))  # the team deleted them; the operator made them again
        gang_deadline.run(api, settings, component.NAMESPACE, NOW)
        run_policy = kube.get("/apis/kubeflow.org/v1/namespaces/llm/pytorchjobs/train")["spec"]["runPolicy"]
        assert run_policy.get("suspend") is True
    finally:
        kube.close()


# --- 4. a job deleted but kept by a finalizer: the operator's no longer, its gang still there --------------


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_kubeflow_job_may_not_carry_a_finalizer_of_the_teams_own(operation):
    """Fix (3) refuses the `orphan` finalizer alone; any other finalizer is admitted on a Kubeflow job,
    at CREATE or by a later UPDATE. The team then deletes the job as the platform asks (a plain DELETE,
    Background: the pod release guard admits it). The job stays, Terminating, until its finalizer is
    removed, which only the team will do:

    - every kind's Reconcile returns at once for a job with a deletionTimestamp ("reconcile cancelled,
      job does not need to do reconcile or has been deleted": kubeflow/trainer:pkg/controller.v1/pytorch/
      pytorchjob_controller.go@v1.9.4, and the TFJob, JAXJob, XGBoostJob, PaddleJob and MPIJob twins),
      so its runPolicy.suspend, activeDeadlineSeconds, backoffLimit and cleanPodPolicy are read by no one;
    - the garbage collector deletes no dependent of it: an owner that exists and carries no
      foregroundDeletion finalizer is a "solid" owner (classifyReferences, kubernetes/kubernetes:pkg/
      controller/garbagecollector/garbagecollector.go@cb6ff2d8ce3595f88570f82c7d0e6d98910afd3c), so its
      pods and its PodGroup stay;
    - the gang deadline still sees the Inqueue PodGroup owned by the job and patches runPolicy.suspend
      onto it (an update of a Terminating object is allowed), which nothing acts on.

    Impact: the same as a job handed to another controller by runPolicy.managedBy (fix (1)): a waiting
    gang's pending pods keep the nodes EC2 half-delivered for as long as the team likes, with every
    deadline pass "suspending" it again; a running job outlives its activeDeadlineSeconds."""
    old = _job()
    job = _job()
    job["metadata"]["finalizers"] = ["vision.example.com/keep"]
    assert denied_by(job, operation=operation, old=old, user=ATTACKER) != []


# --- 5. one team's jobs fill the gang deadline's memory ----------------------------------------------------

# The API server admits up to 256 KiB of annotations on any object (totalAnnotationSizeLimitB,
# kubernetes/kubernetes:staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go@
# 9349688d40f14e5b6814ae6daecd386a3f6fe7b4), and etcd stores an object of up to 1.5 MiB.
ANNOTATIONS_LIMIT = 256 * 1024
LARGEST_OBJECT = 3 * 1024 * 1024 // 2


def _heavy_jobs(kube: FakeKubernetesApi, count: int) -> None:
    """`count` suspended jobs of team llm, each with the API server's largest annotations."""
    for i in range(count):
        job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": f"j{i}", "namespace": "llm"}}
        job["metadata"]["annotations"] = {"example.com/notes": "x" * ANNOTATIONS_LIMIT}
        job["spec"] = {"runPolicy": {"suspend": True}}
        kube.put(job)


def peak_of_a_pass(seed: Callable[[FakeKubernetesApi], None]) -> int:
    """The most memory one CronJob pass holds at once (tracemalloc), over a cluster `seed` fills."""
    kube = FakeKubernetesApi()
    try:
        api = _deadline_cluster(kube)
        seed(kube)
        tracemalloc.start()
        try:
            assert gang_deadline.run(api, component.settings_of(["llm"]), component.NAMESPACE, NOW) == 0
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        kube.close()


def test_a_pass_holds_a_page_of_jobs_not_every_job_a_team_made():
    """run() read every list whole and kept every object whole until decide() had run: a team's suspended
    jobs (which cost it nothing but its count quota: components/teams.py compute_quota) carrying 256 KiB of
    annotations each would outgrow the CronJob's memory, and every pass be killed before it patched anything.
    Read in pages and cut down to what decide() reads, a pass's peak stays the same with four times the jobs."""
    few = peak_of_a_pass(lambda kube: _heavy_jobs(kube, gang_deadline.PAGE))
    many = peak_of_a_pass(lambda kube: _heavy_jobs(kube, 4 * gang_deadline.PAGE))
    assert many < 1.5 * few


def test_the_gang_deadlines_memory_holds_a_page_of_the_largest_objects_as_the_api_server_writes_them():
    """Measured: what json.load allocates for one object of etcd's largest, times a page, beside the
    pass's own, within the CronJob's memory limit. The object is written as JSON the longest way: etcd holds it as
    protobuf, and the API server's JSON encoder writes each control character (and `<`, `>`, `&`, which it
    escapes for HTML) of a string as six (`\u0001`: Go's encoding/json, which
    kubernetes/apimachinery:pkg/runtime/serializer/json/json.go encodes with), so a team's 1.5 MiB of them in an
    annotation, an env value or an argument come as 9 MiB; and it writes other characters as UTF-8, so one above
    U+FFFF makes Python hold the whole decoded page at four bytes a character (a reviewer's finding)."""
    assert gang_deadline.PAGE * largest_object_parsed() + 64 * 2**20 <= mebibytes(component.MEMORY_LIMIT) * 2**20


def largest_object_parsed() -> int:
    """Bytes one object of etcd's largest takes while json.load parses it, written as the API server writes it the
    longest way (the test above says how), with the response's own bytes."""
    value = "\x01" * LARGEST_OBJECT + "\U0001f600"
    body = json.dumps({"items": [{"metadata": {"annotations": {"a": value}}}]}, ensure_ascii=False).encode()
    assert len(body) > 6 * LARGEST_OBJECT
    tracemalloc.start()
    try:
        json.load(io.BytesIO(body))
        return tracemalloc.get_traced_memory()[1] + len(body)  # the response's bytes and what it parses to
    finally:
        tracemalloc.stop()


# --- beside the clock: it is the CronJob's alone ------------------------------------------------------------


def _clocked(stamp: str | None) -> dict:
    job = _job()
    if stamp:
        job["metadata"]["annotations"] = {WAITING_SINCE_ANNOTATION: stamp}
    return job


@pytest.mark.parametrize(
    ("old", "new"),
    [(None, "2100-01-01T00:00:00Z"), ("2027-01-05T11:00:00Z", "2027-01-05T11:59:00Z"), ("2027-01-05T11:00:00Z", None)],
    ids=["set", "moved", "removed"],
)
def test_a_team_neither_sets_moves_nor_removes_its_gangs_clock(old, new):
    refusals = denied_by(_clocked(new), operation="UPDATE", old=_clocked(old), user=ATTACKER)
    assert any(m.startswith(WAITING_SINCE_ANNOTATION) for m in refusals)


def test_the_gang_deadline_sets_and_removes_a_gangs_clock():
    started, stopped = _clocked("2027-01-05T11:00:00Z"), _clocked(None)
    assert denied_by(started, operation="UPDATE", old=stopped, user=component.USER) == []
    assert denied_by(stopped, operation="UPDATE", old=started, user=component.USER) == []


def test_a_team_changes_its_job_and_keeps_its_clock():
    old, new = _clocked("2027-01-05T11:00:00Z"), _clocked("2027-01-05T11:00:00Z")
    new["metadata"]["labels"] = {"experiment": "b"}
    assert denied_by(new, operation="UPDATE", old=old, user=ATTACKER) == []


def test_a_gang_that_ran_and_waits_again_starts_a_new_clock():
    """The clock comes off its job once the gang runs: a gang whose node was lost and waits again is not
    suspended at once for the hours it ran."""
    job = {"kind": "PyTorchJob", "metadata": {"name": "train", "namespace": "llm"}, "spec": {"runPolicy": {}}}
    job["metadata"]["annotations"] = {WAITING_SINCE_ANNOTATION: "2027-01-05T08:00:00Z"}
    bound = _pod("train-worker-0", 3 * 3600, node="ip-10-0-0-7")
    (action,) = gang_deadline.clock_actions([_podgroup("Running")], [bound], [IDLE_NODE], [job], {"h100": DEADLINE})
    assert (action.verb, action.kind, action.name) == ("unmark", "PyTorchJob", "train")
    assert gang_deadline.patch_for(action, NOW) == {"metadata": {"annotations": {WAITING_SINCE_ANNOTATION: None}}}

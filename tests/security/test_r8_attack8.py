"""Round 8's third attacker, beside the gang deadline's clock as it then was: on the PodGroup
(`higgsfield.io/waiting-since`, stamped by the CronJob on the first pass that sees a gang waiting and taken
off when it no longer waits), the job rules that keep it the CronJob's, and lists read in pages of 20. The
clock is its job's now, from the first pass that sees the gang beside an idle node (clock_actions); the
tests below hold that.

The attacker is a team member: AmazonEKSEditPolicy's `edit` in the team's namespace (pods, workloads
including batch Jobs) and the Kubeflow jobs of tenancy.job_submitter_role (create, update, patch,
delete). Each test states what the platform should do and fails on today's code: the gang deadline
through `decide`, `clock_actions` and `run` against tests/fake_kube_api.py, admission through
cel-expr-python (tests/security/test_tenancy.py `denied_by`).
"""

from __future__ import annotations

import copy
import urllib.error
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler

import gang_deadline
import pytest

from components import gang_deadline as component
from components import tenancy
from infra.core.names import WAITING_SINCE_ANNOTATION
from tests import fake_kube_api
from tests.components.test_gang_deadline import DEADLINE, IDLE_NODE, NOW, TRAIN_JOB, _iso, _pod, _podgroup
from tests.fake_kube_api import FakeKubernetesApi, Ref
from tests.security.test_r8_attack7 import _deadline_cluster, peak_of_a_pass
from tests.security.test_tenancy import denied_by

# --- 1. the team restarts its own gang's clock by suspending and resuming its job ---------------------------

PYTORCH_JOB = TRAIN_JOB
BATCH_JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "eval", "namespace": "llm", "uid": "1f2e"}}


def _job_of(kind: str, suspend: bool) -> dict:
    job = copy.deepcopy(PYTORCH_JOB if kind == "PyTorchJob" else BATCH_JOB)
    job["spec"] = (
        {"runPolicy": {"suspend": suspend}} if kind == "PyTorchJob" else {"parallelism": 2, "suspend": suspend}
    )
    return job


def _group_of(kind: str) -> dict:
    """The gang's PodGroup as its maker makes it: the operator's, named after the job (SyncPodGroup,
    kubeflow/trainer:pkg/controller.v1/common/scheduling.go@v1.9.4), or Volcano's, podgroup-<the Job's uid>
    owned by the Job (GeneratePodgroupName, newPGOwnerReferences, volcano-sh/volcano:pkg/controllers/
    podgroup/pg_controller_handler.go@v1.15.1); Inqueue, with no stamp."""
    pg = _podgroup()
    pg.update(apiVersion="scheduling.volcano.sh/v1beta1", kind="PodGroup")
    pg["metadata"]["name"] = "train"
    if kind == "Job":
        pg["metadata"]["name"] = "podgroup-1f2e"
        pg["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "eval", "uid": "1f2e"}]
    return pg


def _members_of(kube: FakeKubernetesApi, kind: str, created: datetime) -> None:
    group = _group_of(kind)["metadata"]["name"]
    for i in range(2):
        pod = _pod(f"member-{i}", 0)
        pod.update(apiVersion="v1", kind="Pod")
        pod["metadata"]["creationTimestamp"] = _iso(created)
        pod["metadata"]["annotations"] = {gang_deadline.GROUP_ANNOTATION: group}
        kube.put(pod)


def _with_annotations_of(old: dict, job: dict) -> dict:
    job["metadata"]["annotations"] = dict(old["metadata"].get("annotations") or {})
    return job


def _suspended(kube: FakeKubernetesApi, kind: str) -> bool:
    job = kube.get(FakeKubernetesApi.path_of(_job_of(kind, False)))
    assert job is not None
    return (job["spec"] if kind == "Job" else job["spec"]["runPolicy"]).get("suspend") is True


@pytest.mark.parametrize("kind", ["PyTorchJob", "Job"])
def test_a_gang_whose_team_suspends_and_resumes_its_job_is_still_given_back_past_its_deadline(kind):
    """The clock lives on the PodGroup, and only while the gang waits. The team policy lets a team suspend
    and resume its own job at will (suspension_validations guards only a job the deadline suspended:
    tests/security/test_r8_attack.py test_a_team_resumes_a_job_it_suspended_itself), and a suspension
    ends the clock either way:

    - a Kubeflow job: the operator deletes its pods AND its PodGroup on suspend (ReconcileJobs ->
      CleanUpResources -> DeletePodGroup, kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4); on
      resume SyncPodGroup creates a new PodGroup (no stamp), and once Volcano enqueues it the operator
      makes new pods. Both the stamp and the pods' creation are new. No CronJob pass need even run between.
    - a batch Job: the Job controller deletes its active pods; Volcano's PodGroup stays, but the first
      pass that sees it with no unfinished member takes the stamp off (clock_actions "unmark"), and the
      pods made on resume start a new clock.

    Impact: suspending and resuming the job once per deadline (a PATCH each; a Job needs one CronJob pass,
    a minute, in between), a team keeps the nodes EC2 half-delivered for its gang for as long as it likes:
    the gap is shorter than any pool's scaleDownUnneededTime (5m in dev, 10m in prod: stacks/Pulumi.*.yaml),
    the autoscaler packs the re-made pods onto the idle nodes again, and the gang is never suspended by the
    deadline, so the guard on a deadline's suspension never applies. Same end as deleting and re-submitting
    the job (docs/security-tenancy.md "Still open"), without losing the job, its status or its name."""
    kube = FakeKubernetesApi()
    try:
        api = _deadline_cluster(kube)
        settings = component.settings_of(["llm"])
        first_pass = NOW - timedelta(seconds=DEADLINE + 180)
        kube.put(_job_of(kind, False))
        kube.put(_group_of(kind))
        _members_of(kube, kind, first_pass - timedelta(seconds=60))
        assert gang_deadline.run(api, settings, component.NAMESPACE, first_pass) == 0  # clock started
        group_path = FakeKubernetesApi.path_of(_group_of(kind))
        clocked = kube.get(FakeKubernetesApi.path_of(_job_of(kind, False)))
        assert clocked is not None and WAITING_SINCE_ANNOTATION in clocked["metadata"]["annotations"]

        # The team suspends its job (a patch: its annotations stay): its controller deletes the pods (and the
        # operator its PodGroup).
        kube.put(_with_annotations_of(clocked, _job_of(kind, True)))
        for i in range(2):
            kube.delete_now(f"/api/v1/namespaces/llm/pods/member-{i}")
        if kind == "PyTorchJob":
            kube.delete_now(group_path)
        else:  # one pass sees the batch Job's gang with no member
            assert gang_deadline.run(api, settings, component.NAMESPACE, first_pass + timedelta(seconds=60)) == 0
        # ... and resumes it: a new PodGroup (Kubeflow), Inqueue again, and new pods.
        kube.put(_with_annotations_of(clocked, _job_of(kind, False)))
        if kind == "PyTorchJob":
            kube.put(_group_of(kind))
        _members_of(kube, kind, NOW - timedelta(seconds=60))

        gang_deadline.run(api, settings, component.NAMESPACE, NOW)
        assert _suspended(kube, kind)
    finally:
        kube.close()


# --- 2. a plain gang its queue holds Pending keeps the nodes bought for it --------------------------------


def test_a_plain_gang_its_queue_holds_pending_gives_back_the_nodes_bought_for_it():
    """A plain gang's pods exist before Volcano admits it: the Job controller makes them at once, and
    Volcano's controller makes their PodGroup afterwards (docs/design/autoscaler-demand.md "Plain
    workloads"). While the team's queue is full, `enqueue` keeps that PodGroup Pending (proportion's
    JobEnqueueable, volcano-sh/volcano:pkg/scheduler/plugins/proportion/proportion.go@v1.15.1), and every
    session still marks its pending tasks Unschedulable (RecordJobStatusEvent counts a Pending PodGroup
    with Inqueue and Unknown, then taskUnschedulable: pkg/scheduler/cache/cache.go@v1.15.1, from every
    job's updateJob in pkg/scheduler/framework/job_updater.go@v1.15.1). The Cluster Autoscaler buys nodes
    for Unschedulable pods (ArrangePodsBySchedulability, kubernetes/autoscaler:cluster-autoscaler/utils/
    kubernetes/listers.go@cluster-autoscaler-1.35.2), which no pod may use (the gang is not admitted),
    and never removes them: it packs those pending pods onto them first (filterOutSchedulableByPacking).
    decide() reads Inqueue gangs only (`_waiting`), so the deadline never applies.

    Impact: a team keeps its queue busy with its training jobs and submits a plain gang Job of
    `volcano` (a GPU pod of its serving or evaluation class, group-min-member at its parallelism): up to
    its plain-gpu quota (its whole GPU quota, components/teams.py plain_gpu_quota) in GPU nodes is bought
    and sits idle for as long as its queue stays full - the design doc's "at most the team's share again"
    is bounded in nodes, but nothing bounds it in time."""
    kube = FakeKubernetesApi()
    try:
        api = _deadline_cluster(kube)
        settings = component.settings_of(["llm"])
        first_pass = NOW - timedelta(seconds=DEADLINE + 120)
        kube.put(_job_of("Job", False))
        held = _group_of("Job")
        held["status"] = {"phase": "Pending"}  # its queue is full: enqueue keeps it out
        kube.put(held)
        _members_of(kube, "Job", first_pass - timedelta(seconds=60))
        for moment in (first_pass, first_pass + timedelta(seconds=60), NOW):  # the idle node there throughout
            gang_deadline.run(api, settings, component.NAMESPACE, moment)
        assert _suspended(kube, "Job")
    finally:
        kube.close()


# --- 3. a gang whose capacity arrives late is given back the minute its first node lands --------------------


def test_a_gang_that_waited_for_capacity_is_not_given_back_the_minute_its_first_node_arrives():
    """The deadline is how long a gang waits for its last node once nodes are being delivered: boot +
    health gate + a margin "for EC2 delivering a batch late" (components/gang_deadline.py
    gang_deadline_s). decide() counts it from when the gang started waiting (its stamp, or its oldest
    member), whether or not any node had come. A gang that waited hours while EC2 had no capacity
    (insufficient capacity; the autoscaler retries its node group after each backoff, up to 30 minutes:
    --max-node-group-backoff-duration, kubernetes/autoscaler:cluster-autoscaler/config/flags/
    flags.go@cluster-autoscaler-1.35.2) held nothing all that time; when capacity comes back, its nodes
    register over a minute or more and each waits out the health gate, and the CronJob's next pass (every
    minute) sees the first Ready one idle and the gang "waited" hours: it is suspended before the rest of
    its nodes could boot.

    Impact (a legitimate team): every gang that queued through a capacity shortage longer than its
    pool's deadline is suspended as soon as capacity returns, its nodes given back and bought again
    30 minutes later (infra/core/names.py GANG_RETRY_AFTER_S) - in the shortage, when EC2 capacity is hardest
    to get back. The bound the deadline keeps (idle nodes paid for at most the deadline) holds as well when
    counted from the first node the gang may use arriving."""
    kube = FakeKubernetesApi()
    try:
        api = _deadline_cluster(kube)
        settings = component.settings_of(["llm"])
        kube.delete_now(FakeKubernetesApi.path_of({"apiVersion": "v1", "kind": "Node", **IDLE_NODE}))
        kube.put(_job_of("PyTorchJob", False))
        kube.put(_group_of("PyTorchJob"))
        started = NOW - timedelta(hours=3)
        _members_of(kube, "PyTorchJob", started)
        for minutes in range(0, 180, 30):  # passes through the shortage: no node arrives
            assert gang_deadline.run(api, settings, component.NAMESPACE, started + timedelta(minutes=minutes)) == 0
        assert not _suspended(kube, "PyTorchJob")  # it held nothing
        arrived = copy.deepcopy(IDLE_NODE)  # the first of its nodes, Ready a minute ago; the rest still booting
        arrived["metadata"]["creationTimestamp"] = _iso(NOW - timedelta(seconds=90))
        kube.put({"apiVersion": "v1", "kind": "Node", **arrived})
        gang_deadline.run(api, settings, component.NAMESPACE, NOW - timedelta(seconds=60))
        gang_deadline.run(api, settings, component.NAMESPACE, NOW)
        assert not _suspended(kube, "PyTorchJob")
    finally:
        kube.close()


# --- 4. a page's continue token expires and no team's gang is given back ----------------------------------


class _CompactingApi(FakeKubernetesApi):
    """The fake API server, answering the first `continue` of the cluster's pod list the way kube-apiserver
    does once etcd has compacted the list's revision: 410 Expired (handleCompactedErrorForPaging,
    kubernetes/apiserver:pkg/storage/etcd3/errors.go, read through the code search)."""

    expired = False

    def _serve_list(self, h: BaseHTTPRequestHandler, ref: Ref, query: dict) -> None:
        if ref.plural == "pods" and query.get("continue") and not self.expired:
            self.expired = True
            return fake_kube_api._status(
                h,
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. You can start a "
                "new list without the continue parameter.",
            )
        return super()._serve_list(h, ref, query)


def test_a_list_whose_continue_token_expired_does_not_stop_every_teams_pass():
    """A pass reads every pod of the cluster 20 at a time (gang_deadline.PAGE) and follows each page's
    continue token. The API server keeps a token only while its revision is not compacted (kube-apiserver
    compacts etcd every 5 minutes by default: --etcd-compaction-interval, DefaultCompactInterval in
    kubernetes/apiserver:pkg/storage/storagebackend/config.go, read through the code search), then answers 410 Expired.
    Api.items raises it, outside run()'s per-action try, so the pass dies before it patches anything.
    client-go's pager starts over for the same reason (FullListIfExpired, kubernetes/client-go:tools/pager/
    pager.go, read through the code search).

    Impact: a pass whose pod list spans a compaction gives back no gang of any team; the larger the
    cluster (finished pods included, up to kube-controller-manager's terminated-pod-gc-threshold of
    12500, which any team's Jobs fill), the longer each pass and the more of them die. Low: the next
    minute's pass tries again."""
    kube = _CompactingApi()
    try:
        api = _deadline_cluster(kube)
        job = _job_of("PyTorchJob", False)
        job["metadata"]["annotations"] = {WAITING_SINCE_ANNOTATION: _iso(NOW - timedelta(seconds=DEADLINE + 60))}
        kube.put(job)
        kube.put(_group_of("PyTorchJob"))
        _members_of(kube, "PyTorchJob", NOW - timedelta(seconds=DEADLINE + 60))
        for i in range(gang_deadline.PAGE + 5):  # other namespaces' pods: the list needs a second page
            other = _pod(f"done-{i}", 600, node="ip-10-0-0-9")
            other.update(apiVersion="v1", kind="Pod")
            other["metadata"].update(namespace="batch-jobs", annotations={})
            other["status"] = {"phase": "Succeeded"}
            kube.put(other)
        try:
            gang_deadline.run(api, component.settings_of(["llm"]), component.NAMESPACE, NOW)
        except urllib.error.HTTPError:
            pass  # the pass died: what matters is whether llm's gang was given back
        assert _suspended(kube, "PyTorchJob")
    finally:
        kube.close()


# --- 5. the clock on a PodGroup no job owns refused Volcano's own update of it -----------------------------


def _statefulset_gang() -> tuple[dict, dict]:
    pg = _podgroup()
    pg.update(apiVersion="scheduling.volcano.sh/v1beta1", kind="PodGroup")
    pg["metadata"].update(
        name="podgroup-5a5a",
        namespace="vision",
        ownerReferences=[{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "serve", "uid": "5a5a"}],
    )
    pg["spec"] = {"queue": "experiments", "minMember": 1, "minResources": {"nvidia.com/gpu": "8"}}
    member = _pod("serve-0", 60)
    member["metadata"].update(namespace="vision", annotations={gang_deadline.GROUP_ANNOTATION: "podgroup-5a5a"})
    return pg, member


def test_the_gang_deadline_writes_no_podgroup_so_volcanos_resync_of_one_is_admitted():
    """The clock lived on the PodGroup, also of a StatefulSet's or ReplicaSet's gang (which decide() never
    suspends); Volcano's controller re-syncs such a PodGroup from its owner (createOrUpdateNormalPodPG ->
    shouldUpdateExistingPodGroup replaces the annotations with the owner's `volcano.sh/` ones:
    volcano-sh/volcano:pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1), and the rule keeping the
    stamp the CronJob's refused that update with the spec change it carried. The clock is its job's now: the
    CronJob writes no PodGroup, and no rule holds a PodGroup's annotations."""
    pg, member = _statefulset_gang()
    assert gang_deadline.clock_actions([pg], [member], [IDLE_NODE], [], {"h100": DEADLINE}) == []
    old = copy.deepcopy(pg)
    old["metadata"]["annotations"] = {WAITING_SINCE_ANNOTATION: _iso(NOW)}
    resynced = copy.deepcopy(pg)  # rebuilt from the rolled pod: new minResources, the owner's annotations only
    resynced["spec"]["minResources"] = {"nvidia.com/gpu": "1"}
    assert denied_by(resynced, operation="UPDATE", old=old, user=tenancy.VOLCANO_CONTROLLER_USER) == []


# --- 6. one team's jobs fill the gang deadline's memory with owner references ------------------------------

# Owner references are validated one by one (non-empty apiVersion, kind, name and uid; at most one
# controller: ValidateOwnerReferences, kubernetes/apimachinery:pkg/api/validation/objectmeta.go, read through
# the code search), never counted: a job may carry as many as etcd's 1.5 MiB object holds. Pointing them all
# at one ConfigMap of the team's, by its uid, makes every one a solid owner the garbage collector leaves be
# (classifyReferences, kubernetes/kubernetes:pkg/controller/garbagecollector/garbagecollector.go@
# cb6ff2d8ce3595f88570f82c7d0e6d98910afd3c).
OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "0b3f5c2e-8d1a-4a52-9f7e-3c1d2b4a5e6f"}


def _jobs_with_owners(kube: FakeKubernetesApi, count: int, owners: int) -> None:
    """`count` suspended batch Jobs of team llm, each with `owners` references to the team's ConfigMap."""
    for i in range(count):
        job: dict = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"hold-{i}", "namespace": "llm"}}
        job["metadata"]["ownerReferences"] = [dict(OWNER) for _ in range(owners)]
        job["spec"] = {"suspend": True, "parallelism": 1}
        kube.put(job)


def test_a_pass_holds_a_page_of_jobs_whatever_owner_references_they_carry():
    """run() cuts each listed object down to what decide() reads (keep_job), but `_meta` keeps every owner
    reference of every job (apiVersion, kind and name of each) until decide() runs, and a team writes a
    job's ownerReferences at will: no rule of the team policy reads them on a Job or a Kubeflow job
    (components/tenancy.py reads a pod's only). So the pass's peak grows with the jobs a team made, as it
    did before annotations were cut (tests/security/test_r8_attack7.py).

    Impact: a job's 1.5 MiB of references (some 15,500 of ~100 bytes) is 4.5 MB once parsed and kept
    (a dict and three strings each, measured with tracemalloc); about 60 such suspended batch Jobs - well
    within one team's count/jobs.batch quota (components/teams.py compute_quota: at least JOBS_FLOOR, or
    twice its pods quota) and costing it no GPU - take a pass past the CronJob's 256Mi limit
    (components/gang_deadline.py MEMORY_LIMIT). Every pass is OOM-killed before it patches
    anything, so no team's half-delivered gang is given back, cluster-wide, for as long as the jobs exist."""
    owners = 400
    few = peak_of_a_pass(lambda kube: _jobs_with_owners(kube, gang_deadline.PAGE, owners))
    many = peak_of_a_pass(lambda kube: _jobs_with_owners(kube, 4 * gang_deadline.PAGE, owners))
    assert many < 1.5 * few

"""A workload under Volcano that is no Kubeflow job gets the PodGroup Volcano's own controller makes
(minMember from the owner's scheduling.volcano.sh/group-min-member, minResources that many pods'
requests): the team policy admits a gang size from 0 to the pods the workload runs, and only the
Training Operator and Volcano's controller name a pod's PodGroup. cel-expr-python, as test_tenancy.py."""

from __future__ import annotations

import copy

import pytest

from components.tenancy import OPERATOR_USER, VOLCANO_CONTROLLER_USER
from infra.core.names import GROUP_NAME_ANNOTATION, MIN_MEMBER_ANNOTATION
from tests.security.test_tenancy import _job, _pod, _pod_spec, denied_by

SIZE = f"{MIN_MEMBER_ANNOTATION} is a whole number"
NAMES_GROUP = f"no {GROUP_NAME_ANNOTATION}"


def _workload(kind: str, pods: int | None, min_member: str | None, template_annotations: dict | None = None) -> dict:
    template = {
        "metadata": {"annotations": template_annotations or {}},
        "spec": {"schedulerName": "volcano", **_pod_spec()},
    }
    spec: dict = {"selector": {"matchLabels": {"app": "w"}}, "template": template}
    if pods is not None:
        spec["parallelism" if kind == "Job" else "replicas"] = pods
    meta: dict = {"name": "w", "namespace": "vision"}
    if min_member is not None:
        meta["annotations"] = {MIN_MEMBER_ANNOTATION: min_member}
    group = {"Job": "batch/v1", "ReplicationController": "v1"}.get(kind, "apps/v1")
    return {"apiVersion": group, "kind": kind, "metadata": meta, "spec": spec}


def _cronjob(parallelism: int, min_member: str) -> dict:
    job = _workload("Job", parallelism, min_member)
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "c", "namespace": "vision"},
        "spec": {"schedule": "0 * * * *", "jobTemplate": {"metadata": job["metadata"], "spec": job["spec"]}},
    }


def _denied(obj: dict, prefix: str, **request) -> bool:
    return any(m.startswith(prefix) for m in denied_by(obj, **request))


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet", "Job"])
def test_a_gang_larger_than_its_workloads_pods_is_denied(kind):
    assert _denied(_workload(kind, 4, "16"), SIZE)


@pytest.mark.parametrize("value", ["-1", "two", "1e3", ""])
def test_a_gang_size_volcano_would_read_as_one_is_denied(value):
    assert _denied(_workload("Deployment", 4, value), SIZE)


@pytest.mark.parametrize(("pods", "value"), [(4, None), (4, "0"), (4, "1"), (4, "4"), (None, "1"), (0, "3")])
def test_a_jobs_gang_of_at_most_its_pods_is_admitted(pods, value):
    assert denied_by(_workload("Job", pods, value)) == []


SCALED = f"{MIN_MEMBER_ANNOTATION} is 0 or 1"


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"])
def test_a_gang_of_several_pods_on_a_kind_with_a_scale_subresource_is_denied(kind):
    """Attack: a Deployment of 4 replicas with a gang of 4 (or of 999 at 0 replicas), then `kubectl scale
    --replicas=1` or the team's own HPA: the Scale object carries no annotations, so admission never
    compares, and the gang that never forms holds its queue while its pods ask the autoscaler for nodes."""
    assert _denied(_workload(kind, 4, "4"), SCALED)
    assert _denied(_workload(kind, 0, "999"), SCALED)


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"])
@pytest.mark.parametrize(("pods", "value"), [(4, None), (4, "0"), (4, "1"), (None, "1"), (0, "1")])
def test_a_gang_of_at_most_one_pod_on_a_kind_with_a_scale_subresource_is_admitted(kind, pods, value):
    """The serving floor (one replica) and the scavenger's 0 stay: whatever /scale does, the gang forms."""
    assert denied_by(_workload(kind, pods, value)) == []


def test_the_deployment_controller_copying_a_gang_onto_its_replicaset_is_admitted():
    """A Deployment's annotation made before this rule, copied by the controller (kube-system), is its own."""
    rs = _workload("ReplicaSet", 4, "4")
    assert denied_by(rs, user="system:serviceaccount:kube-system:deployment-controller") == []


def test_a_team_patching_a_jobs_parallelism_below_its_gang_is_denied():
    """A Job has no /scale: `kubectl patch job --patch '{"spec":{"parallelism":1}}'` is an UPDATE of the
    Job, which the policy sees with its annotation."""
    old = _workload("Job", 4, "4")
    new = copy.deepcopy(old)
    new["spec"]["parallelism"] = 1
    assert _denied(new, SIZE, operation="UPDATE", old=old)
    assert denied_by(_workload("Job", 4, "2"), operation="UPDATE", old=_workload("Job", 2, "2")) == []


def test_a_pods_own_gang_size_is_not_read_by_volcano_and_is_admitted():
    """Volcano takes minMember from the pod's owner only (getMinMemberFromUpperRes on the annotations of its
    ReplicaSet, DaemonSet, StatefulSet or Job; a bare pod gets 1): the same annotation on the pod itself or its
    template sizes no gang."""
    pod = _pod()
    pod["metadata"]["annotations"] = {MIN_MEMBER_ANNOTATION: "16"}
    assert denied_by(pod) == []
    assert denied_by(_workload("Job", 1, "1", {MIN_MEMBER_ANNOTATION: "16"})) == []


def _off_the_gpu_nodes(workload: dict) -> dict:
    """A team's DaemonSet runs on no GPU node (test_r9_terminating_attack.py): its pods ask CPU and memory only."""
    for c in workload["spec"]["template"]["spec"]["containers"]:
        c["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    return workload


def test_a_daemonsets_gang_is_at_most_one():
    assert _denied(_off_the_gpu_nodes(_workload("DaemonSet", None, "2")), SIZE)
    assert denied_by(_off_the_gpu_nodes(_workload("DaemonSet", None, "1"))) == []


def test_a_cronjobs_gang_is_at_most_its_job_templates_parallelism():
    assert _denied(_cronjob(2, "3"), SIZE)
    assert denied_by(_cronjob(2, "2")) == []


def test_the_deployment_controller_scaling_a_replicaset_below_its_copied_gang_is_admitted():
    """A rolling update's new ReplicaSet starts below the Deployment's replicas, annotation copied."""
    rs = _workload("ReplicaSet", 1, "4")
    assert (
        denied_by(rs, operation="UPDATE", old=rs, user="system:serviceaccount:kube-system:deployment-controller") == []
    )


@pytest.mark.parametrize("kind", ["Deployment", "Job"])
def test_a_workload_whose_pods_name_a_podgroup_is_denied(kind):
    assert _denied(_workload(kind, 2, None, {GROUP_NAME_ANNOTATION: "pg-of-another-job"}), NAMES_GROUP)


def test_a_kubeflow_job_whose_template_names_a_podgroup_is_denied():
    job = _job()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {GROUP_NAME_ANNOTATION: "other"}
    }
    assert _denied(job, NAMES_GROUP)


def _named_pod(group: str = "j") -> dict:
    pod = _pod()
    pod["metadata"]["annotations"] = {GROUP_NAME_ANNOTATION: group}
    return pod


def test_a_team_creating_a_pod_that_joins_a_podgroup_is_denied():
    assert _denied(_named_pod(), NAMES_GROUP)


def test_the_operator_creating_a_pod_of_its_jobs_podgroup_is_admitted():
    assert denied_by(_named_pod(), user=OPERATOR_USER) == []


def test_volcanos_controller_writing_a_pods_podgroup_is_admitted():
    old = _pod()
    assert denied_by(_named_pod("podgroup-u-1"), operation="UPDATE", old=old, user=VOLCANO_CONTROLLER_USER) == []


def test_a_team_moving_its_pod_to_another_podgroup_is_denied():
    old = _named_pod("podgroup-u-1")
    assert _denied(_named_pod("j-of-another-gang"), NAMES_GROUP, operation="UPDATE", old=old)
    assert _denied(_named_pod("podgroup-u-1"), NAMES_GROUP, operation="UPDATE", old=_pod())


def test_a_team_updating_a_pod_that_keeps_its_podgroup_is_admitted():
    old = _named_pod("podgroup-u-1")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"a": "b"}
    assert denied_by(new, operation="UPDATE", old=old) == []


def test_a_jobs_gang_is_at_most_its_completions_when_fewer_than_its_parallelism():
    """Attack: a Job runs min(parallelism, completions) pods at once; parallelism 4 with completions 1
    passed a gang of 4 that its one pod never forms."""
    job = _workload("Job", 4, "4")
    job["spec"]["completions"] = 1
    assert _denied(job, SIZE)
    job["metadata"]["annotations"][MIN_MEMBER_ANNOTATION] = "1"
    assert denied_by(job) == []


OWNERS = "a pod a team creates names at most one owner"


def _owned(*owners: dict) -> dict:
    pod = _pod()
    pod["metadata"]["ownerReferences"] = list(owners)
    return pod


BIG_JOB = {"apiVersion": "batch/v1", "kind": "Job", "name": "big", "uid": "uid-of-big"}
ANCHOR = {"apiVersion": "v1", "kind": "ConfigMap", "name": "anchor", "uid": "uid-of-cm"}


def _owners_denied(pod: dict, **request) -> bool:
    return any(m.startswith(OWNERS) for m in denied_by(pod, **{"user": "alice@vision", **request}))


def test_a_member_created_pod_naming_another_workload_as_an_owner_is_denied():
    """Volcano sizes a plain pod's PodGroup from every owner it names, by kind and name: naming a Job of
    group-min-member 12 as a second owner, one 8-GPU pod would get a 96-GPU gang that never forms."""
    assert _owners_denied(_owned(BIG_JOB, ANCHOR))
    assert _owners_denied(_owned({**BIG_JOB, "controller": True}))


@pytest.mark.parametrize("kind", ["ReplicaSet", "StatefulSet", "DaemonSet", "Job"])
def test_a_member_created_pod_owned_by_a_kind_volcano_reads_is_denied(kind):
    assert _owners_denied(_owned({"apiVersion": "apps/v1", "kind": kind, "name": "w", "uid": "u"}))


def test_a_member_adding_an_owner_to_a_pod_is_denied():
    old = _owned(ANCHOR)
    new = _owned(ANCHOR, BIG_JOB)
    assert _owners_denied(new, operation="UPDATE", old=old)


@pytest.mark.parametrize(
    "controller",
    [
        {**ANCHOR, "controller": True},
        # a kind no API serves, or one the garbage collector's lookup finds whatever its case: the UID is
        # what Volcano names the group after (GeneratePodgroupName, volcano-sh/volcano:staging/src/
        # volcano.sh/apis/pkg/apis/helpers/helpers.go@v1.15.1), here a running plain gang's
        {
            "apiVersion": "example.com/v1",
            "kind": "Anything",
            "name": "x",
            "uid": "uid-of-a-running-rs",
            "controller": True,
        },
        {"apiVersion": "batch/v1", "kind": "job", "name": "big", "uid": "uid-of-big", "controller": True},
    ],
)
def test_a_members_pod_claiming_a_controller_is_denied_so_it_cannot_join_that_controllers_gang(controller):
    assert _owners_denied(_owned(controller))


def test_controllers_create_their_pods_and_a_member_a_pod_with_one_other_owner():
    for user in ("system:serviceaccount:kube-system:job-controller", OPERATOR_USER):
        assert not _owners_denied(_owned({**BIG_JOB, "controller": True}), user=user)
    assert not _owners_denied(_owned(ANCHOR))
    assert not _owners_denied(_owned(ANCHOR), operation="UPDATE", old=_owned(ANCHOR))

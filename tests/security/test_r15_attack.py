"""Round 15 attacker: a member of one team (AmazonEKSEditPolicy's `edit` in its namespace and
tenancy.job_submitter_role's Kubeflow jobs), beside the fixes of earlier rounds. Each attack goes through the program's
own policies, evaluated with cel-expr-python as tests/security/test_tenancy.py does."""

from __future__ import annotations

import copy
import shutil

import pytest

from components import storage
from infra.core.names import MIN_MEMBER_ANNOTATION
from tests.components.test_forged_signals import GPU, KSM, SCHED, _room
from tests.promql import held, promtool_test
from tests.security.test_lustre_squash import laid_out, may
from tests.security.test_tenancy import _pod, denied_by
from tests.security.test_volcano_groups import SIZE, _workload


def _denied(obj: dict, prefix: str, **request) -> bool:
    return any(m.startswith(prefix) for m in denied_by(obj, **request))


FIXED = f"a Job's {MIN_MEMBER_ANNOTATION} is fixed"


def test_a_team_shrinking_a_running_jobs_gang_annotation_with_its_parallelism_is_denied():
    """Attack: a Job of 16 pods with a gang of 16 (admitted: the gang is its pods). Its first pod makes Volcano's
    controller create the PodGroup, minMember 16 and minResources 16 pods' requests, once: it makes a Job's group
    when the group is missing and never updates it (processNextReq calls createNormalPodPGIfNotExist on a pod's add;
    only ReplicaSets and StatefulSets have update handlers, createOrUpdateNormalPodPG: volcano-sh/volcano:
    pkg/controllers/podgroup/pg_controller.go and pg_controller_handler.go@v1.15.1). Then one PATCH of the Job,
    `parallelism: 4` and the annotation `4` together: the policy compared the annotation with the parallelism in
    the same object and admitted it, the Job controller deleted 12 pods, and the group stayed 16 - the gang that
    never forms, its minResources held in the queue and its 4 pods asking the autoscaler for nodes for ever, which
    the policy refuses at creation (test_volcano_groups.py). Dropping the annotation does the same."""
    running = _workload("Job", 16, "16")
    assert denied_by(running) == []
    shrunk = copy.deepcopy(running)
    shrunk["spec"]["parallelism"] = 4
    shrunk["metadata"]["annotations"][MIN_MEMBER_ANNOTATION] = "4"
    assert not _denied(shrunk, SIZE, operation="UPDATE", old=running)  # the size rule alone admits it
    assert _denied(shrunk, FIXED, operation="UPDATE", old=running)
    dropped = copy.deepcopy(shrunk)
    del dropped["metadata"]["annotations"][MIN_MEMBER_ANNOTATION]
    assert _denied(dropped, FIXED, operation="UPDATE", old=running)
    added = copy.deepcopy(running)
    del added["metadata"]["annotations"][MIN_MEMBER_ANNOTATION]
    assert _denied(running, FIXED, operation="UPDATE", old=added)


def test_a_jobs_update_that_keeps_its_gang_annotation_is_admitted():
    """A Job's other updates (more parallelism, a suspension, a label) keep the annotation and pass; so do the
    controllers' (kube-controller-manager's accounts), which the size rule exempts already."""
    running = _workload("Job", 4, "4")
    grown = copy.deepcopy(running)
    grown["spec"]["parallelism"] = 8
    assert denied_by(grown, operation="UPDATE", old=running) == []
    plain = _workload("Job", 4, None)
    labelled = copy.deepcopy(plain)
    labelled["metadata"]["labels"] = {"team": "vision"}
    assert denied_by(labelled, operation="UPDATE", old=plain) == []
    shrunk = copy.deepcopy(running)
    shrunk["metadata"]["annotations"][MIN_MEMBER_ANNOTATION] = "2"
    assert (
        denied_by(shrunk, operation="UPDATE", old=running, user="system:serviceaccount:kube-system:job-controller")
        == []
    )


def test_a_reader_team_whose_image_lists_its_uid_in_the_owners_group_cannot_enter_the_owners_checkpoints():
    """Attack: team B reads dataset `corpus` (owner A), whose `checkpoints` directory holds A's weights exported to
    S3. B's pod passes the team policy with B's UID, GID, fsGroup and no other supplementalGroups, and leaves
    `supplementalGroupsPolicy` unset, Merge by default: the runtime adds every group the image's /etc/group lists
    the UID in (containerd's WithAdditionalGIDs looks the numeric UID up in the image's /etc/passwd, then its
    groups in /etc/group: containerd/containerd:pkg/oci/spec_opts.go@v2.1.9, applied for Merge by
    internal/cri/server/container_create_linux.go@v2.1.9, the EKS AL2023 AMIs' containerd; Kubernetes'
    SupplementalGroupsPolicy, KEP 3619, names it). B's image lists its user in a group of A's GID, so its process
    carries A's GID, and the directory was its owner's UID's and GID's (2770): B entered it. Owner-only (no group
    bits), no group a pod carries opens it; A's pods run as A's UID (the team policy)."""
    owner, reader = 20002, 20003
    pod = _pod()
    assert "supplementalGroupsPolicy" not in pod["spec"]["securityContext"] and denied_by(pod) == []
    tree = laid_out(storage.layout_script({"llm": owner, "vision": reader}, [("corpus", owner)]))
    private = f"{storage.MOUNT_PATH}{storage.DATASETS_DIR}/corpus/{storage.DATASET_CHECKPOINTS}"
    with_the_owners_group = (reader, owner)  # B's GID (the policy), A's (B's image's /etc/group)
    for want in "rwx":
        assert not may(tree, private, want, reader, with_the_owners_group), want
        assert may(tree, private, want, owner, (owner,)), want
    assert may(tree, f"{storage.MOUNT_PATH}{storage.DATASETS_DIR}/corpus", "r", reader, (reader,))


def _pool_of_six_nodes(queues: dict[str, tuple[int, int, int]]) -> list[tuple[str, int]]:
    """Volcano's and kube-state-metrics' series for pool h100 of 6 nodes of 8 GPUs, n0-n3 full (two queues' gangs
    hold 16 GPUs each) and n4-n5 free; per queue (GPUs allocated, requested, deserved), in Volcano's milli-units.
    The proportion plugin exports each queue's deserved share, which a queue's guarantee sets to its capability
    (deserved = max(min(share, realCapability, request), guarantee): volcano-sh/volcano:pkg/scheduler/plugins/
    proportion/proportion.go@v1.15.1; components/demand.py guarantees each team queue its capability)."""
    series = []
    for queue, (allocated, requested, deserved) in queues.items():
        for name, value in (("allocated", allocated), ("request", requested), ("deserved", deserved)):
            series.append((f'volcano_queue_{name}_scalar_resources{{{SCHED},{GPU},queue_name="{queue}"}}', value))
    series += [(f'kube_node_status_allocatable{{{KSM},resource="nvidia_com_gpu",node="n{i}"}}', 8) for i in range(6)]
    series += [(f'kube_node_labels{{{KSM},node="n{i}",label_higgsfield_io_pool="h100"}}', 1) for i in range(6)]
    series += [
        (f'kube_pod_container_resource_requests{{{KSM},resource="nvidia_com_gpu",node="n{i}",pod="p{i}"}}', 8)
        for i in range(4)
    ]
    return series


def _room_is(tmp_path, series: list[tuple[str, int]], value: float) -> bool:
    """Whether team research's elastic room on pool h100 is `value` over `series`, as promtool evaluates it."""
    case = {"expr": _room("research", "h100"), "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": value}]}
    return promtool_test(tmp_path, held(series), [case]).returncode == 0


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed here")
def test_a_teams_gpu_pods_beyond_its_queues_capability_do_not_freeze_another_teams_elastic_growth(tmp_path):
    """Attack: team vision's gangs hold its queue's whole capability (16 GPUs), and it adds a plain Job of 16 GPUs in
    an evaluation class (the plain-gpu quota admits its gpuQuota): its pods exist at once, Pending, and Volcano
    counts them in the queue's request (proportion.go adds every Pending task's request, @v1.15.1), though the queue
    can admit none of them while its gangs run. The elastic room subtracted every queue's request less its
    allocation from the pool's free GPUs, so team research's elastic job, beside 16 free GPUs nobody can be given,
    had no room: vision froze every other team's growth with work it can never run. Counted up to what its queue
    may still be given (its request up to its deserved share, its capability), it waits for nothing; work its queue
    could take still holds the room."""
    research = (16000, 16000, 16000)
    beyond = _pool_of_six_nodes({"research": research, "experiments": (16000, 32000, 16000)})
    assert _room_is(tmp_path, beyond, 2)  # (16 held + 16 free) / 16 held
    within = _pool_of_six_nodes({"research": research, "experiments": (16000, 32000, 32000)})
    assert _room_is(tmp_path, within, 1)  # vision's queue may take the 16 free GPUs: research waits

"""Round 15 attacker: a member of one team (AmazonEKSEditPolicy's `edit` in its namespace and
tenancy.job_submitter_role's Kubeflow jobs), beside the fixes of earlier rounds. Each attack goes through the program's
own policies, evaluated with cel-expr-python as tests/security/test_tenancy.py does."""

from __future__ import annotations

import copy

from components import storage
from infra.core.names import MIN_MEMBER_ANNOTATION
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
    groups in /etc/group: containerd/containerd:pkg/oci/spec_opts.go, read through the code search; Kubernetes'
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

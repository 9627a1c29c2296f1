"""A gang its job left behind (red team, round 7): `kubectl delete pytorchjob j --cascade=orphan`.

With propagationPolicy=Orphan the garbage collector removes the deleted job's UID from the
ownerReferences of every dependent - the PodGroup `j` included - before it lets the job go
(attemptToOrphanWorker/orphanDependents, kubernetes/kubernetes:pkg/controller/garbagecollector/
garbagecollector.go@02830ed2), and the operator does nothing for a job that is being deleted
(`GetDeletionTimestamp() != nil`: Reconcile, kubeflow/trainer:pkg/controller.v1/pytorch/
pytorchjob_controller.go@v1.9.4), so it never calls DeletePodGroup. PodGroup `j` stays, ownerless,
in the phase it had: Volcano keeps an Inqueue PodGroup Inqueue even with no pod at all
(getPodGroupPhase, volcano-sh/volcano:pkg/scheduler/framework/session.go@v1.15.1), which is every
gang's state while the autoscaler brings its nodes.

A new PyTorchJob `j` - the same kind, so the name rule admits it - of any size then has its PodGroup
found by name (SyncPodGroup, kubeflow/trainer:pkg/controller.v1/common/scheduling.go@v1.9.4), its
minMember and minResources rewritten by the operator, and, the group being Inqueue, all its pods
created at once (DelayPodCreationDueToPodGroup, pkg/controller.v1/control/podgroup_control.go@v1.9.4):
a 1000-pod gang that never passed its queue's enqueue check, every pod of it Unschedulable demand
for the autoscaler (RecordJobStatusEvent, pkg/scheduler/cache/cache.go@v1.15.1). The gang deadline
never gives those nodes back: it acts only on a PodGroup with a kubeflow.org owner
(images/training/gang_deadline.py `_owner_job`), and SyncPodGroup's update adds none.

A rule that looked for the job among the PodGroup's owners found none once the orphaning removed it.
The team policy refuses the resize whatever the group's owners (only Volcano's controller resizes a
plain workload's group); these tests accept either that or a refused orphaning patch."""

from __future__ import annotations

import copy

from components.tenancy import OPERATOR_USER
from tests.security.test_gang_admission import _podgroup
from tests.security.test_tenancy import denied_by

# kube-controller-manager's garbage collector, with --use-service-account-credentials (the same
# assumption as tenancy.CONTROLLER_USERS for the Deployment and Job controllers)
GARBAGE_COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"


def _inqueue(min_member: int, gpus: int) -> dict:
    group = _podgroup(min_member, gpus)
    group["status"] = {"phase": "Inqueue"}
    return group


def _orphaned(group: dict) -> dict:
    """The PodGroup after the garbage collector's orphaning patch: the job's reference removed."""
    left = copy.deepcopy(group)
    del left["metadata"]["ownerReferences"]
    return left


def _refused(obj: dict, old: dict, user: str) -> bool:
    return bool(denied_by(obj, operation="UPDATE", old=old, user=user))


def test_an_orphan_deleted_jobs_gang_is_not_resized_by_the_next_job_of_its_name():
    """PyTorchJob `j` (2 pods, 16 GPUs) admitted Inqueue, deleted with propagationPolicy=Orphan, its two
    pending pods deleted by the team (edit), then PyTorchJob `j` made again with 1000 pods of 8 GPUs: the
    operator's SyncPodGroup writes minMember 1000 onto the Inqueue group and creates all 1000 pods."""
    owned = _inqueue(2, 16)
    orphaned = _orphaned(owned)
    resized = _orphaned(_inqueue(1000, 8000))
    assert _refused(orphaned, owned, GARBAGE_COLLECTOR) or _refused(resized, orphaned, OPERATOR_USER)


def test_an_orphan_deleted_jobs_gang_keeps_its_min_resources_for_the_next_job_of_its_name():
    """The same with the size kept and the templates changed (2 CPU pods made 2 pods of 8 GPUs):
    minResources is what the enqueue check counted."""
    owned = _inqueue(2, 0)
    orphaned = _orphaned(owned)
    regrown = _orphaned(_inqueue(2, 16))
    assert _refused(orphaned, owned, GARBAGE_COLLECTOR) or _refused(regrown, orphaned, OPERATOR_USER)


def test_volcanos_controller_still_resizes_a_plain_workloads_group_and_nobody_else_does():
    """createOrUpdateNormalPodPG (volcano-sh/volcano:pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1)
    follows a ReplicaSet's or StatefulSet's new group-min-member: the rule leaves Volcano's controller that."""
    from components.tenancy import VOLCANO_CONTROLLER_USER

    plain = _orphaned(_inqueue(1, 0))
    plain["metadata"]["name"] = "podgroup-6f1c2a9e-1b7d-4a51-9d0e-2f3c4b5a6d7e"
    grown = copy.deepcopy(plain)
    grown["spec"]["minMember"] = 2
    assert not _refused(grown, plain, VOLCANO_CONTROLLER_USER)
    assert _refused(grown, plain, OPERATOR_USER) and _refused(grown, plain, "alice@vision")

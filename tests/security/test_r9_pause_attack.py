"""Round 9's attacker, beside the gang deadline's handling of a job its team paused: a clocked job its team
suspended keeps its clock (`higgsfield.io/waiting-since`) while the pause, timed from the job's Suspended
condition, is shorter than the longest `emptySeconds` of the pools its templates may land on; after that the
CronJob takes the clock off, and the gang, resumed, gets a new one (images/training/gang_deadline.py
pause_actions).

The attacker is a team member: AmazonEKSEditPolicy's `edit` in the team's namespace and the Kubeflow jobs of
tenancy.job_submitter_role (create, update, patch, delete; their status only to get). Each test states what the
platform should do: admission through cel-expr-python (tests/security/test_tenancy.py `denied_by`), the gang
deadline through `run` against tests/fake_kube_api.py, the job's controller played by the test.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timedelta

import gang_deadline

from components import gang_deadline as component
from infra.core.names import GAVE_BACK_ANNOTATION, WAITING_SINCE_ANNOTATION
from tests.components.test_gang_deadline import DEADLINE, NOW, _iso, _node, deadline_map
from tests.components.test_gang_deadline_pause import (
    EMPTY,
    SETTINGS,
    _cluster,
    _given_back,
    _set_suspended,
)
from tests.fake_kube_api import FakeKubernetesApi
from tests.security.test_r8_attack7 import ATTACKER
from tests.security.test_tenancy import _job, denied_by

# Two pools as prod has them (stacks/Pulumi.prod.yaml): on-demand h100, whose empty nodes go after the
# autoscaler's scaleDownUnneededTime (10 min), and a capacity block whose nodes stay an hour.
BRIEF, LONG = "h100", "h200-block"
EMPTY_S = {BRIEF: 600.0, LONG: 3600.0}
KEEPS_ITS_PLACEMENT = "a Kubeflow job the gang deadline is timing keeps where its pods may land"


def _on(job: dict, pool: str) -> dict:
    """`job` with every replica's pods on `pool` (their templates' nodeSelector)."""
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["nodeSelector"] = {gang_deadline.POOL_LABEL: pool}
    return job


def _clocked_and_paused() -> dict:
    """Team vision's PyTorchJob `j` on the capacity block, waiting beside its idle nodes (its clock), suspended."""
    job = _on(_job(), LONG)
    job["metadata"]["annotations"] = {WAITING_SINCE_ANNOTATION: "2027-01-05T11:40:00Z"}
    job["spec"]["runPolicy"]["suspend"] = True
    return job


# --- a job's templates re-pointed while it is paused ------------------------------------------------------------


def test_a_team_may_not_point_the_templates_of_a_paused_job_with_a_clock_at_another_pool():
    """The CronJob reads the pools of a paused job from its templates as they are when it looks. A team that
    re-points them at a pool whose empty nodes go sooner has the clock taken off once that pool's time has
    passed, while the nodes its gang held, on the slower pool, are still there; pointed back and resumed, the
    gang is packed onto them again and starts a new clock: every cycle a pause of the quicker pool's time buys
    one more deadline of idle nodes, on the same job, with no new one in the team's history."""
    old = _clocked_and_paused()
    assert any(
        m.startswith(KEEPS_ITS_PLACEMENT)
        for m in denied_by(_on(copy.deepcopy(old), BRIEF), operation="UPDATE", old=old, user=ATTACKER)
    )


def test_a_team_may_not_add_node_affinity_to_the_templates_of_a_paused_job_with_a_clock():
    old = _clocked_and_paused()
    new = copy.deepcopy(old)
    term = {"matchExpressions": [{"key": gang_deadline.POOL_LABEL, "operator": "In", "values": [BRIEF]}]}
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    assert any(m.startswith(KEEPS_ITS_PLACEMENT) for m in denied_by(new, operation="UPDATE", old=old, user=ATTACKER))


# The whole attack, through `run`: the team's writes pass admission or are refused, the CronJob's are made.


def _podgroup_of(job: dict) -> dict:
    """The operator's PodGroup of the job, named after it (SyncPodGroup), Inqueue."""
    meta = job["metadata"]
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": meta["name"]}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "ownerReferences": [owner]},
        "status": {"phase": "Inqueue"},
    }


def _operator_acts(kube: FakeKubernetesApi, job: dict, at: datetime) -> None:
    """The Training Operator's reconcile (kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4 ReconcileJobs):
    a suspended job's pods and PodGroup deleted and its Suspended condition True; a resumed one's condition False
    and its PodGroup and pods made again from its templates as they are now (queue admission taken as at once)."""
    stored = kube.get(FakeKubernetesApi.path_of(job))
    assert stored is not None
    suspended = stored["spec"]["runPolicy"].get("suspend") is True
    condition = {"type": "Suspended", "status": str(suspended), "lastTransitionTime": _iso(at)}
    stored["status"] = {"conditions": [condition]}
    kube.put(stored)
    meta = stored["metadata"]
    for rtype in stored["spec"]["pytorchReplicaSpecs"]:
        pod_path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}-{rtype.lower()}-0"
        kube.delete_now(pod_path)
    kube.delete_now(FakeKubernetesApi.path_of(_podgroup_of(stored)))
    if suspended:
        return
    kube.put(_podgroup_of(stored))
    for rtype, replica in stored["spec"]["pytorchReplicaSpecs"].items():
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{rtype.lower()}-0",
                "namespace": meta["namespace"],
                "creationTimestamp": _iso(at),
                "annotations": {gang_deadline.GROUP_ANNOTATION: meta["name"]},
            },
            "spec": copy.deepcopy(replica["template"]["spec"]),
            "status": {"phase": "Pending"},
        }
        kube.put(pod)


def _team_writes(kube: FakeKubernetesApi, job: dict, change: Callable[[dict], None]) -> list[str]:
    """The team's UPDATE of its job: made when admission lets it, else refused. The refusals."""
    old = kube.get(FakeKubernetesApi.path_of(job))
    assert old is not None
    new = copy.deepcopy(old)
    change(new)
    refusals = denied_by(new, operation="UPDATE", old=old, user=ATTACKER)
    if not refusals:
        kube.put(new)
    return refusals


def _suspend(suspended: bool) -> Callable[[dict], None]:
    return lambda job: job["spec"]["runPolicy"].update(suspend=suspended)


def _point_at(pool: str) -> Callable[[dict], None]:
    def change(job: dict) -> None:
        _on(job, pool)

    return change


def _cluster_of(kube: FakeKubernetesApi) -> gang_deadline.Api:
    """Both pools' deadlines and emptiness, and an idle node of the capacity block."""
    kube.put({"apiVersion": "v1", "kind": "Node", **_node("ip-10-0-0-9", LONG)})
    for pool, empty in EMPTY_S.items():
        kube.put(deadline_map(pool, DEADLINE, empty, name=f"d-{pool}"))
    return gang_deadline.Api(kube.url, "token")


def _submitted(kube: FakeKubernetesApi, name: str, at: datetime) -> dict:
    """Team vision's PyTorchJob `name` on the capacity block, admitted, its pods made at `at`."""
    job = _on(_job(), LONG)
    job["metadata"]["name"] = name
    assert denied_by(job, user=ATTACKER) == []
    kube.put(job)
    _operator_acts(kube, job, at)
    return job


def _passes(
    kube: FakeKubernetesApi, api: gang_deadline.Api, job: dict, first: datetime, last: datetime
) -> datetime | None:
    """A pass a minute from `first` to `last`; the moment of the first that gave `job`'s gang back."""
    moment = first
    while moment <= last:
        assert gang_deadline.run(api, component.settings_of(["vision"]), component.NAMESPACE, moment) == 0
        stored = kube.get(FakeKubernetesApi.path_of(job)) or {}
        if GAVE_BACK_ANNOTATION in (stored["metadata"].get("annotations") or {}):
            return moment
        moment += timedelta(minutes=1)
    return None


def _pause(kube: FakeKubernetesApi, job: dict, suspended: bool, at: datetime) -> None:
    """The team suspends or resumes its job (admitted) and the operator acts at once."""
    assert _team_writes(kube, job, _suspend(suspended)) == []
    _operator_acts(kube, job, at)


def test_a_team_re_pointing_its_paused_job_at_a_quicker_pool_still_has_its_gang_given_back_at_its_deadline():
    """Its gang waited 20 of its 30 minutes beside an idle node of the capacity block (which keeps an empty node
    an hour). The team suspends the job, points its templates at h100 (10 minutes), waits those 10 minutes for
    the CronJob to take the clock off, points them back and resumes: the gang is beside the same idle node
    again, 31 minutes after it first waited there, and is not given back for another deadline."""
    kube = FakeKubernetesApi()
    try:
        start = NOW - timedelta(hours=2)
        api = _cluster_of(kube)
        job = _submitted(kube, "j", start)
        assert _passes(kube, api, job, start, start) is None  # its clock starts
        paused = start + timedelta(minutes=20)
        _pause(kube, job, True, paused)
        _team_writes(kube, job, _point_at(BRIEF))  # refused or not: the attack goes on
        assert _passes(kube, api, job, paused + timedelta(minutes=1), paused + timedelta(minutes=11)) is None
        _team_writes(kube, job, _point_at(LONG))
        resumed = paused + timedelta(minutes=11)
        _pause(kube, job, False, resumed)
        last = resumed + timedelta(seconds=DEADLINE + 300)
        assert _passes(kube, api, job, resumed + timedelta(minutes=1), last) == resumed + timedelta(minutes=1)
    finally:
        kube.close()


# --- nodes that outlive their pool's emptySeconds ----------------------------------------------------------------


def _resumed_after_its_nodes_empty_time(beside: Callable[[datetime], dict] | None = None) -> bool:
    """Whether the gang is given back once resumed: it waited 20 of its 30 minutes beside an idle h100 node (the pool
    keeps an empty node 20 minutes), then its team paused it for the pool's empty time and two minutes, a pass a
    minute; `beside` (given the pause's start) is a pod of the team's bound there for the pause, deleted before the
    resume."""
    kube = FakeKubernetesApi()
    try:
        start = NOW - timedelta(hours=2)
        api = _cluster(kube, "PyTorchJob", start)
        assert gang_deadline.run(api, SETTINGS, component.NAMESPACE, start) == 0  # its clock starts
        paused = start + timedelta(minutes=20)
        _set_suspended(kube, "PyTorchJob", True, paused)
        pod = beside(paused) if beside else None
        if pod:
            kube.put(pod)
        resumed = paused + timedelta(seconds=EMPTY + 120)
        moment = paused + timedelta(minutes=1)
        while moment < resumed:
            assert gang_deadline.run(api, SETTINGS, component.NAMESPACE, moment) == 0
            moment += timedelta(minutes=1)
        if pod:
            kube.delete_now(FakeKubernetesApi.path_of(pod))
        _set_suspended(kube, "PyTorchJob", False, resumed)  # the idle node was never removed
        assert gang_deadline.run(api, SETTINGS, component.NAMESPACE, resumed + timedelta(minutes=1)) == 0
        return _given_back(kube, "PyTorchJob")
    finally:
        kube.close()


def test_a_paused_gang_whose_idle_node_outlived_its_pools_empty_time_is_given_back_when_resumed_beside_it():
    """Its gang waited 20 of its 30 minutes beside an idle h100 node (the pool keeps an empty node 20 minutes).
    The team pauses the job for 22 minutes while another team's gangs scale up now and then, so the autoscaler's
    scale-down stays in cooldown and the node is still there, idle and paid, when the team resumes: the gang is
    beside it again 43 minutes after it first waited there."""
    assert _resumed_after_its_nodes_empty_time()


def test_a_team_pausing_its_job_and_packing_another_onto_the_same_idle_node_has_it_given_back_on_the_first_clock():
    """Job j's gang waits 25 minutes beside an idle node of the capacity block; the team pauses j and submits k,
    whose gang the autoscaler packs onto the same node (so it never becomes empty). Each job's clock alone would
    have given k 30 minutes of its own, and j, resumed an hour into its pause, 30 more: the team's gangs held the
    node for 86 minutes. k's clock starts where the team's gangs began waiting in that pool (the team clock,
    images/training/gang_deadline.py), so it is given back by j's deadline."""
    kube = FakeKubernetesApi()
    try:
        start = NOW - timedelta(hours=3)
        api = _cluster_of(kube)
        first = _submitted(kube, "j", start)
        assert _passes(kube, api, first, start, start + timedelta(minutes=24)) is None
        paused = start + timedelta(minutes=25)
        _pause(kube, first, True, paused)
        second = _submitted(kube, "k", paused)
        gave_back = _passes(kube, api, second, paused + timedelta(minutes=1), paused + timedelta(minutes=24))
        assert gave_back is not None and gave_back <= start + timedelta(seconds=DEADLINE + 60), gave_back
    finally:
        kube.close()

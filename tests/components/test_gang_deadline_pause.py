"""A job its team paused: the gang deadline keeps its clock through a pause shorter than its pools keep an empty
node (the nodes bought for its gang stay idle and paid for that long), and takes it off once the pause has lasted
that long (the nodes went with the pods), so a job paused for long is not given back the moment it comes back.

The CronJob runs for real (`run`) against tests/fake_kube_api.py, the job's controller played by the test: on a
suspension it deletes the pods (and a Kubeflow job's PodGroup) and sets its Suspended condition; on a resume it
sets it False and the gang queues again. Admission through cel-expr-python (tests/security/test_tenancy.py).
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta

import gang_deadline
import pytest

from components import gang_deadline as component
from infra.core.names import GAVE_BACK_ANNOTATION, WAITING_SINCE_ANNOTATION
from infra.offline import cold_start
from tests.components.test_gang_deadline import DEADLINE, IDLE_NODE, NOW, _iso, _pod, deadline_map
from tests.conftest import STACKS, plan_of
from tests.fake_kube_api import FakeKubernetesApi, merge
from tests.security.test_r8_attack7 import ATTACKER, peak_of_a_pass
from tests.security.test_r8_attack8 import _group_of as _group
from tests.security.test_tenancy import _job as _team_job
from tests.security.test_tenancy import denied_by

EMPTY = 1200.0  # how long the pool h100 keeps an empty node here (its scaleDownUnneededTime)
SETTINGS = component.settings_of(["llm"])
ON_H100 = {"spec": {"nodeSelector": {gang_deadline.POOL_LABEL: "h100"}, "containers": [{"name": "main"}]}}


def _job(kind: str) -> dict:
    """The gang's job, not suspended: a PyTorchJob or a plain gang's batch Job, its pods on pool h100."""
    if kind == "Job":
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "eval", "namespace": "llm", "uid": "1f2e"}}
        job["spec"] = {"parallelism": 2, "template": copy.deepcopy(ON_H100)}
        return job
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "train", "namespace": "llm"}}
    job["spec"] = {
        "runPolicy": {},
        "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": copy.deepcopy(ON_H100)}},
    }
    return job


def _members(kube: FakeKubernetesApi, kind: str, made: datetime) -> None:
    for i in range(2):
        pod = _pod(f"member-{i}", 0)
        pod.update(apiVersion="v1", kind="Pod")
        group = _group(kind)["metadata"]["name"]
        pod["metadata"].update(creationTimestamp=_iso(made), annotations={gang_deadline.GROUP_ANNOTATION: group})
        kube.put(pod)


def _stored(kube: FakeKubernetesApi, kind: str) -> dict:
    job = kube.get(FakeKubernetesApi.path_of(_job(kind)))
    assert job is not None
    return job


def _set_suspended(kube: FakeKubernetesApi, kind: str, suspended: bool, at: datetime) -> None:
    """The team sets its job's suspension, and the job's controller acts on it at once (its Suspended condition)."""
    job = _stored(kube, kind)
    (job["spec"] if kind == "Job" else job["spec"]["runPolicy"])["suspend"] = suspended
    job["status"] = {"conditions": [{"type": "Suspended", "status": str(suspended), "lastTransitionTime": _iso(at)}]}
    kube.put(job)
    if suspended:
        for i in range(2):
            kube.delete_now(f"/api/v1/namespaces/llm/pods/member-{i}")
        if kind != "Job":
            kube.delete_now(FakeKubernetesApi.path_of(_group(kind)))
    else:
        kube.put(_group(kind))
        _members(kube, kind, at)


def _node_made(name: str, at: datetime) -> dict:
    """An h100 node the autoscaler made at `at`, idle."""
    node = copy.deepcopy(IDLE_NODE)
    node["metadata"].update(name=name, creationTimestamp=_iso(at))
    return {"apiVersion": "v1", "kind": "Node", **node}


def _cluster(kube: FakeKubernetesApi, kind: str, since: datetime) -> gang_deadline.Api:
    """The gang, submitted a minute before `since` and waiting since then beside an idle h100 node bought for it,
    and the pool's deadline and emptiness."""
    kube.put(_node_made(IDLE_NODE["metadata"]["name"], since))
    kube.put(deadline_map("h100", DEADLINE, EMPTY))
    job = _job(kind)
    job["metadata"]["creationTimestamp"] = _iso(since - timedelta(minutes=1))
    kube.put(job)
    kube.put(_group(kind))
    _members(kube, kind, since)
    return gang_deadline.Api(kube.url, "token")


def _given_back(kube: FakeKubernetesApi, kind: str) -> bool:
    return GAVE_BACK_ANNOTATION in (_stored(kube, kind)["metadata"].get("annotations") or {})


@pytest.mark.parametrize("kind", ["PyTorchJob", "Job"])
def test_a_job_its_team_paused_longer_than_its_deadline_is_not_given_back_when_resumed_beside_an_idle_node(kind):
    """Its gang waited 20 of its 30 minutes beside an idle node; its team paused it for two and a half hours and
    resumed it beside another idle node, made since (the one bought for it went once it had stood empty for the
    pool's time). The clock it kept through the pause said it had waited hours: the next pass gave it back."""
    kube = FakeKubernetesApi()
    try:
        start = NOW - timedelta(hours=3)
        api = _cluster(kube, kind, start)
        assert gang_deadline.run(api, SETTINGS, component.NAMESPACE, start) == 0  # its clock starts
        _set_suspended(kube, kind, True, start + timedelta(minutes=20))
        kube.delete_now(f"/api/v1/nodes/{IDLE_NODE['metadata']['name']}")  # removed once empty for EMPTY
        kube.put(_node_made("ip-10-0-0-2", NOW - timedelta(minutes=30)))  # another gang's, idle now
        for minutes in range(21, 171, 10):  # passes through the pause (one a minute on a cluster; each is stateless)
            assert gang_deadline.run(api, SETTINGS, component.NAMESPACE, start + timedelta(minutes=minutes)) == 0
        _set_suspended(kube, kind, False, NOW - timedelta(minutes=1))
        assert gang_deadline.run(api, SETTINGS, component.NAMESPACE, NOW) == 0
        assert not _given_back(kube, kind)
    finally:
        kube.close()


@pytest.mark.parametrize(
    ("paused_s", "every_s"),
    [(10, 60), (EMPTY - 120, EMPTY)],
    ids=["around-each-pass", "just-shorter-than-the-pool-keeps-an-empty-node"],
)
def test_a_team_pausing_its_job_again_and_again_still_has_its_gang_given_back_at_its_deadline(paused_s, every_s):
    """The team suspends its job and resumes it every `every_s`, each pause `paused_s` long: seconds around each
    pass, or just less than the pool keeps an empty node, so the nodes bought for the gang stay idle (the
    autoscaler packs the re-made pods onto them each time). Neither counts as time off the gang's clock: once
    its deadline is past, the first pass that sees the gang beside its idle node gives it back."""
    kube = FakeKubernetesApi()
    try:
        start = NOW - timedelta(seconds=DEADLINE + 2 * every_s)
        api = _cluster(kube, "PyTorchJob", start)
        events = [(start + timedelta(seconds=s), "pass") for s in range(0, int(DEADLINE + 2 * every_s), 60)]
        for cycle in range(int((DEADLINE + 2 * every_s) // every_s)):
            pause = start + timedelta(seconds=(cycle + 1) * every_s - 5)  # 5 s before a pass
            events += [(pause, "suspend"), (pause + timedelta(seconds=paused_s), "resume")]
        given_back = False
        for moment, event in sorted(events, key=lambda e: (e[0], e[1] != "pass")):
            if event == "pass":
                gang_deadline.run(api, SETTINGS, component.NAMESPACE, moment)
                given_back = _given_back(kube, "PyTorchJob")
                if given_back:
                    break
            else:
                _set_suspended(kube, "PyTorchJob", event == "suspend", moment)
        if not given_back:  # never seen beside its node at a pass: it is, at last
            _set_suspended(kube, "PyTorchJob", False, NOW - timedelta(seconds=30))
            gang_deadline.run(api, SETTINGS, component.NAMESPACE, NOW)
            given_back = _given_back(kube, "PyTorchJob")
        assert given_back
    finally:
        kube.close()


def test_a_team_pausing_around_each_pass_is_given_back_though_no_pass_sees_its_gang():
    """The team suspends its job 5 s before each pass and resumes it 10 s later: no pass sees its gang, yet the
    autoscaler sees its pods 50 s a minute and keeps the nodes bought for them. A job its team paused since the
    previous pass, its clock past its deadline, was resumed between passes: it is given back as if seen."""
    kube = FakeKubernetesApi()
    try:
        start = NOW - timedelta(seconds=DEADLINE + 600)
        api = _cluster(kube, "PyTorchJob", start)
        passes = [start + timedelta(seconds=s) for s in range(0, int(DEADLINE + 600), 60)]
        gang_deadline.run(api, SETTINGS, component.NAMESPACE, passes[0])  # its clock starts
        given_back_at = None
        for moment in passes[1:]:
            _set_suspended(kube, "PyTorchJob", True, moment - timedelta(seconds=5))
            assert gang_deadline.run(api, SETTINGS, component.NAMESPACE, moment) == 0
            if _given_back(kube, "PyTorchJob"):
                given_back_at = moment
                break
            _set_suspended(kube, "PyTorchJob", False, moment + timedelta(seconds=5))
        assert given_back_at is not None and (given_back_at - start).total_seconds() <= DEADLINE + 120
    finally:
        kube.close()


# --- the decision, without the API --------------------------------------------------------------------------


def _paused(since: datetime, template: dict = ON_H100, clock: datetime | None = NOW - timedelta(hours=5)) -> dict:
    """A PyTorchJob its team suspended, its controller having acted at `since`, as a pass keeps it."""
    job = _job("PyTorchJob")
    job["spec"]["runPolicy"]["suspend"] = True
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] = copy.deepcopy(template)
    job["metadata"]["annotations"] = {WAITING_SINCE_ANNOTATION: _iso(clock)} if clock else {}
    job["status"] = {"conditions": [{"type": "Suspended", "status": "True", "lastTransitionTime": _iso(since)}]}
    return {**gang_deadline.keep_job(job, ["h100", "a100"]), "kind": "PyTorchJob"}


def test_a_job_paused_as_long_as_its_pool_keeps_an_empty_node_loses_its_clock():
    (action,) = gang_deadline.pause_actions([_paused(NOW - timedelta(seconds=EMPTY))], {"h100": EMPTY}, NOW)
    assert (action.verb, action.kind, action.name) == ("unmark", "PyTorchJob", "train")
    assert gang_deadline.patch_for(action, NOW) == {"metadata": {"annotations": {WAITING_SINCE_ANNOTATION: None}}}


def test_a_job_whose_controller_has_not_acted_on_its_suspension_keeps_its_clock():
    """spec.suspend alone: its pods may still be there, holding the nodes."""
    job = _paused(NOW - timedelta(hours=2))
    job["status"] = {}
    assert gang_deadline.pause_actions([job], {"h100": EMPTY}, NOW) == []


def test_a_job_that_may_use_two_pools_keeps_its_clock_as_long_as_the_slower_keeps_an_empty_node():
    either = {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}}}
    term = {"matchExpressions": [{"key": gang_deadline.POOL_LABEL, "operator": "In", "values": ["h100", "a100"]}]}
    either["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [term]
    }
    empty = {"h100": EMPTY, "a100": 3 * EMPTY}
    assert gang_deadline.pause_actions([_paused(NOW - timedelta(seconds=2 * EMPTY), either)], empty, NOW) == []
    (action,) = gang_deadline.pause_actions([_paused(NOW - timedelta(seconds=3 * EMPTY), either)], empty, NOW)
    assert action.verb == "unmark"


# --- the clock stays the CronJob's ----------------------------------------------------------------------------


def _paused_team_job(clock: str | None) -> dict:
    job = _team_job()
    job["spec"]["runPolicy"]["suspend"] = True
    job["metadata"]["annotations"] = {WAITING_SINCE_ANNOTATION: clock} if clock else {}
    return job


def test_the_gang_deadline_may_take_the_clock_off_a_job_its_team_paused():
    old = _paused_team_job("2027-01-05T08:00:00Z")
    since = _iso(NOW - timedelta(hours=2))
    old["status"] = {"conditions": [{"type": "Suspended", "status": "True", "lastTransitionTime": since}]}
    kept = {**gang_deadline.keep_job(old, ["h100"]), "kind": "PyTorchJob"}
    (action,) = gang_deadline.pause_actions([kept], {"h100": EMPTY}, NOW)
    new = merge(old, gang_deadline.patch_for(action, NOW))
    assert denied_by(new, operation="UPDATE", old=old, user=component.USER) == []


def test_the_gang_deadline_may_give_back_a_job_its_team_paused_since_the_last_pass():
    old = _paused_team_job(_iso(NOW - timedelta(seconds=DEADLINE + 60)))
    since = _iso(NOW - timedelta(seconds=5))
    old["status"] = {"conditions": [{"type": "Suspended", "status": "True", "lastTransitionTime": since}]}
    kept = {**gang_deadline.keep_job(old, ["h100"]), "kind": "PyTorchJob"}
    (action,) = gang_deadline.fresh_pause_actions([kept], {"h100": DEADLINE}, 60.0, NOW)
    assert action.verb == "suspend"
    new = merge(old, gang_deadline.patch_for(action, NOW))
    assert denied_by(new, operation="UPDATE", old=old, user=component.USER) == []


def test_a_job_its_team_paused_before_the_last_pass_is_not_given_back_for_it():
    """A pause older than a pass was seen by that pass: the job was not between two passes, so nothing stood."""
    job = _paused(NOW - timedelta(seconds=90), clock=NOW - timedelta(seconds=DEADLINE + 600))
    assert gang_deadline.fresh_pause_actions([job], {"h100": DEADLINE, "a100": DEADLINE}, 60.0, NOW) == []


def test_a_team_may_not_take_the_clock_off_the_job_it_paused():
    new, old = _paused_team_job(None), _paused_team_job("2027-01-05T08:00:00Z")
    assert any(
        m.startswith(WAITING_SINCE_ANNOTATION) for m in denied_by(new, operation="UPDATE", old=old, user=ATTACKER)
    )


# --- what the CronJob is told, and what a pass holds ------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_each_pools_config_map_counts_a_pause_past_the_pods_grace_and_the_pools_empty_time(stack):
    """A pause is timed from the operator's request to delete the pods (the Suspended condition); a pod may take the
    stack's grace to end, and its node starts to count as empty only then, so a team whose ranks ignore SIGTERM got
    a new clock up to that grace before its old nodes started their scale-down."""
    plan = plan_of(stack)
    grace = plan.config.checkpoints.grace_seconds
    maps = [
        r.inputs
        for r in plan.resources
        if r.inputs.get("kind") == "ConfigMap"
        and (r.inputs["metadata"].get("labels") or {}).get(component.DEADLINE_LABEL) == "true"
    ]
    empty = {m["data"]["pool"]: float(m["data"]["emptySeconds"]) for m in maps}
    assert empty == {p.name: cold_start.give_back(p, None).unneeded_s + grace for p in plan.config.gpu_pools}


def _jobs_with_affinity(kube: FakeKubernetesApi, count: int, terms: int) -> None:
    """`count` suspended PyTorchJobs of team llm, each template with `terms` node affinity terms."""
    term = {"matchExpressions": [{"key": "example.com/rack", "operator": "In", "values": ["r" * 64]}]}
    affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term] * terms}}
    for i in range(count):
        job = _job("PyTorchJob")
        job["metadata"]["name"] = f"j{i}"
        job["spec"]["runPolicy"]["suspend"] = True
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"] = {"nodeAffinity": affinity}
        kube.put(job)


def test_a_pass_holds_a_page_of_jobs_whatever_node_affinity_their_templates_carry():
    """A pass reads each job's templates for the pools its pods may land on, and keeps only their names."""
    few = peak_of_a_pass(lambda kube: _jobs_with_affinity(kube, gang_deadline.PAGE, 200))
    many = peak_of_a_pass(lambda kube: _jobs_with_affinity(kube, 3 * gang_deadline.PAGE, 200))
    assert many < 1.5 * few

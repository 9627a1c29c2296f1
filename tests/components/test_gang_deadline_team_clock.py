"""A team's clock: a gang's clock lives on its job, so a team that deletes its waiting job and submits it again
would start a new one each time (a team CronJob with `concurrencyPolicy: Replace` every deadline - 1 minutes),
and the idle GPU nodes bought for its first gang would stay, paid by the platform. The gang deadline keeps, per
(team namespace, pool), since when the team's gangs have waited there beside idle nodes, unbroken, in a
ConfigMap of its own namespace; a new gang of the team that starts waiting while that is live (a gang of the
team waited there less than the pool's emptySeconds ago) starts its clock then (images/training/gang_deadline.py
next_team_clocks).

The CronJob runs for real (`run`) against tests/fake_kube_api.py; the team's job controller is played by the
test (a resubmitted job's PodGroup Inqueue and its pods pending, as the operator makes them).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import gang_deadline

from components import gang_deadline as component
from infra.offline.rendered import Call, allows, rules_for
from tests.components.test_gang_deadline import DEADLINE, IDLE_NODE, NOW, _iso, _node, _pod, deadline_map
from tests.conftest import plan_of
from tests.fake_kube_api import FakeKubernetesApi, Ref

EMPTY = 1200.0  # how long pool h100 keeps an empty node here (its scaleDownUnneededTime and the pods' grace)
PASS_S = 60  # the CronJob's schedule (components/gang_deadline.py DEADLINE_CHECK_S)
TEAMS = ["llm", "vision"]
SETTINGS = component.settings_of(TEAMS)
CLOCKS = f"/api/v1/namespaces/{component.NAMESPACE}/configmaps/{component.TEAM_CLOCKS}"


def _cluster(kube: FakeKubernetesApi, pools: dict[str, float] | None = None) -> gang_deadline.Api:
    """An idle node of each pool (h100 unless given), each pool's deadline and emptiness."""
    for pool, deadline in (pools or {"h100": DEADLINE}).items():
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"idle-{pool}"}}
        node["metadata"]["labels"] = {gang_deadline.POOL_LABEL: pool}
        kube.put(node)
        kube.put(deadline_map(pool, deadline, EMPTY, name=f"d-{pool}"))
    return gang_deadline.Api(kube.url, "token")


def _path(team: str, name: str) -> str:
    return f"/apis/kubeflow.org/v1/namespaces/{team}/pytorchjobs/{name}"


def _submit(kube: FakeKubernetesApi, team: str, name: str, at: datetime, pool: str = "h100") -> None:
    """Team `team` submits PyTorchJob `name` on `pool`; its queue admits it and the operator makes its PodGroup
    (Inqueue) and two pending pods."""
    on_pool = {"spec": {"nodeSelector": {gang_deadline.POOL_LABEL: pool}, "containers": [{"name": "main"}]}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": team}}
    job["spec"] = {"runPolicy": {}, "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": on_pool}}}
    kube.put(job)
    _operator_makes(kube, team, name, at, pool)


def _operator_makes(kube: FakeKubernetesApi, team: str, name: str, at: datetime, pool: str = "h100") -> None:
    """The operator makes the admitted job's PodGroup (Inqueue) and its two pods, pending on `pool`."""
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name}
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup"}
    group["metadata"] = {"name": name, "namespace": team, "ownerReferences": [owner]}
    group["status"] = {"phase": "Inqueue"}
    kube.put(group)
    for i in range(2):
        pod = _pod(f"{name}-worker-{i}", 0, pool=pool)
        pod.update(apiVersion="v1", kind="Pod")
        pod["metadata"].update(namespace=team, creationTimestamp=_iso(at))
        pod["metadata"]["annotations"] = {gang_deadline.GROUP_ANNOTATION: name}
        kube.put(pod)


def _delete(kube: FakeKubernetesApi, team: str, name: str) -> None:
    """The team deletes its job; the garbage collector deletes its PodGroup and pods with it."""
    kube.delete_now(_path(team, name))
    _operator_deletes(kube, team, name)


def _operator_deletes(kube: FakeKubernetesApi, team: str, name: str) -> None:
    """The job's PodGroup and pods go: the garbage collector's after a delete, the operator's after a suspension."""
    kube.delete_now(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{team}/podgroups/{name}")
    for i in range(2):
        kube.delete_now(f"/api/v1/namespaces/{team}/pods/{name}-worker-{i}")


def _pass(kube: FakeKubernetesApi, api: gang_deadline.Api, at: datetime) -> None:
    assert gang_deadline.run(api, SETTINGS, component.NAMESPACE, at) == 0


def _annotations(kube: FakeKubernetesApi, team: str, name: str) -> dict:
    job = kube.get(_path(team, name))
    assert job is not None
    return job["metadata"].get("annotations") or {}


def _clocks(kube: FakeKubernetesApi) -> dict[str, str]:
    stored = kube.get(CLOCKS)
    assert stored is not None, "the gang deadline keeps no team clock"
    return stored.get("data") or {}


def test_a_team_replacing_its_waiting_job_every_deadline_less_a_minute_is_given_back_within_the_deadline():
    """The team's CronJob (concurrencyPolicy Replace) deletes the waiting job and submits a new one, under another
    name, every deadline - 1 minutes; each new gang waits beside the same idle node. The job waiting when the first
    gang's deadline and one pass have passed is given back."""
    kube = FakeKubernetesApi()
    try:
        api = _cluster(kube)
        start = NOW - timedelta(hours=4)
        every = timedelta(seconds=DEADLINE - PASS_S)
        _submit(kube, "llm", "train-0", start - timedelta(seconds=30))
        given_back, moment, made = None, start, 0
        while given_back is None and moment <= start + timedelta(hours=3):
            if moment - start >= every * (made + 1):
                _delete(kube, "llm", f"train-{made}")
                made += 1
                _submit(kube, "llm", f"train-{made}", moment - timedelta(seconds=30))
            _pass(kube, api, moment)
            if gang_deadline.GAVE_BACK in _annotations(kube, "llm", f"train-{made}"):
                given_back = moment
            moment += timedelta(seconds=PASS_S)
        assert given_back is not None, "the idle node is held for as long as the team replaces its job"
        assert (given_back - start).total_seconds() <= DEADLINE + PASS_S
    finally:
        kube.close()


def test_the_clock_is_the_teams_own_another_teams_new_gang_beside_the_same_idle_node_starts_a_fresh_one():
    """Team llm's gang waits beside the idle node; llm deletes it, and ten minutes later (the node is still there)
    llm and vision each submit a new gang beside it: llm's starts at its team's clock, vision's (it earned none) at
    the pass that first sees it."""
    kube = FakeKubernetesApi()
    try:
        api = _cluster(kube)
        start = NOW - timedelta(hours=1)
        _submit(kube, "llm", "train", start)
        _pass(kube, api, start)
        _delete(kube, "llm", "train")
        later = start + timedelta(minutes=10)
        _submit(kube, "llm", "train-again", later)
        _submit(kube, "vision", "eval", later)
        _pass(kube, api, later)
        assert _annotations(kube, "llm", "train-again")[gang_deadline.WAITING_SINCE] == _iso(start)
        assert _annotations(kube, "vision", "eval")[gang_deadline.WAITING_SINCE] == _iso(later)
    finally:
        kube.close()


def test_a_teams_clock_lives_while_its_gangs_wait_and_its_next_gang_after_the_pools_empty_time_starts_afresh():
    """While the team's gang waits, its team clock is kept; once none of its gangs has waited in the pool for the
    pool's emptySeconds (the nodes bought for them are gone), the team clock is dropped and its next gang, beside
    an idle node bought since, starts its own."""
    kube = FakeKubernetesApi()
    try:
        api = _cluster(kube)
        start = NOW - timedelta(hours=2)
        _submit(kube, "llm", "train", start)
        _pass(kube, api, start)
        assert set(_clocks(kube)) == {"llm.h100"}
        _delete(kube, "llm", "train")
        gone = start + timedelta(seconds=EMPTY)
        _pass(kube, api, gone)
        assert _clocks(kube) == {}
        _submit(kube, "llm", "train-again", gone + timedelta(seconds=PASS_S))
        _pass(kube, api, gone + timedelta(seconds=PASS_S))
        assert _annotations(kube, "llm", "train-again")[gang_deadline.WAITING_SINCE] == _iso(
            gone + timedelta(seconds=PASS_S)
        )
    finally:
        kube.close()


def test_the_team_clocks_hold_one_entry_per_team_and_pool_however_many_jobs_the_teams_replace():
    """Two teams replacing jobs on two pools every pass for an hour: four entries, one per (team, pool)."""
    kube = FakeKubernetesApi()
    try:
        pools = {"h100": DEADLINE, "a100": 4 * 3600.0}  # a100's deadline is never reached here
        api = _cluster(kube, pools)
        start = NOW - timedelta(hours=2)
        for i in range(60):
            moment = start + timedelta(seconds=i * PASS_S)
            for team in TEAMS:
                for pool in pools:
                    if i:
                        _delete(kube, team, f"{pool}-{i - 1}")
                    _submit(kube, team, f"{pool}-{i}", moment, pool=pool)
            _pass(kube, api, moment)
        assert sorted(_clocks(kube)) == ["llm.a100", "llm.h100", "vision.a100", "vision.h100"]
    finally:
        kube.close()


def test_a_malformed_team_clock_is_ignored_and_the_gang_starts_its_own():
    """The team cannot write the ConfigMap, but an entry that is not one (a person's edit, an older format) must
    neither stop the pass nor give a gang a clock: it is dropped, and the gang's clock starts at the pass."""
    kube = FakeKubernetesApi()
    try:
        api = _cluster(kube)
        meta = {"name": component.TEAM_CLOCKS, "namespace": component.NAMESPACE}
        data = {"llm.h100": "yesterday", "llm": "1 2", "gone.h100": "1 2", "vision.h100": "\u0661 \u0662"}
        kube.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
        _submit(kube, "llm", "train", NOW)
        _pass(kube, api, NOW)
        assert _annotations(kube, "llm", "train")[gang_deadline.WAITING_SINCE] == _iso(NOW)
        assert set(_clocks(kube)) == {"llm.h100"}
    finally:
        kube.close()


def test_a_persons_edit_of_the_team_clocks_during_a_pass_is_kept_and_the_pass_fails():
    """Only one pass runs at a time (concurrencyPolicy Forbid), so a write between the pass's read of the team
    clocks and its own is someone else's: the update is refused (409 Conflict, a stale resourceVersion), the edit
    stays for the next pass to read, and the pass fails so the CronJob's failed runs show it."""
    kube = FakeKubernetesApi()
    try:
        api = _cluster(kube)
        _submit(kube, "llm", "train", NOW)
        _pass(kube, api, NOW)
        edit = {**(kube.get(CLOCKS) or {}), "data": {}}

        class EditedMeanwhile(gang_deadline.Api):
            def call(self, method: str, path: str, body: dict | None = None) -> object:
                answer = super().call(method, path, body)
                if (method, path) == ("GET", CLOCKS):
                    kube.put(edit)  # a person empties it
                return answer

        edited = EditedMeanwhile(kube.url, "token")
        assert gang_deadline.run(edited, SETTINGS, component.NAMESPACE, NOW + timedelta(seconds=PASS_S)) == 1
        assert _clocks(kube) == {}
    finally:
        kube.close()


def test_the_cronjobs_rights_let_it_make_and_keep_its_team_clocks():
    """Every request of two passes (the first makes the ConfigMap, the second updates it) is one the stack's RBAC
    grants the CronJob's ServiceAccount, as the authorizer reads its rules (infra/offline/rendered.py)."""
    objects = [r.inputs for r in plan_of("prod").resources]
    rights = rules_for(objects, component.NAMESPACE, component.SERVICE_ACCOUNT)
    kube = FakeKubernetesApi()
    try:
        api = _cluster(kube)
        _submit(kube, "llm", "train", NOW)
        _pass(kube, api, NOW)
        _pass(kube, api, NOW + timedelta(seconds=PASS_S))
        assert set(_clocks(kube)) == {"llm.h100"}
        verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        for verb, path in kube.requests:
            ref = Ref.parse(path.split("?")[0])
            group = "" if ref.prefix == "api/v1" else ref.prefix.split("/")[1]
            call = Call(
                verbs.get(verb, "get" if ref.name else "list"), group, ref.plural, ref.namespace or "", ref.name
            )
            assert allows(rights, call), (verb, path)
    finally:
        kube.close()


def test_a_teams_second_gang_is_given_back_with_its_first_and_both_queue_again_with_clocks_of_their_own():
    """Team llm's gang `train` waits beside the idle node from 10:00; at 10:20 the team submits a second, `eval`, in
    the same pool. A second gang keeps its team's clock (docs/design/tenancy.md, "a team's second gang in a pool
    keeps its team's clock"): `eval` starts at 10:00 and is given back at the same pass as `train`, eleven minutes
    into its own thirty. Both are queued again retryAfterSeconds later, and each waits on a clock of its own from
    the pass that sees it again, though the pool keeps an empty node longer than the retry takes (as prod's h100
    does)."""
    kube = FakeKubernetesApi()
    try:
        api = _cluster(kube)
        kube.put(deadline_map("h100", DEADLINE, SETTINGS["retryAfterSeconds"] + 720, name="d-h100"))
        start = NOW - timedelta(hours=3)
        _submit(kube, "llm", "train", start)
        second = start + timedelta(minutes=20)
        given_back: dict[str, datetime] = {}
        moment = start
        while len(given_back) < 2 and moment <= start + timedelta(hours=1):
            if moment == second:
                _submit(kube, "llm", "eval", moment)
            _pass(kube, api, moment)
            for name in ("train", "eval")[: 1 + (moment >= second)]:
                if name not in given_back and gang_deadline.GAVE_BACK in _annotations(kube, "llm", name):
                    given_back[name] = moment
                    _operator_deletes(kube, "llm", name)
            moment += timedelta(seconds=PASS_S)
        assert _annotations(kube, "llm", "eval").get(gang_deadline.WAITING_SINCE) is None
        assert given_back == {"train": given_back["train"], "eval": given_back["train"]}
        assert (given_back["eval"] - second).total_seconds() < DEADLINE / 2
        resumed: set[str] = set()
        while len(resumed) < 2 and moment <= given_back["train"] + timedelta(hours=1):
            _pass(kube, api, moment)
            for name in ("train", "eval"):
                if name not in resumed and gang_deadline.GAVE_BACK not in _annotations(kube, "llm", name):
                    resumed.add(name)
                    _operator_makes(kube, "llm", name, moment)
            moment += timedelta(seconds=PASS_S)
        _pass(kube, api, moment)
        for name in ("train", "eval"):
            assert _annotations(kube, "llm", name)[gang_deadline.WAITING_SINCE] == _iso(moment)
    finally:
        kube.close()


# --- the rules, pure (next_team_clocks) ------------------------------------------------------------------------


def _clock(since: datetime, seen: datetime) -> gang_deadline.TeamClock:
    return gang_deadline.TeamClock(since, seen)


def test_a_teams_gang_that_runs_ends_its_team_clock():
    """Its gang is whole and holds the nodes it waited for: the team's next gang waits for nodes of its own."""
    pg = {
        "metadata": {
            "name": "pg-train",
            "namespace": "llm",
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train"}],
        },
        "status": {"phase": "Running"},
    }
    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": "train", "namespace": "llm", "annotations": {gang_deadline.WAITING_SINCE: _iso(NOW)}},
        "spec": {"runPolicy": {}},
        "pools": ["h100"],
    }
    bound = _pod("train-master-0", 60, node="ip-10-0-0-2")
    team = {("llm", "h100"): _clock(NOW - timedelta(minutes=10), NOW - timedelta(minutes=1))}
    podgroups, pods, nodes = [pg], [bound], [IDLE_NODE, _node("ip-10-0-0-2", "h100")]
    live = gang_deadline.running_team_clocks(team, podgroups, pods, nodes, [job], {"h100": EMPTY}, set(), NOW)
    after = gang_deadline.next_team_clocks(live, podgroups, pods, nodes, [job], {"h100": DEADLINE}, NOW)
    assert after == {}


def test_a_job_the_deadline_queues_again_starts_a_fresh_clock():
    """The deadline's own retry: the gang gets a new clock (docs/capacity.md), whatever the pool's emptySeconds. Its
    team's clock there was last kept by the job itself, when the deadline gave it back."""
    gave_back = NOW - timedelta(minutes=31)
    meta = {"name": "train", "namespace": "llm", "annotations": {gang_deadline.GAVE_BACK: _iso(gave_back)}}
    job = {"kind": "PyTorchJob", "metadata": meta, "spec": {}, "pools": ["h100"]}
    team = {("llm", "h100"): _clock(gave_back - timedelta(minutes=31), gave_back)}
    resumed = {("llm", "PyTorchJob", "train")}
    live = gang_deadline.running_team_clocks(team, [], [], [], [job], {"h100": 3600.0}, resumed, NOW)
    after = gang_deadline.next_team_clocks(live, [], [], [], [job], {"h100": DEADLINE}, NOW)
    assert after == {}

"""The team clock beside its own decoys and second gangs, in one pool. Per (team namespace, pool) the gang deadline
keeps since when the team's gangs have waited there beside idle nodes; a gang of the team that starts waiting there
while that clock is live starts its own at the clock's start, and a clocked gang of the team that runs there ends
the clock once no idle node of the pool made since the clock started is left (images/training/gang_deadline.py
running_team_clocks, next_team_clocks).

The harm each attack is measured by is another team's: an idle h100 node held by team llm's pending pods is a node
the autoscaler keeps (it packs pending pods onto idle nodes before it looks for unneeded ones), paid by the platform
and counted against the pool's maximum that a team waiting behind llm needs. The attacker is a team member; the
CronJob runs for real (`run`) against tests/fake_kube_api.py, the Training Operator and Volcano played by the test.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import gang_deadline

from tests.components.test_gang_deadline import DEADLINE, NOW, _iso
from tests.components.test_gang_deadline_team_clock import EMPTY, PASS_S, _cluster
from tests.fake_kube_api import FakeKubernetesApi
from tests.security.test_r10_clock_attack import (
    ON_REAL,
    _bind,
    _delete,
    _given_back,
    _pass,
    _submit,
)

POOL = "h100"


def _idle_nodes(kube: FakeKubernetesApi, made: datetime, count: int) -> gang_deadline.Api:
    """Pool h100 (the test's deadline and emptiness) with `count` idle nodes, each made at `made`: the nodes EC2
    delivered for team llm's first gang, short of what it asked."""
    api = _cluster(kube, {POOL: DEADLINE})
    kube.delete_now(f"/api/v1/nodes/idle-{POOL}")
    for i in range(count):
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"bought-{i}"}}
        node["metadata"].update(labels={gang_deadline.POOL_LABEL: POOL}, creationTimestamp=_iso(made))
        kube.put(node)
    return api


HELD = "the idle h100 node bought for the team's first gang is held past its deadline and one pass"


def _decoy_runs(
    kube: FakeKubernetesApi,
    bought: datetime,
    pods_above: int = 0,
    resubmit_after_s: float = 0.0,
    beside: Callable[[datetime], dict] | None = None,
) -> str:
    """Team llm's gang train-0 waits beside two idle h100 nodes made at `bought` from `start` (two hours before NOW).
    A deadline less five minutes later the team submits a one-pod decoy there (with `pods_above` pods above its
    gang's minimum, an elastic job's), which waits a pass (it takes the team's clock); a minute later Volcano binds
    the decoy's pod to one of the two nodes, and in that minute the team deletes train-0 and submits train-1
    `resubmit_after_s` later; `beside` (given that minute) is a pod of the team's bound in that minute too and
    deleted a pass later. The passes run until the first gang's deadline and one pass have gone by; the name of the
    team's waiting job is returned."""
    start = NOW - timedelta(hours=2)
    api = _idle_nodes(kube, bought, 2)
    _submit(kube, "train-0", start - timedelta(seconds=30), ON_REAL)
    binds = start + timedelta(seconds=DEADLINE - 240)
    moment = start
    while moment <= start + timedelta(seconds=DEADLINE + PASS_S):
        if moment == binds - timedelta(seconds=PASS_S):
            _submit(kube, "decoy", moment, ON_REAL)
            for i in range(pods_above):
                above = kube.get("/api/v1/namespaces/llm/pods/decoy-master-0")
                assert above is not None
                above["metadata"]["name"] = f"decoy-worker-{i}"
                kube.put(above)
        if moment == binds:
            _bind(kube, "decoy", "bought-1")
            if beside:
                kube.put(beside(moment))
            _delete(kube, "train-0")
        if beside and moment == binds + timedelta(seconds=PASS_S):
            pod = beside(binds)
            kube.delete_now(FakeKubernetesApi.path_of(pod))
        if binds <= moment - timedelta(seconds=resubmit_after_s) < binds + timedelta(seconds=PASS_S):
            _submit(kube, "train-1", moment - timedelta(seconds=30), ON_REAL)
        _pass(api, moment)
        moment += timedelta(seconds=PASS_S)
    return "train-1"


def _replacement_given_back(
    bought: datetime,
    pods_above: int = 0,
    resubmit_after_s: float = 0.0,
    beside: Callable[[datetime], dict] | None = None,
) -> bool:
    """Whether the team's waiting job is given back once the decoy has run (_decoy_runs)."""
    kube = FakeKubernetesApi()
    try:
        return _given_back(kube, _decoy_runs(kube, bought, pods_above, resubmit_after_s, beside))
    finally:
        kube.close()


def test_a_decoy_that_runs_beside_the_teams_waiting_gang_does_not_give_its_replacement_a_fresh_clock():
    """Team llm's gang waits beside two idle h100 nodes bought for it; its decoy takes the team's clock, binds to
    one of the two nodes and runs, and in that minute the team replaces its waiting gang under a new name. The
    other node is still idle, bought while the team's clock ran: the decoy's run did not use it, so the team's
    clock there goes on, and the replacement is given back within the first gang's deadline and one pass, freeing
    the node for the team waiting behind."""
    assert _replacement_given_back(NOW - timedelta(hours=2, seconds=30)), HELD


def test_a_decoy_that_runs_while_the_team_deletes_its_waiting_gang_does_not_give_the_next_one_a_fresh_clock():
    """As above, but the team submits its next gang only after the pass that sees the decoy run: at that pass no
    gang of the team waits, yet the node bought for the first is still idle, so the clock goes on and the next gang
    is given back within the first's deadline and one pass."""
    assert _replacement_given_back(NOW - timedelta(hours=2, seconds=30), resubmit_after_s=PASS_S), HELD


def test_a_decoy_that_runs_beside_nodes_bought_before_any_pass_saw_the_team_wait_does_not_restart_its_clock():
    """The team's first gang had the two h100 nodes bought and was deleted before any pass saw it beside them, so
    its clock never started; the nodes stay idle (an unneeded node goes after the pool's emptySeconds). Ten minutes
    later the team's gang waits beside them (the team's clock starts then), and the decoy runs on one of them. The
    other may be one bought for the team's gangs though it was made before their clock: the clock goes on."""
    assert timedelta(minutes=10) < timedelta(seconds=EMPTY)
    assert _replacement_given_back(NOW - timedelta(hours=2, minutes=10)), HELD


def test_an_elastic_decoy_running_at_its_minimum_beside_the_teams_waiting_gang_does_not_restart_its_clock():
    """The decoy is an elastic job of two pods, its gang's minimum one: it binds that one to one of the nodes bought
    for the team's waiting gang and runs (its PodGroup Running), its pod above the minimum pending beside the other.
    The other node is still idle: the replacement is given back within the first gang's deadline and one pass."""
    assert _replacement_given_back(NOW - timedelta(hours=2, seconds=30), pods_above=1), HELD


def test_a_teams_gang_that_runs_on_every_node_bought_for_it_leaves_its_next_gang_a_clock_of_its_own():
    """The team's first gang waits beside the node EC2 delivered for it, then binds there and runs. Ten minutes
    later the team's next gang waits beside a node bought for it since: nothing bought for the first is idle, so the
    next gang's clock starts at the pass that first sees it, not at the first gang's."""
    kube = FakeKubernetesApi()
    try:
        start = NOW - timedelta(hours=2)
        api = _idle_nodes(kube, start - timedelta(seconds=30), 1)
        _submit(kube, "train-0", start - timedelta(seconds=30), ON_REAL)
        _pass(api, start)
        ran = start + timedelta(minutes=20)
        _bind(kube, "train-0", "bought-0")  # its one pod stands for the gang: whole on the nodes it waited for
        _pass(api, ran)
        later = ran + timedelta(minutes=10)
        assert later - start < timedelta(seconds=EMPTY + DEADLINE)
        fresh = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bought-next"}}
        fresh["metadata"].update(labels={gang_deadline.POOL_LABEL: POOL}, creationTimestamp=_iso(later))
        kube.put(fresh)
        _submit(kube, "next", later, ON_REAL)
        _pass(api, later)
        job = kube.get("/apis/kubeflow.org/v1/namespaces/llm/pytorchjobs/next")
        assert job is not None
        assert job["metadata"]["annotations"][gang_deadline.WAITING_SINCE] == _iso(later)
    finally:
        kube.close()


def test_a_replacement_submitted_before_the_first_gang_is_given_back_is_given_back_with_it():
    """The team submits its replacement while its first gang still waits (two passes before the first's deadline),
    so the replacement is a second gang as far as any pass sees, then deletes the first before the deadline's pass.
    A second gang of the team in the pool keeps the team's clock (docs/design/tenancy.md, "a team's second gang in a
    pool keeps its team's clock"): the replacement is given back within the first gang's deadline and one pass."""
    kube = FakeKubernetesApi()
    try:
        start = NOW - timedelta(hours=2)
        api = _idle_nodes(kube, start - timedelta(seconds=30), 1)
        _submit(kube, "train-0", start - timedelta(seconds=30), ON_REAL)
        moment = start
        while moment <= start + timedelta(seconds=DEADLINE + PASS_S):
            if moment == start + timedelta(seconds=DEADLINE - 2 * PASS_S):
                _submit(kube, "train-1", moment - timedelta(seconds=30), ON_REAL)
            if moment == start + timedelta(seconds=DEADLINE):
                _delete(kube, "train-0")
            _pass(api, moment)
            moment += timedelta(seconds=PASS_S)
        assert _given_back(kube, "train-1"), HELD
    finally:
        kube.close()

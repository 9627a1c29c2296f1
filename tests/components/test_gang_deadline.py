"""Half-delivered gangs cost bounded money: the gang-deadline CronJob suspends the job of a gang
that waited past the deadline of the pools it may land on while it holds idle nodes (so the
autoscaler, which packs pending pods onto idle nodes before it looks for unneeded ones, can remove
them), resumes it later, and has only the rights that takes."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta

import gang_deadline
import pytest

from components import gang_deadline as component
from components.cpu_nodes import SYSTEM_LABELS
from infra.core.names import GAVE_BACK_ANNOTATION, KUBEFLOW_JOB_KINDS, PREVIEW_GROUP, WAITING_SINCE_ANNOTATION
from infra.offline import cold_start, kubernetes_schema
from tests.conftest import STACKS, plan_of
from tests.fake_kube_api import FakeKubernetesApi

NOW = datetime(2027, 1, 5, 12, 0, tzinfo=UTC)
DEADLINE = 1800.0


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(
    name: str, age_s: float, node: str | None = None, pool: str | None = "h100", affinity: list[dict] | None = None
) -> dict:
    """A member of the gang pg-train; `pool` goes in its nodeSelector (None: no selector) and
    `affinity`, when given, is its required node affinity's nodeSelectorTerms."""
    return {
        "metadata": {
            "name": name,
            "namespace": "llm",
            "creationTimestamp": _iso(NOW - timedelta(seconds=age_s)),
            "annotations": {"scheduling.k8s.io/group-name": "pg-train"},
        },
        "spec": {
            **({"nodeSelector": {"higgsfield.io/pool": pool}} if pool else {}),
            **(
                {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity}
                        }
                    }
                }
                if affinity is not None
                else {}
            ),
            **({"nodeName": node} if node else {}),
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
    }


def _pool_is(operator: str, *pools: str) -> dict:
    """A nodeSelectorTerm with one requirement on the pool label."""
    return {"matchExpressions": [{"key": "higgsfield.io/pool", "operator": operator, "values": list(pools)}]}


def _podgroup(phase: str = "Inqueue") -> dict:
    return {
        "metadata": {
            "name": "pg-train",
            "namespace": "llm",
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train"}],
        },
        "status": {"phase": phase},
    }


def _node(name: str, pool: str, zone: str = "us-east-2a") -> dict:
    return {"metadata": {"name": name, "labels": {"higgsfield.io/pool": pool, "topology.kubernetes.io/zone": zone}}}


IDLE_NODE = _node("ip-10-0-0-1", "h100")
TRAIN_JOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "train", "namespace": "llm"}}


def train_job() -> dict:
    """The PyTorchJob that owns pg-train, as stored (no suspension yet)."""
    return {**copy.deepcopy(TRAIN_JOB), "spec": {"runPolicy": {}}}


LONGER_DEADLINE = 2 * DEADLINE  # the a100 pool's, in the tests that have two pools
TWO_POOLS = {"h100": DEADLINE, "a100": LONGER_DEADLINE}


def _waiting_job(since: datetime, kind: str = "PyTorchJob", name: str = "train") -> dict:
    """The gang's job, its clock started at `since` (the pass that first saw the gang beside an idle node)."""
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": "llm", "annotations": {gang_deadline.WAITING_SINCE: _iso(since)}},
        "spec": {"runPolicy": {}},
    }


def _decide(pods, nodes=(IDLE_NODE,), podgroups=None, jobs=None, deadlines=None):
    """decide() on the gang pg-train of job train; its clock, unless `jobs` are given, started when its
    oldest pod was made."""
    if jobs is None:
        created = [datetime.fromisoformat(p["metadata"]["creationTimestamp"].replace("Z", "+00:00")) for p in pods]
        jobs = [_waiting_job(min(created))] if created else []
    return gang_deadline.decide(
        podgroups or [_podgroup()], list(pods), list(nodes), list(jobs), deadlines or {"h100": DEADLINE}, 1800, NOW
    )


def deadline_map(pool: str = "h100", deadline: float = DEADLINE, empty: float | None = None, name: str = "d") -> dict:
    """A pool's ConfigMap as components/gang_deadline.py deadline_config_map makes it: its deadline and, where
    given, how long it keeps an empty node."""
    data = {"pool": pool, "deadlineSeconds": str(int(deadline))}
    if empty is not None:
        data["emptySeconds"] = str(int(empty))
    meta = {"name": name, "namespace": component.NAMESPACE, "labels": {component.DEADLINE_LABEL: "true"}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def test_a_gang_past_its_deadline_with_idle_nodes_is_suspended():
    (action,) = _decide([_pod("train-master-0", DEADLINE + 60), _pod("train-worker-0", DEADLINE + 60)])
    assert (action.verb, action.namespace, action.kind, action.name) == ("suspend", "llm", "PyTorchJob", "train")


def _launcher(age_s: float, node: str | None = None) -> dict:
    """The gang's MPI launcher: no GPU, on the teams' CPU nodes (infra/offline/pods.py on_team_cpu_nodes)."""
    pod = _pod("train-launcher", age_s, node=node, pool=None)
    pod["spec"]["nodeSelector"] = {gang_deadline.TEAM_CPU_LABEL: "true"}
    pod["spec"]["containers"] = [{"resources": {"requests": {"cpu": "500m"}}}]
    return pod


def test_a_launcher_on_the_teams_cpu_nodes_lands_on_no_gpu_pool_so_its_gang_keeps_its_workers_deadline():
    """A selector on a label no GPU pool's node carries: the launcher would otherwise seem to land on every pool, and
    the gang would take the longest deadline of all (a100's) for h100's idle nodes."""
    pods = [_launcher(DEADLINE + 60), _pod("train-worker-0", DEADLINE + 60)]
    (action,) = _decide(pods, deadlines=TWO_POOLS)
    assert (action.verb, action.name) == ("suspend", "train")


def test_a_gang_short_of_its_minimum_with_only_its_launcher_running_is_given_back_past_the_deadline():
    """Its workers lost and made again beside an idle node of their pool, its launcher still running on a teams' CPU
    node (no pool's node, so none the gang holds by a running member): the gang waits for GPU nodes like one none
    of whose members is bound, and is given back at its pool's deadline."""
    pods = [_launcher(DEADLINE + 600, node="ip-10-0-9-9"), _pod("train-worker-0", DEADLINE + 60)]
    (action,) = _decide(pods, podgroups=[_podgroup("Unknown")])
    assert (action.verb, action.name) == ("suspend", "train")


@pytest.mark.parametrize(
    "term",
    [
        _pool_is("In", "h100"),
        _pool_is("NotIn", "a100"),
        {"matchExpressions": [{"key": "higgsfield.io/pool", "operator": "Exists"}]},
    ],
    ids=["In", "NotIn", "Exists"],
)
def test_a_gang_placed_on_its_pool_by_node_affinity_is_suspended_past_the_deadline(term):
    """Tenancy admits a pool chosen by required node affinity as well as by nodeSelector; either
    way the gang's pending pods hold the idle nodes the autoscaler bought for it."""
    pods = [_pod(f"train-worker-{i}", LONGER_DEADLINE + 60, pool=None, affinity=[term]) for i in range(2)]
    (action,) = _decide(pods, nodes=[IDLE_NODE, _node("ip-10-0-0-9", "a100")], deadlines=TWO_POOLS)
    assert (action.verb, action.name) == ("suspend", "train")


def test_a_gang_that_names_no_pool_is_suspended_past_the_deadline():
    """A pod with no pool constraint may land on any pool: it is no way out of the deadline."""
    (action,) = _decide([_pod("train-master-0", DEADLINE + 60, pool=None)])
    assert (action.verb, action.name) == ("suspend", "train")


def test_a_gang_that_may_use_two_pools_waits_for_the_longer_deadline():
    """Terms are ORed: the gang may land on either pool and is never cut short by the shorter
    pool's deadline; past the longer one it gives back the node it holds."""
    nodes = [IDLE_NODE]

    def gang(age_s: float) -> list[dict]:
        return [_pod("train-master-0", age_s, pool=None, affinity=[_pool_is("In", "h100"), _pool_is("In", "a100")])]

    assert _decide(gang(DEADLINE + 60), nodes=nodes, deadlines=TWO_POOLS) == []
    (action,) = _decide(gang(LONGER_DEADLINE + 60), nodes=nodes, deadlines=TWO_POOLS)
    assert action.verb == "suspend"


def test_a_gang_that_can_land_on_no_node_holds_none_and_is_left_alone():
    """nodeSelector and node affinity must both hold: pool h100 AND pool a100 is no node. Such a
    gang never runs, but it holds nothing either (the autoscaler packs a pending pod only onto a
    node the scheduler's filters pass, and buys none for it), so suspending it would give back
    nothing and only churn it every retryAfterSeconds; it stays for its team to fix."""
    pods = [_pod("train-master-0", 99999, pool="h100", affinity=[_pool_is("In", "a100")])]
    nodes = [IDLE_NODE, _node("ip-10-0-0-9", "a100")]
    assert _decide(pods, nodes=nodes, deadlines=TWO_POOLS) == []


def test_a_gang_with_a_pod_that_can_land_nowhere_still_gives_back_its_other_pods_nodes():
    """One impossible member keeps the gang from ever running while the others hold the nodes
    bought for them: adding such a pod is no way out of the deadline."""
    master = _pod("train-master-0", DEADLINE + 60, pool="a100", affinity=[_pool_is("In", "h100")])
    worker = _pod("train-worker-0", DEADLINE + 60, pool=None, affinity=[_pool_is("In", "h100")])
    (action,) = _decide([master, worker])
    assert action.verb == "suspend"


def test_an_idle_node_the_gang_cannot_use_is_not_its_to_give_back():
    """The gang asks zone us-east-2a; the pool's idle node is in us-east-2b. The autoscaler does not
    pack the gang's pods onto it, so it goes when unneeded whatever the gang does."""
    zone_a = {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-2a"]}]}
    pods = [_pod("train-master-0", DEADLINE + 60, affinity=[zone_a])]
    assert _decide(pods, nodes=[_node("ip-10-0-0-1", "h100", zone="us-east-2b")]) == []


def test_a_gangs_clock_starts_on_the_pass_that_first_sees_it_beside_an_idle_node():
    """Not when its pods were made: a gang that waited out a capacity shortage held nothing meanwhile."""
    pods = [_pod("train-master-0", 3 * 3600)]
    job = _waiting_job(NOW)
    del job["metadata"]["annotations"]
    (mark,) = gang_deadline.clock_actions([_podgroup()], pods, [IDLE_NODE], [job], {"h100": DEADLINE})
    assert (mark.verb, mark.kind, mark.name) == ("mark", "PyTorchJob", "train")
    assert gang_deadline.patch_for(mark, NOW) == {"metadata": {"annotations": {gang_deadline.WAITING_SINCE: _iso(NOW)}}}
    assert _decide(pods, jobs=[job]) == []


def test_a_gang_without_an_idle_node_starts_no_clock():
    job = _waiting_job(NOW)
    del job["metadata"]["annotations"]
    assert (
        gang_deadline.clock_actions([_podgroup()], [_pod("train-master-0", 3 * 3600)], [], [job], {"h100": DEADLINE})
        == []
    )


def test_a_gang_within_its_deadline_keeps_waiting_for_its_nodes():
    assert _decide([_pod("train-master-0", DEADLINE - 60)]) == []


def test_a_gang_on_a_pool_without_idle_nodes_costs_nothing_and_is_left_queued():
    busy = _pod("other-0", 99999, node="ip-10-0-0-1")
    busy["metadata"]["annotations"] = {}
    assert _decide([_pod("train-master-0", DEADLINE + 60), busy]) == []


def test_a_node_held_by_another_teams_pod_without_a_gpu_is_not_idle():
    """A pod that asks no GPU (CPU, memory, EFA) still holds its node: the gangs waiting for that
    pool keep waiting instead of being suspended for nodes that are in use (issue 34)."""
    hog = _pod("hog-0", 99999, node="ip-10-0-0-1")
    hog["metadata"].update(namespace="vision", annotations={})
    hog["spec"]["containers"] = [{"resources": {"requests": {"cpu": "188", "vpc.amazonaws.com/efa": "32"}}}]
    assert _decide([_pod("train-master-0", DEADLINE + 60), hog]) == []


def test_a_node_with_only_the_platforms_daemonset_agents_is_idle():
    agent = _pod("node-exporter-x", 99999, node="ip-10-0-0-1")
    agent["metadata"].update(namespace="monitoring", annotations={}, ownerReferences=[{"kind": "DaemonSet"}])
    agent["spec"]["containers"] = [{"resources": {"requests": {"cpu": "100m"}}}]
    (action,) = _decide([_pod("train-master-0", DEADLINE + 60), agent])
    assert action.verb == "suspend"


def test_a_bound_gang_is_never_touched():
    assert _decide([_pod("train-master-0", DEADLINE + 60, node="ip-10-0-0-2")]) == []


@pytest.mark.parametrize("phase", ["Pending", "Running"])
def test_only_inqueue_kubeflow_gangs_count(phase):
    assert _decide([_pod("train-master-0", DEADLINE + 60)], podgroups=[_podgroup(phase)]) == []


def test_a_job_we_suspended_is_resumed_after_the_autoscalers_backoff():
    job = {
        "kind": "PyTorchJob",
        "metadata": {
            "name": "train",
            "namespace": "llm",
            "annotations": {gang_deadline.GAVE_BACK: _iso(NOW - timedelta(seconds=1801))},
        },
        "spec": {"runPolicy": {"suspend": True}},
    }
    (action,) = _decide([], jobs=[job])
    assert action.verb == "resume"
    assert gang_deadline.patch_for(action, NOW) == {
        "metadata": {"annotations": {gang_deadline.GAVE_BACK: None}},
        "spec": {"runPolicy": {"suspend": False}},
    }


def test_a_job_someone_else_suspended_is_never_resumed():
    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": "train", "namespace": "llm"},
        "spec": {"runPolicy": {"suspend": True}},
    }
    assert _decide([], jobs=[job]) == []


def test_suspending_sets_the_operators_suspend_and_records_when():
    """runPolicy.suspend makes the operator delete the job's pods (IsJobSuspended ->
    CleanUpResources, kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4)."""
    patch = gang_deadline.patch_for(gang_deadline.Action("suspend", "llm", "PyTorchJob", "train", ""), NOW)
    assert patch == {
        "metadata": {
            "annotations": {gang_deadline.GAVE_BACK: "2027-01-05T12:00:00Z", gang_deadline.WAITING_SINCE: None}
        },
        "spec": {"runPolicy": {"suspend": True}},
    }


def test_a_plain_jobs_gang_is_suspended_and_resumed_by_the_jobs_own_suspend():
    """A batch Job's suspend is spec.suspend: the Job controller deletes its active pods (syncJob's
    jobSuspended branch, kubernetes/kubernetes:pkg/controller/job/job_controller.go)."""
    suspend = gang_deadline.Action("suspend", "llm", "Job", "eval", "")
    assert gang_deadline.patch_for(suspend, NOW)["spec"] == {"suspend": True}
    assert gang_deadline.job_path(suspend) == "/apis/batch/v1/namespaces/llm/jobs/eval"
    job = {
        "kind": "Job",
        "metadata": {
            "name": "eval",
            "namespace": "llm",
            "annotations": {gang_deadline.GAVE_BACK: "2027-01-05T11:00:00Z"},
        },
        "spec": {"suspend": True},
    }
    (resume,) = _decide([], jobs=[job])
    assert gang_deadline.patch_for(resume, NOW)["spec"] == {"suspend": False}


def test_the_cronjob_writes_the_annotations_the_team_policy_keeps():
    assert (gang_deadline.GAVE_BACK, gang_deadline.WAITING_SINCE) == (GAVE_BACK_ANNOTATION, WAITING_SINCE_ANNOTATION)


def test_a_gang_whose_only_placed_member_has_finished_is_still_waiting():
    finished = _pod("train-worker-3", DEADLINE + 600, node="ip-10-0-0-7")
    finished["status"] = {"phase": "Failed"}
    (action,) = _decide([finished, _pod("train-master-0", DEADLINE + 60)])
    assert action.verb == "suspend"


def test_a_gang_whose_members_have_all_finished_is_left_alone():
    finished = _pod("train-master-0", DEADLINE + 600)
    finished["status"] = {"phase": "Succeeded"}
    assert _decide([finished]) == []


def _seed_gang(kube: FakeKubernetesApi, namespace: str, owner: dict) -> None:
    """A gang of two waiting pods past the deadline, owned by `owner` (a job, seeded too, its clock started
    when they were made)."""
    owner = copy.deepcopy(owner)
    owner["metadata"]["annotations"] = {gang_deadline.WAITING_SINCE: _iso(NOW - timedelta(seconds=DEADLINE + 60))}
    kube.put(owner)
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"]}
    pg = _podgroup()
    pg.update(apiVersion="scheduling.volcano.sh/v1beta1", kind="PodGroup")
    pg["metadata"].update(namespace=namespace, ownerReferences=[ref])
    kube.put(pg)
    for i in range(2):
        pod = _pod(f"{owner['metadata']['name']}-{i}", DEADLINE + 60)
        pod.update(apiVersion="v1", kind="Pod")
        pod["metadata"]["namespace"] = namespace
        pod["metadata"]["name"] = f"{namespace}-{i}"
        kube.put(pod)


def test_a_refused_suspension_is_reported_and_the_other_gangs_are_still_given_back():
    """Against the fake API server over HTTP: one team's admission refuses the patch of its job (an
    old job its policy no longer admits), the other team's batch Job is still suspended, and the pass
    fails so the CronJob's failed runs show it."""

    def admit(verb: str, obj: dict, old: dict | None) -> tuple[int, str, str] | None:
        if obj["metadata"]["namespace"] == "llm":
            return 403, "Forbidden", "denied by higgsfield-team-llm"
        return None

    kube = FakeKubernetesApi(admit=admit)
    try:
        _seed_gang(kube, "llm", train_job())
        evaluation = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "eval", "namespace": "vision"}}
        evaluation["spec"] = {"parallelism": 2}
        _seed_gang(kube, "vision", evaluation)
        kube.put({"apiVersion": "v1", "kind": "Node", **IDLE_NODE})
        kube.put(deadline_map())
        settings = component.settings_of(["llm", "vision"])
        api = gang_deadline.Api(kube.url, "token")
        assert gang_deadline.run(api, settings, component.NAMESPACE, NOW) == 1
        assert kube.get("/apis/batch/v1/namespaces/vision/jobs/eval")["spec"]["suspend"] is True
        assert "suspend" not in kube.get("/apis/kubeflow.org/v1/namespaces/llm/pytorchjobs/train")["spec"]["runPolicy"]
    finally:
        kube.close()


def _objects(plan, kind: str) -> list[dict]:
    return [
        r.inputs for r in plan.resources if r.inputs.get("kind") == kind and r.name.startswith("teams-gang-deadline")
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_the_cronjob_carries_each_pools_deadline_the_timeline_states(stack):
    plan = plan_of(stack)
    (cron,) = _objects(plan, "CronJob")
    env = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    settings = json.loads(next(e["value"] for e in env if e["name"] == "GANG_DEADLINE_SETTINGS"))
    maps = [
        m
        for m in _objects(plan, "ConfigMap")
        if (m["metadata"].get("labels") or {}).get(settings["deadlineLabel"]) == "true"
    ]
    deadlines = {m["data"]["pool"]: float(m["data"]["deadlineSeconds"]) for m in maps}
    assert deadlines == {p.name: cold_start.give_back(p, None).deadline_s for p in plan.config.gpu_pools}
    assert set(settings["namespaces"]) == {t.name for t in plan.config.scheduler.teams}


def test_the_cronjob_is_a_valid_kubernetes_object_that_runs_restricted_on_the_system_nodes():
    (cron,) = _objects(plan_of("prod"), "CronJob")
    manifest = copy.deepcopy(cron)
    spec = manifest["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    spec["containers"][0]["image"] = "123456789012.dkr.ecr.us-east-2.amazonaws.com/x:src-1"
    kubernetes_schema.validate(manifest, "1.35")
    assert spec["nodeSelector"] == SYSTEM_LABELS and spec["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("stack", STACKS)
def test_the_cronjob_may_only_list_and_patch_jobs_in_team_namespaces_list_nodes_and_keep_its_team_clocks(stack):
    plan = plan_of(stack)
    (cluster_role,) = _objects(plan, "ClusterRole")
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}]
    ours = [r for r in _objects(plan, "Role") if r["metadata"]["name"] != PREVIEW_GROUP]  # CI's, not the CronJob's
    roles = [r for r in ours if r["metadata"]["namespace"] != component.NAMESPACE]
    (own,) = [r for r in ours if r["metadata"]["namespace"] == component.NAMESPACE]
    assert own["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [component.TEAM_CLOCKS],
            "verbs": ["get", "update"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},  # create names no object (rbac.md)
    ]
    assert {r["metadata"]["namespace"] for r in roles} == {t.name for t in plan.config.scheduler.teams}
    for role in roles:
        verbs = {
            (g, res): set(rule["verbs"])
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for res in rule["resources"]
        }
        assert all(v <= {"list", "patch"} for v in verbs.values())
        assert {k for k, v in verbs.items() if "patch" in v} == {
            ("kubeflow.org", r) for r in KUBEFLOW_JOB_KINDS.values()
        } | {("batch", "jobs")}
        assert not any(res in ("secrets", "pods/exec", "*") for _, res in verbs)


def test_the_gang_deadline_knows_the_teams_cpu_nodes_by_the_programs_label():
    """The CronJob's script imports nothing of the program: its copy of the label must be the program's, or a
    launcher selecting the CPU nodes would seem to land on every pool."""
    from infra.core.names import POOL_LABEL, TEAM_CPU_LABEL

    assert (gang_deadline.TEAM_CPU_LABEL, gang_deadline.POOL_LABEL) == (TEAM_CPU_LABEL, POOL_LABEL)

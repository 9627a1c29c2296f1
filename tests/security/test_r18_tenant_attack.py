"""Round 18's tenant attacker on the elastic room (issue 34, point 3: signals no tenant can forge).

The room an elastic job grows into (components/workloads.py ELASTIC_ROOM_QUERY) subtracts from a pool's GPUs
those its pods request, as kube-state-metrics exports them: `kube_pod_container_resource_requests`, one series
per container of `spec.containers` of every pod KSM lists, whatever its phase
(createPodContainerResourceRequestsFamilyGenerator, kubernetes/kube-state-metrics:internal/store/pod.go, the same
at v2.8.2, v2.17.0 and v2.20.0). So what a team's pods make of that series moves every team's room in the pool:

- a finished pod (Succeeded or Failed) keeps its `nodeName` and its series while it exists, and holds no GPU
  (neither Volcano nor the kubelet counts a terminated pod); a team's finished jobs leave them on nodes other
  teams now use (cleanPodPolicy Running keeps finished pods), and a Job of 1-GPU pods that exit at once, with
  as many completions as it likes (the `pods` quota counts no terminated pod), marks each node it touched full:
  every elastic job of the pool stops growing, at no cost to that team;
- GPUs a sidecar or an init container asks are in no such series (`kube_pod_init_container_resource_requests` is
  another), so a team's serving replica holding 8 GPUs in a sidecar made 8 free GPUs for every elastic job of the
  pool, which grew into them, pending, and had nodes bought: the team policy now refuses GPUs, EFA and huge pages
  in every init container of a team's pods (evaluated with cel-expr-python, as tests/security/test_tenancy.py).

Beside those, the policy's bare-pod rule read a pod's CREATE alone, and the gang deadline's team clock counted a
team's CPU pod as using a GPU node bought for its gangs (the CronJob run against tests/fake_kube_api.py).

Each is evaluated through Prometheus' own engine (`promtool test rules`, as tests/components/test_forged_signals.py).
"""

from __future__ import annotations

import copy
import shutil
from datetime import datetime, timedelta

import pytest

from components.cpu_nodes import ON_TEAM_CPU_NODES
from infra.core.names import LONGEST_POD_DEADLINE, POOL_LABEL
from tests.components.test_forged_signals import CLEAN, KSM, _room
from tests.components.test_gang_deadline import NOW, _iso
from tests.components.test_gang_deadline_pause import IDLE_NODE
from tests.promql import held, promtool_test
from tests.security.test_node_share import GPU_TOLERATION, NO_GPU
from tests.security.test_plain_gpu_demand import RULES, _deployment
from tests.security.test_r9_pause_attack import _resumed_after_its_nodes_empty_time
from tests.security.test_r17_clock_attack import HELD, _replacement_given_back
from tests.security.test_tenancy import _pod, denied_by

# 16 + 16 free GPUs of the pool over the 16 queue `research` holds (test_forged_signals.py CLEAN)
CLEAN_ROOM = 2


def _room_is(series: list[tuple[str, str]], room: float, tmp_path) -> None:
    case = {"expr": _room("research", "h100"), "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": room}]}
    result = promtool_test(tmp_path, held(series), [case])
    assert result.returncode == 0, result.stdout + result.stderr


def _finished_pods(phase: str, count: int) -> list[tuple[str, str]]:
    """`count` finished 1-GPU pods of team vision on node n2, each as KSM exports it (its request and its phase)."""
    series = []
    for i in range(count):
        pod = f'namespace="vision",pod="done-{i}",uid="u-done-{i}"'
        series.append((f'kube_pod_container_resource_requests{{{KSM},{pod},resource="nvidia_com_gpu",node="n2"}}', "1"))
        series += [
            (f'kube_pod_status_phase{{{KSM},{pod},phase="{p}"}}', "1" if p == phase else "0")
            for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown")
        ]
    return series


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed here")
@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_teams_finished_pods_take_no_room_from_the_pools_elastic_jobs(phase, tmp_path):
    """Eight finished 1-GPU pods left on node n2 hold nothing: the pool still has 16 GPUs nobody requests."""
    _room_is(CLEAN + _finished_pods(phase, 8), CLEAN_ROOM, tmp_path)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed here")
def test_a_pending_or_running_pod_still_takes_its_gpus_from_the_room(tmp_path):
    """The control: the same eight pods still running hold n2's 8 GPUs, (16 + 8) / 16."""
    _room_is(CLEAN + _finished_pods("Running", 8), 1.5, tmp_path)


# --- GPUs where the room does not look --------------------------------------------------------------------------

INIT_GPUS = "no init container, sidecars included, asks for"


def _serving_gpus_in(where: str) -> dict:
    """Team llm's serving Deployment of one 8-GPU replica (its plain-gpu quota counts it), its GPUs in a sidecar,
    an init container, or (the control) its container."""
    deployment = _deployment("serving", replicas=1)
    spec = deployment["spec"]["template"]["spec"]
    main = spec["containers"][0]
    if where != "container":
        held = {**copy.deepcopy(main), "name": "held"}
        if where == "sidecar":
            held["restartPolicy"] = "Always"
        main["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
        spec["initContainers"] = [held]
    return deployment


@pytest.mark.parametrize("where", ["sidecar", "init-container"])
def test_a_plain_workloads_gpus_in_an_init_container_are_denied(where):
    """Attack: the room subtracts kube_pod_container_resource_requests, spec.containers alone; 8 GPUs held by a
    sidecar (or by an init container: the pod holds them for its life) were 8 free GPUs to every team's elastic
    job in the pool, which grew into them, pending, and had nodes bought for the growth."""
    assert any(m.startswith(INIT_GPUS) for m in denied_by(_serving_gpus_in(where), RULES))


def test_the_same_gpus_in_its_container_are_admitted():
    assert denied_by(_serving_gpus_in("container"), RULES) == []


# --- a bare pod onto a GPU node by an UPDATE -------------------------------------------------------------------

BARE = "a pod on a GPU node is made by a controller"


def _bare_pod(tolerations: list[dict] | None = None) -> dict:
    """Alice's own pod (no owner): 100m CPU, Volcano's, selecting a GPU pool; without the GPU taint tolerated it
    lands nowhere (no CPU node has the pool label) and is no GPU pod."""
    pod = _pod(containers=NO_GPU, nodeSelector={POOL_LABEL: "h100"})
    del pod["metadata"]["ownerReferences"]
    if tolerations:
        pod["spec"]["tolerations"] = tolerations
    return pod


def test_a_bare_pod_tolerating_the_gpu_taint_by_an_update_is_denied():
    """Attack: the API server lets a pod's UPDATE add tolerations ("Allow only additions to tolerations updates",
    ValidatePodUpdate, kubernetes/kubernetes:pkg/apis/core/validation/validation.go, read through the code search),
    and the bare-pod rule read CREATE alone. The pending pod, once it tolerates the GPU taint, is placed on a GPU
    node (or has one bought: the autoscaler packs pending pods that tolerate it), and the Cluster Autoscaler never
    drains a node under a pod no controller owns (the `replicated` rule): 100m CPU kept a GPU node for good."""
    pending = _bare_pod()
    assert denied_by(pending) == []  # the control: a CPU pod, no GPU node reachable
    gpu = _bare_pod(GPU_TOLERATION)
    assert any(m.startswith(BARE) for m in denied_by(gpu))  # created so, it is denied
    assert any(m.startswith(BARE) for m in denied_by(gpu, operation="UPDATE", old=pending))


def test_a_controllers_pod_may_still_gain_the_teams_cpu_nodes_toleration():
    """What the rule leaves: a pod its controller owns may tolerate the teams' CPU nodes' taint, as its template may."""
    pending = _pod(
        containers=NO_GPU,
        nodeSelector=dict(ON_TEAM_CPU_NODES["nodeSelector"]),
        activeDeadlineSeconds=LONGEST_POD_DEADLINE,
    )
    placed = {**pending, "spec": {**pending["spec"], "tolerations": ON_TEAM_CPU_NODES["tolerations"]}}
    assert denied_by(placed, operation="UPDATE", old=pending, user="alice@vision") == []


def test_a_controllers_pod_without_gpus_gaining_the_gpu_toleration_is_denied():
    """Nor does a pod without GPUs reach a GPU node by an UPDATE: it runs on the teams' CPU nodes only."""
    pending = _pod(containers=NO_GPU, nodeSelector={POOL_LABEL: "h100"}, activeDeadlineSeconds=LONGEST_POD_DEADLINE)
    gpu = {**pending, "spec": {**pending["spec"], "tolerations": GPU_TOLERATION}}
    denied = denied_by(gpu, operation="UPDATE", old=pending, user="alice@vision")
    assert any(m.startswith("a pod without GPUs runs on the teams' CPU nodes") for m in denied), denied


# --- a CPU pod beside the decoy ends the team's clock -----------------------------------------------------------


def _filler(node: str, at: datetime) -> dict:
    """Team llm's CPU pod (a Job's: all of its CPU-only quota, the GPU taint tolerated and its deadline set, as the
    team policy admits), bound to `node`."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "filler", "uid": "u-job", "controller": True}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "filler", "namespace": "llm", "creationTimestamp": _iso(at), "ownerReferences": [owner]},
        "spec": {
            "nodeName": node,
            "activeDeadlineSeconds": LONGEST_POD_DEADLINE,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "16"}}}],
        },
        "status": {"phase": "Running"},
    }


def test_a_cpu_pod_on_the_other_bought_node_while_the_decoy_runs_does_not_restart_the_teams_clock():
    """Attack beside round 17's decoy: team llm's gang waits beside two idle h100 nodes bought for it; its one-pod
    decoy binds to one (asking its node's whole share, so nothing else fits there), and in the same minute a CPU pod
    of the team's (a Job's, 16 vCPUs) lands on the other. At the pass that sees the decoy run no
    node bought since the team's clock started is idle, so the clock ends; the team deletes the CPU pod and replaces
    its waiting gang, which starts a fresh clock beside the same two nodes, now idle again. The decoy cost one pod
    on one node, not gangs running on every node bought for the team (docs/design/tenancy.md, "Still open"). A node
    on which no pod holds a GPU is not used as it was bought: the clock goes on, and the replacement is given back
    within the first gang's deadline and one pass."""
    bought = NOW - timedelta(hours=2, seconds=30)
    assert _replacement_given_back(bought, beside=lambda at: _filler("bought-0", at)), HELD


def test_a_cpu_pod_on_the_bought_node_through_a_pause_does_not_take_the_paused_gangs_clock_off():
    """Attack beside round 9's: the team pauses its gang, which waited 20 of its 30 minutes beside an idle h100 node
    bought for it, and puts a CPU pod of its own (a Job's) on that node for the pause. The pause outlasts the
    pool's emptySeconds with no idle node made between the job and its pause left, so the clock came off; the team
    deletes the CPU pod and resumes, and the gang, beside the same node, starts a fresh clock. The node's GPUs were
    never used: the clock stays, and the resumed gang is given back at the next pass."""
    assert _resumed_after_its_nodes_empty_time(beside=lambda at: _filler(IDLE_NODE["metadata"]["name"], at))

"""A node of a running gang is lost (a hardware failure, a spot reclaim no drain came before): what the user
sees, played with the real programs. The ranks left on the other nodes are torn down by NCCL's watchdog and
their pods must end with a retryable code, so the operator recreates them and the job resumes from its
newest complete checkpoint; while no replacement node comes, the nodes of the survivors stand idle, and the
gang deadline gives them back within a bound, and queues the job again, which runs once capacity returns.

The cluster's controllers are played by hand, each step as the pinned upstream does it:
- the lost node's pod: the taint manager deletes it once its `unreachable` toleration (60 s in the rendered
  jobs) runs out, and with no kubelet to confirm it stays Terminating, phase Running, on its node, until
  the Node object goes ("Delete Pods", kubernetes/website:content/en/docs/tasks/run-application/
  force-delete-stateful-set-pod.md) and the pod garbage collector force-deletes it (gcOrphaned, kubernetes/
  kubernetes:pkg/controller/podgc/gc_controller.go; both read through the code search);
- the operator: a Failed pod with a retryable exit code is deleted and a pod is created for every replica
  index that has none (ReconcilePods, kubeflow/trainer:pkg/controller.v1/common/pod.go@v1.9.4); an index
  whose pod is still Terminating has one, so it is not recreated until that pod is gone;
- Volcano: a task being deleted is Releasing, neither scheduled nor ready (getTaskStatus, volcano-sh/
  volcano:pkg/scheduler/api/helpers.go@v1.15.1), so a gang with fewer than minMember scheduled goes
  Pending and `enqueue` makes it Inqueue again as soon as its queue has room for it (getPodGroupPhase,
  pkg/scheduler/framework/session.go; actions/enqueue/enqueue.go, same ref); while some members still
  run, the gang plugin marks it unschedulable each session (OnSessionClose, plugins/gang/gang.go) and its
  phase is Unknown; `allocate` binds the waiting members only together with enough others to make
  minMember (JobReady), so three recreated pods never bind without a fourth node.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta

import gang_deadline
import job_watchdog
import pytest

from components import gang_deadline as component
from infra.core.names import GANG_RETRY_AFTER_S
from tests.components import test_gang_deadline as plain
from tests.components.test_gang_deadline import deadline_map
from tests.conftest import ROOT
from tests.fake_kube_api import FakeKubernetesApi

sys.path.insert(0, str(ROOT / "examples"))
import checkpointing

# --- the survivors' exit code ----------------------------------------------------------------------------


def _pod_exit_when_a_worker(tmp_path, worker: str) -> int:
    """The rendered container's exit code (checkpointing.py's launcher in front of torchrun) when one local
    worker (`python checkpointing.py --rank-prefix python -c WORKER`, the rendered worker command) ends
    as `worker` makes it, and torchrun, as it does whenever a worker fails, then exits 1."""
    torchrun = tmp_path / "torchrun.py"
    torchrun.write_text(
        textwrap.dedent(f"""
        import os, subprocess, sys
        worker = [sys.executable, {str(ROOT / "examples" / "checkpointing.py")!r}, "--rank-prefix",
                  sys.executable, "-c", {worker!r}]
        subprocess.run(worker, env={{**os.environ, "LOCAL_RANK": "0", "RANK": "0"}})
        sys.exit(1)
    """)
    )
    return checkpointing.launch([sys.executable, str(torchrun)])


def test_a_survivor_torn_down_by_nccls_watchdog_exits_with_a_code_the_operator_retries(tmp_path):
    """A lost node gives the other ranks no Python exception: their next collective waits on the GPU until
    NCCL's watchdog times it out (300 s, infra/offline/jobs.py COLLECTIVE_TIMEOUT_S) or sees the peer's
    connection fail, and with TORCH_NCCL_ASYNC_ERROR_HANDLING=3 it rethrows in its own thread, which ends the
    process with SIGABRT ("To avoid data inconsistency, we are taking the entire process down", WorkNCCL::
    handleException, and the watchdog thread's rethrow in ncclCommWatchdog: pytorch/pytorch:torch/csrc/
    distributed/c10d/ProcessGroupNCCL.cpp, read through the code search). The pod must exit 128 or more, or
    the operator fails the whole job (ReconcilePods, IsRetryableExitCode, kubeflow/trainer:pkg/util/train/
    train_util.go@v1.9.4) instead of resuming it."""
    code = _pod_exit_when_a_worker(tmp_path, "import os; os.abort()")
    assert code == checkpointing.EXIT_TORN_DOWN >= 128


def test_a_survivors_bug_still_fails_the_job(tmp_path):
    assert _pod_exit_when_a_worker(tmp_path, "raise SystemExit(1)") == 1


def test_a_worker_that_segfaults_still_fails_the_job(tmp_path):
    """Only NCCL's teardown is a retry: a crash of the program itself stays a failure."""
    assert _pod_exit_when_a_worker(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)") == 1


def test_the_worker_wrapper_still_passes_a_signalled_workers_code_on(tmp_path):
    script = [sys.executable, str(ROOT / "examples" / "checkpointing.py"), "--rank-prefix", sys.executable, "-c"]
    done = subprocess.run([*script, "import os; os.abort()"], capture_output=True, env={"LOCAL_RANK": "0"})
    assert done.returncode == 134


# --- the survivors' nodes while no replacement comes ---------------------------------------------------------

NOW = datetime(2027, 1, 5, 12, 0, tzinfo=UTC)
POOL, TEAM, JOB, GROUP = "h100", "llm", "train", "pg-train"
DEADLINE = 1920.0  # a p5 pool's: boot 420 s + the gate's 20 min + 300 s (components/gang_deadline.py)
LOST = NOW - timedelta(hours=3)  # when the node stopped answering
PASS_S = 60  # the CronJob's schedule (components/gang_deadline.py DEADLINE_CHECK_S)
REPLICAS = ("train-master-0", "train-worker-0", "train-worker-1", "train-worker-2")


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


class Cluster:
    """A PyTorchJob of four pods (minMember 4) that ran on four h100 nodes, in the fake API server, with the
    h100 pool's deadline; the operator's, Volcano's and the autoscaler's steps are methods, each doing what
    the module docstring cites, and `deadline_pass` is the CronJob's real pass over HTTP."""

    def __init__(self) -> None:
        self.kube = FakeKubernetesApi()
        self.api = gang_deadline.Api(self.kube.url, "token")
        self.settings = component.settings_of([TEAM])
        self.made = 0
        self.kube.put(deadline_map(POOL, DEADLINE))
        self.kube.put(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": JOB, "namespace": TEAM},
                "spec": {"runPolicy": {}},
            }
        )
        self.group("Running")
        for index, name in enumerate(REPLICAS):
            node = f"ip-10-0-1-{index + 1}"
            self.add_node(node)
            self.pod(name, node, "Running")

    def close(self) -> None:
        self.kube.close()

    # objects
    def add_node(self, name: str) -> None:
        labels = {"higgsfield.io/pool": POOL, "topology.kubernetes.io/zone": "us-east-2a"}
        self.kube.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})

    def group(self, phase: str) -> None:
        owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": JOB, "controller": True}
        self.kube.put(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": GROUP, "namespace": TEAM, "ownerReferences": [owner]},
                "spec": {"minMember": len(REPLICAS)},
                "status": {"phase": phase},
            }
        )

    def pod(self, name: str, node: str | None, phase: str) -> None:
        """A replica's pod as the operator makes it (the rendered template's pool and zone, 8 GPUs)."""
        self.made += 1
        self.kube.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": TEAM,
                    "uid": f"uid-{name}-{self.made}",
                    "labels": {job_watchdog.JOB_LABEL: JOB},
                    "annotations": {gang_deadline.GROUP_ANNOTATION: GROUP},
                    "ownerReferences": [
                        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": JOB, "controller": True}
                    ],
                },
                "spec": {
                    "nodeSelector": {"higgsfield.io/pool": POOL, "topology.kubernetes.io/zone": "us-east-2a"},
                    **({"nodeName": node} if node else {}),
                    "containers": [{"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                },
                "status": {"phase": phase},
            }
        )

    def pods(self) -> dict[str, dict]:
        return {o["metadata"]["name"]: o for k, o in self.kube.objects.items() if k[2] == "pods" and k[1] == TEAM}

    def job(self) -> dict:
        found = self.kube.get(f"/apis/kubeflow.org/v1/namespaces/{TEAM}/pytorchjobs/{JOB}")
        assert found is not None
        return found

    def suspended(self) -> bool:
        return self.job()["spec"]["runPolicy"].get("suspend") is True

    def clock(self) -> str | None:
        return (self.job()["metadata"].get("annotations") or {}).get(gang_deadline.WAITING_SINCE)

    # what happens
    def lose(self, node: str, at: datetime) -> None:
        """The node stops answering: the taint manager deletes its pod, which stays there, Terminating."""
        (name,) = [n for n, p in self.pods().items() if p["spec"].get("nodeName") == node]
        self.kube.objects[("api/v1", TEAM, "pods", name)]["metadata"]["deletionTimestamp"] = _stamp(at)
        self.group("Unknown")  # three running, one releasing: short of minMember

    def survivors_recreated(self) -> None:
        """The other ranks end 134 (NCCL's watchdog) and the operator deletes and recreates their pods,
        pending; the gang is Inqueue again (Pending, then admitted by its queue)."""
        for name, pod in self.pods().items():
            if not pod["metadata"].get("deletionTimestamp"):
                self.pod(name, None, "Pending")
        self.group("Inqueue")

    def node_gone(self, node: str) -> None:
        """The Node object is deleted (its instance terminated) and the pod garbage collector removes its pod;
        the operator makes that replica again, pending."""
        self.kube.delete_now(f"/api/v1/nodes/{node}")
        for name, pod in self.pods().items():
            if pod["spec"].get("nodeName") == node:
                self.kube.delete_now(f"/api/v1/namespaces/{TEAM}/pods/{name}")
                self.pod(name, None, "Pending")

    def operator(self) -> None:
        """A suspended job: its pods and PodGroup deleted; a resumed one: its PodGroup made again, Pending, admitted
        by its queue (Inqueue), then its pods (kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4)."""
        group = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{TEAM}/podgroups/{GROUP}"
        if self.suspended():
            for name, pod in self.pods().items():
                if not pod["metadata"].get("deletionTimestamp"):
                    self.kube.delete_now(f"/api/v1/namespaces/{TEAM}/pods/{name}")
            self.kube.delete_now(group)
        else:
            if self.kube.get(group) is None:
                self.group("Inqueue")
            for name in REPLICAS:  # every replica index without a pod
                if name not in self.pods():
                    self.pod(name, None, "Pending")

    def scale_down_idle(self) -> None:
        """The autoscaler removes the pool's nodes no pod holds (after scaleDownUnneededTime)."""
        held = {p["spec"].get("nodeName") for p in self.pods().values()}
        for key, obj in list(self.kube.objects.items()):
            if key[2] == "nodes" and obj["metadata"]["name"] not in held:
                self.kube.delete_now(f"/api/v1/nodes/{obj['metadata']['name']}")

    def capacity_returns(self) -> None:
        """Four new nodes; Volcano binds the whole gang, which runs."""
        for index, name in enumerate(REPLICAS):
            node = f"ip-10-0-2-{index + 1}"
            self.add_node(node)
            self.pod(name, node, "Running")
        self.group("Running")

    def deadline_pass(self, at: datetime) -> None:
        assert gang_deadline.run(self.api, self.settings, component.NAMESPACE, at) == 0
        self.operator()

    def passes(self, start: datetime, end: datetime) -> datetime | None:
        """The CronJob's passes from `start` to `end`, a minute apart; when the job was suspended, if it was."""
        at = start
        while at <= end:
            self.deadline_pass(at)
            if self.suspended():
                return at
            at += timedelta(seconds=PASS_S)
        return None


@pytest.fixture
def cluster():
    made = Cluster()
    yield made
    made.close()


def _lost_and_recreated(cluster: Cluster, node_gone: bool) -> datetime:
    """ip-10-0-1-4 is lost; its pod Terminating from 110 s on (the node controller's grace, then the 60 s
    toleration); the survivors torn down and recreated at 360 s (NCCL's 300 s timeout + teardown); with
    `node_gone` its instance is terminated and its Node object and pod removed too. Returns when the gang
    broke (the Terminating pod)."""
    broke = LOST + timedelta(seconds=110)
    cluster.lose("ip-10-0-1-4", broke)
    cluster.deadline_pass(broke)
    cluster.survivors_recreated()
    if node_gone:
        cluster.node_gone("ip-10-0-1-4")
    return broke


@pytest.mark.parametrize("node_gone", [False, True], ids=["node-lingers-unreachable", "instance-terminated"])
def test_the_survivors_idle_nodes_are_given_back_within_the_deadline_when_no_replacement_comes(cluster, node_gone):
    broke = _lost_and_recreated(cluster, node_gone)
    suspended_at = cluster.passes(LOST + timedelta(seconds=360), LOST + timedelta(hours=2))
    assert suspended_at is not None, "the three idle nodes are held until the job's activeDeadlineSeconds"
    assert (suspended_at - broke).total_seconds() <= DEADLINE + 2 * PASS_S
    cluster.scale_down_idle()  # the survivors' three nodes; a lost node that lingers is no node of theirs
    nodes = [n["metadata"]["name"] for k, n in cluster.kube.objects.items() if k[2] == "nodes"]
    assert nodes == ([] if node_gone else ["ip-10-0-1-4"])


def test_a_gang_given_back_after_losing_a_node_runs_again_once_capacity_returns(cluster):
    _lost_and_recreated(cluster, node_gone=True)
    suspended_at = cluster.passes(LOST + timedelta(seconds=360), LOST + timedelta(hours=2))
    assert suspended_at is not None
    cluster.scale_down_idle()
    retried = suspended_at + timedelta(seconds=GANG_RETRY_AFTER_S + PASS_S)
    cluster.deadline_pass(retried)
    assert not cluster.suspended() and set(cluster.pods()) == set(REPLICAS)  # queued again, its pods remade
    cluster.capacity_returns()
    cluster.deadline_pass(retried + timedelta(seconds=PASS_S))
    assert not cluster.suspended() and cluster.clock() is None
    assert all(p["status"]["phase"] == "Running" for p in cluster.pods().values())


def test_a_job_given_back_with_a_pod_on_a_lost_node_queues_again_only_once_that_pod_is_gone(cluster):
    """The lost node lingers (its instance hung): its pod stays Terminating, and the operator cannot make that
    replica again while it does, so a job queued again would buy its other nodes for a gang that cannot form, and
    hold them a deadline more, each retry. It waits for the pod to go (the Node object deleted: EKS auto-repair,
    or its team), then queues again."""
    _lost_and_recreated(cluster, node_gone=False)
    suspended_at = cluster.passes(LOST + timedelta(seconds=360), LOST + timedelta(hours=2))
    assert suspended_at is not None
    cluster.scale_down_idle()
    retried = suspended_at + timedelta(seconds=GANG_RETRY_AFTER_S + PASS_S)
    cluster.deadline_pass(retried)
    assert cluster.suspended()
    cluster.kube.delete_now("/api/v1/nodes/ip-10-0-1-4")
    cluster.kube.delete_now(f"/api/v1/namespaces/{TEAM}/pods/{REPLICAS[3]}")
    cluster.deadline_pass(retried + timedelta(seconds=PASS_S))
    assert not cluster.suspended()


def test_a_gang_whose_survivors_stay_bound_below_its_minimum_is_given_back_within_the_deadline(cluster):
    """Ranks that outlive their gang: an MPIJob's workers (sshd, they never exit), or a team's job whose ranks
    wait without a collective timeout and publish no progress for the watchdog. Volcano says Unknown: members
    run while the gang is short of minMember; their nodes do nothing."""
    broke = LOST + timedelta(seconds=110)
    cluster.lose("ip-10-0-1-4", broke)
    suspended_at = cluster.passes(broke, LOST + timedelta(hours=2))
    assert suspended_at is not None, "the three bound survivors hold their nodes until activeDeadlineSeconds"
    assert (suspended_at - broke).total_seconds() <= DEADLINE + 2 * PASS_S


def test_a_gang_whose_replacement_node_comes_within_the_deadline_keeps_its_nodes(cluster):
    broke = _lost_and_recreated(cluster, node_gone=True)
    arrived = broke + timedelta(seconds=DEADLINE - 300)  # boot and the gate took most of the deadline
    assert cluster.passes(LOST + timedelta(seconds=360), arrived) is None
    cluster.add_node("ip-10-0-2-1")
    for index, name in enumerate(REPLICAS):
        cluster.pod(name, f"ip-10-0-1-{index + 1}" if index < 3 else "ip-10-0-2-1", "Running")
    cluster.group("Running")
    assert (
        cluster.passes(arrived + timedelta(seconds=PASS_S), arrived + timedelta(seconds=2 * DEADLINE)) is None
    )  # past a whole deadline
    assert cluster.clock() is None


def test_survivors_that_hang_are_restarted_by_the_watchdog_and_their_nodes_still_given_back(cluster):
    """A job whose ranks publish progress but hang without a collective timeout: the watchdog deletes the quiet
    pods past its limit (max(10 x the step time, 15 min)); the lost node's pod publishes nothing (its target is
    gone, its series stale), so only the survivors are restarted, and the operator makes them again, pending."""
    broke = LOST + timedelta(seconds=110)
    cluster.lose("ip-10-0-1-4", broke)
    survivors = {n: p for n, p in cluster.pods().items() if not p["metadata"].get("deletionTimestamp")}
    series = {
        name: [
            {
                "metric": {
                    "namespace": TEAM,
                    "job_name": JOB,
                    "pod": n,
                    "pod_uid": p["metadata"]["uid"],
                    "Hostname": p["spec"]["nodeName"],
                    "rank": str(i),
                },
                "value": [0, str(value)],
            }
            for i, (n, p) in enumerate(sorted(survivors.items()))
        ]
        for name, value in (("at", LOST.timestamp()), ("step_s", 2.0), ("compute_s", 0.5))
    }
    answers = {job_watchdog.QUERIES[name]: vector for name, vector in series.items()}
    watchdog = job_watchdog.WatchdogApi(cluster.kube.url, lambda: "token")
    cluster.passes(broke, LOST + timedelta(seconds=900))
    restarted = LOST + timedelta(seconds=901)
    (line,) = job_watchdog.tick(
        watchdog, lambda expr: answers.get(expr, []), restarted.timestamp(), job_watchdog.Settings()
    )
    assert all(name in line for name in survivors) and REPLICAS[3] not in line
    assert set(cluster.pods()) == {REPLICAS[3]}  # the lost node's pod, still Terminating there
    cluster.survivors_recreated()  # Inqueue again, and the operator makes the three again: no node for all four
    cluster.operator()
    suspended_at = cluster.passes(restarted, LOST + timedelta(hours=2))
    assert suspended_at is not None and (suspended_at - broke).total_seconds() <= DEADLINE + 2 * PASS_S


# --- the same, one rule at a time (decide and clock_actions, pure) ---------------------------------------------


def _deleting(pod: dict) -> dict:
    pod["metadata"]["deletionTimestamp"] = _stamp(NOW - timedelta(hours=1))
    pod["status"] = {"phase": "Running"}
    return pod


def test_a_member_being_deleted_on_a_lost_node_does_not_make_a_waiting_gang_look_bound():
    lost = _deleting(plain._pod("train-worker-2", plain.DEADLINE + 600, node="ip-10-0-0-7"))
    (action,) = plain._decide([lost, plain._pod("train-master-0", plain.DEADLINE + 60)])
    assert (action.verb, action.name) == ("suspend", "train")


def test_a_gang_short_of_its_minimum_keeps_its_clock_while_its_survivors_run():
    """Its members are bound, as a gang that runs has them; Volcano's Unknown says it is not whole."""
    job = plain._waiting_job(NOW - timedelta(seconds=600))
    survivors = [plain._pod(f"train-worker-{i}", 3600, node=f"ip-10-0-0-{i + 2}") for i in range(3)]
    actions = gang_deadline.clock_actions([plain._podgroup("Unknown")], survivors, [], [job], {"h100": DEADLINE})
    assert actions == []


def test_a_gang_short_of_its_minimum_is_given_back_its_running_members_nodes_past_the_deadline():
    survivors = [plain._pod(f"train-worker-{i}", 3600, node=f"ip-10-0-0-{i + 2}") for i in range(3)]
    nodes = [plain._node(f"ip-10-0-0-{i + 2}", "h100") for i in range(3)]
    job = plain._waiting_job(NOW - timedelta(seconds=plain.DEADLINE + 60))
    (action,) = plain._decide(survivors, nodes=nodes, podgroups=[plain._podgroup("Unknown")], jobs=[job])
    assert (action.verb, action.name) == ("suspend", "train")
    assert "short of its minimum" in action.reason and "running members' nodes" in action.reason


def test_a_gang_running_at_or_above_its_minimum_with_a_pending_member_is_never_on_the_clock():
    """An elastic job that lost a node above its minimum trains on: Volcano calls it Running."""
    members = [plain._pod(f"train-worker-{i}", 3600, node=f"ip-10-0-0-{i + 2}") for i in range(3)]
    members.append(plain._pod("train-worker-3", 600))
    nodes = [plain.IDLE_NODE, *(plain._node(f"ip-10-0-0-{i + 2}", "h100") for i in range(3))]
    assert gang_deadline.clock_actions([plain._podgroup("Running")], members, nodes, [], {"h100": DEADLINE}) == []

"""Round 12 attacker, on the job watchdog's gate for a team's own signal (images/training/job_watchdog.py
_shared_with): a re-check a team's straggler or pre-flight suspect asks for is not asked of a node where another
team's pod holds a GPU. So a team that can put one of its GPU pods beside another team's gang takes the watchdog's
remedies away from that gang on that node. The team policy keeps a team's pods off a node it names (NODE_SELECTOR_KEYS:
no hostname, no node field), but inter-pod affinity to another namespace's pods pins a pod to their node just as well:
the scheduler (Volcano's predicates plugin runs the kube-scheduler's InterPodAffinity filter, volcano-sh/volcano:
pkg/scheduler/plugins/predicates/predicates.go@v1.15.1) places a pod whose required podAffinity term selects pods in
the namespaces its namespaceSelector matches or its namespaces names (an empty selector: every namespace; neither: the
pod's own: PodAffinityTerm, kubernetes/kubernetes:staging/src/k8s.io/api/core/v1/types.go as kubernetes-validate's
kubernetes-json-schema/v1.37.0-local/podaffinityterm-v1.json has it) only on a node of the topologyKey's value those
pods have: with kubernetes.io/hostname, their node."""

from __future__ import annotations

import datetime
import json

import job_watchdog
import pytest
from job_watchdog import WatchdogApi

from components.addons import KUBELET_LOG_MONITORS, MONITORS_ANNOTATION, NODE_MONITORING_AGENT_MONITORS
from infra.cli.verify import checks
from tests.cli.test_verify_checks import NOW, cluster, ctx, gpu_node, one, plan  # noqa: F401 (fixtures)
from tests.components import test_job_watchdog as watchdog_tests
from tests.conftest import ROOT
from tests.fake_kube_api import FakeKubernetesApi
from tests.security.test_node_share import ONE_GPU, PACKED
from tests.security.test_r12_kattack import AGENT
from tests.security.test_tenancy import _job, _pod, denied_by

HOST = "kubernetes.io/hostname"
THEIR_GANG = {"matchLabels": {"training.kubeflow.org/job-name": "their-gang"}}


def _term(**reach) -> dict:
    return {"labelSelector": THEIR_GANG, "topologyKey": HOST, **reach}


# Terms that put a pod on the node of another team's pods: every namespace (an empty selector), one by its name
# label, or named in `namespaces`.
REACHES = {
    "every_namespace": {"namespaceSelector": {}},
    "their_namespace_by_label": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "nlp"}}},
    "their_namespace_by_name": {"namespaces": ["nlp"]},
}


def _required(**reach) -> dict:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(**reach)]}}


def _preferred(**reach) -> dict:
    return {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": _term(**reach)}]
        }
    }


@pytest.mark.parametrize("reach", sorted(REACHES))
def test_a_gpu_pod_pinned_to_another_teams_node_by_pod_affinity_is_denied(reach):
    assert any(m.startswith(PACKED) for m in denied_by(_pod(containers=ONE_GPU, affinity=_required(**REACHES[reach]))))


@pytest.mark.parametrize("reach", sorted(REACHES))
def test_a_job_whose_pods_prefer_another_teams_node_is_denied(reach):
    assert any(m.startswith(PACKED) for m in denied_by(_job(containers=ONE_GPU, affinity=_preferred(**REACHES[reach]))))


# --- verify kube.gpu-nodes right after the deploy that turns the agent's kubelet-log monitors off -------------------
#
# The agent renews each condition it manages every 5 minutes (heartbeatInterval, aws/eks-node-monitoring-agent:
# pkg/manager/node_exporter.go@v1.6.4), and one built with the kernel or runtime monitor off manages neither
# KernelReady nor ContainerRuntimeReady (conditionConfigs, cmd/eks-node-monitoring-agent/main.go@v1.6.4). On the deploy
# that turns them off, the old agent renewed both until EKS's update rolled its pod (the monitors' annotation,
# components/addons.py MONITORS_ANNOTATION); the new pod renews neither. kube.gpu-nodes calls a condition renewed within
# AGENT_CONDITION_STALE_S (15 minutes) a running monitor, so the deploy's own `higgsfield verify`, run minutes after,
# fails every GPU node the roll has not replaced yet (a Karpenter node a do-not-disrupt training pod holds, a node that
# joined before the agent's update) and tells the operator to run `pulumi up` again, on a cluster as planned.

AGENT_POD_LABELS = {"app.kubernetes.io/name": "eks-node-monitoring-agent", "app.kubernetes.io/instance": AGENT}


def _agent_pod_on(node: str, started: datetime.datetime) -> dict:
    """The agent's pod on `node` as the add-on's chart makes it (selectorLabels, templates/_helpers.tpl and
    daemonset.yaml: podAnnotations on the pod, aws/eks-node-monitoring-agent:charts/eks-node-monitoring-agent@v1.6.4),
    carrying the planned monitors, its container running since `started`."""
    stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "eks-node-monitoring-agent-x7k2p",
            "namespace": "kube-system",
            "labels": AGENT_POD_LABELS,
            "annotations": {MONITORS_ANNOTATION: json.dumps(NODE_MONITORING_AGENT_MONITORS, sort_keys=True)},
        },
        "spec": {"nodeName": node, "containers": [{"name": "eks-node-monitoring-agent", "image": "x"}]},
        "status": {
            "phase": "Running",
            "startTime": stamp,
            "containerStatuses": [{"name": "eks-node-monitoring-agent", "state": {"running": {"startedAt": stamp}}}],
        },
    }


def test_verify_right_after_the_monitors_go_off_does_not_call_an_old_agents_last_renewal_a_running_monitor(
    ctx, cluster
):
    node = gpu_node("ip-10-0-1-5", "healthy", tainted=False)
    node["status"]["conditions"] = [
        {
            "type": kind,
            "status": "True",
            "reason": "Ready",
            "lastHeartbeatTime": (NOW - datetime.timedelta(minutes=4)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        for kind in KUBELET_LOG_MONITORS.values()
    ]
    cluster.put(node)
    cluster.put(_agent_pod_on("ip-10-0-1-5", NOW - datetime.timedelta(minutes=2)))
    outcome = one("kube.gpu-nodes", ctx)
    assert "renewed lately" not in outcome.evidence and outcome.status == "PASS"


# --- docs/verify.md's kube.gpu-nodes row ------------------------------------------------------------------------------

VERIFY_PAGE = (ROOT / "docs" / "verify.md").read_text()
GPU_NODES_ROW = next(line for line in VERIFY_PAGE.splitlines() if line.startswith("| `kube.gpu-nodes` |"))


def test_the_verify_pages_gpu_nodes_row_says_how_long_a_renewal_counts_as_lately():
    """The page said 'the last 10 minutes'; the check counts 15 (three of the agent's 5-minute renewals): an operator
    who waits the page's 10 minutes after the deploy and runs verify again still sees it fail."""
    assert f"last {checks.AGENT_CONDITION_STALE_S // 60} minutes" in GPU_NODES_ROW


def test_the_verify_pages_gpu_nodes_row_names_both_conditions_and_that_an_old_true_one_passes():
    """The check fails ContainerRuntimeReady as KernelReady, and passes one left True (no repair acts on it); the page
    named KernelReady alone and said any older one fails with the command that removes it."""
    assert "ContainerRuntimeReady" in GPU_NODES_ROW and "left `True` passes" in GPU_NODES_ROW


# --- the watchdog's MPI remedy on a node another team shares --------------------------------------------------------
#
# _shared_with gates every action a team's signal asks, the `recreate` of an MPI job's workers on a node its
# launcher's pre-flight named among them: the re-check and, a minute after it, the deletion of the job's own pods
# there (images/training/job_watchdog.py recreate) waits on that re-check's Event, so neither happens. The MPI
# Operator's launcher restarts in place and its workers never exit (the module's docstring), so the job retries its
# pre-flight against the same node for as long as the other team's pod is there, and the team is told nothing: the
# watchdog's line goes to its own log alone.


@pytest.fixture
def watchdog_cluster():
    kube, prometheus = FakeKubernetesApi(), watchdog_tests.FakePrometheus()
    watchdog_tests._gang(kube, "MPIJob")
    yield kube, prometheus, WatchdogApi(kube.url, lambda: "token")
    kube.close()
    prometheus.server.shutdown()


def test_an_mpi_job_whose_named_worker_node_another_team_shares_is_told_why_its_worker_stays(watchdog_cluster):
    kube, prometheus, api = watchdog_cluster
    ns, job = watchdog_tests.NS, watchdog_tests.JOB
    prometheus.vectors = {
        job_watchdog.SUSPECTS: [watchdog_tests._series(1, 0, node="node-2", recreate="true")],
        job_watchdog.holders_query("node-2"): [{"metric": {"namespace": "vision"}, "value": [watchdog_tests.NOW, "1"]}],
    }
    told: dict = {}  # what the watchdog's loop keeps between passes
    for later in (0, job_watchdog.RECREATE_AFTER_SECONDS):
        now = watchdog_tests.NOW + later
        job_watchdog.tick(api, watchdog_tests._query(prometheus), now, watchdog_tests.SETTINGS, told=told)
    assert f"{job}-worker-2" in watchdog_tests._pods(kube)  # as designed: not moved without the gate's taint
    told = [e for e in watchdog_tests._events(kube, ns) if e["involvedObject"].get("name") == job]
    assert len(told) == 1 and "node-2" in told[0]["message"]  # once, not at every pass


def test_a_job_is_told_again_once_the_quiet_period_has_passed_and_the_watchdog_forgets_older_tellings(
    watchdog_cluster,
):
    kube, prometheus, api = watchdog_cluster
    prometheus.vectors = {
        job_watchdog.SUSPECTS: [watchdog_tests._series(1, 0, node="node-2", recreate="true")],
        job_watchdog.holders_query("node-2"): [{"metric": {"namespace": "vision"}, "value": [watchdog_tests.NOW, "1"]}],
    }
    told: dict = {("other", "job", "node-9"): watchdog_tests.NOW - 2 * watchdog_tests.SETTINGS.recheck_quiet_s}
    later = watchdog_tests.NOW + watchdog_tests.SETTINGS.recheck_quiet_s
    for now in (watchdog_tests.NOW, later):
        job_watchdog.tick(api, watchdog_tests._query(prometheus), now, watchdog_tests.SETTINGS, told=told)
    told_events = [e for e in watchdog_tests._events(kube, watchdog_tests.NS) if e["reason"] == "NodeRecheckDeclined"]
    assert len(told_events) == 2 and list(told) == [(watchdog_tests.NS, watchdog_tests.JOB, "node-2")]

"""Round 11 attacker, third batch, on the CLI: `higgsfield jobs logs --follow --kind Job` ends when the Job does
(infra/cli/client.py _watch_pods, FOLLOW_RECHECK_S), against the fake API server. A Job that is over with no
pod left to watch, and a watch whose resourceVersion the API server no longer holds (410 Expired). And the add-on
floor (infra/core/versions.py ADDON_FLOORS) where no preflight runs: a CI deploy."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import pytest

from components.addons import _at_its_floor
from infra.cli.main import main
from infra.core.versions import AddonVersion
from tests.cli.test_job_client import (  # noqa: F401 (fixtures)
    BATCH_PATH,
    _batch_job,
    _batch_pod,
    api,
    kubeconfig,
    short_rechecks,
)

FOLLOW = ["jobs", "logs", "prod", "eval", "-n", "llm", "--kind", "Job", "--follow"]
# Long enough for many of the follow's windows (short_rechecks), short of a hang.
WITHIN_S = 10


def _follow(argv: list[str] = FOLLOW) -> list[int]:
    """The exit code of `higgsfield ARGV` if it ends within WITHIN_S, else nothing (it still runs, a daemon)."""
    ended: list[int] = []
    thread = threading.Thread(target=lambda: ended.append(main(argv)), daemon=True)
    thread.start()
    thread.join(WITHIN_S)
    return ended


def test_logs_follow_of_a_finished_batch_job_whose_pods_are_gone_ends(api, kubeconfig, short_rechecks, capsys):
    """A Complete Job whose pods the pod garbage collector (terminated-pod-gc-threshold) or a person deleted: the
    watch sees no pod, and the follow waited for "every pod seen has ended" with none seen, for ever.
    On a cluster: a finished Job, `kubectl delete pods -l batch.kubernetes.io/job-name=NAME`, then
    `higgsfield jobs logs STACK NAME -n NS --kind Job --follow` (returns at once)."""
    api.put(_batch_job({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}))
    assert _follow() == [0]


def test_logs_follow_of_a_batch_job_suspended_before_its_pods_ends(api, kubeconfig, short_rechecks, capsys):
    """A Job created with spec.suspend (a team's paused job) has no pods; the follow's own rule says a Suspended Job
    ends it, yet it waited for a pod. On a cluster: `kubectl create` a Job with `suspend: true`, then the follow."""
    job = _batch_job({"conditions": [{"type": "Suspended", "status": "True"}]})
    job["spec"]["suspend"] = True
    api.put(job)
    assert _follow() == [0]


def test_logs_follow_of_a_batch_job_deleted_before_its_pods_started_ends(api, kubeconfig, short_rechecks, capsys):
    """`jobs cancel` of a Job still waiting for its gang (no pod yet) while someone follows it: the Job is gone."""
    api.put(_batch_job())
    threading.Timer(0.5, lambda: api.delete_now(BATCH_PATH)).start()
    assert _follow() == [0]


def _pod_watches(api, from_a_version: bool) -> int:
    """How many watches of pods the fake API server was asked for: from a resourceVersion, or from none (a fresh
    list: ADDED events for every pod there)."""
    queries = [parse_qs(urlsplit(path).query) for verb, path in list(api.requests) if "/pods?" in path]
    return sum(1 for q in queries if q.get("watch") == ["true"] and ("resourceVersion" in q) == from_a_version)


def _once(ready: Callable[[], bool], then: Callable[[], None]) -> None:
    """Call `then` as soon as `ready()` holds (asked every 10 ms, for WITHIN_S at most), on a thread of its own."""

    def wait() -> None:
        deadline = time.monotonic() + WITHIN_S
        while not ready():
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
        then()

    threading.Thread(target=wait, daemon=True).start()


def test_logs_follow_of_a_batch_job_survives_a_watch_from_an_expired_resource_version(
    api, kubeconfig, short_rechecks, capsys
):
    """Each window watches from the resourceVersion of the last pod event it saw; a training pod Running
    for an hour makes no event, and the API server keeps a bounded window of history (etcd compaction every 5
    minutes; the watch cache's window), so the next window's watch is answered 410 Expired ("too old resource
    version"). The client raised it as an error and the follow of a long job ended there, its pod still running;
    a fresh list is the answer (kubernetes-client/python:kubernetes/watch/watch.py stream: "you have to recover
    yourself"). Here the history is compacted once a window has watched from the pod's resourceVersion, so the next
    one is answered 410, and the pod and its Job end only once the follow has listed the pods afresh (its second
    watch from no resourceVersion): a follow that does not recover never sees them end. On a cluster: follow a Job
    whose one pod runs quietly for 15 minutes in a busy cluster."""
    api.put(_batch_job())
    api.put(_batch_pod(0, "node-a"))
    api.log("llm", "eval-0-eval", "step 1")

    def compacted() -> None:
        api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "llm"}})
        api.compact()

    def ended() -> None:
        api.put(_batch_pod(0, "node-a", "Succeeded"))
        api.put(_batch_job({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}))

    _once(lambda: _pod_watches(api, from_a_version=True) >= 1, compacted)
    _once(lambda: _pod_watches(api, from_a_version=False) >= 2, ended)
    assert _follow() == [0]
    assert capsys.readouterr().out.splitlines() == ["node-a eval-0-eval step 1"]


def test_a_deploy_that_would_install_a_monitoring_agent_below_its_floor_is_refused():
    """An unpinned stack's agent version is EKS's default for the cluster's Kubernetes version, asked at deploy
    (aws.eks.get_addon_version, also at `pulumi preview`). The CI deploy (.github/workflows/deploy.yml) runs no
    preflight, so a default below v1.6.4 (a Kubernetes version whose default is older, or a stack deployed before
    anyone ran preflight) is installed, and a team's own XID 13 or 31 has node repair replace a shared node. The
    program refuses the resolved version itself (components/addons.py addon_version), at preview, before anything
    changes; decided here on the version the lookup answers (a program that raises under the offline mocks leaves
    its failure to the next plan of the process). On AWS: `aws eks describe-addon-versions --addon-name
    eks-node-monitoring-agent --kubernetes-version K8S --query
    'addons[].addonVersions[?compatibilities[?defaultVersion]].addonVersion'` for each version a stack runs, and
    `aws eks describe-addon --cluster-name CLUSTER --addon-name eks-node-monitoring-agent --query addon.addonVersion`
    after a CI deploy."""
    agent = AddonVersion("eks-node-monitoring-agent", "1.35")
    with pytest.raises(ValueError, match="below v1.6.4"):
        _at_its_floor(agent, "v1.6.3-eksbuild.1")
    assert _at_its_floor(agent, "v1.6.10-eksbuild.1") == "v1.6.10-eksbuild.1"

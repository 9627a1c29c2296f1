"""Round 12 attacker, second pass, on the job watchdog's word to a team whose signal named a node another team shares
(images/training/job_watchdog.py plan, _shared_with, tell_the_team).

A pre-flight suspect marked `recreate` (an MPIJob launcher's, preflight.py --mpi) names its node in a label the team's
own launcher serves, not one Prometheus' service discovery sets (the module's docstring): recreate() checks it
against the job's pods, but plan() keeps one action per kind and node before that check, and _shared_with and
tell_the_team run before it too. So a team's launcher can name any node: its action takes the place of the job whose
pods run there, and the NodeRecheckDeclined Event it is told answers, for a node it never had, whether another team's
pods hold GPUs there now."""

from __future__ import annotations

import job_watchdog

from tests.components import test_job_watchdog as watchdog_tests
from tests.security.test_r12_attack import watchdog_cluster  # noqa: F401 (the fixture)

NS, JOB = watchdog_tests.NS, watchdog_tests.JOB


# llm's MPIJob, its four workers on node-0 .. node-3 (tests/components/test_job_watchdog.py _gang)
mpi_cluster = watchdog_cluster


def _suspect(namespace: str, job: str, launcher_node: str, named: str) -> dict:
    """A `recreate` suspect as the scrape job labels it: namespace, job and Hostname from the launcher's pod, `node`
    from what its pre-flight serves."""
    metric = {
        "namespace": namespace,
        "job_name": job,
        "pod": f"{job}-launcher",
        "pod_uid": f"uid-{job}-launcher",
        "Hostname": launcher_node,
        "node": named,
        "recreate": "true",
    }
    return {"metric": metric, "value": [watchdog_tests.NOW, "1"]}


def _tick(prometheus, api, later: float = 0) -> list[str]:
    return job_watchdog.tick(
        api, watchdog_tests._query(prometheus), watchdog_tests.NOW + later, watchdog_tests.SETTINGS, told={}
    )


def test_another_teams_launcher_naming_a_node_does_not_cancel_the_recheck_of_the_job_whose_worker_runs_there(
    mpi_cluster,
):
    """llm's launcher names node-2, where its worker-2 runs and only llm holds GPUs; vision's launcher names node-2
    too (a label it serves, on a node it has no pod on) and its series comes first: llm's node is re-checked all the
    same."""
    kube, prometheus, api = mpi_cluster
    prometheus.vectors = {
        job_watchdog.SUSPECTS: [_suspect("vision", "probe", "node-9", "node-2"), _suspect(NS, JOB, "node-0", "node-2")],
        job_watchdog.holders_query("node-2"): [{"metric": {"namespace": NS}, "value": [watchdog_tests.NOW, "1"]}],
    }
    done = _tick(prometheus, api)
    assert [e["involvedObject"]["name"] for e in watchdog_tests._events(kube, "default")] == ["node-2"], done


def test_a_launcher_naming_a_node_its_job_has_no_pod_on_is_not_told_whether_another_team_holds_gpus_there(
    mpi_cluster,
):
    """llm's launcher names node-9, where none of llm's pods runs and vision's pods hold GPUs: llm hears nothing of it
    (with no holder there it hears nothing either, so an Event would tell it where vision's pods are)."""
    kube, prometheus, api = mpi_cluster
    prometheus.vectors = {
        job_watchdog.SUSPECTS: [_suspect(NS, JOB, "node-0", "node-9")],
        job_watchdog.holders_query("node-9"): [{"metric": {"namespace": "vision"}, "value": [watchdog_tests.NOW, "1"]}],
    }
    done = _tick(prometheus, api)
    declined = [e for e in watchdog_tests._events(kube, NS) if e["reason"] == job_watchdog.SHARED_REASON]
    assert declined == [], done

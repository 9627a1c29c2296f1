"""The job watchdog (images/training/job_watchdog.py, one for the whole cluster) lists a hung job's pods to delete
them, and a team writes its own pods: each may be as large as etcd stores, and the API server writes it as JSON up
to six times that (tests/security/test_r8_attack7.py). Read whole, a hung job of a few such pods outgrew the
watchdog's memory limit and every pass was killed: no team's hung job was restarted while that one stayed hung (a
reviewer's finding beside the gang deadline's). Listed a page at a time and each pod cut to what the watchdog reads,
a pass holds one page."""

from __future__ import annotations

import tracemalloc

import job_watchdog
from job_watchdog import Action, WatchdogApi

from components import job_watchdog as component
from infra.offline.pods import mebibytes
from tests.fake_kube_api import FakeKubernetesApi
from tests.security.test_r8_attack7 import ANNOTATIONS_LIMIT, largest_object_parsed

NS, JOB = "llm", "llm-pretrain"


def _hung_job(kube: FakeKubernetesApi, pods: int) -> tuple[str, ...]:
    """A job's `pods` pods, each with the API server's largest annotations; their uids."""
    uids = []
    for i in range(pods):
        pod = kube.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{JOB}-worker-{i}",
                    "namespace": NS,
                    "labels": {job_watchdog.JOB_LABEL: JOB},
                    "annotations": {"example.com/notes": "x" * ANNOTATIONS_LIMIT},
                },
                "spec": {"nodeName": f"node-{i}"},
            }
        )
        uids.append(pod["metadata"]["uid"])
    return tuple(uids)


def _peak_of_a_restart(pods: int) -> int:
    """The most memory restart() holds at once while it lists the job's `pods` pods. The uids it is given match none,
    so it deletes nothing: what the fake API server keeps of a deleted pod (in this process, traced too) stays out
    of the figure."""
    kube = FakeKubernetesApi()
    try:
        _hung_job(kube, pods)
        api = WatchdogApi(kube.url, lambda: "token")
        tracemalloc.start()
        try:
            said = job_watchdog.restart(api, Action("restart", NS, JOB, "hung", pods=("gone",)), 0.0)
            assert said.endswith("its hung pods are gone already")
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        kube.close()


def test_a_restart_holds_a_page_of_a_hung_jobs_pods_not_every_pod():
    few = _peak_of_a_restart(job_watchdog.PAGE)
    many = _peak_of_a_restart(4 * job_watchdog.PAGE)
    assert many < 1.5 * few


def test_the_watchdogs_memory_holds_a_page_of_the_largest_pods_as_the_api_server_writes_them():
    assert job_watchdog.PAGE * largest_object_parsed() + 64 * 2**20 <= mebibytes(component.MEMORY_LIMIT) * 2**20

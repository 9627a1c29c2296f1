"""The job watchdog (images/training/job_watchdog.py) against the fake API server over HTTP
(tests/fake_kube_api.py) and a fake Prometheus (the HTTP API's instant-query answers): a job whose
steps stop is restarted, with an Event on the job saying why; a straggler's node and the pre-flight's
suspects are sent back to the health gate, never a node outside the job."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import job_watchdog
import pytest
from job_watchdog import Settings, WatchdogApi, plan, ranks_from, tick

from tests.fake_kube_api import FakeKubernetesApi

NOW = 1_800_000_000.0
SETTINGS = Settings(hang_multiple=10, hang_floor_s=600, straggler_factor=1.5, recheck_quiet_s=3600)
JOB, NS = "llm-pretrain", "llm"


def _series(value: float, pod: int, rank: int = 0, **extra: str) -> dict:
    metric = {
        "namespace": NS,
        "job_name": JOB,
        "pod": f"{JOB}-worker-{pod}",
        "pod_uid": f"uid-pod-{pod}",
        "Hostname": f"node-{pod}",
        "rank": str(rank),
        **extra,
    }
    return {"metric": metric, "value": [NOW, str(value)]}


class FakePrometheus:
    """Answers /api/v1/query with the vector set for each expression."""

    def __init__(self) -> None:
        self.vectors: dict[str, list[dict]] = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                expr = parse_qs(urlsplit(self.path).query)["query"][0]
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": fake.vectors.get(expr, [])}}
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # shutdown() waits for serve_forever to poll again: every 10 ms, not its default half second
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def progress(self, last_step_at: float, step_s: float = 2.0, compute: dict[int, float] | None = None) -> None:
        compute = compute or {}
        self.vectors = {
            job_watchdog.QUERIES["at"]: [_series(last_step_at, p) for p in range(4)],
            job_watchdog.QUERIES["step_s"]: [_series(step_s, p) for p in range(4)],
            job_watchdog.QUERIES["compute_s"]: [_series(compute.get(p, 0.5), p) for p in range(4)],
        }


@pytest.fixture
def cluster():
    kube, prometheus = FakeKubernetesApi(), FakePrometheus()
    kube.put({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": JOB, "namespace": NS}})
    for p in range(4):
        kube.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{JOB}-worker-{p}",
                    "namespace": NS,
                    "uid": f"uid-pod-{p}",
                    "labels": {job_watchdog.JOB_LABEL: JOB},
                },
                "spec": {"nodeName": f"node-{p}"},
            }
        )
    kube.put(  # another job's pod: never touched
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "other-worker-0",
                "namespace": NS,
                "uid": "uid-other",
                "labels": {job_watchdog.JOB_LABEL: "other"},
            },
        }
    )
    api = WatchdogApi(kube.url, lambda: "token")
    yield kube, prometheus, api
    kube.close()
    prometheus.server.shutdown()


def _pods(kube) -> set[str]:
    return {key[3] for key in kube.objects if key[2] == "pods"}


def _events(kube, namespace: str) -> list[dict]:
    return [o for key, o in kube.objects.items() if key[2] == "events" and key[1] == namespace]


def _query(prometheus: FakePrometheus):
    return lambda expr: job_watchdog.query(prometheus.url, expr)


def test_a_job_making_progress_is_left_alone(cluster):
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5)
    assert tick(api, _query(prometheus), NOW, SETTINGS) == []
    assert len(_pods(kube)) == 5 and _events(kube, NS) == []


def test_a_stalled_job_is_restarted_with_an_event_on_the_job_saying_why(cluster):
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5)
    tick(api, _query(prometheus), NOW, SETTINGS)  # still stepping: nothing
    prometheus.progress(last_step_at=NOW - 5)  # the steps stop; time goes on past the floor
    later = NOW + 700
    done = tick(api, _query(prometheus), later, SETTINGS)
    assert _pods(kube) == {"other-worker-0"}, done  # the gang's pods deleted: the operator recreates them
    (event,) = _events(kube, NS)
    assert event["reason"] == "TrainingHung" and event["involvedObject"]["kind"] == "PyTorchJob"
    assert event["involvedObject"]["name"] == JOB and event["involvedObject"]["uid"]
    assert "no training step for 705s" in event["message"] and "newest complete checkpoint" in event["message"]


def test_recreated_pods_of_a_restarted_job_are_never_deleted_again(cluster):
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5)
    tick(api, _query(prometheus), NOW + 700, SETTINGS)
    kube.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{JOB}-worker-0",
                "namespace": NS,
                "uid": "uid-new",
                "labels": {job_watchdog.JOB_LABEL: JOB},
            },
        }
    )
    done = tick(api, _query(prometheus), NOW + 710, SETTINGS)  # the old series are still there, stale
    assert f"{JOB}-worker-0" in _pods(kube) and "gone already" in done[0]


def test_the_hang_limit_is_k_times_the_normal_step_time_when_that_is_longer_than_the_floor():
    ranks = ranks_from({"at": [_series(NOW - 900, 0)], "step_s": [_series(120.0, 0)]})
    assert plan(ranks, [], NOW, SETTINGS) == []  # 900 s < 10 x 120 s: a slow step, not a hang
    assert plan(ranks, [], NOW + 400, SETTINGS)[0].kind == "restart"


def test_a_persistent_straggler_sends_its_node_to_the_gate(cluster):
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5, compute={2: 1.2})
    tick(api, _query(prometheus), NOW, SETTINGS)
    (event,) = _events(kube, "default")
    assert event["reason"] == "NodeRecheckRequested" and event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-2",
    }
    assert "straggler" in event["message"] and len(_pods(kube)) == 5  # the job keeps running


def test_a_node_is_asked_for_a_recheck_at_most_once_an_hour(cluster):
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5, compute={2: 1.2})
    tick(api, _query(prometheus), NOW, SETTINGS)
    tick(api, _query(prometheus), NOW + 60, SETTINGS)
    assert len(_events(kube, "default")) == 1


def test_the_preflights_suspect_goes_to_the_gate_but_a_node_outside_the_job_does_not(cluster):
    kube, prometheus, api = cluster
    prometheus.vectors = {
        job_watchdog.SUSPECTS: [
            _series(1, pod, node="node-3")
            for pod in range(4)  # every rank names node-3, its own node among them
        ]
        + [_series(1, 0, node="node-of-another-team")]
    }
    tick(api, _query(prometheus), NOW, SETTINGS)
    assert [e["involvedObject"]["name"] for e in _events(kube, "default")] == ["node-3"]


def test_another_teams_job_of_the_same_name_cannot_vouch_for_a_node(cluster):
    kube, prometheus, api = cluster
    theirs = _series(1, 0, node="node-9")  # named by llm's job of this name...
    vouching = _series(1, 0, node="node-elsewhere")
    vouching["metric"] = {**vouching["metric"], "namespace": "vision", "Hostname": "node-9"}  # ...vision's ran there
    prometheus.vectors = {job_watchdog.SUSPECTS: [theirs, vouching]}
    tick(api, _query(prometheus), NOW, SETTINGS)
    assert _events(kube, "default") == []

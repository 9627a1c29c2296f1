"""The job watchdog (images/training/job_watchdog.py) against the fake API server over HTTP
(tests/fake_kube_api.py) and a fake Prometheus (the HTTP API's instant-query answers): a job whose
steps stop is restarted, with an Event on the job saying why; a straggler's node and the pre-flight's
suspects are sent back to the health gate, never a node outside the job."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import job_watchdog
import pytest
import yaml
from job_watchdog import Settings, WatchdogApi, plan, ranks_from, tick

from tests.fake_kube_api import FakeKubernetesApi
from tests.promql import promtool_test

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


def _gang(kube: FakeKubernetesApi, kind: str) -> None:
    """A job of `kind` and its four pods, each with the controller reference the operator sets
    (kubeflow/trainer:pkg/controller.v1/common/pod.go@v1.9.4 createNewPod, GenOwnerReference)."""
    job = kube.put({"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": JOB, "namespace": NS}})
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "name": JOB,
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
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
                    "ownerReferences": [owner],
                },
                "spec": {"nodeName": f"node-{p}"},
            }
        )


@pytest.fixture(params=["PyTorchJob"])
def cluster(request):
    kube, prometheus = FakeKubernetesApi(), FakePrometheus()
    _gang(kube, request.param)
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


@pytest.mark.parametrize("cluster", ["TFJob"], indirect=True)
def test_a_stalled_job_of_another_kind_gets_its_event_on_that_job(cluster):
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5)
    tick(api, _query(prometheus), NOW + 700, SETTINGS)
    (event,) = _events(kube, NS)
    assert event["involvedObject"]["kind"] == "TFJob" and event["involvedObject"]["name"] == JOB


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


def _held_by(prometheus: FakePrometheus, node: str, *namespaces: str) -> None:
    prometheus.vectors[job_watchdog.holders_query(node)] = [
        {"metric": {"namespace": namespace}, "value": [NOW, "1"]} for namespace in namespaces
    ]


def test_a_straggler_on_a_node_another_team_shares_does_not_send_that_node_to_the_gate(cluster):
    """llm's progress series are llm's own: a straggler they report on a node where vision's pods hold GPUs would put
    the gate's taint on vision's node, which keeps vision's recreated pods off it until every GPU is free."""
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5, compute={2: 1.2})
    _held_by(prometheus, "node-2", NS, "vision")
    (done,) = tick(api, _query(prometheus), NOW, SETTINGS)
    assert _events(kube, "default") == [] and "vision hold GPUs there too" in done


def test_a_straggler_on_a_node_only_its_own_team_holds_is_sent_to_the_gate(cluster):
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5, compute={2: 1.2})
    _held_by(prometheus, "node-2", NS)
    tick(api, _query(prometheus), NOW, SETTINGS)
    assert [e["involvedObject"]["name"] for e in _events(kube, "default")] == ["node-2"]


def test_a_preflight_suspect_on_a_shared_node_is_not_sent_to_the_gate(cluster):
    kube, prometheus, api = cluster
    prometheus.vectors = {job_watchdog.SUSPECTS: [_series(1, pod, node="node-3") for pod in range(4)]}
    _held_by(prometheus, "node-3", "vision")
    tick(api, _query(prometheus), NOW, SETTINGS)
    assert _events(kube, "default") == []


def _promtool_answers(tmp_path, series: list[dict], expr: str, at: str, samples: list[dict]) -> None:
    """`expr` at `at` over `series` (sampled every 10 minutes) gives `samples`, by Prometheus' own engine."""
    result = promtool_test(tmp_path, series, [{"expr": expr, "eval_time": at, "exp_samples": samples}], interval="10m")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed here")
def test_the_holders_query_names_each_namespace_holding_a_gpu_of_the_node_now(tmp_path):
    series = [
        _gpu("node-a", "0+0x6", namespace="llm"),
        _gpu("node-a", "_x3 0+0x3", namespace="vision"),
        _gpu("node-a", "0+0x3 _x3", namespace="ranking"),  # gone half an hour ago
        _gpu("node-b", "0+0x6", namespace="speech"),
    ]
    held = [{"labels": '{namespace="llm"}', "value": 1}, {"labels": '{namespace="vision"}', "value": 1}]
    _promtool_answers(tmp_path, series, job_watchdog.holders_query("node-a"), "60m", held)


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


IDLE = Settings(
    hang_multiple=10, hang_floor_s=600, straggler_factor=1.5, recheck_quiet_s=3600, idle_recheck_s=12 * 3600
)


def _idle(prometheus: FakePrometheus, *nodes: str) -> None:
    prometheus.vectors[job_watchdog.idle_query(IDLE.idle_recheck_s)] = [
        {"metric": {"Hostname": node}, "value": [NOW, "8"]} for node in nodes
    ]


def test_a_gpu_node_no_pod_has_used_for_hours_is_sent_back_to_the_gate(cluster):
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5)
    _idle(prometheus, "node-idle")
    done = tick(api, _query(prometheus), NOW, IDLE, {})
    (event,) = _events(kube, "default")
    assert (event["reason"], event["involvedObject"]["kind"], event["involvedObject"]["name"]) == (
        "NodeRecheckRequested",
        "Node",
        "node-idle",
    )
    assert event["message"].startswith("idle: no pod has held its GPUs for 12h") and len(done) == 1


def test_an_idle_node_is_re_checked_once_per_idle_period_not_once_an_hour(cluster):
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5)
    _idle(prometheus, "node-idle")
    asked: dict[str, float] = {}
    tick(api, _query(prometheus), NOW, IDLE, asked)
    for kube_key in [k for k in kube.objects if k[2] == "events"]:  # the API server's event TTL (1 h) passed
        kube.delete_now(FakeKubernetesApi.path_of(kube.objects[kube_key]))
    tick(api, _query(prometheus), NOW + 2 * 3600, IDLE, asked)
    assert _events(kube, "default") == []
    tick(api, _query(prometheus), NOW + 12 * 3600, IDLE, asked)
    assert [e["involvedObject"]["name"] for e in _events(kube, "default")] == ["node-idle"]


def test_idle_nodes_are_not_re_checked_when_the_setting_is_off(cluster):
    kube, prometheus, api = cluster
    prometheus.progress(last_step_at=NOW - 5)
    _idle(prometheus, "node-idle")
    assert tick(api, _query(prometheus), NOW, SETTINGS, {}) == [] and _events(kube, "default") == []


def _gpu(node: str, values: str, namespace: str = "") -> dict:
    labels = f'job="dcgm-exporter",Hostname="{node}",gpu="0"' + (
        f',namespace="{namespace}",pod="p"' if namespace else ""
    )
    return {"series": f"DCGM_FI_DEV_GPU_UTIL{{{labels}}}", "values": values}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed here")
def test_the_idle_query_finds_only_nodes_nobody_held_a_gpu_on_for_the_whole_window(tmp_path):
    """Samples every 10 minutes for 13 hours: node-a idle throughout; node-b had a team's pod 4 hours
    ago; node-c joined 2 hours ago; node-d was in the gate (its pod holds the GPUs) an hour ago."""
    series = [
        _gpu("node-a", "0+0x78"),
        _gpu("node-b", "0+0x78"),
        _gpu("node-b", "_x54 50+0x6", namespace="llm"),
        _gpu("node-c", "_x66 0+0x12"),
        _gpu("node-d", "0+0x78"),
        _gpu("node-d", "_x70 100+0x2", namespace="higgsfield-health"),
    ]
    idle = [{"labels": '{Hostname="node-a"}', "value": 1}]
    _promtool_answers(tmp_path, series, job_watchdog.idle_query(12 * 3600), "13h", idle)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed here")
def test_the_alert_rules_pass_prometheus_own_rule_checker(tmp_path):
    from components.job_watchdog import alert_rules
    from tests.conftest import plan_of

    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": alert_rules(plan_of("prod").config.gpu_pools)}))
    checked = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_an_mpi_workers_named_node_is_rechecked_then_its_pod_is_recreated_after_the_gates_taint(cluster):
    """The MPI launcher's pre-flight serves its workers' bad nodes marked `recreate` (from the
    launcher's own node): a node where the job has a pod is asked for a re-check at once, and a
    minute later (the gate's taint is on) the job's pod there is deleted, for the operator to
    recreate it elsewhere; the other workers stay."""
    kube, prometheus, api = cluster
    served = _series(1, 0, node="node-2", recreate="true")  # the launcher runs beside worker 0
    prometheus.vectors = {job_watchdog.SUSPECTS: [served]}
    first = tick(api, _query(prometheus), NOW, SETTINGS)
    assert [e["involvedObject"]["name"] for e in _events(kube, "default")] == ["node-2"]
    assert f"{JOB}-worker-2" in _pods(kube), first
    later = tick(api, _query(prometheus), NOW + job_watchdog.RECREATE_AFTER_SECONDS, SETTINGS)
    assert f"{JOB}-worker-2" not in _pods(kube) and {f"{JOB}-worker-{p}" for p in (0, 1, 3)} <= _pods(kube), later
    assert len(_events(kube, "default")) == 1  # one request, not one a pass


def test_an_mpi_suspect_on_a_node_the_job_has_no_pod_on_is_neither_rechecked_nor_emptied(cluster):
    kube, prometheus, api = cluster
    prometheus.vectors = {job_watchdog.SUSPECTS: [_series(1, 0, node="node-of-another-team", recreate="true")]}
    tick(api, _query(prometheus), NOW, SETTINGS)
    tick(api, _query(prometheus), NOW + 120, SETTINGS)
    assert _events(kube, "default") == [] and len(_pods(kube)) == 5

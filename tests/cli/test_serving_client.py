"""`higgsfield jobs submit/status/logs/cancel` and the Python API for a team's serving job file: its
Deployment applied server-side, its replicas found by the Deployment's selector (their PodGroup by
the name Volcano writes on each pod), against the fake API server with the real wire formats."""

from __future__ import annotations

import json
import threading

import pytest
import yaml

from infra.cli.client import GROUP_NAME_ANNOTATION
from infra.cli.main import main
from infra.core.names import POOL_LABEL
from tests.cli.test_job_client import _node, _podgroup, api, kubeconfig  # noqa: F401 - the fixtures

DEPLOYMENT_PATH = "/apis/apps/v1/namespaces/llm/deployments/classifier"
SERVING = {
    "name": "classifier",
    "team": "llm",
    "class": "serving",
    "command": ["python", "-m", "server"],
    "resources": {"gpus": 2, "gpuType": "H100"},
}


@pytest.fixture
def job_file(tmp_path) -> str:
    path = tmp_path / "classifier.job.yaml"
    path.write_text(yaml.safe_dump(SERVING))
    return str(path)


def _deployment(replicas: int = 2, ready: int = 0, conditions: tuple[dict, ...] = ()) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "classifier", "namespace": "llm"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "classifier"}},
            "template": {
                "metadata": {
                    "labels": {"app": "classifier"},
                    "annotations": {"scheduling.volcano.sh/queue-name": "research"},
                },
                "spec": {"nodeSelector": {POOL_LABEL: "h100"}},
            },
        },
        "status": {"readyReplicas": ready, "conditions": list(conditions)},
    }


def _replica(suffix: str, node: str | None, phase: str = "Running", app: str = "classifier") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-7c9d-{suffix}",
            "namespace": "llm",
            "uid": f"uid-{app}-{suffix}",
            "labels": {"app": app},
            "annotations": {GROUP_NAME_ANNOTATION: "podgroup-rs-uid"},
        },
        "spec": {"containers": [{"name": "server", "image": "i"}], **({"nodeName": node} if node else {})},
        "status": {"phase": phase},
    }


def test_submit_applies_the_serving_deployment_server_side_with_the_higgsfield_field_manager(
    api, kubeconfig, job_file, capsys
):
    assert main(["jobs", "submit", "prod", "-f", job_file]) == 0
    stored = api.get(DEPLOYMENT_PATH)
    assert stored["metadata"]["managedFields"][0]["manager"] == "higgsfield"
    assert stored["spec"]["template"]["spec"]["schedulerName"] == "volcano"
    assert capsys.readouterr().out.splitlines() == ["deployment/classifier serverside-applied"]


def test_a_dry_run_submit_of_a_serving_job_stores_nothing(api, kubeconfig, job_file, capsys):
    assert main(["jobs", "submit", "prod", "-f", job_file, "--dry-run"]) == 0
    assert not api.objects and "(server dry run)" in capsys.readouterr().out


def test_status_of_a_serving_job_counts_ready_replicas_and_says_why_the_others_wait(api, kubeconfig, job_file, capsys):
    api.put(_deployment(replicas=2, ready=1))
    api.put(_podgroup("podgroup-rs-uid", "llm", "Running", "2026-01-01T00:00:00Z", "1/2 tasks unschedulable"))
    api.put(_replica("a", "node-a"))
    api.put(_replica("b", None, "Pending"))
    api.put(_replica("x", "node-z", app="other"))  # another Deployment's pod: not this job's
    api.put(_node("ip-10-40-1-1", gated=True))
    assert main(["jobs", "status", "prod", "-f", job_file, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["kind"], status["state"], status["gang"], status["queue"]) == (
        "Deployment",
        "1/2 replicas ready",
        "Running",
        "research",
    )
    assert [w.split(":")[0] for w in status["waiting"]] == ["capacity", "gate"]
    assert status["nodes"] == ["node-a"] and len(status["pods"]) == 2


def test_status_of_a_serving_job_whose_pods_the_quota_refused_says_so(api, kubeconfig, job_file, capsys):
    refused = {
        "type": "ReplicaFailure",
        "status": "True",
        "reason": "FailedCreate",
        "message": 'pods "classifier-7c9d-a" is forbidden: exceeded quota: serving-gpus',
    }
    api.put(_deployment(replicas=2, conditions=(refused,)))
    assert main(["jobs", "status", "prod", "classifier", "-n", "llm", "--kind", "Deployment"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Deployment llm/classifier: 0/2 replicas ready; gang none (queue research)"
    assert lines[1] == f"  waits: quota: the replicas' pods were refused: {refused['message']}"


def test_status_of_a_serving_job_without_pods_yet_says_so(api, kubeconfig, job_file, capsys):
    api.put(_deployment(replicas=1))
    assert main(["jobs", "status", "prod", "-f", job_file, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["waiting"] == ["the Deployment's controller has created no pod of it yet"]


def test_status_of_a_serving_job_that_does_not_exist_is_the_apis_not_found(api, kubeconfig, job_file, capsys):
    assert main(["jobs", "status", "prod", "-f", job_file]) == 2
    assert capsys.readouterr().err == 'error: 404 NotFound: deployments "classifier" not found\n'


def test_logs_of_a_serving_job_merge_its_replicas_lines_by_time_and_no_other_pods(api, kubeconfig, job_file, capsys):
    api.put(_deployment())
    api.put(_replica("a", "node-a"))
    api.put(_replica("b", "node-b"))
    api.put(_replica("x", "node-z", app="other"))
    api.log("llm", "classifier-7c9d-a", "served 1", at="2026-01-01T00:00:02Z")
    api.log("llm", "classifier-7c9d-b", "served 2", at="2026-01-01T00:00:01Z")
    api.log("llm", "other-7c9d-x", "not ours", at="2026-01-01T00:00:00Z")
    assert main(["jobs", "logs", "prod", "-f", job_file]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "node-b classifier-7c9d-b served 2",
        "node-a classifier-7c9d-a served 1",
    ]


def test_logs_follow_of_a_serving_job_streams_its_replicas_until_they_end(api, kubeconfig, job_file, capsys):
    api.put(_deployment())
    api.put(_replica("a", "node-a"))
    api.log("llm", "classifier-7c9d-a", "started")
    threading.Timer(0.3, lambda: api.log("llm", "classifier-7c9d-a", "served 1")).start()
    threading.Timer(0.6, lambda: api.put(_replica("a", "node-a", "Succeeded"))).start()
    assert main(["jobs", "logs", "prod", "-f", job_file, "--follow"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "node-a classifier-7c9d-a started",
        "node-a classifier-7c9d-a served 1",
    ]


def test_cancel_deletes_the_serving_deployment_and_cancelling_again_is_not_found(api, kubeconfig, job_file, capsys):
    api.put(_deployment())
    assert main(["jobs", "cancel", "prod", "-f", job_file]) == 0
    assert api.get(DEPLOYMENT_PATH) is None and capsys.readouterr().out == "deployment/classifier deleted\n"
    assert main(["jobs", "cancel", "prod", "-f", job_file]) == 2
    assert capsys.readouterr().err == 'error: 404 NotFound: deployments "classifier" not found\n'


def test_a_serving_job_with_a_port_submits_its_service_and_cancel_deletes_both(api, kubeconfig, tmp_path, capsys):
    path = tmp_path / "served.job.yaml"
    path.write_text(yaml.safe_dump({**SERVING, "port": 8000}))
    assert main(["jobs", "submit", "prod", "-f", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "service/classifier serverside-applied",
        "deployment/classifier serverside-applied",
    ]
    assert main(["jobs", "cancel", "prod", "-f", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["deployment/classifier deleted", "service/classifier deleted"]
    assert api.get(DEPLOYMENT_PATH) is None and api.get("/api/v1/namespaces/llm/services/classifier") is None


def test_cancel_leaves_a_service_of_the_same_name_the_team_made_itself(api, kubeconfig, job_file, capsys):
    own = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "classifier", "namespace": "llm"}, "spec": {}}
    api.put(_deployment())
    api.put(own)
    assert main(["jobs", "cancel", "prod", "-f", job_file]) == 0
    assert capsys.readouterr().out == "deployment/classifier deleted\n"
    assert api.get("/api/v1/namespaces/llm/services/classifier") is not None


def test_the_python_api_submits_reports_reads_and_cancels_a_serving_job(api, kubeconfig):
    from infra.cli.client import Job

    settings = {k: v for k, v in SERVING.items() if k != "class"}
    job = Job("prod", class_="serving", **settings)  # `class` is a Python keyword: `class_` in a call
    assert [o["kind"] for o in job.submit(dry_run=True)] == ["Deployment"] and not api.objects
    job.submit()
    api.put(_replica("a", "node-a"))
    api.log("llm", "classifier-7c9d-a", "hello", at="2026-01-01T00:00:00Z")
    assert job.status().state == "0/1 replicas ready" and job.status().nodes == ["node-a"]
    assert [str(line) for line in job.logs()] == ["node-a classifier-7c9d-a hello"]
    job.cancel()
    assert api.get(DEPLOYMENT_PATH) is None

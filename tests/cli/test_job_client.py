"""`higgsfield jobs submit/status/logs/cancel` and the Python API, through the maintained Kubernetes
client against the fake API server (tests/fake_kube_api.py: the real wire formats, Status objects
with the real codes, watch and followed logs): server-side apply with a field manager, dry runs
that store nothing, the gang's state and why it waits, every rank's log merged by time."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
import yaml

from infra.cli.main import main
from infra.core.names import (
    GAVE_BACK_ANNOTATION,
    GROUP_NAME_ANNOTATION,
    JOB_NAME_LABEL,
    MIN_MEMBER_ANNOTATION,
    POOL_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    STARTUP_TAINT_KEY,
    WAITING_SINCE_ANNOTATION,
)
from tests.conftest import ROOT
from tests.fake_kube_api import FakeKubernetesApi

JOB_FILE = str(ROOT / "examples" / "llama-ft.job.yaml")
JOB_PATH = "/apis/kubeflow.org/v1/namespaces/llm/pytorchjobs/llama-ft"


@pytest.fixture
def api():
    fake = FakeKubernetesApi()
    yield fake
    fake.close()


@pytest.fixture
def short_rechecks(api):
    """The follow of a batch Job watches its pods in windows of FOLLOW_RECHECK_S (2 s) and asks after each
    whether the Job has ended (infra/cli/client.py _watch_pods). What its tests check is what it does between windows
    and at their ends, the same at any length: the fake API server ends each window in a fifth of a second."""
    api.watch_second = 0.1


@pytest.fixture
def kubeconfig(api, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "prod", "cluster": {"server": api.url}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "me"}}],
                "current-context": "prod",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    return str(path)


def _job(phase: str | None = None, conditions: tuple[str, ...] = ("Created",)) -> dict:
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama-ft", "namespace": "llm"},
        "spec": {
            "runPolicy": {"schedulingPolicy": {"queue": "research"}},
            "pytorchReplicaSpecs": {"Master": {"template": {"spec": {"nodeSelector": {POOL_LABEL: "h100"}}}}},
        },
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }
    return job


def _podgroup(name: str, namespace: str, phase: str, created: str, message: str | None = None) -> dict:
    status: dict = {"phase": phase}
    if message:
        status["conditions"] = [
            {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": message}
        ]
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": {"queue": "research", "minMember": 2},
        "status": status,
    }


def _pod(replica: str, index: int, node: str | None, phase: str = "Running") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"llama-ft-{replica.lower()}-{index}",
            "namespace": "llm",
            "uid": f"uid-{replica.lower()}-{index}",  # one pod: its uid stays as its status changes
            "labels": {JOB_NAME_LABEL: "llama-ft", REPLICA_TYPE_LABEL: replica, REPLICA_INDEX_LABEL: str(index)},
        },
        "spec": {"containers": [{"name": "pytorch", "image": "i"}], **({"nodeName": node} if node else {})},
        "status": {"phase": phase},
    }


def _node(name: str, gated: bool = False) -> dict:
    taints = [{"key": STARTUP_TAINT_KEY, "value": "true", "effect": "NoSchedule"}] if gated else []
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {POOL_LABEL: "h100"}},
        "spec": {"taints": taints},
    }


def test_submit_applies_the_rendered_job_server_side_with_the_higgsfield_field_manager(api, kubeconfig, capsys):
    assert main(["jobs", "submit", "prod", "-f", JOB_FILE]) == 0
    stored = api.get(JOB_PATH)
    assert stored["metadata"]["managedFields"][0]["manager"] == "higgsfield"
    assert stored["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "research"
    assert api.get("/api/v1/namespaces/llm/configmaps/llama-ft-launcher") is not None
    assert capsys.readouterr().out.splitlines() == [
        "configmap/llama-ft-launcher serverside-applied",
        "pytorchjob/llama-ft serverside-applied",
    ]


def test_a_dry_run_submit_is_checked_by_the_server_and_stores_nothing(api, kubeconfig, capsys):
    assert main(["jobs", "submit", "prod", "-f", JOB_FILE, "--dry-run"]) == 0
    assert not api.objects
    assert all("dryRun=All" in path for verb, path in api.requests if verb == "PATCH")
    assert "(server dry run)" in capsys.readouterr().out


def test_a_job_the_admission_policy_refuses_is_one_line_with_the_apis_code_and_reason(api, kubeconfig, capsys):
    def admit(verb, obj, old):
        if obj.get("kind") == "PyTorchJob":
            return 422, "Invalid", 'pytorchjobs.kubeflow.org "llama-ft" is forbidden: a job names its team\'s queue'
        return None

    api.admit = admit
    assert main(["jobs", "submit", "prod", "-f", JOB_FILE]) == 2
    assert capsys.readouterr().err == (
        'error: 422 Invalid: pytorchjobs.kubeflow.org "llama-ft" is forbidden: a job names its team\'s queue\n'
    )


def test_status_of_a_gang_waiting_for_quota_says_so_with_its_place_in_the_queue(api, kubeconfig, capsys):
    api.put(_job())
    api.put(_podgroup("older", "vision", "Pending", "2026-01-01T00:00:00Z"))
    api.put(_podgroup("llama-ft", "llm", "Pending", "2026-01-01T00:05:00Z", "queue resource quota insufficient"))
    assert main(["jobs", "status", "prod", "-f", JOB_FILE, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["state"], status["gang"], status["queue"], status["position"]) == (
        "Created",
        "Pending",
        "research",
        2,
    )
    (why,) = status["waiting"]
    assert why.startswith("quota: Volcano has not admitted the gang into queue research")
    assert "queue resource quota insufficient" in why


def test_status_of_an_admitted_gang_names_capacity_and_the_nodes_in_their_health_check(api, kubeconfig, capsys):
    api.put(_job())
    api.put(_podgroup("llama-ft", "llm", "Inqueue", "2026-01-01T00:00:00Z", "1/2 tasks in gang unschedulable"))
    api.put(_pod("Master", 0, None, "Pending"))
    api.put(_pod("Worker", 0, None, "Pending"))
    api.put(_node("ip-10-40-1-1", gated=True))
    assert main(["jobs", "status", "prod", "llama-ft", "-n", "llm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "PyTorchJob llm/llama-ft: Created; gang Inqueue (queue research)"
    assert lines[1].startswith("  waits: capacity: 2 pod(s) wait for nodes of pool h100")
    assert lines[2] == "  waits: gate: 1 node(s) of pool h100 are in their health check: ip-10-40-1-1"


def test_status_of_a_gang_waiting_beside_idle_nodes_says_since_when_its_clock_runs(api, kubeconfig, capsys):
    job = _job()
    job["metadata"]["annotations"] = {WAITING_SINCE_ANNOTATION: "2026-01-01T10:00:00Z"}
    api.put(job)
    api.put(_podgroup("llama-ft", "llm", "Inqueue", "2026-01-01T00:00:00Z"))
    api.put(_pod("Master", 0, None, "Pending"))
    assert main(["jobs", "status", "prod", "llama-ft", "-n", "llm", "--json"]) == 0
    clock = json.loads(capsys.readouterr().out)["waiting"][-1]
    assert clock.startswith("deadline: its gang has waited beside idle nodes since 2026-01-01T10:00:00Z")
    assert "`higgsfield timeline STACK --job h100` prints it" in clock


def test_status_as_a_team_member_says_what_it_can_without_the_cluster_scoped_reads_it_may_not_make(
    api, kubeconfig, capsys
):
    """A team's people may read their namespace (EKS's edit policy, the higgsfield-jobs Role), not
    nodes nor other namespaces' PodGroups: no queue position, no gate, still the wait for quota."""
    api.allow = lambda verb, group, resource, namespace: namespace == "llm"
    api.put(_job())
    api.put(_podgroup("llama-ft", "llm", "Pending", "2026-01-01T00:05:00Z"))
    assert main(["jobs", "status", "prod", "-f", JOB_FILE, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["position"] is None and [w.split(":")[0] for w in status["waiting"]] == ["quota"]


def test_a_job_the_user_may_not_read_is_the_apis_forbidden(api, kubeconfig, capsys):
    api.allow = lambda verb, group, resource, namespace: namespace == "vision"
    assert main(["jobs", "cancel", "prod", "-f", JOB_FILE]) == 2
    assert capsys.readouterr().err == (
        'error: 403 Forbidden: pytorchjobs.kubeflow.org "llama-ft" is forbidden: User "me" cannot delete resource '
        '"pytorchjobs" '
        'in API group "kubeflow.org" in the namespace "llm"\n'
    )


def test_status_of_a_running_job_lists_its_pods_and_nodes_and_no_wait(api, kubeconfig, capsys):
    api.put(_job(conditions=("Created", "Running")))
    api.put(_podgroup("llama-ft", "llm", "Running", "2026-01-01T00:00:00Z"))
    api.put(_pod("Master", 0, "node-a"))
    api.put(_pod("Worker", 0, "node-b"))
    assert main(["jobs", "status", "prod", "-f", JOB_FILE, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["state"], status["waiting"], status["nodes"]) == ("Running", [], ["node-a", "node-b"])


@pytest.mark.parametrize("action", ["status", "logs", "suspend", "resume", "cancel"])
def test_a_job_file_of_a_team_the_stack_lacks_is_one_line_naming_its_team_before_the_cluster_is_asked(
    api, kubeconfig, capsys, tmp_path, action
):
    job = tmp_path / "job.yaml"
    job.write_text(Path(JOB_FILE).read_text().replace("team: llm", "team: robotics"))
    assert main(["jobs", action, "prod", "-f", str(job)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {job}: team: no team 'robotics' in stack prod") and err.count("\n") == 1, err
    assert api.requests == []


def test_status_of_a_job_that_does_not_exist_is_the_apis_not_found(api, kubeconfig, capsys):
    assert main(["jobs", "status", "prod", "nope", "-n", "llm"]) == 2
    assert capsys.readouterr().err == 'error: 404 NotFound: pytorchjobs "nope" not found\n'


def test_logs_merge_every_ranks_lines_by_time_each_prefixed_with_node_and_replica(api, kubeconfig, capsys):
    api.put(_pod("Master", 0, "node-a"))
    api.put(_pod("Worker", 0, "node-b"))
    api.log("llm", "llama-ft-master-0", "[rank 0] step 1", at="2026-01-01T00:00:01.5Z")
    api.log("llm", "llama-ft-worker-0", "[rank 8] step 1", at="2026-01-01T00:00:01.25Z")
    api.log("llm", "llama-ft-master-0", "[rank 3] step 2", at="2026-01-01T00:00:02.000000001Z")
    api.log("llm", "llama-ft-worker-0", "[rank 9] step 2", at="2026-01-01T00:00:02Z")
    assert main(["jobs", "logs", "prod", "-f", JOB_FILE]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "node-b worker-0 [rank 8] step 1",
        "node-a master-0 [rank 0] step 1",
        "node-b worker-0 [rank 9] step 2",
        "node-a master-0 [rank 3] step 2",
    ]


def test_logs_follow_streams_the_lines_written_while_it_runs_from_pods_that_start_later(api, kubeconfig, capsys):
    api.put(_job())
    api.put(_pod("Master", 0, "node-a"))
    api.log("llm", "llama-ft-master-0", "[rank 0] started")
    steps = [
        (0.3, lambda: api.log("llm", "llama-ft-master-0", "[rank 0] step 1")),
        (0.5, lambda: api.put(_pod("Worker", 0, "node-b"))),  # the gang's other pod, or one the operator recreated
        (0.7, lambda: api.log("llm", "llama-ft-worker-0", "[rank 8] step 1")),
        (1.0, lambda: [api.put(_pod(r, 0, n, "Succeeded")) for r, n in (("Master", "node-a"), ("Worker", "node-b"))]),
    ]
    for delay, step in steps:
        threading.Timer(delay, step).start()
    assert main(["jobs", "logs", "prod", "llama-ft", "-n", "llm", "--follow"]) == 0  # ends when every pod has
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "node-a master-0 [rank 0] started",
        "node-a master-0 [rank 0] step 1",
        "node-b worker-0 [rank 8] step 1",
    ]


def test_logs_follow_whose_watch_connection_drops_fails_rather_than_ending_as_if_the_job_had(api, kubeconfig, capsys):
    """A watch cut short (a proxy's timeout, an API server restarting) raises the client's own error, not an
    ApiException: the follow used to end with exit 0 while the job's pods ran on."""
    api.put(_job())
    api.put(_pod("Master", 0, "node-a"))
    api.drop_watches = True
    assert main(["jobs", "logs", "prod", "llama-ft", "-n", "llm", "--follow"]) == 2
    err = capsys.readouterr().err
    assert "the watch of pytorchjob/llama-ft's pods in llm stopped before the job ended" in err
    assert "follow it again" in err


def test_logs_follow_of_a_job_that_does_not_exist_is_not_found_at_once(api, kubeconfig, capsys):
    assert main(["jobs", "logs", "prod", "nope", "-n", "llm", "--follow"]) == 2
    assert capsys.readouterr().err == 'error: 404 NotFound: pytorchjobs "nope" not found\n'


def test_cancel_deletes_the_job_and_cancelling_again_is_not_found(api, kubeconfig, capsys):
    api.put(_job())
    assert main(["jobs", "cancel", "prod", "-f", JOB_FILE]) == 0
    assert api.get(JOB_PATH) is None and capsys.readouterr().out == "pytorchjob/llama-ft deleted\n"
    assert main(["jobs", "cancel", "prod", "-f", JOB_FILE]) == 2
    assert capsys.readouterr().err == 'error: 404 NotFound: pytorchjobs "llama-ft" not found\n'


def test_the_python_api_submits_reports_and_cancels_the_same_job(api, kubeconfig):
    from infra.cli.client import Job

    job = Job(
        "prod",
        name="llama-ft",
        team="llm",
        command=["python", "train.py"],
        resources={"gpus": 16, "gpuType": ["H100", "H200"], "interconnect": "efa", "cudaDriver": ">=570"},
    )
    assert [o["kind"] for o in job.submit(dry_run=True)] == ["ConfigMap", "PyTorchJob"] and not api.objects
    job.submit()
    api.put(_pod("Master", 0, "node-a"))
    api.log("llm", "llama-ft-master-0", "[rank 0] hello", at="2026-01-01T00:00:00Z")
    assert job.status().state == "Submitted" and job.status().pods == [("llama-ft-master-0", "Running", "node-a")]
    assert [str(line) for line in job.logs()] == ["node-a master-0 [rank 0] hello"]
    job.cancel()
    assert api.get(JOB_PATH) is None


def test_the_notebook_example_in_the_manual_runs_as_written(api, kubeconfig, capsys):
    page = (ROOT / "docs" / "concepts" / "training-jobs.md").read_text()
    code = page.split("### From a notebook: the Python API", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    api.put(_pod("Master", 0, "node-a"))  # what the operator would create once the job is applied
    api.log("llm", "llama-ft-master-0", "[rank 0] hello", at="2026-01-01T00:00:00Z")
    exec(compile(code, "training-jobs.md", "exec"), {})  # noqa: S102 - the manual's own example
    out = capsys.readouterr().out
    assert "PyTorchJob llm/llama-ft: Submitted" in out and "node-a master-0 [rank 0] hello" in out
    assert api.get(JOB_PATH) is None  # it ends by cancelling


def test_the_python_functions_take_a_job_and_follow_its_logs(api, kubeconfig):
    from infra.cli.client import Job, cancel, logs, status, submit

    job = Job.from_file(JOB_FILE, "prod")
    submit(job)
    api.put(_pod("Master", 0, "node-a"))
    api.log("llm", "llama-ft-master-0", "[rank 0] step 1", at="2026-01-01T00:00:00Z")
    threading.Timer(0.3, lambda: api.put(_pod("Master", 0, "node-a", "Succeeded"))).start()
    assert [str(line) for line in logs(job, follow=True)] == ["node-a master-0 [rank 0] step 1"]
    assert status(job).pods == [("llama-ft-master-0", "Succeeded", "node-a")]
    cancel(job)
    assert api.get(JOB_PATH) is None


def _gpu_pod(replica: str, bound: str, started: str) -> dict:
    pod = _pod(replica, 0, f"node-{replica.lower()}")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}]
    pod["status"]["containerStatuses"] = [
        {
            "name": "pytorch",
            "image": "i",
            "imageID": "i",
            "ready": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": started}},
        }
    ]
    return pod


def test_status_shows_the_jobs_goodput_and_where_the_rest_of_its_gpu_hours_went(api, kubeconfig, capsys):
    """Two pods of 8 GPUs: the master bound at 01:00 waits half an hour for the worker; both run the
    pre-flight (6 minutes, from its line) and train until 04:00; before them, the watchdog restarted
    the job after a 15-minute stall (its TrainingHung Event at 00:45)."""
    from infra.cli import client

    api.put(_job(conditions=("Created", "Running")))
    api.put(_podgroup("llama-ft", "llm", "Running", "2026-01-01T00:00:00Z"))
    api.put(_gpu_pod("Master", "2026-01-01T01:00:00Z", "2026-01-01T01:30:00Z"))
    api.put(_gpu_pod("Worker", "2026-01-01T01:30:00Z", "2026-01-01T01:30:00Z"))
    for pod in ("llama-ft-master-0", "llama-ft-worker-0"):
        api.log("llm", pod, "preflight rank 0/2 node n: ok in 360.0s; memlock ok", at="2026-01-01T01:36:00Z")
    api.put(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "llama-ft.watchdog-1", "namespace": "llm"},
            "involvedObject": {"kind": "PyTorchJob", "name": "llama-ft", "namespace": "llm"},
            "reason": "TrainingHung",
            "message": "no training step for 900s, over 900s (...); restarting the gang from its newest checkpoint",
            "lastTimestamp": "2026-01-01T00:45:00Z",
        }
    )
    from infra.offline.goodput import seconds

    found = client.read_status(client.connect(kubeconfig), "llama-ft", "llm", now=seconds("2026-01-01T04:00:00Z"))
    assert found.goodput is not None
    assert found.goodput.line() == (
        "goodput 69% of 56.0 GPU-hours (lost to preflight 3%, waiting 7%, hung 7%, restart 14%)"
    )
    assert found.lines()[-1] == "  " + found.goodput.line()
    hours = found.as_dict()["goodput"]["gpuHours"]
    assert (hours["training"], hours["preflight"], hours["waiting"], hours["hung"], hours["restart"]) == (
        38.4,
        1.6,
        4.0,
        4.0,
        8.0,
    )


def _team_pod(job: str, replica: str, bound: str, started: str, namespace: str = "llm") -> dict:
    pod = _gpu_pod(replica, bound, started)
    pod["metadata"].update(name=f"{job}-{replica.lower()}-0", namespace=namespace, uid=f"uid-{job}-{replica}")
    pod["metadata"]["labels"][JOB_NAME_LABEL] = job
    return pod


def _seed_team(api) -> None:
    """Team llm: llama-ft (PyTorchJob, two 8-GPU pods, the worker bound an hour after the master, both
    training from 01:00... see each test) and nccl (an MPIJob's one 8-GPU worker training two hours);
    team vision's job, which llm's goodput must not count."""
    api.put(_job(conditions=("Created", "Running")))
    api.put(_team_pod("llama-ft", "Master", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"))
    api.put(_team_pod("llama-ft", "Worker", "2026-01-01T01:00:00Z", "2026-01-01T01:00:00Z"))
    mpi = {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "nccl", "namespace": "llm"}}
    api.put({**mpi, "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1}}}})
    api.put(_team_pod("nccl", "Worker", "2026-01-01T01:00:00Z", "2026-01-01T01:00:00Z"))
    api.put({**_job(), "metadata": {"name": "detector", "namespace": "vision"}})
    api.put(_team_pod("detector", "Master", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", namespace="vision"))


def test_a_teams_goodput_sums_its_jobs_gpu_hours_phase_by_phase(api, kubeconfig):
    """At 03:00: llama-ft's master waited an hour for its worker (8 GPU-hours), then both trained two
    hours (32); nccl's worker trained two hours (16). Team llm: 48 of 56 GPU-hours training."""
    from infra.cli import client
    from infra.offline.goodput import seconds

    _seed_team(api)
    team = client.read_team_goodput(client.connect(kubeconfig), "llm", now=seconds("2026-01-01T03:00:00Z"))
    assert [(kind, name) for kind, name, _ in team.jobs] == [("PyTorchJob", "llama-ft"), ("MPIJob", "nccl")]
    summed = team.as_dict()["goodput"]
    assert (summed["allocatedGpuHours"], summed["gpuHours"]["training"], summed["gpuHours"]["waiting"]) == (
        56.0,
        48.0,
        8.0,
    )
    assert summed["share"] == round(48 / 56, 4)


def test_jobs_status_with_only_a_team_prints_its_goodput_by_phase_and_each_jobs(api, kubeconfig, capsys):
    _seed_team(api)
    assert main(["jobs", "status", "prod", "-n", "llm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("team llm: 2 job(s), goodput ")
    assert [line.split()[0] for line in lines[1:8]] == [
        "training",
        "checkpoint",
        "preflight",
        "gate",
        "waiting",
        "hung",
        "restart",
    ]
    assert lines[8].startswith("  PyTorchJob llama-ft: goodput ") and lines[9].startswith("  MPIJob nccl: goodput ")


def test_jobs_status_of_a_team_as_json_names_each_job_and_the_teams_sum(api, kubeconfig, capsys):
    _seed_team(api)
    assert main(["jobs", "status", "prod", "--team", "vision", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["namespace"] == "vision" and [j["name"] for j in found["jobs"]] == ["detector"]
    assert found["goodput"]["allocatedGpuHours"] == found["jobs"][0]["goodput"]["allocatedGpuHours"] > 0


def _ended_batch_pod(index: int, bound: str, started: str, finished: str) -> dict:
    """A pod of the batch Job `eval` holding one GPU, bound, run and ended at the times given."""
    pod = _batch_pod(index, f"node-{index}", "Succeeded")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}]
    run = {"startedAt": started, "finishedAt": finished, "exitCode": 0, "reason": "Completed"}
    pod["status"]["containerStatuses"] = [
        {"name": "eval", "image": "i", "imageID": "i", "ready": False, "restartCount": 0, "state": {"terminated": run}}
    ]
    return pod


def _team_batch_goodput(capsys) -> dict:
    assert main(["jobs", "status", "prod", "-n", "llm", "--json"]) == 0
    (job,) = [j for j in json.loads(capsys.readouterr().out)["jobs"] if j["kind"] == "Job"]
    return job


def test_a_teams_goodput_counts_its_batch_jobs_runs_one_after_another_with_no_wait(api, kubeconfig, capsys):
    """An Indexed Job of one pod at a time (Volcano's minMember 1, no gang): shard 0 ran 00:00-01:00, shard 1
    01:00-02:00, one GPU each; two GPU-hours of work, none waiting for a gang."""
    api.put(_batch_job({"succeeded": 2}))
    api.put(_ended_batch_pod(0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"))
    api.put(_ended_batch_pod(1, "2026-01-01T01:00:00Z", "2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"))
    job = _team_batch_goodput(capsys)
    assert (job["name"], job["goodput"]["allocatedGpuHours"], job["goodput"]["share"]) == ("eval", 2.0, 1.0)


def test_a_teams_goodput_counts_a_batch_jobs_gang_wait_by_its_min_member_annotation(api, kubeconfig, capsys):
    """Volcano's PodGroup of the Job holds two pods as one gang (the Job's group-min-member 2): shard 0, bound at
    00:00, waits half an hour for shard 1; both run to 01:30, when shard 2 starts on its own until 02:30."""
    job = _batch_job({"succeeded": 3})
    job["metadata"]["annotations"] = {MIN_MEMBER_ANNOTATION: "2"}
    api.put(job)
    api.put(_ended_batch_pod(0, "2026-01-01T00:00:00Z", "2026-01-01T00:30:00Z", "2026-01-01T01:30:00Z"))
    api.put(_ended_batch_pod(1, "2026-01-01T00:30:00Z", "2026-01-01T00:30:00Z", "2026-01-01T01:30:00Z"))
    api.put(_ended_batch_pod(2, "2026-01-01T01:30:00Z", "2026-01-01T01:30:00Z", "2026-01-01T02:30:00Z"))
    hours = _team_batch_goodput(capsys)["goodput"]["gpuHours"]
    assert (hours["waiting"], hours["training"]) == (0.5, 3.0)


def test_a_teams_goodput_line_of_a_batch_job_says_its_hangs_are_not_counted(api, kubeconfig, capsys):
    api.put(_batch_job({"succeeded": 1}))
    api.put(_ended_batch_pod(0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"))
    assert main(["jobs", "status", "prod", "-n", "llm"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  Job eval: ")]
    assert line.startswith("  Job eval: goodput 100% of 1.0 GPU-hours; hung not counted")


def test_a_teams_goodput_leaves_out_the_kinds_the_user_may_not_list(api, kubeconfig, capsys):
    api.allow = lambda verb, group, resource, namespace: resource != "mpijobs"
    _seed_team(api)
    assert main(["jobs", "status", "prod", "-n", "llm", "--json"]) == 0
    assert [j["kind"] for j in json.loads(capsys.readouterr().out)["jobs"]] == ["PyTorchJob"]


def test_without_a_kubeconfig_the_error_gives_the_command_for_this_stacks_cluster(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert main(["jobs", "status", "dev", "llama-ft", "-n", "ml"]) == 2
    assert "`aws eks update-kubeconfig --region us-west-2 --name higgsfield-dev` writes one" in capsys.readouterr().err


def _suspended_job(gave_back_at: str | None = None) -> dict:
    """A job whose pods and PodGroup its operator deleted on runPolicy.suspend (its Suspended condition)."""
    job = _job(conditions=("Created", "Running", "Suspended"))
    job["spec"]["runPolicy"]["suspend"] = True
    if gave_back_at:
        job["metadata"]["annotations"] = {GAVE_BACK_ANNOTATION: gave_back_at}
    return job


def test_status_of_a_job_the_gang_deadline_suspended_says_when_it_queues_again(api, kubeconfig, capsys):
    api.put(_suspended_job("2026-01-01T10:00:00Z"))
    assert main(["jobs", "status", "prod", "-f", JOB_FILE, "--json"]) == 0
    (why,) = json.loads(capsys.readouterr().out)["waiting"]
    assert why.startswith("suspended: the gang deadline gave its nodes back at 2026-01-01T10:00:00Z")
    assert "queues again from 2026-01-01T10:30:00Z" in why


def test_status_of_a_job_its_team_paused_says_it_waits_for_its_resume(api, kubeconfig, capsys):
    api.put(_suspended_job())
    assert main(["jobs", "status", "prod", "-f", JOB_FILE, "--json"]) == 0
    (why,) = json.loads(capsys.readouterr().out)["waiting"]
    assert why.startswith("suspended: runPolicy.suspend is true")


def test_status_shows_a_pod_being_deleted_on_a_lost_node_as_terminating(api, kubeconfig, capsys):
    """Its phase stays Running, bound to the node, until the Node object goes: kubectl's STATUS says Terminating."""
    api.put(_job(conditions=("Created", "Running", "Restarting")))
    api.put(_podgroup("llama-ft", "llm", "Inqueue", "2026-01-01T00:00:00Z"))
    lost = _pod("Worker", 0, "node-b")
    lost["metadata"]["deletionTimestamp"] = "2026-01-01T01:00:00Z"
    api.put(lost)
    api.put(_pod("Master", 0, None, "Pending"))
    assert main(["jobs", "status", "prod", "-f", JOB_FILE]) == 0
    assert "  llama-ft-worker-0: Terminating on node-b" in capsys.readouterr().out.splitlines()


# --- suspend and resume ----------------------------------------------------------------------------


def _patches(api) -> list[str]:
    return [path for verb, path in api.requests if verb == "PATCH"]


def test_suspend_sets_a_kubeflow_jobs_run_policy_suspend_and_keeps_the_rest(api, kubeconfig, capsys):
    api.put(_job(conditions=("Created", "Running")))
    assert main(["jobs", "suspend", "prod", "llama-ft", "-n", "llm"]) == 0
    stored = api.get(JOB_PATH)
    assert stored["spec"]["runPolicy"] == {"schedulingPolicy": {"queue": "research"}, "suspend": True}
    assert stored["spec"]["pytorchReplicaSpecs"] == _job()["spec"]["pytorchReplicaSpecs"]
    assert capsys.readouterr().out.startswith("pytorchjob/llama-ft suspended: its pods go and its nodes are given back")


def test_suspend_of_a_batch_job_sets_its_spec_suspend(api, kubeconfig, capsys):
    api.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "eval", "namespace": "llm"}, "spec": {}})
    assert main(["jobs", "suspend", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    assert api.get("/apis/batch/v1/namespaces/llm/jobs/eval")["spec"] == {"suspend": True}


def test_resume_sets_suspend_false_on_a_job_its_team_paused(api, kubeconfig, capsys):
    api.put(_suspended_job())
    assert main(["jobs", "resume", "prod", "-f", JOB_FILE]) == 0
    assert api.get(JOB_PATH)["spec"]["runPolicy"]["suspend"] is False
    assert capsys.readouterr().out == "pytorchjob/llama-ft resumed: its gang queues again\n"


def test_resume_of_a_job_the_gang_deadline_gave_back_is_refused_before_any_patch_naming_when_it_queues_again(
    api, kubeconfig, capsys
):
    api.put(_suspended_job("2026-01-01T10:00:00Z"))
    assert main(["jobs", "resume", "prod", "llama-ft", "-n", "llm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: pytorchjob/llama-ft is the gang deadline's to resume, not its team's: suspended:")
    assert "queues again from 2026-01-01T10:30:00Z" in err and err.count("\n") == 1
    assert _patches(api) == []


def test_suspending_a_suspended_job_says_so_and_patches_nothing(api, kubeconfig, capsys):
    api.put(_suspended_job())
    assert main(["jobs", "suspend", "prod", "llama-ft", "-n", "llm"]) == 0
    assert capsys.readouterr().out == "pytorchjob/llama-ft is already suspended\n"
    assert _patches(api) == []


def test_resuming_a_running_job_says_so_and_patches_nothing(api, kubeconfig, capsys):
    api.put(_job(conditions=("Created", "Running")))
    assert main(["jobs", "resume", "prod", "llama-ft", "-n", "llm"]) == 0
    assert capsys.readouterr().out == "pytorchjob/llama-ft is not suspended: nothing to resume\n"
    assert _patches(api) == []


def test_a_serving_job_cannot_be_suspended_and_says_what_to_do_instead(api, kubeconfig, capsys):
    assert main(["jobs", "suspend", "prod", "classifier", "-n", "llm", "--kind", "Deployment"]) == 2
    assert capsys.readouterr().err == (
        "error: a serving job's Deployment has no suspend: scale it to 0 or cancel classifier\n"
    )


# The team admission policy's CEL (components/tenancy.py, evaluated with cel-expr-python) on the CLI's patches,
# over the wire: the job as `jobs submit` renders it, so that only the patch is judged.


@pytest.fixture
def team_policy(api):
    """The llm team's own policy on every UPDATE of its PyTorchJobs, as a team member sends it."""
    from components import tenancy
    from components.teams import rules_of
    from infra.offline.evaluate import load_stack
    from tests.cli.test_verify_checks import _vap_denial
    from tests.security.test_tenancy import verdicts

    cfg = load_stack("prod")
    (team,) = [t for t in cfg.scheduler.teams if t.name == "llm"]
    policy = tenancy.admission_policy(rules_of(team, cfg.scheduler.priority_classes, pools=cfg.gpu_pools))

    def admit(verb, obj, old):
        if verb != "UPDATE" or obj.get("kind") != "PyTorchJob":
            return None
        judged = verdicts(policy, obj, operation="UPDATE", old=old, user="alice@llm")
        denied = next((message for message, ok in judged if not ok), None)
        return denied and _vap_denial("llm", obj, denied)

    api.admit = admit


def _submitted(suspended: bool = False) -> dict:
    from infra.offline import team_job
    from infra.offline.evaluate import load_stack

    _, objects, _ = team_job.render_file(JOB_FILE, load_stack("prod"))
    (job,) = [o for o in objects if o["kind"] == "PyTorchJob"]
    job["spec"]["runPolicy"]["suspend"] = suspended
    return job


def test_the_team_policy_admits_its_suspend_of_its_own_running_job(api, kubeconfig, team_policy, capsys):
    api.put(_submitted())
    assert main(["jobs", "suspend", "prod", "-f", JOB_FILE]) == 0
    assert api.get(JOB_PATH)["spec"]["runPolicy"]["suspend"] is True


def test_the_team_policy_admits_its_resume_of_a_job_it_paused(api, kubeconfig, team_policy, capsys):
    api.put(_submitted(suspended=True))
    assert main(["jobs", "resume", "prod", "-f", JOB_FILE]) == 0
    assert api.get(JOB_PATH)["spec"]["runPolicy"]["suspend"] is False


def test_the_team_policy_refuses_a_resume_the_gang_deadline_gave_back_in_between_in_one_line(
    api, kubeconfig, team_policy, capsys
):
    """The CLI checks before it patches; the policy is what holds. Here the job was the team's to resume when
    the CLI read it, and the gang deadline's (GAVE_BACK_ANNOTATION) when the patch arrived."""
    api.put(_submitted(suspended=True))
    given_back = _submitted(suspended=True)
    given_back["metadata"]["annotations"] = {GAVE_BACK_ANNOTATION: "2026-01-01T10:00:00Z"}

    def allow(verb, group, resource, namespace):
        if verb == "patch":
            api.put(given_back)
        return True

    api.allow = allow
    assert main(["jobs", "resume", "prod", "-f", JOB_FILE]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: 403 Forbidden: pytorchjobs "llama-ft" is forbidden: ValidatingAdmissionPolicy')
    assert f"a job the gang deadline suspended ({GAVE_BACK_ANNOTATION}) stays suspended" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert api.get(JOB_PATH)["spec"]["runPolicy"]["suspend"] is True


def test_the_python_api_pauses_a_job_and_queues_it_again(api, kubeconfig):
    from infra.cli.client import Job

    api.put(_job(conditions=("Created", "Running")))
    job = Job.from_file(JOB_FILE, stack="prod")
    assert job.suspend() is True and api.get(JOB_PATH)["spec"]["runPolicy"]["suspend"] is True
    assert job.resume() is True and api.get(JOB_PATH)["spec"]["runPolicy"]["suspend"] is False


# --- a batch Job (`--kind Job`): a plain gang's, as examples/eval-sweep.yaml renders it -------------------------

BATCH_PATH = "/apis/batch/v1/namespaces/llm/jobs/eval"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


def _batch_job(status: dict | None = None, uid: str = "u-eval") -> dict:
    """A Job as the API server stores it: its generated selector and template labels (the Job's UID)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "eval", "namespace": "llm", "uid": uid},
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "selector": {"matchLabels": {CONTROLLER_UID_LABEL: uid}},
            "template": {
                "metadata": {"labels": {CONTROLLER_UID_LABEL: uid, "batch.kubernetes.io/job-name": "eval"}},
                "spec": {"nodeSelector": {POOL_LABEL: "h100"}, "containers": [{"name": "eval", "image": "i"}]},
            },
        },
        "status": status or {},
    }


def _batch_pod(index: int, node: str | None, phase: str = "Running", uid: str = "u-eval") -> dict:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "eval", "uid": uid, "controller": True}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"eval-{index}-{uid[-4:]}",
            "namespace": "llm",
            "uid": f"uid-eval-{index}-{uid}",
            "labels": {CONTROLLER_UID_LABEL: uid, "batch.kubernetes.io/job-name": "eval"},
            "annotations": {GROUP_NAME_ANNOTATION: f"podgroup-{uid}"},
            "ownerReferences": [owner],
        },
        "spec": {"containers": [{"name": "eval", "image": "i"}], **({"nodeName": node} if node else {})},
        "status": {"phase": phase},
    }


def test_status_of_a_batch_job_says_its_pods_counts_its_volcano_gang_and_why_it_waits(api, kubeconfig, capsys):
    api.put(_batch_job({"active": 2, "succeeded": 0}))
    api.put(_podgroup("podgroup-u-eval", "llm", "Inqueue", "2026-01-01T00:00:00Z", "1/2 tasks in gang unschedulable"))
    api.put(_batch_pod(0, "node-a"))
    api.put(_batch_pod(1, None, "Pending"))
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Job llm/eval: Running, 2 active, 0 succeeded, 0 failed of 2; gang Inqueue (queue research)"
    assert lines[1].startswith("  waits: capacity: 1 pod(s) wait for nodes of pool h100")
    assert lines[2:4] == ["  eval-0-eval: Running on node-a", "  eval-1-eval: Pending"]


def test_status_of_a_finished_batch_job_is_its_condition_and_no_wait(api, kubeconfig, capsys):
    conditions = [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]
    api.put(_batch_job({"succeeded": 2, "conditions": conditions}))
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["state"], status["waiting"]) == ("Complete, 0 active, 2 succeeded, 0 failed of 2", [])


def test_status_of_a_batch_job_its_team_paused_says_it_waits_for_its_resume(api, kubeconfig, capsys):
    job = _batch_job({"conditions": [{"type": "Suspended", "status": "True"}]})
    job["spec"]["suspend"] = True
    api.put(job)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job", "--json"]) == 0
    (why,) = json.loads(capsys.readouterr().out)["waiting"]
    assert why.startswith("suspended: suspend is true")


def test_logs_of_a_batch_job_read_its_own_pods_not_those_an_earlier_job_of_its_name_left(api, kubeconfig, capsys):
    api.put(_batch_job())
    api.put(_batch_pod(0, "node-a"))
    api.put(_batch_pod(0, "node-b", uid="u-old1"))  # left running by an earlier `eval` deleted with orphan
    api.log("llm", "eval-0-eval", "shard 0 done", at="2026-01-01T00:00:01Z")
    api.log("llm", "eval-0-old1", "the earlier job's shard", at="2026-01-01T00:00:00Z")
    assert main(["jobs", "logs", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    assert capsys.readouterr().out.splitlines() == ["node-a eval-0-eval shard 0 done"]


def test_logs_follow_of_a_batch_job_streams_its_pods_until_the_job_ends(api, kubeconfig, short_rechecks, capsys):
    api.put(_batch_job())
    api.put(_batch_pod(0, "node-a"))
    api.log("llm", "eval-0-eval", "shard 0 started")
    threading.Timer(0.3, lambda: api.put(_batch_pod(0, "node-a", "Succeeded"))).start()
    complete = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    threading.Timer(0.5, lambda: api.put(_batch_job(complete))).start()
    assert main(["jobs", "logs", "prod", "eval", "-n", "llm", "--kind", "Job", "--follow"]) == 0
    assert capsys.readouterr().out.splitlines() == ["node-a eval-0-eval shard 0 started"]


def test_cancel_of_a_batch_job_deletes_it_and_its_running_pods(api, kubeconfig, capsys):
    api.put(_batch_job({"active": 1}))
    api.put(_batch_pod(0, "node-a"))
    assert main(["jobs", "cancel", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    assert capsys.readouterr().out == "job/eval deleted\n"
    assert api.get(BATCH_PATH) is None and api.get("/api/v1/namespaces/llm/pods/eval-0-eval") is None


def test_the_cancel_of_a_batch_job_is_one_the_teams_release_guard_admits(api, kubeconfig, capsys):
    """The guard refuses a Job's DELETE that would orphan its pods (components/tenancy.py pod_release_guard, evaluated
    with cel-expr-python): the DELETE options the cancel sent over the wire are judged by it."""
    from urllib.parse import parse_qs, urlsplit

    from components import tenancy
    from tests.security.test_tenancy import verdicts

    api.put(_batch_job())
    assert main(["jobs", "cancel", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    (sent,) = [urlsplit(path) for verb, path in api.requests if verb == "DELETE"]
    assert sent.path == BATCH_PATH
    options = {key: values[-1] for key, values in parse_qs(sent.query).items()}
    guard = tenancy.pod_release_guard(30)
    judged = verdicts(guard, None, operation="DELETE", options=options, resource=("batch", "jobs"), user="alice@llm")
    assert [message for message, ok in judged if not ok] == []


def test_a_teams_goodput_as_json_lists_what_of_a_batch_job_is_not_counted(api, kubeconfig, capsys):
    api.put(_batch_job({"succeeded": 1}))
    api.put(_ended_batch_pod(0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"))
    assert _team_batch_goodput(capsys)["notCounted"] == ["hung"]


def _seed_ended_batch_job(api) -> None:
    """The batch Job `eval`, done: shard 0 ran 00:00-01:00 and shard 1 01:00-02:00, one GPU each."""
    api.put(_batch_job({"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}))
    api.put(_ended_batch_pod(0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"))
    api.put(_ended_batch_pod(1, "2026-01-01T01:00:00Z", "2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"))


def test_status_of_a_batch_job_shows_its_goodput_and_that_its_hangs_are_not_counted(api, kubeconfig, capsys):
    _seed_ended_batch_job(api)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("  goodput 100% of 2.0 GPU-hours; hung not counted (the watchdog sees only Kubeflow jobs")


def test_status_of_a_batch_job_as_json_carries_its_goodput_and_what_of_it_is_not_counted(api, kubeconfig, capsys):
    _seed_ended_batch_job(api)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["goodput"]["allocatedGpuHours"], status["goodput"]["gpuHours"]["training"]) == (2.0, 2.0)
    assert status["notCounted"] == ["hung"]


# A Job with `manualSelector: true` selects its pods by its own selector, matchExpressions included.
EXPRESSIONS = [
    {"key": "shard", "operator": "In", "values": ["b", "a"]},
    {"key": "tier", "operator": "NotIn", "values": ["canary"]},
    {"key": "app", "operator": "Exists"},
    {"key": "retired", "operator": "DoesNotExist"},
]


def _selected_batch_job(match_labels: dict | None = None) -> dict:
    job = _batch_job({"active": 2})
    selector = {"matchExpressions": EXPRESSIONS, **({"matchLabels": match_labels} if match_labels else {})}
    job["spec"] |= {"manualSelector": True, "selector": selector}
    return job


def _labelled_pod(name: str, labels: dict) -> dict:
    pod = _batch_pod(0, "node-a")
    pod["metadata"] |= {"name": name, "uid": f"uid-{name}", "labels": labels}
    return pod


def _put_expression_pods(api: FakeKubernetesApi) -> None:
    """Two pods the Job's selector selects and one each of its requirements leaves out (other-team: matchLabels
    {"team": "llm"})."""
    selected = {"team": "llm", "app": "eval"}
    for name, labels in {
        "eval-a": {**selected, "shard": "a"},
        "eval-b": {**selected, "shard": "b", "tier": "main"},
        "eval-c": {**selected, "shard": "c"},
        "eval-canary": {**selected, "shard": "a", "tier": "canary"},
        "eval-noapp": {"team": "llm", "shard": "a"},
        "eval-retired": {**selected, "shard": "b", "retired": "yes"},
        "other-team": {"team": "vision", "app": "eval", "shard": "a"},
    }.items():
        api.put(_labelled_pod(name, labels))
        api.log("llm", name, f"{name} says hi", at="2026-01-01T00:00:01Z")


def test_status_of_a_batch_job_selecting_by_match_expressions_only_lists_the_pods_they_select(api, kubeconfig, capsys):
    api.put(_selected_batch_job())
    _put_expression_pods(api)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job", "--json"]) == 0
    assert [p["name"] for p in json.loads(capsys.readouterr().out)["pods"]] == ["eval-a", "eval-b", "other-team"]


def test_logs_of_a_batch_job_selecting_by_labels_and_expressions_read_the_pods_both_select(api, kubeconfig, capsys):
    api.put(_selected_batch_job({"team": "llm"}))
    _put_expression_pods(api)
    assert main(["jobs", "logs", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    assert capsys.readouterr().out.splitlines() == ["node-a eval-a eval-a says hi", "node-a eval-b eval-b says hi"]


def test_a_kind_the_platform_does_not_run_is_refused_naming_kind_and_the_kinds_it_takes(api, kubeconfig, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Foo"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert "argument --kind: invalid choice: 'Foo'" in err
    assert all(kind in err for kind in ("PyTorchJob", "MPIJob", "TFJob", "Deployment")) and re.search(r"\bJob\b", err)
    assert api.requests == []


def _put_sibling_pods(api: FakeKubernetesApi) -> None:
    """Under the manualSelector Job `eval` (EXPRESSIONS): its pod eval-a, and sibling-a of another Job whose pods its
    selector selects too (the same labels, the other Job's controller reference)."""
    labels = {"team": "llm", "app": "eval", "shard": "a"}
    api.put(_labelled_pod("eval-a", labels))
    sibling = _labelled_pod("sibling-a", labels)
    sibling["metadata"]["ownerReferences"] = [{**sibling["metadata"]["ownerReferences"][0], "uid": "u-sibling"}]
    api.put(sibling)
    for name in ("eval-a", "sibling-a"):
        api.log("llm", name, f"{name} says hi", at="2026-01-01T00:00:01Z")


def test_status_of_a_manual_selector_batch_job_lists_only_the_pods_it_controls(api, kubeconfig, capsys):
    api.put(_selected_batch_job())
    _put_sibling_pods(api)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job", "--json"]) == 0
    assert [p["name"] for p in json.loads(capsys.readouterr().out)["pods"]] == ["eval-a"]


def test_logs_of_a_manual_selector_batch_job_read_only_the_pods_it_controls(api, kubeconfig, capsys):
    api.put(_selected_batch_job())
    _put_sibling_pods(api)
    assert main(["jobs", "logs", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    assert capsys.readouterr().out.splitlines() == ["node-a eval-a eval-a says hi"]


def test_logs_follow_of_a_manual_selector_batch_job_streams_only_the_pods_it_controls(
    api, kubeconfig, short_rechecks, capsys
):
    api.put(_selected_batch_job())
    _put_sibling_pods(api)
    complete = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}

    def end() -> None:
        for name in ("eval-a", "sibling-a"):
            pod = api.get(f"/api/v1/namespaces/llm/pods/{name}")
            pod["status"]["phase"] = "Succeeded"
            api.put(pod)
        api.put({**_selected_batch_job(), "status": complete})

    threading.Timer(0.3, end).start()
    assert main(["jobs", "logs", "prod", "eval", "-n", "llm", "--kind", "Job", "--follow"]) == 0
    assert capsys.readouterr().out.splitlines() == ["node-a eval-a eval-a says hi"]


def _seed_sharded_batch_job(api: FakeKubernetesApi, shards: int, running: int) -> None:
    """The batch Job `eval` of `shards` one-GPU shards, each with a log: all but the last `running` done."""
    api.put(_batch_job({"active": running, "succeeded": shards - running}))
    for index in range(shards):
        pod = _ended_batch_pod(index, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z")
        if index >= shards - running:
            pod["status"]["phase"] = "Running"
            pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
        api.put(pod)
        api.log("llm", pod["metadata"]["name"], f"shard {index}", at="2026-01-01T00:00:01Z")


def _log_reads(api: FakeKubernetesApi) -> list[str]:
    return [path.split("?")[0] for verb, path in api.requests if verb == "GET" and "/log" in path]


def test_status_of_a_batch_job_of_many_shards_reads_the_logs_of_a_bounded_few_pods_its_running_ones_first(
    api, kubeconfig, capsys
):
    """512 shards: one status line must not cost a log request per pod (two: the head and the tail); the pods still
    running are those whose logs it reads."""
    from infra.cli.client import BATCH_LOGGED_PODS

    _seed_sharded_batch_job(api, 512, running=2)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    read = {path.split("/")[-2] for path in _log_reads(api)}
    assert len(read) == BATCH_LOGGED_PODS < 512
    assert {"eval-510-eval", "eval-511-eval"} <= read


def test_the_goodput_line_of_a_batch_job_says_how_many_pods_logs_were_not_read(api, kubeconfig, capsys):
    from infra.cli.client import BATCH_LOGGED_PODS

    _seed_sharded_batch_job(api, 40, running=2)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("  goodput ")
    assert f"; logs of {40 - BATCH_LOGGED_PODS} of 40 pods not read" in last


def test_status_of_a_batch_job_as_json_says_how_many_pods_logs_were_not_read(api, kubeconfig, capsys):
    from infra.cli.client import BATCH_LOGGED_PODS

    _seed_sharded_batch_job(api, 40, running=2)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["logsNotRead"] == 40 - BATCH_LOGGED_PODS


def _fail(api: FakeKubernetesApi, *indexes: int) -> None:
    for index in indexes:
        pod = api.get(f"/api/v1/namespaces/llm/pods/eval-{index}-eval")
        pod["status"]["phase"] = "Failed"
        api.put(pod)


def test_status_of_a_batch_job_of_many_shards_counts_its_pods_in_one_line_and_lists_only_the_failed(
    api, kubeconfig, capsys
):
    """512 shards were 512 lines, the three failed among them; now one line counts them and the three are listed."""
    _seed_sharded_batch_job(api, 512, running=2)
    _fail(api, 7, 300, 400)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    pods = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  eval-") or "pods:" in line]
    assert pods == [
        "  pods: 2 Running, 507 Succeeded, 3 Failed; on 512 node(s) (--json lists each)",
        "  eval-300-eval: Failed on node-300",
        "  eval-400-eval: Failed on node-400",
        "  eval-7-eval: Failed on node-7",
    ]


def test_status_of_a_batch_job_lists_at_most_sixteen_of_its_failed_pods_and_counts_the_rest(api, kubeconfig, capsys):
    from infra.cli.client import STATUS_LISTED_PODS

    _seed_sharded_batch_job(api, 64, running=0)
    _fail(api, *range(40))
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if line.startswith("  eval-") and ": Failed on " in line]) == STATUS_LISTED_PODS
    assert f"  ... and {40 - STATUS_LISTED_PODS} more neither Running nor Succeeded" in out


def test_status_of_a_batch_job_lists_its_failed_pods_before_those_pending(api, kubeconfig, capsys):
    """A job whose many pending shards wait for capacity still shows the one that failed, not sixteen that wait."""
    from infra.cli.client import STATUS_LISTED_PODS

    _seed_sharded_batch_job(api, 64, running=0)
    for index in range(STATUS_LISTED_PODS + 4):
        pod = api.get(f"/api/v1/namespaces/llm/pods/eval-{index}-eval")
        pod["status"]["phase"] = "Pending"
        api.put(pod)
    _fail(api, 50)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  eval-")]
    assert listed[0] == "  eval-50-eval: Failed on node-50"


def test_status_as_json_lists_every_pod_of_a_batch_job_of_many_shards(api, kubeconfig, capsys):
    _seed_sharded_batch_job(api, 512, running=2)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["pods"]) == 512


def test_status_of_a_batch_job_on_many_nodes_of_its_pool_lists_the_pools_nodes_once(api, kubeconfig, capsys):
    """Goodput reads each node's creation time: 40 shards on 40 nodes of pool h100 were 40 node reads; now one list."""
    _seed_sharded_batch_job(api, 40, running=2)
    for index in range(40):
        pod = api.get(f"/api/v1/namespaces/llm/pods/eval-{index}-eval")
        pod["spec"]["nodeSelector"] = {POOL_LABEL: "h100"}
        api.put(pod)
        labels = {POOL_LABEL: "h100"}
        api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{index}", "labels": labels}})
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    node_reads = [path for verb, path in api.requests if path.startswith("/api/v1/nodes")]
    assert not [path for path in node_reads if path.startswith("/api/v1/nodes/")], node_reads  # no node read alone
    assert len(node_reads) == 1, node_reads  # one list of the pool, for goodput and why the gang waits alike


def test_status_of_a_finished_job_whose_pool_nodes_are_gone_reads_no_node_one_by_one(api, kubeconfig, capsys):
    """A Job of 40 shards on pool h100 ended and its nodes scaled away: the pool's one list says they are gone, where
    each was read and answered 404 (512 requests for a 512-shard job)."""
    _seed_sharded_batch_job(api, 40, running=0)
    for index in range(40):
        pod = api.get(f"/api/v1/namespaces/llm/pods/eval-{index}-eval")
        pod["spec"]["nodeSelector"] = {POOL_LABEL: "h100"}
        api.put(pod)
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    node_reads = [path for verb, path in api.requests if path.startswith("/api/v1/nodes")]
    assert node_reads == [f"/api/v1/nodes?labelSelector={POOL_LABEL}%3Dh100"], node_reads


def test_status_of_a_kubeflow_job_on_many_nodes_of_its_pool_lists_the_pools_nodes_once(api, kubeconfig, capsys):
    """Why its gang waits reads the pool's nodes (the gate's), and so does its goodput (their creation times): one list
    of the pool answers both."""
    api.put(_job())
    api.put(_podgroup("llama-ft", "llm", "Inqueue", "2026-01-01T00:00:00Z", "1/2 tasks in gang unschedulable"))
    for index in range(12):
        pod = _pod("Worker", index, f"node-{index}")
        pod["spec"]["nodeSelector"] = {POOL_LABEL: "h100"}
        api.put(pod)
        api.put(_node(f"node-{index}"))
    assert main(["jobs", "status", "prod", "llama-ft", "-n", "llm"]) == 0
    assert [path for verb, path in api.requests if path.startswith("/api/v1/nodes")] == [
        f"/api/v1/nodes?labelSelector={POOL_LABEL}%3Dh100"
    ]


def test_status_of_a_job_on_many_nodes_asks_for_no_more_nodes_once_the_user_may_read_none(api, kubeconfig, capsys):
    """A team's role reads no node (cluster-scoped): 512 shards on 512 nodes must not cost 512 refused requests;
    the first refusal says the rest would be refused too."""
    _seed_sharded_batch_job(api, 512, running=2)
    api.allow = lambda verb, group, resource, namespace: resource != "nodes"
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    assert len([path for verb, path in api.requests if path.startswith("/api/v1/nodes/")]) == 1


def _once_its_pods_are_watched(api, then: list[tuple[float, object]]) -> None:
    """Run each step of `then` its delay after the follow's first watch of the job's pods reached the fake server
    (the command first loads the stack, a second or more)."""

    def run() -> None:
        while not any(verb == "GET" and "/pods?" in path and "watch=" in path for verb, path in api.requests):
            time.sleep(0.02)
        for delay, step in then:
            threading.Timer(delay, step).start()

    threading.Thread(target=run, daemon=True).start()


def test_logs_follow_of_a_gang_queued_longer_than_a_watch_lasts_waits_for_its_pods(api, kubeconfig, capsys):
    """The API server ends a watch after its min-request-timeout (30 to 60 minutes; the fake's after 5 of its seconds,
    here half a second), and a watch that saw no event is not resumed by the client: the follow of a gang still
    queued then ended with exit 0 and no line, as if it had run."""
    api.watch_second = 0.1
    api.put(_job())
    _once_its_pods_are_watched(
        api,
        [
            (1.2, lambda: api.put(_pod("Master", 0, "node-a"))),
            (1.4, lambda: api.log("llm", "llama-ft-master-0", "[rank 0] step 1")),
            (1.8, lambda: api.put(_pod("Master", 0, "node-a", "Succeeded"))),
        ],
    )
    assert main(["jobs", "logs", "prod", "llama-ft", "-n", "llm", "--follow"]) == 0
    assert capsys.readouterr().out.splitlines() == ["node-a master-0 [rank 0] step 1"]


def test_logs_follow_of_a_queued_gang_ends_once_the_job_is_cancelled(api, kubeconfig, capsys):
    api.watch_second = 0.1
    api.put(_job())
    _once_its_pods_are_watched(api, [(0.8, lambda: api.delete_now(JOB_PATH))])
    assert main(["jobs", "logs", "prod", "llama-ft", "-n", "llm", "--follow"]) == 0
    assert capsys.readouterr().out == ""

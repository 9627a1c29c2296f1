"""`verify --allow-cost --disruptive`: trial.node-loss runs the stack's own checkpointing job across
two nodes, terminates the EC2 instance under one of them once a checkpoint is complete, and passes
when the gang resumes from it. EC2 in moto (DescribeInstances, TerminateInstances), the cluster in
the fake API server (the job's pods, nodes with their providerID, the rank 0 log); what the
Training Operator, the autoscaler and the job do in between is played by `Gang` below, on a
virtual clock. Also: the flags it needs, `--list` marking it, nothing it did not create terminated,
its objects deleted whatever happened."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import subprocess
import threading
import time

import boto3
import pytest
from moto import mock_aws

from infra.cli import verify
from infra.cli.main import main
from infra.cli.verify import connect, node_loss, trial
from infra.core.names import JOB_NAME_LABEL as JOB_LABEL
from infra.core.names import REPLICA_TYPE_LABEL as REPLICA_LABEL
from infra.offline.pods import stack_image
from tests.cli.test_verify_checks import NOW, REGION, STACK, kubeconfig, seed, team_admission
from tests.cli.test_verify_run import AWS_VARS
from tests.conftest import ROOT, needs_torch, plan_of, torch_python
from tests.fake_kube_api import FakeKubernetesApi
from tests.offline.test_checkpointing import checkpointing

TEAM, ZONE = "foundation", "us-east-2b"
LOST_AT = NOW + datetime.timedelta(minutes=20)  # when the check sees the second checkpoint and terminates


def _stamp(at: datetime.datetime) -> str:
    """A log line's time as the kubelet writes it (RFC 3339, nanoseconds)."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.123456789Z")


@pytest.fixture(autouse=True)
def recorded_once(monkeypatch):
    monkeypatch.setattr("infra.offline.evaluate.record", lambda stack, *a, **k: plan_of(stack))


@pytest.fixture
def account(monkeypatch):
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.Session(region_name=REGION)


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    plan = plan_of(STACK)
    fake = FakeKubernetesApi(admit=team_admission(plan.config))
    seed(fake, plan)
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", fake.url))
    yield fake
    fake.close()


class Gang:
    """The Training Operator, the nodes and the job's rank 0, for one run of the check: the gang's
    pods on two GPU nodes (EC2 instances in moto) with a DaemonSet pod each, rank 0 logging two
    checkpoints; once EC2 says the instance under worker 0 is going away, the node and every pod go,
    the operator recreates the pods on a replacement node (scheduled at +400 s) and rank 0 logs
    `then` at +520 s: a resume from step 1999 by default."""

    def __init__(
        self, fake: FakeKubernetesApi, session, then: str | None = "resume", beside: dict | None = None
    ) -> None:
        """`beside`: another pod, put on node ip-10-0-9-1 with the node itself (before the gang's pods)."""
        self.fake, self.ec2, self.then, self.beside = fake, session.client("ec2"), then, beside
        self.now, self.stop = NOW, threading.Event()
        made = self.ec2.run_instances(
            ImageId="ami-12c6146b", MinCount=3, MaxCount=3, Placement={"AvailabilityZone": ZONE}
        )["Instances"]
        self.instances = [i["InstanceId"] for i in made]
        self.job = ""
        threading.Thread(target=self.loop, daemon=True).start()

    def node(self, i: int) -> str:
        name = f"ip-10-0-9-{i}"
        self.fake.put({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": name, "labels": {"higgsfield.io/pool": "h100"}},
                       "spec": {"providerID": f"aws:///{ZONE}/{self.instances[i]}"}})  # fmt: skip
        self.fake.put({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": f"health-gate-{i}", "namespace": "higgsfield-health",
                                    "ownerReferences": [{"kind": "DaemonSet", "name": "health-gate-h100"}]},
                       "spec": {"nodeName": name, "containers": [{"name": "gate"}]}})  # fmt: skip
        if i == 1 and self.beside:
            self.fake.put(self.beside)
        return name

    def pods(self, nodes: list[str], scheduled: datetime.datetime) -> None:
        at = scheduled.strftime("%Y-%m-%dT%H:%M:%SZ")  # a condition's time: seconds
        for (replica, index), node in zip([("Master", 0), ("Worker", 0)], nodes, strict=True):
            self.fake.put({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{self.job}-{replica.lower()}-{index}", "namespace": TEAM,
                             "labels": {JOB_LABEL: self.job, REPLICA_LABEL: replica.lower()}},
                "spec": {"nodeName": node, "containers": [{"name": "pytorch"}]},
                "status": {"phase": "Running", "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]},
            })  # fmt: skip

    def rank0(self, text: str, at: datetime.datetime) -> None:
        self.fake.log(TEAM, f"{self.job}-master-0", f"[rank 0] {text}", at=_stamp(at))

    def loop(self) -> None:
        while not self.stop.wait(0.02):
            jobs = [o for k, o in list(self.fake.objects.items()) if k[2] == "pytorchjobs"]
            if jobs:
                self.job = jobs[0]["metadata"]["name"]
                break
        else:
            return
        self.pods([self.node(0), self.node(1)], NOW + datetime.timedelta(minutes=10))
        shared = f"/fsx/checkpoints/{self.job}"
        self.rank0(f"no complete checkpoint in {shared}: starting at step 0", NOW + datetime.timedelta(minutes=12))
        self.rank0("step 999 loss 2.3012 world 16 checkpoint", NOW + datetime.timedelta(minutes=15))
        self.now = LOST_AT
        self.rank0("step 1999 loss 2.2950 world 16 checkpoint", NOW + datetime.timedelta(minutes=19))
        while not self.stop.wait(0.02):
            state = self.ec2.describe_instances(InstanceIds=[self.instances[1]])
            if state["Reservations"][0]["Instances"][0]["State"]["Name"] != "running":
                break
        else:
            return
        for key in [k for k in list(self.fake.objects) if k[2] in ("pods", "nodes")]:
            obj = self.fake.objects[key]
            if key[2] == "pods" and key[1] == TEAM or key[3] == "ip-10-0-9-1":
                self.fake.delete_now(self.fake.path_of(obj))
        if self.then is None:
            return
        self.pods([self.node(0), self.node(2)], LOST_AT + datetime.timedelta(seconds=400))
        step0 = f"no complete checkpoint in {shared}: starting at step 0"
        resume = f"resumed from {shared}/step-000001999 (step 1999), continuing at step 2000"
        self.rank0(resume if self.then == "resume" else step0, LOST_AT + datetime.timedelta(seconds=520))
        self.now = LOST_AT + datetime.timedelta(seconds=600)

    def state(self, i: int) -> str:
        return self.ec2.describe_instances(InstanceIds=[self.instances[i]])["Reservations"][0]["Instances"][0]["State"][
            "Name"
        ]


@pytest.fixture
def loss_ctx(cluster, account):
    plan = plan_of(STACK)
    cfg = plan.config
    chosen = trial.Plan(cfg.gpu_pools[0], 2, stack_image(cfg, "abc123"), "production", 98.32, 3000.0)
    ctx = connect.Context(STACK, plan, account, connect.kube_client(None), poll_s=0.05, trial_timeout_s=10)
    ctx.found["node_loss"] = node_loss.choose(cfg, chosen)
    return ctx


def _run(ctx, gang: Gang) -> verify.Outcome:
    ctx.now = lambda: gang.now
    try:
        return node_loss.run(ctx)
    finally:
        gang.stop.set()


def _left(fake: FakeKubernetesApi) -> list:
    return [k for k in fake.objects if k[1] == TEAM and k[2] in ("configmaps", "pytorchjobs")]


# --- the check -------------------------------------------------------------------------------------


def test_a_job_that_resumes_after_its_node_is_terminated_passes_timed(cluster, account, loss_ctx):
    gang = Gang(cluster, account)
    outcome = _run(loss_ctx, gang)
    assert outcome.status == "PASS", outcome
    assert outcome.timings == {"rescheduled_s": 400.0, "resumed_s": 520.1, "checkpoint_step": 999.0,
                               "resumed_step": 1999.0}  # fmt: skip
    assert f"terminated {gang.instances[1]}" in outcome.evidence and "resumed from step 1999" in outcome.evidence


def test_only_the_instance_under_one_of_its_own_nodes_is_terminated(cluster, account, loss_ctx):
    gang = Gang(cluster, account)
    _run(loss_ctx, gang)
    assert [gang.state(i) for i in range(3)] == ["running", "terminated", "running"]
    assert loss_ctx.found["node_loss_terminated"] == {"instance": gang.instances[1], "node": "ip-10-0-9-1",
                                                      "zone": ZONE}  # fmt: skip


def test_the_job_runs_as_the_team_and_is_deleted_after_a_pass(cluster, account, loss_ctx):
    gang = Gang(cluster, account)
    _run(loss_ctx, gang)
    job = gang.job
    assert job.startswith(node_loss.VERIFY_PREFIX)
    assert loss_ctx.found["node_loss_deleted"] == [f"{job}-code", job] and not _left(cluster)


def test_a_job_that_never_resumes_fails_and_is_still_deleted(cluster, account, loss_ctx):
    gang = Gang(cluster, account, then=None)
    loss_ctx.trial_timeout_s = 1.0
    outcome = _run(loss_ctx, gang)
    assert outcome.status == "FAIL" and outcome.evidence.endswith("the gang was not rescheduled, no resume within 1 s")
    assert f"describe pytorchjob {gang.job}" in outcome.fix
    assert not _left(cluster) and gang.state(1) == "terminated"


def test_a_gang_that_restarts_from_step_0_fails(cluster, account, loss_ctx):
    gang = Gang(cluster, account, then="from zero")
    outcome = _run(loss_ctx, gang)
    assert outcome.status == "FAIL" and "the gang restarted without it" in outcome.evidence
    assert "starting at step 0" in outcome.evidence and "shared storage" in outcome.fix


def test_a_job_that_never_checkpoints_terminates_nothing(cluster, account, loss_ctx):
    loss_ctx.trial_timeout_s = 0.3
    outcome = node_loss.run(loss_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith("no complete checkpoint on 2 running node(s)")
    assert "node_loss_terminated" not in loss_ctx.found and not _left(cluster)


def test_a_node_that_also_runs_another_teams_pod_is_not_terminated(cluster, account, loss_ctx):
    notebook = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "notebook", "namespace": "llm"},
                "spec": {"nodeName": "ip-10-0-9-1", "containers": [{"name": "n"}]}}  # fmt: skip
    gang = Gang(cluster, account, beside=notebook)
    outcome = _run(loss_ctx, gang)
    assert outcome.status == "FAIL" and "refused to terminate: node ip-10-0-9-1 also runs llm/notebook" in (
        outcome.evidence
    )
    assert [gang.state(i) for i in range(3)] == ["running", "running", "running"] and not _left(cluster)


def test_a_node_that_runs_a_team_daemonsets_pod_is_refused(cluster, account, loss_ctx):
    """Attack: a team may create DaemonSets in its namespace (its edit rights); their pods were taken for
    the platform's per-node agents, so another team's work on the node did not keep it."""
    gang = Gang(cluster, account)
    gang.stop.set()
    gang.job = "verify-node-loss-x"
    gang.pods([gang.node(0), gang.node(1)], NOW)
    cluster.put({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "agent-x", "namespace": "llm",
                              "ownerReferences": [{"kind": "DaemonSet", "name": "agent"}]},
                 "spec": {"nodeName": "ip-10-0-9-1", "containers": [{"name": "a"}]}})  # fmt: skip
    with pytest.raises(node_loss.Refused, match="node ip-10-0-9-1 also runs llm/agent-x"):
        node_loss.target(loss_ctx, TEAM, "verify-node-loss-x", "ip-10-0-9-1")
    assert gang.state(1) == "running"


def test_a_node_without_a_pod_of_its_job_is_refused(cluster, account, loss_ctx):
    gang = Gang(cluster, account)
    gang.stop.set()
    gang.node(2)  # a GPU node of the pool, running no pod of the job
    with pytest.raises(node_loss.Refused, match="node ip-10-0-9-2 runs no pod of job foundation/verify-node-loss-x"):
        node_loss.target(loss_ctx, TEAM, "verify-node-loss-x", "ip-10-0-9-2")
    assert gang.state(2) == "running"


def test_a_node_whose_instance_is_not_running_there_is_refused(cluster, account, loss_ctx):
    gang = Gang(cluster, account)
    gang.stop.set()
    gang.job = "verify-node-loss-x"
    gang.pods([gang.node(0), gang.node(1)], NOW)
    gang.ec2.stop_instances(InstanceIds=[gang.instances[1]])
    with pytest.raises(node_loss.Refused, match=f"instance {gang.instances[1]} is stopp"):
        node_loss.target(loss_ctx, TEAM, "verify-node-loss-x", "ip-10-0-9-1")


def test_a_caller_not_allowed_to_terminate_fails_naming_the_right_and_the_job_is_still_deleted(
    cluster, account, loss_ctx
):
    from botocore.stub import Stubber

    from tests.aws_errors import add_wire_error

    gang = Gang(cluster, account)
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    running = {"InstanceId": gang.instances[1], "State": {"Code": 16, "Name": "running"},
               "Placement": {"AvailabilityZone": ZONE}}  # fmt: skip
    stub.add_response("describe_instances", {"Reservations": [{"Instances": [running]}]})
    add_wire_error(stub, "ec2", "terminate_instances", "UnauthorizedOperation", "You are not authorized")
    stub.activate()
    loss_ctx.clients["ec2"] = client
    (spec,) = node_loss.specs()
    loss_ctx.now = lambda: gang.now
    try:
        (result,) = verify.run([spec], loss_ctx, allow_cost=True, disruptive=True,
                               describe_error=connect.describe_error)  # fmt: skip
    finally:
        gang.stop.set()
    assert result.outcome.status == "FAIL"
    assert result.outcome.evidence == "AWS refused TerminateInstances (UnauthorizedOperation)"
    assert "ec2:TerminateInstances" in result.outcome.fix
    assert not _left(cluster) and gang.state(1) == "running"


def test_a_single_node_trial_skips_the_node_loss_saying_how(cluster, account, monkeypatch, capsys):
    monkeypatch.setattr("infra.offline.pods.image_tag", lambda: "abc123")
    assert main(["verify", STACK, "--only", "trial.node-loss", "--allow-cost", "--disruptive", "--json"]) == 0
    (check,) = json.loads(capsys.readouterr().out)["checks"]
    assert check["status"] == "SKIP"
    assert (
        check["evidence"]
        == "cannot run here: --nodes: a lost node needs a job across 2 nodes or more: rerun with --nodes 2"
    )
    assert not [k for k in cluster.objects if k[2] in ("configmaps", "pytorchjobs") and k[1] == TEAM]


# --- the flags -------------------------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch, tmp_path):
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.chdir(ROOT)


def test_disruptive_checks_are_skipped_without_the_flag():
    ran = []
    spec = verify.Spec("trial.x", "x", lambda ctx: ran.append(1) or verify.passed(""), "kube", "r", costs=True,
                       disrupts=True)  # fmt: skip
    (result,) = verify.run([spec], None, allow_cost=True)
    assert result.outcome.status == "SKIP" and result.outcome.fix == "rerun with --allow-cost --disruptive" and not ran


def test_disruptive_without_allow_cost_is_refused(offline, capsys):
    assert main(["verify", STACK, "--disruptive"]) == 2
    assert capsys.readouterr().err.startswith("error: --disruptive: needs --allow-cost too")


def test_naming_the_node_loss_without_disruptive_is_refused(offline, capsys):
    assert main(["verify", STACK, "--only", "trial.node-loss", "--allow-cost"]) == 2
    assert "trial.node-loss terminates an EC2 instance" in capsys.readouterr().err


def test_list_marks_the_node_loss_as_disruptive(offline, capsys):
    assert main(["verify", STACK, "--list", "--only", "trial.node-loss"]) == 0
    assert "[--allow-cost --disruptive]" in " ".join(capsys.readouterr().out.split())
    assert main(["verify", STACK, "--list", "--json"]) == 0
    listed = {c["id"]: c for c in json.loads(capsys.readouterr().out)}
    assert listed["trial.node-loss"]["disrupts"] is True and listed["trial.gang"]["disrupts"] is False
    assert "manual.node-loss" not in listed


def test_the_estimate_is_printed_before_the_job_is_created(cluster, account, monkeypatch, capsys):
    seen = []

    def fake_run(ctx):
        seen.append(capsys.readouterr().err)
        return verify.passed("resumed")

    monkeypatch.setattr(node_loss, "run", fake_run)
    monkeypatch.setattr("infra.offline.pods.image_tag", lambda: "abc123")
    args = ["verify", STACK, "--only", "trial.node-loss", "--allow-cost", "--disruptive", "--nodes", "2"]
    assert main(args) == 0
    assert "verify prod: node-loss trial: pytorch-ddp as team foundation on 2 x p5.48xlarge of pool h100; " in seen[0]
    assert "TERMINATES the EC2 instance under one of its nodes" in seen[0] and "about $" in seen[0]


# --- what the real job logs ------------------------------------------------------------------------


def _kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process under it (torchrun starts its workers in sessions of their own)."""
    tree, i = [pid], 0
    while i < len(tree):
        tree += checkpointing.children_of(tree[i])
        i += 1
    for each in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)


@needs_torch
def test_the_real_jobs_log_proves_a_complete_checkpoint_and_its_resume_after_a_lost_node(tmp_path):
    """examples/train_ddp.py behind the job's launchers (checkpointing.py, torchrun, the rank prefix) on
    two gloo ranks: once its log shows a checkpoint complete, that checkpoint has its COMPLETE marker;
    killed without a chance to save (a lost node), the next start logs a resume from it."""
    python, examples = torch_python(), ROOT / "examples"
    command = [python, str(examples / "checkpointing.py"), python, "-m", "torch.distributed.run",
               "--standalone", "--nproc-per-node", "2", "--no-python", python, str(examples / "checkpointing.py"),
               "--rank-prefix", python, str(examples / "train_ddp.py")]  # fmt: skip
    shared = tmp_path / "fsx"
    env = {**os.environ, "CHECKPOINT_DIR": str(tmp_path / "nvme"), "CHECKPOINT_SHARED_DIR": str(shared),
           "CHECKPOINT_EVERY_STEPS": "100", "STEPS": str(10**9), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT / "images" / "training")}  # fmt: skip
    log: list[str] = []
    resumed_log: list[str] = []  # the next start's (its pod's own log)

    def kubelet(stream, into: list[str]) -> None:  # each line with its time, as `kubectl logs --timestamps` reads it
        for row in iter(stream.readline, ""):
            into.append(f"{_stamp(datetime.datetime.now(datetime.UTC))} {row.rstrip()}")

    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threading.Thread(target=kubelet, args=(first.stdout, log), daemon=True).start()
    deadline, proven = time.monotonic() + 180, None
    while proven is None and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.2)
        proven = node_loss.complete_step("\n".join(log))
    if first.poll() is None:
        _kill_tree(first.pid)  # the node is gone: no SIGTERM, no final checkpoint
    first.wait()
    assert proven is not None, "\n".join(log[-20:])
    newest = checkpointing.latest_complete(shared)
    assert newest is not None and newest[0] >= proven  # what the log proved complete is complete

    lost = datetime.datetime.now(datetime.UTC)
    second = subprocess.Popen(command, env={**env, "STEPS": str(newest[0] + 3)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    reader = threading.Thread(target=kubelet, args=(second.stdout, resumed_log), daemon=True)
    reader.start()
    try:
        assert second.wait(timeout=180) == 0
    finally:
        if second.poll() is None:
            _kill_tree(second.pid)
    reader.join(5)
    restart = node_loss.restart_after("\n".join(resumed_log), lost)
    assert restart is not None and restart[1] == newest[0] >= proven, "\n".join(resumed_log[-20:])

"""`higgsfield verify` as a whole: the runner (order, timeouts, prerequisites, --only/--skip), the
refusal in one line without credentials or kubeconfig, `--list` offline, `--json`, the costing
trial (only with --allow-cost, estimated before it starts, timed, its namespace deleted) and
`--save`, whose file `timeline --job` and `cost` read (tests/offline/test_measured.py)."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import threading
import time

import pytest

from infra.cli import verify
from infra.cli.main import main
from infra.cli.verify import connect, trial
from infra.core import names
from tests.cli.test_verify_checks import NOW, STACK, kubeconfig, seed, team_admission
from tests.conftest import ROOT, plan_of
from tests.fake_kube_api import FakeKubernetesApi

AWS_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)


@pytest.fixture(autouse=True)
def recorded_once(monkeypatch):
    """The command records the stack's plan; here the session's one recording (tests/conftest.py)."""
    monkeypatch.setattr("infra.offline.evaluate.record", lambda stack, *a, **k: plan_of(stack))


@pytest.fixture
def nothing(monkeypatch, tmp_path):
    """No AWS credentials anywhere, no kubeconfig."""
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.chdir(ROOT)


def spec(id_: str, outcome=None, *, after=(), timeout_s=5.0, costs=False, run=None) -> verify.Spec:
    return verify.Spec(
        id_, id_, run or (lambda ctx: outcome), "kube", "r", timeout_s=timeout_s, after=after, costs=costs
    )


# --- the runner ------------------------------------------------------------------------------------


def test_checks_run_in_order_and_a_failure_does_not_stop_the_next():
    results = verify.run([spec("a.one", verify.failed("bad", "fix it")), spec("a.two", verify.passed("ok"))], None)
    assert [(r.spec.id, r.outcome.status) for r in results] == [("a.one", "FAIL"), ("a.two", "PASS")]


def test_a_check_past_its_timeout_fails_saying_so():
    slow = spec("a.slow", run=lambda ctx: time.sleep(2) or verify.passed("late"), timeout_s=0.1)
    (result,) = verify.run([slow], None)
    assert result.outcome.status == "FAIL" and result.outcome.evidence == "no answer within 0.1 s"
    assert result.seconds < 1


@pytest.mark.parametrize(
    ("needs", "said"), [("kube", "the network path to the cluster's API"), ("aws", "whether AWS throttled its calls")]
)
def test_a_check_past_its_timeout_says_what_to_look_at_for_what_it_reads(needs, said):
    """An AWS check that reads a long history page by page ran out of time saying to check the VPN."""
    slow = dataclasses.replace(
        spec("a.slow", run=lambda ctx: time.sleep(2) or verify.passed("late"), timeout_s=0.1), needs=needs
    )
    (result,) = verify.run([slow], None)
    assert result.outcome.fix.startswith(f"check {said}") and result.outcome.fix.endswith("--only a.slow")


def test_a_check_whose_prerequisite_failed_is_skipped():
    results = verify.run(
        [spec("a.base", verify.failed("no", "")), spec("a.on", verify.passed(""), after=("a.base",))], None
    )
    assert results[1].outcome.status == "SKIP" and results[1].outcome.evidence == "needs a.base to pass first"


def test_a_check_that_raises_is_its_own_failed_line():
    def boom(ctx):
        raise ValueError("unreadable")

    results = verify.run([spec("a.boom", run=boom), spec("a.next", verify.passed("ok"))], None)
    assert [r.outcome.status for r in results] == ["FAIL", "PASS"] and "unreadable" in results[0].outcome.evidence


def test_ctrl_c_lets_the_running_check_clean_up_before_the_run_stops(monkeypatch):
    """A trial left behind keeps paying for its nodes: Ctrl-C asks it to stop and waits for its cleanup."""
    events = []

    def costly(ctx):
        ctx.cancel.wait(5)
        time.sleep(0.1)
        events.append("cleaned up")
        return verify.failed("stopped", "")

    def interrupted(future, timeout):
        time.sleep(0.05)
        raise KeyboardInterrupt

    monkeypatch.setattr(verify, "_result", interrupted)
    ctx = connect.Context(STACK, None, None, None)
    with pytest.raises(KeyboardInterrupt):
        verify.run([spec("trial.x", run=costly, costs=True)], ctx, allow_cost=True)
    assert events == ["cleaned up"] and not ctx.cancel.is_set()


def test_checks_that_cost_are_skipped_without_the_flag():
    ran = []
    costly = spec("trial.x", run=lambda ctx: ran.append(1) or verify.passed(""), costs=True)
    (result,) = verify.run([costly], None)
    assert result.outcome.status == "SKIP" and "--allow-cost" in result.outcome.evidence and not ran


def test_only_and_skip_take_ids_and_prefixes_in_order():
    specs = [spec("aws.a"), spec("kube.b"), spec("kube.c")]
    assert [s.id for s in verify.select(specs, only=["kube."], skip=["kube.c"])] == ["kube.b"]
    with pytest.raises(verify.Selection, match="no check 'kube.nope'"):
        verify.select(specs, only=["kube.nope"])


# --- the command -----------------------------------------------------------------------------------


def test_list_works_offline_and_in_order(nothing, capsys):
    assert main(["verify", STACK, "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    ids = [c["id"] for c in listed]
    assert ids[:3] == ["aws.bootstrap", "aws.cluster", "aws.node-groups"] and "trial.gang" in ids
    assert next(c for c in listed if c["id"] == "trial.gang")["costs"] is True
    assert all(c["rights"] for c in listed)


def test_list_says_how_to_check_by_hand_what_is_not_automated_within_120_columns(nothing, capsys):
    assert main(["verify", STACK, "--list"]) == 0
    out = capsys.readouterr().out
    assert "[by hand: pulumi preview, then pulumi up with the next minor" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 120


def test_list_needs_no_stack_and_lists_the_same_checks(nothing, capsys):
    assert main(["verify", STACK, "--list"]) == 0
    with_a_stack = capsys.readouterr().out
    assert main(["verify", "--list"]) == 0
    assert capsys.readouterr().out == with_a_stack


def test_without_credentials_the_run_refuses_in_one_line(nothing, capsys):
    assert main(["verify", STACK]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: verify prod: no AWS credentials")


def test_without_a_kubeconfig_the_run_refuses_in_one_line(nothing, monkeypatch, capsys):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert main(["verify", STACK]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "error: verify prod: no kubeconfig at" in err


def test_an_unknown_check_is_a_usage_error(nothing, capsys):
    assert main(["verify", STACK, "--only", "kube.nope"]) == 2
    assert capsys.readouterr().err.startswith("error: --only/--skip: no check 'kube.nope'")


def test_a_misspelt_check_is_named_with_the_one_it_means_in_a_short_line(nothing, capsys):
    assert main(["verify", STACK, "--only", "aws.layout"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 160, err
    assert "no check 'aws.layout'; did you mean aws.layout-client?" in err and "higgsfield verify --list" in err


@pytest.fixture
def cluster(nothing, tmp_path, monkeypatch):
    plan = plan_of(STACK)
    fake = FakeKubernetesApi(admit=team_admission(plan.config))
    seed(fake, plan, now=datetime.datetime.now(datetime.UTC))  # a whole run reads the real clock
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", fake.url))
    yield fake
    fake.close()


def test_cluster_checks_alone_need_no_aws_credentials_and_report_json(cluster, capsys):
    assert main(["verify", STACK, "--only", "kube.", "--skip", "kube.leases", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"FAIL": 0, "PASS": 16, "SKIP": 1}  # no GPU node up: skipped
    assert report["identity"] is None and report["cluster"] == cluster.url
    assert [c["id"] for c in report["checks"]][:2] == ["kube.api", "kube.autoscaler-status"]


def test_a_failed_check_exits_1_with_its_fix_in_the_report(cluster, capsys):
    cluster.delete_now("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/higgsfield-team-llm")
    assert main(["verify", STACK, "--only", "kube.admission-policies"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  kube.admission-policies" in out and "-> rerun `pulumi up`" in out
    assert out.rstrip().endswith("verify prod: 0 passed, 1 failed, 0 skipped")


# --- the trial -------------------------------------------------------------------------------------


def _stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


class Cloud:
    """What the autoscaler, EC2, the kubelet, the gate and Volcano do for the trial, on a virtual
    clock counted from the pods' creation: node registered at +95 s, Ready at +335 s, the gate
    untaints it at +505 s, the image pulled in 2 s, the first step logged at +540 s."""

    def __init__(self, fake: FakeKubernetesApi) -> None:
        self.fake, self.now, self.stop = fake, NOW, threading.Event()
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self) -> None:
        while not self.stop.wait(0.02):
            pods = [o for k, o in list(self.fake.objects.items()) if k[2] == "pods" and k[1].startswith("higgsfield-")]
            for pod in pods:
                if not pod.get("spec", {}).get("nodeName"):
                    self.bring_up(pod)

    def bring_up(self, pod: dict) -> None:
        created = datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        name, ns = f"ip-10-0-9-{pod['metadata']['name'][-1]}", pod["metadata"]["namespace"]
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {names.POOL_LABEL: "h100"},
                "creationTimestamp": _stamp(created + datetime.timedelta(seconds=95)),
            },
            "spec": {"taints": [{"key": names.STARTUP_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "lastTransitionTime": _stamp(created + datetime.timedelta(seconds=335)),
                    }
                ]
            },
        }
        self.fake.put(node)
        time.sleep(0.1)  # the trial sees the node tainted once
        self.now = created + datetime.timedelta(seconds=505)
        node["spec"]["taints"] = []
        node["metadata"]["labels"][names.HEALTH_LABEL] = "healthy"
        self.fake.put(node)
        time.sleep(0.1)
        for reason, at in (("Pulling", 506), ("Pulled", 508)):
            self.fake.put(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"{pod['metadata']['name']}.{reason}", "namespace": ns},
                    "involvedObject": {"kind": "Pod", "name": pod["metadata"]["name"]},
                    "reason": reason,
                    "firstTimestamp": _stamp(created + datetime.timedelta(seconds=at)),
                }
            )
        self.fake.log(ns, pod["metadata"]["name"], "GPU 0: NVIDIA H100 80GB HBM3", at=_stamp(created))
        first = (created + datetime.timedelta(seconds=540)).strftime("%Y-%m-%dT%H:%M:%S.123456789Z")
        self.fake.log(ns, pod["metadata"]["name"], trial.FIRST_STEP, at=first)
        self.fake.put({**pod, "spec": {**pod["spec"], "nodeName": name}})


@pytest.fixture
def trial_ctx(cluster):
    plan = plan_of(STACK)
    ctx = connect.Context(STACK, plan, None, connect.kube_client(None), poll_s=0.05, trial_timeout_s=10)
    ctx.found["trial"] = trial.Plan(plan.config.gpu_pools[0], 1, "example.com/train:1", "production", 98.32, 3000.0)
    return ctx


def test_the_trial_times_each_step_of_a_pool_from_zero_and_deletes_its_namespace(cluster, trial_ctx):
    cloud = Cloud(cluster)
    trial_ctx.now = lambda: cloud.now
    try:
        outcome = trial.run(trial_ctx)
    finally:
        cloud.stop.set()
    assert outcome.status == "PASS"
    assert outcome.timings == {
        "scale_up_s": 95.0,
        "node_boot_s": 240.0,
        "gate_s": 170.0,
        "image_pull_s": 2.0,
        "first_step_s": 540.1,
    }
    namespace = trial_ctx.found["deleted"]
    assert namespace.startswith("higgsfield-verify-") and cluster.get(f"/api/v1/namespaces/{namespace}") is None
    assert not [k for k in cluster.objects if k[1] == namespace]


def test_the_trial_pods_wait_for_the_gate_and_go_to_the_pool_as_a_gang(trial_ctx):
    ns, group, pods = trial.objects(trial_ctx.found["trial"], "higgsfield-verify-x")
    assert group["spec"] == {"minMember": 1, "queue": "production"}  # a queue with GPUs: default has none
    spec = pods[0]["spec"]
    assert spec["schedulerName"] == "volcano" and spec["nodeSelector"] == {names.POOL_LABEL: "h100"}
    assert names.STARTUP_TAINT_KEY not in {t.get("key") for t in spec["tolerations"]}
    assert ns["metadata"]["labels"] == {trial.VERIFY_LABEL: "true"}


def test_a_trial_asked_to_stop_deletes_its_namespace(cluster, trial_ctx):
    threading.Timer(0.3, trial_ctx.cancel.set).start()
    outcome = trial.run(trial_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith("stopped before a first step")
    assert cluster.get(f"/api/v1/namespaces/{trial_ctx.found['deleted']}") is None


def test_a_trial_that_never_starts_fails_and_still_deletes_its_namespace(cluster, trial_ctx):
    trial_ctx.trial_timeout_s = 0.3
    outcome = trial.run(trial_ctx)
    assert outcome.status == "FAIL" and outcome.evidence == "no first step within 0 s"
    assert cluster.get(f"/api/v1/namespaces/{trial_ctx.found['deleted']}") is None


# What a one-node trial gang on pool h100 measures (trial.run's ctx.found["timings"]), for the tests standing in for it.
TRIAL_TIMINGS = {
    "h100": {
        "instance_type": "p5.48xlarge",
        "nodes": 1,
        "scale_up_s": 95.0,
        "node_boot_s": 240.0,
        "gate_s": 170.0,
        "image_pull_s": 2.0,
        "first_step_s": 540.0,
    }
}


def test_allow_cost_prints_the_trials_estimate_before_it_starts(cluster, monkeypatch, capsys, tmp_path):
    seen = []

    def fake_trial(ctx):
        seen.append(capsys.readouterr().err)  # what was said before the trial ran
        ctx.found["timings"] = copy.deepcopy(TRIAL_TIMINGS)
        return verify.passed("timed")

    monkeypatch.setattr(trial, "run", fake_trial)
    monkeypatch.setattr("infra.offline.pods.image_tag", lambda: "abc123")
    saved = tmp_path / "measured.json"
    assert main(["verify", STACK, "--only", "trial.gang", "--allow-cost", "--save", str(saved)]) == 0
    assert seen[0].startswith("verify prod: trial gang on pool h100 (queue production): 1 x p5.48xlarge for about ")
    assert "about $" in seen[0]
    data = json.loads(saved.read_text())
    assert data["stack"] == STACK and data["pools"]["h100"]["first_step_s"] == 540.0


def test_save_without_a_trial_is_refused_before_any_check(cluster, capsys, tmp_path):
    assert main(["verify", STACK, "--only", "kube.api", "--save", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --save: is for the trials (trial.*), which run only with --allow-cost")
    assert not (tmp_path / "m.json").exists() and cluster.requests == []


def test_a_trial_on_a_node_already_up_measures_no_cold_start(cluster, trial_ctx):
    """A pool that was not at zero: the first step is reported, nothing is saved as a cold start."""
    warm = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "ip-10-0-9-0",
            "labels": {names.POOL_LABEL: "h100"},
            "creationTimestamp": "2026-12-01T00:00:00Z",
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:05:00Z"}]},
    }
    cluster.put(warm)

    def bind():
        while not [k for k in cluster.objects if k[2] == "pods"]:
            time.sleep(0.02)
        pod = next(o for k, o in cluster.objects.items() if k[2] == "pods")
        cluster.log(pod["metadata"]["namespace"], pod["metadata"]["name"], trial.FIRST_STEP)
        cluster.put({**pod, "spec": {**pod["spec"], "nodeName": "ip-10-0-9-0"}})

    threading.Thread(target=bind, daemon=True).start()
    outcome = trial.run(trial_ctx)
    assert outcome.status == "PASS" and "a node was already up" in outcome.evidence
    assert "timings" not in trial_ctx.found


def test_an_api_server_that_does_not_answer_is_a_network_failure(nothing, tmp_path, monkeypatch):
    import socket

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: connection refused
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}"))
    ctx = connect.Context(STACK, plan_of(STACK), None, connect.kube_client(None))
    (spec,) = [s for s in verify_checks() if s.id == "kube.api"]
    (result,) = verify.run([spec], ctx, describe_error=connect.describe_error)
    assert result.outcome.status == "FAIL" and result.outcome.evidence.startswith("network failure")


def verify_checks():
    from infra.cli.verify.checks import specs

    return specs()


def test_rejected_credentials_refuse_the_run_in_one_line():
    def expired():
        raise connect.aws_errors.ClientError(
            {"Error": {"Code": "ExpiredToken", "Message": "The security token included in the request is expired"}},
            "GetCallerIdentity",
        )

    sts = type("Sts", (), {"get_caller_identity": staticmethod(expired)})()
    session = type("Session", (), {"client": lambda self, name, config=None: sts})()
    with pytest.raises(connect.Refused, match=r"^AWS rejected the credentials \(ExpiredToken: "):
        connect.caller(session)


def test_a_healthy_stack_passes_every_read_only_check(cluster, monkeypatch, capsys):
    """The whole read-only run as the deploy workflow runs it: the account in moto (its cluster's
    endpoint the fake API server's address), the cluster in the fake API server; reservations left
    out (moto has no capacity reservations; tests/cli/test_verify_checks.py stubs them), the bootstrap
    too, and the public subnets (the administrator's, which the deploy workflow skips; moto makes a default VPC in
    each of its regions), and the runner webhooks and projects (moto keeps no webhook, and the account here makes no
    CodeBuild project: their checks' tests stub CodeBuild in BatchGetProjects' shape), the add-ons (moto has no
    DescribeAddon: their check's tests stub it), the preview role's access entry and the cluster's access (moto has no
    access entries: their checks' tests stub them), the layout client (moto's FSx gives no mount name: its check's
    tests stub FSx). The AWS managed policies are moto's snapshot of AWS's documents: aws.managed-policies passing says
    the boundary's MANAGED_POLICY_SERVICES covers them as that snapshot has them."""
    from moto.backends import get_backend

    from tests.cli import test_verify_checks as fixtures

    plan = plan_of(STACK)
    with fixtures.deployed_account(plan, monkeypatch, aws_managed_policies=True) as session:
        get_backend("eks")["123456789012"]["us-east-2"].clusters[fixtures.CLUSTER].endpoint = cluster.url
        labels = {names.JOB_NAME_LABEL: "pytorch-ddp-h100", names.REPLICA_TYPE_LABEL: "worker"}
        fixtures._log(session, {"log": "step 1", "kubernetes": {"host": "ip-10-0-1-5", "labels": labels}})
        code = main(
            [
                "verify",
                STACK,
                "--skip",
                "aws.reservations",
                "--skip",
                "aws.bootstrap",
                "--skip",
                "aws.public-subnets",
                "--skip",
                "aws.runner-webhooks",
                "--skip",
                "aws.runner-projects",
                "--skip",
                "aws.addons",
                "--skip",
                "aws.preview-entry",
                "--skip",
                "aws.cluster-access",
                "--skip",
                "aws.pod-identities",
                "--skip",
                "aws.layout-client",
                "--skip",
                "aws.squash-history",
                "--json",
            ]
        )
    report = json.loads(capsys.readouterr().out)
    assert code == 0, [c for c in report["checks"] if c["status"] == "FAIL"]
    assert report["identity"].startswith("arn:aws:")  # who ran it (sts:GetCallerIdentity)
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert [k for k, v in statuses.items() if v == "SKIP"] == [
        "aws.karpenter-queue", "aws.karpenter-rules", "kube.gpu-nodes", "trial.gang", "trial.nccl", "trial.node-loss",
        "manual.upgrade",
    ]  # fmt: skip


# --- NCCL across the trial's nodes -----------------------------------------------------------------


def _report(node: str, network: str, busbw: str, ok: bool) -> str:
    """A rank's report line as images/training/node_check.py prints it (Report.json)."""
    results = [
        {"check": "NCCL network", "value": network, "expected": "Libfabric / provider efa", "ok": ok},
        {"check": "NCCL all-reduce busbw", "value": busbw, "expected": ">= 300 GB/s", "ok": ok},
    ]
    return json.dumps({"node": node, "healthy": ok, "results": results})


def operator(fake: FakeKubernetesApi, healthy: bool) -> threading.Event:
    """The Training Operator and the ranks: the PyTorchJob's pods appear and log their verdicts."""
    stop = threading.Event()

    def loop():
        while not stop.wait(0.02):
            jobs = [o for k, o in list(fake.objects.items()) if k[2] == "pytorchjobs"]
            for job in jobs:
                ns, app = job["metadata"]["namespace"], job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
                for i in range(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]):
                    name = f"{job['metadata']['name']}-worker-{i}"
                    if fake.get(f"/api/v1/namespaces/{ns}/pods/{name}"):
                        continue
                    fake.put({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": name, "namespace": ns, "labels": app["metadata"]["labels"]},
                              "spec": {"containers": [{"name": "pytorch", "image": "i"}]}})  # fmt: skip
                    network = "Libfabric / provider efa" if healthy else "Socket"
                    fake.log(ns, name, f"node ip-10-0-9-{i}: HEALTHY")
                    fake.log(ns, name, _report(f"ip-10-0-9-{i}", network, "352 GB/s over 16 ranks", healthy))

    threading.Thread(target=loop, daemon=True).start()
    return stop


@pytest.fixture
def fabric_ctx(trial_ctx):
    from infra.offline.pods import stack_image

    plan = trial_ctx.found["trial"]
    image = stack_image(trial_ctx.config, "abc123")  # the stack's own image: EFA pools take no other
    trial_ctx.found["trial"] = trial.Plan(plan.pool, 2, image, "production", plan.rate_usd_h, plan.seconds)
    return trial_ctx


def test_nccl_over_efa_at_the_pools_bandwidth_passes_and_the_check_is_deleted(cluster, fabric_ctx):
    from infra.cli.verify import fabric

    stop = operator(cluster, healthy=True)
    try:
        outcome = fabric.run(fabric_ctx)
    finally:
        stop.set()
    assert outcome.status == "PASS"
    assert "NCCL network Libfabric / provider efa, all-reduce bus bandwidth 352 GB/s" in outcome.evidence
    assert fabric_ctx.found["fabric_deleted"] == ["higgsfield-healthcheck", "healthcheck-h100", "healthcheck-h100-nccl"]
    assert not [k for k in cluster.objects if k[1] == "foundation" and k[2] in ("configmaps", "jobs", "pytorchjobs")]


def test_nccl_falling_back_to_sockets_fails_with_what_the_ranks_saw(cluster, fabric_ctx):
    from infra.cli.verify import fabric

    stop = operator(cluster, healthy=False)
    try:
        outcome = fabric.run(fabric_ctx)
    finally:
        stop.set()
    assert outcome.status == "FAIL" and "NCCL network Socket (expected Libfabric / provider efa)" in outcome.evidence
    assert not [k for k in cluster.objects if k[2] == "pytorchjobs"]


def test_nccl_needs_a_trial_of_two_nodes(trial_ctx):
    from infra.cli.verify import fabric

    outcome = fabric.run(trial_ctx)
    assert outcome.status == "SKIP" and outcome.fix == "rerun with --allow-cost --nodes 2"

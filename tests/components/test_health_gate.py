"""The health gate's decisions on its node, against a fake Kubernetes API server over real HTTP
(the gate's own REST client talks to it), and its replacement call against botocore's Stubber.

The fake answers as the API server does for the three calls the gate makes:
- GET /api/v1/nodes/NAME and /api/v1/namespaces/NS/configmaps/NAME: the object, or 404 with a
  Status of reason NotFound;
- PATCH with `application/merge-patch+json` only (415 otherwise), RFC 7386 semantics (a list such
  as spec.taints is replaced whole, null removes a key), a stale metadata.resourceVersion in the
  patch is 409 Conflict (the API server's optimistic concurrency: api-concepts "resource versions");
  every write bumps resourceVersion;
- POST events: an Event about a cluster-scoped object must be in namespace `default` (else 422
  Invalid: legacyValidateEvent, kubernetes/kubernetes: pkg/apis/core/validation/events.go);
  generateName gets a suffix.
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import health_gate
import pytest
from botocore.stub import Stubber
from health_gate import ApiError, KubernetesApi

from tests.aws_errors import add_wire_error

TAINT = "startup-taint.cluster-autoscaler.kubernetes.io/higgsfield-gate"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
PASS = {
    "node": "n1",
    "healthy": True,
    "results": [
        {"check": "GPU count", "value": "8", "expected": "8", "ok": True},
        {"check": "EFA devices", "value": "32", "expected": "32", "ok": True},
    ],
}
FAIL = {
    "node": "n1",
    "healthy": False,
    "results": [
        {"check": "GPU count", "value": "8", "expected": "8", "ok": True},
        {"check": "EFA devices", "value": "31", "expected": "32", "ok": False},
        {"check": "bf16 matmul", "value": "400 TFLOP/s (40% of peak)", "expected": ">= 60% of 989", "ok": False},
    ],
}


def merge(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class FakeApiServer:
    def __init__(self) -> None:
        self.nodes: dict[str, dict] = {}
        self.config_maps: dict[tuple[str, str], dict] = {}
        self.events: list[dict] = []
        self.nodeclaims: dict[str, dict] = {}  # Karpenter's, by name (karpenter.sh/v1, cluster-scoped)
        self.requests: list[tuple[str, str]] = []
        self.race_on_read: int | None = None  # on this read of a node, another writer changes it right after
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._answer(
                    code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": reason,
                        "message": message,
                        "code": code,
                    },
                )

            def _body(self) -> dict:
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

            def do_GET(self):
                fake.requests.append(("GET", self.path))
                if self.path.startswith("/api/v1/nodes?"):  # a list by label selector (equality terms only)
                    from urllib.parse import parse_qs, urlsplit

                    selector = parse_qs(urlsplit(self.path).query)["labelSelector"][0]
                    terms = dict(term.split("=", 1) for term in selector.split(","))
                    items = [
                        n
                        for n in fake.nodes.values()
                        if all(n["metadata"]["labels"].get(k) == v for k, v in terms.items())
                    ]
                    return self._answer(
                        200,
                        {
                            "apiVersion": "v1",
                            "kind": "NodeList",
                            "metadata": {"resourceVersion": "1"},
                            "items": copy.deepcopy(items),
                        },
                    )
                parts = self.path.split("/")
                if self.path.startswith("/api/v1/namespaces/") and parts[5] == "configmaps":
                    found = fake.config_maps.get((parts[4], parts[6]))
                    return (
                        self._answer(200, found)
                        if found
                        else self._status(404, "NotFound", f'configmaps "{parts[6]}" not found')
                    )
                name = parts[-1]
                if not self.path.startswith("/api/v1/nodes/") or name not in fake.nodes:
                    return self._status(404, "NotFound", f'nodes "{name}" not found')
                node = copy.deepcopy(fake.nodes[name])
                reads = sum(1 for m, path in fake.requests if m == "GET" and path == self.path)
                if reads == fake.race_on_read:  # the gate gets this copy; the node changes before its patch
                    fake._write(name, {"metadata": {"labels": {"other-controller": "touched"}}})
                self._answer(200, node)

            def do_PATCH(self):
                fake.requests.append(("PATCH", self.path))
                name = self.path.rsplit("/", 1)[-1]
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    return self._status(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
                if name not in fake.nodes:
                    return self._status(404, "NotFound", f'nodes "{name}" not found')
                patch = self._body()
                wanted = patch.get("metadata", {}).get("resourceVersion")
                if wanted is not None and wanted != fake.nodes[name]["metadata"]["resourceVersion"]:
                    return self._status(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; please '
                        "apply your changes to the latest version and try again",
                    )
                patch.get("metadata", {}).pop("resourceVersion", None)
                self._answer(200, fake._write(name, patch))

            def do_DELETE(self):
                fake.requests.append(("DELETE", self.path))
                name = self.path.rsplit("/", 1)[-1]
                if not self.path.startswith("/apis/karpenter.sh/v1/nodeclaims/") or name not in fake.nodeclaims:
                    return self._status(404, "NotFound", f'nodeclaims.karpenter.sh "{name}" not found')
                self._answer(200, fake.nodeclaims.pop(name))

            def do_POST(self):
                fake.requests.append(("POST", self.path))
                namespace = self.path.split("/")[4]
                event = self._body()
                if not event["involvedObject"].get("namespace") and namespace != "default":
                    return self._status(
                        422,
                        "Invalid",
                        'Event "x" is invalid: involvedObject.namespace: Invalid value: "": does not match '
                        "event.namespace",
                    )
                event["metadata"]["name"] = event["metadata"].pop("generateName") + f"{len(fake.events):05d}"
                event["metadata"]["namespace"] = namespace
                fake.events.append(event)
                self._answer(201, event)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # polled every 10 ms: shutdown() waits for the next poll (half a second at the default)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        self.api = KubernetesApi(f"http://127.0.0.1:{self.server.server_address[1]}", lambda: "token")

    def _write(self, name: str, patch: dict) -> dict:
        node = merge(self.nodes[name], patch)
        node["metadata"]["resourceVersion"] = str(int(self.nodes[name]["metadata"]["resourceVersion"]) + 1)
        self.nodes[name] = node
        return node

    def add_node(self, name: str = "n1", pool: str = "h100", taints: list[dict] | None = None) -> None:
        self.nodes[name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": "5d3f",
                "resourceVersion": "100",
                "labels": {"higgsfield.io/pool": pool, "kubernetes.io/hostname": name},
            },
            "spec": {
                "providerID": "aws:///us-east-2b/i-0abc123def4567890",
                "taints": [GPU_TAINT, {"key": TAINT, "value": "pending", "effect": "NoSchedule"}]
                if taints is None
                else taints,
            },
        }

    def taint_keys(self, name: str = "n1") -> list[str]:
        return [t["key"] for t in self.nodes[name]["spec"].get("taints") or []]

    def labels(self, name: str = "n1") -> dict:
        return self.nodes[name]["metadata"]["labels"]


@pytest.fixture
def fake():
    server = FakeApiServer()
    for pool, on_failure in (("h100", "keep"), ("h200-block", "replace")):
        expected = {"EXPECTED_GPUS": "8", "ON_FAILURE": on_failure, "CHECK_TIMEOUT_SECONDS": "1200"}
        server.config_maps[("higgsfield-health", f"health-gate-{pool}")] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "data": {"expectations.json": json.dumps(expected)},
        }
    yield server
    server.server.shutdown()


@pytest.fixture
def env():
    return {
        "NODE_NAME": "n1",
        "STARTUP_TAINT": TAINT,
        "EXPECTATIONS_NAMESPACE": "higgsfield-health",
        "EVENTS_NAMESPACE": "default",
        "EXPECTATIONS_WAIT_SECONDS": "0",
    }


def _checks(report):
    return lambda expected, node, timeout: report


def test_a_passing_node_loses_the_startup_taint_and_is_labelled_healthy(fake, env):
    fake.add_node()
    health_gate.gate(fake.api, env, checks=_checks(PASS))
    assert fake.taint_keys() == ["nvidia.com/gpu"]
    assert fake.labels()["higgsfield.io/health"] == "healthy" and "higgsfield.io/health-failed" not in fake.labels()


def test_a_failing_node_keeps_the_taint_and_is_labelled_with_the_first_failed_check(fake, env):
    fake.add_node()
    health_gate.gate(fake.api, env, checks=_checks(FAIL))
    assert TAINT in fake.taint_keys()
    assert fake.labels()["higgsfield.io/health"] == "unhealthy"
    assert fake.labels()["higgsfield.io/health-failed"] == "efa-devices"


def test_a_failure_records_a_warning_event_on_the_node_naming_every_failed_check(fake, env):
    fake.add_node()
    health_gate.gate(fake.api, env, checks=_checks(FAIL))
    (event,) = fake.events
    assert (event["type"], event["reason"], event["involvedObject"]["kind"], event["involvedObject"]["name"]) == (
        "Warning",
        "HealthCheckFailed",
        "Node",
        "n1",
    )
    assert "EFA devices: 31 (expected 32)" in event["message"] and "bf16 matmul" in event["message"]


def test_events_about_nodes_are_refused_outside_the_default_namespace(fake, env):
    """The fake enforces the API server's rule, so the gate's namespace setting is what it must be."""
    fake.add_node()
    outcome = health_gate.gate(fake.api, {**env, "EVENTS_NAMESPACE": "higgsfield-health"}, checks=_checks(PASS))
    assert fake.events == [] and "422" in outcome.notes[-1]
    assert fake.taint_keys() == ["nvidia.com/gpu"]  # the verdict stands without its Event


def test_the_other_taints_and_labels_of_the_node_are_kept(fake, env):
    fake.add_node(
        taints=[
            GPU_TAINT,
            {"key": "dedicated", "value": "research", "effect": "NoSchedule"},
            {"key": TAINT, "value": "pending", "effect": "NoSchedule"},
        ]
    )
    health_gate.gate(fake.api, env, checks=_checks(PASS))
    assert fake.taint_keys() == ["nvidia.com/gpu", "dedicated"]
    assert fake.labels()["higgsfield.io/pool"] == "h100"


def test_a_node_changed_between_read_and_patch_is_read_again(fake, env):
    fake.add_node()
    fake.race_on_read = 2  # the gate's first read decides whether to check, its second precedes the patch
    outcome = health_gate.gate(fake.api, env, checks=_checks(PASS))
    assert outcome.patched and [m for m, _ in fake.requests].count("PATCH") == 2
    assert fake.labels()["other-controller"] == "touched" and fake.labels()["higgsfield.io/health"] == "healthy"


def test_a_node_without_the_startup_taint_is_never_checked_again(fake, env):
    """A gate pod that restarts next to a running job must not burn the job's GPUs."""
    fake.add_node(taints=[GPU_TAINT])

    def never(*args):
        raise AssertionError("checks ran on a node that already passed")

    assert health_gate.gate(fake.api, env, checks=never) is None
    assert fake.requests == [("GET", "/api/v1/nodes/n1")]


def test_a_node_of_an_unknown_pool_fails_and_stays_tainted(fake, env):
    fake.add_node(pool="mystery")
    health_gate.gate(fake.api, env, checks=_checks(PASS))
    assert TAINT in fake.taint_keys() and fake.labels()["higgsfield.io/health-failed"] == "pool"


def test_a_missing_node_is_a_not_found_error(fake):
    with pytest.raises(ApiError) as error:
        fake.api.get_node("absent")
    assert (error.value.status, error.value.reason) == (404, "NotFound")


def test_no_report_at_all_is_a_failure_not_a_pass():
    decision = health_gate.decide({"node": "n1", "healthy": True, "results": []}, "keep")
    assert not decision.healthy and not decision.remove_taint


def test_a_check_that_hangs_fails_the_node():
    report = health_gate.run_checks({"EXPECTED_GPUS": "8"}, "n1", timeout=0.001)
    assert report["healthy"] is False and report["results"][0]["check"] == "timeout"


def _stubbed_autoscaling():
    client = boto3.client("autoscaling", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


SET_HEALTH = {"InstanceId": "i-0abc123def4567890", "HealthStatus": "Unhealthy", "ShouldRespectGracePeriod": False}


def test_a_failed_node_of_a_replace_pool_is_marked_unhealthy_in_its_auto_scaling_group(fake, env):
    fake.add_node(pool="h200-block")
    client, stub = _stubbed_autoscaling()
    stub.add_response("set_instance_health", {}, SET_HEALTH)
    with stub:
        outcome = health_gate.gate(
            fake.api, env, checks=_checks(FAIL), replace=lambda i: health_gate.mark_unhealthy(client, i)
        )
    stub.assert_no_pending_responses()
    assert outcome.replacement == "i-0abc123def4567890 marked Unhealthy in its Auto Scaling group"
    assert TAINT in fake.taint_keys()


def test_replacement_is_retried_when_auto_scaling_reports_contention():
    client, stub = _stubbed_autoscaling()
    add_wire_error(
        stub,
        "autoscaling",
        "set_instance_health",
        "ResourceContention",
        "You already have a pending update to an Auto Scaling resource",
        expected_params=SET_HEALTH,
    )
    stub.add_response("set_instance_health", {}, SET_HEALTH)
    with stub:
        assert "marked Unhealthy" in health_gate.mark_unhealthy(client, "i-0abc123def4567890", pause=0)
    stub.assert_no_pending_responses()


def test_a_denied_replacement_is_reported_and_leaves_the_node_tainted(fake, env):
    fake.add_node(pool="h200-block")
    client, stub = _stubbed_autoscaling()
    add_wire_error(
        stub,
        "autoscaling",
        "set_instance_health",
        "AccessDenied",
        "User: arn:aws:sts::123456789012:assumed-role/health-gate/x is not authorized to perform: "
        "autoscaling:SetInstanceHealth",
        expected_params=SET_HEALTH,
    )
    with stub:
        outcome = health_gate.gate(
            fake.api, env, checks=_checks(FAIL), replace=lambda i: health_gate.mark_unhealthy(client, i, pause=0)
        )
    assert outcome.replacement.startswith("i-0abc123def4567890 not marked Unhealthy: AccessDenied:")
    assert TAINT in fake.taint_keys() and fake.labels()["higgsfield.io/health"] == "unhealthy"


def test_a_keep_pool_never_asks_for_a_replacement(fake, env):
    fake.add_node(pool="h100")

    def replace(instance):
        raise AssertionError("replacement asked for a keep pool")

    outcome = health_gate.gate(fake.api, env, checks=_checks(FAIL), replace=replace)
    assert outcome.replacement == "not asked"


def _karpenter_node(fake, claim: str = "gpu-a100-x7k2p") -> None:
    """A node launched by Karpenter: its NodeClaim owns it (UpdateNodeOwnerReferences, kubernetes-sigs/karpenter)."""
    fake.add_node(pool="a100")
    fake.nodes["n1"]["metadata"]["ownerReferences"] = [
        {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim, "uid": "9e1c", "blockOwnerDeletion": True}
    ]
    fake.nodeclaims[claim] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": claim},
        "status": {"nodeName": "n1"},
    }
    expected = {"EXPECTED_GPUS": "8", "ON_FAILURE": "replace", "CHECK_TIMEOUT_SECONDS": "1200"}
    fake.config_maps[("higgsfield-health", "health-gate-a100")] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "data": {"expectations.json": json.dumps(expected)},
    }


def test_a_failed_karpenter_node_has_its_nodeclaim_deleted_not_an_auto_scaling_replacement(fake, env):
    _karpenter_node(fake)

    def replace(instance):
        raise AssertionError("a Karpenter node has no Auto Scaling group")

    outcome = health_gate.gate(fake.api, env, checks=_checks(FAIL), replace=replace)
    assert fake.nodeclaims == {} and outcome.replacement.startswith("NodeClaim gpu-a100-x7k2p deleted")
    # no job lands while it drains
    assert TAINT in fake.taint_keys() and fake.labels()["higgsfield.io/health"] == "unhealthy"


def test_a_passing_karpenter_node_keeps_its_nodeclaim(fake, env):
    _karpenter_node(fake)
    health_gate.gate(fake.api, env, checks=_checks(PASS))
    assert list(fake.nodeclaims) == ["gpu-a100-x7k2p"] and TAINT not in fake.taint_keys()


def test_a_nodeclaim_that_cannot_be_deleted_is_reported_and_the_node_stays_tainted(fake, env):
    _karpenter_node(fake)
    fake.nodeclaims.clear()
    outcome = health_gate.gate(fake.api, env, checks=_checks(FAIL))
    assert outcome.replacement.startswith("NodeClaim gpu-a100-x7k2p not deleted: 404") and TAINT in fake.taint_keys()


def test_failed_check_names_become_label_values():
    assert health_gate.label_value("NCCL all-reduce busbw") == "nccl-all-reduce-busbw"
    assert health_gate.label_value("x" * 80) == "x" * 63


def _dcgm_levels(fake, env, labels: dict) -> str:
    """The DCGM level the gate asks node_check for on node n1 with these extra labels."""
    fake.config_maps[("higgsfield-health", "health-gate-h100")]["data"]["expectations.json"] = json.dumps(
        {"EXPECTED_GPUS": "8", "ON_FAILURE": "keep", "DCGM_DIAG_LEVEL": "1", "DCGM_DIAG_LEVEL_RECHECK": "2"}
    )
    fake.add_node()
    fake.nodes["n1"]["metadata"]["labels"].update(labels)
    asked = []
    health_gate.gate(fake.api, env, checks=lambda expected, node, timeout: asked.append(expected) or PASS)
    return asked[0]["DCGM_DIAG_LEVEL"]


def test_a_joining_node_gets_dcgms_join_level(fake, env):
    assert _dcgm_levels(fake, env, {}) == "1"


def test_a_recheck_the_watchdog_asked_for_runs_dcgms_deeper_level(fake, env):
    assert _dcgm_levels(fake, env, {"higgsfield.io/health": "recheck"}) == "2"

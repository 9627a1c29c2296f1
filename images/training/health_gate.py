"""The health gate on a new GPU node (the DaemonSet of components/healthgate.py runs it).

A node of a gated pool joins with the startup taint. This program runs node_check.py against the
pool's expectations and then:
  pass -> removes the taint, labels the node higgsfield.io/health=healthy, records an Event;
  fail -> keeps the taint, labels it higgsfield.io/health=unhealthy and
          higgsfield.io/health-failed=<first failed check>, records a Warning Event, and when the
          pool asks for it (onFailure: replace) marks the instance Unhealthy in its Auto Scaling
          group, which terminates and replaces it; on a Karpenter node (owned by a NodeClaim)
          it deletes the NodeClaim instead, which Karpenter drains and terminates.
A node without the taint (already passed, or the pod restarted next to a running job) is left
alone: the checks burn every GPU, and never run next to a job. Then the pod idles.

A rebooted node keeps its Node object, so its `healthy` label, and gets no startup taint back
(REBOOT below). On a pass the gate stamps the running kernel's boot id on the node; with
`--after-reboot` (the health-reboot-check DaemonSet on every passed gated node) this program compares
it with the kernel's at its start, and after a reboot puts the startup taint back and labels the
node `rebooted`, so the gate's DaemonSet checks it again.

Standard library only (boto3 only for the replacement); the Kubernetes calls are plain REST with
the pod's service account, and `decide` / `apply_decision` take any object with the API's three
calls, so the logic is tested against a fake API server (tests/components/test_health_gate.py).
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Protocol

HEALTH_LABEL = "higgsfield.io/health"
FAILED_LABEL = "higgsfield.io/health-failed"
POOL_LABEL = "higgsfield.io/pool"
COMPONENT = "higgsfield-health-gate"
NODE_CHECK = Path(__file__).with_name("node_check.py")
# REBOOT: the kubelet applies its registration taints (the startup taint, from the node group) and
# labels only when it creates the Node object; after a reboot the object exists, and the kubelet
# reconciles only the attach-detach annotation, its default labels and extended/huge-page resources
# (tryRegisterWithAPIServer, kubernetes/kubernetes:pkg/kubelet/kubelet_node_status.go). A GPU that
# failed before the reboot (EKS node auto-repair reboots managed nodes for some GPU faults: its
# AcceleratedHardwareReady action "Replace or Reboot") would come back unchecked. The kernel's boot
# id changes at every boot and is the same in every container of the node.
BOOT_LABEL = "higgsfield.io/health-boot"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
REBOOTED = "rebooted"
# RECHECK: the job watchdog (job_watchdog.py) asks for a node to be checked again - the pre-flight
# named it, or it is a persistent straggler - with an Event about the node, reason RECHECK_REASON.
# This program, on the node (--after-reboot), acts on the newest one it has not acted on (its uid in
# RECHECK_LABEL): the startup taint back, the node labelled `recheck`, so the gate's DaemonSet runs
# there again (it waits for the node's GPUs while a job still holds them) and no new pod lands on it.
RECHECK = "recheck"
RECHECK_REASON = "NodeRecheckRequested"
RECHECK_LABEL = "higgsfield.io/health-recheck"
RECHECK_POLL_SECONDS = 30.0


class ApiError(Exception):
    """A Kubernetes API answer other than 2xx: `status` is the HTTP code, `reason` the Status reason."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason = status, reason


class NodeApi(Protocol):
    def get_node(self, name: str) -> dict: ...

    def patch_node(self, name: str, patch: dict) -> dict: ...

    def create_event(self, namespace: str, event: dict) -> dict: ...

    def get_config_map(self, namespace: str, name: str) -> dict: ...

    def list_nodes(self, label_selector: str) -> dict: ...

    def delete_nodeclaim(self, name: str) -> dict: ...

    def list_events(self, namespace: str, field_selector: str) -> dict: ...


class KubernetesApi:
    """The three calls the gate makes, over HTTPS with a bearer token (JSON merge patch for nodes:
    a list such as spec.taints is replaced whole, a label set to null is removed, RFC 7386)."""

    def __init__(self, base_url: str, token: Callable[[], str], context: ssl.SSLContext | None = None) -> None:
        self.base_url, self.token, self.context = base_url.rstrip("/"), token, context

    @classmethod
    def in_cluster(cls) -> KubernetesApi:
        account = Path("/var/run/secrets/kubernetes.io/serviceaccount")
        host = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}"
        # the projected token is rotated by the kubelet: read it for every call
        return cls(
            host,
            lambda: (account / "token").read_text().strip(),
            ssl.create_default_context(cafile=str(account / "ca.crt")),
        )

    def _call(self, method: str, path: str, body: dict | None = None, content_type: str = "application/json") -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.base_url}{path}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token()}",
                "Content-Type": content_type,
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as answer:
                return json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as error:
            try:
                status = json.loads(error.read() or b"{}")
            except ValueError:
                status = {}
            raise ApiError(error.code, status.get("reason", ""), status.get("message", "")) from None

    def get_node(self, name: str) -> dict:
        return self._call("GET", f"/api/v1/nodes/{name}")

    def patch_node(self, name: str, patch: dict) -> dict:
        return self._call("PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")

    def create_event(self, namespace: str, event: dict) -> dict:
        return self._call("POST", f"/api/v1/namespaces/{namespace}/events", event)

    def get_config_map(self, namespace: str, name: str) -> dict:
        return self._call("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    def list_nodes(self, label_selector: str) -> dict:
        return self._call("GET", "/api/v1/nodes?" + urllib.parse.urlencode({"labelSelector": label_selector}))

    def delete_nodeclaim(self, name: str) -> dict:
        return self._call("DELETE", f"/apis/{NODECLAIM_GROUP}/v1/nodeclaims/{name}")

    def list_events(self, namespace: str, field_selector: str) -> dict:
        query = urllib.parse.urlencode({"fieldSelector": field_selector})
        return self._call("GET", f"/api/v1/namespaces/{namespace}/events?{query}")


@dataclass(frozen=True)
class Decision:
    """What the gate does to its node after the checks."""

    healthy: bool
    labels: dict[str, str | None]
    remove_taint: bool
    event_type: str  # Normal | Warning
    event_reason: str
    message: str
    replace: bool = False


def label_value(text: str) -> str:
    """`NCCL all-reduce busbw` -> `nccl-all-reduce-busbw` (a label value: 63 of [A-Za-z0-9-_.])."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:63].rstrip("-") or "unknown"


def decide(report: dict, on_failure: str) -> Decision:
    """The gate's verdict on node_check.py's JSON report (`{"node", "healthy", "results": [{check,
    value, expected, ok}]}`)."""
    failed = [r for r in report.get("results", []) if not r["ok"]]
    if report.get("healthy") and not failed and report.get("results"):
        checks = ", ".join(r["check"] for r in report["results"])
        return Decision(
            True,
            {HEALTH_LABEL: "healthy", FAILED_LABEL: None},
            True,
            "Normal",
            "HealthCheckPassed",
            f"passed: {checks}",
        )
    first = failed[0]["check"] if failed else "no checks ran"
    detail = (
        "; ".join(f"{r['check']}: {r['value']} (expected {r['expected']})" for r in failed)
        or "the node check reported nothing"
    )
    replace = on_failure == "replace"
    message = f"failed {detail}; the node keeps its startup taint" + (
        "; marking the instance Unhealthy for replacement" if replace else ""
    )
    return Decision(
        False,
        {HEALTH_LABEL: "unhealthy", FAILED_LABEL: label_value(first)},
        False,
        "Warning",
        "HealthCheckFailed",
        message,
        replace,
    )


def has_taint(node: dict, key: str) -> bool:
    return any(t.get("key") == key for t in node.get("spec", {}).get("taints") or [])


# Karpenter makes the NodeClaim that launched a node the node's owner (UpdateNodeOwnerReferences,
# kubernetes-sigs/karpenter:pkg/utils/nodeclaim/nodeclaim.go at the core commit aws/karpenter-
# provider-aws@v1.14.1 pins); deleting the NodeClaim drains the node and terminates the instance
# (website/content/en/docs/concepts/disruption.md@v1.14.1, "Manual Methods"). Karpenter itself never
# removes a node whose startup taint stays: it has a registration timeout, none for initialization
# (pkg/controllers/nodeclaim/lifecycle/liveness.go), and until the node is initialized it ignores the
# startup taint when it plans (StateNode.Taints, pkg/controllers/state/statenode.go), so it counts
# the failed node as room for the waiting pods and launches nothing for them.
NODECLAIM_GROUP = "karpenter.sh"


def nodeclaim_of(node: dict) -> str | None:
    """The name of the Karpenter NodeClaim that owns the node, None for any other node."""
    for owner in node.get("metadata", {}).get("ownerReferences") or []:
        if owner.get("kind") == "NodeClaim" and owner.get("apiVersion", "").startswith(f"{NODECLAIM_GROUP}/"):
            return owner.get("name")
    return None


def instance_id(node: dict) -> str | None:
    """`aws:///us-east-2b/i-0123456789abcdef0` (spec.providerID) -> `i-0123456789abcdef0`."""
    found = re.search(r"/(i-[0-9a-f]+)$", node.get("spec", {}).get("providerID", ""))
    return found.group(1) if found else None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_event(node: dict, decision: Decision, namespace: str) -> dict:
    """A core/v1 Event about the node (shown by `kubectl describe node` and `kubectl get events`)."""
    name = node["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.health-gate-", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"].get("uid", "")},
        "type": decision.event_type,
        "reason": decision.event_reason,
        "message": decision.message[:1024],
        "source": {"component": COMPONENT, "host": name},
        "firstTimestamp": _now(),
        "lastTimestamp": _now(),
        "count": 1,
    }


@dataclass
class Outcome:
    """What the gate did (printed to its log)."""

    patched: bool = False
    event: bool = False
    replacement: str = "not asked"
    notes: list[str] = field(default_factory=list)


def boot_id(path: Path = BOOT_ID) -> str:
    """The running kernel's boot id (a UUID: a valid label value)."""
    return path.read_text().strip()


def apply_decision(
    api: NodeApi,
    node_name: str,
    decision: Decision,
    taint_key: str,
    events_namespace: str,
    replace: Callable[[str], str] | None = None,
    attempts: int = 5,
    boot: str | None = None,
) -> Outcome:
    """Patch the node's taints and labels (with its resourceVersion: a 409 Conflict means someone
    else changed the node, so read it again and retry), record the Event, and ask for the
    replacement. A failed Event or replacement does not undo the labels: the taint decides. A pass
    stamps `boot` (the kernel's boot id) as BOOT_LABEL."""
    outcome = Outcome()
    node: dict = {}
    labels = {**decision.labels, **({BOOT_LABEL: boot} if decision.healthy and boot else {})}
    for _ in range(attempts):
        node = api.get_node(node_name)
        taints = [
            t
            for t in node.get("spec", {}).get("taints") or []
            if not (decision.remove_taint and t.get("key") == taint_key)
        ]
        if not decision.remove_taint and not has_taint(node, taint_key):
            taints.append({"key": taint_key, "value": "failed", "effect": "NoSchedule"})
        version = node["metadata"]["resourceVersion"]
        patch = {"metadata": {"resourceVersion": version, "labels": labels}, "spec": {"taints": taints}}
        try:
            api.patch_node(node_name, patch)
            outcome.patched = True
            break
        except ApiError as error:
            if error.status != 409:
                raise
            outcome.notes.append("node changed while patching; read it again")
    else:
        raise ApiError(409, "Conflict", f"node {node_name} kept changing over {attempts} attempts")
    try:
        api.create_event(events_namespace, node_event(node, decision, events_namespace))
        outcome.event = True
    except ApiError as error:
        outcome.notes.append(f"event not recorded: {error}")
    claim = nodeclaim_of(node)
    if decision.replace and claim:
        try:
            api.delete_nodeclaim(claim)
            outcome.replacement = f"NodeClaim {claim} deleted: Karpenter drains the node and terminates its instance"
        except ApiError as error:
            outcome.replacement = f"NodeClaim {claim} not deleted: {error}"
    elif decision.replace:
        instance = instance_id(node)
        outcome.replacement = (
            replace(instance)
            if (replace and instance)
            else f"no instance id in spec.providerID {node.get('spec', {}).get('providerID')!r}"
        )
    return outcome


# Auto Scaling errors, by the code on the wire (what ClientError.response["Error"]["Code"] holds),
# not botocore's shape name: SetInstanceHealth declares the shape ResourceContentionFault, whose
# code is "ResourceContention", HTTP 500 (botocore data/autoscaling/2011-01-01/service-2.json,
# shapes.ResourceContentionFault.error). Throttling is the query protocol's throttling code
# (botocore data/_retry.json, definitions.throttling). A denied call answers AccessDenied (403),
# which is reported, not retried. tests/aws_errors.py reads these codes from botocore's model.
RETRYABLE = ("ResourceContention", "Throttling")


def mark_unhealthy(client: Any, instance: str, attempts: int = 3, pause: float = 2.0) -> str:
    """SetInstanceHealth Unhealthy (the group then terminates the instance and launches another):
    retried on contention, reported (not raised) on anything else."""
    from botocore.exceptions import ClientError

    for attempt in range(attempts):
        try:
            client.set_instance_health(InstanceId=instance, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False)
            return f"{instance} marked Unhealthy in its Auto Scaling group"
        except ClientError as error:
            code = error.response["Error"]["Code"]
            if code in RETRYABLE and attempt + 1 < attempts:
                time.sleep(pause * (attempt + 1))
                continue
            return f"{instance} not marked Unhealthy: {code}: {error.response['Error'].get('Message', '')}"
    return f"{instance} not marked Unhealthy"  # pragma: no cover - the loop returns


def run_checks(expected: dict[str, str], node_name: str, timeout: float) -> dict:
    """node_check.py in a child process with the pool's expectations; a hang or a crash is a failure."""
    env = {**os.environ, **expected, "NODE_NAME": node_name}
    try:
        done = subprocess.run(
            [sys.executable, str(NODE_CHECK)], env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {
            "node": node_name,
            "healthy": False,
            "results": [
                {"check": "timeout", "value": f"over {timeout:.0f}s", "expected": "checks finish", "ok": False}
            ],
        }
    print(done.stdout, done.stderr, sep="\n", flush=True)
    for line in reversed(done.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {
        "node": node_name,
        "healthy": False,
        "results": [
            {"check": "node check crashed", "value": f"exit {done.returncode}", "expected": "a report", "ok": False}
        ],
    }


def pool_expectations(api: NodeApi, namespace: str, pool: str, wait: float, pause: float = 15.0) -> dict | None:
    """The pool's expectations from its ConfigMap; on a first deploy it may appear after the
    DaemonSet, so a missing one is waited for `wait` seconds before the pool counts as unknown."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return json.loads(api.get_config_map(namespace, f"health-gate-{pool}")["data"]["expectations.json"])
        except ApiError as error:
            if error.status != 404 or time.monotonic() + pause > deadline:
                if error.status == 404:
                    return None
                raise
        time.sleep(pause)


# The driver GPU feature discovery reads from NVML and labels each GPU node with
# (NVIDIA/k8s-device-plugin:internal/lm/nvml.go@v0.19.3, "nvidia.com/cuda.driver-version.full").
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
# The AMI a managed node runs (set by EKS on managed node group nodes; unverified here:
# `kubectl get nodes -L eks.amazonaws.com/nodegroup-image`); without it, the kubelet's osImage and
# kernelVersion (status.nodeInfo) tell two AMI releases apart.
AMI_LABEL = "eks.amazonaws.com/nodegroup-image"


def ami_of(node: dict) -> tuple[str, ...]:
    image = node["metadata"].get("labels", {}).get(AMI_LABEL)
    info = node.get("status", {}).get("nodeInfo", {})
    return (image,) if image else (info.get("osImage", ""), info.get("kernelVersion", ""))


def pool_drivers(api: NodeApi, node: dict, pool: str) -> dict[str, list[str]]:
    """driver -> names of the pool's healthy nodes that run the same AMI as `node` (during an AMI
    update the pool has two; each AMI's nodes must agree among themselves)."""
    try:
        peers = api.list_nodes(f"{POOL_LABEL}={pool},{HEALTH_LABEL}=healthy").get("items", [])
    except ApiError as error:
        print(f"pool's drivers not compared: {error}", flush=True)
        return {}
    found: dict[str, list[str]] = {}
    for peer in peers:
        driver = peer["metadata"].get("labels", {}).get(DRIVER_LABEL)
        if peer["metadata"]["name"] != node["metadata"]["name"] and driver and ami_of(peer) == ami_of(node):
            found.setdefault(driver, []).append(peer["metadata"]["name"])
    return found


def gate(
    api: NodeApi,
    env: dict[str, str],
    checks: Callable[[dict[str, str], str, float], dict] = run_checks,
    replace: Callable[[str], str] | None = None,
    boot: Callable[[], str] = boot_id,
) -> Outcome | None:
    """One pass of the gate on its node; None when the node has no startup taint (nothing to do)."""
    node_name, taint_key = env["NODE_NAME"], env["STARTUP_TAINT"]
    node = api.get_node(node_name)
    if not has_taint(node, taint_key):
        return None
    pool = node["metadata"].get("labels", {}).get(POOL_LABEL, "")
    expected = pool_expectations(
        api, env["EXPECTATIONS_NAMESPACE"], pool, float(env.get("EXPECTATIONS_WAIT_SECONDS", "300"))
    )
    if expected is None:
        report = {
            "node": node_name,
            "healthy": False,
            "results": [{"check": "pool", "value": pool or "none", "expected": "a gated pool", "ok": False}],
        }
        on_failure = "keep"
    else:
        on_failure = expected.get("ON_FAILURE", "keep")
        wanted = {k: v for k, v in expected.items() if k != "ON_FAILURE"}
        if node["metadata"].get("labels", {}).get(HEALTH_LABEL) == RECHECK:  # asked for: DCGM's deeper level
            wanted["DCGM_DIAG_LEVEL"] = expected.get("DCGM_DIAG_LEVEL_RECHECK", wanted.get("DCGM_DIAG_LEVEL", "0"))
        wanted["POOL_DRIVERS"] = json.dumps(pool_drivers(api, node, pool))
        report = checks(wanted, node_name, float(expected.get("CHECK_TIMEOUT_SECONDS", "1200")))
    decision = decide(report, on_failure)
    return apply_decision(
        api,
        node_name,
        decision,
        taint_key,
        env.get("EVENTS_NAMESPACE", "default"),
        replace,
        boot=boot() if decision.healthy else None,
    )


def after_reboot(api: NodeApi, env: dict[str, str], boot: Callable[[], str] = boot_id, attempts: int = 5) -> str:
    """On a node that passed: when its BOOT_LABEL is not the running kernel's boot id, the node has
    rebooted since its checks - put the startup taint back and label it REBOOTED (the gate's
    DaemonSet then runs there and checks it again) and record an Event. A node passed before the
    label existed gets the current boot stamped. Returns what it did."""
    node_name, taint_key, current = env["NODE_NAME"], env["STARTUP_TAINT"], boot()
    for _ in range(attempts):
        node = api.get_node(node_name)
        labels = node["metadata"].get("labels", {})
        if labels.get(HEALTH_LABEL) != "healthy" or labels.get(BOOT_LABEL) == current:
            return "nothing to do: not passed, or passed in this boot"
        version = node["metadata"]["resourceVersion"]
        if BOOT_LABEL not in labels:
            patch: dict = {"metadata": {"resourceVersion": version, "labels": {BOOT_LABEL: current}}}
            done = f"boot {current} stamped (passed before boots were recorded)"
        else:
            taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != taint_key]
            taints.append({"key": taint_key, "value": REBOOTED, "effect": "NoSchedule"})
            patch = {
                "metadata": {"resourceVersion": version, "labels": {HEALTH_LABEL: REBOOTED}},
                "spec": {"taints": taints},
            }
            done = f"rebooted since its checks (boot {labels[BOOT_LABEL]} -> {current}): taint back, checks again"
        try:
            api.patch_node(node_name, patch)
        except ApiError as error:
            if error.status != 409:
                raise
            continue
        if "spec" in patch:
            decision = Decision(False, {}, False, "Warning", "RebootedSinceHealthCheck", f"node {done}")
            namespace = env.get("EVENTS_NAMESPACE", "default")
            try:
                api.create_event(namespace, node_event(node, decision, namespace))
            except ApiError as error:
                done += f"; event not recorded: {error}"
        return done
    raise ApiError(409, "Conflict", f"node {node_name} kept changing over {attempts} attempts")


def recheck(api: NodeApi, env: dict[str, str], attempts: int = 5) -> str | None:
    """On a node that passed: act on the newest re-check request about it not acted on yet (RECHECK
    above); None when there is none."""
    node_name, taint_key = env["NODE_NAME"], env["STARTUP_TAINT"]
    namespace = env.get("EVENTS_NAMESPACE", "default")
    selector = f"involvedObject.kind=Node,involvedObject.name={node_name},reason={RECHECK_REASON}"
    requests = api.list_events(namespace, selector).get("items", [])
    if not requests:
        return None
    newest = max(requests, key=lambda e: (e.get("lastTimestamp") or "", e["metadata"].get("name", "")))
    handled = newest["metadata"].get("uid") or newest["metadata"]["name"]
    for _ in range(attempts):
        node = api.get_node(node_name)
        labels = node["metadata"].get("labels", {})
        if labels.get(HEALTH_LABEL) != "healthy" or labels.get(RECHECK_LABEL) == label_value(handled):
            return None
        taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != taint_key]
        taints.append({"key": taint_key, "value": RECHECK, "effect": "NoSchedule"})
        patch = {
            "metadata": {
                "resourceVersion": node["metadata"]["resourceVersion"],
                "labels": {HEALTH_LABEL: RECHECK, RECHECK_LABEL: label_value(handled)},
            },
            "spec": {"taints": taints},
        }
        try:
            api.patch_node(node_name, patch)
        except ApiError as error:
            if error.status != 409:
                raise
            continue
        done = f"re-check asked ({newest.get('message', '')}): startup taint back, the gate checks the node again"
        decision = Decision(False, {}, False, "Warning", "HealthRecheck", f"node {done}")
        try:
            api.create_event(namespace, node_event(node, decision, namespace))
        except ApiError as error:
            done += f"; event not recorded: {error}"
        return done
    raise ApiError(409, "Conflict", f"node {node_name} kept changing over {attempts} attempts")


def main() -> int:
    api = KubernetesApi.in_cluster()
    if "--after-reboot" in sys.argv[1:]:
        env = dict(os.environ)
        print(f"after reboot: {after_reboot(api, env)}", flush=True)
        while True:  # once per boot the reboot check; then the re-check requests, as they come
            try:
                done = recheck(api, env)
                if done:
                    print(done, flush=True)
            except (ApiError, OSError) as error:
                print(f"re-check requests not read: {error}", flush=True)
            time.sleep(RECHECK_POLL_SECONDS)

    def replace(instance: str) -> str:
        import boto3  # only pools with onFailure: replace need it (Pod Identity credentials)

        return mark_unhealthy(boto3.client("autoscaling"), instance)

    outcome = gate(api, dict(os.environ), replace=replace)
    print(
        "node already passed its checks (no startup taint): nothing to do" if outcome is None else f"gate: {outcome}",
        flush=True,
    )
    while True:  # a DaemonSet pod does not end; it holds nothing (no GPU request) while it waits
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())

"""Round 12 attacker, on node repair of a shared GPU node once the node monitoring agent's kernel monitor is off
(components/addons.py NODE_MONITORING_AGENT_CONFIGURATION): what a team's pod still writes into the kubelet's journal
that the agent reads as a failed node, and what `higgsfield verify` makes of the agent's conditions.

The agent reads the kubelet's journal (SYSLOG_IDENTIFIER=kubelet), one entry at a time, its MESSAGE trimmed
(aws/eks-node-monitoring-agent:pkg/observer/journald.go@v1.6.4). The kubelet writes klog's text format to stderr,
and klog writes a value holding a line break as it is, each of its lines on a line of its own after a tab; only a
value without one is quoted (kubernetes/klog:internal/serialize/keyvalues.go writeStringValue@2ca1701ced7f). journald
keeps each line of a service's stderr as an entry of its own, so a line of a value a team's pod chose is a kubelet
entry of the team's choosing, whole, with nothing before it but a tab."""

from __future__ import annotations

import datetime
import json
import re

import pytest

from tests.cli.test_verify_checks import NOW, cluster, ctx, gpu_node, one, plan  # noqa: F401 (fixtures)
from tests.conftest import STACKS, config_of, plan_of

AGENT = "eks-node-monitoring-agent"
OBSERVED = [s for s in STACKS if config_of(s).observability.enabled]

# The agent's monitors, by their configuration name, that turn a node condition False (a Fatal reason) on a kubelet
# journal entry matching a pattern, unanchored (Go's MatchString / FindStringSubmatch), at aws/eks-node-monitoring-
# agent@v1.6.4:
# - kernel-monitor, KernelReady: ForkFailedOutOfPIDs (monitors/kernel/monitor.go forkFailedOutOfPidRegexp,
#   goRuntimeOutOfPidRegexp);
# - runtime, ContainerRuntimeReady: PodStuckTerminating, Fatal (pkg/reasons/reasons.yaml), after its third match
#   (MinOccurrences(2): pkg/manager/manager.go exportCondition) (monitors/runtime/monitor.go podStuckTerminating).
# No other monitor turns a condition False on a kubelet entry: storage reads the journal for Warnings alone (events:
# monitors/storage/monitor.go handleKubeletLogs), networking reads IPAMD's and kube-proxy's logs, nvidia reads DCGM.
KUBELET_FATAL_PATTERNS = {
    "kernel-monitor": (r".*fork/exec.*resource temporarily unavailable", r"failed to create new OS thread.*errno=11"),
    "runtime": (
        r'"Pod still has one or more containers in the non-exited state and will not be removed from desired state"'
        r' pod="(.*)"',
    ),
}


def _kubelet_entries(message: str, **values: str) -> list[str]:
    """The journal entries of one kubelet log call (klog's text format, as in the module's docstring), trimmed."""
    text = f"E1207 04:00:00.000000    2345 kuberuntime_container.go:1] {json.dumps(message)}"
    for key, value in values.items():
        if "\n" in value:
            text += f" {key}=<\n" + "".join(f"\t{line}\n" for line in value.split("\n")) + " >"
        else:
            text += f" {key}={json.dumps(value)}"
    return [line.strip() for line in text.split("\n")]


# What a team's container prints to stderr from an exec postStart hook that then fails (`sh -c 'cat /forged >&2;
# exit 1'`; a shell builds it from pieces, so no admission reads it): each line one that a monitor above matches.
FORGED_STDERR = "\n".join(
    [
        *3
        * [
            '"Pod still has one or more containers in the non-exited state and will not be removed from desired state"'
            ' pod="other-team/their-gang-worker-0"'
        ],
        "fork/exec /bin/x: resource temporarily unavailable",
    ]
)
# The error the kubelet logs, at error level (any verbosity), when a postStart hook fails: the CRI client's exit
# error carries the hook's command and its stderr as they are (kubernetes/kubernetes:staging/src/k8s.io/cri-client/
# pkg/remote_runtime.go ExecSync@dc84f0e4fa7d, "command '%s' exited with %d: %s"), returned through RunInContainer and
# the hook runner, and logged by startContainer (pkg/kubelet/kuberuntime/kuberuntime_container.go@fbba6b47ad98:
# klog.ErrorS(handlerErr, "Failed to execute PostStartHook", ...)). An exec probe's output reaches the journal the
# same way at V(1) ("Probe failed" ... output=: pkg/kubelet/prober/prober.go@1b79bc18127b), which nodeadm's kubelet
# logs (logging.verbosity 2: awslabs/amazon-eks-ami:nodeadm/internal/kubelet/config.go@e48b98ad), and so does a grpc
# probe's answer from the pod's own server.
HOOK_ERROR = f"command 'sh -c cat /forged >&2; exit 1' exited with 1: {FORGED_STDERR}"


def _agent_configuration(stack: str) -> dict:
    (addon,) = [a for a in plan_of(stack).of_type("aws:eks/addon:Addon") if a.inputs["addonName"] == AGENT]
    return json.loads(addon.inputs.get("configurationValues") or "{}")


@pytest.mark.parametrize("stack", OBSERVED)
def test_no_enabled_monitor_reads_a_kubelet_line_a_team_forged_as_a_failed_node(stack):
    """A team's pod on a GPU node another team's gang shares fails its postStart hook three times with the runtime
    monitor's line on stderr: the kubelet logs each line of it as a journal entry of its own, the runtime monitor
    reads them as a pod stuck terminating (the kubelet's own such line is V(4), pkg/kubelet/volumemanager/populator/
    desired_state_of_world_populator.go, never logged at nodeadm's verbosity 2, so only a forged one is ever seen),
    sets ContainerRuntimeReady False, and node repair replaces the node 30 minutes later with every pod on it
    (aws/karpenter-provider-aws:pkg/cloudprovider/cloudprovider.go RepairPolicies@v1.14.1; EKS auto-repair on node
    groups). The condition stays False until the agent restarts (pkg/manager/node_exporter.go Fatal: nothing sets a
    managed condition True again). Turning the kernel monitor off left this one on.
    Verify on a staging cluster: a pod with `lifecycle.postStart.exec.command: [sh, -c, "printf '\\n\\"Pod still has
    one or more containers in the non-exited state and will not be removed from desired state\\" pod=\\"x/y\\"\\n%.0s'
    1 2 3 >&2; exit 1"]` on a GPU node, `journalctl -u kubelet | grep -c '^.*"Pod still has'` on the node, then
    `kubectl get node NODE -o jsonpath='{.status.conditions[?(@.type=="ContainerRuntimeReady")]}'` (False,
    PodStuckTerminating, before the fix; no such condition after it)."""
    monitors = _agent_configuration(stack)["nodeAgent"]["monitors"]
    enabled = [name for name in KUBELET_FATAL_PATTERNS if (monitors.get(name) or {}).get("enabled", True)]
    entries = _kubelet_entries("Failed to execute PostStartHook", err=HOOK_ERROR, pod="team-a/decoy")
    assert [
        (name, entry)
        for name in enabled
        for entry in entries
        if any(re.search(pattern, entry) for pattern in KUBELET_FATAL_PATTERNS[name])
    ] == []


def _with_condition(node: dict, kind: str, status: str, heartbeat_age_s: float | None) -> dict:
    condition = {"type": kind, "status": status, "reason": "Ready"}
    if heartbeat_age_s is not None:
        beat = NOW - datetime.timedelta(seconds=heartbeat_age_s)
        condition["lastHeartbeatTime"] = beat.strftime("%Y-%m-%dT%H:%M:%SZ")
    node["status"]["conditions"] = [condition]
    return node


def test_a_gpu_node_whose_runtime_monitor_reports_fails(ctx, cluster):  # noqa: F811
    """ContainerRuntimeReady, renewed a minute ago, means the agent's runtime monitor runs on the node, which a
    team's line in the kubelet's log turns False (test_no_enabled_monitor_reads_a_kubelet_line_a_team_forged_as_a_
    failed_node): `higgsfield verify` says so, as it does for the kernel monitor."""
    cluster.put(_with_condition(gpu_node("ip-10-0-1-5", "healthy", tainted=False), "ContainerRuntimeReady", "True", 60))
    outcome = one("kube.gpu-nodes", ctx)
    assert outcome.status == "FAIL" and "ip-10-0-1-5: carries ContainerRuntimeReady" in outcome.evidence


def test_a_gpu_node_keeping_the_condition_of_a_monitor_turned_off_passes(ctx, cluster):  # noqa: F811
    """The agent upserts its conditions and never removes one (pkg/manager/node_exporter.go reportManagedConditions
    @v1.6.4), so every node that ran the agent before its kernel monitor went off keeps KernelReady True, its
    heartbeat stopped (the agent renews its conditions every 5 minutes: heartbeatInterval). No monitor will turn it
    False, so nothing repairs on it; failing it would fail `higgsfield verify` after the deploy on every GPU node
    until each is replaced. Verify on a cluster after the deploy: `kubectl get nodes -o json | jq '.items[].status.
    conditions[] | select(.type=="KernelReady") | .lastHeartbeatTime'` stops moving."""
    cluster.put(_with_condition(gpu_node("ip-10-0-1-5", "healthy", tainted=False), "KernelReady", "True", 7200))
    assert one("kube.gpu-nodes", ctx).status == "PASS"


@pytest.mark.parametrize("stack", OBSERVED)
def test_a_change_of_the_agents_monitors_restarts_the_agent(stack):
    """The agent reads its monitors' settings once, at start (cmd/eks-node-monitoring-agent/main.go LoadMonitorConfig
    @v1.6.4), from a ConfigMap the add-on's chart writes (templates/monitor-configmap.yaml), and its DaemonSet's pod
    template names neither the settings nor a checksum of them (templates/daemonset.yaml): once an agent runs with
    some monitors' settings, a later change of them (a monitor turned off) reaches the ConfigMap and `aws.addons`
    passes, but the running agents keep their monitors until each restarts. A pod annotation carrying the settings
    (`nodeAgent.podAnnotations`, charts/configuration.schema.json) changes the template, so the DaemonSet rolls.
    Verify on a cluster: after the deploy, `kubectl -n kube-system rollout status ds/eks-node-monitoring-agent` and
    `kubectl -n kube-system logs ds/eks-node-monitoring-agent | grep 'monitors disabled by configuration'`."""
    node_agent = _agent_configuration(stack)["nodeAgent"]
    annotations = node_agent.get("podAnnotations") or {}
    assert node_agent["monitors"] in [json.loads(value) for value in annotations.values()]

"""Node repair on a shared GPU node, read from the kubelet's journal. The EKS node monitoring agent's kernel monitor
sets KernelReady False (ForkFailedOutOfPIDs, Fatal) on any kubelet line matching `.*fork/exec.*resource temporarily
unavailable` or `failed to create new OS thread.*errno=11`, unanchored (aws/eks-node-monitoring-agent:monitors/kernel/
monitor.go@v1.6.4 handleKubelet), and node repair replaces a node whose KernelReady stays False with every pod on it
(components/karpenter.py node_repair_gates; EKS auto-repair on node groups). The kubelet logs text a team's pod
chooses in ways no admission reads, so the monitor is off (components/addons.py NODE_MONITORING_AGENT_CONFIGURATION)
and a GPU pod's probes and hooks are its team's choice (docs/design/tenancy.md, "Node repair on a shared node")."""

from __future__ import annotations

import json

import pytest

from tests.conftest import STACKS, config_of, plan_of
from tests.security.test_tenancy import _pod, denied_by

AGENT = "eks-node-monitoring-agent"


def _agent_configuration(stack: str) -> dict:
    (addon,) = [a for a in plan_of(stack).of_type("aws:eks/addon:Addon") if a.inputs["addonName"] == AGENT]
    return json.loads(addon.inputs.get("configurationValues") or "{}")


@pytest.mark.parametrize("stack", [s for s in STACKS if config_of(s).observability.enabled])
def test_no_kubelet_line_a_team_writes_can_bring_node_repair_on_a_shared_node(stack):
    """Each of these puts the agent's text in a kubelet line of a node another team's gang shares, and none is a
    string admission can read: `$(A)$(B)` in a command, expanded from env (a ConfigMap's among it) before the start
    fails with the path in the runtime's error (kubernetes/kubernetes:pkg/kubelet/container/helpers.go
    ExpandContainerCommandAndArgs); a `subPathExpr` expanded the same way and refused as an absolute path
    (pkg/kubelet/kubelet_pods.go makeMounts); a grpc or httpGet probe whose own server answers with the text, logged
    as the probe's output at V(1) (pkg/kubelet/prober/prober.go); an image whose entrypoint is a path of the text.
    With the kernel monitor off, the agent sets no KernelReady condition at all (its README, "When a monitor is
    disabled"), so no repair follows any of them. Verify on a cluster: `aws eks describe-addon --cluster-name
    CLUSTER --addon-name eks-node-monitoring-agent --query addon.configurationValues`, then on a GPU node
    `kubectl get node NODE -o jsonpath='{.status.conditions[?(@.type=="KernelReady")]}'` (empty on a node that joined
    since; one that carried it before keeps it, unstamped, which `kube.gpu-nodes` names with the command that removes
    it; `higgsfield verify` runs both: aws.addons, kube.gpu-nodes)."""
    assert _agent_configuration(stack)["nodeAgent"]["monitors"]["kernel-monitor"] == {"enabled": False}


@pytest.mark.parametrize("stack", [s for s in STACKS if config_of(s).observability.enabled])
def test_the_agent_keeps_watching_the_gpus_disks_and_network(stack):
    """Only the monitors that read the kubelet's journal are off (kernel, and the container runtime's:
    tests/security/test_r12_kattack.py): the GPU (nvidia: XIDs, DCGM), storage and networking monitors still report,
    and node repair still replaces a node whose GPU failed."""
    monitors = _agent_configuration(stack)["nodeAgent"]["monitors"]
    assert {name for name, settings in monitors.items() if settings.get("enabled") is False} == {
        "kernel-monitor",
        "runtime",
    }


@pytest.mark.parametrize(
    "handler",
    [
        {"livenessProbe": {"exec": {"command": ["sh", "-c", "test -f /tmp/healthy"]}}},
        {"lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "kill -TERM 1"]}}}},
    ],
    ids=["exec probe", "exec preStop hook"],
)
def test_a_gpu_pods_exec_probe_or_hook_is_admitted(handler):
    """What an exec probe or hook prints reaches the kubelet's log, which no monitor that node repair acts on reads."""
    pod = _pod()
    pod["spec"]["containers"][0].update(handler)
    assert not denied_by(pod)


def test_a_gpu_pods_command_may_name_a_path_the_agent_once_read_as_spent_pids():
    """A team's command is its own: a text in it no longer decides another team's node."""
    pod = _pod()
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", "echo fork/exec resource temporarily unavailable"]
    assert not denied_by(pod)

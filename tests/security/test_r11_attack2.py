"""Round 11 attacker, second batch, on the cluster: other text a team puts in the kubelet's journal that the EKS node
monitoring agent reads as the node's PIDs spent (ForkFailedOutOfPIDs, Fatal), which node repair answers by
replacing a GPU node another team's gang shares (components/tenancy.py container_hardening_validations). The agent's
kubelet reader matches two patterns, unanchored: `.*fork/exec.*resource temporarily unavailable` and
`failed to create new OS thread.*errno=11` (aws/eks-node-monitoring-agent:monitors/kernel/monitor.go@53135431c5a54f73
ad35f660616f9d735fa00060, handleKubelet: forkFailedOutOfPidRegexp, goRuntimeOutOfPidRegexp)."""

from __future__ import annotations

import copy

import pytest

from components import gang_deadline
from tests.conftest import STACKS, assert_plan_rejects, set_key
from tests.security.test_tenancy import _job, _pod, denied_by

# The Go runtime's message when clone fails with EAGAIN, as the agent's second pattern reads it.
AGENTS_THREAD_FAILURE = "/failed to create new OS thread errno=11"


@pytest.mark.parametrize("where", ["command", "args", "workingDir"])
def test_a_team_pod_that_would_write_the_agents_thread_failure_into_the_kubelet_log_is_refused(where):
    """A container whose command is a path of the Go runtime's thread failure fails to start, and the kubelet logs
    the runtime's error with the path in it (`exec: "/failed to create new OS thread errno=11": stat ...: no such
    file or directory`), which the agent's goRuntimeOutOfPidRegexp reads as ForkFailedOutOfPIDs as surely as
    `fork/exec`. Verify on a staging cluster: a pod with `command: ["/failed to create new OS thread errno=11"]` on
    a GPU node, then `kubectl get node NODE -o jsonpath='{.status.conditions[?(@.type=="KernelReady")]}'` (False,
    ForkFailedOutOfPIDs)."""
    pod = _pod()
    pod["spec"]["containers"][0][where] = AGENTS_THREAD_FAILURE if where == "workingDir" else [AGENTS_THREAD_FAILURE]
    assert denied_by(pod)


def test_a_team_pod_whose_exec_probe_prints_the_agents_fork_failure_is_refused():
    """An exec probe's output reaches the kubelet's journal ("Probe failed" ... output=,
    kubernetes/kubernetes:pkg/kubelet/prober/prober.go, V(1)) and no admission reads what a command prints; a shell
    builds the agent's text from pieces (fork/e''xec). Fixed: a GPU pod's probes and hooks are not exec
    (components/tenancy.py container_hardening_validations).
    Unverified here: that the kubelet of an AL2023 EKS node logs at --v of 1 or more (`journalctl -u kubelet |
    grep 'Probe failed'` on a node). Verify on a staging cluster: this pod on a GPU node, then KernelReady as above."""
    pod = _pod()
    pod["spec"]["containers"][0]["livenessProbe"] = {
        "exec": {"command": ["sh", "-c", "echo fork/e''xec: resource temporarily unavailable; exit 1"]},
        "periodSeconds": 10,
    }
    assert denied_by(pod)


@pytest.mark.parametrize("stack", STACKS)
def test_a_stack_may_not_pin_a_monitoring_agent_that_reads_application_xids_as_a_failed_gpu(
    stack, project_copy, capsys
):
    """Up to v1.6.3 the agent sets AcceleratedHardwareReady False (Fatal) on XID 13 (graphics engine exception) and
    XID 31 (GPU memory page fault) (aws/eks-node-monitoring-agent:monitors/nvidia/dcgm/dcgm_policies.go@v1.6.0
    WellKnownXidCodes = 13, 31, 48, ...), which any CUDA kernel that reads out of bounds raises; node repair then
    replaces the node with another team's gang on it, and no admission can see a kernel's bug. From v1.6.4 the list
    holds hardware XIDs only (same path @v1.6.4; commit 4e89770). A pin below that is refused before anything is
    made, and `higgsfield preflight` fails an EKS default below it (tests/cli/test_preflight.py). Verify on a cluster:
    `aws eks describe-addon --cluster-name CLUSTER --addon-name eks-node-monitoring-agent --query
    addon.addonVersion`, and on a shared GPU node a pod running `python -c "import torch; torch.empty(1,
    device='cuda')[10**9] = 1"` (XID 31 in `dmesg`), then the node's AcceleratedHardwareReady condition."""
    key = "higgsfield:addonVersions"
    assert_plan_rejects(
        project_copy,
        capsys,
        stack,
        set_key(key, {"eks-node-monitoring-agent": "v1.6.3-eksbuild.1"}),
        f"{key}.eks-node-monitoring-agent",
        "below v1.6.4",
    )


@pytest.mark.parametrize("hook", ["postStart", "preStop"])
def test_a_gpu_pods_exec_lifecycle_hook_is_refused(hook):
    """A failed exec hook's output is logged by the kubelet with its "message" (pkg/kubelet/lifecycle/handlers.go)."""
    pod = _pod()
    pod["spec"]["containers"][0]["lifecycle"] = {hook: {"exec": {"command": ["sh", "-c", "exit 1"]}}}
    assert denied_by(pod)


def test_a_probe_path_that_forges_the_agents_fork_failure_is_refused():
    """An httpGet hook's path is logged as written (handlers.go, the "path" value)."""
    pod = _pod()
    pod["spec"]["containers"][0]["lifecycle"] = {
        "postStart": {"httpGet": {"path": "/fork/exec resource temporarily unavailable", "port": 80}}
    }
    assert denied_by(pod)


def test_a_gpu_pods_http_readiness_probe_is_admitted():
    pod = _pod()
    pod["spec"]["containers"][0]["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": 8000}}
    assert not denied_by(pod)


def _job_with_exec_probe() -> dict:
    job = _job()
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["readinessProbe"] = {"exec": {"command": ["true"]}}
    return job


def test_a_job_made_before_the_exec_rule_is_still_suspended_by_the_gang_deadline():
    """An UPDATE keeping every container as it was (the gang deadline's suspension of a job admitted before the rule)
    is admitted: refusing it would fail the deadline's every pass while such a job lasts."""
    old = _job_with_exec_probe()
    suspended = copy.deepcopy(old)
    suspended["spec"]["runPolicy"]["suspend"] = True
    assert not denied_by(suspended, operation="UPDATE", old=old, user=gang_deadline.USER)


def test_a_team_adding_an_exec_probe_to_its_gpu_job_is_refused():
    old = _job()
    assert denied_by(_job_with_exec_probe(), operation="UPDATE", old=old)

"""Round 11 attacker, second batch, on the cluster: the node monitoring agent's version, whose GPU monitor node repair
acts on, and a GPU pod's probes."""

from __future__ import annotations

import pytest

from tests.conftest import STACKS, assert_plan_rejects, set_key
from tests.security.test_tenancy import _pod, denied_by


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


def test_a_gpu_pods_http_readiness_probe_is_admitted():
    pod = _pod()
    pod["spec"]["containers"][0]["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": 8000}}
    assert not denied_by(pod)

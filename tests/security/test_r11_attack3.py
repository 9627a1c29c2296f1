"""Round 11 attacker, third batch, on the cluster: tenant text the kubelet writes into its journal that the team policy
does not read, and that the EKS node monitoring agent's kubelet reader takes as the node's PIDs spent
(ForkFailedOutOfPIDs, Fatal: `.*fork/exec.*resource temporarily unavailable`, `failed to create new OS
thread.*errno=11`, unanchored; aws/eks-node-monitoring-agent:monitors/kernel/monitor.go@53135431c5a54f73
ad35f660616f9d735fa00060, handleKubelet). Node repair answers it by replacing the node under every pod on it
(components/tenancy.py container_hardening_validations)."""

from __future__ import annotations

import pytest

from tests.security.test_tenancy import _pod, denied_by

FORK_FAILURE = "fork/exec resource temporarily unavailable"


@pytest.mark.parametrize("probe", ["livenessProbe", "readinessProbe", "startupProbe"])
def test_a_tcp_probe_whose_host_forges_the_agents_fork_failure_is_refused(probe):
    """A tcpSocket probe's host is free text: the API server validates only its port
    (kubernetes/kubernetes:pkg/apis/core/validation/validation.go validateTCPSocketAction). The probe dials
    host:port, the dial fails with `dial tcp: lookup fork/exec resource temporarily unavailable: no such host`,
    and the kubelet logs that error as the probe's output ("Probe failed" ... output=, V(1),
    kubernetes/kubernetes:pkg/kubelet/prober/prober.go), which the agent's first pattern matches.
    Verify on a staging cluster: this pod on a GPU node, `journalctl -u kubelet | grep 'Probe failed'` on the
    node, then `kubectl get node NODE -o jsonpath='{.status.conditions[?(@.type=="KernelReady")]}'`
    (False, ForkFailedOutOfPIDs)."""
    pod = _pod()
    pod["spec"]["containers"][0][probe] = {"tcpSocket": {"host": FORK_FAILURE, "port": 8000}}
    assert denied_by(pod)


@pytest.mark.parametrize("probe", ["livenessProbe", "readinessProbe", "startupProbe"])
def test_an_http_probe_whose_host_forges_the_agents_fork_failure_is_refused(probe):
    """An httpGet probe's host is free text as well (validateHTTPGetAction checks port and scheme), and the
    lookup error the kubelet logs as the probe's output names the host unescaped (the URL beside it escapes it;
    the dial error does not)."""
    pod = _pod()
    pod["spec"]["containers"][0][probe] = {"httpGet": {"host": FORK_FAILURE, "path": "/healthz", "port": 8000}}
    assert denied_by(pod)


@pytest.mark.parametrize("hook", ["postStart", "preStop"])
def test_a_lifecycle_hook_whose_host_forges_the_agents_fork_failure_is_refused(hook):
    """A failed httpGet hook is logged with its error, the dial's lookup of the host among it
    (kubernetes/kubernetes:pkg/kubelet/lifecycle/handlers.go handlerRunner.Run)."""
    pod = _pod()
    pod["spec"]["containers"][0]["lifecycle"] = {
        hook: {"httpGet": {"host": FORK_FAILURE, "path": "/", "port": 8000}},
    }
    assert denied_by(pod)


def test_a_gpu_pods_probe_on_its_own_host_is_admitted():
    """The fix reads the host's text, it does not refuse a host: a probe of a named local address passes."""
    pod = _pod()
    pod["spec"]["containers"][0]["readinessProbe"] = {
        "tcpSocket": {"host": "127.0.0.1", "port": 8000},
    }
    assert not denied_by(pod)


@pytest.mark.xfail(
    strict=True,
    reason="open: the kubelet expands $(VAR) in command and args from the container's env before it starts it "
    "(kubernetes/kubernetes:pkg/kubelet/container/helpers.go ExpandContainerCommandAndArgs); the policy reads "
    "the unexpanded text, and env from a ConfigMap (valueFrom, envFrom) it cannot read at all",
)
def test_a_command_that_builds_the_agents_fork_failure_from_env_variables_is_refused():
    """command `$(A)$(B)` with A=`/fork/` and B=`exec resource temporarily unavailable` runs
    `/fork/exec resource temporarily unavailable`, which does not exist; the kubelet logs the runtime's
    `exec: "/fork/exec resource temporarily unavailable": stat ...: no such file or directory`, the agent's
    first pattern. No string the policy reads holds `fork/exec`. A complete refusal needs the expansion (or no
    `$(` but `$$(` in a team's command and args); the Kubeflow operator's own init containers use a shell's
    `$(seq N)`, which the kubelet leaves as written (no variable of that name).
    Verify on a staging cluster: this pod on a GPU node, `kubectl describe pod` (RunContainerError with the
    path), then the node's KernelReady condition as above."""
    pod = _pod()
    container = pod["spec"]["containers"][0]
    container["env"] = [
        {"name": "A", "value": "/fork/"},
        {"name": "B", "value": "exec resource temporarily unavailable"},
    ]
    container["command"] = ["$(A)$(B)"]
    assert denied_by(pod)


@pytest.mark.xfail(
    strict=True,
    reason="open: a volume mount's subPathExpr is expanded from env at the kubelet (kubernetes/kubernetes:pkg/kubelet/"
    "kubelet_pods.go makeMounts), and a failed subPath is logged with the expanded path; the policy reads neither",
)
def test_a_sub_path_expression_that_expands_to_the_agents_fork_failure_is_refused():
    """subPathExpr `$(P)` with P=`/fork/exec resource temporarily unavailable` passes the API server's validation
    (it checks the unexpanded text: not absolute, no `..`); the kubelet expands it, refuses the absolute path with
    ``error SubPath `/fork/exec resource temporarily unavailable` must not be an absolute path`` (makeMounts), and
    logs the pod's sync error with that text ("Error syncing pod, skipping", at error level). Same class as the
    command's $(VAR): the value may come from a ConfigMap (valueFrom) that no admission of the Pod reads.
    Verify on a staging cluster: this pod on a GPU node, `kubectl describe pod` (CreateContainerConfigError),
    `journalctl -u kubelet | grep 'must not be an absolute path'` on the node, then its KernelReady condition."""
    pod = _pod()
    pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    container = pod["spec"]["containers"][0]
    container["env"] = [{"name": "P", "value": "/" + FORK_FAILURE}]
    container["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch", "subPathExpr": "$(P)"}]
    assert denied_by(pod)


@pytest.mark.xfail(
    strict=True,
    reason="open: a grpc or httpGet probe asks the pod's own server, whose answer the kubelet logs when the probe "
    "fails; the policy keeps exec off GPU pods on the premise that these carry no text of the pod's",
)
@pytest.mark.parametrize(
    "probe",
    [{"grpc": {"port": 9000}}, {"httpGet": {"path": "/healthz", "port": 8000}}],
    ids=["grpc", "httpGet"],
)
def test_a_gpu_pods_probe_whose_own_server_answers_with_the_agents_fork_failure_is_refused(probe):
    """The pod's own server writes the probe's output. gRPC: a Health.Check answered with an error status carries the
    server's message into the output, `error: health rpc probe failed: rpc error: code = Unknown desc = fork/exec
    resource temporarily unavailable` (kubernetes/kubernetes:pkg/probe/grpc/grpc.go Probe). HTTP: a response whose
    header line has no colon fails Go's client with the line in the error, `net/http: HTTP/1.x transport connection
    broken: malformed MIME header: missing colon: "fork/exec resource temporarily unavailable"` (golang/go:src/net/
    textproto/reader.go mustHaveFieldNameColon; a line with a colon and a control byte in its value gives `malformed
    MIME header line: ...`, readMIMEHeader), which is the probe's output. The kubelet logs a failed probe's output
    ("Probe failed" ... output=, V(1): kubernetes/kubernetes:pkg/kubelet/prober/prober.go), the agent reads it, as
    for an exec probe.
    A tcpSocket probe's output is the dial's alone. Closing it in admission leaves GPU pods tcpSocket probes only;
    a kubelet at --v=0 on GPU nodes (nodeadm KubeletConfiguration logging.verbosity: 0) drops every V(1) probe and
    hook line instead, exec's included. Verify on a staging cluster: a GPU pod whose gRPC health server answers
    status.Error(codes.Unknown, "fork/exec resource temporarily unavailable"), `journalctl -u kubelet | grep 'Probe
    failed'` on its node, then the node's KernelReady condition (False, ForkFailedOutOfPIDs)."""
    pod = _pod()
    pod["spec"]["containers"][0]["readinessProbe"] = probe
    assert denied_by(pod)

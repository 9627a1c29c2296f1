"""Round 11 attacker, on the cluster and the CLI: `higgsfield jobs ... --kind Job` (infra/cli/client.py) against the
fake API server (tests/fake_kube_api.py), and what Karpenter's node repair (components/karpenter.py
node_repair_gates) lets a team do to another team's nodes."""

from __future__ import annotations

import base64
import email
import threading

import pytest
import yaml

from components import karpenter
from components.efa import node_user_data
from components.gpu_pools import container_toolkit_script
from infra.cli.main import main
from tests.cli.test_job_client import (  # noqa: F401 (fixtures)
    _batch_job,
    _batch_pod,
    _podgroup,
    api,
    kubeconfig,
    short_rechecks,
)
from tests.conftest import config_of


def test_logs_follow_of_a_batch_job_goes_on_to_the_pod_its_job_makes_after_a_failure(
    api,
    kubeconfig,
    short_rechecks,
    capsys,  # noqa: F811
):
    """examples/eval-sweep.yaml is a scavenger Job: Volcano takes its pods back for serving (DisruptionTarget,
    which its podFailurePolicy ignores) and the Job makes them again, and any other failure is retried up to its
    backoffLimit of 3. `logs --follow` stopped at the first pod's end and printed nothing of the retry, exit 0, as
    if the Job were over. On a cluster: `higgsfield jobs logs STACK eval -n TEAM --kind Job --follow` on a Job whose
    only pod exits 1 (`backoffLimit: 1`); the command returns while `kubectl get pods -l job-name=eval -w` shows the
    second pod start."""
    api.put(_batch_job({"active": 1}))
    api.put(_batch_pod(0, "node-a"))
    api.log("llm", "eval-0-eval", "attempt 1")
    retry = _batch_pod(0, "node-b")
    retry["metadata"].update(name="eval-0-retry", uid="uid-eval-0-retry")

    def later(delay: float, step) -> None:
        threading.Timer(delay, step).start()

    later(0.3, lambda: api.put(_batch_pod(0, "node-a", "Failed")))
    later(0.8, lambda: (api.put(retry), api.log("llm", "eval-0-retry", "attempt 2")))
    complete = {"succeeded": 1, "failed": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    later(1.3, lambda: (api.put(_batch_job(complete)), api.put({**retry, "status": {"phase": "Succeeded"}})))
    assert main(["jobs", "logs", "prod", "eval", "-n", "llm", "--kind", "Job", "--follow"]) == 0
    # each pod's lines in the order they come: both pods' streams run at once
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "node-a eval-0-eval attempt 1",
        "node-b eval-0-retry attempt 2",
    ]


def test_status_of_a_batch_job_whose_gang_volcano_has_not_admitted_is_not_running(api, kubeconfig, capsys):  # noqa: F811
    """A batch Job's `active` counts its pending pods as well as its running ones (JobStatus.active, "The number of
    pending and running pods which are not terminating": kubernetes/api:batch/v1/types.go@v0.35.0). Its gang held
    at quota (PodGroup Pending, no pod placed) read `Running, 2 active`: a user waiting on the queue was told the
    job runs. On a cluster: `higgsfield jobs status STACK eval -n TEAM --kind Job` on a Job beyond its team's quota,
    beside `kubectl get pods -l batch.kubernetes.io/job-name=eval` (all Pending)."""
    api.put(_batch_job({"active": 2}))
    api.put(_podgroup("podgroup-u-eval", "llm", "Pending", "2026-01-01T00:00:00Z"))
    api.put(_batch_pod(0, None, "Pending"))
    api.put(_batch_pod(1, None, "Pending"))
    assert main(["jobs", "status", "prod", "eval", "-n", "llm", "--kind", "Job"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("Job llm/eval: Pending, 2 active, 0 succeeded, 0 failed of 2; gang Pending"), first


def _node_config(user_data: str) -> dict:
    """The nodeadm NodeConfig part of a node's MIME multipart user data."""
    message = email.message_from_string(user_data)
    (part,) = [p for p in message.walk() if p.get_content_type() == "application/node.eks.aws"]
    return yaml.safe_load(part.get_payload())


def _gpu_node_user_data() -> dict[str, str]:
    """What nodeadm gets on a Karpenter GPU node and on a node-group GPU node (components/gpu_pools.py's call; a
    launch template's user data is base64)."""
    pool = config_of("prod").gpu_pools[0]
    group = node_user_data(
        raid0=True, hugepages=0, fast_image_pull=True, scripts=[container_toolkit_script()], locked_memory=pool.efa
    )
    return {"karpenter": karpenter.user_data(pool), "node group": base64.b64decode(str(group)).decode()}


@pytest.mark.parametrize("provisioner", ["karpenter", "node group"])
def test_a_gpu_nodes_kubelet_caps_the_pids_of_each_pod(provisioner):
    """Teams share GPU nodes (a pod asking for fewer GPUs than the node has). The kubelet's podPidsLimit defaults to
    -1, no limit (KubeletConfiguration, kubernetes/kubelet:config/v1beta1/types.go): one team's pod could start threads
    until the node's PID space is spent (its memory limit, a share of a GPU node's hundreds of GiB, is what bounds it),
    and every other pod on the node then fails its next fork or thread. Fixed: `kubelet.config.podPidsLimit` in the
    GPU nodes' NodeConfig (components/efa.py POD_PIDS_LIMIT). Verify on a cluster: a pod running
    `python -c "import threading,time; [threading.Thread(target=time.sleep, args=(1e9,)).start() for _ in
    iter(int, 1)]"` on a shared GPU node stops at the limit (`cat /sys/fs/cgroup/pids.peak` in it), and a second
    pod on the node still starts processes."""
    config = _node_config(_gpu_node_user_data()[provisioner])
    limit = (((config.get("spec") or {}).get("kubelet") or {}).get("config") or {}).get("podPidsLimit")
    assert isinstance(limit, int) and limit > 0

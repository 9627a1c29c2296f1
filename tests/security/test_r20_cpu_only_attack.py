"""Round 20's attack on the CPU-only quota and the paths beside it (the launcher pod the Training Operator makes of
an MPIJob whose launcher asks no GPU, which the CPU-only rule is about). The team admission policy's CEL evaluated
with cel-expr-python, as tests/security/test_tenancy.py does.

The launcher pod is modelled as the operator v1.9.4 makes it by tests/security/test_r20_operator_pods.py (newLauncher,
kubeflow/trainer:pkg/controller.v1/mpi/mpijob_controller.go@v1.9.4): kubectl-delivery requesting and limiting 100m
CPU, 512Mi memory and 5Gi ephemeral-storage, and, where the launcher asks no GPU, NVIDIA_VISIBLE_DEVICES and
NVIDIA_DRIVER_CAPABILITIES set empty on its first container; created by the operator's service account."""

from __future__ import annotations

import copy

import pytest

from components import tenancy
from infra.config.job import load_job
from infra.core.names import LONGEST_POD_DEADLINE, POOL_LABEL
from infra.offline import jobs, team_job
from tests.conftest import config_of, team_rules
from tests.offline.test_team_job import EXAMPLE
from tests.security.test_cpu_only_quota import _cpu_pod
from tests.security.test_node_share import GPU_TOLERATION
from tests.security.test_r20_operator_pods import _as_the_operator_makes_it
from tests.security.test_tenancy import denied_by


def _operators_launcher(job: dict, delivery_storage: str = "5Gi") -> dict:
    """The launcher Pod the operator creates for `job` (an MPIJob whose launcher asks no GPU), its kubectl-delivery
    asking `delivery_storage` of ephemeral-storage (the operator's own 5Gi unless a test says otherwise)."""
    pod = _as_the_operator_makes_it(job, "Launcher")
    (delivery,) = [c for c in pod["spec"]["initContainers"] if c["name"] == tenancy.KUBECTL_DELIVERY]
    for asked in delivery["resources"].values():
        asked["ephemeral-storage"] = delivery_storage
    return pod


def _rendered_mpijob(source: str) -> tuple[dict, tenancy.TeamRules]:
    """prod's MPIJob as the platform renders it (`source`: the NCCL example, or a team's job file), and its team's
    rules."""
    cfg = config_of("prod")
    if source == "example":
        job = jobs.workload_of(jobs.render("mpi-nccl-tests", cfg))
    else:
        job = team_job.render(load_job({**EXAMPLE, "name": "mpi-ft", "framework": "mpi"}), cfg)[0][-1]
    return job, team_rules("prod", job["metadata"]["namespace"])


@pytest.mark.parametrize("source", ["example", "job-file"])
def test_the_launcher_pod_the_operator_makes_of_a_rendered_mpijob_is_admitted(source):
    """Its job is admitted, and the launcher pod the operator then creates (kubectl-delivery's ephemeral-storage, the
    empty NVIDIA variables of a launcher without GPUs) too: else the launcher never exists and the MPIJob never runs,
    its workers holding their nodes in the meantime."""
    job, rules = _rendered_mpijob(source)
    assert denied_by(job, rules) == []
    assert denied_by(_operators_launcher(job), rules, user=tenancy.OPERATOR_USER) == []


def test_an_update_of_the_operators_launcher_pod_keeping_its_spec_is_admitted():
    """A member annotating the running launcher (the pod's containers are immutable)."""
    job, rules = _rendered_mpijob("example")
    made = _operators_launcher(job)
    annotated = copy.deepcopy(made)
    annotated["metadata"]["annotations"]["note"] = "slow"
    assert denied_by(annotated, rules, operation="UPDATE", old=made, user="alice") == []


def test_a_members_pod_with_the_empty_nvidia_variables_is_refused():
    """Only what the operator adds to its own launcher is let through: a member's pod naming the variables, even
    empty, is refused as before."""
    job, rules = _rendered_mpijob("example")
    pod = _operators_launcher(job)
    assert any(m.startswith("no NVIDIA_VISIBLE_DEVICES") for m in denied_by(pod, rules, user="alice"))


def test_a_kubectl_delivery_asking_more_ephemeral_storage_than_the_operators_is_refused():
    job, rules = _rendered_mpijob("example")
    pod = _operators_launcher(job, delivery_storage="500Gi")
    assert any(m.startswith("pods on GPU nodes ask for") for m in denied_by(pod, rules, user=tenancy.OPERATOR_USER))


def test_pods_without_gpus_hold_no_node_in_each_pool_for_a_sliver_of_the_cpu_only_room():
    """The attack: team vision (prod, 32 GPUs) runs one Job pod of 10m CPU and 16Mi without GPUs per pool, each
    naming its pool: 30m of its 16 vCPUs of CPU-only room. In a pool at zero (prod's three are) each makes the
    Cluster Autoscaler buy a node, and no scale-down removes it, since the pod fits no other node of its pool
    (nodeSelector), for as long as its deadline, the longest a pod may have: three GPU nodes held beyond the
    team's GPUs for 30m CPU. Closed: a pod without GPUs runs on the teams' CPU nodes only, and none of them is
    admitted on a pool."""
    cfg = config_of("prod")
    rules = team_rules("prod", "vision")
    pinned = []
    for pool in cfg.gpu_pools:
        selector = {POOL_LABEL: pool.name, "topology.kubernetes.io/zone": pool.availability_zone}
        pod = _cpu_pod(activeDeadlineSeconds=LONGEST_POD_DEADLINE, nodeSelector=selector, tolerations=GPU_TOLERATION)
        pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "10m", "memory": "16Mi"}}
        if denied_by(pod, rules) == []:
            pinned.append(pool.name)
    assert pinned == [], pinned

"""The team policy on the teams' CPU nodes (components/tenancy.py node_share_validations): a pod without GPUs runs
there and nowhere else, and there as on GPU nodes a team's pods are packed, ask only what its quotas hold and
are its controllers'; a pod the Training Operator makes of a job admitted before the rule still runs. The policy's
CEL evaluated with cel-expr-python, as tests/security/test_tenancy.py does."""

from __future__ import annotations

import copy

import pytest

from components import tenancy
from components.cpu_nodes import ON_TEAM_CPU_NODES
from infra.core.names import LONGEST_POD_DEADLINE
from tests.security.test_node_share import GPU_TOLERATION, NO_GPU, SPREADING
from tests.security.test_r20_operator_pods import _as_the_operator_makes_it, _job_file, _rules
from tests.security.test_tenancy import _pod, denied_by

WITHOUT_GPUS = tenancy.WITHOUT_GPUS_OFF_GPU_NODES


def _on_team_cpu_nodes(**spec) -> dict:
    """A pod without GPUs where such pods run, with the deadline they carry."""
    placed = {
        "containers": copy.deepcopy(NO_GPU),
        "tolerations": copy.deepcopy(ON_TEAM_CPU_NODES["tolerations"]),
        "nodeSelector": dict(ON_TEAM_CPU_NODES["nodeSelector"]),
        "activeDeadlineSeconds": LONGEST_POD_DEADLINE,
    }
    return _pod(**{**placed, **spec})


def _an_mpijob_from_before_the_rule() -> dict:
    """A team's MPIJob as the platform rendered it before the teams' CPU nodes: its launcher, without GPUs, on its
    gang's pool, tolerating the GPU taint."""
    job = _job_file("mpi")
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    launcher["nodeSelector"] = dict(worker["nodeSelector"])
    launcher["tolerations"] = copy.deepcopy(GPU_TOLERATION)
    return job


def test_a_pod_without_gpus_on_the_teams_cpu_nodes_is_admitted():
    assert denied_by(_on_team_cpu_nodes()) == []


def test_a_job_whose_launcher_would_run_on_a_gpu_node_is_refused():
    job = _an_mpijob_from_before_the_rule()
    assert any(m.startswith(WITHOUT_GPUS) for m in denied_by(job, _rules(job)))


def test_the_operators_launcher_of_a_job_admitted_before_the_rule_still_runs():
    """Its job's templates were judged when it was created: the launcher the operator makes again after a resume or
    a lost node is admitted, or the job would keep its workers and never run (docs/upgrading.md)."""
    job = _an_mpijob_from_before_the_rule()
    launcher = _as_the_operator_makes_it(job, "Launcher")
    assert denied_by(launcher, _rules(job), user=tenancy.OPERATOR_USER) == []


def test_the_same_launcher_created_by_a_member_is_refused():
    job = _an_mpijob_from_before_the_rule()
    launcher = _as_the_operator_makes_it(job, "Launcher")
    assert any(m.startswith(WITHOUT_GPUS) for m in denied_by(launcher, _rules(job), user="alice@vision"))


@pytest.mark.parametrize("spread", sorted(SPREADING))
def test_pods_on_the_teams_cpu_nodes_spread_one_to_a_node_are_denied(spread):
    """One pod of a few millicores a node would keep the group at its maximum for every team."""
    assert any(m.startswith("pods on GPU nodes are packed") for m in denied_by(_on_team_cpu_nodes(**SPREADING[spread])))


def test_a_pod_on_the_teams_cpu_nodes_asking_ephemeral_storage_is_denied():
    """A node's whole disk asked holds that node alone, beside no other team's launcher."""
    pod = _on_team_cpu_nodes()
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "10m", "ephemeral-storage": "90Gi"}}
    assert any(m.startswith("pods on GPU nodes ask for") for m in denied_by(pod))


def test_a_bare_pod_on_the_teams_cpu_nodes_is_denied():
    pod = _on_team_cpu_nodes()
    del pod["metadata"]["ownerReferences"]
    assert any(m.startswith("a pod on a GPU node is made by a controller") for m in denied_by(pod))


def test_a_daemonset_on_the_teams_cpu_nodes_is_denied():
    """The autoscaler counts its pod on every node it plans: a DaemonSet asking a node's CPU would leave no room for
    any team's launcher on a new one."""
    spec = _on_team_cpu_nodes()["spec"]
    spec.pop("activeDeadlineSeconds")  # the API server refuses one in a DaemonSet's template
    labels = {"app": "d"}
    daemon_set = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "d", "namespace": "vision"},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": spec}},
    }
    assert any(m.startswith("a team's DaemonSet runs on no GPU node") for m in denied_by(daemon_set))


def test_a_pod_tolerating_the_teams_cpu_nodes_without_selecting_them_is_denied():
    """It could land only there (every other node is tainted), but the gang deadline reads a pod's pools from its
    node selector and would take it for one that may land on every GPU pool, timing its gang beside their idle
    nodes."""
    pod = _on_team_cpu_nodes()
    del pod["spec"]["nodeSelector"]
    assert any(m.startswith(tenancy.SELECTS_TEAM_CPU_NODES) for m in denied_by(pod))

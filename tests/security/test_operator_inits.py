"""The init containers the Training Operator adds to the pods it makes set no securityContext: `init-pytorch` in
each Worker of a PyTorchJob with a Master (initContainerTemplate and setInitContainer, kubeflow/trainer:
pkg/controller.v1/pytorch/initcontainer.go@v1.9.4), `kubectl-delivery` in each MPIJob launcher
(tests/security/test_r20_cpu_only_attack.py). The team policy lets them through in the pods the operator creates, and
nowhere else. The policy's CEL evaluated with cel-expr-python, as tests/security/test_tenancy.py does."""

from __future__ import annotations

import copy

from components import tenancy
from infra.config.job import load_job
from infra.offline import team_job
from tests.conftest import config_of, team_rules
from tests.offline.test_team_job import EXAMPLE
from tests.security.test_r20_operator_pods import _as_the_operator_makes_it
from tests.security.test_tenancy import denied_by

HARDENING = "every container sets securityContext.allowPrivilegeEscalation: false"


def _rendered_pytorchjob() -> tuple[dict, tenancy.TeamRules]:
    """The llama-ft team job on prod: a PyTorchJob of a Master and Workers, and its team's rules."""
    cfg = config_of("prod")
    job = team_job.render(load_job({**EXAMPLE, "name": "ft"}), cfg)[0][-1]
    return job, team_rules("prod", job["metadata"]["namespace"])


def _worker_pod(job: dict) -> dict:
    """A Worker pod as the operator makes it beside a Master, init-pytorch among its init containers."""
    pod = _as_the_operator_makes_it(job, "Worker")
    assert "init-pytorch" in [c["name"] for c in pod["spec"]["initContainers"]]
    return pod


def test_a_members_update_of_a_worker_pod_keeping_the_operators_init_pytorch_is_admitted():
    """Its labels or annotations changed, or the garbage collector orphaning it: the pod's containers are immutable.
    (The pod the operator creates: tests/security/test_r20_operator_pods.py.)"""
    job, rules = _rendered_pytorchjob()
    made = _worker_pod(job)
    annotated = copy.deepcopy(made)
    annotated["metadata"].setdefault("annotations", {})["note"] = "slow"
    assert denied_by(annotated, rules, operation="UPDATE", old=made, user="alice") == []


def test_a_members_pod_with_an_init_pytorch_of_its_own_is_refused():
    job, rules = _rendered_pytorchjob()
    assert HARDENING in [m[: len(HARDENING)] for m in denied_by(_worker_pod(job), rules, user="alice")]


def test_a_job_whose_template_names_an_init_container_init_pytorch_without_the_setting_is_refused():
    """The exemption is for the operator's container in the pods it creates: a template of the team's never has
    one."""
    job, rules = _rendered_pytorchjob()
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker.setdefault("initContainers", []).append(copy.deepcopy(_worker_pod(job)["spec"]["initContainers"][-1]))
    assert HARDENING in [m[: len(HARDENING)] for m in denied_by(job, rules)]

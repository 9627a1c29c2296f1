"""Round 10's second attacker, on the rule that each Kubeflow container names cpu and memory (components/tenancy.py
gang_validations) and its exemption for an UPDATE that keeps every replica spec.

The attacker is a team member (AmazonEKSEditPolicy's `edit` in the namespace and tenancy.job_submitter_role's
Kubeflow jobs); admission through cel-expr-python (tests/security/test_tenancy.py `denied_by`)."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import config_of
from tests.security.test_r10_attack import NAMES_CPU_AND_MEMORY
from tests.security.test_tenancy import _job, denied_by


def _made_before_the_rule() -> dict:
    """A running job admitted before the team policy asked for CPU: its containers name memory and no cpu, so the
    operator's minResources counts its pods' CPU at nothing while the LimitRange gives each its defaultRequest."""
    job = _job()
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        del replica["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    return job


def _suspension(job: dict, suspend: bool) -> dict:
    changed = copy.deepcopy(job)
    changed["spec"].setdefault("runPolicy", {})["suspend"] = suspend
    return changed


def test_a_team_resuming_a_job_made_before_the_cpu_rule_is_refused_until_its_containers_name_cpu():
    suspended = _suspension(_made_before_the_rule(), True)
    resumed = _suspension(suspended, False)
    assert any(m.startswith(NAMES_CPU_AND_MEMORY) for m in denied_by(resumed, operation="UPDATE", old=suspended))


def test_the_gang_deadlines_resume_of_a_job_made_before_the_cpu_rule_is_admitted():
    """Its own retry of a job it gave back: refusing it would fail every pass; the team's resume names the CPU."""
    from components.gang_deadline import USER

    suspended = _suspension(_made_before_the_rule(), True)
    resumed = _suspension(suspended, False)
    assert denied_by(resumed, operation="UPDATE", old=suspended, user=USER) == []


LAUNCHER_ASKS_LESS = "an MPIJob's Launcher containers request together at least"


def _mpi_job(cpu: str, memory: str) -> dict:
    """Team vision's MPIJob whose Launcher's one container requests `cpu` and `memory` (named: the CPU rule
    passes)."""
    job = _job()
    job["kind"], job["metadata"]["name"] = "MPIJob", "mpi-j"
    specs = job["spec"].pop("pytorchReplicaSpecs")
    specs["Launcher"] = specs.pop("Master")
    job["spec"]["mpiReplicaSpecs"] = specs
    specs["Launcher"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": memory}}
    return job


def test_an_mpi_launcher_asking_less_than_the_operators_init_container_is_refused():
    """The operator adds kubectl-delivery to the launcher pod, requesting 100m CPU and 512Mi memory (newLauncher,
    kubeflow/trainer:pkg/controller.v1/mpi/mpijob_controller.go and mpijob.go@v1.9.4); the pod asks the larger of
    its containers' sum and each init container (resource.PodRequests), the gang counts the containers alone
    (CalcPGMinResources): a launcher of 10m and 16Mi would run 90m and 496Mi outside the queue, each MPIJob."""
    assert any(m.startswith(LAUNCHER_ASKS_LESS) for m in denied_by(_mpi_job("10m", "16Mi")))


@pytest.mark.parametrize("framework", ["mpi", "pytorch"])
def test_a_teams_job_file_renders_replicas_its_policy_admits_whatever_the_teams_default_request(framework):
    """A team whose LimitRange default is the least the config allows (defaultCpuRequestMillicores 10,
    defaultMemoryRequestMiB 16), below kubectl-delivery's and init-pytorch's requests, still gets a job its policy
    admits from `higgsfield`: the MPI launcher and the PyTorch Workers beside their Master request at least what
    the operator's init container does."""
    from components.teams import rules_of
    from infra.config.job import load_job
    from infra.offline import team_job
    from tests.offline.test_team_job import EXAMPLE, _templates

    cfg = config_of("prod")
    small = {"default_cpu_request_millicores": 10, "default_memory_request_mib": 16}
    teams = tuple(t.model_copy(update=small) if t.name == "llm" else t for t in cfg.scheduler.teams)
    cfg = cfg.model_copy(update={"scheduler": cfg.scheduler.model_copy(update={"teams": teams})})
    team = next(t for t in teams if t.name == "llm")
    objects, _ = team_job.render(load_job({**EXAMPLE, "name": f"{framework}-ft", "framework": framework}), cfg)
    assert len([where for where, _ in _templates(objects)]) == 2  # a leader and its workers
    assert denied_by(objects[-1], rules_of(team, cfg.scheduler.priority_classes)) == []


def test_a_pytorch_worker_asking_less_than_the_operators_init_container_is_refused():
    job = _job()
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["resources"] = {"requests": {"cpu": "1m", "memory": "1Mi"}}
    assert any("init" in m and "Worker" in m for m in denied_by(job))

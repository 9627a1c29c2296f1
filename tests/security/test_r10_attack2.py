"""Round 10's second attacker, on the rule that each Kubeflow container names cpu and memory (components/tenancy.py
gang_validations) and its exemption for an UPDATE that keeps every replica spec.

The attacker is a team member (AmazonEKSEditPolicy's `edit` in the namespace and tenancy.job_submitter_role's
Kubeflow jobs); admission through cel-expr-python (tests/security/test_tenancy.py `denied_by`)."""

from __future__ import annotations

import copy

import pytest

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


@pytest.mark.xfail(
    strict=True,
    reason="open: the CPU rule's UPDATE exemption (replica specs kept) covers a resume, and resuming makes a new "
    "PodGroup sized from the containers (the operator deletes a suspended job's PodGroup and makes it again on "
    "resume, kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4 ReconcileJobs): a job made before the rule "
    "gets a gang that counts its CPU at nothing at every resume, for ever; refusing it would refuse the gang "
    "deadline's own resume of such a job too (images/training/gang_deadline.py), so the lead decides",
)
def test_a_team_resuming_a_job_made_before_the_cpu_rule_is_refused_until_its_containers_name_cpu():
    suspended = _suspension(_made_before_the_rule(), True)
    resumed = _suspension(suspended, False)
    assert any(m.startswith(NAMES_CPU_AND_MEMORY) for m in denied_by(resumed, operation="UPDATE", old=suspended))

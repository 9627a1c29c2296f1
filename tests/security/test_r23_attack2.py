"""Attacks on a team's services without GPUs (the class higgsfield-cpu-service and its `cpu-services` quota,
tests/security/test_cpu_services.py) and the paths beside them, as a team member with the team's rights."""

from __future__ import annotations

from components import tenancy

QUOTA = "kubernetes:core/v1:ResourceQuota"
POLICY = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"


def test_a_teams_policy_admits_the_service_class_only_once_its_quotas_count_it(plan):
    """The policy that admits pods of higgsfield-cpu-service (and the rest of CPU-only work) is applied only after
    the quotas that count them exist. Applied first, as an upgrade may (`pulumi up` runs independent resources at
    once), it opens a window in which a team's Deployment of pods of the class runs in no `cpu-services` quota, and
    its pods, never ending, keep running once the quota is made (a quota refuses new pods only): CPU-only work's
    room, which the teams' CPU nodes' maxSize is sized by, is exceeded for as long as the service runs."""
    for team in plan.config.scheduler.teams:
        (policy,) = [p for p in plan.of_type(POLICY) if p.inputs["metadata"]["name"] == tenancy.policy_name(team.name)]
        before = {
            q.inputs["metadata"]["name"]
            for q in plan.dependencies_of(policy, QUOTA)
            if q.inputs["metadata"]["namespace"] == team.name
        }
        assert {tenancy.CPU_ONLY_QUOTA, tenancy.CPU_SERVICE_QUOTA} <= before, team.name

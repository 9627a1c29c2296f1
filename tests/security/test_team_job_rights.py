"""A team's people can submit Kubeflow jobs in their namespace and nowhere else: EKS's
AmazonEKSEditPolicy covers built-in resources only, so each team namespace has a Role for its
Kubeflow jobs bound to the team's group (the group its people's access entries name)."""

from __future__ import annotations

import pytest

from components import tenancy
from infra.core.names import KUBEFLOW_JOB_KINDS
from tests.conftest import STACKS, config_of, plan_of

JOBS = sorted(KUBEFLOW_JOB_KINDS.values())


def role_allows(role: dict, group: str, resource: str, namespace: str, verb: str) -> bool:
    """RBAC evaluation of one namespaced Role: its rules hold in its own namespace only."""
    return namespace == role["metadata"]["namespace"] and any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"] for rule in role["rules"]
    )


def _objects(plan, kind: str, namespace: str) -> list[dict]:
    return [
        r.inputs
        for r in plan.resources
        if r.inputs.get("kind") == kind and (r.inputs.get("metadata") or {}).get("namespace") == namespace
    ]


TEAMS = [(s, t.name) for s in STACKS for t in config_of(s).scheduler.teams]


@pytest.mark.parametrize("stack, team", TEAMS, ids=lambda v: str(v))
def test_every_team_may_submit_and_watch_every_kubeflow_job_kind_in_its_namespace(stack, team):
    (role,) = [r for r in _objects(plan_of(stack), "Role", team) if r["metadata"]["name"] == "higgsfield-jobs"]
    for resource in JOBS:
        for verb in ("create", "get", "list", "watch", "delete"):
            assert role_allows(role, "kubeflow.org", resource, team, verb), (resource, verb)
    assert role_allows(role, "scheduling.volcano.sh", "podgroups", team, "get")


@pytest.mark.parametrize("stack, team", TEAMS, ids=lambda v: str(v))
def test_the_job_role_is_bound_to_the_teams_group_only(stack, team):
    (binding,) = [
        b for b in _objects(plan_of(stack), "RoleBinding", team) if b["metadata"]["name"] == "higgsfield-jobs"
    ]
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": f"higgsfield:team:{team}"}
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "higgsfield-jobs"}


@pytest.mark.parametrize(
    "request_",
    [
        ("kubeflow.org", "pytorchjobs", "llm", "create"),  # another team's namespace
        (
            "scheduling.volcano.sh",
            "podgroups",
            "vision",
            "update",
        ),  # its gang's PodGroup: read only (the operator owns it)
        ("scheduling.volcano.sh", "queues", "vision", "update"),  # the queues are the platform's
        ("rbac.authorization.k8s.io", "rolebindings", "vision", "create"),
        ("", "pods/exec", "vision", "create"),  # nothing beyond the jobs
    ],
    ids=lambda r: "-".join(r),
)
def test_the_job_role_grants_nothing_else(request_):
    assert not role_allows(tenancy.job_submitter_role("vision"), *request_)

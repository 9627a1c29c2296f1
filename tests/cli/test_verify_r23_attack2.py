"""`kube.cpu-only-quota` against what the attacks of tests/security/test_r23_attack2.py leave on a cluster: pods
without GPUs that a quota counts beyond its room (made before the quota was, or under a larger room before an
upgrade lowered it), which the quota, refusing new pods only, keeps running. The cluster is the fake API server
seeded as a healthy prod cluster (tests/cli/test_verify_checks.py seed), as in tests/cli/
test_verify_cpu_only_quota.py."""

from __future__ import annotations

from tests.cli.test_verify_checks import (  # noqa: F401 (fixtures)
    _vap_denial,
    cluster,
    ctx,
    one,
    plan,
    team_admission,
)
from tests.cli.test_verify_cpu_only_quota import _service


def test_services_counted_beyond_their_quotas_room_fail_naming_the_team(ctx, cluster):
    """A team's router of 8 replicas of 1500m and 3Gi (12 vCPUs) made before its `cpu-services` quota (4 vCPUs):
    the quota counts them truly, and they hold three times the services' part of CPU-only work's room, which the
    teams' CPU nodes' maxSize is sized by."""
    for i in range(8):
        cluster.put(_service(f"router-{i}"))
    quota = cluster.get("/api/v1/namespaces/vision/resourcequotas/cpu-services")
    quota["status"]["used"] = {"requests.cpu": "12", "requests.memory": "24Gi", "pods": "8"}
    cluster.put(quota)
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL", outcome
    assert "vision: cpu-services counts more than its room" in outcome.evidence, outcome


def test_pods_with_a_deadline_counted_beyond_the_lowered_cpu_only_room_fail_after_the_upgrade(ctx, cluster):
    """docs/upgrading.md, "a team's services without GPUs": a team's 16 vCPUs of pods with a deadline, made under the
    `cpu-only` room of 16 vCPUs, run on under the new room of 12 beside its services' 4."""
    from tests.cli.test_verify_cpu_only_quota import _counted, _launcher

    for i in range(8):
        cluster.put(_launcher(f"prep-{i}"))  # 2 vCPUs each, with its sidecar
    _counted(cluster, "vision", "16", "24Gi")
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL", outcome
    assert "vision: cpu-only counts more than its room: requests.cpu 16 of 12" in outcome.evidence, outcome
    assert "docs/upgrading.md" in outcome.fix


def test_a_pod_without_gpus_on_the_teams_cpu_nodes_in_both_quotas_fails_naming_it(ctx, cluster):
    """A pod of the class with a deadline (one the team policy refuses: admitted while its binding was missing, or
    by a policy gone wrong) is counted twice, once by each quota, each within its room: the figures agree, and only
    the pod's two marks tell it."""
    from infra.core.names import LONGEST_POD_DEADLINE

    cluster.put(_service("router-x", activeDeadlineSeconds=LONGEST_POD_DEADLINE))
    for name in ("cpu-only", "cpu-services"):
        quota = cluster.get(f"/api/v1/namespaces/vision/resourcequotas/{name}")
        quota["status"]["used"] = {"requests.cpu": "1500m", "requests.memory": "3Gi"}
        cluster.put(quota)
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL", outcome
    assert "vision/router-x: on the teams' CPU nodes without GPUs, counted by both" in outcome.evidence, outcome


def test_a_pod_without_gpus_on_the_teams_cpu_nodes_in_neither_quota_fails_naming_it(ctx, cluster):
    """A Deployment's pod without GPUs on the teams' CPU nodes that names no class and runs to no deadline: no quota
    of CPU-only work's room counts it, and both quotas' figures agree with their own pods."""
    pod = _service("router-y")
    del pod["spec"]["priorityClassName"]
    cluster.put(pod)
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL", outcome
    assert "vision/router-y: on the teams' CPU nodes without GPUs, counted by neither" in outcome.evidence, outcome


def test_a_missing_services_quota_fails_with_a_fix_naming_it(ctx, cluster):
    cluster.delete_now("/api/v1/namespaces/llm/resourcequotas/cpu-services")
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL" and "llm: no ResourceQuota cpu-services" in outcome.evidence, outcome
    assert "get resourcequota cpu-services" in outcome.fix, outcome.fix

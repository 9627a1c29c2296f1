"""The autoscaler never freezes on the stack's largest gang, and never counts a node that is
still in its health gate as unready. Semantics at the pinned autoscaler
(kubernetes/autoscaler:cluster-autoscaler@cluster-autoscaler-1.35.2): a node with a startup taint
is an unready copy (utils/taints/taints.go FilterOutNodesWithStartupTaints); NotStarted until
CreationTimestamp + --max-node-startup-time, Unready after (clusterstate/clusterstate.go
updateReadinessStats); IsClusterHealthy is false when Unready > --ok-total-unready-count and >
--max-total-unready-percentage of all nodes, and RunOnce then stops before any scaling
(core/static_autoscaler.go). Defaults 15m, 3, 45 (config/flags/flags.go)."""

from __future__ import annotations

import pytest

from components.autoscaler import UPSTREAM_MAX_NODE_STARTUP_S, largest_gang, startup_seconds, unready_limits
from infra.config import seconds_of
from infra.offline import day_one
from tests.conftest import STACKS, plan_of

RELEASE = "kubernetes:helm.sh/v3:Release"


def _extra_args(stack: str) -> dict:
    (release,) = [r for r in plan_of(stack).of_type(RELEASE) if r.inputs["chart"] == "cluster-autoscaler"]
    return release.inputs["values"]["extraArgs"]


def _is_cluster_healthy(unready: int, registered: int, ok_count: int, percentage: float) -> bool:
    """clusterstate.go IsClusterHealthy@cluster-autoscaler-1.35.2, as written there."""
    return not (unready > ok_count and unready > percentage / 100.0 * registered)


def _with(cfg, **autoscaler):
    return cfg.model_copy(update={"autoscaler": cfg.autoscaler.model_copy(update=autoscaler)})


def test_prods_largest_gang_is_the_h100_pool_at_max_size():
    cfg = plan_of("prod").config
    gang = largest_gang(cfg.gpu_pools, cfg.scheduler.queues)
    assert (gang.pool, gang.nodes) == ("h100", 16)  # maxSize 16; the 160-GPU queue would take 20 nodes of 8


def test_upstream_defaults_would_freeze_prod_on_its_largest_gang():
    """The issue as the upstream code decides it: 16 unready p5 nodes next to 3 system nodes."""
    cfg = plan_of("prod").config
    gang = largest_gang(cfg.gpu_pools, cfg.scheduler.queues).nodes
    assert not _is_cluster_healthy(gang, gang + cfg.cpu_nodes.min_size, 3, 45.0)


@pytest.mark.parametrize("stack", STACKS)
def test_the_rendered_limits_keep_the_cluster_healthy_with_its_largest_gang_unready(stack):
    cfg, args = plan_of(stack).config, _extra_args(stack)
    gang = largest_gang(cfg.gpu_pools, cfg.scheduler.queues).nodes
    assert _is_cluster_healthy(
        gang,
        gang + cfg.cpu_nodes.min_size,
        int(args["ok-total-unready-count"]),
        float(args["max-total-unready-percentage"]),
    )


@pytest.mark.parametrize("stack", STACKS)
def test_a_node_in_its_gate_is_not_started_for_the_whole_boot_and_gate_timeout(stack):
    cfg, args = plan_of(stack).config, _extra_args(stack)
    startup = seconds_of(args["max-node-startup-time"])
    for pool in cfg.gpu_pools:
        assert startup >= seconds_of(pool.boot_time) + seconds_of(pool.health_gate.timeout), pool.name
    assert startup >= UPSTREAM_MAX_NODE_STARTUP_S


def test_the_startup_time_follows_the_slowest_pool():
    cfg = plan_of("prod").config
    slow = cfg.gpu_pools[0].model_copy(update={"boot_time": "25m"})
    limits = unready_limits(cfg.autoscaler, [slow, *cfg.gpu_pools[1:]], cfg.scheduler.queues)
    assert limits.slowest_pool == slow.name and limits.max_node_startup_s == startup_seconds(
        slow
    ) == 25 * 60 + seconds_of(slow.health_gate.timeout)


def test_a_small_queue_caps_the_gang_below_the_pools_max_size():
    cfg = plan_of("staging").config
    queues = [q.model_copy(update={"gpu_capability": 8}) for q in cfg.scheduler.queues]
    assert largest_gang(cfg.gpu_pools, queues).nodes == 1


def test_the_stacks_own_limits_are_passed_as_set():
    cfg = _with(
        plan_of("prod").config,
        ok_total_unready_count=40,
        max_total_unready_percentage=60.0,
        max_node_startup_time="45m",
    )
    assert unready_limits(cfg.autoscaler, cfg.gpu_pools, cfg.scheduler.queues).flags() == {
        "max-node-startup-time": "45m",
        "ok-total-unready-count": 40,
        "max-total-unready-percentage": 60.0,
    }


def test_check_fails_a_stack_whose_unready_count_freezes_on_its_largest_gang():
    (finding,) = day_one.autoscaler_findings(_with(plan_of("prod").config, ok_total_unready_count=3))
    assert finding[1].startswith("higgsfield:autoscaler.okTotalUnreadyCount: the largest gang (16 nodes")


def test_check_fails_a_stack_whose_startup_time_ends_inside_the_gate():
    (finding,) = day_one.autoscaler_findings(_with(plan_of("prod").config, max_node_startup_time="15m"))
    assert finding[1].startswith("higgsfield:autoscaler.maxNodeStartupTime: 15m is shorter than")


def test_a_percentage_high_enough_for_the_gang_is_accepted_with_the_upstream_count():
    assert (
        day_one.autoscaler_findings(
            _with(plan_of("prod").config, ok_total_unready_count=3, max_total_unready_percentage=90.0)
        )
        == []
    )


def test_check_reports_freezing_limits_as_a_mandatory_finding(monkeypatch):
    """check_stack adds day_one's findings (the plan, policies and schemas stubbed out here: their
    own tests cover them, and a second evaluation of prod costs seconds)."""
    import dataclasses

    from infra.offline import check

    plan = plan_of("prod")
    frozen = dataclasses.replace(plan, config=_with(plan.config, ok_total_unready_count=3))
    monkeypatch.setattr(check, "record", lambda stack, root: frozen)
    monkeypatch.setattr(check, "run_policies", lambda plan, config: ([], []))
    monkeypatch.setattr(check, "validate_manifests", lambda plan, examples=None: [])
    monkeypatch.setattr(check, "ci_delivery", lambda plan, root: [])
    result = check.check_stack("prod")
    assert [f.message.split(":")[1] for f in result.mandatory] == ["autoscaler.okTotalUnreadyCount"]


@pytest.mark.parametrize(
    "change, key, detail",
    [
        ("pool", "higgsfield:gpuPools[0].bootTime", "is not a duration"),
        ("count", "higgsfield:autoscaler.okTotalUnreadyCount", ""),
        ("percentage", "higgsfield:autoscaler.maxTotalUnreadyPercentage", ""),
    ],
)
def test_a_bad_unready_setting_names_its_key(project_copy, capsys, change, key, detail):
    from tests.conftest import assert_plan_rejects, set_pool

    def autoscaler(**values):
        def apply(config):
            config["higgsfield:autoscaler"] = {**config.get("higgsfield:autoscaler", {}), **values}

        return apply

    edit = {
        "pool": set_pool(0, bootTime="ten minutes"),
        "count": autoscaler(okTotalUnreadyCount=-1),
        "percentage": autoscaler(maxTotalUnreadyPercentage=140.0),
    }[change]
    assert_plan_rejects(project_copy, capsys, "prod", edit, key, detail)

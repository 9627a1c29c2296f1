"""Paid reservations run warm (docs/design/reserved-capacity.md): an ODCR pool holds its reserved
count where the Cluster Autoscaler cannot scale it down, a Capacity Block pool opens at its count at
the block's start and drains before its end, their nodes join gated (so they pass the health gate
before any job arrives), and each pool can opt out with capacity.warm: false."""

from __future__ import annotations

from datetime import UTC, datetime

from components import gpu_pools
from infra.offline.evaluate import record
from tests.conftest import plan_of, set_pool

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ODCR = {"type": "reservation", "reservationId": "cr-0fedcba9876543210"}


def _group(plan, pool: str):
    return next(g for g in plan.of_type(NODE_GROUP) if (g.inputs.get("labels") or {}).get("higgsfield.io/pool") == pool)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_an_odcr_pool_is_held_at_its_reserved_count_the_autoscaler_cannot_go_below():
    """The autoscaler removes no node of a group at its minSize (`size-deletionsInProgress <=
    nodeGroup.MinSize()`, kubernetes/autoscaler:cluster-autoscaler/core/scaledown/unneeded/
    nodes.go@cluster-autoscaler-1.35.2; the AWS provider reads MinSize from the ASG,
    cloudprovider/aws/auto_scaling_groups.go): min = desired = max = 4."""
    scaling = _group(plan_of("prod"), "b200-odcr").inputs["scalingConfig"]
    assert (scaling["minSize"], scaling["desiredSize"], scaling["maxSize"]) == (4, 4, 4)


def test_a_held_odcr_pool_owns_its_desired_size_so_a_later_update_is_accepted():
    """EKS refuses a minSize above the desiredSize it holds; a held pool sets both."""
    assert "scalingConfig.desiredSize" not in _group(plan_of("prod"), "b200-odcr").ignore_changes


def test_held_nodes_join_gated_so_they_pass_the_gate_before_any_job():
    taints = {t["key"] for t in _group(plan_of("prod"), "b200-odcr").inputs["taints"]}
    # EKS takes taint keys of 63 characters at most
    assert "startup-taint.cluster-autoscaler.kubernetes.io/higgsfield-gate" in taints


def test_a_capacity_block_pool_is_held_whole_inside_its_window_only():
    pool = next(p for p in plan_of("prod").config.gpu_pools if p.capacity_type == "capacity-block")
    assert gpu_pools.scaling(pool, _at("2026-12-03T00:00:00")) == (0, 0, 8)  # before: the closed action holds it at 0
    assert gpu_pools.scaling(pool, _at("2027-01-10T00:00:00")) == (8, 8, 8)  # inside the block
    assert gpu_pools.scaling(pool, _at("2027-01-18T10:30:00")) == (0, 0, 8)  # from the drain on


def test_a_pool_opts_out_of_warm_and_scales_to_zero_again(project_copy):
    root = project_copy("prod", set_pool(2, capacity={**ODCR, "warm": False}))
    group = _group(record("bad", root=root), "b200-odcr")
    assert group.inputs["scalingConfig"]["minSize"] == 0
    assert "scalingConfig.desiredSize" in group.ignore_changes


def test_warm_on_an_on_demand_pool_names_the_key(project_copy, capsys):
    from tests.conftest import assert_plan_rejects

    assert_plan_rejects(
        project_copy,
        capsys,
        "prod",
        set_pool(0, capacity={"type": "on-demand", "warm": True}),
        "higgsfield:gpuPools[0].capacity.warm",
        "only capacity types capacity-block and reservation",
    )

"""`higgsfield timeline`: critical paths of a synthetic graph, and every shipped stack within 15%
of the chain no deployment can avoid."""

from __future__ import annotations

import pytest

from infra.cli import timeline
from infra.cli.offline import Plan, Resource
from tests.conftest import STACKS, plan_of


def _r(urn: str, type_: str, deps=(), parent=None, custom=True) -> Resource:
    return Resource(urn, type_, urn, parent, custom, None, {}, list(deps), False, False, [], [], False)


def _chain_plan(fsx_after_cluster: bool) -> Plan:
    resources = [
        _r("vpc", "aws:ec2/vpc:Vpc"),
        _r("subnet", "aws:ec2/subnet:Subnet", ["vpc"]),
        _r("cluster", "eks:index:Cluster", ["subnet"], custom=False),
        _r("cni", "aws:eks/addon:Addon", ["cluster"]),
        _r("nodes", "aws:eks/nodeGroup:NodeGroup", ["cni"]),
        _r("plugin", "kubernetes:helm.sh/v3:Release", ["nodes"]),
        _r("fsx", "aws:fsx/lustreFileSystem:LustreFileSystem", ["subnet", "cluster"] if fsx_after_cluster else ["subnet"]),
    ]
    return Plan("higgsfield", "t", resources, {})


def test_synthetic_graph_follows_the_unavoidable_chain():
    t = timeline.compute(_chain_plan(fsx_after_cluster=False))
    assert [r.urn for r in t.critical_path] == ["vpc", "subnet", "cluster", "cni", "nodes", "plugin"]
    assert t.total == pytest.approx(0.2 + 0.2 + 12 + 2 + 5 + 2)
    assert t.ratio == pytest.approx(1.0)


def test_a_needless_wait_shows_up_on_the_critical_path():
    t = timeline.compute(_chain_plan(fsx_after_cluster=True))
    assert [r.urn for r in t.critical_path] == ["vpc", "subnet", "cluster", "fsx"]
    assert t.total == pytest.approx(0.2 + 0.2 + 12 + 15)
    assert t.ratio > 1.15


def test_depending_on_a_component_waits_for_all_its_resources():
    resources = [
        _r("group", "higgsfield:x:Group", custom=False),
        _r("slow", "aws:fsx/lustreFileSystem:LustreFileSystem", parent="group"),
        _r("after", "aws:iam/role:Role", ["group"]),
    ]
    t = timeline.compute(Plan("higgsfield", "t", resources, {}))
    assert t.finish["after"] == pytest.approx(15 + 0.2)
    assert [r.urn for r in t.critical_path] == ["slow", "after"]


@pytest.mark.parametrize("stack_name", STACKS)
def test_every_shipped_stack_deploys_within_15_percent_of_the_unavoidable_chain(stack_name):
    assert timeline.compute(plan_of(stack_name)).ratio <= 1.15


def test_every_create_time_names_its_source():
    assert all(source for _, source in timeline.CREATE_MINUTES.values())

"""A job its team paused: what the gang deadline needs to judge how long a pause returns the nodes it leaves."""

from __future__ import annotations

import pytest

from components import gang_deadline as component
from infra.offline import cold_start
from tests.conftest import STACKS, plan_of


@pytest.mark.parametrize("stack", STACKS)
def test_each_pools_config_map_says_how_long_the_pool_keeps_an_empty_node_as_the_timeline_does(stack):
    plan = plan_of(stack)
    maps = [
        r.inputs
        for r in plan.resources
        if r.inputs.get("kind") == "ConfigMap"
        and (r.inputs["metadata"].get("labels") or {}).get(component.DEADLINE_LABEL) == "true"
    ]
    empty = {m["data"]["pool"]: float(m["data"]["emptySeconds"]) for m in maps}
    assert empty == {p.name: cold_start.give_back(p, None).unneeded_s for p in plan.config.gpu_pools}

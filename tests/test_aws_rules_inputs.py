"""AWS's and Kubernetes' own rules on settings, refused naming the key before anything is created:
the system node group's size, Capacity Blocks, admin ARNs, subnet room, Karpenter's labels, tags."""

from __future__ import annotations

import pytest

from tests.conftest import assert_plan_rejects, set_field


@pytest.mark.parametrize(("minimum", "desired", "maximum"), [(0, 0, 1), (0, 0, 4)])
def test_an_empty_system_node_group_is_refused_naming_min_size(project_copy, capsys, minimum, desired, maximum):
    def change(config: dict) -> None:
        config["higgsfield:cpuNodes"] = {**config["higgsfield:cpuNodes"], "minSize": minimum, "desiredSize": desired, "maxSize": maximum}

    assert_plan_rejects(project_copy, capsys, "dev", change, "higgsfield:cpuNodes.minSize", "nothing could ever scale it")


def test_a_system_node_group_of_zero_nodes_in_all_is_refused(project_copy, capsys):
    assert_plan_rejects(project_copy, capsys, "dev", set_field("higgsfield:cpuNodes", "maxSize", 0), "higgsfield:cpuNodes.maxSize", "at least 1")

"""Reserved pools that roll through an upgrade: no surge instance on an ODCR held at its count or a
Capacity Block, and `higgsfield diff` saying what an upgrade does to each pool and its gangs."""

from __future__ import annotations

import base64
import copy

from infra.offline import rolls
from infra.offline.diff import compare, render_diff
from tests.conftest import plan_of

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


def _groups(plan) -> dict[str, dict]:
    return {g.inputs["labels"].get("higgsfield.io/pool", g.name): g.inputs for g in plan.of_type(NODE_GROUP)}


def _upgrade_from_1_34() -> tuple[dict, dict]:
    """prod's plan as the head, and the same plan on Kubernetes 1.34 as the base."""
    head = plan_of("prod").as_dict()
    base = copy.deepcopy(head)
    for r in base["resources"]:
        if r["type"] in (NODE_GROUP, "eks:index:Cluster"):
            r["inputs"]["version"] = "1.34"
    return base, head


def test_reservation_and_capacity_block_pools_update_without_a_surge_instance():
    groups = _groups(plan_of("prod"))
    assert groups["b200-odcr"]["updateConfig"]["updateStrategy"] == "MINIMAL"
    assert groups["h200-block"]["updateConfig"]["updateStrategy"] == "MINIMAL"
    assert "updateStrategy" not in groups["h100"]["updateConfig"]  # on demand: EKS's DEFAULT keeps capacity up


def test_diff_of_an_upgrade_names_what_happens_to_the_reserved_pool_and_its_gangs():
    base, head = _upgrade_from_1_34()
    changes = {c.name: c for c in compare(base, head, set()).changed}
    odcr = "\n".join(changes["gpu-b200-odcr"].consequences)
    assert "4 nodes held on the reservation" in odcr and "MINIMAL" in odcr and "3 of 4 nodes" in odcr
    assert "running work on b200-odcr" in odcr and "exit 143" in odcr and "ExitCode" in odcr


def test_diff_of_an_upgrade_says_what_a_drain_does_to_serving_replicas_not_only_to_gangs():
    base, head = _upgrade_from_1_34()
    changes = {c.name: c for c in compare(base, head, set()).changed}
    rolled = "\n".join(changes["gpu-h100"].consequences)
    assert "serving replicas and evaluation pods are started again elsewhere by their Deployment or Job" in rolled


def test_diff_of_an_upgrade_tells_when_a_capacity_block_pool_may_roll():
    base, head = _upgrade_from_1_34()
    changes = {c.name: c for c in compare(base, head, set()).changed}
    block = "\n".join(changes["gpu-h200-block"].consequences)
    assert rolls.CAPACITY_BLOCK_UPGRADE in block and "desired size of 0" in block
    assert "open from 2027-01-04T11:30:00Z" in block and "drained from 2027-01-18T10:30:00Z" in block


def test_an_upgrade_is_not_shown_as_a_plain_in_place_update_of_a_gpu_pool():
    base, head = _upgrade_from_1_34()
    out = render_diff("prod", "base", compare(base, head, set()))
    pool_lines = [line for line in out.splitlines() if line.startswith("  ~ ") and NODE_GROUP + " gpu-" in line]
    assert pool_lines and all("ROLLS its nodes" in line for line in pool_lines)
    system = next(line for line in out.splitlines() if "system-nodes" in line)
    assert "ROLLS" not in system  # the CPU group has no pool, no gang


def test_a_reserved_pool_left_on_the_default_strategy_is_named_as_stalling():
    _, head = _upgrade_from_1_34()
    resources = {r["urn"]: r for r in copy.deepcopy(head)["resources"]}
    group = next(r for r in resources.values() if r["type"] == NODE_GROUP and r["name"] == "gpu-b200-odcr")
    group["inputs"]["updateConfig"].pop("updateStrategy")
    said = "\n".join(rolls.consequences(resources, group))
    assert "NodeCreationFailure" in said and "reserved pools need updateStrategy MINIMAL" in said


def test_rolling_a_capacity_block_pool_while_its_block_is_open_is_refused_unless_allowed():
    base, head = _upgrade_from_1_34()
    for plan in (base, head):  # the block opened: its opening action is past, only the drain is ahead
        plan["resources"] = [r for r in plan["resources"] if r["name"] != "gpu-h200-block-open"]
    (refusal,) = [r for r in compare(base, head, set()).refused if "h200-block" in r]
    assert "inside its window" in refusal and rolls.CAPACITY_BLOCK_UPGRADE in refusal
    assert "--allow h200-block" in refusal
    assert not [r for r in compare(base, head, {"h200-block"}).refused if "h200-block" in r]


def test_an_upgrade_before_the_block_opens_is_not_refused():
    base, head = _upgrade_from_1_34()
    assert not [r for r in compare(base, head, set()).refused if "h200-block" in r]


def _launch_template_changed(pool_group: str, *, path: str = "userData") -> tuple[dict, dict]:
    """prod's plan as the head, and the same plan with another value of `path` in `pool_group`'s launch
    template as the base (a change of the nodes' user data, as a kubelet setting makes)."""
    head = plan_of("prod").as_dict()
    base = copy.deepcopy(head)
    (template,) = [
        r for r in base["resources"] if r["type"] == rolls.LAUNCH_TEMPLATE and r["name"] == f"{pool_group}-lt"
    ]
    template["inputs"][path] = "an earlier value"
    return base, head


def test_a_changed_launch_template_rolls_its_pools_nodes_in_the_diff():
    base, head = _launch_template_changed("gpu-h100")
    diff = compare(base, head, set())
    changes = {c.name: c for c in diff.changed}
    rolled = "\n".join(changes["gpu-h100"].consequences)
    assert "running work on h100" in rolled and "exit 143" in rolled
    out = render_diff("prod", "base", diff)
    (line,) = [line for line in out.splitlines() if line.startswith(f"  ~ {NODE_GROUP} gpu-h100")]
    assert "ROLLS its nodes" in line


def test_a_changed_launch_template_of_an_open_capacity_block_is_refused_unless_allowed():
    base, head = _launch_template_changed("gpu-h200-block")
    for plan in (base, head):  # the block opened: its opening action is past, only the drain is ahead
        plan["resources"] = [r for r in plan["resources"] if r["name"] != "gpu-h200-block-open"]
    (refusal,) = [r for r in compare(base, head, set()).refused if "h200-block" in r]
    assert "inside its window" in refusal and "--allow h200-block" in refusal


def test_the_diff_of_a_nodes_user_data_shows_the_lines_that_change_not_base64():
    head = plan_of("prod").as_dict()
    base = copy.deepcopy(head)
    (template,) = [r for r in base["resources"] if r["type"] == rolls.LAUNCH_TEMPLATE and r["name"] == "gpu-h100-lt"]
    text = base64.b64decode(template["inputs"]["userData"]).decode()
    template["inputs"]["userData"] = base64.b64encode(
        text.replace("podPidsLimit: 32768", "podPidsLimit: 4096").encode()
    ).decode()
    out = render_diff("prod", "base", compare(base, head, set()))
    (line,) = [line for line in out.splitlines() if line.strip().startswith("userData")]
    assert "- podPidsLimit: 4096" in line and "+ podPidsLimit: 32768" in line

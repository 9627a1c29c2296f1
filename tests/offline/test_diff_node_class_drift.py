"""`higgsfield diff` says what a change of a Karpenter pool's EC2NodeClass or NodePool does to the pool's nodes
(infra/offline/node_class_drift.py): staging with its first pool (a100) on Karpenter as the head, and the same
plan with its EC2NodeClass (or NodePool) as it was before the change as the base."""

from __future__ import annotations

import copy

import pytest

from infra.offline.diff import as_json, compare, render_diff
from tests.conftest import with_a_karpenter_pool

NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
NODEPOOL = "kubernetes:karpenter.sh/v1:NodePool"


@pytest.fixture(scope="module")
def head(tmp_path_factory) -> dict:
    return with_a_karpenter_pool(tmp_path_factory.mktemp("karpenter"), "staging").as_dict()


def _of(plan: dict, type_: str) -> dict:
    (found,) = [r for r in plan["resources"] if r["type"] == type_]
    return found


def _diff(head: dict, before, after=None, changed: str = NODE_CLASS) -> list[str]:
    """The diff's lines from a base whose resource of type `changed` (the EC2NodeClass unless told) `before(inputs)`
    changed to a head `after(plan)` changed."""
    base, head = copy.deepcopy(head), copy.deepcopy(head)
    before(_of(base, changed)["inputs"])
    if after:
        after(head)
    return render_diff("staging", "base", compare(base, head, set())).splitlines()


def _class_lines(lines: list[str], changed: str = NODE_CLASS) -> tuple[str, list[str]]:
    """The change line of the resource of type `changed` (the EC2NodeClass unless told) and its `!` lines."""
    at = next(i for i, line in enumerate(lines) if line.startswith(f"  ~ {changed} "))
    end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith(("  ~ ", "  + ", "  - ", "  +- "))), None)
    return lines[at], [line.removeprefix("      ! ") for line in lines[at + 1 : end] if line.startswith("      ! ")]


def _old_user_data(inputs: dict) -> None:
    inputs["spec"]["userData"] = inputs["spec"]["userData"].replace("podPidsLimit: 32768", "podPidsLimit: 16384")


def test_a_changed_user_data_marks_the_node_class_as_drifting_its_pools_nodes(head):
    heading, said = _class_lines(_diff(head, _old_user_data))
    assert heading.endswith("  DRIFTS its pool's nodes (see !)")
    (line,) = said
    assert line.startswith("pool a100 (Karpenter NodePool gpu-a100): spec.userData changes the EC2NodeClass's hash")
    assert "every node of the pool Drifted and replaces it" in line


def test_a_drifted_node_running_a_training_pod_is_said_to_stay_until_the_pod_ends(head):
    (line,) = _class_lines(_diff(head, _old_user_data))[1]
    assert "a node running a training pod (karpenter.sh/do-not-disrupt, no terminationGracePeriod) is replaced " in line
    assert "only once that pod ends" in line


def test_a_tag_change_of_the_node_class_drifts_every_node_too(head):
    """Karpenter hashes the spec's tags with the rest (only selector terms, ipPrefixCount and the AMI family are left
    out), so a tag is no harmless in-place change here."""

    def old_tags(inputs: dict) -> None:
        inputs["spec"]["tags"] = {**inputs["spec"]["tags"], "cost-center": "old"}

    heading, (line,) = _class_lines(_diff(head, old_tags))
    assert heading.endswith("DRIFTS its pool's nodes (see !)") and "every node of the pool Drifted" in line


def test_a_changed_subnet_selector_drifts_the_nodes_outside_what_it_now_selects(head):
    def old_subnet(inputs: dict) -> None:
        inputs["spec"]["subnetSelectorTerms"] = [{"id": "subnet-0old"}]

    heading, (line,) = _class_lines(_diff(head, old_subnet))
    assert heading.endswith("DRIFTS its pool's nodes (see !)")
    assert "spec.subnetSelectorTerms is compared with each node" in line
    assert "a node whose subnet it no longer selects is Drifted and replaced" in line


def test_a_node_class_change_karpenter_does_not_drift_on_says_no_node_is_replaced(head):
    def no_prefixes(inputs: dict) -> None:
        inputs["spec"]["ipPrefixCount"] = 1

    heading, (line,) = _class_lines(_diff(head, no_prefixes))
    assert "DRIFTS" not in heading
    assert line.startswith("pool a100 (Karpenter NodePool gpu-a100): spec.ipPrefixCount drifts no node")


def test_the_drift_line_says_the_pools_budget_for_drifted_nodes(head):
    def budget(plan: dict) -> None:
        budgets = _of(plan, NODEPOOL)["inputs"]["spec"]["disruption"]["budgets"]
        budgets.append({"nodes": "1", "reasons": ["Drifted"]})

    (line,) = _class_lines(_diff(head, _old_user_data, budget))[1]
    assert "at most 1 of its nodes at a time (the NodePool's disruption budgets for Drifted)" in line


def test_the_drift_line_says_no_budget_limits_drifted_nodes_when_none_does(head):
    (line,) = _class_lines(_diff(head, _old_user_data))[1]
    assert "any number at a time (no disruption budget of the NodePool limits Drifted)" in line


def test_the_json_diff_carries_the_drift_line_as_the_changes_consequence(head):
    base, after = copy.deepcopy(head), copy.deepcopy(head)
    _old_user_data(_of(base, NODE_CLASS)["inputs"])
    (change,) = [
        c for c in as_json("staging", "base", compare(base, after, set()))["change"] if c["type"] == NODE_CLASS
    ]
    assert change["consequences"][0].startswith("pool a100 (Karpenter NodePool gpu-a100): spec.userData changes")


def test_the_diff_of_the_node_class_user_data_shows_the_lines_that_change_on_one_line(head):
    """The EC2NodeClass holds its user data as text, not base64: its change is still one line of the diff."""
    lines = _diff(head, _old_user_data)
    at = next(i for i, line in enumerate(lines) if line.startswith("      spec.userData: "))
    assert "- podPidsLimit: 16384" in lines[at] and "+ podPidsLimit: 32768" in lines[at]
    assert lines[at + 1].startswith("      ! pool a100 ")


def _nodepool_lines(head: dict, before, after=None) -> tuple[str, list[str]]:
    """The NodePool's change line and its `!` lines, from a base whose NodePool `before(inputs)` changed."""
    return _class_lines(_diff(head, before, after, NODEPOOL), NODEPOOL)


def _template(inputs: dict) -> dict:
    return inputs["spec"]["template"]


@pytest.mark.parametrize(
    ("field", "old"),
    [
        ("metadata.labels", lambda t: t["metadata"]["labels"].update({"team": "old"})),
        ("metadata.annotations", lambda t: t["metadata"].update({"annotations": {"owner": "old"}})),
        ("spec.taints", lambda t: t["spec"]["taints"].append({"key": "old", "value": "true", "effect": "NoSchedule"})),
        ("spec.startupTaints", lambda t: t["spec"]["startupTaints"].clear()),
        ("spec.expireAfter", lambda t: t["spec"].update({"expireAfter": "720h"})),
        ("spec.terminationGracePeriod", lambda t: t["spec"].update({"terminationGracePeriod": "1h"})),
        ("spec.nodeClassRef", lambda t: t["spec"]["nodeClassRef"].update({"name": "old-class"})),
    ],
)
def test_a_change_of_the_nodepools_hashed_template_drifts_every_node_of_its_pool(head, field, old):
    """Karpenter hashes the NodePool's template but its requirements; a NodeClaim whose hash differs is Drifted."""
    heading, (line,) = _nodepool_lines(head, lambda inputs: old(_template(inputs)))
    assert heading.endswith("  DRIFTS its pool's nodes (see !)")
    assert line.startswith(
        f"pool a100 (Karpenter NodePool gpu-a100): spec.template.{field} changes the NodePool's hash"
    )
    assert "every node of the pool Drifted and replaces it" in line


def test_a_drifted_nodepool_node_running_a_training_pod_is_said_to_stay_until_the_pod_ends(head):
    def old_taint(inputs: dict) -> None:
        _template(inputs)["spec"]["taints"].append({"key": "old", "value": "true", "effect": "NoSchedule"})

    (line,) = _nodepool_lines(head, old_taint)[1]
    assert "a node running a training pod (karpenter.sh/do-not-disrupt, no terminationGracePeriod) is replaced " in line
    assert "only once that pod ends" in line


def test_a_narrowed_nodepool_requirement_drifts_the_nodes_its_labels_no_longer_admit(head):
    """Requirements are not hashed: Karpenter compares them with each NodeClaim's labels."""

    def more_instance_types(inputs: dict) -> None:
        _template(inputs)["spec"]["requirements"][0]["values"].append("p4de.24xlarge")

    heading, (line,) = _nodepool_lines(head, more_instance_types)
    assert heading.endswith("DRIFTS its pool's nodes (see !)")
    assert "spec.template.spec.requirements is compared with each node's labels" in line
    assert "a node whose labels they no longer admit is Drifted and replaced" in line
    assert "changes the NodePool's hash" not in line


def test_an_expanded_nodepool_requirement_says_no_node_is_replaced(head):
    """Another instance type for the pool: every node's labels are still admitted, so none drifts."""

    def fewer_instance_types(inputs: dict) -> None:
        values = _template(inputs)["spec"]["requirements"][0]["values"]
        values[:] = values[:1]

    def more_instance_types(plan: dict) -> None:
        _template(_of(plan, NODEPOOL)["inputs"])["spec"]["requirements"][0]["values"].append("p4de.24xlarge")

    heading, (line,) = _nodepool_lines(head, fewer_instance_types, more_instance_types)
    assert "DRIFTS" not in heading
    assert line == (
        "pool a100 (Karpenter NodePool gpu-a100): spec.template.spec.requirements drifts no node (not hashed, and the "
        "requirements still admit every node's labels): none is replaced"
    )


@pytest.mark.parametrize(
    "old",
    [
        lambda spec: spec.update({"limits": {"nvidia.com/gpu": "8"}}),
        lambda spec: spec["disruption"]["budgets"].append({"nodes": "1", "reasons": ["Drifted"]}),
        lambda spec: spec["disruption"].update({"consolidateAfter": "1s"}),
    ],
    ids=["limits", "budgets", "consolidateAfter"],
)
def test_a_nodepool_change_outside_its_template_says_no_node_is_replaced(head, old):
    heading, (line,) = _nodepool_lines(head, lambda inputs: old(inputs["spec"]))
    assert "DRIFTS" not in heading and "ROLLS" not in heading
    assert line.startswith("pool a100 (Karpenter NodePool gpu-a100): spec.")
    assert "drifts no node" in line and "none is replaced" in line


def test_the_nodepool_drift_line_says_the_pools_budget_for_drifted_nodes(head):
    def old_label(inputs: dict) -> None:
        _template(inputs)["metadata"]["labels"]["team"] = "old"

    def budget(plan: dict) -> None:
        _of(plan, NODEPOOL)["inputs"]["spec"]["disruption"]["budgets"].append({"nodes": "1", "reasons": ["Drifted"]})

    (line,) = _nodepool_lines(head, old_label, budget)[1]
    assert "at most 1 of its nodes at a time (the NodePool's disruption budgets for Drifted)" in line


def test_the_json_diff_carries_the_nodepool_drift_line_as_the_changes_consequence(head):
    base, after = copy.deepcopy(head), copy.deepcopy(head)
    _template(_of(base, NODEPOOL)["inputs"])["spec"]["expireAfter"] = "720h"
    (change,) = [c for c in as_json("staging", "base", compare(base, after, set()))["change"] if c["type"] == NODEPOOL]
    assert change["consequences"][0].startswith(
        "pool a100 (Karpenter NodePool gpu-a100): spec.template.spec.expireAfter changes the NodePool's hash"
    )


# Karpenter hashes with hashstructure's SlicesAsSets, IgnoreZeroValue and ZeroNil (NodePool.Hash, EC2NodeClass.Hash):
# a change its hash does not see drifts no node.
OTHER_TAINT = {"key": "higgsfield.io/other", "value": "true", "effect": "NoExecute"}


def _taints(*taints: dict):
    return lambda template: template["spec"].update(taints=[dict(t) for t in taints])


def _gpu_taint(template: dict) -> dict:
    (taint,) = template["spec"]["taints"]
    return taint


def _no_taint_value(template: dict) -> None:
    template["spec"]["taints"] = [{k: v for k, v in _gpu_taint(template).items() if k != "value"}]


@pytest.mark.parametrize(
    ("field", "old", "new"),
    [
        (
            "spec.taints",
            lambda t: _taints(OTHER_TAINT, _gpu_taint(t))(t),
            lambda t: _taints(_gpu_taint(t), OTHER_TAINT)(t),
        ),
        ("spec.taints", lambda t: _gpu_taint(t).update(value=""), _no_taint_value),
    ],
    ids=["reordered-taints", "empty-taint-value"],
)
def test_a_nodepool_template_change_its_hash_does_not_see_says_no_node_is_replaced(head, field, old, new):
    """Reordered taints (each list is hashed as a set), a taint's value "" and none (a Go string, no pointer: both
    decode to ""): the NodePool's hash is the same, so no NodeClaim is Drifted."""

    def after(plan: dict) -> None:
        new(_template(_of(plan, NODEPOOL)["inputs"]))

    heading, (line,) = _nodepool_lines(head, lambda inputs: old(_template(inputs)), after)
    assert "DRIFTS" not in heading
    assert line.startswith(f"pool a100 (Karpenter NodePool gpu-a100): spec.template.{field} drifts no node (")
    assert "Karpenter's hash of it is the same" in line and line.endswith("none is replaced")


def test_a_nodepool_change_whose_hash_differs_still_drifts_beside_one_whose_hash_does_not(head):
    """A reordered taint list beside a changed label: only the label is said to change the hash."""

    def old(inputs: dict) -> None:
        template = _template(inputs)
        template["metadata"]["labels"]["team"] = "old"
        _taints(OTHER_TAINT, _gpu_taint(template))(template)

    def after(plan: dict) -> None:
        template = _template(_of(plan, NODEPOOL)["inputs"])
        _taints(_gpu_taint(template), OTHER_TAINT)(template)

    heading, (line,) = _nodepool_lines(head, old, after)
    assert heading.endswith("DRIFTS its pool's nodes (see !)")
    assert line.startswith("pool a100 (Karpenter NodePool gpu-a100): spec.template.metadata.labels changes the ")


def test_reordered_network_interfaces_of_the_node_class_say_no_node_is_replaced(head):
    """The EC2NodeClass's hash takes its lists as sets too: the same EFA interfaces in another order drift no node."""

    def reversed_interfaces(inputs: dict) -> None:
        inputs["spec"]["networkInterfaces"].reverse()

    heading, (line,) = _class_lines(_diff(head, reversed_interfaces))
    assert "DRIFTS" not in heading
    assert line.startswith("pool a100 (Karpenter NodePool gpu-a100): spec.networkInterfaces drifts no node (")
    assert "Karpenter's hash of it is the same" in line


# Karpenter hashes the object the API server holds, its CRD's schema defaults filled in (infra/offline/crd_schemas.py
# defaulted): a field written out as its default where it was left out, or the other way, changes no hash.


def test_node_class_metadata_options_written_out_as_the_crds_defaults_say_no_node_is_replaced(head):
    """The base left metadataOptions to the CRD (its default: IMDSv2, hop limit 1, IPv6 off), the head writes the
    same values out: the stored class is the same, so its hash is."""
    heading, (line,) = _class_lines(_diff(head, lambda inputs: inputs["spec"].pop("metadataOptions")))
    assert "DRIFTS" not in heading
    assert line.startswith("pool a100 (Karpenter NodePool gpu-a100): spec.metadataOptions drifts no node (")
    assert "the CRD's defaults filled in" in line and line.endswith("none is replaced")


def test_a_nodepool_expiry_written_out_as_the_crds_default_says_no_node_is_replaced(head):
    def expiry_written_out(plan: dict) -> None:
        _template(_of(plan, NODEPOOL)["inputs"])["spec"]["expireAfter"] = "720h"

    heading, (line,) = _nodepool_lines(
        head, lambda inputs: _template(inputs)["spec"].pop("expireAfter"), expiry_written_out
    )
    assert "DRIFTS" not in heading
    assert line.startswith("pool a100 (Karpenter NodePool gpu-a100): spec.template.spec.expireAfter drifts no node (")


def test_a_nodepool_expiry_set_where_the_base_left_the_default_still_drifts_every_node(head):
    """Left out, expireAfter is 720h; the head's Never is another value, hashed: every node drifts."""
    heading, (line,) = _nodepool_lines(head, lambda inputs: _template(inputs)["spec"].pop("expireAfter"))
    assert heading.endswith("  DRIFTS its pool's nodes (see !)")
    assert line.startswith("pool a100 (Karpenter NodePool gpu-a100): spec.template.spec.expireAfter changes the ")


def test_the_drift_line_says_the_default_budget_of_a_nodepool_that_sets_none(head):
    """A NodePool without `budgets` gets the CRD's one budget of 10% of its nodes, for every reason, Drifted
    among them: not any number at a time."""

    def no_budgets(plan: dict) -> None:
        del _of(plan, NODEPOOL)["inputs"]["spec"]["disruption"]["budgets"]

    (line,) = _class_lines(_diff(head, _old_user_data, no_budgets))[1]
    assert "at most 10% of its nodes at a time (the NodePool's disruption budgets for Drifted)" in line

"""Gangs placed by network topology (components/training.py): Volcano's controller builds HyperNodes
from EKS's topology labels, and the scheduler's network-topology-aware plugin packs a gang's pods
into the HyperNode it started filling - on every pool, reservations and Capacity Blocks included.
HyperNodes are built as the label discoverer of volcano-sh/volcano@v1.15.1 builds them (parseCfg drops
the list's last entry, the hostname, and reverses the rest; generateHyperNodeInfo walks that record
from tier 1 up, a node without a label stopping there), on nodes labelled as EKS labels them
(docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html). Volcano's scheduler refuses a
HyperNode with two parents (addChild, pkg/scheduler/api/hyper_node_info.go@v1.15.1)."""

from __future__ import annotations

import yaml

from components import training
from tests.components.test_observability_plan import _release


def _hypernodes(nodes: dict[str, dict[str, str]]) -> dict[tuple[int, str], set[str]]:
    """(tier, label value) -> members, for the discovery config's one topology type."""
    (source,) = training.HYPERNODE_DISCOVERY["networkTopologyDiscovery"]
    (levels,) = source["config"]["networkTopologyTypes"].values()
    record = [level["nodeLabel"] for level in reversed(levels[:-1])]  # parseCfg: `len(labels) - 2` down to 0
    found: dict[tuple[int, str], set[str]] = {}
    for node, labels in nodes.items():
        member = node
        for tier, label in enumerate(record, start=1):
            value = labels.get(label)
            if value is None:
                break
            found.setdefault((tier, value), set()).add(member)
            member = value
    return found


def _eks(l1: str, l2: str, l3: str, l4: str | None = None) -> dict[str, str]:
    labels = {f"topology.k8s.aws/network-node-layer-{n}": v for n, v in ((1, l1), (2, l2), (3, l3))}
    return {**labels, **({"topology.k8s.aws/network-node-layer-4": l4} if l4 else {})}


FLEET = {
    "a": _eks("nn-1", "nn-2", "nn-4"),
    "b": _eks("nn-1", "nn-2", "nn-4"),
    "c": _eks("nn-1", "nn-2", "nn-5"),  # under a and b's layer-2 node, another layer-3 one
    "d": _eks("nn-1", "nn-3", "nn-6", "nn-9"),  # a four-layer type still joins at layer 3
}


def test_nodes_under_one_bottom_network_node_share_a_tier_one_hypernode():
    tier1 = {value: members for (tier, value), members in _hypernodes(FLEET).items() if tier == 1}
    assert tier1 == {"nn-4": {"a", "b"}, "nn-5": {"c"}, "nn-6": {"d"}}


def test_each_eks_layer_is_a_tier_and_the_top_layer_holds_them_all():
    found = _hypernodes(FLEET)
    assert {tier for tier, _ in found} == {1, 2, 3}
    assert found[(2, "nn-2")] == {"nn-4", "nn-5"} and found[(3, "nn-1")] == {"nn-2", "nn-3"}


def test_no_hypernode_has_two_parents_which_volcanos_scheduler_refuses():
    parents: dict[str, set[str]] = {}
    for (tier, value), members in _hypernodes(FLEET).items():
        for member in members if tier > 1 else ():
            parents.setdefault(member, set()).add(value)
    assert all(len(above) == 1 for above in parents.values()), parents


def test_a_node_without_topology_labels_joins_no_hypernode():
    assert _hypernodes({"cpu": {"kubernetes.io/hostname": "cpu"}}) == {}


def test_the_chart_gets_the_discovery_as_a_mapping_and_the_scheduler_the_plugin(plan):
    values = _release(plan, "volcano").inputs["values"]["custom"]
    assert values["controller_config_override"] == training.HYPERNODE_DISCOVERY  # toYaml'd by the chart
    scheduler = yaml.safe_load(values["scheduler_config_override"])
    plugins = {p["name"]: p for tier in scheduler["tiers"] for p in tier["plugins"]}
    arguments = plugins["network-topology-aware"]["arguments"]
    assert arguments["hypernode.binpack.normal-pod.enable"] is True
    assert arguments["hypernode.binpack.resources"] == "nvidia.com/gpu"

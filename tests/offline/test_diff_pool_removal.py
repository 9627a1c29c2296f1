"""`higgsfield diff` says, before anything is deleted, what removing a Karpenter pool does to the jobs on its
nodes (infra/offline/pool_removal.py): the staging stack with both its pools on Karpenter, against the same stack
without h100, or with h100 back on a node group."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from infra.offline.diff import as_json, compare, render_diff
from infra.offline.evaluate import record
from tests.conftest import ROOT

NODEPOOL = "kubernetes:karpenter.sh/v1:NodePool"


def _staging(root: Path, edit) -> dict:
    """The recorded plan of staging with its pools on Karpenter, then `edit(pools)`."""
    for part in ("Pulumi.yaml", "stacks"):
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, root / part)
    path = root / "stacks" / "Pulumi.staging.yaml"
    config = yaml.safe_load(path.read_text())
    pools = config["config"]["higgsfield:gpuPools"]
    pools[:] = [{**p, "provisioner": "karpenter", "minSize": 0} for p in pools]
    edit(pools)
    path.write_text(yaml.safe_dump(config))
    return record("staging", root=root).as_dict()


def _without_h100(pools: list) -> None:
    pools[:] = [p for p in pools if p["name"] != "h100"]


def _h100_on_a_node_group(pools: list) -> None:
    (h100,) = [p for p in pools if p["name"] == "h100"]
    del h100["provisioner"]


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, dict]:
    def plan(name: str, edit) -> dict:
        return _staging(tmp_path_factory.mktemp(name), edit)

    return {
        "base": plan("base", lambda pools: None),
        "removed": plan("removed", _without_h100),
        "node-group": plan("node-group", _h100_on_a_node_group),
    }


def _lines(plans: dict, head: str) -> list[str]:
    diff = compare(plans["base"], plans[head], set())
    (nodepool,) = [r for r in diff.removed if r["type"] == NODEPOOL]
    return diff.removal_consequences[nodepool["urn"]]


def test_removing_a_karpenter_pool_says_a_node_running_a_training_pod_stays_until_the_pod_ends(plans):
    """No terminationGracePeriod: the drain waits on do-not-disrupt pods for as long as they run."""
    (nodes,) = [line for line in _lines(plans, "removed") if line.startswith("pool h100 (Karpenter NodePool gpu-h100)")]
    assert "a node running a training pod" in nodes and "stays until that pod ends" in nodes


def test_removing_a_karpenter_pool_says_a_rank_made_again_finds_no_node(plans):
    (work,) = [line for line in _lines(plans, "removed") if line.startswith("running work on h100")]
    assert "finds no node" in work and "karpenter.sh/disrupted:NoSchedule" in work


def test_moving_a_pool_to_a_node_group_says_a_rank_made_again_goes_to_the_node_group(plans):
    (work,) = [line for line in _lines(plans, "node-group") if line.startswith("running work on h100")]
    assert "the pool's node group" in work and "finds no node" not in work


def test_removing_a_karpenter_pool_says_pulumi_up_fails_after_ten_minutes_while_a_job_runs(plans):
    """pulumi-kubernetes waits 10 minutes by default for a deleted object to go; the EFA fabric waits on the
    EC2NodeClass, so a failed deploy leaves it to the next one."""
    (deploy,) = [line for line in _lines(plans, "removed") if line.startswith("`pulumi up` waits")]
    assert "10 min" in deploy and "fails" in deploy and "run `pulumi up` again once" in deploy
    assert "EFA security group and placement group" in deploy


def test_removing_a_karpenter_pool_names_the_commands_of_a_clean_removal(plans):
    (first,) = [line for line in _lines(plans, "removed") if line.startswith("to deploy without waiting")]
    assert "kubectl delete nodepool gpu-h100 --wait=false" in first
    assert "kubectl get nodeclaims -l karpenter.sh/nodepool=gpu-h100" in first


def test_the_diff_prints_the_consequences_under_the_removed_nodepool(plans):
    diff = compare(plans["base"], plans["removed"], set())
    text = render_diff("staging", "main", diff).splitlines()
    (at,) = [i for i, line in enumerate(text) if line.startswith(f"  - {NODEPOOL} karpenter-h100-nodepool")]
    assert "DRAINS" in text[at]
    assert text[at + 1].startswith("      ! pool h100 (Karpenter NodePool gpu-h100)")


def test_the_json_diff_carries_the_consequences_of_a_removed_nodepool(plans):
    diff = as_json("staging", "main", compare(plans["base"], plans["removed"], set()))
    (nodepool,) = [d for d in diff["delete"] if d["type"] == NODEPOOL]
    assert any(line.startswith("`pulumi up` waits") for line in nodepool["consequences"])

"""Clusters that upgrade in place: add-on versions from EKS per cluster version (or a stack's
pin), node groups on the cluster's version, and a minor upgrade that `higgsfield diff` shows as
in-place updates in the order the deploy runs them."""

from __future__ import annotations

import yaml

from components.addons import stack_addons
from infra.cli.main import main
from infra.core import versions
from infra.offline.diff import deploy_order
from infra.offline.evaluate import record
from tests.conftest import ROOT, assert_plan_rejects, set_key
from tests.offline.test_diff import _edit_stack, _git, _project_template, repo  # noqa: F401  (fixtures)

ADDON = "aws:eks/addon:Addon"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


def _addons(plan) -> dict[str, dict]:
    return {a.inputs["addonName"]: a.inputs for a in plan.of_type(ADDON)}


def test_addon_versions_are_resolved_by_eks_for_the_stacks_kubernetes_version(plan, stack_settings):
    version = stack_settings["higgsfield:kubernetesVersion"]
    asked = [args for token, args in plan.invokes if token == "aws:eks/getAddonVersion:getAddonVersion"]
    assert {a["addonName"] for a in asked} == set(_addons(plan))
    assert all(
        a["kubernetesVersion"] == version and a.get("mostRecent", False) is versions.ADDON_MOST_RECENT for a in asked
    )
    assert all(
        v["addonVersion"] == versions.ADDON_RESOLVED_AT_DEPLOY.format(k8s=version) for v in _addons(plan).values()
    )


def test_a_pinned_addon_version_is_used_and_not_asked_for(project_copy):
    root = project_copy("dev", set_key("higgsfield:addonVersions", {"coredns": "v1.12.4-eksbuild.1"}))
    plan = record("bad", root=root)
    assert _addons(plan)["coredns"]["addonVersion"] == "v1.12.4-eksbuild.1"
    assert "coredns" not in {a["addonName"] for t, a in plan.invokes if t == "aws:eks/getAddonVersion:getAddonVersion"}
    assert _addons(plan)["vpc-cni"]["addonVersion"].startswith("<resolved at deploy")


def test_stack_addons_lists_what_the_stack_installs_with_its_pins(plan):
    """The list preflight checks against AWS: exactly the add-ons in the plan."""
    addons = stack_addons(plan.config)
    assert set(addons) == set(_addons(plan))
    assert all(a.kubernetes_version == plan.config.kubernetes_version for a in addons.values())


def test_pin_for_an_addon_the_platform_does_not_install_names_the_key(project_copy, capsys):
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_key("higgsfield:addonVersions", {"vpc-cnii": "v1.20.4-eksbuild.1"}),
        "higgsfield:addonVersions.vpc-cnii",
        "did you mean 'vpc-cni'",
    )


def test_malformed_addon_pin_names_the_key(project_copy, capsys):
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_key("higgsfield:addonVersions", {"coredns": "1.12"}),
        "higgsfield:addonVersions.coredns",
        "not an EKS add-on version",
    )


def test_node_groups_run_the_cluster_version(plan, stack_settings):
    groups = plan.of_type(NODE_GROUP)
    assert groups and all(g.inputs["version"] == stack_settings["higgsfield:kubernetesVersion"] for g in groups)
    assert all("releaseVersion" not in g.inputs for g in groups)  # the latest AMI release unless pinned


def test_a_pinned_ami_release_reaches_every_node_group(project_copy):
    plan = record("bad", root=project_copy("dev", set_key("higgsfield:nodeReleaseVersion", "1.35.2-20261120")))
    assert {g.inputs["releaseVersion"] for g in plan.of_type(NODE_GROUP)} == {"1.35.2-20261120"}


def test_an_ami_release_of_another_minor_is_rejected(project_copy, capsys):
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_key("higgsfield:nodeReleaseVersion", "1.34.2-20261120"),
        "higgsfield:nodeReleaseVersion",
        "is an AMI release for Kubernetes 1.34",
    )


def test_minor_upgrade_updates_in_place_control_plane_then_addons_then_node_groups(repo, capsys):
    """1.34 -> 1.35 on staging (FSx on): nothing replaced, and the diff lists the updates in the
    order the deploy runs them."""
    stack = repo / "stacks" / "Pulumi.staging.yaml"
    doc = yaml.safe_load(stack.read_text())
    doc["config"]["higgsfield:kubernetesVersion"] = "1.34"
    stack.write_text(yaml.safe_dump(doc))
    _git(repo, "commit", "-qa", "--amend", "--no-edit")  # the base commit runs 1.34
    _edit_stack(repo, "staging", lambda c: c.update({"higgsfield:kubernetesVersion": "1.35"}))

    assert main(["diff", "staging", "--base", "HEAD~1"]) == 0
    out, err = capsys.readouterr()
    assert "(0 replaced), 0 to delete" in out and "REPLACE" not in out and "refused" not in out + err
    lines = out.splitlines()

    def at(fragment: str) -> list[int]:
        found = [i for i, line in enumerate(lines) if line.startswith("  ~ ") and fragment in line]
        assert found, (fragment, out)
        return found

    (cluster,) = at("eks:index:Cluster cluster-eks")
    addons = at(f"{ADDON} cluster-")
    node_groups = at(NODE_GROUP)
    assert cluster < min(addons) and max(addons) < min(node_groups)

    def block(i: int) -> str:  # the header line and its "path: old → new" lines
        end = next((j for j in range(i + 1, len(lines)) if not lines[j].startswith("      ")), len(lines))
        return "\n".join(lines[i:end])

    assert "version: 1.34 → 1.35" in block(cluster)
    assert all("addonVersion" in block(i) for i in addons)
    assert all("version" in block(i) for i in node_groups)


def test_a_resource_waiting_on_a_component_is_ordered_after_the_components_resources():
    resources = [
        {"urn": "nodes", "dependencies": ["cluster"]},
        {"urn": "cluster", "dependencies": []},
        {"urn": "cni", "parent": "cluster", "dependencies": []},
        {"urn": "cni-config", "parent": "cluster", "dependencies": ["cni"]},
    ]
    order = deploy_order(resources)
    assert order["nodes"] > order["cni-config"] > order["cni"]


def test_the_manual_explains_upgrading_kubernetes():
    readme = (ROOT / "docs" / "upgrading.md").read_text()
    assert readme.startswith("# Upgrading: Kubernetes")
    section = readme.split("\n## ", 1)[0]
    for topic in ("higgsfield diff", "maxUnavailable", "PodEvictionFailure", "addonVersions", "nodeReleaseVersion"):
        assert topic in section, topic

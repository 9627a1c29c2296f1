"""`higgsfield plan`: the printed tree, the JSON recording, and the defaults it applies."""

from __future__ import annotations

import json

import yaml

from infra.cli.main import main
from infra.config import parse
from tests.conftest import ROOT

RESOURCE_FIELDS = {
    "urn", "type", "name", "parent", "custom", "provider", "inputs", "dependencies", "protect",
    "retain_on_delete", "ignore_changes", "replace_on_changes", "delete_before_replace",
}


def test_plan_prints_components_settings_and_a_count(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "dev"]) == 0
    out = capsys.readouterr().out
    assert "▸ higgsfield:cluster:Cluster cluster" in out
    assert "k8s 1.35, auth API" in out
    assert "IMDS tokens required hop 1" in out
    assert out.strip().splitlines()[-2].endswith("components)")


def test_plan_json_has_the_documented_shape(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    target = tmp_path / "plan.json"
    assert main(["plan", "prod", "--json", str(target)]) == 0
    recorded = json.loads(target.read_text())
    assert {"project", "stack", "resources", "outputs"} <= recorded.keys()
    assert recorded["project"] == "higgsfield" and recorded["stack"] == "prod"
    assert all(set(r) == RESOURCE_FIELDS for r in recorded["resources"])
    assert recorded["outputs"]["clusterName"] == "higgsfield-prod"


def test_values_known_only_after_deploy_print_as_computed(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    target = tmp_path / "plan.json"
    main(["plan", "dev", "--json", str(target)])
    cluster = next(r for r in json.loads(target.read_text())["resources"] if r["type"] == "eks:index:Cluster")
    assert cluster["inputs"]["vpcId"] == "<computed>"


def test_pulumi_yaml_defaults_are_the_config_defaults():
    """The CLI applies Pulumi.yaml defaults; config.py applies its own when a key is absent.
    Both must agree, or `pulumi up` and `higgsfield plan` would build different things."""
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    minimal = {"environment": "dev", "availabilityZones": ["us-west-2a", "us-west-2b"], "cpuNodes": {"instanceTypes": ["m7i.large"], "minSize": 1, "maxSize": 2}}
    without = parse("t", "us-west-2", minimal)
    with_defaults = parse("t", "us-west-2", {**minimal, **{k: d["default"] for k, d in declared.items() if "default" in d}})
    assert without == with_defaults


def test_program_reads_like_a_map_in_under_100_lines():
    assert len((ROOT / "infra" / "__main__.py").read_text().splitlines()) < 100


def test_plan_shows_per_gpu_pool_type_gpus_efa_zone_sizes_and_capacity(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    main(["plan", "prod"])
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.strip().startswith("h100 ")]
    assert row.split() == ["h100", "p5.48xlarge", "8", "32", "us-east-2b", "0", "16", "ON_DEMAND"]


def test_pulumi_yaml_config_declarations_are_ones_the_pulumi_cli_accepts():
    """Pulumi's project schema (pulumi/pulumi sdk/go/common/workspace/project.json) requires a
    `type` of string, integer, boolean or array (with `items`) on every declared config key."""
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    for key, decl in declared.items():
        assert decl["type"] in ("string", "integer", "boolean", "array"), key
        assert set(decl) <= {"type", "items", "description", "secret", "default"}, key
        if decl["type"] == "array":
            assert decl["items"]["type"] in ("string", "integer", "boolean"), key


def test_every_declared_key_without_a_default_is_set_in_every_stack():
    """The Pulumi CLI refuses a stack that lacks a declared key without a default."""
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    required = {f"higgsfield:{k}" for k, d in declared.items() if "default" not in d}
    for path in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        assert required <= set(yaml.safe_load(path.read_text())["config"]), path.name

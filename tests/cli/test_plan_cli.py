"""`higgsfield plan`: the printed tree, the JSON recording, and the defaults it applies."""

from __future__ import annotations

import json

import yaml

from infra.cli.main import main
from infra.config import parse
from tests.conftest import ROOT, set_pool

RESOURCE_FIELDS = {
    "urn",
    "type",
    "name",
    "parent",
    "custom",
    "provider",
    "inputs",
    "dependencies",
    "protect",
    "retain_on_delete",
    "ignore_changes",
    "replace_on_changes",
    "delete_before_replace",
}


def test_plan_prints_components_settings_and_a_count(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "dev"]) == 0
    out = capsys.readouterr().out
    assert "▸ higgsfield:cluster:Cluster cluster" in out
    assert "k8s 1.35, auth API" in out
    assert "IMDS tokens required hop 1" in out
    assert out.splitlines()[1].endswith(" components")


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
    """The CLI applies Pulumi.yaml defaults; infra.config applies its own when a key is absent.
    Both must agree, or `pulumi up` and `higgsfield plan` would build different things."""
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    minimal = {
        "environment": "dev",
        "availabilityZones": ["us-west-2a", "us-west-2b"],
        "cpuNodes": {"instanceTypes": ["m7i.large"], "minSize": 1, "maxSize": 2},
    }
    without = parse("t", "us-west-2", minimal)
    with_defaults = parse(
        "t", "us-west-2", {**minimal, **{k: d["default"] for k, d in declared.items() if "default" in d}}
    )
    assert without == with_defaults


def test_program_reads_as_a_table_of_contents():
    """infra/__main__.py: numbered sections in order, components given their args by keyword, and
    a build() short enough to read at once (counted in statements: the formatter decides the lines)."""
    import ast
    import re

    source = (ROOT / "infra" / "__main__.py").read_text()
    sections = [int(n) for n in re.findall(r"^    # (\d+)\. ", source, re.M)]
    assert sections == list(range(1, len(sections) + 1)) and len(sections) >= 6
    build = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "build")
    args = [c for c in ast.walk(build) if isinstance(c, ast.Call) and getattr(c.func, "id", "").endswith("Args")]
    assert args and all(not c.args for c in args)
    assert sum(isinstance(n, ast.stmt) for n in ast.walk(build)) <= 60


def test_plan_shows_per_gpu_pool_type_gpus_efa_zone_sizes_and_capacity(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    main(["plan", "prod"])
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.strip().startswith("h100 ")]
    assert row.split() == ["h100", "p5.48xlarge", "8", "32", "us-east-2b", "0", "16", "128", "ON_DEMAND"]


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


def _plan_text(stack: str, *flags: str) -> list[str]:
    from infra.cli.views.plan import render
    from tests.conftest import plan_of

    return render(plan_of(stack), verbose="--verbose" in flags).splitlines()


def test_plan_summary_counts_agree_with_the_recorded_plan(plan):
    from collections import Counter

    lines = _plan_text(plan.stack)
    custom = [r for r in plan.resources if r.custom]
    assert lines[1] == (
        f"{len(plan.resources)} resources: {len(custom)} cloud/Kubernetes resources in "
        f"{len(plan.resources) - len(custom)} components"
    )
    kinds = Counter(r.type for r in custom)  # the plan shows a short name, or the full type where two share it
    by_kind = " ".join(line.strip() for line in lines[2:] if not line.startswith("GPU pools"))
    top_type, top_count = kinds.most_common(1)[0]
    assert by_kind.startswith(f"by kind: {top_count} ")


def test_plan_summary_gives_gpu_capacity_and_each_queue_against_it(plan):
    lines = _plan_text(plan.stack)
    pools = [
        g
        for g in plan.of_type("aws:eks/nodeGroup:NodeGroup")
        if (g.inputs.get("labels") or {}).get("nvidia.com/gpu.present") == "true"
    ]
    capacity = sum(int(p.instance.gpus) * p.max_size for p in plan.config.gpu_pools)
    nodes = sum(g.inputs["scalingConfig"]["maxSize"] for g in pools)
    assert f"GPU pools: {len(pools)}, at most {nodes} nodes and {capacity} GPUs at maxSize" in lines
    header = next(i for i, line in enumerate(lines) if line.startswith("Queues "))
    assert lines[header].endswith(f"against {capacity} GPUs:")
    rows = {
        line.split()[0]: line.split() for line in lines[header + 2 : header + 2 + len(plan.config.scheduler.queues)]
    }
    for queue in plan.config.scheduler.queues:
        assert rows[queue.name][2] == str(queue.gpu_capability)
        teams = [t.name for t in plan.config.scheduler.teams if t.queue == queue.name]
        assert all(t in rows[queue.name] for t in teams)


def test_plan_summary_gives_each_team_its_gpu_quota(plan):
    lines = _plan_text(plan.stack)
    header = next(i for i, line in enumerate(lines) if line.startswith("Queues "))
    rows = " ".join(lines[header + 2 : header + 2 + len(plan.config.scheduler.queues)])
    for team in plan.config.scheduler.teams:
        assert f"{team.name} {team.gpu_quota}" in rows
    assert "no quota" not in rows


def test_plan_summary_shows_fsx_throughput_before_the_tree():
    lines = _plan_text("prod")
    (fsx,) = [i for i, line in enumerate(lines) if line.startswith("FSx for Lustre")]
    assert lines[fsx].endswith("= 12,000 MB/s in us-east-2b")  # 24000 GiB x 500 MB/s/TiB
    assert fsx < next(i for i, line in enumerate(lines) if line.startswith("Resources by component"))


def test_plan_collapses_repeated_autoscaler_tags_and_verbose_lists_each(plan):
    tags = [r for r in plan.of_type("aws:autoscaling/tag:Tag")]
    brief, verbose = _plan_text(plan.stack), _plan_text(plan.stack, "--verbose")
    per_pool = {}
    for t in tags:
        per_pool[t.parent] = per_pool.get(t.parent, 0) + 1
    assert sorted(int(line.split()[1]) for line in brief if line.endswith("autoscaler template tags")) == sorted(
        per_pool.values()
    )
    assert not any("aws:autoscaling/tag:Tag" in line for line in brief)
    assert sum(1 for line in verbose if "+ aws:autoscaling/tag:Tag " in line) == len(tags)


def test_plan_lines_fit_120_columns(plan):
    assert max(map(len, _plan_text(plan.stack))) <= 120


def test_plan_of_prod_reads_at_a_glance_in_under_220_lines():
    # prod's 384 resources in about 210 lines: repeated resources of a component collapse into one
    # line each (per-team log groups, quotas, roles); --verbose lists every one.
    assert len(_plan_text("prod")) < 220 < len(_plan_text("prod", "--verbose"))


def test_plan_and_check_say_when_an_efa_pool_reads_fsx_from_another_az(project_copy, capsys):
    """settings.md: fsx.availabilityZone must be the EFA pools' zone; staging's h100 moved to 1b
    leaves FSx in 1a with a100, and both commands say so in one line naming the settings."""
    project_copy("staging", set_pool(1, availabilityZone="us-east-1b"))
    assert main(["plan", "bad"]) == 0
    plan_out = " ".join(capsys.readouterr().out.split())
    warning = (
        "higgsfield:fsx: FSx is in us-east-1a (fsx.availabilityZone, default the first EFA pool's zone), but EFA "
        "pool h100 in us-east-1b (higgsfield:gpuPools[1].availabilityZone) read and checkpoint across AZs"
    )
    assert f"note: {warning}" in plan_out
    assert main(["check", "bad"]) == 0
    assert warning in " ".join(capsys.readouterr().out.split())


def test_plan_says_nothing_of_fsx_zones_when_every_efa_pool_is_beside_it(project_copy, capsys):
    project_copy("staging", set_pool(0, minSize=0))
    assert main(["plan", "bad"]) == 0
    assert "read and checkpoint across AZs" not in capsys.readouterr().out

"""`higgsfield timeline`: critical paths of a synthetic graph, and every shipped stack within 15%
of the chain no deployment can avoid."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from infra.offline import timeline
from infra.offline.evaluate import Plan, Resource
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
        _r(
            "fsx",
            "aws:fsx/lustreFileSystem:LustreFileSystem",
            ["subnet", "cluster"] if fsx_after_cluster else ["subnet"],
        ),
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


def test_the_branch_beside_the_critical_path_is_found_with_its_slack():
    t = timeline.compute(_chain_plan(fsx_after_cluster=False))
    (branch,) = t.branches
    assert [s.resource.urn for s in branch.steps] == ["fsx"] and branch.after.urn == "subnet"
    assert branch.finish == pytest.approx(0.4 + 15)


def test_the_storage_branch_runs_beside_the_critical_path_in_prod():
    """FSx (15 min to create) runs beside the cluster; since node groups wait for the add-ons
    (control plane -> add-ons -> node groups), the file system itself has slack and the storage
    branch that leaves the path is its CSI add-on, volumes and layout job, one of the longest
    (the Training Operator's, Volcano -> the operator -> the preview's Role there, ends later)."""
    t = timeline.compute(plan_of("prod"))
    (storage,) = [
        b
        for b in t.branches
        if any(s.resource.type == "aws:eks/addon:Addon" and s.resource.name == "lustre-csi" for s in b.steps)
    ]
    assert 0 < t.total - storage.finish < 2
    (fsx,) = [u for u in t.finish if u.endswith("aws:fsx/lustreFileSystem:LustreFileSystem::lustre")]
    assert 0 < t.total - t.finish[fsx] < 10  # beside the path, not on it


def _timeline_out(capsys, monkeypatch, *args: str) -> str:
    from infra.cli.main import main
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    assert main(["timeline", *args]) == 0
    return capsys.readouterr().out


def test_timeline_json_parses_and_carries_the_critical_path_and_branches(capsys, monkeypatch):
    data = json.loads(_timeline_out(capsys, monkeypatch, "prod", "--json"))
    t = timeline.compute(plan_of("prod"))
    assert [s["name"] for s in data["critical_path"]] == [r.name for r in t.critical_path]
    # JSON rounds every figure to a hundredth (stable output)
    assert data["total_minutes"] == pytest.approx(t.total, abs=0.005) and data["ratio"] == pytest.approx(
        t.ratio, abs=0.005
    )
    assert len(data["branches"]) == len(t.branches) and all(b["slack_minutes"] >= 0 for b in data["branches"])
    assert all(entry["source"] for entry in data["create_minutes"].values())


def test_timeline_is_a_gantt_chart_within_120_columns_and_sources_only_when_verbose(stack, capsys, monkeypatch):
    brief = _timeline_out(capsys, monkeypatch, stack).splitlines()
    verbose = _timeline_out(capsys, monkeypatch, stack, "--verbose").splitlines()
    assert max(map(len, brief + verbose)) <= 120
    assert (
        "Create times (minutes) and their sources:" in verbose
        and "Create times (minutes) and their sources:" not in brief
    )
    (cluster,) = [line for line in brief if line.strip().startswith("Cluster cluster-eks")]
    assert cluster.rstrip().endswith("#" * 30)  # 12 of ~22 minutes drawn as a bar


TASK = re.compile(
    r"^    (?P<name>[^:#;]+?) :(?P<crit>crit, )?t(?P<id>\d+), (?P<start>\d\d:\d\d:\d\d), (?P<end>\d\d:\d\d:\d\d)$"
)


def _seconds(clock: str) -> int:
    h, m, s = map(int, clock.split(":"))
    return 3600 * h + 60 * m + s


def test_timeline_mermaid_is_a_well_formed_gantt_block(capsys, monkeypatch):
    """Mermaid's gantt syntax (mermaid-js/mermaid:docs/syntax/gantt.md@017fc483e742): `gantt`, `dateFormat`,
    `section` lines, and tasks `name :[crit, ]id, start, end` with times in the dateFormat."""
    lines = _timeline_out(capsys, monkeypatch, "prod", "--mermaid").splitlines()
    t = timeline.compute(plan_of("prod"))
    assert lines[0] == "gantt" and "    dateFormat HH:mm:ss" in lines
    sections = [line for line in lines if line.startswith("    section ")]
    assert len(sections) == 1 + len(t.branches)
    tasks = [TASK.match(line) for line in lines[lines.index(sections[0]) :] if not line.startswith("    section ")]
    assert all(tasks), [line for line, m in zip(lines, tasks, strict=False) if not m]
    assert [int(m["id"]) for m in tasks] == list(range(1, len(tasks) + 1))
    assert all(_seconds(m["end"]) > _seconds(m["start"]) for m in tasks)
    assert sum(1 for m in tasks if m["crit"]) == len(t.critical_path)
    assert max(_seconds(m["end"]) for m in tasks) == round(t.total * 60)


def test_timeline_mermaid_is_accepted_by_mermaids_own_parser(capsys, monkeypatch, tmp_path):
    """mermaid-parser-py runs mermaid's parser (mermaid 11) in SpiderMonkey; in a child process,
    as pythonmonkey wants no other threads around it. A syntax error raises there."""
    text = _timeline_out(capsys, monkeypatch, "prod", "--mermaid")
    (tmp_path / "t.mmd").write_text(text)
    (tmp_path / "broken.mmd").write_text("gantt\n    dateFormat HH:mm:ss\n    section A\n    bad line without colon\n")
    # One child for both files (starting SpiderMonkey is most of its time): the graph type of each, or its error.
    script = (
        "import json, sys\nfrom mermaid_parser import MermaidParser\nparser, out = MermaidParser(), []\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n        out.append(parser.parse(open(path).read())['graph_type'])\n"
        "    except Exception as exc:\n        out.append('error: ' + str(exc))\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "t.mmd"), str(tmp_path / "broken.mmd")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ok, broken = json.loads(done.stdout.strip().splitlines()[-1])
    assert ok == "gantt"
    assert broken.startswith("error: ") and "Parse error" in broken

"""The online contract check (.github/workflows/contracts.yml) and what it renders from: the Helm
releases exported from the offline plan. The workflow itself needs the network; here it is linted
(actionlint in tests/delivery/test_workflows.py, zizmor below) and its inputs are checked."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.offline import charts
from tests.conftest import ROOT, plan_of

WORKFLOW = ROOT / ".github" / "workflows" / "contracts.yml"


def _zizmor() -> str | None:
    beside_python = Path(sys.executable).parent / "zizmor"
    return str(beside_python) if beside_python.exists() else shutil.which("zizmor")


def test_export_writes_every_helm_release_with_the_values_the_program_passes(tmp_path):
    plan = plan_of("prod")
    charts.export(plan, tmp_path)
    rows = [line.split("\t") for line in (tmp_path / "releases.tsv").read_text().splitlines()]
    releases = plan.of_type(charts.HELM_RELEASE)
    assert [r[0] for r in rows] == [r.name for r in releases]
    for (name, chart, version, repo, _), release in zip(rows, releases, strict=False):
        assert (chart, version, repo) == (
            release.inputs["chart"],
            release.inputs["version"],
            release.inputs["repositoryOpts"]["repo"],
        )
        assert yaml.safe_load((tmp_path / f"{name}.values.yaml").read_text()) == release.inputs["values"]
    assert (tmp_path / "kubernetes-version").read_text().strip() == plan.config.kubernetes_version


def test_contract_check_runs_on_changes_to_pins_and_components_without_secrets():
    text = WORKFLOW.read_text()
    workflow = yaml.safe_load(text)
    assert {"infra/core/versions.py", "components/**"} <= set(
        workflow[True]["pull_request"]["paths"]
    )  # YAML reads `on` as True
    assert "secrets." not in text
    job = workflow["jobs"]["render"]
    assert job["permissions"] == {"contents": "read"}
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.stacks.outputs.matrix) }}"  # every stack file (stacks.yml)
    commands = " ".join(step.get("run", "") for step in job["steps"])
    assert all(
        tool in commands
        for tool in (
            "higgsfield charts",
            "helm template",
            "kustomize build components/kustomize/training-operator",
            "kubeconform -strict",
        )
    )


def test_contract_check_pins_every_action_to_a_commit():
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["render"]["steps"]
    uses = [s["uses"] for s in steps if "uses" in s]
    assert uses and all(len(u.split("@")[1]) == 40 for u in uses)


@pytest.mark.skipif(_zizmor() is None, reason="zizmor comes with the dev extra on Linux x86_64 only")
def test_contract_check_passes_zizmor():
    done = subprocess.run([_zizmor(), "--offline", str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

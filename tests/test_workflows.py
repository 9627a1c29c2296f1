"""The GitHub workflows: lint clean, offline checks without secrets, previews through OIDC."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _actionlint() -> str | None:
    beside_python = Path(sys.executable).parent / "actionlint"
    return str(beside_python) if beside_python.exists() else shutil.which("actionlint")


@pytest.mark.skipif(_actionlint() is None, reason="actionlint comes with the dev extra on Linux x86_64 only")
def test_workflows_pass_actionlint():
    done = subprocess.run([_actionlint(), *map(str, WORKFLOWS)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _load(name: str) -> dict:
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def test_offline_checks_use_no_secrets_and_run_check_and_diff_for_every_stack():
    text = (ROOT / ".github" / "workflows" / "checks.yml").read_text()
    assert "secrets." not in text
    plan_job = _load("checks.yml")["jobs"]["plan"]
    assert set(plan_job["strategy"]["matrix"]["stack"]) == {p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml")}
    commands = " ".join(step.get("run", "") for step in plan_job["steps"])
    assert "higgsfield check" in commands and "higgsfield diff" in commands


def test_preview_assumes_an_aws_role_through_oidc_with_the_policy_pack():
    workflow = _load("preview.yml")
    assert workflow["permissions"]["id-token"] == "write"
    text = (ROOT / ".github" / "workflows" / "preview.yml").read_text()
    assert "aws-access-key-id" not in text and "AWS_SECRET_ACCESS_KEY" not in text
    pulumi_step = next(s for s in workflow["jobs"]["preview"]["steps"] if s.get("uses", "").startswith("pulumi/actions"))
    assert pulumi_step["with"]["command"] == "preview" and pulumi_step["with"]["policyPacks"] == "policies"
    assert pulumi_step["with"]["comment-on-pr"] is True


def test_push_to_main_deploys_dev_and_gates_the_others_behind_environments():
    jobs = _load("deploy.yml")["jobs"]
    assert jobs["dev"]["environment"] == "dev"
    assert jobs["promote"]["needs"] == "dev"
    assert jobs["promote"]["environment"] == "${{ matrix.stack }}"
    assert {i["stack"] for i in jobs["promote"]["strategy"]["matrix"]["include"]} == {"staging", "prod"}

"""The GitHub workflows, every file under .github/workflows: lint clean (actionlint, zizmor), actions
pinned by commit, no secrets, no pull-request job with a deploy identity, deploy jobs behind
environments, pulumi on the runners inside the VPC, the stack list from stacks/."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.core import versions
from infra.offline.delivery_checks import (
    PULL_REQUEST_EVENTS,
    assumed_roles,
    delivery_findings,
    runs_pulumi,
    workflow_triggers,
)
from infra.offline.stacks import stack_matrix
from tests.conftest import ROOT, STACKS, plan_of

WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.yml"))
PARSED = {p.name: yaml.safe_load(p.read_text()) for p in WORKFLOWS}
JOBS = [(file, name, job) for file, workflow in PARSED.items() for name, job in workflow["jobs"].items()]
# AWS CodeBuild's runner label: `codebuild-<project-name>-${{ github.run_id }}-${{ github.run_attempt }}`
# (docs.aws.amazon.com/codebuild/latest/userguide/sample-github-action-runners-update-labels.html).
CODEBUILD_LABEL = "format('codebuild-{0}-{1}-{2}', matrix.%s, github.run_id, github.run_attempt)"


def _tool(name: str) -> str | None:
    beside_python = Path(sys.executable).parent / name
    return str(beside_python) if beside_python.exists() else shutil.which(name)


@pytest.mark.skipif(_tool("actionlint") is None, reason="actionlint comes with the dev extra on Linux x86_64 only")
def test_workflows_pass_actionlint():
    done = subprocess.run([_tool("actionlint"), *map(str, WORKFLOWS)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(_tool("zizmor") is None, reason="zizmor comes with the dev extra")
def test_workflows_have_no_medium_or_high_zizmor_findings():
    # --offline: no GitHub API (no network here); auditor persona: every audit, not only the defaults.
    done = subprocess.run(
        [_tool("zizmor"), "--offline", "--persona=auditor", "--format=json", str(WORKFLOW_DIR)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = json.loads(done.stdout or "[]")
    serious = [
        (f["ident"], f["determinations"]["severity"], f["locations"][0]["symbolic"]["key"])
        for f in findings
        if f["determinations"]["severity"] in ("Medium", "High")
    ]
    assert done.returncode in (0, 10, 11, 12) and findings is not None, done.stderr  # 10-14: findings of some severity
    assert serious == [], serious


def _uses(job: dict) -> list[tuple[str, str]]:
    """(uses, the line's comment) of a job's steps, or of the job itself (a reusable workflow)."""
    return [(u, "") for u in [job.get("uses")] if u] + [(s["uses"], "") for s in job.get("steps") or [] if "uses" in s]


def test_every_action_is_pinned_to_the_commit_of_its_release_in_versions():
    for path in WORKFLOWS:
        for line in path.read_text().splitlines():
            found = re.match(r"^\s*(?:- )?uses:\s*(\S+)\s*(?:#\s*(\S+))?", line)
            if not found:
                continue
            ref, comment = found.groups()
            if ref.startswith("./"):
                assert (ROOT / ref).is_file(), f"{path.name}: {ref} does not exist"
                continue
            action, _, commit = ref.partition("@")
            pin = versions.GITHUB_ACTIONS.get(action)
            assert pin is not None, f"{path.name}: {action} is not in infra/core/versions.py GITHUB_ACTIONS"
            assert re.fullmatch(r"[0-9a-f]{40}", commit), f"{path.name}: {ref} is not pinned to a full commit SHA"
            assert (commit, comment) == (pin.commit, pin.version), f"{path.name}: {ref} # {comment} differs from {pin}"


def test_no_workflow_reads_a_secret_or_grants_permissions_at_workflow_level():
    for path in WORKFLOWS:
        assert "secrets." not in path.read_text(), path.name
        assert PARSED[path.name].get("permissions") == {}, f"{path.name}: permissions belong on jobs"
    for file, name, job in JOBS:
        assert "permissions" in job, f"{file} jobs.{name} has no job-level permissions"


def test_no_pull_request_job_can_assume_a_deploy_identity():
    preview_roles = {e["previewRole"] for e in stack_matrix(ROOT, True)["include"]}
    checked = 0
    for file, name, job in JOBS:
        if not workflow_triggers(PARSED[file]) & PULL_REQUEST_EVENTS:
            continue
        assert "environment" not in job, f"{file} jobs.{name}: a pull-request job runs in no GitHub environment"
        for role in assumed_roles(job):
            checked += 1
            assert role.replace(" ", "") == "${{matrix.previewRole}}", f"{file} jobs.{name} assumes {role}"
    assert checked, "no pull-request job assumes a role: the preview is gone?"
    # ...and every role the matrix calls a preview role is one the plan trusts for pull requests only.
    for stack in STACKS:
        for r in plan_of(stack).resources:
            if (
                r.type == "aws:iam/role:Role"
                and f"arn:aws:iam::{_account(stack)}:role/{r.inputs.get('name')}" in preview_roles
            ):
                assert _subjects(r) == [
                    f"repo:{_repository(stack)}:pull_request:job_workflow_ref:{_repository(stack)}/.github/workflows/preview.yml@refs/pull/*/merge"
                ]


def test_every_job_that_assumes_a_deploy_role_runs_in_the_stacks_environment_on_main_only():
    deploy_jobs = [(f, n, j) for f, n, j in JOBS if any("deployRole" in r for r in assumed_roles(j))]
    assert deploy_jobs
    for file, name, job in deploy_jobs:
        assert job.get("environment") == "${{ matrix.deployEnvironment }}", f"{file} jobs.{name}"
        assert not workflow_triggers(PARSED[file]) & PULL_REQUEST_EVENTS, file
    for file, name, job in JOBS:  # every job that changes a stack is a deploy job
        if any(
            s.get("with", {}).get("command") in ("up", "destroy", "refresh")
            for s in job.get("steps") or []
            if "pulumi/actions" in s.get("uses", "")
        ):
            assert "environment" in job and (file, name, job) in deploy_jobs, (
                f"{file} jobs.{name} changes a stack outside a deploy job"
            )


def test_every_pulumi_job_runs_on_the_stacks_codebuild_runner_of_its_kind():
    pulumi_jobs = [(f, n, j) for f, n, j in JOBS if runs_pulumi(j)]
    assert {f for f, _, _ in pulumi_jobs} >= {"preview.yml", "deploy.yml"}
    for file, name, job in pulumi_jobs:
        kind = "deployRunner" if any("deployRole" in r for r in assumed_roles(job)) else "previewRunner"
        assert CODEBUILD_LABEL % kind in job["runs-on"], f"{file} jobs.{name} runs on {job['runs-on']}"
    assert (
        "deployRunner" in PARSED["deploy.yml"]["jobs"]["deploy"]["runs-on"]
        and "previewRunner" in PARSED["preview.yml"]["jobs"]["preview"]["runs-on"]
    )


def test_check_names_the_job_when_a_pull_request_job_asks_for_the_deploy_runner():
    changed = copy.deepcopy(PARSED)
    changed["preview.yml"]["jobs"]["preview"]["runs-on"] = PARSED["deploy.yml"]["jobs"]["deploy"]["runs-on"]
    found = delivery_findings(plan_of("prod").config, changed)
    assert ".github/workflows/preview.yml jobs.preview" in [w for w, _ in found] and any(
        "deploy runner" in m for _, m in found
    ), found


def test_check_names_the_workflow_when_a_pull_request_workflow_is_named_deploy():
    """A PR (a fork's included) that adds a workflow named `deploy` triggered by pull_request:
    the deploy webhook's WORKFLOW_NAME filter would match it; check names the file."""
    changed = copy.deepcopy(PARSED)
    changed["fork.yml"] = {
        "name": "deploy",
        True: {"pull_request": None},
        "permissions": {},
        "jobs": {
            "steal": {
                "runs-on": "codebuild-higgsfield-prod-deploy-runner-1-1",
                "permissions": {},
                "steps": [{"run": "env"}],
            }
        },
    }
    found = delivery_findings(plan_of("prod").config, changed)
    assert [w for w, _ in found] == [".github/workflows/fork.yml jobs.steal", ".github/workflows/fork.yml"], found


def test_shipped_stacks_have_no_ci_findings():
    for stack in STACKS:
        assert delivery_findings(plan_of(stack).config, PARSED) == [], stack


def test_check_names_the_job_when_a_pull_request_job_assumes_the_deploy_role():
    changed = copy.deepcopy(PARSED)
    changed["preview.yml"]["jobs"]["preview"]["steps"][3]["with"]["role-to-assume"] = "${{ matrix.deployRole }}"
    found = delivery_findings(plan_of("prod").config, changed)
    assert {w for w, _ in found} == {".github/workflows/preview.yml jobs.preview"} and any(
        "may assume only the preview role" in m for _, m in found
    ), found


def test_check_names_the_setting_when_a_pull_request_job_runs_in_the_deploy_environment():
    changed = copy.deepcopy(PARSED)
    changed["preview.yml"]["jobs"]["preview"]["environment"] = "prod"
    assert [w for w, _ in delivery_findings(plan_of("prod").config, changed)] == [
        "higgsfield:delivery.deployEnvironment"
    ]


def test_check_names_the_setting_when_a_private_stack_deploys_without_the_runner():
    from infra.offline.evaluate import record

    settings = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())["config"]["higgsfield:delivery"]
    config = record(
        "prod", root=ROOT, overrides={"higgsfield:delivery": {**settings, "runner": {"enabled": False}}}
    ).config
    found = delivery_findings(config, PARSED)
    assert ("higgsfield:delivery.runner.enabled" in [w for w, _ in found]) and any(
        "matrix.runner" not in m and "private endpoint" in m for _, m in found
    ), found


def test_adding_a_stack_file_changes_the_matrix_without_editing_a_workflow(tmp_path):
    (tmp_path / "stacks").mkdir()
    for path in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        shutil.copy(path, tmp_path / "stacks" / path.name)
    config = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    config["config"]["aws:region"] = "eu-west-1"
    (tmp_path / "stacks" / "Pulumi.research.yaml").write_text(yaml.safe_dump(config))
    before, after = stack_matrix(ROOT)["include"], stack_matrix(tmp_path)["include"]
    added = [e for e in after if e not in before]
    assert [
        (e["stack"], e["region"], e["deployEnvironment"], e["previewRunner"], e["deployRunner"]) for e in added
    ] == [
        ("research", "eu-west-1", "research", "higgsfield-research-preview-runner", "higgsfield-research-deploy-runner")
    ]
    # The workflows take the matrix from stacks.yml (`higgsfield stacks`) and name no stack or region.
    for path in WORKFLOWS:
        text = "\n".join(line.split("#")[0] for line in path.read_text().splitlines()).replace(
            ".[dev]", ""
        )  # not comments, not the extra
        for entry in before:
            assert not re.search(rf"(?<![/\w-])({entry['stack']}|{entry['region']})(?![\w-])", text), (
                f"{path.name} names {entry['stack']}/{entry['region']}"
            )
    for file, name, job in JOBS:
        if "strategy" in job:
            assert job["strategy"]["matrix"] == "${{ fromJSON(needs.stacks.outputs.matrix) }}", f"{file} jobs.{name}"
            assert PARSED[file]["jobs"]["stacks"]["uses"] == "./.github/workflows/stacks.yml"


def test_no_other_workflow_can_cancel_a_deploy_through_its_concurrency_group():
    """Concurrency groups are repository-wide: a pull request's workflow naming the deploy's group with
    cancel-in-progress: true cancelled a running `pulumi up` (issue 34). The deploy holds no group, at
    workflow or job level, so no run can join one and cancel it."""
    for name in ("deploy.yml", "image.yml"):  # and the image the deploy's nodes pull
        workflow = PARSED[name]
        assert "concurrency" not in workflow, name
        assert all("concurrency" not in job for job in workflow["jobs"].values()), name


def test_deploys_run_one_stack_at_a_time_dev_first_prod_last():
    job = PARSED["deploy.yml"]["jobs"]["deploy"]
    assert job["strategy"]["max-parallel"] == 1 and job["strategy"]["fail-fast"] is True
    order = [e["environment"] for e in stack_matrix(ROOT, True)["include"]]
    assert order == sorted(order, key=["dev", "staging", "prod"].index) and order[0] == "dev" and order[-1] == "prod"


def test_offline_checks_run_plan_check_and_diff_for_every_stack():
    commands = " ".join(step.get("run", "") for step in PARSED["checks.yml"]["jobs"]["plan"]["steps"])
    assert "higgsfield check" in commands and "higgsfield diff" in commands
    assert [e["stack"] for e in stack_matrix(ROOT)["include"]] and {
        e["stack"] for e in stack_matrix(ROOT)["include"]
    } == set(STACKS)


def test_stacks_module_runs_with_pyyaml_alone():
    """The stacks job runs `python -m infra.offline.stacks` with only PyYAML installed."""
    code = (
        "import sys, runpy; sys.argv=['stacks', '--delivered']; sys.modules['pulumi'] = None; "
        "sys.modules['pydantic'] = None; runpy.run_module('infra.offline.stacks', run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == stack_matrix(ROOT, True)


def _account(stack: str) -> str:
    return plan_of(stack).config.delivery.account_id


def _repository(stack: str) -> str:
    return plan_of(stack).config.delivery.repository


def _subjects(role) -> list[str]:
    statement = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
    return [
        values["token.actions.githubusercontent.com:sub"]
        for values in statement["Condition"].values()
        if "token.actions.githubusercontent.com:sub" in values
    ]


def test_the_placeholder_repository_is_flagged_by_check_and_first_in_bootstrap():
    """The shipped stacks name your-org/higgsfield; the CI roles trust whatever repository is named."""
    from infra.cli import bootstrap
    from infra.offline import check
    from tests.conftest import ROOT, plan_of

    plan = plan_of("dev")
    (finding,) = [f for f in check.ci_delivery(plan, ROOT) if "placeholder" in f.message]
    assert finding.level == "advisory" and finding.message.startswith(
        "higgsfield:delivery.repository: your-org/higgsfield"
    )
    assert bootstrap.steps(plan.config)[0].startswith(
        "Repository: higgsfield:delivery.repository is still the placeholder"
    )
    own = plan.config.model_copy(
        update={"delivery": plan.config.delivery.model_copy(update={"repository": "acme/ml-platform"})}
    )
    assert not bootstrap.steps(own)[0].startswith("Repository:")


def _deploy_steps() -> list[dict]:
    return PARSED["deploy.yml"]["jobs"]["deploy"]["steps"]


def test_every_deploy_is_verified_read_only_after_pulumi_up():
    """docs/verify.md: the deploy job runs `higgsfield verify STACK` on the cluster it just updated,
    never the checks that create or cost (--allow-cost), nor the administrator's bootstrap."""
    steps = _deploy_steps()
    up = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("pulumi/actions@"))
    (verify_at,) = [i for i, s in enumerate(steps) if "higgsfield verify" in s.get("run", "")]
    run = steps[verify_at]["run"]
    assert verify_at > up and '.venv/bin/higgsfield verify "$STACK"' in run and "--allow-cost" not in run
    assert steps[verify_at]["env"]["STACK"] == "${{ matrix.stack }}"
    # the kubeconfig of the stack's own cluster (infra/core/names.py cluster_name), read by verify
    assert 'aws eks update-kubeconfig --name "higgsfield-$STACK"' in run and "KUBECONFIG=" in run


def test_the_deploy_role_may_make_every_call_verify_makes():
    """Every service of verify's read-only checks is one the deploy role acts in: everywhere (DEPLOY_SERVICES), or on
    the stack's named resources, which are what verify reads (SCOPED_SERVICES: Karpenter's queue)."""
    from components.delivery import DEPLOY_SERVICES, SCOPED_SERVICES
    from infra.cli.verify.checks import specs

    run = next(s["run"] for s in _deploy_steps() if "higgsfield verify" in s.get("run", ""))
    left_out = set(re.findall(r"--skip (\S+)", run))
    actions = {
        a
        for s in specs()
        if not s.costs and not s.manual and s.id not in left_out
        for a in re.findall(r"\b([a-z-]+):[A-Z]\w+", s.rights)
    }
    reached = set(DEPLOY_SERVICES) | set(SCOPED_SERVICES)
    assert actions and actions <= reached, actions - reached

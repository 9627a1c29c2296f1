"""A project of one's own: a wheel built from a copy of the repository WITHOUT git, installed into a
virtualenv, then `higgsfield init NAME --region R --admin ARN` in an empty folder makes a complete
project in which every stack command works, with no git on PATH.

The wheel is installed with --no-deps; its dependencies come from this interpreter's site-packages
(a .pth line), so the whole module takes seconds, not the minute of a full resolve
(tests/cli/test_fresh_install.py does that one, with every dependency from the index)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from components.registry import image_tag
from tests.cli.installed_commands import run_commands
from tests.conftest import ROOT

ADMIN = "arn:aws:iam::123456789012:role/PlatformAdmin"

COMMANDS = {
    "plan": ["plan", "paris"],
    "check": ["check", "paris"],
    "cost": ["cost", "paris"],
    "timeline": ["timeline", "paris"],
    "bootstrap": ["bootstrap", "paris"],
    "jobs": ["jobs", "render", "paris", "pytorch-ddp"],
    "healthcheck": ["healthcheck", "render", "paris", "l40s"],
    "image": ["image", "push", "paris", "--print"],
    "stacks": ["stacks"],
    "schema": ["schema"],
    "second-init": ["init", "oslo", "--region", "eu-north-1", "--from", "paris", "--admin", ADMIN],
    "shipped-base": ["init", "bergen", "--region", "eu-north-1", "--from", "prod", "--admin", ADMIN],
    "types": ["types", "eu-north-1"],
}


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, argv))}: {done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def own_project(tmp_path_factory):
    """(the project folder, init's output, {command: [exit code, stdout, stderr]})."""
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(uv).exists():
        pytest.skip("uv is not installed (the dev extra installs it)")
    tmp = tmp_path_factory.mktemp("own")
    copy = tmp / "higgsfield-src"  # a release tarball or a zip download: no .git
    shutil.copytree(
        ROOT,
        copy,
        ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "build", "dist", "*.egg-info", ".*_cache"),
    )
    _run([uv, "build", "--wheel", "--quiet", "--out-dir", str(tmp / "wheels"), str(copy)], timeout=300)
    venv = tmp / "venv"
    _run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], timeout=120)
    site = Path(
        _run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # after the wheel's own
    wheel = next((tmp / "wheels").glob("higgsfield-*.whl"))
    _run(
        [uv, "pip", "install", "--quiet", "--no-deps", "--python", str(venv / "bin" / "python"), str(wheel)],
        timeout=300,
    )
    home, project = tmp / "home", tmp / "paris"
    home.mkdir()
    project.mkdir()  # empty
    env = {
        "PATH": str(venv / "bin"),  # no git, no docker, no aws
        "HOME": str(home),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(home / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    init = _run(
        [str(venv / "bin" / "higgsfield"), "init", "paris", "--region", "eu-north-1", "--admin", ADMIN],
        cwd=project,
        env=env,
        timeout=300,
    )
    outside, with_ci = tmp / "elsewhere", tmp / "with-ci"
    outside.mkdir()
    with_ci.mkdir()
    commands = {
        **{name: (project, argv) for name, argv in COMMANDS.items()},
        "diff": (project, ["diff", "paris", "--base", "main"]),
        "outside": (outside, ["plan", "paris"]),
        "init-ci": (with_ci, ["init", "paris", "--region", "eu-north-1", "--admin", ADMIN, "--ci"]),
    }
    done = run_commands(venv, env, commands)
    assert done["init-ci"][0] == 0, done["init-ci"][2]
    done["ci-files"] = sorted(str(p.relative_to(with_ci)) for p in with_ci.rglob("*.yml")) + sorted(
        str(p.relative_to(with_ci)) for p in (with_ci / "requirements").glob("*.txt")
    )
    return project, init.stdout, done, venv


def test_init_in_an_empty_folder_makes_a_complete_project(own_project):
    project, said, _, venv = own_project
    files = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert files == [
        "Pulumi.yaml",
        "__main__.py",
        "policies/PulumiPolicy.yaml",
        "policies/__main__.py",
        "policies/config/bergen.json",
        "policies/config/oslo.json",
        "policies/config/paris.json",
        "schemas/job.schema.json",
        "schemas/stack.schema.json",
        "stacks/Pulumi.bergen.yaml",
        "stacks/Pulumi.oslo.yaml",
        "stacks/Pulumi.paris.yaml",
    ]
    assert said.startswith(f"new project in {project}: Pulumi.yaml")


def test_init_ci_from_the_wheel_writes_the_workflows_and_requirements_it_ships(own_project):
    assert own_project[2]["ci-files"] == [
        ".github/workflows/deploy.yml",
        ".github/workflows/preview.yml",
        ".github/workflows/stacks.yml",
        "requirements/deploy.txt",
        "requirements/higgsfield.txt",
        "requirements/stacks.txt",
    ]


def test_the_projects_program_and_policy_pack_are_the_installed_packages(own_project):
    import yaml

    project, _, _, venv = own_project
    pulumi_yaml = yaml.safe_load((project / "Pulumi.yaml").read_text())
    assert "main" not in pulumi_yaml and pulumi_yaml["stackConfigDir"] == "stacks"  # its __main__.py runs
    # the package's virtualenv is outside the project: no path of this machine in a committed file
    assert (
        "virtualenv" not in pulumi_yaml["runtime"]["options"] and str(venv) not in (project / "Pulumi.yaml").read_text()
    )
    assert 'runpy.run_module("infra", run_name="__main__"' in (project / "__main__.py").read_text()
    assert 'runpy.run_module("policies", run_name="__main__"' in (project / "policies" / "__main__.py").read_text()
    policy = yaml.safe_load((project / "policies" / "PulumiPolicy.yaml").read_text())
    assert "virtualenv" not in policy["runtime"]["options"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_works_in_the_project_without_git(own_project, command):
    code, out, err = own_project[2][command]
    assert code == 0, f"{command}: {err}"
    assert out


def test_the_image_tag_from_the_wheel_is_the_checkouts_content_hash(own_project):
    out = own_project[2]["image"][1]
    assert f":{image_tag()} " in out and "/site-packages/infra/shipped/images/training" in out


def test_a_stack_command_outside_any_project_says_init_makes_one(own_project):
    code, _, err = own_project[2]["outside"]
    assert code == 2 and err.count("\n") == 1
    assert "no Pulumi.yaml in" in err and "`higgsfield init STACK --region REGION --admin ARN` makes one here" in err


def test_init_in_the_project_starts_from_a_shipped_stack_the_project_lacks(own_project):
    code, out, err = own_project[2]["shipped-base"]
    assert code == 0 and "wrote stacks/Pulumi.bergen.yaml (from prod, region eu-north-1)" in out


def test_diff_without_git_says_it_needs_git_in_one_line(own_project):
    code, _, err = own_project[2]["diff"]
    assert code == 2 and err.count("\n") == 1 and "git is not on PATH" in err

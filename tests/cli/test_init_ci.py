"""`higgsfield init --ci`: a project of one's own gets this repository's preview and deploy workflows,
adapted only where the program comes from (the installed package, requirements/higgsfield.txt), with
every file they name present in the new project, and the editor's JSON Schemas the stack files name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from infra.cli import init_ci
from infra.cli.main import main
from infra.cli.schema import schema_text
from tests.conftest import ROOT

ADMIN = ["--admin", "arn:aws:iam::123456789012:role/PlatformAdmin"]


@pytest.fixture(scope="module")
def ci_project(tmp_path_factory) -> Path:
    """An empty folder after `higgsfield init paris --region eu-north-1 --ci`."""
    folder = tmp_path_factory.mktemp("ci")
    cwd = Path.cwd()
    try:
        import os

        os.chdir(folder)
        assert main(["init", "paris", "--region", "eu-north-1", *ADMIN, "--ci"]) == 0
    finally:
        os.chdir(cwd)
    return folder


def _workflows(project: Path) -> dict[str, dict]:
    return {p.name: yaml.safe_load(p.read_text()) for p in (project / ".github" / "workflows").glob("*.yml")}


def test_init_ci_writes_the_preview_and_deploy_workflows_as_yaml(ci_project):
    found = _workflows(ci_project)
    assert sorted(found) == ["deploy.yml", "preview.yml", "stacks.yml"]
    assert all(isinstance(doc, dict) and doc.get("jobs") for doc in found.values())


def test_every_file_the_workflows_name_exists_in_the_new_project(ci_project):
    stacks = [p.name[len("Pulumi.") : -len(".yaml")] for p in (ci_project / "stacks").glob("Pulumi.*.yaml")]
    for path in (ci_project / ".github" / "workflows").glob("*.yml"):
        text = path.read_text()
        named = re.findall(r"uses: (\./\S+)", text) + re.findall(r"-r (requirements/\S+)", text)
        for name in named:
            assert (ci_project / name).is_file(), f"{path.name} names {name}"
        for pack in re.findall(r"policyPacks: (\S+)", text):
            assert (ci_project / pack / "PulumiPolicy.yaml").is_file() and (ci_project / pack / "__main__.py").is_file()
        for config in re.findall(r"policyPackConfigs: (.+)$", text, re.M):
            for stack in stacks:
                assert (ci_project / config.replace("${{ matrix.stack }}", stack)).is_file()


def _steps(doc: dict, job: str) -> list[dict]:
    return doc["jobs"][job]["steps"]


def test_the_deploy_workflow_runs_the_repositorys_commands_but_installs_the_package(ci_project):
    own, repo = _workflows(ci_project), _workflows(ROOT)
    for name, job in (("deploy.yml", "deploy"), ("preview.yml", "preview")):
        ours, theirs = _steps(own[name], job), _steps(repo[name], job)
        assert len(ours) == len(theirs)
        for step, original in zip(ours, theirs, strict=True):
            if "run" in original and "-e ." in original["run"]:
                assert step["run"] == original["run"].replace(
                    "--no-build-isolation --no-index -e .", "-r requirements/higgsfield.txt"
                )
            else:
                assert step == original
        assert {k: v for k, v in own[name].items() if k != "jobs"} == {
            k: v for k, v in repo[name].items() if k != "jobs"
        }


def test_the_projects_runtime_is_the_virtualenv_the_workflows_make(ci_project):
    assert yaml.safe_load((ci_project / "Pulumi.yaml").read_text())["runtime"]["options"]["virtualenv"] == ".venv"
    policy = yaml.safe_load((ci_project / "policies" / "PulumiPolicy.yaml").read_text())
    assert policy["runtime"]["options"]["virtualenv"] == "../.venv"
    assert re.search(r"^higgsfield\b", (ci_project / "requirements" / "higgsfield.txt").read_text(), re.M)


def test_the_schema_the_stack_files_name_for_an_editor_is_written(ci_project):
    stack = (ci_project / "stacks" / "Pulumi.paris.yaml").read_text()
    target = re.search(r"\$schema=(\S+)", stack)[1]
    assert (ci_project / "stacks" / target).resolve().read_text() == schema_text()


def test_a_vcs_install_is_pinned_at_its_commit(monkeypatch):
    class Dist:
        def read_text(self, name):
            url = {"url": "https://github.com/acme/higgsfield", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}
            return json.dumps(url)

    monkeypatch.setattr(init_ci.metadata, "distribution", lambda name: Dist())
    assert init_ci.package_requirement() == ("higgsfield @ git+https://github.com/acme/higgsfield@abc123", True)


def test_init_ci_in_a_checkout_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["init", "x", "--region", "eu-north-1", *ADMIN, "--ci"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ci: this is a checkout of higgsfield" in err
    assert not (ROOT / "stacks" / "Pulumi.x.yaml").exists()


def test_init_ci_in_a_project_run_from_elsewhere_is_refused_naming_the_virtualenv(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init", "paris", "--region", "eu-north-1", *ADMIN]) == 0
    capsys.readouterr()
    assert main(["init", "oslo", "--region", "eu-north-1", "--from", "paris", *ADMIN, "--ci"]) == 2
    assert "runtime.options.virtualenv" in capsys.readouterr().err
    assert not (tmp_path / ".github").exists() and not (tmp_path / "stacks" / "Pulumi.oslo.yaml").exists()


def test_a_second_init_ci_keeps_the_projects_files(ci_project, monkeypatch, capsys):
    monkeypatch.chdir(ci_project)
    (ci_project / "requirements" / "higgsfield.txt").write_text("higgsfield @ git+https://example.com/h@v1\n")
    assert main(["init", "oslo", "--region", "eu-north-1", "--from", "paris", *ADMIN, "--ci", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["ci_files"] == [] and any("kept requirements/higgsfield.txt" in n for n in said["notes"])
    assert (ci_project / "requirements" / "higgsfield.txt").read_text() == "higgsfield @ git+https://example.com/h@v1\n"


def test_init_ci_from_a_local_install_never_names_the_unrelated_pypi_package(monkeypatch):
    """`higgsfield` on PyPI is someone else's: a local install gets a placeholder that fails loudly."""

    def not_installed(name):
        raise init_ci.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(init_ci.metadata, "distribution", not_installed)
    files, notes = init_ci.ci_files()
    text = files["requirements/higgsfield.txt"]
    requirement = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert requirement == ["higgsfield @ git+https://github.com/OWNER/higgsfield@TAG"]
    assert "not on PyPI" in text and "unrelated package" in text
    assert any("replace OWNER and TAG" in note for note in notes)

"""What the preview and deploy jobs install: the runtime dependencies only, each wheel by its
sha256 (requirements/deploy.txt), and the Pulumi CLI at one exact version."""

from __future__ import annotations

import re
import tomllib

import yaml

from infra.core import versions
from tests.conftest import ROOT

LOCK = (ROOT / versions.DEPLOY_LOCK).read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
WORKFLOWS = {
    name: yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text()) for name in ("deploy.yml", "preview.yml")
}
JOBS = {"deploy.yml": "deploy", "preview.yml": "preview"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-").replace(".", "-")


def _pins() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of every entry of the lock."""
    pins = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", LOCK):
        found = re.match(r"([A-Za-z0-9._-]+)==(\S+)", block)
        if found:
            pins[found.group(1).lower().replace("_", "-").replace(".", "-")] = (
                found.group(2),
                re.findall(r"--hash=sha256:([0-9a-f]{64})", block),
            )
    return pins


def _run_steps(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_preview_and_deploy_install_the_lock_with_hashes_required_and_nothing_else():
    for file, job_name in JOBS.items():
        commands = [
            line.strip() for line in _run_steps(WORKFLOWS[file]["jobs"][job_name]).splitlines() if "pip install" in line
        ]
        assert commands == [
            f".venv/bin/pip install --require-hashes --no-deps --only-binary :all: -r {versions.DEPLOY_LOCK}",
            ".venv/bin/pip install --no-deps --no-build-isolation --no-index -e .",
        ], (file, commands)


def test_no_dev_extra_reaches_a_job_that_holds_an_aws_identity():
    for file, job_name in JOBS.items():
        assert "[dev]" not in _run_steps(WORKFLOWS[file]["jobs"][job_name]), file


def test_the_lock_pins_every_runtime_dependency_with_hashes():
    pins = _pins()
    for requirement in PYPROJECT["project"]["dependencies"]:
        assert _name(requirement) in pins, requirement
    assert all(hashes for _, hashes in pins.values()), [n for n, (_, h) in pins.items() if not h]
    # The project's build backend too: the editable install builds without isolation, offline.
    assert "setuptools" in pins


def test_the_lock_holds_no_test_or_lint_tool():
    pins = _pins()
    dev_only = {_name(r) for r in PYPROJECT["project"]["optional-dependencies"]["dev"]} - {
        "moto",
        "jsonschema",
    }  # moto, jsonschema: runtime too
    assert not dev_only & set(pins), dev_only & set(pins)


def test_the_pulumi_cli_is_pinned_exactly_to_the_locked_sdk():
    assert re.fullmatch(r"\d+\.\d+\.\d+", versions.PULUMI_CLI)
    assert _pins()["pulumi"][0] == versions.PULUMI_CLI
    for file, job_name in JOBS.items():
        (step,) = [
            s for s in WORKFLOWS[file]["jobs"][job_name]["steps"] if str(s.get("uses", "")).startswith("pulumi/actions")
        ]
        assert str(step["with"]["pulumi-version"]) == versions.PULUMI_CLI, file


def test_the_lock_says_how_it_was_made():
    assert "uv pip compile pyproject.toml --generate-hashes --python-version 3.11" in LOCK.splitlines()[1]

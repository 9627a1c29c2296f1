"""Every install path a user may take runs every command: a wheel (what `pip install .` and
`pipx install` install) in a fresh virtualenv, used from a project folder that is not this
checkout (so the example jobs and the node check must come from inside the package), then the
same virtualenv switched to an editable install (`pip install -e .`) of this checkout.

One test, in a virtualenv of its own with no extras: everything the offline commands need must be
a runtime dependency. It resolves and installs with uv (the same wheel metadata pip reads; seconds
with a warm cache instead of a minute), falling back to pip where uv is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.installed_commands import run_commands
from tests.conftest import ROOT


def _installer(venv: Path, wheels: Path) -> list[list[str]]:
    """Commands that build the wheel into `wheels`, make `venv` and install into it: uv when it is
    there (the same PEP 517 build with setuptools as pip's), else pip and venv."""
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if Path(uv).exists():
        return [
            [uv, "build", "--wheel", "--quiet", "--out-dir", str(wheels), str(ROOT)],
            [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")],
        ]
    return [
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(ROOT)],
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"],
    ]


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr[-3000:]}"
    return done


def _project_outside_the_checkout(folder: Path) -> Path:
    """What a user's own project may hold: Pulumi.yaml, the stack files and their policy config, and
    a copy of the training image's sources (the image's tag is their content hash, no git needed)."""
    folder.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", folder / "Pulumi.yaml")
    shutil.copytree(ROOT / "stacks", folder / "stacks")
    shutil.copytree(ROOT / "policies" / "config", folder / "policies" / "config")
    shutil.copytree(ROOT / "images" / "training", folder / "images" / "training")
    return folder


@pytest.mark.fresh_install
@pytest.mark.timeout(900)
def test_a_wheel_outside_any_checkout_and_an_editable_install_run_every_command(tmp_path):
    build, make_venv, install = _installer(venv := tmp_path / "venv", wheels := tmp_path / "wheels")
    _run(build, timeout=300)
    _run(make_venv, timeout=120)
    _run([*install, str(next(wheels.glob("higgsfield-*.whl")))], timeout=800)
    home = tmp_path / "home"
    home.mkdir()
    # No credentials anywhere: no environment keys, no ~/.aws, no instance metadata.
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(home / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }

    def higgsfield(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(venv / "bin" / "higgsfield"), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )

    project = _project_outside_the_checkout(tmp_path / "project")
    commands = {
        "check": ("check", "dev"),
        "cost": ("cost", "dev"),
        "timeline": ("timeline", "dev"),
        "jobs": ("jobs", "render", "dev", "pytorch-ddp"),
        "healthcheck": ("healthcheck", "render", "dev", "l40s"),
        "bootstrap": ("bootstrap", "staging"),
        "stacks": ("stacks",),
        "schema": ("schema",),
        "init": (
            "init",
            "eu",
            "--region",
            "eu-north-1",
            "--from",
            "dev",
            "--admin",
            "arn:aws:iam::123456789012:role/PlatformAdmin",
        ),
        "preflight": ("preflight", "dev"),
    }
    plan = higgsfield(
        project, "plan", "dev"
    )  # the console script itself (and the first run compiles the venv's modules)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.startswith("Offline plan of higgsfield/dev")
    done = run_commands(venv, env, {name: (project, list(argv)) for name, argv in commands.items()})
    preflight = done.pop("preflight")
    for name, (code, _, stderr) in done.items():
        assert code == 0, f"{name}: {stderr}"
    assert "kind: PyTorchJob" in done["jobs"][1] and "node_check.py" in done["healthcheck"][1]
    assert (project / "stacks" / "Pulumi.eu.yaml").is_file()
    assert preflight[:2] == [2, ""]
    assert preflight[2].startswith("error: no AWS credentials") and preflight[2].count("\n") == 1, preflight[2]

    _run([*install, "--no-deps", "-e", str(ROOT)], timeout=300)  # the same virtualenv, now editable
    editable = run_commands(
        venv, env, {"plan": (ROOT, ["plan", "dev"]), "jobs": (ROOT, ["jobs", "render", "dev", "pytorch-ddp"])}
    )
    for name, (code, _, stderr) in editable.items():
        assert code == 0, f"editable {name}: {stderr}"
    # The virtualenv (some 33,000 files, 500 MB) goes now, while the other workers run their tests, rather than
    # when pytest removes this run's base temporary folder three runs later: at the end of that run, in the time
    # its summary line reports, with no test beside it (_pytest/tmpdir.py pytest_sessionfinish). A failed install
    # keeps it to look into.
    shutil.rmtree(venv, ignore_errors=True)

"""`pip install -e .` with no extras gives a working CLI: everything the offline commands need is
a runtime dependency. One test, in a virtualenv of its own (about a minute with a warm pip
cache); CI runs it with the rest (.ci/run)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.fresh_install
@pytest.mark.timeout(900)
def test_a_fresh_install_without_extras_plans_renders_jobs_and_preflights_in_one_line(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-e", str(ROOT)],
                             capture_output=True, text=True, timeout=800)
    assert install.returncode == 0, install.stderr[-3000:]
    home = tmp_path / "home"
    home.mkdir()
    # No credentials anywhere: no environment keys, no ~/.aws, no instance metadata.
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home), "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_CONFIG_FILE": str(home / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"), "LANG": os.environ.get("LANG", "C.UTF-8")}

    def higgsfield(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "higgsfield"), *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    plan = higgsfield("plan", "dev")
    assert plan.returncode == 0 and plan.stdout.startswith("Offline plan of higgsfield/dev"), plan.stderr
    job = higgsfield("jobs", "render", "dev", "pytorch-ddp")
    assert job.returncode == 0 and "kind: PyTorchJob" in job.stdout, job.stderr
    preflight = higgsfield("preflight", "dev")
    assert preflight.returncode == 2 and preflight.stdout == ""
    assert preflight.stderr.startswith("error: no AWS credentials") and preflight.stderr.count("\n") == 1, preflight.stderr

"""The folder of rewritten test modules that tests/conftest.py makes in the temp directory (HIGGSFIELD_REWRITTEN_TESTS)
goes with the process that made it, however that process ends: one left behind per run fills /tmp of a long-lived
machine or CI runner. Each test runs a fresh Python with its own TMPDIR and without the inherited variable, as a
run of its own would start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def _run(tmp_path: Path, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "HIGGSFIELD_REWRITTEN_TESTS"}
    env.update(TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, timeout=120, check=False)
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("higgsfield-rewritten-"))


def test_a_script_that_imports_the_test_helpers_leaves_no_rewritten_folder(tmp_path):
    """Helpers import tests.conftest (config_of, plan_of) outside pytest, where no pytest_unconfigure runs."""
    assert _run(tmp_path, "-c", "import tests.conftest") == []


def test_a_pytest_run_that_stops_at_its_arguments_leaves_no_rewritten_folder(tmp_path):
    """`pytest -p no:xdist` stops at pyproject's `--dist=worksteal` (usage error) after loading the conftest."""
    assert _run(tmp_path, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "tests/core/__init__.py") == []

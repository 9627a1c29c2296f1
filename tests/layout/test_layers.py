"""The layers a newcomer reads from the folders, held by import-linter's contracts in pyproject.toml:
infra/core (imports nothing of ours) < infra/config < components | policies < infra/__main__.py
< infra/offline < infra/cli. A module importing from a layer above its own fails here."""

from __future__ import annotations

import os
import tomllib

from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONTRACTS = PYPROJECT["tool"]["importlinter"]["contracts"]


def _layers() -> list[str]:
    (layers,) = [c["layers"] for c in CONTRACTS if c["type"] == "layers"]
    return [name.strip() for layer in layers for name in layer.split("|")]


def test_no_import_runs_up_a_layer(capsys):
    from importlinter.cli import lint_imports

    here = os.getcwd()
    os.chdir(ROOT)
    try:
        code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    finally:
        os.chdir(here)
    assert code == 0, capsys.readouterr().out


def test_every_package_of_the_project_sits_in_a_layer():
    packages = {p.name for p in (ROOT / "infra").iterdir() if (p / "__init__.py").is_file()} - {"shipped"}
    layered = {name.removeprefix("infra.") for name in _layers() if name.startswith("infra.")}
    assert packages <= layered, (
        f"put infra/{sorted(packages - layered)} in a layer of pyproject.toml [tool.importlinter]"
    )
    assert {"components", "policies", "infra.__main__"} <= set(_layers())


def test_the_bottom_layer_is_the_core_and_the_top_the_command_line():
    assert _layers()[0] == "infra.cli" and _layers()[-1] == "infra.core"

"""Shared fixtures: the recorded offline plan of every shipped stack, and stack variants."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.offline import Plan, record, stack_names

ROOT = Path(__file__).resolve().parent.parent
STACKS = stack_names(ROOT)
_plans: dict[str, Plan] = {}


def plan_of(stack: str) -> Plan:
    """The recorded plan of a shipped stack (evaluated once per test session)."""
    if stack not in _plans:
        _plans[stack] = record(stack, root=ROOT)
    return _plans[stack]


@pytest.fixture(params=STACKS)
def stack(request) -> str:
    return request.param


@pytest.fixture
def plan(stack: str) -> Plan:
    return plan_of(stack)


@pytest.fixture
def stack_settings(stack: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


@pytest.fixture
def project_copy(tmp_path: Path, monkeypatch) -> Callable[..., Path]:
    """A copy of the project's Pulumi.yaml with one stack file edited: `make(base, change)`
    writes stacks/Pulumi.bad.yaml from stack `base` with `change(config)` applied, and makes the
    copy the working directory (the CLI finds Pulumi.yaml from there)."""

    def make(base: str, change: Callable[[dict], None]) -> Path:
        (tmp_path / "stacks").mkdir(exist_ok=True)
        shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
        config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{base}.yaml").read_text())
        change(config["config"])
        (tmp_path / "stacks" / "Pulumi.bad.yaml").write_text(yaml.safe_dump(config))
        monkeypatch.chdir(tmp_path)
        return tmp_path

    return make

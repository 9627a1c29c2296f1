"""Shared fixtures: the recorded offline plan of every shipped stack, and stack variants."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.cli.offline import Plan, record, stack_names

ROOT = Path(__file__).resolve().parent.parent
STACKS = stack_names(ROOT)
_plans: dict[str, Plan] = {}


def manual_text() -> str:
    """What a user reads: the README and every page of docs/."""
    return "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])


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
    writes stacks/Pulumi.bad.yaml from stack `base` with `change(config)` applied (and `base`'s
    policy config as policies/config/bad.json), and makes the
    copy the working directory (the CLI finds Pulumi.yaml from there)."""

    def make(base: str, change: Callable[[dict], None]) -> Path:
        (tmp_path / "stacks").mkdir(exist_ok=True)
        shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
        config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{base}.yaml").read_text())
        change(config["config"])
        (tmp_path / "stacks" / "Pulumi.bad.yaml").write_text(yaml.safe_dump(config))
        (tmp_path / "policies" / "config").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "policies" / "config" / f"{base}.json", tmp_path / "policies" / "config" / "bad.json")
        monkeypatch.chdir(tmp_path)
        return tmp_path

    return make


def set_key(key: str, value: Any) -> Callable[[dict], None]:
    """A stack change: set `key` (full name) to `value`."""

    def change(config: dict) -> None:
        config[key] = value

    return change


def set_field(key: str, field: str, value: Any) -> Callable[[dict], None]:
    """A stack change: set `field` of the object at `key`."""

    def change(config: dict) -> None:
        config[key] = {**config[key], field: value}

    return change


def set_pool(index: int, **fields: Any) -> Callable[[dict], None]:
    """A stack change: update fields of `higgsfield:gpuPools[index]`."""

    def change(config: dict) -> None:
        pools = [dict(p) for p in config["higgsfield:gpuPools"]]
        pools[index].update(fields)
        config["higgsfield:gpuPools"] = pools

    return change


def delete_key(key: str) -> Callable[[dict], None]:
    def change(config: dict) -> None:
        del config[key]

    return change


def assert_plan_rejects(project_copy, capsys, base: str, change, key: str, detail: str) -> None:
    """`higgsfield plan` on the changed stack exits 2 with a line naming `key` and saying
    `detail` (every problem of the stack gets its own line), and no traceback."""
    from infra.cli.main import main

    project_copy(base, change)
    assert main(["plan", "bad"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    line = re.compile(rf"^(error: |\S+:\d+ )?{re.escape(key)}: ")  # `stacks/Pulumi.bad.yaml:12 KEY: message`
    assert any(line.match(text) and detail in text for text in err.splitlines()), err

"""The task pages run as written: each `<!-- task: NAME stack=STACK -->` block of docs/tasks.md is
added to that stack (its lists appended to the stack's, its mappings merged), then the task's
offline `higgsfield` commands run on it; the region task's commands run as they stand; the upgrade
page's version step is a diff of in-place updates only. What needs an account or git
(`preflight`, `diff --base`) is left to the task's reader."""

from __future__ import annotations

import re
import shlex
import shutil
import textwrap

import pytest
import yaml

from infra.cli.main import main
from tests.conftest import ROOT

TASKS = ROOT / "docs" / "tasks.md"
OFFLINE = ("init", "plan", "check", "cost", "jobs", "types", "timeline")


def _sections() -> dict[str, str]:
    text = TASKS.read_text()
    return {part.split("\n", 1)[0].strip(): part for part in text.split("\n## ")[1:]}


def _commands(section: str) -> list[list[str]]:
    """The offline `higgsfield` commands of a section's bash blocks, as argv lists, with the
    block's own `VAR=value` lines expanded (`a && b` is two commands)."""
    commands, variables = [], {}
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in textwrap.dedent(block).replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if len(words) == 1 and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                name, value = words[0].split("=", 1)
                variables[name] = value
                continue
            words = [re.sub(r"\$([A-Z_]+)", lambda m: variables[m[1]], w) for w in words]
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                command, words = words[:cut], words[cut + 1 :]
                if command[:1] == ["higgsfield"] and command[1] in OFFLINE:
                    commands.append(command[1:])
    return commands


def _change(section: str) -> tuple[str, dict]:
    found = re.search(r"<!-- task: \S+ stack=(\S+) -->\s*```yaml\n(.*?)```", section, re.S)
    assert found, "the task has no <!-- task: NAME stack=STACK --> block"
    return found[1], yaml.safe_load(textwrap.dedent(found[2]))


def _merge(into: dict, change: dict) -> None:
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key].extend(value)
        else:
            into[key] = value


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")
    shutil.copytree(ROOT / "policies" / "config", tmp_path / "policies" / "config")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run_all(commands: list[list[str]], capsys) -> str:
    out = ""
    for argv in commands:
        capsys.readouterr()
        code = main(argv)
        said = capsys.readouterr()
        assert code == 0, (argv, said.err)
        out += said.out
    return out


@pytest.mark.parametrize("task", ["Add a team", "Add a GPU pool"])
def test_a_task_page_block_added_to_its_stack_passes_the_tasks_commands(task, project, capsys):
    section = _sections()[task]
    stack, change = _change(section)
    path = project / "stacks" / f"Pulumi.{stack}.yaml"
    document = yaml.safe_load(path.read_text())
    _merge(document["config"], change)
    path.write_text(yaml.safe_dump(document))
    commands = _commands(section)
    assert {c[0] for c in commands} >= {"plan", "check"} and all(stack in c or c[0] == "types" for c in commands)
    out = _run_all(commands, capsys)
    if task == "Add a team":
        assert "namespace: audio" in out  # the job rendered for the new team
    else:
        assert "h200" in out  # the new pool, planned and priced


def test_the_new_region_task_runs_as_written(project, capsys):
    commands = _commands(_sections()["A stack of your own (a new region)"])
    assert [c[0] for c in commands] == ["init", "init", "plan", "check", "cost"]
    _run_all(commands, capsys)
    assert (project / "stacks" / "Pulumi.mine.yaml").is_file() and (project / "stacks" / "Pulumi.big.yaml").is_file()


def test_the_upgrade_pages_one_minor_step_is_in_place_updates_only():
    from infra.offline.diff import compare
    from infra.offline.evaluate import record

    step = re.search(
        r'`higgsfield:kubernetesVersion: "(\d+\.\d+)"` -> `"(\d+\.\d+)"`', (ROOT / "docs" / "upgrading.md").read_text()
    )
    assert step, "docs/upgrading.md names no version step"
    before = record("dev", overrides={"higgsfield:kubernetesVersion": step[1]}).as_dict()
    after = record("dev", overrides={"higgsfield:kubernetesVersion": step[2]}).as_dict()
    diff = compare(before, after, set())
    assert not diff.refused and not diff.replaced and not diff.added and not diff.removed
    assert any(c.name == "cluster-eks" and "version" in c.paths for c in diff.changed)

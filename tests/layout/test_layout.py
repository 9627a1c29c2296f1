"""What runs where: the Pulumi program in infra/__main__.py, its offline evaluation in
infra/offline/, the commands in infra/cli/commands/ (one module per command, `main` the command
line), what runs in a pod next to its image, and no module that imports, directly or through
others, itself (lazy imports inside functions count: they are how cycles hide)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("infra", "components", "policies")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its file."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                    )
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_through_others():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_import_graph_sees_lazy_imports_inside_functions():
    assert "infra.offline.manifests" in import_graph()["infra.offline.check"]


def test_what_runs_in_a_pod_lives_with_its_image_and_needs_nothing_of_the_program():
    programs = sorted((ROOT / "images" / "training").glob("*.py")) + sorted((ROOT / "examples").glob("*.py"))
    assert programs
    for path in programs:
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m.split(".")[0] in PACKAGES}, path


def test_every_command_owns_its_options_in_its_own_module():
    """The command line stays thin: each subcommand's options and run live in infra/cli/commands/<command>.py."""
    from infra.cli.main import parser

    commands = next(a for a in parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices
    here = ROOT / "infra" / "cli" / "commands"
    missing = [c for c in commands if not (here / f"{c.replace('-', '_')}.py").exists()]
    assert missing == [], missing

"""The design decisions live in docs/design/, and every citation of one leads to a file there.

A citation names a design file by path (`docs/design/efa.md`, or `design/efa.md` from docs/, or
`efa.md` from a design file's own links); a design record outside the repository is never cited."""

from __future__ import annotations

import os
import re
from functools import cache, lru_cache
from pathlib import Path

from tests.conftest import ROOT

DESIGN = ROOT / "docs" / "design"
# Files a maintainer writes: code, docs, configuration, workflows, the image's sources.
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".json", ".sh", ".ini"}
SKIPPED_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", "build", "dist", "out"}
# The shared notes the decisions were first written in, which the repository does not hold (spelled in
# two parts so that this file does not cite it).
OUTSIDE_RECORD = re.compile(r"\bDESIGN" + r"(?:\.md\b|\s+decision)")
DESIGN_PATH = re.compile(r"(?<![\w./-])(?:docs/)?design/([\w.-]+\.md)\b")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)")
# A file of the repository a decision names as evidence (tests by file name: their folder may move).
NAMED_FILE = re.compile(
    r"(?<![\w/.-])((?:components|infra|policies|images|examples|docs|schemas|stacks|\.github|tests)/"
    r"[\w./-]*(?:\.(?:py|md|ya?ml|json|toml)|/|Dockerfile))(?![\w/-])"
)
TEST_FILE = re.compile(r"(?<![\w/.-])(test_\w+\.py)\b")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


@lru_cache(maxsize=1)
def _text_files() -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".venv")]
        found += [Path(folder) / name for name in files if Path(name).suffix in TEXT_SUFFIXES or name == "Dockerfile"]
    return [path for path in found if path != Path(__file__).resolve()]


@cache
def _read(path: Path) -> str:
    return path.read_text(errors="replace")


def outside_citations(files: list[Path]) -> list[str]:
    """Lines that cite a design record the repository does not hold."""
    return [
        f"{_name(path)}:{number}: {line.strip()}"
        for path in files
        if OUTSIDE_RECORD.search(_read(path))
        for number, line in enumerate(_read(path).splitlines(), 1)
        if OUTSIDE_RECORD.search(line)
    ]


def missing_design_files(files: list[Path], design: Path = DESIGN) -> list[str]:
    """Citations of docs/design/NAME.md (by path anywhere, or by a relative link inside docs/design)
    whose file does not exist."""
    missing = []
    for path in files:
        text = _read(path)
        cited = set(DESIGN_PATH.findall(text))
        if path.parent == design:
            cited |= {Path(link).name for link in LINK.findall(text) if "/" not in link and link.endswith(".md")}
        missing += [f"{_name(path)}: {name}" for name in sorted(cited) if not (design / name).is_file()]
    return missing


def test_nothing_cites_a_design_record_outside_the_repository():
    assert outside_citations(_text_files()) == []


def test_every_cited_design_file_exists():
    assert missing_design_files(_text_files()) == []


def missing_evidence(page: Path, root: Path = ROOT) -> list[str]:
    """Files and test files `page` names as evidence that the repository does not hold."""
    text = page.read_text()
    tests = {path.name for path in (root / "tests").rglob("test_*.py")}
    missing = [name for name in sorted(set(NAMED_FILE.findall(text))) if not (root / name).exists()]
    return missing + [name for name in sorted(set(TEST_FILE.findall(text))) if name not in tests]


def test_every_file_and_test_a_decision_names_exists():
    assert {page.name: missing for page in DESIGN.glob("*.md") if (missing := missing_evidence(page))} == {}


def test_the_index_lists_every_design_file_and_the_manual_links_the_index():
    listed = set(LINK.findall((DESIGN / "README.md").read_text()))
    assert {p.name for p in DESIGN.glob("*.md")} - {"README.md"} <= listed
    assert "design/README.md" in LINK.findall((ROOT / "docs" / "README.md").read_text())


def test_each_decision_says_why_what_was_weighed_and_the_evidence():
    for page in DESIGN.glob("*.md"):
        if page.name != "README.md":
            headings = {line.lstrip("# ").strip() for line in page.read_text().splitlines() if line.startswith("## ")}
            for section in ("Why", "Alternatives weighed", "Evidence"):
                assert any(h.startswith(section) for h in headings), f"{page.name}: no '## {section}'"


def test_the_checks_catch_an_outside_citation_and_a_missing_design_file(tmp_path):
    design = tmp_path / "design"
    design.mkdir()
    (design / "efa.md").write_text("# EFA\n\nSee [storage](storage.md).\n")
    code = tmp_path / "gpu_pools.py"
    code.write_text(
        "# one interface per card (" + "DESIGN" + ".md decision 3; docs/design/efa.md)\n"
        "# the gate: docs/design/no-such-decision.md\n"
    )
    assert outside_citations([code]) == [f"gpu_pools.py:1: {code.read_text().splitlines()[0]}"]
    assert missing_design_files([code, design / "efa.md"], design) == [
        "gpu_pools.py: no-such-decision.md",
        "efa.md: storage.md",
    ]
    assert not DESIGN_PATH.findall("components/design/x.md")
    (design / "efa.md").write_text(
        "Code: `components/efa.py`, `components/no_such.py`; tests: `test_docs.py`, `test_none.py`."
    )
    assert missing_evidence(design / "efa.md") == ["components/no_such.py", "test_none.py"]

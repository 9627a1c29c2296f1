"""The examples of command output in the README and in docs/ (`higgsfield plan`, `cost`,
`timeline`, ...) are the real output of the shipped stacks. Each example is a fenced block right
after a marker line

    <!-- output: higgsfield cost prod -->            (the whole output)
    <!-- output: higgsfield plan prod | head -30 --> (its first 30 lines)

`python tests/docs/test_doc_examples.py --write` runs every marked command and rewrites its block;
the test fails while a block differs from what its command prints now."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
REGENERATE = "python tests/docs/test_doc_examples.py --write"
MARKER = re.compile(
    r"^<!-- output: higgsfield (?P<args>[^|>]+?)(?: \| head -(?P<head>\d+))? -->\n```(?P<lang>\w*)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)


def command_output(args: str, head: str | None) -> str:
    """What `higgsfield ARGS [| head -N]` prints, run in-process from the project root."""
    from infra.cli.main import main

    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out):
            code = main(shlex.split(args))
    finally:
        os.chdir(cwd)
    assert code == 0, f"`higgsfield {args}` exited {code}"
    lines = out.getvalue().splitlines()
    return "\n".join(lines[: int(head)] if head else lines) + "\n"


def examples(text: str) -> list[re.Match]:
    return list(MARKER.finditer(text))


def regenerated(text: str) -> str:
    def fill(m: re.Match) -> str:
        head = f" | head -{m['head']}" if m["head"] else ""
        return (
            f"<!-- output: higgsfield {m['args']}{head} -->\n```{m['lang']}\n{command_output(m['args'], m['head'])}```"
        )

    return MARKER.sub(fill, text)


def test_the_manual_shows_plan_cost_and_timeline_examples():
    commands = {m["args"].split()[0] for page in PAGES for m in examples(page.read_text())}
    assert {"plan", "cost", "timeline"} <= commands


def test_the_manuals_examples_are_the_real_output_of_the_shipped_stacks():
    stale = [
        f"{page.relative_to(ROOT)}: higgsfield {m['args']}"
        for page in PAGES
        for m in examples(page.read_text())
        if m["body"] != command_output(m["args"], m["head"])
    ]
    assert not stale, f"examples out of date: {', '.join(stale)}; run `{REGENERATE}`"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {REGENERATE}")
    sys.path.insert(0, str(ROOT))
    for page in PAGES:
        if examples(page.read_text()):
            page.write_text(regenerated(page.read_text()))
            print(f"wrote {page.relative_to(ROOT)} ({len(examples(page.read_text()))} examples)")

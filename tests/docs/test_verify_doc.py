"""docs/verify.md describes the checks `higgsfield verify` runs, in their order, with the rights each
needs; the pages a user reads before and after a first deploy end by sending them to it."""

from __future__ import annotations

import re

import pytest

from infra.cli.verify.checks import specs
from tests.conftest import ROOT

PAGE = (ROOT / "docs" / "verify.md").read_text()


def test_the_page_lists_every_check_in_the_order_it_runs():
    listed = re.findall(r"^\| `([a-z]+\.[a-z-]+)` \|", PAGE, re.MULTILINE)
    assert listed == [s.id for s in specs()]


def test_each_checks_row_names_the_iam_actions_it_calls():
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z]+\.[a-z-]+)` \|.*$", PAGE, re.MULTILINE)}
    for spec in specs():
        for action in re.findall(r"\b[a-z-]+:[A-Z]\w+", spec.rights):
            assert f"`{action}`" in rows[spec.id], (spec.id, action)


@pytest.mark.parametrize("page", ["verified.md", "getting-started.md"])
def test_the_page_ends_by_saying_run_verify(page):
    last = (ROOT / "docs" / page).read_text().rstrip().splitlines()[-1]
    assert last.endswith("run `higgsfield verify STACK`.")

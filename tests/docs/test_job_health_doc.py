"""The manual's training-jobs page says what a team sees when a node is bad, a job hangs or a rank is
slow, in the words and codes the in-pod programs use."""

from __future__ import annotations

import sys

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "images" / "training"))
import job_watchdog  # noqa: E402
import preflight  # noqa: E402


def _section() -> str:
    page = (ROOT / "docs" / "concepts" / "training-jobs.md").read_text()
    return page.split("## A bad node, a hung job, a slow rank: what a team sees", 1)[1].split("\n## ", 1)[0]


def test_the_page_names_the_preflight_line_and_its_exit_codes():
    text = _section()
    assert "preflight rank R/N node NODE:" in text
    assert f"**{preflight.EXIT_RETRY}**" in text and f"**{preflight.EXIT_CONFIG}**" in text


def test_the_page_names_the_watchdogs_events_and_its_defaults():
    text = _section()
    settings = job_watchdog.Settings()
    assert job_watchdog.HUNG_REASON in text and job_watchdog.RECHECK_REASON in text
    assert f"{settings.hang_multiple:g} x its normal step time" in text
    assert f"{settings.hang_floor_s / 60:g} minutes" in text and f"{settings.straggler_factor:g} x" in text

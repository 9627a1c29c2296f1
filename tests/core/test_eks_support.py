"""Which Kubernetes minors are in EKS extended support follows from the support calendar in
infra/core/versions.py: a minor whose 14 months of standard support ended by the date the calendar was
applied is billed at the extended rate (`higgsfield cost`) and named so."""

from __future__ import annotations

from datetime import date

from infra.core import versions


def _extended_at(day: date) -> set[str]:
    return {minor for minor, end in versions.EKS_STANDARD_SUPPORT_END.items() if date.fromisoformat(end) <= day}


def test_extended_support_is_every_minor_past_its_standard_support_at_the_calendar_date():
    assert set(versions.EKS_EXTENDED_SUPPORT) == _extended_at(date.fromisoformat(versions.EKS_SUPPORT_AS_OF))


def test_1_34_left_standard_support_on_2026_12_02():
    assert "1.34" in versions.EKS_EXTENDED_SUPPORT
    assert versions.EKS_STANDARD_SUPPORT_END["1.34"] == "2026-12-02"


def test_every_supported_minor_has_a_standard_support_end():
    assert set(versions.KUBERNETES_SUPPORTED) <= set(versions.EKS_STANDARD_SUPPORT_END)
    assert versions.KUBERNETES_DEFAULT not in versions.EKS_EXTENDED_SUPPORT

"""The node check's deeper checks (images/training/node_check.py): XIDs in the kernel log with a
severity table, the EFA loopback, DCGM diagnostics' verdict. The kernel log lines are in the
driver's format (`NVRM: Xid (PCI:0000:53:00): 79, pid=..., GPU has fallen off the bus.`)."""

from __future__ import annotations

import json

import node_check
from node_check import CRITICAL_XIDS, Report, dcgm_failures, report_dcgm, report_xids, xid_events

from components import job_watchdog

KERNEL_LOG = """\
[  12.345678] nvidia-nvlink: Nvlink Core is being initialized
[ 8123.000001] NVRM: Xid (PCI:0000:53:00): 13, pid=4242, name=python, Graphics Exception: ESR 0x514648=0x1000f
[ 9001.123456] NVRM: Xid (PCI:0000:a8:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
"""


def _verdict(events, required=True) -> tuple[str, bool]:
    report = Report("n1")
    report_xids(report, events, required)
    (result,) = report.results
    return result.value, result.ok


def test_the_kernel_logs_xids_are_read_with_their_gpu():
    assert xid_events(KERNEL_LOG) == [("0000:53:00", 13), ("0000:a8:00", 79)]


def test_a_critical_xid_since_boot_fails_the_node_and_names_it():
    value, ok = _verdict(xid_events(KERNEL_LOG))
    assert not ok and value == "79 GPU has fallen off the bus on 0000:a8:00"


def test_an_applications_xid_alone_passes_but_is_listed():
    value, ok = _verdict([("0000:53:00", 13), ("0000:53:00", 31)])
    assert ok and value == "only non-critical: 13, 31"


def test_an_unreadable_kernel_log_fails_only_where_the_gate_requires_it():
    assert not _verdict(None, required=True)[1] and _verdict(None, required=False)[1]


def test_the_alerts_and_the_node_check_share_one_severity_table():
    assert set(job_watchdog.CRITICAL_XIDS) == set(CRITICAL_XIDS)


def test_dcgm_diagnostics_name_the_failed_test_and_gpu():
    diag = {
        "category": [
            {
                "tests": [
                    {"name": "Memory", "results": [{"gpu_id": 3, "status": "Fail"}, {"gpu_id": 0, "status": "Pass"}]}
                ]
            }
        ]
    }
    assert dcgm_failures(json.dumps(diag)) == ["Memory (GPU 3)"]


def test_dcgm_asked_but_missing_from_the_image_fails_and_level_zero_does_not_run(monkeypatch):
    monkeypatch.setattr(node_check.shutil, "which", lambda name: None)
    report = Report("n1")
    report_dcgm(report, 0)
    assert report.results == []
    report_dcgm(report, 1)
    assert not report.healthy and report.results[0].value == "dcgmi not in the image"


def test_an_efa_device_that_does_not_answer_itself_is_named(monkeypatch, tmp_path):
    tool = tmp_path / "fi_pingpong"  # a stand-in: the server idles, the client fails on one device
    tool.write_text(
        '#!/bin/sh\ncase "$*" in *localhost*) case "$*" in *rdmap2-rdm*) exit 1;; esac; exit 0;; esac\nsleep 5\n'
    )
    tool.chmod(0o755)
    monkeypatch.setattr(node_check.shutil, "which", lambda name: str(tool) if name == "fi_pingpong" else None)
    failures = node_check.efa_loopback(["rdmap1", "rdmap2"], timeout=5)
    assert list(failures) == ["rdmap2"] and failures["rdmap2"].startswith("exit 1")


def test_the_gate_requires_the_kernel_log_and_runs_no_dcgm_until_the_image_has_it():
    from components.healthgate import expectations
    from tests.conftest import plan_of

    cfg = plan_of("prod").config
    wanted = expectations(cfg.gpu_pools[0], cfg.observability.health, lustre=False)
    assert wanted["REQUIRE_KERNEL_LOG"] == "1" and wanted["DCGM_DIAG_LEVEL"] == "0"

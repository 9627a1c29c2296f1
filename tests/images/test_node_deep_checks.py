"""The node check's deeper checks (images/training/node_check.py): XIDs in the kernel log with a
severity table, the EFA loopback, DCGM diagnostics' verdict. The kernel log lines are in the
driver's format (`NVRM: Xid (PCI:0000:53:00): 79, pid=..., GPU has fallen off the bus.`)."""

from __future__ import annotations

import json
import socket
import sys

import node_check
import pytest
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


def test_a_contained_ecc_error_or_a_recorded_row_remap_passes_the_node_as_the_catalog_says():
    value, ok = _verdict([("0000:53:00", 94), ("0000:53:00", 63)])  # restart the application; informational
    assert ok and value == "only non-critical: 63, 94"


def test_a_gpu_that_failed_to_initialise_fails_the_node():
    value, ok = _verdict([("0000:1b:00", 143)])
    assert not ok and value.startswith("143 ")


def test_an_unreadable_kernel_log_fails_only_where_the_gate_requires_it():
    assert not _verdict(None, required=True)[1] and _verdict(None, required=False)[1]


def test_the_alerts_and_the_node_check_share_one_severity_table():
    assert set(job_watchdog.CRITICAL_XIDS) == set(CRITICAL_XIDS)


def _diag(*tests: dict, runtime_error: str | None = None) -> str:
    """`dcgmi diag -r N -j`'s document in DCGM 4.5.3's shape (NVIDIA/DCGM:testing/python3/
    dcgm_diag_schema.json@v4.5.3, as node_check.py cites): categories of tests, each test's result per
    entity with its warnings, a test summary, the entity groups and the metadata."""
    diagnostic: dict = {"test_categories": [{"category": "Hardware", "tests": list(tests)}]} if tests else {}
    if runtime_error:
        diagnostic["runtime_error"] = runtime_error
    return json.dumps(
        {
            "DCGM Diagnostic": diagnostic,
            "entity_groups": [
                {
                    "entity_group": "GPU",
                    "entity_group_id": 1,
                    "entities": [{"entity_id": i, "device_id": "2330", "serial_num": f"165{i}"} for i in range(8)],
                }
            ],
            "metadata": {"version": "4.5.3", "Driver Version Detected": "570.172.08"},
        }
    )


def _test(name: str, *statuses: str, warning: str = "") -> dict:
    results = []
    for gpu, status in enumerate(statuses):
        result = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu, "status": status}
        if status == "Fail" and warning:
            result["warnings"] = [{"warning": warning, "error_id": 28, "error_category": 3, "error_severity": 2}]
        results.append(result)
    overall = "Fail" if "Fail" in statuses else "Pass"
    return {"name": name, "results": results, "test_summary": {"status": overall}}


def test_dcgm_diagnostics_that_pass_warn_or_skip_fail_nothing():
    diag = _diag(_test("software", "Pass", "Pass"), _test("pcie", "Warn", "Skip"), _test("memory", "Not Run"))
    assert dcgm_failures(diag) == []


def test_dcgm_diagnostics_name_the_failed_test_its_gpu_and_dcgms_warning():
    diag = _diag(_test("memory", "Pass", "Pass", "Pass", "Fail", warning="Memory error: DBE on GPU 3"))
    assert dcgm_failures(diag) == ["memory (GPU 3): Memory error: DBE on GPU 3"]


def test_a_diagnostic_that_could_not_run_is_a_failure_with_dcgms_reason():
    diag = _diag(runtime_error="Unable to connect to the host engine")
    assert dcgm_failures(diag) == ["did not run: Unable to connect to the host engine"]


def test_repeated_runs_fail_where_any_run_failed():
    runs = {"iterations": [json.loads(_diag(_test("pcie", "Pass"))), json.loads(_diag(_test("pcie", "Fail")))]}
    assert dcgm_failures(json.dumps({**runs, "Overall Result": "Fail"})) == ["pcie (GPU 0)"]


def test_output_that_is_not_dcgms_json_is_an_error_quoting_it():
    with pytest.raises(ValueError, match="dcgmi printed no JSON: 'Error: unable to establish a connection"):
        dcgm_failures("Error: unable to establish a connection to the specified host: localhost")


def stand_in_dcgm_container(exchange, test: str) -> None:
    """A thread playing the gate's DCGM container (components/healthgate.py dcgm_container): it takes the
    level node_check asks for in `exchange` and answers a failing run of `test` at that level."""
    import threading
    import time

    def container() -> None:
        request = exchange / node_check.DCGM_REQUEST
        while not request.exists():
            time.sleep(0.01)
        level = request.read_text().strip()
        request.unlink()
        (exchange / node_check.DCGM_RESULT).write_text(_diag(_test(f"{test}-r{level}", "Fail")))

    threading.Thread(target=container, daemon=True).start()


def test_the_check_asks_the_gates_dcgm_container_for_its_level_and_reads_the_answer(tmp_path):
    """A stand-in for the DCGM container (components/healthgate.py dcgm_container): it takes the level
    from the shared directory and answers with a failing level-2 run."""
    stand_in_dcgm_container(tmp_path, "memory")
    report = Report("n1")
    report_dcgm(report, 2, str(tmp_path))
    (result,) = report.results
    assert not result.ok and result.value == "memory-r2 (GPU 0)" and result.expected == "level 2 passes"


def test_dcgm_asked_but_missing_from_the_image_fails_and_level_zero_does_not_run(monkeypatch):
    monkeypatch.setattr(node_check.shutil, "which", lambda name: None)
    report = Report("n1")
    report_dcgm(report, 0)
    assert report.results == []
    report_dcgm(report, 1)
    assert not report.healthy and report.results[0].value == "dcgmi not in the image"


# A stand-in fi_pingpong with the real tool's control-socket calls (ofiwg/libfabric:util/pingpong.c@v2.5.1):
# the server binds INADDR_ANY:<-B> and listens; a client binds INADDR_ANY:<-B> too when given one, then
# connects to <-P>. Debian's fi_pingpong 1.17.0, run as the check used to run it, exits 98 (EADDRINUSE).
# The device named in BROKEN connects but answers with exit 1.
FI_PINGPONG = r"""
import socket, sys, time
args = sys.argv[1:]
def opt(flag):
    return int(args[args.index(flag) + 1]) if flag in args else 0
if args[-1] != "localhost":
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", opt("-B")))
    server.listen(1)
    connection, _ = server.accept()
    connection.recv(1)
    time.sleep(5)
client = socket.socket()
try:
    if opt("-B"):
        client.bind(("0.0.0.0", opt("-B")))
    client.connect(("127.0.0.1", opt("-P")))
    client.send(b"x")
except OSError as error:
    print(f"failed to connect: {error.strerror}", file=sys.stderr)
    sys.exit(error.errno)
sys.exit(1 if "BROKEN-rdm" in args else 0)
"""


def _fi_pingpong(monkeypatch, tmp_path, broken: str = "none") -> None:
    tool = tmp_path / "fi_pingpong"
    tool.write_text(f"#!{sys.executable}\n" + FI_PINGPONG.replace("BROKEN", broken))
    tool.chmod(0o755)
    monkeypatch.setattr(node_check.shutil, "which", lambda name: str(tool) if name == "fi_pingpong" else None)


def _free_ports() -> int:
    """The first of two control ports no other test process holds (the suite runs in parallel)."""
    while True:
        with socket.socket() as probe:
            probe.bind(("0.0.0.0", 0))
            port = probe.getsockname()[1]
        with socket.socket() as second:
            try:
                second.bind(("0.0.0.0", port + 1))
                return port
            except OSError:
                continue


def test_each_efa_device_answers_itself_under_fi_pingpongs_control_port_rules(monkeypatch, tmp_path):
    _fi_pingpong(monkeypatch, tmp_path)
    assert node_check.efa_loopback(["rdmap1", "rdmap2"], timeout=10, first_port=_free_ports()) == {}


def test_an_efa_device_that_does_not_answer_itself_is_named(monkeypatch, tmp_path):
    _fi_pingpong(monkeypatch, tmp_path, broken="rdmap2")
    failures = node_check.efa_loopback(["rdmap1", "rdmap2"], timeout=10, first_port=_free_ports())
    assert list(failures) == ["rdmap2"] and failures["rdmap2"].startswith("exit 1")


def test_the_gate_requires_the_kernel_log_and_runs_dcgm_level_1_at_join_and_2_on_a_recheck():
    from components.healthgate import expectations
    from tests.conftest import plan_of

    cfg = plan_of("prod").config
    wanted = expectations(cfg.gpu_pools[0], cfg.observability.health, lustre=False)
    assert wanted["REQUIRE_KERNEL_LOG"] == "1"
    assert (wanted["DCGM_DIAG_LEVEL"], wanted["DCGM_DIAG_LEVEL_RECHECK"]) == ("1", "2")


def test_the_gates_pod_runs_dcgm_from_the_pinned_dcgm_image_beside_the_check():
    from components.healthgate import DCGM_EXCHANGE, daemonset
    from infra.core.versions import DCGM_IMAGE

    spec = daemonset("gate-image", pool="h100", gpus=8)["spec"]["template"]["spec"]
    gate, dcgm = spec["containers"]
    assert dcgm["image"] == DCGM_IMAGE and "dcgmi diag" in dcgm["command"][-1]
    assert "nvidia.com/gpu" not in dcgm["resources"]["requests"] and dcgm["securityContext"]["privileged"]
    shared = {m["name"] for m in gate["volumeMounts"]} & {m["name"] for m in dcgm["volumeMounts"]}
    assert shared == {"dcgm"} and {"name": "DCGM_EXCHANGE_DIR", "value": DCGM_EXCHANGE} in gate["env"]

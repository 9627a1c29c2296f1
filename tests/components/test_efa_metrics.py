"""The dashboard's EFA panels read counters EFA devices have: the EFA driver's hw_counters, which
the health gate pod on each gated GPU node serves (images/training/efa_metrics.py), scraped by the
`efa` job; not node-exporter's node_infiniband_port_data_* (read from ports/N/counters, which EFA
devices lack: prometheus/procfs:sysfs/class_infiniband.go@v0.21.1)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

import efa_metrics
from components import healthgate
from tests.conftest import plan_of
from tests.core.test_upstream_contracts import _relabel, _scrape_jobs

# An EFA device as the EFA driver lays it out in sysfs: hw_counters only, no counters/ directory
# (file names: aws-samples/awsome-distributed-training:4.validation_and_observability/
# 3.efa-node-exporter/class_amazon_efa.go@7217859f).
EFA_HW_COUNTERS = {"tx_bytes": 123456789, "rx_bytes": 987654321, "tx_pkts": 1664737, "rx_pkts": 1664800, "rdma_write_bytes": 4096, "lifespan": 12}


def _efa_sysfs(root: Path, devices=("rdmap79s0", "rdmap80s0")) -> Path:
    for device in devices:
        hw = root / device / "ports" / "1" / "hw_counters"
        hw.mkdir(parents=True)
        for name, value in EFA_HW_COUNTERS.items():
            (hw / name).write_text(f"{value}\n")
    return root


def _samples(text: str) -> dict[tuple[str, str, str], float]:
    found = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = re.fullmatch(r'(\w+)\{device="([^"]+)",port="([^"]+)"\} (\d+)', line)
        assert m, line
        found[(m[1], m[2], m[3])] = float(m[4])
    return found


def test_the_exporter_serves_every_efa_devices_byte_counters(tmp_path):
    samples = _samples(efa_metrics.render(_efa_sysfs(tmp_path)))
    assert samples[("node_amazonefa_tx_bytes", "rdmap79s0", "1")] == 123456789
    assert samples[("node_amazonefa_rx_bytes", "rdmap80s0", "1")] == 987654321


def test_every_exported_series_is_declared_a_counter(tmp_path):
    text = efa_metrics.render(_efa_sysfs(tmp_path))
    declared = set(re.findall(r"^# TYPE (\w+) counter$", text, re.M))
    assert {name for name, _, _ in _samples(text)} <= declared


def test_a_node_without_efa_serves_an_empty_page(tmp_path):
    assert efa_metrics.render(tmp_path / "missing").strip() == ""


def test_the_exporter_answers_over_http(tmp_path):
    server = efa_metrics.serve(0, _efa_sysfs(tmp_path))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert "node_amazonefa_tx_bytes" in answer.read().decode()
    finally:
        server.shutdown()


def _dashboard_exprs(stack: str) -> list[str]:
    (config_map,) = [c for c in plan_of(stack).of_type("kubernetes:core/v1:ConfigMap") if c.inputs["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    (text,) = config_map.inputs["data"].values()
    return [t["expr"] for p in json.loads(text)["panels"] if "efa" in p["title"].lower() for t in p["targets"]]


def test_efa_panels_read_only_series_the_exporter_serves(tmp_path):
    served = {name for name, _, _ in _samples(efa_metrics.render(_efa_sysfs(tmp_path)))}
    exprs = _dashboard_exprs("prod")
    assert exprs
    for expr in exprs:
        used = set(re.findall(r"node_\w+", expr))
        assert used and used <= served, expr
        assert "node_infiniband" not in expr


def test_the_gate_pods_metrics_port_is_scraped_with_its_node_name():
    daemonset = healthgate.daemonset("registry.example/training:src-abc")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    (port,) = container["ports"]
    assert {e["name"]: e.get("value") for e in container["env"]}["EFA_METRICS_PORT"] == str(port["containerPort"])
    discovered = {"__meta_kubernetes_pod_label_app_kubernetes_io_name": daemonset["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
                  "__meta_kubernetes_pod_container_port_name": port["name"], "__meta_kubernetes_pod_node_name": "ip-10-0-0-1"}
    config = _scrape_jobs(plan_of("prod"))["efa"]
    assert config["kubernetes_sd_configs"][0]["namespaces"]["names"] == [healthgate.NAMESPACE]
    assert _relabel(discovered, config["relabel_configs"])["Hostname"] == "ip-10-0-0-1"


@pytest.mark.parametrize("name", sorted(efa_metrics.COUNTERS))
def test_every_counter_read_is_one_the_efa_driver_exposes(name):
    """class_amazon_efa.go@7217859f lists the EFA driver's hw_counters files."""
    EFA_DRIVER_HW_COUNTERS = {
        "alloc_pd_err", "alloc_ucontext_err", "cmds_err", "completed_cmds", "create_ah_err", "create_cq_err", "create_qp_err",
        "keep_alive_rcvd", "impaired_remote_conn_events", "lifespan", "mmap_err", "no_completion_cmds", "rdma_read_bytes",
        "rdma_read_resp_bytes", "rdma_read_wr_err", "rdma_read_wrs", "rdma_write_bytes", "rdma_write_recv_bytes", "rdma_write_wr_err",
        "rdma_write_wrs", "recv_bytes", "recv_wrs", "reg_mr_err", "retrans_bytes", "retrans_pkts", "retrans_timeout_events", "rx_bytes",
        "rx_drops", "rx_pkts", "send_bytes", "send_wrs", "submitted_cmds", "tx_bytes", "tx_pkts", "unresponsive_remote_events",
    }
    assert name in EFA_DRIVER_HW_COUNTERS

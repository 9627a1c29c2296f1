"""The dashboard's EFA panels read counters EFA devices have: the EFA driver's hw_counters, which
the efa-exporter pod on every EFA node serves (components/efa_exporter.py running
images/training/efa_metrics.py), scraped by the `efa` job, for as long as the node runs jobs; not
node-exporter's node_infiniband_port_data_* (read from ports/N/counters, which EFA devices lack:
prometheus/procfs:sysfs/class_infiniband.go@v0.21.1)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import efa_metrics
import pytest

from components import efa_exporter
from components.gpu_pools import pool_labels, pool_taints
from components.healthgate import HEALTH_LABEL
from tests.conftest import STACKS, config_of, plan_of
from tests.core.test_upstream_contracts import _relabel, _scrape_jobs

# An EFA device as the EFA driver lays it out in sysfs: hw_counters only, no counters/ directory
# (file names: aws-samples/awsome-distributed-training:4.validation_and_observability/
# 3.efa-node-exporter/class_amazon_efa.go@7217859f).
EFA_HW_COUNTERS = {
    "tx_bytes": 123456789,
    "rx_bytes": 987654321,
    "tx_pkts": 1664737,
    "rx_pkts": 1664800,
    "rdma_write_bytes": 4096,
    "lifespan": 12,
}


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
    (config_map,) = [
        c
        for c in plan_of(stack).of_type("kubernetes:core/v1:ConfigMap")
        if c.inputs["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
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


def _exporter(stack: str) -> dict:
    (daemonset,) = [
        r.inputs
        for r in plan_of(stack).resources
        if r.inputs.get("kind") == "DaemonSet" and r.inputs["metadata"]["name"] == efa_exporter.NAME
    ]
    return daemonset


def test_the_exporters_pods_are_scraped_on_their_metrics_port_with_their_node_name():
    daemonset = _exporter("prod")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    (port,) = container["ports"]
    assert (
        {e["name"]: e.get("value") for e in container["env"]}["EFA_METRICS_PORT"]
        == str(port["containerPort"])
        == str(efa_metrics.PORT)
    )
    discovered = {
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": daemonset["spec"]["template"]["metadata"]["labels"][
            "app.kubernetes.io/name"
        ],
        "__meta_kubernetes_pod_container_port_name": port["name"],
        "__meta_kubernetes_pod_node_name": "ip-10-0-0-1",
    }
    config = _scrape_jobs(plan_of("prod"))["efa"]
    assert config["kubernetes_sd_configs"][0]["namespaces"]["names"] == [daemonset["metadata"]["namespace"]]
    assert _relabel(discovered, config["relabel_configs"])["Hostname"] == "ip-10-0-0-1"


def _tolerates(tolerations: list[dict], taint) -> bool:
    """The Kubernetes rule (k8s.io/api core/v1 toleration.go ToleratesTaint): an empty key with
    Exists matches every taint; else the key, the effect (empty: any) and the value (Equal) must match."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        if not t.get("key") and t.get("operator") == "Exists":
            return True
        if t.get("key") == taint.key and (t.get("operator") == "Exists" or t.get("value") == taint.value):
            return True
    return False


EFA_POOLS = [(stack, pool.name) for stack in STACKS for pool in config_of(stack).gpu_pools if pool.efa]


@pytest.mark.parametrize(("stack", "pool_name"), EFA_POOLS, ids=[f"{s}-{p}" for s, p in EFA_POOLS])
def test_the_exporter_runs_on_every_efa_node_before_and_after_it_passes_the_gate(stack, pool_name):
    """The gate's own pod leaves a node once it is labelled healthy; the exporter must not."""
    pool = next(p for p in config_of(stack).gpu_pools if p.name == pool_name)
    spec = _exporter(stack)["spec"]["template"]["spec"]
    for labels, taints in (
        (pool_labels(pool), pool_taints(pool)),  # joining, in the gate
        ({**pool_labels(pool), HEALTH_LABEL: "healthy"}, pool_taints(pool)[: 1 + len(pool.taints)]),
    ):  # passed
        assert spec["nodeSelector"].items() <= labels.items()
        assert "affinity" not in spec
        assert all(_tolerates(spec["tolerations"], taint) for taint in taints), taints


def test_the_exporter_reads_the_hosts_sysfs_read_only_without_privileges():
    spec = _exporter("prod")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (mount,) = container["volumeMounts"]
    (volume,) = spec["volumes"]
    assert (volume["hostPath"]["path"], mount["readOnly"]) == ("/sys", True)
    assert {e["name"]: e.get("value") for e in container["env"]}[
        "EFA_SYSFS"
    ] == f"{mount['mountPath']}/class/infiniband"
    assert spec["securityContext"]["runAsNonRoot"] and container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert not container["securityContext"].get("privileged") and "priorityClassName" not in spec


def test_the_exporter_serves_the_sysfs_it_is_given_from_its_environment(tmp_path):
    """What the DaemonSet's command runs: `python efa_metrics.py` with EFA_METRICS_PORT and EFA_SYSFS."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"EFA_METRICS_PORT": str(port), "EFA_SYSFS": str(_efa_sysfs(tmp_path / "sys")), "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen([sys.executable, efa_metrics.__file__], env=env)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
                    assert 'node_amazonefa_rx_bytes{device="rdmap80s0",port="1"} 987654321' in answer.read().decode()
                    break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.05)
    finally:
        process.terminate()
        process.wait(timeout=5)


@pytest.mark.parametrize("name", sorted(efa_metrics.COUNTERS))
def test_every_counter_read_is_one_the_efa_driver_exposes(name):
    """class_amazon_efa.go@7217859f lists the EFA driver's hw_counters files."""
    EFA_DRIVER_HW_COUNTERS = {
        "alloc_pd_err",
        "alloc_ucontext_err",
        "cmds_err",
        "completed_cmds",
        "create_ah_err",
        "create_cq_err",
        "create_qp_err",
        "keep_alive_rcvd",
        "impaired_remote_conn_events",
        "lifespan",
        "mmap_err",
        "no_completion_cmds",
        "rdma_read_bytes",
        "rdma_read_resp_bytes",
        "rdma_read_wr_err",
        "rdma_read_wrs",
        "rdma_write_bytes",
        "rdma_write_recv_bytes",
        "rdma_write_wr_err",
        "rdma_write_wrs",
        "recv_bytes",
        "recv_wrs",
        "reg_mr_err",
        "retrans_bytes",
        "retrans_pkts",
        "retrans_timeout_events",
        "rx_bytes",
        "rx_drops",
        "rx_pkts",
        "send_bytes",
        "send_wrs",
        "submitted_cmds",
        "tx_bytes",
        "tx_pkts",
        "unresponsive_remote_events",
    }
    assert name in EFA_DRIVER_HW_COUNTERS

"""EFA traffic counters of a node, in the Prometheus text format, served by the `efa-exporter`
DaemonSet on every EFA node (components/efa_exporter.py: `python efa_metrics.py`, the node's sysfs
at EFA_SYSFS, the port at EFA_METRICS_PORT).

EFA devices have no IB port counters: the `counters/` directory (port_xmit_data, port_rcv_data) that
node-exporter's infiniband collector turns into node_infiniband_port_data_*_bytes_total is created
for devices that answer performance-management MADs, and the EFA driver's statistics are the
`hw_counters/` files instead; node-exporter reads from hw_counters only Mellanox's names
(prometheus/procfs:sysfs/class_infiniband.go@v0.21.1 InfiniBandHwCounters, and prometheus/
node_exporter:collector/infiniband_linux.go@v1.12.1). The EFA counters (tx_bytes, rx_bytes, ...,
/sys/class/infiniband/<device>/ports/<port>/hw_counters/<name>) are listed by the EFA fork of
node-exporter AWS publishes in its samples (aws-samples/awsome-distributed-training:
4.validation_and_observability/3.efa-node-exporter/class_amazon_efa.go@7217859f); this module
exports them under that exporter's names, `node_amazonefa_<counter>{device, port}`
(amazon_efa_linux.go, same ref: subsystem "amazonefa", labels device and port; its README shows
`node_amazonefa_tx_pkts{device="rdmap113s0",port="1"}`), as counters.
node_exporter has no EFA collector of its own at the version the monitoring stack pins
(components/efa_exporter.py cites it). Standard library only.
"""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SYSFS = Path("/sys/class/infiniband")
PREFIX = "node_amazonefa_"
# The EFA driver's hw_counters this exporter reads, with the fork's descriptions
# (amazon_efa_linux.go@7217859f); a file a driver version lacks is skipped.
COUNTERS = {
    "tx_bytes": "Number of bytes transmitted",
    "rx_bytes": "Number of bytes received",
    "tx_pkts": "Number of packets transmitted",
    "rx_pkts": "Number of packets received",
    "rx_drops": "Number of packets dropped",
    "rdma_read_bytes": "Number of bytes read with RDMA",
    "rdma_write_bytes": "Number of bytes written with RDMA",
    "rdma_read_wr_err": "Number of RDMA read work requests with errors",
    "rdma_write_wr_err": "Number of RDMA write work requests with errors",
    "retrans_pkts": "Number of efa_srd packets retransmitted",
    "retrans_timeout_events": "Number of times SRD traffic reached timeout and required network path change",
    "impaired_remote_conn_events": "Number of EFA SRD connections that entered an impaired state",
    "unresponsive_remote_events": "Number of times an SRD connection's remote was unresponsive",
}
PORT = 9810  # ours: the exporter pod's own network namespace, named "metrics" in its DaemonSet


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def read_counters(sysfs: Path = SYSFS) -> dict[str, list[tuple[str, str, int]]]:
    """counter -> [(device, port, value)] for every EFA device port with hw_counters."""
    found: dict[str, list[tuple[str, str, int]]] = {name: [] for name in COUNTERS}
    if not sysfs.is_dir():
        return found
    for device in sorted(sysfs.iterdir()):
        ports = device / "ports"
        if not ports.is_dir():
            continue
        for port in sorted(ports.iterdir()):
            for name in COUNTERS:
                path = port / "hw_counters" / name
                try:
                    found[name].append((device.name, port.name, int(path.read_text().strip())))
                except (OSError, ValueError):
                    continue
    return found


def render(sysfs: Path = SYSFS) -> str:
    """The exposition text (text format 0.0.4): HELP, TYPE counter, one sample per device port."""
    lines = []
    for name, samples in read_counters(sysfs).items():
        if not samples:
            continue
        metric = PREFIX + name
        lines += [f"# HELP {metric} {COUNTERS[name]}", f"# TYPE {metric} counter"]
        lines += [f'{metric}{{device="{_escape(d)}",port="{_escape(p)}"}} {v}' for d, p, v in samples]
    return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    sysfs = SYSFS

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404)
            return
        body = render(self.sysfs).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # a scrape every 30 s is not worth a log line
        pass


def serve(port: int = PORT, sysfs: Path = SYSFS) -> ThreadingHTTPServer:
    """Serve /metrics on `port` in a daemon thread; returns the server (tests stop it)."""
    handler = type("Handler", (_Handler,), {"sysfs": sysfs})
    server = ThreadingHTTPServer(("", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="efa-metrics").start()
    return server


def main(environ: dict[str, str] | os._Environ = os.environ) -> None:
    """Serve until the pod stops: the port EFA_METRICS_PORT, the sysfs EFA_SYSFS (the host's,
    mounted read-only), defaults PORT and SYSFS."""
    serve(int(environ.get("EFA_METRICS_PORT", PORT)), Path(environ.get("EFA_SYSFS", str(SYSFS))))
    threading.Event().wait()  # the server's thread is a daemon: this one keeps the process


if __name__ == "__main__":
    main()

"""The EFA counters of every EFA node, for as long as the node runs: a DaemonSet of ours.

node-exporter has no EFA collector at the version kube-prometheus-stack brings (prometheus-node-
exporter 4.56.1, node_exporter 1.12.1: prometheus-community/helm-charts:charts/kube-prometheus-stack/
Chart.yaml and charts/prometheus-node-exporter/Chart.yaml@kube-prometheus-stack-88.5.3, the newest
tag readable here of the pinned 88.x; no `amazonefa` collector in prometheus/node_exporter:collector/
@v1.12.1, nor on its master at a7dcc3a0, 2026-08-08), and its infiniband collector
reads the port counters EFA devices lack (images/training/efa_metrics.py says which). So each EFA
node runs images/training/efa_metrics.py from the training image (the image the health gate runs,
already on the node once the gate has run there), reading the host's sysfs read-only, non-root,
with no capability. It tolerates every taint, so it starts while the node is still in its gate and
stays after the node passes (it selects the EFA label, never the health label); the health gate's
own pod is deleted when the node passes (components/healthgate.py), which is why the counters are
not served from there. No priority class: it must never preempt a training pod, and it asks for
little enough (10m CPU, 64Mi) to fit beside one (infra/offline/pods.py leaves a quarter of the memory).
"""

from __future__ import annotations

import pulumi

from components.device_plugins import EFA_NODES, EVERY_TAINT

NAME = "efa-exporter"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "higgsfield"}
PORT = 9810  # images/training/efa_metrics.py PORT; the scrape job finds it by its name, PORT_NAME
PORT_NAME = "metrics"
HOST_SYS = "/host/sys"  # the node's /sys, read-only (efa_metrics.py reads EFA_SYSFS)
NOBODY = 65534


def daemonset(image: pulumi.Input[str], namespace: str) -> dict:
    """One exporter pod on every node labelled as an EFA node (components/gpu_pools.py pool_labels)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": namespace, "labels": LABELS},
        "spec": {
            "selector": {"matchLabels": LABELS},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "nodeSelector": dict(EFA_NODES),
                    "tolerations": [EVERY_TAINT],
                    "automountServiceAccountToken": False,  # reads sysfs, talks to no API
                    "securityContext": {
                        "runAsUser": NOBODY,
                        "runAsGroup": NOBODY,
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "exporter",
                            "image": image,
                            "command": ["python", "/opt/higgsfield/efa_metrics.py"],
                            "env": [
                                {"name": "EFA_METRICS_PORT", "value": str(PORT)},
                                {"name": "EFA_SYSFS", "value": f"{HOST_SYS}/class/infiniband"},
                                {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                            ],
                            "ports": [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
                            "volumeMounts": [{"name": "sys", "mountPath": HOST_SYS, "readOnly": True}],
                        }
                    ],
                    "volumes": [{"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}}],
                },
            },
        },
    }

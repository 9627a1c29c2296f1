"""See the GPUs: metrics, a dashboard of our own, logs with job fields, and node health."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.addons import managed_addon
from components.charts import helm_release
from components.cpu_nodes import SYSTEM_LABELS
from components.device_plugins import EVERY_TAINT, GPU_NODES
from components.identity import pod_identity_role
from components.kubernetes_objects import KubernetesObject
from infra.config import Observability
from infra.versions import AddonVersion, Chart

NAMESPACE = "monitoring"
PROMETHEUS_URL = "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
GPU_UTILISATION_METRIC = "gpu_utilization"  # what the HPA of an elastic job asks for (custom metrics API)
CONTAINER_INSIGHTS_LOGS = ("application", "dataplane", "host", "performance")


def _panel(title: str, expr: str, unit: str, y: int, x: int) -> dict:
    return {
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "prometheus"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"expr": expr, "refId": "A", "legendFormat": "{{Hostname}} {{gpu}}"}],
    }


def gpu_dashboard() -> dict:
    """Higgsfield's Grafana dashboard: GPU utilisation, memory, power, XID errors, EFA traffic
    (the network NCCL runs over) and pending gangs per Volcano queue."""
    panels = [
        ("GPU utilisation", "avg by (Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL)", "percent"),
        ("GPU memory used", "sum by (Hostname, gpu) (DCGM_FI_DEV_FB_USED) * 1024 * 1024", "bytes"),
        ("GPU power", "sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)", "watt"),
        ("XID errors (last code, 0 = none)", "max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS)", "none"),
        ("EFA transmit (NCCL traffic)", "sum by (instance) (rate(node_infiniband_port_data_transmitted_bytes_total[2m]))", "Bps"),
        ("EFA receive (NCCL traffic)", "sum by (instance) (rate(node_infiniband_port_data_received_bytes_total[2m]))", "Bps"),
        ("Pending gangs per queue", "sum by (queue_name) (volcano_queue_pod_group_pending_count)", "none"),
        ("GPU temperature", "max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP)", "celsius"),
    ]
    return {
        "title": "Higgsfield GPUs",
        "uid": "higgsfield-gpus",
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "tags": ["higgsfield", "gpu"],
        "panels": [_panel(t, e, u, 8 * (i // 2), 12 * (i % 2)) for i, (t, e, u) in enumerate(panels)],
    }


def prometheus_adapter_rules() -> dict:
    """Expose the mean DCGM GPU utilisation of each pod as the custom metric `gpu_utilization`,
    so an elastic PyTorchJob's HPA can scale on GPU load."""
    return {
        "default": False,
        "custom": [
            {
                "seriesQuery": 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}',
                "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
                "name": {"matches": "^DCGM_FI_DEV_GPU_UTIL$", "as": GPU_UTILISATION_METRIC},
                "metricsQuery": "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
            }
        ],
    }


def _scrape(job: str, namespace: str, app: str | None = None) -> dict:
    """Scrape the pods of a namespace (of one app, if given) that expose a metrics port."""
    keep_app = [{"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"], "regex": app, "action": "keep"}] if app else []
    return {
        "job_name": job,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            *keep_app,
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "(metrics|http-metrics|monitor)", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "Hostname"},
        ],
    }


@dataclass(frozen=True)
class MonitoringArgs:
    cluster_name: str
    settings: Observability
    prometheus_stack: Chart
    dcgm_exporter: Chart
    prometheus_adapter: Chart
    ebs_csi: AddonVersion
    cloudwatch: AddonVersion
    node_monitoring: AddonVersion
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]
    tags: Mapping[str, str]


class Monitoring(pulumi.ComponentResource):
    """Metrics, logs and node health for the GPU platform.

    Creates: the EBS CSI add-on (Pod Identity) and an encrypted gp3 StorageClass for Prometheus'
    volume; kube-prometheus-stack on the system nodes (persistent, scraping Volcano and the
    Training Operator too); the DCGM exporter on GPU nodes (tolerating every taint);
    prometheus-adapter exposing `gpu_utilization` to HPAs; our Grafana dashboard as a ConfigMap;
    the CloudWatch Observability add-on (Pod Identity) with its log groups at the configured
    retention; the EKS node monitoring agent that node auto-repair acts on.
    Replaced when: the metrics volume size shrinks (PVCs only grow).
    """

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:observability:Monitoring", name, None, opts)
        cfg, tags = args.settings, dict(args.tags)
        child = pulumi.ResourceOptions(parent=self)

        def addon(addon: AddonVersion, identity: tuple[aws.iam.Role, str] | None = None, deps: Sequence[pulumi.Resource] = ()) -> aws.eks.Addon:
            return managed_addon(
                f"{name}-{addon.name}", args.cluster_name, addon, tags=tags,
                identity=(identity[0].arn, identity[1]) if identity else None,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *deps]),
            )

        ebs_role, _ = pod_identity_role(f"{name}-ebs-csi", tags, self, managed_policy_arn="arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy")
        ebs = addon(args.ebs_csi, (ebs_role, "ebs-csi-controller-sa"))
        in_cluster = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[*args.depends_on, ebs])
        storage_class = KubernetesObject(
            f"{name}-gp3",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": "gp3-encrypted"},
                "provisioner": "ebs.csi.aws.com",
                "parameters": {"type": "gp3", "encrypted": "true"},
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowVolumeExpansion": True,
                "reclaimPolicy": "Delete",
            },
            opts=in_cluster,
        )

        namespace = KubernetesObject(
            f"{name}-namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
        )

        def release(suffix: str, chart: Chart, values: dict, deps: Sequence[pulumi.Resource] = ()) -> pulumi.Resource:
            opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[*args.depends_on, namespace, *deps])
            return helm_release(f"{name}-{suffix}", chart, NAMESPACE, values, opts)

        on_system = {"nodeSelector": SYSTEM_LABELS}
        release("prometheus", args.prometheus_stack, {
            "prometheusOperator": on_system,
            "kube-state-metrics": on_system,
            "alertmanager": {"alertmanagerSpec": on_system},
            "grafana": {**on_system, "sidecar": {"dashboards": {"enabled": True, "label": "grafana_dashboard", "searchNamespace": "ALL"}}},
            "prometheus-node-exporter": {"tolerations": [{"operator": "Exists"}]},  # every node, GPU nodes included
            "prometheus": {
                "prometheusSpec": {
                    **on_system,
                    "retention": f"{cfg.metrics_retention_days}d",
                    "storageSpec": {
                        "volumeClaimTemplate": {
                            "spec": {
                                "storageClassName": "gp3-encrypted",
                                "accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": f"{cfg.metrics_storage_gib}Gi"}},
                            }
                        }
                    },
                    # Scrape configs rather than ServiceMonitors: the exporters need not wait for the
                    # operator's CRDs, so they install in parallel with the stack.
                    "additionalScrapeConfigs": [
                        _scrape("dcgm-exporter", NAMESPACE, app="dcgm-exporter"),
                        _scrape("volcano", "volcano-system"),
                        _scrape("training-operator", "kubeflow"),
                    ],
                }
            },
        }, deps=[storage_class])
        release("dcgm-exporter", args.dcgm_exporter, {
            "nodeSelector": GPU_NODES,
            # every taint, as a node-level daemon (NVIDIA/dcgm-exporter:deployment/values.yaml@4.4.1-4.6.0
            # `tolerations`, rendered by templates/daemonset.yaml)
            "tolerations": [EVERY_TAINT],
            "serviceMonitor": {"enabled": False},  # scraped through additionalScrapeConfigs
        })
        release("prometheus-adapter", args.prometheus_adapter, {  # retries until Prometheus answers
            **on_system,
            "prometheus": {"url": PROMETHEUS_URL.rsplit(":", 1)[0], "port": 9090},
            "rules": prometheus_adapter_rules(),
        })
        KubernetesObject(
            f"{name}-dashboard",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "higgsfield-gpu-dashboard", "namespace": NAMESPACE, "labels": {"grafana_dashboard": "1"}},
                "data": {"higgsfield-gpus.json": json.dumps(gpu_dashboard(), indent=1)},
            },
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace]),
        )

        # Node and pod logs: Fluent Bit of the CloudWatch Observability add-on, into log groups we
        # create first so that their retention is ours. Kubernetes metadata (node, namespace, pod,
        # labels - the operator's training.kubeflow.org/job-name and replica-index) are fields.
        groups = [
            aws.cloudwatch.LogGroup(
                f"{name}-logs-{kind}",
                name=f"/aws/containerinsights/{args.cluster_name}/{kind}",
                retention_in_days=cfg.log_retention_days,
                tags=tags,
                opts=child,
            )
            for kind in CONTAINER_INSIGHTS_LOGS
        ]
        cloudwatch_role, _ = pod_identity_role(f"{name}-cloudwatch", tags, self, managed_policy_arn="arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy")
        addon(args.cloudwatch, (cloudwatch_role, "cloudwatch-agent"), deps=groups)
        addon(args.node_monitoring)
        self.register_outputs({"grafana_dashboard": "higgsfield-gpus"})

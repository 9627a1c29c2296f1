"""See the GPUs: metrics, a dashboard of our own, logs with job fields, and node health."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_random as random

from components import container_logs, efa_exporter
from components.addons import NODE_MONITORING_AGENT_CONFIGURATION, managed_addon
from components.charts import helm_release
from components.cpu_nodes import ON_SYSTEM_NODES
from components.device_plugins import EVERY_TAINT, GPU_NODES
from components.identity import pod_identity_role
from components.job_watchdog import APP_LABELS as WATCHDOG_PODS
from components.job_watchdog import NAMESPACE as WATCHDOG_NAMESPACE
from components.kubernetes_objects import KubernetesObject, preview_reads
from components.workloads import (
    DCGM_JOB,
    EFA_JOB,
    KSM_NODE_LABELS,
    PROGRESS_SCRAPE_LIMITS,
    PROGRESS_SERIES,
    TRAINING_PROGRESS_JOB,
    VOLCANO_CONTROLLER_JOB,
    VOLCANO_SCHEDULER_JOB,
    custom_rules,
    external_rules,
    serving_scrape_job,
)
from infra.config import Observability
from infra.core.names import JOB_NAME_LABEL, KUBE_SYSTEM, PROGRESS_PORT, PROGRESS_PORT_NAME
from infra.core.versions import CLOUDWATCH_DCGM_OFF, AddonVersion, Chart

NAMESPACE = "monitoring"
PROMETHEUS_URL = "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
# Grafana's admin login comes from a Secret of ours with a generated password (GRAFANA_ADMIN_KEYS:
# the chart's `admin.userKey`/`admin.passwordKey` defaults), never from the chart: with
# `admin.existingSecret` set the chart renders no admin Secret of its own (grafana-community/
# helm-charts:charts/grafana/templates/secret.yaml@grafana-12.11.1, the chart kube-prometheus-stack
# 88.5.3 depends on). kube-prometheus-stack shipped `prom-operator` as the password until 79.x
# (charts/kube-prometheus-stack/UPGRADE.md@kube-prometheus-stack-88.5.3, "From 78.x to 79.x").
GRAFANA_ADMIN_SECRET = "grafana-admin"
GRAFANA_ADMIN_KEYS = {"userKey": "admin-user", "passwordKey": "admin-password"}
GRAFANA_ADMIN_USER = "admin"
GRAFANA_PASSWORD_LENGTH = 40
GPU_UTILISATION_METRIC = "gpu_utilization"  # what the HPA of an elastic job asks for (custom metrics API)
CONTAINER_INSIGHTS_LOGS = ("application", "dataplane", "host", "performance")
EFA_TX, EFA_RX = "node_amazonefa_tx_bytes", "node_amazonefa_rx_bytes"  # images/training/efa_metrics.py


# The EBS class the monitoring stack's volumes use; no team namespace may claim from it (components/teams.py).
EBS_STORAGE_CLASS = "gp3-encrypted"


def _panel(title: str, expr: str, unit: str, y: int, x: int, legend: str = "{{Hostname}} {{gpu}}") -> dict:
    return {
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "prometheus"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"expr": expr, "refId": "A", "legendFormat": legend}],
    }


# Goodput as the dashboard sees it: the share of the last hour each job made steps (a step within the
# last minute counts), from its progress series (images/training/progress.py). It sees a job only
# while its pods run, so waiting for capacity and the gate are outside it; infra/offline/goodput.py
# keeps the whole account, phase by phase.
TRAINING_SHARE_EXPR = (
    "avg_over_time(((time() - max by (namespace, job_name) "
    f'(higgsfield_training_progress_timestamp_seconds{{job="{TRAINING_PROGRESS_JOB}"}})) < bool 60)[1h:1m])'
)
TEAM_TRAINING_SHARE_EXPR = f"avg by (namespace) ({TRAINING_SHARE_EXPR})"
# The share of the last hour each job's ranks were blocked in checkpoint saves (their counter,
# images/training/progress.py): goodput's checkpoint phase as the dashboard sees it.
CHECKPOINT_SHARE_EXPR = (
    "max by (namespace, job_name) "
    f'(rate(higgsfield_training_checkpoint_seconds_total{{job="{TRAINING_PROGRESS_JOB}"}}[1h]))'
)


def gpu_dashboard() -> dict:
    """Higgsfield's Grafana dashboard: GPU utilisation, memory, power, XID errors, EFA traffic
    (the network NCCL runs over), pending gangs per Volcano queue, and training goodput per job and
    per team; each series of the exporter meant (its `job`, components/workloads.py), never a tenant's
    of the same name."""
    dcgm, efa, volcano = (f'{{job="{j}"}}' for j in (DCGM_JOB, EFA_JOB, VOLCANO_CONTROLLER_JOB))
    panels = [
        ("GPU utilisation", f"avg by (Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL{dcgm})", "percent"),
        ("GPU memory used", f"sum by (Hostname, gpu) (DCGM_FI_DEV_FB_USED{dcgm}) * 1024 * 1024", "bytes"),
        ("GPU power", f"sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE{dcgm})", "watt"),
        ("XID errors (last code, 0 = none)", f"max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS{dcgm})", "none"),
        # EFA devices have no IB port counters (node_infiniband_port_data_*: node-exporter reads them
        # from ports/N/counters, which EFA lacks); the efa-exporter DaemonSet exports the EFA driver's
        # hw_counters as node_amazonefa_* (images/training/efa_metrics.py, the names of
        # aws-samples/awsome-distributed-training:4.validation_and_observability/3.efa-node-exporter@7217859f).
        ("EFA transmit (NCCL traffic)", f"sum by (Hostname) (rate({EFA_TX}{efa}[2m]))", "Bps"),
        ("EFA receive (NCCL traffic)", f"sum by (Hostname) (rate({EFA_RX}{efa}[2m]))", "Bps"),
        ("Pending gangs per queue", f"sum by (queue_name) (volcano_queue_pod_group_pending_count{volcano})", "none"),
        ("GPU temperature", f"max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP{dcgm})", "celsius"),
    ]
    return {
        "title": "Higgsfield GPUs",
        "uid": "higgsfield-gpus",
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "tags": ["higgsfield", "gpu"],
        "panels": [
            *(_panel(t, e, u, 8 * (i // 2), 12 * (i % 2)) for i, (t, e, u) in enumerate(panels)),
            _panel(
                "Training goodput per job (share of the last hour stepping)",
                TRAINING_SHARE_EXPR,
                "percentunit",
                8 * ((len(panels) + 1) // 2),
                0,
                "{{namespace}}/{{job_name}}",
            ),
            _panel(
                "Training goodput per team",
                TEAM_TRAINING_SHARE_EXPR,
                "percentunit",
                8 * ((len(panels) + 1) // 2),
                12,
                "{{namespace}}",
            ),
            _panel(
                "Checkpoint stalls per job (share of the last hour)",
                CHECKPOINT_SHARE_EXPR,
                "percentunit",
                8 * ((len(panels) + 3) // 2),
                0,
                "{{namespace}}/{{job_name}}",
            ),
        ],
    }


def prometheus_adapter_rules() -> dict:
    """Expose the mean DCGM GPU utilisation of each pod as the custom metric `gpu_utilization`,
    so an elastic PyTorchJob's HPA can scale on GPU load."""
    return {
        "default": False,
        "custom": [
            {
                "seriesQuery": f'DCGM_FI_DEV_GPU_UTIL{{job="{DCGM_JOB}",namespace!="",pod!=""}}',
                "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
                "name": {"matches": "^DCGM_FI_DEV_GPU_UTIL$", "as": GPU_UTILISATION_METRIC},
                "metricsQuery": f'avg(<<.Series>>{{job="{DCGM_JOB}",<<.LabelMatchers>>}}) by (<<.GroupBy>>)',
            },
            *custom_rules(),  # the serving class's queue depth (components/workloads.py)
        ],
        "external": external_rules(),  # the elastic jobs' room to grow (components/workloads.py)
    }


@dataclass(frozen=True)
class ScrapeTarget:
    """What an upstream exporter declares, read at its pinned ref: the namespace, the labels and
    the named port of the Service (or pod) Prometheus discovers it by."""

    job: str
    namespace: str
    role: str  # "endpoints": a Service's endpoints; "pod": the pods themselves
    labels: Mapping[str, str]
    port: str
    source: str


# Volcano's chart declares no container port on the scheduler or controller pods; it puts each
# behind a Service labelled `app: volcano-scheduler` / `app: volcano-controller` with a port named
# "metrics" (8080 / 8081, the binaries' --listen-address defaults) (volcano-sh/volcano:
# installer/helm/chart/volcano/templates/scheduler.yaml, controllers.yaml, cmd/*/app/options/
# options.go@v1.15.1). The pending-gangs series volcano_queue_pod_group_pending_count comes from the
# controller (pkg/controllers/metrics/queue.go, same ref).
# The training operator's pod declares port 8080 without a name; its Service `training-operator`
# (label app: training-operator) names it "monitoring-port" (kubeflow/trainer:manifests/base/
# deployment.yaml and service.yaml@v1.9.4, namespace kubeflow from overlays/standalone).
# What the DCGM exporter watches: the chart's default list without its five DCGM_FI_PROF_* fields
# (NVIDIA/dcgm-exporter:deployment/templates/metrics-configmap.yaml@4.5.3-4.8.2; `customMetrics`
# replaces the whole list, values.yaml there). Profiling fields hold a driver-wide lock in the
# exporter's own host engine while the health gate runs DCGM's diagnostics in a second one beside it
# (components/healthgate.py), which NVIDIA's DCGM documentation advises against (one host engine a
# node); nothing here reads them. Unverified here: `dcgmi diag -r 2 -j` in the gate's DCGM container
# with the exporter running, on a GPU node.
DCGM_EXPORTER_FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
}


def dcgm_exporter_metrics() -> str:
    """The exporter's metrics file (`customMetrics`): one `FIELD, type, help` line a field."""
    return "".join(f"{field}, {kind}, {field}\n" for field, kind in DCGM_EXPORTER_FIELDS.items())


# The DCGM exporter's pods carry app.kubernetes.io/name=dcgm-exporter and a container port named
# "metrics" (NVIDIA/dcgm-exporter:deployment/templates/daemonset.yaml and _helpers.tpl@4.5.3-4.8.2).
SCRAPE_TARGETS = (
    # The efa-exporter pods (one per EFA node, in this namespace) serve the node's EFA counters on the
    # container port named "metrics" (components/efa_exporter.py, images/training/efa_metrics.py).
    ScrapeTarget(
        EFA_JOB,
        NAMESPACE,
        "pod",
        {"app.kubernetes.io/name": efa_exporter.NAME},
        efa_exporter.PORT_NAME,
        "components/efa_exporter.py (ours); counters: aws-samples/awsome-distributed-training:"
        "4.validation_and_observability/3.efa-node-exporter/class_amazon_efa.go@7217859f",
    ),
    ScrapeTarget(
        DCGM_JOB,
        NAMESPACE,
        "pod",
        {"app.kubernetes.io/name": "dcgm-exporter"},
        "metrics",
        "NVIDIA/dcgm-exporter:deployment/templates/daemonset.yaml@4.5.3-4.8.2",
    ),
    ScrapeTarget(
        VOLCANO_SCHEDULER_JOB,
        "volcano-system",
        "endpoints",
        {"app": "volcano-scheduler"},
        "metrics",
        "volcano-sh/volcano:installer/helm/chart/volcano/templates/scheduler.yaml@v1.15.1",
    ),
    ScrapeTarget(
        VOLCANO_CONTROLLER_JOB,
        "volcano-system",
        "endpoints",
        {"app": "volcano-controller"},
        "metrics",
        "volcano-sh/volcano:installer/helm/chart/volcano/templates/controllers.yaml@v1.15.1",
    ),
    ScrapeTarget(
        "training-operator",
        "kubeflow",
        "endpoints",
        {"app": "training-operator"},
        "monitoring-port",
        "kubeflow/trainer:manifests/base/service.yaml@v1.9.4",
    ),
)
# Jobs whose series describe another pod: the exporter writes the workload's `pod`, `namespace`
# and `container` itself (DCGM_EXPORTER_KUBERNETES=true in its DaemonSet,
# internal/pkg/transformation/const.go@4.5.3-4.8.2). honor_labels keeps them as scraped; without
# it Prometheus renames them exported_pod/exported_namespace and prometheus-adapter would charge
# the GPU to the exporter (prometheus.io/docs/prometheus/latest/configuration/configuration/
# #scrape_config, honor_labels). The chart's own ServiceMonitor exposes the same switch
# (serviceMonitor.honorLabels, deployment/values.yaml@4.5.3-4.8.2).
HONOR_LABELS = (DCGM_JOB,)


def _meta_label(role: str, name: str) -> str:
    """Prometheus' Kubernetes SD label of a pod/service label (non [a-zA-Z0-9_] characters become _)."""
    kind = "pod" if role == "pod" else "service"
    return f"__meta_kubernetes_{kind}_label_" + "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _scrape(target: ScrapeTarget) -> dict:
    """A scrape job keeping exactly what `target` declares: its labels and its named port."""
    port = (
        "__meta_kubernetes_pod_container_port_name" if target.role == "pod" else "__meta_kubernetes_endpoint_port_name"
    )
    keep = [
        {"source_labels": [_meta_label(target.role, k)], "regex": v, "action": "keep"} for k, v in target.labels.items()
    ]
    honor = target.job in HONOR_LABELS
    # The scraping pod is `instance`-level metadata; for honor_labels jobs it must not take `pod`.
    own_pod = [] if honor else [{"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}]
    return {
        "job_name": target.job,
        **({"honor_labels": True} if honor else {}),
        "kubernetes_sd_configs": [{"role": target.role, "namespaces": {"names": [target.namespace]}}],
        "relabel_configs": [
            *keep,
            {"source_labels": [port], "regex": target.port, "action": "keep"},
            *own_pod,
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "Hostname"},
        ],
    }


# The pods of the monitoring stack, by the labels their controllers put on them (release
# `kube-prometheus-stack`, components/charts.py names releases after their chart):
# - Prometheus and Alertmanager pods: `app.kubernetes.io/name: prometheus` / `alertmanager`
#   (makeSelectorLabels in prometheus-operator/prometheus-operator:pkg/prometheus/server/operator.go
#   and pkg/alertmanager/operator.go@v0.93.0; the chart's operator is v0.93.1);
# - Grafana: `app.kubernetes.io/name: grafana` (grafana.selectorLabels, charts/grafana/templates/
#   _helpers.tpl@grafana-12.11.1);
# - prometheus-adapter: `app.kubernetes.io/name: prometheus-adapter`, secure port 6443
#   (prometheus-community/helm-charts:charts/prometheus-adapter/templates/_helpers.tpl, values.yaml
#   listenPort@prometheus-adapter-5.3.0);
# - the operator: `app: kube-prometheus-stack-operator`, its admission webhook on container port
#   10250 (templates/prometheus-operator/deployment.yaml, values.yaml prometheusOperator.tls.
#   internalPort@kube-prometheus-stack-88.5.3).
PROMETHEUS_PODS = {"app.kubernetes.io/name": "prometheus"}
ALERTMANAGER_PODS = {"app.kubernetes.io/name": "alertmanager"}
GRAFANA_PODS = {"app.kubernetes.io/name": "grafana"}
ADAPTER_PODS = {"app.kubernetes.io/name": "prometheus-adapter"}
OPERATOR_PODS = {"app": "kube-prometheus-stack-operator"}
PROMETHEUS_PORT, ALERTMANAGER_PORT, ALERTMANAGER_CLUSTER_PORT, GRAFANA_PORT = 9090, 9093, 9094, 3000
OPERATOR_WEBHOOK_PORT, ADAPTER_PORT = 10250, 6443


def _tcp(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": p} for p in ports]


# The job watchdog (components/job_watchdog.py) reads the ranks' progress from Prometheus: its pods,
# in its own namespace (by the namespace's immutable kubernetes.io/metadata.name label).
WATCHDOG_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": WATCHDOG_NAMESPACE}},
    "podSelector": {"matchLabels": dict(WATCHDOG_PODS)},
}


# The labels a progress series keeps: the target's (Prometheus' job and instance, and the relabelled
# ones below) and progress.py's own.
PROGRESS_LABELS = (
    "__name__",
    "job",
    "instance",
    "namespace",
    "job_name",
    "pod",
    "pod_uid",
    "Hostname",
    "rank",
    "node",
    "recreate",
)


def training_progress_scrape_job() -> dict:
    """Every PyTorch job pod's progress (images/training/progress.py) on its container port named
    `progress`, in any namespace, labelled with what the job watchdog joins on: the namespace, the
    Kubeflow job's name (the operator's pod label), the pod, its uid (a recreated pod has the same
    name), and the node (`Hostname`, as the GPU series have it) - all from Prometheus' Kubernetes SD
    meta labels (prometheus.io/docs/prometheus/latest/configuration/configuration/#kubernetes_sd_config,
    role pod), never from the pod's own text. Any pod may join it (a container port named `progress` and the
    job-name label are the pod's own), so, as the serving scrape: at most PROGRESS_SCRAPE_LIMITS per pod, or
    the scrape fails (sample_limit, label_limit, body_size_limit: prometheus.io/docs/prometheus/latest/
    configuration/configuration/#scrape_config), and only progress.py's series are kept.

    Per pod, not per port: role pod makes one target per declared container port, and a port name need
    only be unique within a container, so a pod of 20 containers each declaring `progress` would be 20
    targets. Only the port number the platform serves on (PROGRESS_PORT) is kept, and no label of the
    container reaches the target, so those targets share one label set and address, which Prometheus
    scrapes once. Per series: only the target's labels and progress.py's own (rank, node, recreate)
    are kept, and a sample whose rank is not a number of at most 5 digits, or whose node is not a DNS
    name, is dropped, so a pod cannot mint series from label values of its choosing beyond those."""
    job_label = "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in JOB_NAME_LABEL)
    return {
        "job_name": TRAINING_PROGRESS_JOB,
        **PROGRESS_SCRAPE_LIMITS,
        "kubernetes_sd_configs": [{"role": "pod"}],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": PROGRESS_PORT_NAME,
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                "regex": str(PROGRESS_PORT),
                "action": "keep",
            },
            {"source_labels": [job_label], "regex": ".+", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": [job_label], "target_label": "job_name"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_uid"], "target_label": "pod_uid"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "Hostname"},
        ],
        "metric_relabel_configs": [
            {"source_labels": ["__name__"], "regex": "|".join(PROGRESS_SERIES), "action": "keep"},
            {"regex": "|".join(PROGRESS_LABELS), "action": "labelkeep"},
            # an absent label is the empty value, which each keep admits
            {"source_labels": ["rank"], "regex": "|[0-9]{1,5}", "action": "keep"},
            {"source_labels": ["node"], "regex": "|[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", "action": "keep"},
            {"source_labels": ["recreate"], "regex": "|true", "action": "keep"},
        ],
    }


def monitoring_network_policies(api_server_cidr: str) -> list[dict]:
    """Who may reach what in the monitoring namespace: nothing by default; Prometheus scrapes
    every pod here and sends alerts to Alertmanager; Grafana and prometheus-adapter query
    Prometheus; Alertmanager replicas gossip; the API server calls the operator's admission
    webhook and prometheus-adapter's custom metrics API (from its interfaces in the VPC: both
    endpoints authenticate the caller). No rule admits a pod of another namespace to Prometheus,
    Alertmanager or Grafana, so no tenant can query, silence or reconfigure them. Traffic from a
    pod's own node (kubelet probes, `kubectl port-forward`) is not subject to these policies in the
    VPC CNI (the node IP is always allowed: aws/aws-network-policy-agent#56)."""

    def policy(name: str, pods: Mapping[str, str], ingress: list[dict]) -> dict:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "podSelector": {"matchLabels": dict(pods)} if pods else {},
                "policyTypes": ["Ingress"],
                **({"ingress": ingress} if ingress else {}),
            },
        }

    from_pods = lambda labels: {"podSelector": {"matchLabels": dict(labels)}}  # noqa: E731 (this namespace only)
    return [
        policy("default-deny-ingress", {}, []),
        policy("allow-scrape-from-prometheus", {}, [{"from": [from_pods(PROMETHEUS_PODS)]}]),
        policy(
            "allow-queries-to-prometheus",
            PROMETHEUS_PODS,
            [
                {
                    "from": [from_pods(GRAFANA_PODS), from_pods(ADAPTER_PODS), WATCHDOG_PEER],
                    "ports": _tcp(PROMETHEUS_PORT),
                }
            ],
        ),
        policy(
            "allow-alertmanager-cluster",
            ALERTMANAGER_PODS,
            [
                {
                    "from": [from_pods(ALERTMANAGER_PODS)],
                    "ports": [*_tcp(ALERTMANAGER_CLUSTER_PORT), {"protocol": "UDP", "port": ALERTMANAGER_CLUSTER_PORT}],
                }
            ],
        ),
        policy(
            "allow-api-server-to-operator-webhook",
            OPERATOR_PODS,
            [{"from": [{"ipBlock": {"cidr": api_server_cidr}}], "ports": _tcp(OPERATOR_WEBHOOK_PORT)}],
        ),
        policy(
            "allow-api-server-to-prometheus-adapter",
            ADAPTER_PODS,
            [{"from": [{"ipBlock": {"cidr": api_server_cidr}}], "ports": _tcp(ADAPTER_PORT)}],
        ),
    ]


def prometheus_stack_values(cfg: Observability, rules: Sequence[dict] = ()) -> dict:
    """kube-prometheus-stack's values (keys read in charts/kube-prometheus-stack/values.yaml@
    kube-prometheus-stack-88.5.3 and the grafana chart it bundles, charts/grafana/values.yaml@
    grafana-12.11.1): every part on the (tainted) system nodes, Grafana's admin from our Secret,
    its sidecars and RBAC in its own namespace only, no Prometheus admin API."""
    on_system = dict(ON_SYSTEM_NODES)
    own_namespace = [NAMESPACE]
    return {
        # The operator, its admission webhook's certificate Jobs (pre-install hooks: they run on the
        # first deploy, before anything else here) and the optional webhook Deployment.
        "prometheusOperator": {**on_system, "admissionWebhooks": {"patch": on_system, "deployment": on_system}},
        "kube-state-metrics": {
            **on_system,
            "metricLabelsAllowlist": KSM_NODE_LABELS,
        },  # the pool label, for the elastic room
        "alertmanager": {"alertmanagerSpec": on_system},
        "grafana": {
            **on_system,
            "admin": {"existingSecret": GRAFANA_ADMIN_SECRET, **GRAFANA_ADMIN_KEYS},
            # rbac.namespaced: a Role in the monitoring namespace instead of the ClusterRole that
            # grants get/watch/list on every ConfigMap and Secret of the cluster whenever a sidecar
            # is on (templates/clusterrole.yaml vs role.yaml@grafana-12.11.1).
            "rbac": {"namespaced": True},
            # The sidecars look only here (searchNamespace: kube-prometheus-stack sets ALL for
            # dashboards; a list is joined into the sidecar's NAMESPACE: templates/_pod.tpl).
            "sidecar": {
                "dashboards": {"enabled": True, "label": "grafana_dashboard", "searchNamespace": own_namespace},
                "datasources": {"searchNamespace": own_namespace},
            },
        },
        "prometheus-node-exporter": {"tolerations": [EVERY_TAINT]},  # every node, GPU nodes included
        "prometheus": {
            "prometheusSpec": {
                **on_system,
                # No TSDB admin API (delete series, snapshots): the chart's default, kept explicit
                # (the operator adds --web.enable-admin-api only when set: pkg/prometheus/server/
                # statefulset.go@v0.93.0).
                "enableAdminAPI": False,
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
                    *(_scrape(target) for target in SCRAPE_TARGETS),
                    serving_scrape_job(),
                    training_progress_scrape_job(),
                ],
            }
        },
        # Our alerts as PrometheusRules the chart creates with its release labels, which its own
        # Prometheus selects (templates/prometheus/additionalPrometheusRules.yaml, prometheus-community/
        # helm-charts:charts/kube-prometheus-stack; check: `helm template` of the pinned chart with these
        # values lists PrometheusRule kube-prometheus-stack-higgsfield-training).
        **({"additionalPrometheusRulesMap": {"higgsfield-training": {"groups": list(rules)}}} if rules else {}),
    }


@dataclass(frozen=True, kw_only=True)
class MonitoringArgs:
    cluster_name: str
    settings: Observability
    prometheus_stack: Chart
    dcgm_exporter: Chart
    prometheus_adapter: Chart
    addons: Mapping[str, AddonVersion]  # components/addons.py stack_addons: the observability ones among them
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]
    tags: Mapping[str, str]
    api_server_cidr: str  # where the private API endpoint's interfaces live (the VPC)
    log_key_arn: pulumi.Input[str] | None = None  # the stack's CloudWatch Logs key (components/logs.py)
    log_key_ready: Sequence[pulumi.Resource] = ()  # the log key, created with its policy (CloudWatch Logs may use it)
    efa_exporter_image: pulumi.Input[str] | None = None  # the image with efa_metrics.py (the gate's); None: no exporter
    alert_rules: Sequence[dict] = ()  # PrometheusRule groups (components/job_watchdog.py alert_rules)
    teams: Sequence[str] = ()  # team namespaces: each one's container lines in a log group of its own


class Monitoring(pulumi.ComponentResource):
    """Metrics, logs and node health for the GPU platform.

    Creates: the EBS CSI add-on (Pod Identity) and an encrypted gp3 StorageClass for Prometheus'
    volume; kube-prometheus-stack on the system nodes (persistent, scraping Volcano and the
    Training Operator too); the DCGM exporter on GPU nodes (tolerating every taint);
    prometheus-adapter exposing `gpu_utilization` to HPAs; with `efa_exporter_image`, the EFA
    counters' DaemonSet, which runs a pod on every EFA node and none elsewhere (components/efa_exporter.py);
    our Grafana dashboard as a ConfigMap;
    the CloudWatch Observability add-on (Pod Identity, its own DCGM exporter off: one exporter per
    GPU holds the profiling counters) with its log groups at the configured retention; the EKS
    node monitoring agent that node auto-repair acts on, without its kernel and runtime monitors
    (NODE_MONITORING_AGENT_CONFIGURATION says why); Grafana's admin Secret with a generated
    password; NetworkPolicies that keep every other namespace out of the monitoring namespace.
    Replaced when: the metrics volume size shrinks (PVCs only grow).
    """

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:observability:Monitoring", name, None, opts)
        cfg, tags = args.settings, dict(args.tags)

        def addon(
            addon_name: str,
            identity: tuple[aws.iam.Role, str] | None = None,
            deps: Sequence[pulumi.Resource] = (),
            configuration: Mapping[str, object] | None = None,
        ) -> aws.eks.Addon:
            return managed_addon(
                f"{name}-{addon_name}",
                args.cluster_name,
                args.addons[addon_name],
                tags=tags,
                identity=(identity[0].arn, identity[1]) if identity else None,
                configuration=configuration,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *deps]),
            )

        ebs_role, _ = pod_identity_role(
            f"{name}-ebs-csi",
            tags,
            self,
            cluster=args.cluster_name,
            namespace=KUBE_SYSTEM,  # the add-on's namespace
            service_account="ebs-csi-controller-sa",
            managed_policy_arn="arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy",
        )
        ebs = addon("aws-ebs-csi-driver", (ebs_role, "ebs-csi-controller-sa"))
        in_cluster = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[*args.depends_on, ebs])
        storage_class = KubernetesObject(
            f"{name}-gp3",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": EBS_STORAGE_CLASS},
                "provisioner": "ebs.csi.aws.com",
                "parameters": {"type": "gp3", "encrypted": "true"},
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowVolumeExpansion": True,
                "reclaimPolicy": "Delete",
            },
            opts=in_cluster,
        )

        namespace = KubernetesObject(
            f"{name}-namespace",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
        )

        def release(suffix: str, chart: Chart, values: dict, deps: Sequence[pulumi.Resource] = ()) -> pulumi.Resource:
            opts = pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[*args.depends_on, namespace, *deps]
            )
            return helm_release(f"{name}-{suffix}", chart, NAMESPACE, values, opts)

        after_namespace = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace])
        # the EFA exporter's DaemonSet (the dashboards, ConfigMaps, by name: NAMED_READS)
        if args.efa_exporter_image is not None:
            preview_reads(name, NAMESPACE, {"apps": ["daemonsets"]}, after_namespace)
        # Grafana's admin password: generated once, kept in the stack's state as a secret.
        password = random.RandomPassword(
            f"{name}-grafana-admin",
            length=GRAFANA_PASSWORD_LENGTH,
            special=False,
            opts=pulumi.ResourceOptions(parent=self),
        )
        admin_secret = KubernetesObject(
            f"{name}-grafana-admin",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {"name": GRAFANA_ADMIN_SECRET, "namespace": NAMESPACE},
                "stringData": {
                    GRAFANA_ADMIN_KEYS["userKey"]: GRAFANA_ADMIN_USER,
                    GRAFANA_ADMIN_KEYS["passwordKey"]: password.result,
                },
            },
            opts=pulumi.ResourceOptions.merge(
                after_namespace, pulumi.ResourceOptions(additional_secret_outputs=["stringData", "data"])
            ),
        )
        # The policies exist before anything in the namespace runs.
        policies = [
            KubernetesObject(f"{name}-netpol-{p['metadata']['name']}", p, opts=after_namespace)
            for p in monitoring_network_policies(args.api_server_cidr)
        ]
        on_system = dict(ON_SYSTEM_NODES)
        release(
            "prometheus",
            args.prometheus_stack,
            prometheus_stack_values(cfg, args.alert_rules),
            deps=[storage_class, admin_secret, *policies],
        )
        release(
            "dcgm-exporter",
            args.dcgm_exporter,
            {
                "nodeSelector": GPU_NODES,
                # every taint, as a node-level daemon (NVIDIA/dcgm-exporter:deployment/values.yaml@4.5.3-4.8.2
                # `tolerations`, rendered by templates/daemonset.yaml)
                "tolerations": [EVERY_TAINT],
                "serviceMonitor": {"enabled": False},  # scraped through additionalScrapeConfigs
                "customMetrics": dcgm_exporter_metrics(),
            },
        )
        release(
            "prometheus-adapter",
            args.prometheus_adapter,
            {  # retries until Prometheus answers
                # `nodeSelector`, `tolerations` (charts/prometheus-adapter/values.yaml@prometheus-adapter-5.3.0)
                **on_system,
                "prometheus": {"url": PROMETHEUS_URL.rsplit(":", 1)[0], "port": 9090},
                "rules": prometheus_adapter_rules(),
            },
        )
        if args.efa_exporter_image is not None:
            KubernetesObject(
                f"{name}-efa-exporter",
                efa_exporter.daemonset(args.efa_exporter_image, NAMESPACE),
                opts=pulumi.ResourceOptions(
                    parent=self, provider=args.provider, depends_on=[*args.depends_on, namespace, *policies]
                ),
            )
        KubernetesObject(
            f"{name}-dashboard",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "higgsfield-gpu-dashboard",
                    "namespace": NAMESPACE,
                    "labels": {"grafana_dashboard": "1"},
                },
                "data": {"higgsfield-gpus.json": json.dumps(gpu_dashboard(), indent=1)},
            },
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace]),
        )

        # Node and pod logs: Fluent Bit of the CloudWatch Observability add-on, into log groups we
        # create first so that their retention and key are ours (the agent creates
        # /aws/containerinsights/CLUSTER/application, /host and /dataplane if missing:
        # docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-setup-logs-FluentBit.html;
        # and /performance for the metrics' log events: .../Container-Insights-reference.html).
        # Writers need no KMS rights: CloudWatch Logs encrypts with the key its policy lets it use.
        # Kubernetes metadata (node, namespace, pod, and - with our application-log.conf, Labels On -
        # the operator's job-name, replica-type and replica-index labels) are fields.
        groups = [
            aws.cloudwatch.LogGroup(
                f"{name}-logs-{kind}",
                name=f"/aws/containerinsights/{args.cluster_name}/{kind}",
                retention_in_days=cfg.log_retention_days,
                kms_key_id=args.log_key_arn,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.log_key_ready)),
            )
            for kind in CONTAINER_INSIGHTS_LOGS
        ]
        # Each team's container lines in a group of its own (components/container_logs.py), and a managed
        # policy that reads that group and no other, for the team's AWS role (docs/logs.md).
        for team in args.teams:
            group = aws.cloudwatch.LogGroup(
                f"{name}-logs-team-{team}",
                name=container_logs.team_log_group(args.cluster_name, team),
                retention_in_days=cfg.log_retention_days,
                kms_key_id=args.log_key_arn,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.log_key_ready)),
            )
            groups.append(group)
            aws.iam.Policy(
                f"{name}-logs-team-{team}-reader",
                name=f"{args.cluster_name}-logs-{team}",
                description=f"Read team {team}'s container logs in {args.cluster_name}, and no other team's",
                policy=group.arn.apply(container_logs.team_log_reader_policy),
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self),
            )
        cloudwatch_role, _ = pod_identity_role(
            f"{name}-cloudwatch",
            tags,
            self,
            cluster=args.cluster_name,
            namespace="amazon-cloudwatch",  # the add-on's namespace
            service_account="cloudwatch-agent",
            managed_policy_arn="arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy",
        )
        # Container lines carry the pod's labels (job, replica type and index) and node: components/container_logs.py.
        addon(
            "amazon-cloudwatch-observability",
            (cloudwatch_role, "cloudwatch-agent"),
            deps=groups,
            configuration=container_logs.addon_configuration(CLOUDWATCH_DCGM_OFF, args.teams),
        )
        addon("eks-node-monitoring-agent", configuration=NODE_MONITORING_AGENT_CONFIGURATION)
        self.register_outputs({"grafana_dashboard": "higgsfield-gpus"})

"""The signals the classes of work scale on (docs/workload-classes.md), as prometheus-adapter
rules and the scrape job they read. Pure data; components/observability.py installs them.

- `higgsfield_elastic_room{queue_name, pool}` (external metrics API), what an elastic PyTorchJob's
  HPA scales its workers by: (GPUs the job's queue holds + GPUs on the pool's nodes that no pod
  requests and no waiting work needs that its queue may be given) / GPUs the queue holds, at least
  1. The HPA's replicas are ceil(current x room / 1) (kubernetes.io HPA algorithm, target type
  Value): above 1 the job grows into GPUs nobody is waiting for - shared among the queue's jobs in
  proportion to what each holds -, at 1 it holds; it never shrinks for it (only the serving class
  takes back, through Volcano). Inputs: Volcano's own queue accounting, which the proportion plugin
  exports in milli-units (volcano-sh/volcano:pkg/scheduler/plugins/proportion/proportion.go@v1.15.1
  OnSessionOpen, volcano-sh/volcano:pkg/scheduler/metrics/queue.go@v1.15.1:
  volcano_queue_{allocated,request,deserved}_scalar_resources{queue_name, resource}, `resource` the
  resource's own name, nvidia.com/gpu; request = allocated + waiting; volcano-sh/volcano:pkg/scheduler/
  api/resource_info.go@v1.15.1 NewResource keeps scalars as MilliValue), and
  kube-state-metrics' node allocatable and pod requests with the node's pool label
  (kube_node_status_allocatable, kube_pod_container_resource_requests {resource="nvidia_com_gpu"},
  kube_node_labels{label_higgsfield_io_pool}:
  kubernetes/kube-state-metrics:docs/metrics/cluster/node-metrics.md and workload/pod-metrics.md;
  resource names and label keys sanitized to [a-z0-9_]).
- `higgsfield_serving_requests_waiting` (custom metrics API, per pod), what the serving example's
  HPA scales on: the queue depth examples/serve.py exports, scraped from pods labelled
  higgsfield.io/workload=serving on their port named `http`.

prometheus-adapter: `rules.custom` and `rules.external` of the chart (prometheus-community/
helm-charts:charts/prometheus-adapter/values.yaml@prometheus-adapter-5.3.0; the external metrics
APIService exists only when `rules.external` is set: templates/external-metrics-apiservice.yaml);
an external rule with `resources: {namespaced: false}` ignores the HPA's namespace, since Volcano's
series have none (kubernetes-sigs/prometheus-adapter:docs/externalmetrics.md@v0.12.0, the chart's
appVersion).
"""

from __future__ import annotations

from infra.core.names import POOL_LABEL

ELASTIC_ROOM_METRIC = "higgsfield_elastic_room"
SERVING_METRIC = "higgsfield_serving_requests_waiting"
# The `job` label of each exporter's series: Prometheus sets it to the scrape job's name and, without
# honor_labels, renames a scraped `job` to exported_job (prometheus.io/docs/prometheus/latest/
# configuration/configuration/#scrape_config), so no other target can claim it. Every query that
# drives scheduling or a dashboard names the job it means: a tenant's serving pod (scraped cluster-wide
# by SERVING_JOB) could otherwise export a series of the same name and shift the sum.
# kube-state-metrics: the chart's ServiceMonitor takes `job` from its Service's app.kubernetes.io/name
# (jobLabel default, prometheus-community/helm-charts:charts/kube-state-metrics/templates/
# servicemonitor.yaml@kube-state-metrics-8.4.0), the chart's name.
VOLCANO_SCHEDULER_JOB, VOLCANO_CONTROLLER_JOB = "volcano-scheduler", "volcano-controller"
KSM_JOB, DCGM_JOB, EFA_JOB, SERVING_JOB = "kube-state-metrics", "dcgm-exporter", "efa", "serving"
# the ranks' progress and the pre-flight's suspects (components/observability.py training_progress_scrape_job)
TRAINING_PROGRESS_JOB = "training-progress"
SERVING_LABEL = ("higgsfield.io/workload", "serving")
SERVING_PORT = "http"
SERVING_SCRAPE_LIMITS = {"sample_limit": 100, "label_limit": 30, "body_size_limit": "1MB"}  # ours: one gauge per pod
# What images/training/progress.py publishes (its module docstring lists them): the only series the
# training-progress scrape keeps, whatever else a pod on the `progress` port exports.
PROGRESS_SERIES = (
    "higgsfield_training_step",
    "higgsfield_training_step_seconds",
    "higgsfield_training_compute_seconds",
    "higgsfield_training_progress_timestamp_seconds",
    "higgsfield_training_checkpoint_seconds_total",
    "higgsfield_preflight_suspect",
)
# ours: five series per rank (a pod's ranks, at most its GPUs) and one per node the pre-flight names, with
# rank, node and the scrape's own five labels; far below, whatever a pod sends fails its scrape instead
PROGRESS_SCRAPE_LIMITS = {"sample_limit": 1000, "label_limit": 30, "body_size_limit": "1MB"}

# kube-state-metrics' --metric-labels-allowlist, through the kube-state-metrics chart's
# metricLabelsAllowlist (prometheus-community/helm-charts:charts/kube-state-metrics/values.yaml and
# templates/deployment.yaml@kube-state-metrics-8.4.0, the dependency of kube-prometheus-stack 88.5.x).
KSM_NODE_LABELS = [f"nodes=[{POOL_LABEL}]"]

_GPU = f'job="{VOLCANO_SCHEDULER_JOB}",resource="nvidia.com/gpu"'
# The HPA's selector values, one by one: prometheus-adapter's LabelValuesByName (kubernetes-sigs/
# prometheus-adapter:docs/config.md, pkg/naming/metrics_query.go BuildExternal@v0.12.0).
_QUEUE = '<<index .LabelValuesByName "queue_name">>'
_POOL = '<<index .LabelValuesByName "pool">>'
_KSM = f'job="{KSM_JOB}"'
_IN_POOL = f'* on(node) group_left() kube_node_labels{{{_KSM},label_higgsfield_io_pool="{_POOL}"}}'
_QUEUE_GPUS = f'sum(volcano_queue_allocated_scalar_resources{{{_GPU},queue_name="{_QUEUE}"}}) / 1000'
# What each queue waits for and may still be given: its request (allocated + its Pending pods') up to its deserved
# share, less its allocation. The proportion plugin exports the deserved share, max(min(share, realCapability,
# request), guarantee) (volcano-sh/volcano:pkg/scheduler/plugins/proportion/proportion.go@v1.15.1), which is a team
# queue's capability, its guarantee (components/demand.py). Pods beyond it, a team's plain GPU pods while its gangs
# hold its capability, can be given nothing: counted whole, they froze every other team's growth. Each session
# exports a queue's deserved share only while a job of the queue is in it, and sets a queue without one to request
# 0 (same file, OnSessionOpen), so a deserved series left from its last job counts nothing. A queue with no
# deserved series counts its whole request.
_BY_QUEUE = "sum by (queue_name) (volcano_queue_{0}_scalar_resources{{" + _GPU + "}})"
_REQUEST, _DESERVED = _BY_QUEUE.format("request"), _BY_QUEUE.format("deserved")
_ADMISSIBLE = f"(({_REQUEST} <= {_DESERVED}) or ({_DESERVED} and {_REQUEST}) or {_REQUEST})"
_WAITING = f"(sum(clamp_min({_ADMISSIBLE} - {_BY_QUEUE.format('allocated')}, 0)) or vector(0))"
# A pod's requests as kube-state-metrics exports them: of every pod it lists, whatever its phase
# (createPodContainerResourceRequestsFamilyGenerator, kubernetes/kube-state-metrics:internal/store/pod.go, the same at
# v2.8.2, v2.17.0 and v2.20.0). A finished pod keeps its nodeName and holds nothing, so its requests count only
# while it has not finished: a team's finished pods, left on nodes others now use, would make them look full.
_FINISHED = f'(kube_pod_status_phase{{{_KSM},phase=~"Succeeded|Failed"}} == 1)'
_REQUESTED_GPUS = f'kube_pod_container_resource_requests{{{_KSM},resource="nvidia_com_gpu"}} unless on(uid) {_FINISHED}'
# GPUs of the pool's nodes that no pod there requests, less every GPU any queue is waiting for and may be given
# (pending pods name no node, so all waiting work counts against every pool: growth waits for it).
_FREE_GPUS = (
    f'(sum(kube_node_status_allocatable{{{_KSM},resource="nvidia_com_gpu"}} {_IN_POOL})'
    f" - (sum(({_REQUESTED_GPUS}) {_IN_POOL}) or vector(0))"
    f" - {_WAITING} / 1000)"
)
ELASTIC_ROOM_QUERY = f"clamp_min(({_QUEUE_GPUS} + clamp_min({_FREE_GPUS}, 0)) / ({_QUEUE_GPUS}), 1)"


def external_rules() -> list[dict]:
    return [
        {
            "seriesQuery": f'volcano_queue_allocated_scalar_resources{{{_GPU},queue_name!=""}}',
            "resources": {"namespaced": False},
            "name": {"matches": "^volcano_queue_allocated_scalar_resources$", "as": ELASTIC_ROOM_METRIC},
            "metricsQuery": ELASTIC_ROOM_QUERY,
        }
    ]


def custom_rules() -> list[dict]:
    return [
        {
            "seriesQuery": f'{SERVING_METRIC}{{job="{SERVING_JOB}",namespace!="",pod!=""}}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
            "name": {"matches": f"^{SERVING_METRIC}$", "as": SERVING_METRIC},
            "metricsQuery": f'sum(<<.Series>>{{job="{SERVING_JOB}",<<.LabelMatchers>>}}) by (<<.GroupBy>>)',
        }
    ]


def serving_scrape_job() -> dict:
    """Serving pods in any namespace, by their label and named port, with `namespace` and `pod`
    labels for the adapter (Prometheus' Kubernetes SD meta labels: prometheus.io/docs/prometheus/
    latest/configuration/configuration/#kubernetes_sd_config, role pod). Only the serving metric is
    kept (metric_relabel_configs): whatever else a tenant's pod exports never enters Prometheus,
    and what it does export is labelled job="serving" and its own namespace and pod."""
    key, value = SERVING_LABEL
    meta = "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in key)
    return {
        "job_name": SERVING_JOB,
        # A tenant's endpoint is scraped by the platform's Prometheus: at most this much per pod, or the
        # scrape fails (sample_limit, label_limit, body_size_limit: prometheus.io/docs/prometheus/latest/
        # configuration/configuration/#scrape_config), so no team exhausts Prometheus for the others.
        "sample_limit": SERVING_SCRAPE_LIMITS["sample_limit"],
        "label_limit": SERVING_SCRAPE_LIMITS["label_limit"],
        "body_size_limit": SERVING_SCRAPE_LIMITS["body_size_limit"],
        "kubernetes_sd_configs": [{"role": "pod"}],
        "relabel_configs": [
            {"source_labels": [meta], "regex": value, "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": SERVING_PORT, "action": "keep"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
        "metric_relabel_configs": [{"source_labels": ["__name__"], "regex": SERVING_METRIC, "action": "keep"}],
    }

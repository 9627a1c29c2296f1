"""Monitoring, logs and node health in every stack's plan."""

from __future__ import annotations

import json
import re

import pytest

from infra.core import versions
from tests.conftest import assert_plan_rejects, set_key

RELEASE = "kubernetes:helm.sh/v3:Release"
SYSTEM = {"higgsfield.io/role": "system"}

# Fields exported by dcgm-exporter's default counters (NVIDIA/dcgm-exporter etc/default-counters.csv).
DCGM_DEFAULT_FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
}


def _release(plan, chart):
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == chart]
    return release


@pytest.mark.parametrize(
    ("chart", "pinned"),
    [
        ("kube-prometheus-stack", versions.KUBE_PROMETHEUS_STACK),
        ("dcgm-exporter", versions.DCGM_EXPORTER),
        ("prometheus-adapter", versions.PROMETHEUS_ADAPTER),
    ],
)
def test_monitoring_charts_are_pinned(plan, chart, pinned):
    release = _release(plan, chart)
    assert release.inputs["version"] == pinned.version and release.inputs["repositoryOpts"]["repo"] == pinned.repo


def test_prometheus_stack_runs_on_system_nodes_with_persistent_storage(plan):
    values = _release(plan, "kube-prometheus-stack").inputs["values"]
    spec = values["prometheus"]["prometheusSpec"]
    assert spec["nodeSelector"] == SYSTEM and values["grafana"]["nodeSelector"] == SYSTEM
    assert values["prometheusOperator"]["nodeSelector"] == SYSTEM
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    (storage_class,) = plan.of_type("kubernetes:storage.k8s.io/v1:StorageClass")
    assert claim["storageClassName"] == storage_class.inputs["metadata"]["name"]
    assert storage_class.inputs["parameters"]["encrypted"] == "true"


def test_node_exporter_reaches_gpu_nodes_too(plan):
    assert {"operator": "Exists"} in _release(plan, "kube-prometheus-stack").inputs["values"][
        "prometheus-node-exporter"
    ]["tolerations"]


def test_dcgm_exporter_runs_on_gpu_nodes(plan):
    """(Its tolerations: tests/components/test_node_daemons.py.)"""
    values = _release(plan, "dcgm-exporter").inputs["values"]
    assert values["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_dcgm_volcano_and_operator_metrics_are_scraped(plan):
    jobs = {
        c["job_name"]: c
        for c in _release(plan, "kube-prometheus-stack").inputs["values"]["prometheus"]["prometheusSpec"][
            "additionalScrapeConfigs"
        ]
    }
    assert {"dcgm-exporter", "volcano-scheduler", "volcano-controller", "training-operator"} <= set(jobs)
    assert jobs["volcano-controller"]["kubernetes_sd_configs"][0]["namespaces"]["names"] == ["volcano-system"]


def test_gpu_utilisation_reaches_the_hpa_through_prometheus_adapter(plan):
    (rule,) = [
        r
        for r in _release(plan, "prometheus-adapter").inputs["values"]["rules"]["custom"]
        if r["name"]["as"] == "gpu_utilization"
    ]
    assert "DCGM_FI_DEV_GPU_UTIL" in rule["seriesQuery"]


def _dashboard(plan) -> dict:
    (config_map,) = [
        c
        for c in plan.of_type("kubernetes:core/v1:ConfigMap")
        if c.inputs["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    (text,) = config_map.inputs["data"].values()
    return json.loads(text)


def test_dashboard_is_valid_json_with_the_promised_panels(plan):
    titles = " ".join(p["title"] for p in _dashboard(plan)["panels"]).lower()
    for topic in ("utilisation", "memory", "power", "xid", "efa", "pending"):
        assert topic in titles, topic


def _exported(plan) -> set[str]:
    text = _release(plan, "dcgm-exporter").inputs["values"]["customMetrics"]
    return {line.split(",")[0].strip() for line in text.splitlines() if line and not line.startswith("#")}


def test_dashboard_names_dcgm_metrics_the_exporter_exports(plan):
    exprs = " ".join(t["expr"] for p in _dashboard(plan)["panels"] for t in p["targets"])
    used = set(re.findall(r"DCGM_FI_[A-Z0-9_]+", exprs))
    assert used and used <= _exported(plan), used - _exported(plan)


def test_the_alerts_and_the_watchdog_read_dcgm_metrics_the_exporter_exports(plan):
    from components.job_watchdog import XID, alert_rules
    from images.training.job_watchdog import HELD_SERIES

    rules = json.dumps(alert_rules(plan.config.gpu_pools))
    used = set(re.findall(r"DCGM_FI_[A-Z0-9_]+", " ".join((rules, XID, HELD_SERIES))))
    assert used and used <= _exported(plan), used - _exported(plan)


def test_the_exporters_metrics_list_reaches_it_through_the_charts_own_mount(plan):
    """`customMetrics` fills the chart's ConfigMap, which its default extraConfigMapVolumes and
    extraVolumeMounts put where `-f` reads (NVIDIA/dcgm-exporter:deployment/values.yaml@4.5.3-4.8.2):
    a value of ours for any of these would leave the profiling fields on without an error."""
    values = _release(plan, "dcgm-exporter").inputs["values"]
    assert not {"extraConfigMapVolumes", "extraVolumeMounts", "arguments"} & set(values)


def test_the_dcgm_exporter_watches_real_fields_and_no_profiling_field(plan):
    exported = _exported(plan)
    assert exported <= DCGM_DEFAULT_FIELDS, exported - DCGM_DEFAULT_FIELDS
    assert not [f for f in exported if f.startswith("DCGM_FI_PROF_")]


def test_log_groups_keep_logs_for_the_configured_retention(plan, stack_settings):
    wanted = (stack_settings.get("higgsfield:observability") or {}).get("logRetentionDays", 30)
    groups = plan.of_type("aws:cloudwatch/logGroup:LogGroup")
    names = {g.inputs["name"] for g in groups}
    cluster = plan.outputs["clusterName"]
    assert f"/aws/eks/{cluster}/cluster" in names and f"/aws/containerinsights/{cluster}/application" in names
    assert all(g.inputs["retentionInDays"] == wanted for g in groups)


def test_control_plane_log_group_exists_before_the_cluster(plan):
    cluster = plan.one("eks:index:Cluster")
    (group,) = [g for g in plan.of_type("aws:cloudwatch/logGroup:LogGroup") if g.inputs["name"].startswith("/aws/eks/")]
    assert group.urn in cluster.dependencies


def test_node_auto_repair_is_on_for_gpu_pools_with_the_monitoring_agent(plan):
    groups = [
        g
        for g in plan.of_type("aws:eks/nodeGroup:NodeGroup")
        if g.inputs["labels"].get("nvidia.com/gpu.present") == "true"
    ]
    assert groups and all(g.inputs["nodeRepairConfig"]["enabled"] is True for g in groups)
    assert "eks-node-monitoring-agent" in {a.inputs["addonName"] for a in plan.of_type("aws:eks/addon:Addon")}


def test_logs_and_volumes_get_aws_access_through_pod_identity(plan):
    addons = {a.inputs["addonName"]: a for a in plan.of_type("aws:eks/addon:Addon")}
    assert (
        addons["amazon-cloudwatch-observability"].inputs["podIdentityAssociations"][0]["serviceAccount"]
        == "cloudwatch-agent"
    )
    assert (
        addons["aws-ebs-csi-driver"].inputs["podIdentityAssociations"][0]["serviceAccount"] == "ebs-csi-controller-sa"
    )


OBS = "higgsfield:observability"
BAD = {
    "retention_not_a_cloudwatch_value": (
        "dev",
        set_key(OBS, {"logRetentionDays": 45}),
        f"{OBS}.logRetentionDays",
        "not a CloudWatch Logs retention",
    ),
    "threshold_above_one": (
        "dev",
        set_key(OBS, {"healthcheck": {"minMatmulFraction": 1.5}}),
        f"{OBS}.healthcheck.minMatmulFraction",
        "(0, 1]",
    ),
    "negative_lustre_threshold": (
        "dev",
        set_key(OBS, {"healthcheck": {"minLustreMBps": -1}}),
        f"{OBS}.healthcheck.minLustreMBps",
        "positive",
    ),
    "typo": ("dev", set_key(OBS, {"nodeAutoRepare": True}), f"{OBS}.nodeAutoRepare", "unknown setting"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_observability_setting_names_the_key(case, project_copy, capsys):
    assert_plan_rejects(project_copy, capsys, *BAD[case])


def test_observability_can_be_switched_off(project_copy):
    from infra.offline.evaluate import record

    root = project_copy("dev", set_key(OBS, {"enabled": False, "nodeAutoRepair": False}))
    plan = record("bad", root=root)
    assert not [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == "kube-prometheus-stack"]
    assert all(
        g.inputs["nodeRepairConfig"]["enabled"] is False
        for g in plan.of_type("aws:eks/nodeGroup:NodeGroup")
        if "gpu" in g.name
    )

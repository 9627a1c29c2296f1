"""Upstream contracts at the pinned refs: Kubernetes ranges as data, scrape jobs that find what
the upstream pods and Services declare, one DCGM exporter that keeps the workload's pod label,
the operator overlay in its real repository, and a source for every pin."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import yaml

from components.training import KUSTOMIZATION
from infra.core import versions
from tests.conftest import assert_plan_rejects, set_key

RELEASE = "kubernetes:helm.sh/v3:Release"


def _scrape_jobs(plan) -> dict[str, dict]:
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == "kube-prometheus-stack"]
    return {
        c["job_name"]: c for c in release.inputs["values"]["prometheus"]["prometheusSpec"]["additionalScrapeConfigs"]
    }


def _relabel(labels: dict[str, str], rules: list[dict]) -> dict[str, str] | None:
    """Prometheus' relabelling of one discovered target (keep and replace, the actions we use:
    prometheus.io/docs/prometheus/latest/configuration/configuration/#relabel_config; regexes
    are anchored, source labels joined by ';', default regex (.*) and replacement $1)."""
    labels = dict(labels)
    for rule in rules:
        value = rule.get("separator", ";").join(labels.get(s, "") for s in rule["source_labels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if rule.get("action", "replace") == "keep":
            if not match:
                return None
        elif match:
            labels[rule["target_label"]] = match.expand(rule.get("replacement", r"\1"))
    return labels


# What Prometheus' Kubernetes discovery sees for the upstream objects at the pinned refs:
# Volcano's scheduler and controller Services (label app, port "metrics"):
#   volcano-sh/volcano:installer/helm/chart/volcano/templates/scheduler.yaml, controllers.yaml@v1.15.1;
# the training operator's Service (label app: training-operator, ports "monitoring-port" and
# "webhook-server"): kubeflow/trainer:manifests/base/service.yaml@v1.9.4;
# the DCGM exporter's pod (app.kubernetes.io/name: dcgm-exporter, container port "metrics"):
#   NVIDIA/dcgm-exporter:deployment/templates/daemonset.yaml, _helpers.tpl@4.5.3-4.8.2.
UPSTREAM_TARGETS = {
    "volcano-scheduler": (
        "volcano-system",
        {"__meta_kubernetes_service_label_app": "volcano-scheduler", "__meta_kubernetes_endpoint_port_name": "metrics"},
    ),
    "volcano-controller": (
        "volcano-system",
        {
            "__meta_kubernetes_service_label_app": "volcano-controller",
            "__meta_kubernetes_endpoint_port_name": "metrics",
        },
    ),
    "training-operator": (
        "kubeflow",
        {
            "__meta_kubernetes_service_label_app": "training-operator",
            "__meta_kubernetes_endpoint_port_name": "monitoring-port",
        },
    ),
    "dcgm-exporter": (
        "monitoring",
        {
            "__meta_kubernetes_pod_label_app_kubernetes_io_name": "dcgm-exporter",
            "__meta_kubernetes_pod_container_port_name": "metrics",
        },
    ),
}


@pytest.mark.parametrize("job", sorted(UPSTREAM_TARGETS))
def test_scrape_job_keeps_the_target_the_upstream_chart_declares(plan, job):
    namespace, target = UPSTREAM_TARGETS[job]
    config = _scrape_jobs(plan)[job]
    assert config["kubernetes_sd_configs"][0]["namespaces"]["names"] == [namespace]
    assert _relabel({**target, "__meta_kubernetes_pod_node_name": "ip-10-0-0-1"}, config["relabel_configs"]) is not None


def test_training_operator_job_drops_the_webhook_port(plan):
    _, target = UPSTREAM_TARGETS["training-operator"]
    webhook = {**target, "__meta_kubernetes_endpoint_port_name": "webhook-server"}
    assert _relabel(webhook, _scrape_jobs(plan)["training-operator"]["relabel_configs"]) is None


def test_volcano_serves_the_metrics_the_scrape_jobs_read(plan):
    """custom.scheduler_metrics_enable / controller_metrics_enable add --enable-metrics
    (volcano-sh/volcano:installer/helm/chart/volcano/templates/scheduler.yaml, controllers.yaml@v1.15.1)."""
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == "volcano"]
    custom = release.inputs["values"]["custom"]
    assert custom["scheduler_metrics_enable"] is True and custom["controller_metrics_enable"] is True


def test_pending_gangs_panel_reads_a_series_the_scraped_controller_exports(plan):
    """volcano_queue_pod_group_pending_count is the controller's (volcano-sh/volcano:
    pkg/controllers/metrics/queue.go@v1.15.1, subsystem volcano), so its job must exist."""
    from components.observability import gpu_dashboard

    (panel,) = [p for p in gpu_dashboard()["panels"] if "Pending gangs" in p["title"]]
    assert "volcano_queue_pod_group_pending_count" in panel["targets"][0]["expr"]
    assert "volcano-controller" in _scrape_jobs(plan)


def test_dcgm_series_keep_the_workload_pod_label_for_the_hpa(plan):
    """The exporter labels each GPU series with the pod using it; honor_labels keeps that label
    over the target's own, and no relabelling writes `pod` from the exporter's pod."""
    config = _scrape_jobs(plan)["dcgm-exporter"]
    assert config.get("honor_labels") is True
    _, target = UPSTREAM_TARGETS["dcgm-exporter"]
    relabelled = _relabel({**target, "__meta_kubernetes_pod_name": "dcgm-exporter-x7k2p"}, config["relabel_configs"])
    assert relabelled is not None and not {"pod", "namespace", "container"} & set(relabelled)


def test_only_one_dcgm_exporter_holds_the_profiling_counters(plan):
    """Our DCGM exporter chart runs; the CloudWatch add-on's own exporter is turned off."""
    import json

    addons = {a.inputs["addonName"]: a for a in plan.of_type("aws:eks/addon:Addon")}
    configuration = json.loads(addons["amazon-cloudwatch-observability"].inputs["configurationValues"])
    assert configuration["dcgmExporter"] == {"enabled": False}
    assert [r.inputs["chart"] for r in plan.of_type(RELEASE)].count("dcgm-exporter") == 1


def test_operator_kustomization_points_at_kubeflow_trainer_at_the_pinned_tag():
    (resource,) = [
        r for r in yaml.safe_load((KUSTOMIZATION / "kustomization.yaml").read_text())["resources"] if "://" in r
    ]
    assert resource.startswith("https://github.com/kubeflow/trainer.git//manifests/overlays/standalone?")
    assert resource.endswith(f"?ref={versions.TRAINING_OPERATOR_REF}")


def test_volcano_pin_supports_every_shipped_stacks_kubernetes_version(stack_settings):
    version = stack_settings.get("higgsfield:kubernetesVersion", versions.KUBERNETES_DEFAULT)
    assert versions.VOLCANO.kubernetes is not None and versions.VOLCANO.kubernetes.admits(version)


def test_every_pinned_component_supports_every_version_the_config_accepts():
    for version in versions.KUBERNETES_SUPPORTED:
        assert versions.components_outside(version) == [], version


def test_kubernetes_version_outside_a_components_range_is_rejected_naming_it(project_copy, capsys, monkeypatch):
    """Volcano v1.13 stops at Kubernetes 1.33 (volcano-sh/volcano:README.md@v1.15.1, row v1.13)."""
    old = replace(
        versions.VOLCANO,
        version="1.13.0",
        kubernetes=versions.KubernetesRange("Volcano 1.13.0", "1.23", "1.33", "volcano-sh/volcano:README.md@v1.15.1"),
    )
    monkeypatch.setattr(versions, "VOLCANO", old)
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_key("higgsfield:kubernetesVersion", "1.35"),
        "higgsfield:kubernetesVersion",
        "Volcano 1.13.0 supports",
    )


def test_a_minor_without_an_autoscaler_image_is_rejected_naming_the_autoscaler(project_copy, capsys, monkeypatch):
    monkeypatch.setattr(
        versions,
        "CLUSTER_AUTOSCALER_IMAGE",
        {k: v for k, v in versions.CLUSTER_AUTOSCALER_IMAGE.items() if k != "1.34"},
    )
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_key("higgsfield:kubernetesVersion", "1.34"),
        "higgsfield:kubernetesVersion",
        "Cluster Autoscaler",
    )


def test_autoscaler_image_matches_each_kubernetes_minor():
    """The autoscaler's README asks for its minor to match the control plane's."""
    for minor, tag in versions.CLUSTER_AUTOSCALER_IMAGE.items():
        assert re.fullmatch(rf"v{re.escape(minor)}\.\d+", tag), (minor, tag)
    assert set(versions.KUBERNETES_SUPPORTED) <= set(versions.CLUSTER_AUTOSCALER_IMAGE)


def test_efa_device_plugin_chart_is_the_one_that_ships_image_v0_5_20():
    """aws/eks-charts:stable/aws-efa-k8s-device-plugin/Chart.yaml@5239609: version v0.5.30,
    appVersion v0.5.20 (v0.5.20 was the chart of an older image)."""
    assert versions.EFA_DEVICE_PLUGIN.version == "v0.5.30"


# --- every pin says where it comes from ---------------------------------------------------------

REF = re.compile(r"^[\w.-]+/[\w.-]+:[^@\s]+@[\w.-]+")  # owner/repo:path@ref
DOCS = re.compile(r"^docs\.(aws\.amazon|nvidia)\.com/")
# Pins this issue (#16) fixed: each must be verified in the upstream file.
FIXED = (
    "VOLCANO",
    "TRAINING_OPERATOR_REF",
    "TRAINING_OPERATOR_OVERLAY",
    "TRAINING_OPERATOR_KUBERNETES",
    "EFA_DEVICE_PLUGIN",
    "CLUSTER_AUTOSCALER",
    "CLUSTER_AUTOSCALER_IMAGE",
    "DCGM_EXPORTER",
    "NVIDIA_DEVICE_PLUGIN",
    "EKS_ADDONS",
)


def test_every_constant_in_versions_has_a_source():
    constants = {n for n in vars(versions) if n.isupper() and not n.startswith("_")}
    assert constants - set(versions.sources()) - set(versions.NOT_PINS) == set()


@pytest.mark.parametrize("name", sorted(versions.sources()))
def test_each_pin_is_verified_at_a_ref_or_says_how_to_verify_it(name):
    source = versions.sources()[name]
    if source.verified:
        assert REF.match(source.where) or DOCS.match(source.where), source.where
    else:
        assert source.check.split()[0] in {"aws", "docker", "helm", "kubectl"}, source.check


@pytest.mark.parametrize("name", FIXED)
def test_pins_this_issue_fixed_are_verified(name):
    assert versions.sources()[name].verified

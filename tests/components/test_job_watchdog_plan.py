"""The job watchdog as the program deploys it (components/job_watchdog.py): on the system nodes, with
least privilege (nothing cluster-wide, nothing on nodes), reading Prometheus through the monitoring
namespace's policy; the training alerts and the progress scrape job in the monitoring stack."""

from __future__ import annotations

import health_gate
import job_watchdog as program

from components import job_watchdog
from components.cpu_nodes import SYSTEM_LABELS
from infra.core import names
from tests.components.test_observability_plan import _release

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def _watching(plan) -> bool:
    cfg = plan.config
    return cfg.observability.enabled and bool(cfg.gpu_pools) and bool(cfg.scheduler.teams)


def test_the_watchdog_runs_on_the_system_nodes_where_there_are_jobs_to_watch(plan):
    found = [d.inputs for d in plan.of_type(DEPLOYMENT) if d.inputs["metadata"]["namespace"] == job_watchdog.NAMESPACE]
    if not _watching(plan):
        assert found == []
        return
    (deployment,) = found
    spec = deployment["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == SYSTEM_LABELS and spec["securityContext"]["runAsNonRoot"]
    assert spec["containers"][0]["command"][-1] == "/opt/higgsfield/job_watchdog.py"


def test_the_watchdog_is_bound_only_in_team_namespaces_and_default_never_cluster_wide(plan):
    if not _watching(plan):
        return
    subject = {"kind": "ServiceAccount", "name": job_watchdog.SERVICE_ACCOUNT, "namespace": job_watchdog.NAMESPACE}
    assert not [b for b in plan.of_type(CLUSTER_ROLE_BINDING) if subject in b.inputs.get("subjects", [])]
    bound = {b.inputs["metadata"]["namespace"] for b in plan.of_type(ROLE_BINDING) if subject in b.inputs["subjects"]}
    assert bound == {t.name for t in plan.config.scheduler.teams} | {"default"}


def test_the_watchdog_may_delete_pods_but_never_write_a_node():
    rules = job_watchdog.rules_in_team_namespace() + job_watchdog.rules_for_node_events()
    assert not [r for r in rules if "nodes" in r["resources"]]
    assert {v for r in rules for v in r["verbs"]} == {"list", "delete", "create"}


def test_only_the_watchdog_and_grafana_and_the_adapter_may_query_prometheus(plan):
    if not _watching(plan):
        return
    (policy,) = [
        p.inputs for p in plan.of_type(NETPOL) if p.inputs["metadata"]["name"] == "allow-queries-to-prometheus"
    ]
    peers = policy["spec"]["ingress"][0]["from"]
    assert {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": job_watchdog.NAMESPACE}},
        "podSelector": {"matchLabels": job_watchdog.APP_LABELS},
    } in peers and len(peers) == 3


def test_the_training_alerts_and_the_progress_scrape_ship_with_the_monitoring_stack(plan):
    if not _watching(plan):
        return
    values = _release(plan, "kube-prometheus-stack").inputs["values"]
    (group,) = values["additionalPrometheusRulesMap"]["higgsfield-training"]["groups"]
    assert {r["alert"] for r in group["rules"]} == {
        "TrainingJobHung",
        "TrainingStraggler",
        "PreflightNamedNode",
        "GangWaitingPastDeadline",
        "GpuXidCritical",
        "GpuXidError",
    }
    jobs = {c["job_name"]: c for c in values["prometheus"]["prometheusSpec"]["additionalScrapeConfigs"]}
    targets = {r.get("target_label") for r in jobs["training-progress"]["relabel_configs"]}
    assert {"namespace", "job_name", "pod", "pod_uid", "Hostname"} <= targets  # what the watchdog joins on


def test_the_hang_alert_and_the_watchdog_agree_on_when_a_job_is_hung():
    (group,) = job_watchdog.alert_rules([])
    (hung,) = [r for r in group["rules"] if r["alert"] == "TrainingJobHung"]
    settings = program.Settings.from_env({e["name"]: e["value"] for e in job_watchdog.settings_env("http://p")})
    assert f"clamp_min({settings.hang_multiple:g} * " in hung["expr"] and f"{settings.hang_floor_s:g})" in hung["expr"]


def test_the_programs_and_the_platform_share_the_labels_and_reasons():
    assert program.JOB_LABEL == names.JOB_NAME_LABEL
    assert program.RECHECK_REASON == health_gate.RECHECK_REASON == names.RECHECK_REASON

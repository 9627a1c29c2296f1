"""The monitoring stack behind authentication: Grafana's admin from a
generated Secret, its sidecars and RBAC confined to the monitoring namespace, no Prometheus admin
API, and NetworkPolicies that let no tenant reach Prometheus, Alertmanager or Grafana.

The attacks are requests a tenant pod makes (`POST alertmanager:9093/api/v2/silences`,
`POST prometheus:9090/api/v1/admin/tsdb/delete_series`, Grafana login admin/prom-operator), each
refused by a mechanism a test names: the monitoring namespace's NetworkPolicies (evaluated with
tests/scheduling_rules.py ingress_allowed), the rendered chart values, the admin Secret."""

from __future__ import annotations

import ipaddress

import pytest

from components import observability as obs
from infra.offline import kubernetes_schema
from tests.conftest import STACKS, config_of, plan_of
from tests.scheduling_rules import Endpoint, ingress_allowed

RELEASE = "kubernetes:helm.sh/v3:Release"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
MONITORED = [s for s in STACKS if config_of(s).observability.enabled]


def _values(plan) -> dict:
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == "kube-prometheus-stack"]
    return release.inputs["values"]


def _policies(plan) -> list[dict]:
    return [r.inputs for r in plan.of_type(NETPOL) if r.inputs["metadata"]["namespace"] == obs.NAMESPACE]


def _pod(labels: dict, ip: str = "10.40.1.20") -> Endpoint:
    return Endpoint(obs.NAMESPACE, labels, ip)


PROMETHEUS, ALERTMANAGER, GRAFANA = (
    _pod(obs.PROMETHEUS_PODS, "10.40.1.11"),
    _pod(obs.ALERTMANAGER_PODS, "10.40.1.12"),
    _pod(obs.GRAFANA_PODS, "10.40.1.13"),
)
ADAPTER, OPERATOR = _pod(obs.ADAPTER_PODS, "10.40.1.14"), _pod(obs.OPERATOR_PODS, "10.40.1.15")
# A tenant's pod, in its own namespace, wearing the labels of the monitoring pods (labels are the
# tenant's to set): podSelector peers without a namespaceSelector match the policy's namespace only.
TENANT = Endpoint("vision", {"app.kubernetes.io/name": "prometheus"}, "10.40.2.30")
TENANT_AS_GRAFANA = Endpoint("vision", {"app.kubernetes.io/name": "grafana"}, "10.40.2.31")


@pytest.fixture(params=MONITORED)
def monitored(request):
    return plan_of(request.param)


# --- Grafana's admin -------------------------------------------------------------------------


def test_grafana_admin_comes_from_our_secret_never_a_chart_default(monitored):
    grafana = _values(monitored)["grafana"]
    assert grafana["admin"] == {"existingSecret": obs.GRAFANA_ADMIN_SECRET, **obs.GRAFANA_ADMIN_KEYS}
    assert "adminPassword" not in grafana  # the chart would render it into its own Secret


def test_grafana_admin_secret_holds_a_generated_password_not_prom_operator(monitored):
    """The attack `POST /login {"user":"admin","password":"prom-operator"}` fails: the password is
    a RandomPassword's result (40 characters, in the state as a secret), never a literal."""
    (secret,) = [
        r
        for r in monitored.of_type("kubernetes:core/v1:Secret")
        if r.inputs["metadata"]["name"] == obs.GRAFANA_ADMIN_SECRET
    ]
    (password,) = monitored.of_type("random:index/randomPassword:RandomPassword")
    assert password.inputs["length"] >= 32 and password.inputs["special"] is False
    assert password.urn in secret.dependencies
    data = secret.inputs["stringData"]
    assert data[obs.GRAFANA_ADMIN_KEYS["userKey"]] == "admin"
    assert data[obs.GRAFANA_ADMIN_KEYS["passwordKey"]] != "prom-operator"  # unknown until the provider generates it
    assert secret.inputs["metadata"]["namespace"] == obs.NAMESPACE


def test_the_admin_secret_exists_before_the_chart_installs(monitored):
    (release,) = [r for r in monitored.of_type(RELEASE) if r.inputs["chart"] == "kube-prometheus-stack"]
    (secret,) = [
        r
        for r in monitored.of_type("kubernetes:core/v1:Secret")
        if r.inputs["metadata"]["name"] == obs.GRAFANA_ADMIN_SECRET
    ]
    assert secret.urn in release.dependencies


# --- Grafana's service account reads this namespace only -------------------------------------


def test_grafana_sidecars_search_the_monitoring_namespace_only(monitored):
    sidecar = _values(monitored)["grafana"]["sidecar"]
    assert sidecar["dashboards"]["searchNamespace"] == [obs.NAMESPACE]
    assert sidecar["datasources"]["searchNamespace"] == [obs.NAMESPACE]


def test_grafana_rbac_is_a_role_not_a_cluster_role_over_every_secret(monitored):
    """With rbac.namespaced false (the chart default) and a sidecar on, the chart binds a ClusterRole
    with get/watch/list on configmaps and secrets of every namespace (templates/clusterrole.yaml@
    grafana-12.11.1); namespaced renders a Role in the release namespace instead (role.yaml)."""
    rbac = _values(monitored)["grafana"]["rbac"]
    assert rbac["namespaced"] is True
    assert not rbac.get("extraClusterRoleRules") and not rbac.get("namespaces")


# --- Prometheus' and Alertmanager's write paths ---------------------------------------------


def test_prometheus_admin_api_is_off(monitored):
    spec = _values(monitored)["prometheus"]["prometheusSpec"]
    assert spec["enableAdminAPI"] is False
    assert not spec.get("enableRemoteWriteReceiver") and not spec.get("enableOTLPReceiver")


@pytest.mark.parametrize(
    ("target", "port", "request_"),
    [
        (ALERTMANAGER, obs.ALERTMANAGER_PORT, "POST /api/v2/silences"),
        (PROMETHEUS, obs.PROMETHEUS_PORT, "POST /api/v1/admin/tsdb/delete_series"),
        (PROMETHEUS, obs.PROMETHEUS_PORT, "POST /-/quit (web.enable-lifecycle is on for the config reloader)"),
        (GRAFANA, obs.GRAFANA_PORT, "POST /login admin/prom-operator"),
        (ALERTMANAGER, 8080, "the config reloader"),
    ],
)
def test_a_tenant_pod_cannot_reach_the_monitoring_apis(monitored, target, port, request_):
    for tenant in (TENANT, TENANT_AS_GRAFANA):
        assert not ingress_allowed(_policies(monitored), tenant, target, port), (tenant, request_)


def test_without_the_default_deny_the_tenant_would_get_through():
    """The mechanism the attack tests name: remove the namespace's policies and the silence is posted."""
    assert ingress_allowed([], TENANT, ALERTMANAGER, obs.ALERTMANAGER_PORT)
    assert not ingress_allowed(
        obs.monitoring_network_policies("10.40.0.0/16"), TENANT, ALERTMANAGER, obs.ALERTMANAGER_PORT
    )


@pytest.mark.parametrize(
    ("source", "target", "port"),
    [
        (GRAFANA, PROMETHEUS, obs.PROMETHEUS_PORT),  # dashboards
        (ADAPTER, PROMETHEUS, obs.PROMETHEUS_PORT),  # gpu_utilization for the HPA
        (PROMETHEUS, ALERTMANAGER, obs.ALERTMANAGER_PORT),  # alerts
        (ALERTMANAGER, ALERTMANAGER, obs.ALERTMANAGER_CLUSTER_PORT),
        (PROMETHEUS, GRAFANA, obs.GRAFANA_PORT),  # scrapes
        (PROMETHEUS, _pod({"app.kubernetes.io/name": "kube-state-metrics"}), 8080),
        (PROMETHEUS, _pod({"app.kubernetes.io/name": "dcgm-exporter"}), 9400),
    ],
)
def test_what_must_reach_the_monitoring_pods_still_does(monitored, source, target, port):
    assert ingress_allowed(_policies(monitored), source, target, port)


def test_the_api_server_reaches_the_operator_webhook_and_the_custom_metrics_api(monitored):
    interface = str(ipaddress.ip_network(monitored.config.vpc_cidr)[5])  # a control-plane interface in the VPC
    api_server = Endpoint("", {}, interface, namespace_labels={})
    policies = _policies(monitored)
    assert ingress_allowed(policies, api_server, OPERATOR, obs.OPERATOR_WEBHOOK_PORT)
    assert ingress_allowed(policies, api_server, ADAPTER, obs.ADAPTER_PORT)
    assert not ingress_allowed(policies, api_server, ALERTMANAGER, obs.ALERTMANAGER_PORT)
    assert not ingress_allowed(policies, api_server, PROMETHEUS, obs.PROMETHEUS_PORT)


def test_monitoring_policies_allow_only_from_the_vpc(monitored):
    cidr = monitored.config.vpc_cidr
    blocks = [
        peer["ipBlock"]["cidr"]
        for p in _policies(monitored)
        for rule in p["spec"].get("ingress", [])
        for peer in rule["from"]
        if "ipBlock" in peer
    ]
    assert blocks and set(blocks) == {cidr}


def test_monitoring_policies_exist_before_the_stack_installs(monitored):
    (release,) = [r for r in monitored.of_type(RELEASE) if r.inputs["chart"] == "kube-prometheus-stack"]
    policies = [r for r in monitored.of_type(NETPOL) if r.inputs["metadata"]["namespace"] == obs.NAMESPACE]
    assert {p.urn for p in policies} <= set(release.dependencies)


def test_monitoring_policies_validate_against_the_kubernetes_schema(monitored):
    version = monitored.config.kubernetes_version
    for policy in _policies(monitored):
        kubernetes_schema.validate(policy, version)

"""MPIJob launchers reach the API server the way the VPC CNI's policy agent sees it: at the
`kubernetes` Service's ClusterIP, before translation, on TCP 443 and nothing else."""

from __future__ import annotations

import pytest

from components import tenancy
from infra.config.cluster import api_service_ip, eks_service_cidr
from tests.conftest import STACKS, plan_of
from tests.scheduling_rules import Endpoint, egress_allowed

NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def _policies(plan, team: str) -> list[dict]:
    return [p.inputs for p in plan.of_type(NETPOL) if p.inputs["metadata"]["namespace"] == team]


def _launcher(team: str) -> Endpoint:
    return Endpoint(team, dict(tenancy.LAUNCHER), ip="10.40.3.7")


@pytest.mark.parametrize(
    ("vpc", "service", "address"),
    [
        ("10.40.0.0/16", "172.20.0.0/16", "172.20.0.1"),
        ("172.31.0.0/16", "10.100.0.0/16", "10.100.0.1"),
        ("192.168.0.0/18", "10.100.0.0/16", "10.100.0.1"),
    ],
)
def test_the_api_service_address_is_the_first_of_the_range_eks_picks_for_the_vpc(vpc, service, address):
    assert eks_service_cidr(vpc) == service and api_service_ip(vpc) == address


@pytest.mark.parametrize("stack", STACKS)
def test_the_launcher_reaches_the_api_service_address_on_443(stack):
    plan = plan_of(stack)
    api = Endpoint("default", {}, ip=plan.config.api_service_ip)
    for team in plan.config.scheduler.teams:
        assert egress_allowed(_policies(plan, team.name), _launcher(team.name), api, 443), team.name


@pytest.mark.parametrize("stack", STACKS)
def test_the_launcher_gets_nothing_else_at_that_address_or_beside_it(stack):
    plan = plan_of(stack)
    cfg = plan.config
    service = eks_service_cidr(cfg.vpc_cidr)
    dns = service.rsplit(".", 2)[0] + ".0.10"  # kube-dns's Service address in the same range
    for team in cfg.scheduler.teams:
        policies, launcher = _policies(plan, team.name), _launcher(team.name)
        assert not egress_allowed(policies, launcher, Endpoint("default", {}, ip=cfg.api_service_ip), 80)
        assert not egress_allowed(policies, launcher, Endpoint("default", {}, ip=dns), 443)
        assert not egress_allowed(policies, launcher, Endpoint("default", {}, ip="52.94.0.10"), 443)  # off the VPC


def test_a_job_pod_that_is_not_the_launcher_does_not_get_the_api_service():
    plan = plan_of("prod")
    worker = Endpoint("llm", {"training.kubeflow.org/replica-type": "worker"}, ip="10.40.3.8")
    api = Endpoint("default", {}, ip=plan.config.api_service_ip)
    assert not egress_allowed(_policies(plan, "llm"), worker, api, 443)

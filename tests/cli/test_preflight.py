"""`higgsfield preflight` against moto (EC2 offerings and instance types, AZs, FSx, SSM) and
botocore Stubbers where moto has no coverage (Service Quotas for EC2, capacity reservations, EKS
DescribeAddonVersions). Stubbed errors carry AWS's codes: InvalidCapacityReservationId.NotFound
and UnauthorizedOperation from the EC2 API reference (docs.aws.amazon.com/AWSEC2/latest/
APIReference/errors-overview.html; the code as hashicorp/terraform-provider-aws handles it:
internal/service/ec2/errors.go@00081ce4 errCodeInvalidCapacityReservationIdNotFound), the others
as botocore's service models list them (service-quotas 2019-06-24 GetServiceQuota:
AccessDeniedException, TooManyRequestsException)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from moto import mock_aws

from infra.cli import preflight
from tests.aws_errors import add_wire_error
from tests.conftest import ROOT, plan_of

REGION = "us-east-2"
AMI = "/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/recommended/image_id"


class Ec2:
    """moto's EC2, with capacity reservations from a stubbed client and optional overrides."""

    def __init__(self, moto_ec2, reservations, **overrides):
        self._moto, self._reservations, self._overrides = moto_ec2, reservations, overrides

    def describe_capacity_reservations(self, **kwargs):
        return self._reservations.describe_capacity_reservations(**kwargs)

    def __getattr__(self, name):
        return self._overrides.get(name) or getattr(self._moto, name)


# The clients are made once a process, as a command makes each once a run: making one (its service model, endpoint
# rules and handlers) cost more than most tests' calls. A test's Stubbers are its own: each is deactivated as the
# test's run ends (the `with` in _run), and moto's backends are reset as each test's mock stops.
@functools.cache
def _client(service: str):
    """A client whose answers a test stubs."""
    return boto3.client(service, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")


@functools.cache
def _moto(service: str):
    """A client that moto answers."""
    return boto3.client(service, region_name=REGION)


def _reservation(rid: str, instance_type: str, kind: str, state: str = "active", zone: str = "us-east-2b") -> dict:
    return {
        "CapacityReservations": [
            {
                "CapacityReservationId": rid,
                "InstanceType": instance_type,
                "AvailabilityZone": zone,
                "State": state,
                "ReservationType": kind,
                "TotalInstanceCount": 4,
            }
        ]
    }


@pytest.fixture
def aws():
    # One boto3 session for every test: a new one per test (moto's default) loads the endpoint rules
    # and service models again, most of what a test here costs.
    with mock_aws(config={"core": {"reset_boto3_session": False}}):
        yield


K8S = "1.35"
ADDON = "vpc-cni"


def _addon_versions(
    name: str = ADDON, default: str | None = "v1.20.4-eksbuild.2", others: tuple[str, ...] = ("v1.20.4-eksbuild.1",)
) -> dict:
    """DescribeAddonVersions' answer (eks 2017-11-01 AddonInfo/AddonVersionInfo/Compatibility)."""
    versions = [(default, True)] if default else []
    versions += [(v, False) for v in others]
    return {
        "addons": [
            {
                "addonName": name,
                "type": "networking",
                "addonVersions": [
                    {
                        "addonVersion": v,
                        "architecture": ["amd64", "arm64"],
                        "compatibilities": [
                            {"clusterVersion": K8S, "platformVersions": ["*"], "defaultVersion": is_default}
                        ],
                    }
                    for v, is_default in versions
                ],
            }
        ]
    }


def _default_of(answer: dict) -> str:
    return next(
        v["addonVersion"]
        for a in answer["addons"]
        for v in a["addonVersions"]
        if any(c["defaultVersion"] for c in v["compatibilities"])
    )


RESERVATIONS = {
    "cr-0a1b2c3d4e5f60718": _reservation("cr-0a1b2c3d4e5f60718", "p5en.48xlarge", "capacity-block", "scheduled"),
    "cr-0fedcba9876543210": _reservation("cr-0fedcba9876543210", "p6-b200.48xlarge", "default"),
}
NOT_FOUND = "InvalidCapacityReservationId.NotFound"


def _run(
    quota: int | str = 100_000,
    reservations: dict | None = None,
    ami: bool | str = True,
    addons: dict | None = None,
    addon_answer: dict | None = None,
    configurations: dict | None = None,
    schema: dict | None = None,
    newer_schemas: tuple[tuple[str, dict], ...] = (),
    **overrides,
) -> list[preflight.Check]:
    """The prod stack's preflight. `quota`/`ami` a string: that call fails with this AWS error
    code ("network": the endpoint refuses the connection). A reservation's answer a string: the
    error code AWS answers for it. `configurations`: the values passed each add-on, checked against
    `schema` (DescribeAddonConfiguration's, for the version the add-on check passed), then each of `newer_schemas`
    ((version, schema), in the order the check asks)."""
    cfg = plan_of("prod").config
    quotas_client, reservations_client, eks = _client("service-quotas"), _client("ec2"), _client("eks")
    if ami == "network":  # a closed local port: a real connection failure, reported without retries
        ssm = boto3.client(
            "ssm",
            region_name=REGION,
            endpoint_url="http://127.0.0.1:9",
            aws_access_key_id="x",
            aws_secret_access_key="x",
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=2),
        )
    elif ami:
        ssm = _client("ssm")
    else:
        ssm = _moto("ssm")  # moto: the public parameter does not exist there
    pins = {ADDON: None} if addons is None else addons
    with (
        Stubber(ssm) if ssm is _client("ssm") else contextlib.nullcontext() as ssm_stub,
        Stubber(quotas_client) as quota_stub,
        Stubber(reservations_client) as reservation_stub,
        Stubber(eks) as eks_stub,
    ):
        if ssm_stub:
            ssm_stub.add_response(
                "get_parameter",
                {"Parameter": {"Name": AMI, "Value": "ami-0123456789abcdef0", "Type": "String"}},
                {"Name": AMI},
            )
        for code in ("L-417A185B", "L-1216C47A"):  # P instances, then standard (the CPU nodes)
            expected = {"ServiceCode": "ec2", "QuotaCode": code}
            if isinstance(quota, str):
                add_wire_error(
                    quota_stub,
                    "service-quotas",
                    "get_service_quota",
                    quota,
                    "User is not authorized to perform: servicequotas:GetServiceQuota",
                    expected_params=expected,
                )
            else:
                quota_stub.add_response(
                    "get_service_quota", {"Quota": {"QuotaCode": code, "Value": float(quota)}}, expected
                )
        for rid, response in (reservations or RESERVATIONS).items():
            if isinstance(response, str):
                add_wire_error(
                    reservation_stub,
                    "ec2",
                    "describe_capacity_reservations",
                    response,
                    f"error for {rid}",
                    expected_params={"CapacityReservationIds": [rid]},
                )
            else:
                reservation_stub.add_response(
                    "describe_capacity_reservations", response, {"CapacityReservationIds": [rid]}
                )
        for name, pin in pins.items():
            answer = addon_answer or _addon_versions(name)
            eks_stub.add_response("describe_addon_versions", answer, {"addonName": name, "kubernetesVersion": K8S})
            if (configurations or {}).get(name):
                for version, its in ((pin or _default_of(answer), schema), *newer_schemas):
                    eks_stub.add_response(
                        "describe_addon_configuration",
                        {"addonName": name, "addonVersion": version, "configurationSchema": json.dumps(its or {})},
                        {"addonName": name, "addonVersion": version},
                    )
        clients = preflight.Clients(
            Ec2(_moto("ec2"), reservations_client, **overrides),
            quotas_client,
            ssm,
            _moto("fsx"),
            eks,
        )
        return preflight.run(cfg, clients, pins, configurations)


def _failed(checks: list[preflight.Check]) -> list[str]:
    return [c.check for c in checks if not c.ok]


def test_every_check_passes_for_a_ready_account(aws):
    checks = _run()
    assert _failed(checks) == []
    assert {c.check for c in checks} == {
        "offered in AZ",
        "EFA supported",
        "reservation",
        "vCPU quota",
        "EKS NVIDIA AMI",
        "FSx for Lustre",
        "EKS add-on",
    }


def test_instance_type_not_offered_in_the_zone_fails(aws):
    checks = _run(describe_instance_type_offerings=lambda **_: {"InstanceTypeOfferings": []})
    assert set(_failed(checks)) == {"offered in AZ"}


def test_efa_not_supported_fails(aws):
    def no_efa(InstanceTypes):
        return {
            "InstanceTypes": [
                {"InstanceType": t, "VCpuInfo": {"DefaultVCpus": 192}, "NetworkInfo": {"EfaSupported": False}}
                for t in InstanceTypes
            ]
        }

    assert "EFA supported" in _failed(_run(describe_instance_types=no_efa))


def test_quota_below_every_pool_at_max_fails_and_says_what_to_request(aws):
    checks = _run(quota=96)
    (p_quota,) = [c for c in checks if c.check == "vCPU quota" and "L-417A185B" in c.target]
    assert not p_quota.ok
    assert (
        "3840 vCPUs needed" in p_quota.detail
    )  # (h100 16 + b200 4 nodes) x 192 vCPUs; the Capacity Block is bought capacity
    assert "request 3840" in p_quota.fix


def test_the_standard_quota_counts_the_system_and_the_teams_cpu_nodes_at_max(aws):
    checks = _run(quota=96)
    (standard,) = [c for c in checks if c.check == "vCPU quota" and "L-1216C47A" in c.target]
    assert not standard.ok
    assert "288 vCPUs needed" in standard.detail, standard.detail  # (9 system + 27 teams' CPU nodes) x 8 vCPUs


def test_reservation_in_another_zone_or_expired_fails(aws):
    checks = _run(
        reservations={
            "cr-0a1b2c3d4e5f60718": _reservation("cr-0a1b2c3d4e5f60718", "p5en.48xlarge", "capacity-block", "expired"),
            "cr-0fedcba9876543210": _reservation(
                "cr-0fedcba9876543210", "p6-b200.48xlarge", "default", zone="us-east-2a"
            ),
        }
    )
    details = [c.detail for c in checks if c.check == "reservation"]
    assert _failed(checks).count("reservation") == 2
    assert any("state expired" in d for d in details) and any("AZ us-east-2a" in d for d in details)


def test_reservation_aws_does_not_know_fails_with_its_fix(aws):
    checks = _run(reservations={**RESERVATIONS, "cr-0a1b2c3d4e5f60718": NOT_FOUND})
    (failed,) = [c for c in checks if not c.ok]
    assert failed.check == "reservation" and failed.checked and NOT_FOUND in failed.detail
    assert "check the id and the region" in failed.fix


def test_missing_nvidia_ami_fails(aws):
    checks = _run(ami=False)
    assert _failed(checks) == ["EKS NVIDIA AMI"]


def test_no_credentials_is_a_clear_message_not_a_traceback(monkeypatch, capsys, tmp_path):
    from infra.cli.main import main

    for var in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask an instance metadata service
    monkeypatch.chdir(ROOT)
    assert main(["preflight", "dev"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no AWS credentials") and "Traceback" not in err


def test_fsx_in_an_unavailable_zone_fails(aws):
    def impaired(ZoneNames):
        return {"AvailabilityZones": [{"ZoneName": z, "State": "impaired"} for z in ZoneNames]}

    checks = _run(describe_availability_zones=impaired)
    assert _failed(checks) == ["FSx for Lustre"]


def _line(checks: list[preflight.Check], check: str) -> list[preflight.Check]:
    return [c for c in checks if c.check == check]


def test_access_denied_on_service_quotas_marks_only_the_quota_checks_not_checked(aws):
    checks = _run(quota="AccessDeniedException")
    quotas = _line(checks, "vCPU quota")
    assert len(quotas) == 2 and all(
        not c.checked and c.detail.startswith("not checked: needs servicequotas:GetServiceQuota") for c in quotas
    )
    assert all(c.ok for c in checks if c.check != "vCPU quota")


def test_unauthorized_ec2_call_names_the_ec2_action(aws):
    def denied(**_):
        raise preflight.aws_errors.ClientError(
            {"Error": {"Code": "UnauthorizedOperation", "Message": "You are not authorized"}},
            "DescribeInstanceTypeOfferings",
        )

    checks = _run(describe_instance_type_offerings=denied)
    offered = _line(checks, "offered in AZ")
    assert offered and all(
        c.detail == "not checked: needs ec2:DescribeInstanceTypeOfferings (UnauthorizedOperation)" for c in offered
    )
    assert all(c.ok for c in checks if c.check != "offered in AZ")


def test_connection_failure_says_it_is_a_network_failure(aws):
    checks = _run(ami="network")
    (ami,) = _line(checks, "EKS NVIDIA AMI")
    assert not ami.checked and ami.detail.startswith(
        "not checked: network failure: Could not connect to the endpoint URL"
    )
    assert all(c.ok for c in checks if c.check != "EKS NVIDIA AMI")


def test_throttled_call_is_not_checked_and_says_to_rerun(aws):
    checks = _run(quota="TooManyRequestsException")
    assert all("throttled GetServiceQuota" in c.detail and "rerun" in c.fix for c in _line(checks, "vCPU quota"))


def test_unreadable_answer_is_not_checked_with_the_reason(aws):
    def garbage(**_):
        return {"InstanceTypes": []}  # an answer without the one instance type asked for

    checks = _run(describe_instance_types=garbage)
    efa = _line(checks, "EFA supported")
    assert efa and all(
        not c.checked and c.detail.startswith("not checked: unreadable answer from AWS (ValueError") for c in efa
    )


def test_not_found_access_denied_and_network_failure_each_get_their_own_line_and_the_rest_run(aws, capsys):
    checks = _run(
        reservations={**RESERVATIONS, "cr-0fedcba9876543210": NOT_FOUND}, quota="AccessDeniedException", ami="network"
    )
    report = preflight.render("prod", checks)
    lines = report.splitlines()
    assert max(map(len, lines)) <= 120
    assert sum(NOT_FOUND in c.detail and c.status == "FAIL" for c in checks) == 1
    assert sum("needs servicequotas:GetServiceQuota" in line for line in lines) == 2
    assert sum("network failure" in line for line in lines) == 1
    assert all(c.ok for c in checks if c.check in ("offered in AZ", "EFA supported", "FSx for Lustre", "EKS add-on"))
    assert (
        lines[-1] == f"{sum(c.ok for c in checks)} passed, 1 failed, 3 not checked (n/c)" and "Traceback" not in report
    )


def test_rejected_credentials_stop_the_run_with_one_message(aws):
    def expired(**_):
        raise preflight.aws_errors.ClientError(
            {
                "Error": {
                    "Code": "AuthFailure",
                    "Message": "AWS was not able to validate the provided access credentials",
                }
            },
            "DescribeInstanceTypeOfferings",
        )

    with pytest.raises(preflight.CredentialsRejected, match="AuthFailure"):
        _run(describe_instance_type_offerings=expired)


def test_addon_lists_the_version_aws_would_pick(aws):
    (addon,) = _line(_run(), "EKS add-on")
    assert addon.ok and addon.detail == "AWS would pick v1.20.4-eksbuild.2 (its default for 1.35)"


def test_addon_pin_aws_offers_passes(aws):
    (addon,) = _line(_run(addons={ADDON: "v1.20.4-eksbuild.1"}), "EKS add-on")
    assert addon.ok


def test_addon_pin_aws_does_not_offer_fails_naming_the_key(aws):
    (addon,) = _line(_run(addons={ADDON: "v1.19.0-eksbuild.1"}), "EKS add-on")
    assert not addon.ok and addon.checked and "not offered" in addon.detail
    assert "higgsfield:addonVersions.vpc-cni" in addon.fix and "v1.20.4-eksbuild.2" in addon.fix


def test_addon_without_a_default_and_no_pin_fails(aws):
    (addon,) = _line(_run(addon_answer=_addon_versions(default=None)), "EKS add-on")
    assert not addon.ok and "no default" in addon.detail and "pin one" in addon.fix


def test_addon_eks_does_not_offer_for_the_kubernetes_version_fails(aws):
    (addon,) = _line(_run(addon_answer={"addons": []}), "EKS add-on")
    assert not addon.ok and "offers no version" in addon.detail


def test_addon_pins_are_the_plan_versions_and_a_placeholder_is_eks_default():
    plan = plan_of("prod")
    first, second, *rest = plan.of_type("aws:eks/addon:Addon")

    def at(addon, version):
        return dataclasses.replace(addon, inputs={**addon.inputs, "addonVersion": version})

    resources = [
        at(first, "<resolved at deploy: EKS default for Kubernetes 1.35>"),
        at(second, "v1.20.4-eksbuild.1"),
        *rest,
    ]
    pins = preflight.addon_pins(dataclasses.replace(plan, resources=resources))
    assert set(pins) >= {"vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent", "aws-fsx-csi-driver"}
    assert pins[first.inputs["addonName"]] is None and pins[second.inputs["addonName"]] == "v1.20.4-eksbuild.1"


def test_the_manual_lists_every_permission_preflight_needs():
    from tests.conftest import manual_text

    text = manual_text()
    assert all(f"`{action}`" in text for action in preflight.PERMISSIONS)


AGENT = "eks-node-monitoring-agent"


def test_a_node_monitoring_agent_eks_would_pick_below_the_floor_fails_naming_a_newer_one(aws):
    """Up to v1.6.3 the agent reads a team's own XID 13 and 31 as the GPU failed, and node repair replaces a shared
    node under another team's gang (infra/core/versions.py ADDON_FLOORS): a default below v1.6.4 fails before the
    deploy, naming the key and an offered version to pin."""
    answer = _addon_versions(AGENT, default="v1.6.3-eksbuild.1", others=("v1.6.4-eksbuild.1",))
    (addon,) = _line(_run(addons={AGENT: None}, addon_answer=answer), "EKS add-on")
    assert not addon.ok and "below v1.6.4" in addon.detail
    assert f"higgsfield:addonVersions.{AGENT}" in addon.fix and "v1.6.4-eksbuild.1" in addon.fix


def test_a_node_monitoring_agent_eks_would_pick_at_the_floor_passes(aws):
    answer = _addon_versions(AGENT, default="v1.6.4-eksbuild.1", others=())
    (addon,) = _line(_run(addons={AGENT: None}, addon_answer=answer), "EKS add-on")
    assert addon.ok


def _agent_schema(monitors: bool) -> dict:
    """The shape of the agent's configuration schema (aws/eks-node-monitoring-agent:charts/configuration.schema.json
    @v1.6.4, trimmed): closed objects, `nodeAgent.monitors` only from v1.6.0 (#50)."""
    node_agent: dict = {
        "resources": {"type": "object"},
        "tolerations": {"type": "array"},
        "podAnnotations": {"type": "object", "additionalProperties": {"type": "string"}},
    }
    if monitors:
        settings = {"type": "object", "additionalProperties": False, "properties": {"enabled": {"type": "boolean"}}}
        names = ("kernel-monitor", "networking", "storage-monitor", "nvidia", "neuron", "runtime")
        node_agent["monitors"] = {
            "type": "object",
            "additionalProperties": False,
            "properties": dict.fromkeys(names, settings),
        }
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "additionalProperties": False,
        "properties": {"nodeAgent": {"type": "object", "additionalProperties": False, "properties": node_agent}},
    }


def _agent_values_check(
    schema: dict, others: tuple[str, ...] = (), newer_schemas: tuple[tuple[str, dict], ...] = ()
) -> preflight.Check:
    answer = _addon_versions(AGENT, default="v1.6.4-eksbuild.1", others=others)
    planned = preflight.addon_configurations(plan_of("prod"))
    run = _run(
        addons={AGENT: None},
        addon_answer=answer,
        configurations={AGENT: planned[AGENT]},
        schema=schema,
        newer_schemas=newer_schemas,
    )
    (values,) = _line(run, "add-on values")
    return values


def test_the_agents_configuration_that_its_schema_takes_passes(aws):
    values = _agent_values_check(_agent_schema(monitors=True))
    assert values.ok and values.target == f"{AGENT} v1.6.4-eksbuild.1"


def test_an_agent_version_whose_schema_has_no_monitors_fails_before_the_deploy(aws):
    """EKS validates an add-on's configuration values against its version's schema at create and update: an agent
    whose schema has no `nodeAgent.monitors` would fail the deploy after the cluster is made, and the kernel monitor
    (components/addons.py NODE_MONITORING_AGENT_CONFIGURATION) would not be off. Preflight says so first."""
    values = _agent_values_check(_agent_schema(monitors=False))
    assert not values.ok and values.checked and "at nodeAgent" in values.detail and "'monitors'" in values.detail
    assert f"higgsfield:addonVersions.{AGENT}" in values.fix


def test_preflight_checks_the_values_the_program_passes_each_addon():
    configurations = preflight.addon_configurations(plan_of("prod"))
    assert configurations[AGENT]["nodeAgent"]["monitors"]["kernel-monitor"] == {"enabled": False}
    assert "coredns" in configurations and "vpc-cni" in configurations


def test_a_refused_configuration_names_the_newest_offered_version_whose_schema_takes_it(aws):
    """The newer versions are read newest first: v1.6.6's schema has no monitors either (say), v1.6.5's does."""
    values = _agent_values_check(
        _agent_schema(monitors=False),
        others=("v1.6.5-eksbuild.1", "v1.6.6-eksbuild.1", "v1.6.3-eksbuild.1"),
        newer_schemas=(
            ("v1.6.6-eksbuild.1", _agent_schema(monitors=False)),
            ("v1.6.5-eksbuild.1", _agent_schema(monitors=True)),
        ),
    )
    assert (
        not values.ok
        and values.fix == f"pin v1.6.5-eksbuild.1 in higgsfield:addonVersions.{AGENT}, whose schema takes them"
    )

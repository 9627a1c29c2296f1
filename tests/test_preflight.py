"""`higgsfield preflight` against moto (EC2 offerings and instance types, AZs, FSx, SSM) and
botocore Stubbers where moto has no coverage (Service Quotas for EC2, capacity reservations)."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from infra.cli import preflight
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


def _client(service: str):
    return boto3.client(service, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")


def _reservation(rid: str, instance_type: str, kind: str, state: str = "active", zone: str = "us-east-2b") -> dict:
    return {"CapacityReservations": [{"CapacityReservationId": rid, "InstanceType": instance_type, "AvailabilityZone": zone, "State": state, "ReservationType": kind, "TotalInstanceCount": 4}]}


@pytest.fixture
def aws():
    with mock_aws():
        yield


def _run(quota: int = 100_000, reservations: dict | None = None, ami: bool = True, **overrides) -> list[preflight.Check]:
    cfg = plan_of("prod").config
    quotas_client, reservations_client, ssm = _client("service-quotas"), _client("ec2"), _client("ssm")
    if ami:
        ssm_stub = Stubber(ssm)
        ssm_stub.add_response("get_parameter", {"Parameter": {"Name": AMI, "Value": "ami-0123456789abcdef0", "Type": "String"}}, {"Name": AMI})
        ssm_stub.activate()
    else:
        ssm = boto3.client("ssm", region_name=REGION)  # moto: the public parameter does not exist there
    with Stubber(quotas_client) as quota_stub, Stubber(reservations_client) as reservation_stub:
        for code in ("L-417A185B", "L-1216C47A"):  # P instances, then standard (the CPU nodes)
            quota_stub.add_response("get_service_quota", {"Quota": {"QuotaCode": code, "Value": float(quota)}}, {"ServiceCode": "ec2", "QuotaCode": code})
        given = reservations or {
            "cr-0a1b2c3d4e5f60718": _reservation("cr-0a1b2c3d4e5f60718", "p5en.48xlarge", "capacity-block", "scheduled"),
            "cr-0fedcba9876543210": _reservation("cr-0fedcba9876543210", "p6-b200.48xlarge", "default"),
        }
        for rid, response in given.items():
            reservation_stub.add_response("describe_capacity_reservations", response, {"CapacityReservationIds": [rid]})
        clients = preflight.Clients(Ec2(boto3.client("ec2", region_name=REGION), reservations_client, **overrides), quotas_client, ssm, boto3.client("fsx", region_name=REGION))
        return preflight.run(cfg, clients)


def _failed(checks: list[preflight.Check]) -> list[str]:
    return [c.check for c in checks if not c.ok]


def test_every_check_passes_for_a_ready_account(aws):
    checks = _run()
    assert _failed(checks) == []
    assert {c.check for c in checks} == {"offered in AZ", "EFA supported", "reservation", "vCPU quota", "EKS NVIDIA AMI", "FSx for Lustre"}


def test_instance_type_not_offered_in_the_zone_fails(aws):
    checks = _run(describe_instance_type_offerings=lambda **_: {"InstanceTypeOfferings": []})
    assert set(_failed(checks)) == {"offered in AZ"}


def test_efa_not_supported_fails(aws):
    def no_efa(InstanceTypes):
        return {"InstanceTypes": [{"InstanceType": t, "VCpuInfo": {"DefaultVCpus": 192}, "NetworkInfo": {"EfaSupported": False}} for t in InstanceTypes]}

    assert "EFA supported" in _failed(_run(describe_instance_types=no_efa))


def test_quota_below_every_pool_at_max_fails_and_says_what_to_request(aws):
    checks = _run(quota=96)
    (p_quota,) = [c for c in checks if c.check == "vCPU quota" and "L-417A185B" in c.target]
    assert not p_quota.ok
    assert "3840 vCPUs needed" in p_quota.detail  # (h100 16 + b200 4 nodes) x 192 vCPUs; the Capacity Block is bought capacity
    assert "request 3840" in p_quota.fix


def test_reservation_in_another_zone_or_expired_fails(aws):
    checks = _run(reservations={
        "cr-0a1b2c3d4e5f60718": _reservation("cr-0a1b2c3d4e5f60718", "p5en.48xlarge", "capacity-block", "expired"),
        "cr-0fedcba9876543210": _reservation("cr-0fedcba9876543210", "p6-b200.48xlarge", "default", zone="us-east-2a"),
    })
    details = [c.detail for c in checks if c.check == "reservation"]
    assert _failed(checks).count("reservation") == 2
    assert any("state expired" in d for d in details) and any("AZ us-east-2a" in d for d in details)


def test_missing_reservation_fails(aws):
    checks = _run(reservations={
        "cr-0a1b2c3d4e5f60718": {"CapacityReservations": []},
        "cr-0fedcba9876543210": _reservation("cr-0fedcba9876543210", "p6-b200.48xlarge", "default"),
    })
    assert [c.detail for c in checks if not c.ok] == ["not found"]


def test_missing_nvidia_ami_fails(aws):
    checks = _run(ami=False)
    assert _failed(checks) == ["EKS NVIDIA AMI"]


def test_no_credentials_is_a_clear_message_not_a_traceback(monkeypatch, capsys, tmp_path):
    from infra.cli.main import main

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
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

"""`higgsfield cost`: hand-checked totals, GPU pools free while idle, spot and Capacity Blocks
never priced as on-demand, and prices refreshed through a stubbed AWS Pricing API."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from infra.cli import cost
from infra.cli.offline import record
from tests.conftest import STACKS, plan_of, set_key, set_pool

PRICES = cost.load_prices()


def _gpu_ec2_lines(est: cost.Estimate) -> list[cost.Line]:
    return [line for line in est.lines if line.item.startswith("EC2") and line.resource.startswith("gpu-")]


def test_small_stack_total_matches_a_hand_computed_figure(project_copy):
    """dev with one on-demand g6e.xlarge pool (min 0, max 2, 150 GiB root) and no FSx."""
    root = project_copy("dev", set_pool(0, instanceTypes=["g6e.xlarge"], capacity={"type": "on-demand"}))
    est = cost.estimate(record("bad", root=root), PRICES)
    h = 730
    idle = 0.10 + 2 * 0.2016 + 2 * 50 * 0.08 / h + (0.045 + 100 * 0.045 / h) + 2 * 1.0 / h + 50 * 0.50 / h  # two KMS keys: Secrets, logs
    full = idle + 2 * 1.861 + 2 * 150 * 0.08 / h
    assert est.total("idle_hour") == pytest.approx(idle)
    assert est.total("full_hour") == pytest.approx(full)
    assert est.unpriced == []


@pytest.mark.parametrize("stack_name", STACKS)
def test_idle_gpu_cost_is_zero_when_every_pool_has_min_zero(stack_name):
    est = cost.estimate(plan_of(stack_name), PRICES)
    assert all(line.idle_hour in (0.0, None) for line in _gpu_ec2_lines(est))
    assert all(line.idle_hour == 0.0 for line in _gpu_ec2_lines(est) if "on-demand" in line.item)


def test_a_pool_with_min_one_pays_its_instance_while_idle(project_copy):
    root = project_copy("dev", set_pool(0, instanceTypes=["g6e.xlarge"], capacity={"type": "on-demand"}, minSize=1))
    (line,) = _gpu_ec2_lines(cost.estimate(record("bad", root=root), PRICES))
    assert line.idle_hour == pytest.approx(1.861)


def test_spot_pools_are_flagged_not_priced_as_on_demand():
    (line,) = _gpu_ec2_lines(cost.estimate(plan_of("dev"), PRICES))  # dev's pool is spot
    assert "spot" in line.item and line.full_hour is None and "not priced" in line.note


def test_capacity_blocks_and_reservations_are_flagged_not_priced():
    lines = {line.resource: line for line in _gpu_ec2_lines(cost.estimate(plan_of("prod"), PRICES))}
    assert lines["gpu-h200-block"].full_hour is None and "prepaid" in lines["gpu-h200-block"].note
    assert lines["gpu-b200-odcr"].full_hour is None and "reservation" in lines["gpu-b200-odcr"].note
    assert lines["gpu-h100"].full_hour == pytest.approx(16 * PRICES["ec2_on_demand_hour"]["p5.48xlarge"])


def test_fsx_is_priced_by_capacity_and_throughput_tier():
    (line,) = [line for line in cost.estimate(plan_of("prod"), PRICES).lines if line.item.startswith("FSx")]
    assert line.idle_hour == pytest.approx(24000 * 0.29 / 730)


def test_extended_support_versions_pay_the_extended_control_plane_rate(project_copy):
    root = project_copy("dev", set_key("higgsfield:kubernetesVersion", "1.32"))
    (line,) = [line for line in cost.estimate(record("bad", root=root), PRICES).lines if line.item == "EKS control plane"]
    assert line.idle_hour == 0.60


def test_region_without_prices_is_a_clear_error(project_copy):
    root = project_copy("dev", lambda c: c.update({"aws:region": "eu-west-1", "higgsfield:availabilityZones": ["eu-west-1a", "eu-west-1b"], "higgsfield:gpuPools": [], "higgsfield:scheduler": {}}))
    with pytest.raises(cost.PriceError, match="no prices for eu-west-1"):
        cost.estimate(record("bad", root=root), PRICES)


def _price_list(usd: str) -> str:
    return json.dumps({"product": {"attributes": {}}, "terms": {"OnDemand": {"X": {"priceDimensions": {"Y": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}}})


def test_refresh_takes_ec2_prices_from_the_pricing_api():
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        for instance_type, usd in (("g6e.xlarge", "1.5"), ("p5.48xlarge", "50.0")):
            stub.add_response("get_products", {"PriceList": [_price_list(usd)], "FormatVersion": "aws_v1"}, {
                "ServiceCode": "AmazonEC2",
                "Filters": [
                    {"Type": "TERM_MATCH", "Field": "instanceType", "Value": instance_type},
                    {"Type": "TERM_MATCH", "Field": "location", "Value": "US East (Ohio)"},
                    {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
                    {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
                    {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
                    {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
                ],
                "MaxResults": 10,
            })
        updated = cost.refresh(PRICES, ["p5.48xlarge", "g6e.xlarge"], "us-east-2", client, "2026-12-02")
        stub.assert_no_pending_responses()
    assert updated["ec2_on_demand_hour"]["g6e.xlarge"] == 1.5 and updated["ec2_on_demand_hour"]["p5.48xlarge"] == 50.0
    assert updated["verified"] is True and "Pricing API" in updated["source"]
    assert PRICES["ec2_on_demand_hour"]["p5.48xlarge"] != 50.0  # the loaded file is left alone


def test_refresh_without_a_price_is_an_error():
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_response("get_products", {"PriceList": [], "FormatVersion": "aws_v1"})
        with pytest.raises(cost.PriceError, match="no on-demand price"):
            cost.on_demand_price(client, "p5.48xlarge", "us-east-2")


def test_cost_command_prints_idle_and_full_columns_and_writes_json(capsys, monkeypatch, tmp_path):
    from infra.cli.main import main
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    assert main(["cost", "staging", "--json", str(tmp_path / "c.json")]) == 0
    assert "idle $/month" in capsys.readouterr().out
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["total"]["full_month"] > data["total"]["idle_month"] > 0

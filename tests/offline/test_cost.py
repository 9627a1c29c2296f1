"""`higgsfield cost`: hand-checked totals, GPU pools free while idle, spot and Capacity Blocks
never priced as on-demand, reservations billed while idle, what has no price marked without
failing the report, and prices refreshed through a stubbed AWS Pricing API."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from infra.offline import cost
from infra.offline.evaluate import record
from tests.conftest import STACKS, plan_of, set_key, set_pool

PRICES = cost.load_prices()
US_EAST_2 = PRICES["regions"]["us-east-2"]


def _gpu_ec2_lines(est: cost.Estimate) -> list[cost.Line]:
    return [line for line in est.lines if line.item.startswith("EC2") and line.resource.startswith("gpu-")]


def test_small_stack_total_matches_a_hand_computed_figure(project_copy):
    """dev with one on-demand g6e.xlarge pool (min 0, max 2, 150 GiB root) and no FSx."""
    root = project_copy("dev", set_pool(0, instanceTypes=["g6e.xlarge"], capacity={"type": "on-demand"}))
    est = cost.estimate(record("bad", root=root), PRICES)
    h = 730
    idle = (
        0.10 + 2 * 0.2016 + 2 * 50 * 0.08 / h + (0.045 + 100 * 0.045 / h) + 2 * 1.0 / h + 50 * 0.50 / h
    )  # two KMS keys: Secrets, logs
    full = idle + 2 * 1.861 + 2 * 150 * 0.08 / h + 19 * 0.2016 + 19 * 100 * 0.08 / h  # and the teams' 19 CPU nodes
    assert est.total("idle_hour") == pytest.approx(idle)
    assert est.total("full_hour") == pytest.approx(full)
    assert est.unpriced == []


@pytest.mark.parametrize("stack_name", STACKS)
def test_idle_gpu_cost_is_zero_when_every_pool_has_min_zero_unless_a_reservation_bills(stack_name):
    est = cost.estimate(plan_of(stack_name), PRICES)
    assert all(line.idle_hour in (0.0, None) for line in _gpu_ec2_lines(est) if "reservation" not in line.item)
    assert all(line.idle_hour == 0.0 for line in _gpu_ec2_lines(est) if "on-demand" in line.item)


def test_a_pool_with_min_one_pays_its_instance_while_idle(project_copy):
    root = project_copy("dev", set_pool(0, instanceTypes=["g6e.xlarge"], capacity={"type": "on-demand"}, minSize=1))
    (line,) = _gpu_ec2_lines(cost.estimate(record("bad", root=root), PRICES))
    assert line.idle_hour == pytest.approx(1.861)


def test_spot_pools_are_flagged_not_priced_as_on_demand():
    (line,) = _gpu_ec2_lines(cost.estimate(plan_of("dev"), PRICES))  # dev's pool is spot
    assert "spot" in line.item and line.full_hour is None and "not priced" in line.note


def test_capacity_blocks_are_flagged_prepaid_not_priced():
    lines = {line.resource: line for line in _gpu_ec2_lines(cost.estimate(plan_of("prod"), PRICES))}
    assert lines["gpu-h200-block"].full_hour is None and "prepaid" in lines["gpu-h200-block"].note
    assert lines["gpu-h100"].full_hour == pytest.approx(16 * US_EAST_2["ec2_on_demand_hour"]["p5.48xlarge"])


def test_idle_total_includes_the_capacity_reservation_billed_whether_used_or_not():
    """EC2 User Guide, "Capacity Reservation pricing and billing": a Capacity Reservation is charged
    at the On-Demand rate whether instances run in it or not. prod's b200-odcr pool (maxSize 4) is
    held warm at its 4 nodes, and its reservation is billed either way."""
    est = cost.estimate(plan_of("prod"), PRICES)
    whole = 4 * US_EAST_2["ec2_on_demand_hour"]["p6-b200.48xlarge"]
    (line,) = [line for line in _gpu_ec2_lines(est) if line.resource == "gpu-b200-odcr"]
    assert line.idle_hour == pytest.approx(whole) and line.full_hour == pytest.approx(whole)
    others = sum(other.idle_hour or 0.0 for other in est.lines if other is not line)
    assert est.total("idle_hour") == pytest.approx(others + whole)


def test_fsx_is_priced_by_capacity_and_throughput_tier():
    (line,) = [line for line in cost.estimate(plan_of("prod"), PRICES).lines if line.item.startswith("FSx")]
    assert line.group == "storage"
    assert line.idle_hour == pytest.approx(24000 * 0.29 / 730)


def test_extended_support_versions_pay_the_extended_control_plane_rate(project_copy):
    root = project_copy("dev", set_key("higgsfield:kubernetesVersion", "1.32"))
    (line,) = [
        line for line in cost.estimate(record("bad", root=root), PRICES).lines if line.item == "EKS control plane"
    ]
    assert line.idle_hour == 0.60


def test_an_unpriced_on_demand_type_is_marked_and_the_rest_still_adds_up(project_copy):
    root = project_copy("dev", set_pool(0, instanceTypes=["g7e.2xlarge"], capacity={"type": "on-demand"}))
    assert "g7e.2xlarge" not in PRICES["regions"]["us-west-2"]["ec2_on_demand_hour"]
    est = cost.estimate(record("bad", root=root), PRICES)
    (line,) = _gpu_ec2_lines(est)
    assert line.idle_hour is None and line.full_hour is None
    assert "not priced: no price for g7e.2xlarge in us-west-2" in line.note and "--refresh" in line.note
    assert est.unpriced == [line]
    assert est.total("idle_hour") == pytest.approx(cost.estimate(plan_of("dev"), PRICES).total("idle_hour"))


def _two_type_pool(project_copy) -> cost.Line:
    root = project_copy("dev", set_pool(0, instanceTypes=["g6e.xlarge", "g6e.2xlarge"], capacity={"type": "on-demand"}))
    (line,) = _gpu_ec2_lines(cost.estimate(record("bad", root=root), PRICES))
    return line


def test_a_pool_with_two_instance_types_names_both_in_its_cost_line(project_copy):
    assert _two_type_pool(project_copy).item.startswith("EC2 g6e.xlarge/g6e.2xlarge on-demand x 0..2")


def test_a_pool_with_two_instance_types_gives_each_types_price(project_copy):
    rates = PRICES["regions"]["us-west-2"]["ec2_on_demand_hour"]
    note = _two_type_pool(project_copy).note
    assert f"g6e.xlarge ${rates['g6e.xlarge']:,.2f}/hour, g6e.2xlarge ${rates['g6e.2xlarge']:,.2f}/hour" in note


def test_a_pool_with_two_instance_types_is_priced_at_the_first_and_notes_the_dearest_full_scale(project_copy):
    rates = PRICES["regions"]["us-west-2"]["ec2_on_demand_hour"]
    line = _two_type_pool(project_copy)
    assert line.full_hour == pytest.approx(2 * rates["g6e.xlarge"])  # EKS fills On-Demand in the listed order
    assert f"up to ${2 * rates['g6e.2xlarge']:,.2f}/hour at full scale" in line.note


def test_cost_of_a_stack_with_an_unpriced_type_succeeds_and_says_not_priced(project_copy, capsys):
    from infra.cli.main import main

    project_copy("dev", set_pool(0, instanceTypes=["g7e.2xlarge"], capacity={"type": "on-demand"}))
    assert main(["cost", "bad"]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if "EC2 g7e.2xlarge on-demand" in line]
    assert row.split()[-6:] == ["not", "priced"] * 3
    assert "1 item(s) not priced, excluded from the totals (marked *); their resources: gpu-l40s" in out
    (subtotal,) = [line for line in out.splitlines() if line.startswith("  GPU pool l40s") and "(subtotal)" in line]
    assert subtotal.count(" *") == 3  # each sum says it leaves the pool's instances out


def test_a_region_without_prices_never_shows_a_dollar_figure(project_copy, capsys):
    from infra.cli.main import main

    project_copy("dev", _region_without_prices)
    assert main(["cost", "bad"]) == 0
    out = capsys.readouterr().out
    assert "$" not in out.replace("$/month", "").replace("$/hour", "")


def test_a_spot_pool_in_a_region_without_prices_shows_no_zero_dollar_total(project_copy, capsys):
    """init from dev into ap-south-2 keeps dev's spot pool: idle at zero nodes it summed to "$0.00 *"."""
    from infra.cli.main import main

    def moved(config: dict) -> None:
        config.update({"aws:region": "ap-south-2", "higgsfield:availabilityZones": ["ap-south-2a", "ap-south-2b"]})
        config["higgsfield:gpuPools"][0]["availabilityZone"] = "ap-south-2a"

    project_copy("dev", moved)
    assert main(["cost", "bad"]) == 0
    out = capsys.readouterr().out
    assert "spot" in out and "$" not in out.replace("$/month", "").replace("$/hour", "")
    (total,) = [line for line in out.splitlines() if line.startswith("  TOTAL")]
    assert total.split()[-6:] == ["not", "priced"] * 3


def _in_eu_north_1(config: dict) -> None:
    """A region whose EC2 prices are bundled (SkyPilot's catalog) and whose EBS, NAT, FSx and CloudWatch are not."""
    config.update({"aws:region": "eu-north-1", "higgsfield:availabilityZones": ["eu-north-1a", "eu-north-1b"]})
    config["higgsfield:gpuPools"][0]["availabilityZone"] = "eu-north-1a"


def _line(est: cost.Estimate, item: str) -> cost.Line:
    (line,) = [line for line in est.lines if line.item == item]
    return line


def test_the_eks_control_plane_is_priced_where_only_ec2_prices_are_bundled(project_copy):
    est = cost.estimate(record("bad", root=project_copy("dev", _in_eu_north_1)), PRICES)
    line = _line(est, "EKS control plane")
    assert "eks_cluster_hour" not in PRICES["regions"]["eu-north-1"]
    assert line.idle_hour == line.full_hour == 0.10 and "not priced" not in line.note


def test_kms_keys_are_priced_where_only_ec2_prices_are_bundled(project_copy):
    est = cost.estimate(record("bad", root=project_copy("dev", _in_eu_north_1)), PRICES)
    assert [line.full_hour for line in est.lines if line.item == "KMS key"] == [pytest.approx(1.0 / 730)] * 2


def test_a_line_without_a_bundled_price_names_the_stacks_own_refresh_command(project_copy):
    est = cost.estimate(record("bad", root=project_copy("dev", _in_eu_north_1)), PRICES)
    (nat, *_) = [line for line in est.lines if line.item == "NAT gateway"]
    assert nat.full_hour is None
    assert nat.note.endswith("not priced: no price for NAT gateways in eu-north-1; run `higgsfield cost bad --refresh`")


def _headline(out: str) -> str:
    """The report's headline: its first line and any continuation, up to the full-scale line."""
    lines = out.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("  full scale"))
    return " ".join(line.strip() for line in lines[:end])


def test_the_headline_counts_the_items_it_leaves_out(project_copy, capsys):
    from infra.cli.main import main

    root = project_copy("dev", _in_eu_north_1)
    left_out = len(cost.estimate(record("bad", root=root), PRICES).unpriced)
    assert main(["cost", "bad"]) == 0
    assert f"/hour + {left_out} items not priced (" in _headline(capsys.readouterr().out)


def test_the_headline_names_the_refresh_command_for_what_the_region_has_no_price_for(project_copy, capsys):
    from infra.cli.main import main

    project_copy("dev", _in_eu_north_1)
    assert main(["cost", "bad"]) == 0
    assert " in eu-north-1: higgsfield cost bad --refresh" in _headline(capsys.readouterr().out)


def test_the_headline_names_a_spot_pool_it_leaves_out_as_spot(project_copy, capsys):
    from infra.cli.main import main

    project_copy("dev", _in_eu_north_1)
    assert main(["cost", "bad"]) == 0
    assert _headline(capsys.readouterr().out).endswith("; 1 spot)")


def test_the_headline_offers_no_refresh_for_a_capacity_block_it_cannot_price(monkeypatch, capsys):
    from infra.cli.main import main
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    assert main(["cost", "prod"]) == 0
    headline = _headline(capsys.readouterr().out)
    assert headline.endswith("/hour + 1 item not priced (1 Capacity Block)") and "--refresh" not in headline


def test_the_report_says_which_prices_are_the_one_rate_aws_states_for_every_region(project_copy, capsys):
    from infra.cli.main import main

    project_copy("dev", _in_eu_north_1)
    assert main(["cost", "bad"]) == 0
    assert "EKS and KMS at the one rate AWS states for every region" in " ".join(capsys.readouterr().out.split())


def test_a_price_file_whose_every_region_list_holds_no_price_is_refused_naming_the_figure(tmp_path):
    from infra.offline.option_files import OptionFileError

    prices = json.loads(json.dumps(PRICES))
    prices["every_region"]["kms_key_month"] = "1 dollar"
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(prices))
    with pytest.raises(OptionFileError, match=r"every_region.kms_key_month must be a price"):
        cost.load_prices(path)


def _region_without_prices(config: dict) -> None:
    config.update(
        {
            "aws:region": "sa-east-1",  # no GPU type of the price file is priced there
            "higgsfield:availabilityZones": ["sa-east-1a", "sa-east-1b"],
            "higgsfield:gpuPools": [],
            "higgsfield:scheduler": {},
        }
    )


def test_a_region_without_prices_headlines_not_priced_never_zero_dollars(project_copy, capsys):
    from infra.cli.main import main

    project_copy("dev", _region_without_prices)
    assert main(["cost", "bad"]) == 0
    out = capsys.readouterr().out
    assert (
        out.splitlines()[0].startswith(
            "Cost of bad (sa-east-1): not priced in sa-east-1: the bundled price file has no prices for it"
        )
        and "$0.00" not in out.splitlines()[0]
    )
    assert "--refresh" in " ".join(out.splitlines()[:3]) and "the price file has no prices for sa-east-1" in out


def test_strict_cost_exits_1_when_anything_is_not_priced(project_copy, capsys):
    from infra.cli.main import main

    project_copy("dev", _region_without_prices)
    assert main(["cost", "bad", "--strict"]) == 1
    assert "not priced (--strict)" in capsys.readouterr().err


def test_cost_json_of_an_unpriced_region_has_no_headline_figures(project_copy, capsys):
    from infra.cli.main import main

    project_copy("dev", _region_without_prices)
    assert main(["cost", "bad", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    headline = data["headline"]
    assert headline["idle_month"] is None and headline["full_hour"] is None and headline["complete"] is False
    for total in [data["total"], *(g["subtotal"] for g in data["groups"])]:  # no 0.0 standing for "unknown"
        assert total["idle_month"] is None and total["full_hour"] is None and total["complete"] is False


def test_cost_report_fits_120_columns_with_two_headline_figures_first(stack, capsys, monkeypatch):
    from infra.cli.main import main
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    assert main(["cost", stack]) == 0
    out = capsys.readouterr().out.splitlines()
    assert max(map(len, out)) <= 120
    assert out[0].startswith(f"Cost of {stack} (") and "idle $" in out[0] and "/month, full scale $" in out[0]
    headline = _headline("\n".join(out))
    assert headline.endswith("/hour") or ("/hour + " in headline and headline.endswith(")"))


def test_cost_rows_are_subtotalled_per_pool_most_expensive_first(stack):
    est = cost.estimate(plan_of(stack), PRICES)
    groups = est.groups()
    subtotals = [sum(line.full_hour or 0.0 for line in lines) for _, lines in groups]
    assert subtotals == sorted(subtotals, reverse=True)
    pools = {f"GPU pool {p.name}" for p in plan_of(stack).config.gpu_pools}
    assert pools <= {name for name, _ in groups}
    for _, lines in groups:
        costs = [line.full_hour or 0.0 for line in lines]
        assert costs == sorted(costs, reverse=True)


def _price_list(usd: str, **attributes: str) -> str:
    """One Price List product as GetProducts returns it: a JSON string with its attributes and an
    on-demand term (the shape of every AWS price list,
    docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/reading-an-offer.html)."""
    return json.dumps(
        {
            "product": {"attributes": attributes},
            "terms": {"OnDemand": {"X": {"priceDimensions": {"Y": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}},
        }
    )


def _expect_services(stub: Stubber, location: str, prefix: str, skip: tuple[str, ...] = ()) -> None:
    """The GetProducts calls refresh makes for every non-EC2 figure, in order, each answered with a
    product of another usage type first (which must not be taken) and then the one asked for."""
    for key, service, usage in cost.SERVICE_PRICES:
        products = [_price_list("9.99", usagetype=f"{prefix}-Other-Usage")]
        if key not in skip:
            products.append(_price_list("0.123", usagetype=f"{prefix}-{usage}"))
        stub.add_response(
            "get_products",
            {"PriceList": products, "FormatVersion": "aws_v1"},
            {"ServiceCode": service, "Filters": [{"Type": "TERM_MATCH", "Field": "location", "Value": location}]},
        )
    for deployment, throughput in cost.FSX_TIERS.values():
        stub.add_response(
            "get_products",
            {
                "PriceList": [_price_list("0.2", deploymentOption=deployment, throughputCapacity=throughput)],
                "FormatVersion": "aws_v1",
            },
            {
                "ServiceCode": "AmazonFSx",
                "Filters": [
                    {"Type": "TERM_MATCH", "Field": "location", "Value": location},
                    {"Type": "TERM_MATCH", "Field": "fileSystemType", "Value": "Lustre"},
                ],
            },
        )


def _expect_price(stub: Stubber, instance_type: str, location: str, usd: str) -> None:
    """The GetProducts call refresh makes for one Linux on-demand price, answered with `usd`."""
    filters = {
        "instanceType": instance_type,
        "location": location,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    stub.add_response(
        "get_products",
        {"PriceList": [_price_list(usd)], "FormatVersion": "aws_v1"},
        {
            "ServiceCode": "AmazonEC2",
            "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
            "MaxResults": 10,
        },
    )


def test_refresh_takes_ec2_prices_from_the_pricing_api():
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        for instance_type, usd in (("g6e.xlarge", "1.5"), ("p5.48xlarge", "50.0")):
            _expect_price(stub, instance_type, "US East (Ohio)", usd)
        _expect_services(stub, "US East (Ohio)", "USE2")
        updated = cost.refresh(PRICES, ["p5.48xlarge", "g6e.xlarge"], "us-east-2", client, "2026-12-02")
        stub.assert_no_pending_responses()
    regional = updated["regions"]["us-east-2"]
    assert regional["ec2_on_demand_hour"]["g6e.xlarge"] == 1.5 and regional["ec2_on_demand_hour"]["p5.48xlarge"] == 50.0
    assert regional["verified"] is True and "Pricing API" in regional["source"]
    assert "ec2_source" not in regional  # no EC2 figure is the catalog's any more
    assert cost._price_file_problem(updated) is None  # what a refresh writes loads again
    assert US_EAST_2["ec2_on_demand_hour"]["p5.48xlarge"] != 50.0  # the loaded file is left alone


def test_refresh_gives_a_region_the_file_lacks_prices_for_every_service_it_prices():
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        _expect_price(stub, "g6e.xlarge", "South America (Sao Paulo)", "2.5")
        _expect_services(stub, "South America (Sao Paulo)", "SAE1")
        updated = cost.refresh(PRICES, ["g6e.xlarge"], "sa-east-1", client, "2026-12-03")
        stub.assert_no_pending_responses()
    regional = updated["regions"]["sa-east-1"]
    assert regional["ec2_on_demand_hour"] == {"g6e.xlarge": 2.5}
    assert all(regional[key] == 0.123 for key, _, _ in cost.SERVICE_PRICES)  # never the other usage type's 9.99
    assert regional["fsx_lustre_gb_month"] == {tier: 0.2 for tier in cost.FSX_TIERS} and regional["verified"] is True
    assert "sa-east-1" not in PRICES["regions"]


def test_refresh_names_the_figures_the_price_list_has_no_product_for_and_keeps_them():
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        _expect_price(stub, "g6e.xlarge", "US West (Oregon)", "1.9")
        _expect_services(stub, "US West (Oregon)", "USW2", skip=("kms_key_month",))
        updated = cost.refresh(PRICES, ["g6e.xlarge"], "us-west-2", client, "2026-12-03")
    regional = updated["regions"]["us-west-2"]
    assert regional["not_refreshed"] == ["kms_key_month"] and regional["verified"] is False
    assert regional["kms_key_month"] == PRICES["regions"]["us-west-2"]["kms_key_month"]


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


def test_cost_json_on_stdout_has_the_headline_and_per_pool_subtotals(capsys, monkeypatch):
    from infra.cli.main import main
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    assert main(["cost", "prod", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["headline"]["idle_month"] == pytest.approx(data["total"]["idle_month"])
    assert data["headline"]["full_hour"] == pytest.approx(data["total"]["full_hour"])
    pools = {g["group"]: g["subtotal"] for g in data["groups"]}
    assert pools["GPU pool b200-odcr"]["idle_hour"] > 0
    assert sum(g["full_hour"] for g in pools.values()) == pytest.approx(data["total"]["full_hour"])
    assert data["unpriced"] == ["EC2 p5en.48xlarge Capacity Block x 8 (warm)"]


def test_a_reservation_held_warm_is_used_capacity_not_idle_waste():
    """Issue #25: prod's ODCR pool runs its 4 reserved nodes, so `cost` counts the reservation as
    capacity in use; only what is idle and not held for jobs is waste."""
    est = cost.estimate(plan_of("prod"), PRICES)
    whole = 4 * US_EAST_2["ec2_on_demand_hour"]["p6-b200.48xlarge"]
    (line,) = [line for line in _gpu_ec2_lines(est) if line.resource == "gpu-b200-odcr"]
    assert line.reserved_in_use and "(warm)" in line.item
    assert est.reserved_in_use() == pytest.approx(whole)
    data = cost.as_json(est)
    assert data["headline"]["idle_waste_month"] == pytest.approx((est.total("idle_hour") - whole) * 730)


def test_a_reservation_not_held_warm_is_reported_as_idle_waste(project_copy):
    root = project_copy(
        "prod", set_pool(2, capacity={"type": "reservation", "reservationId": "cr-0fedcba9876543210", "warm": False})
    )
    est = cost.estimate(record("bad", root=root), PRICES)
    (line,) = [line for line in _gpu_ec2_lines(est) if line.resource == "gpu-b200-odcr"]
    assert not line.reserved_in_use and "(idle)" in line.item and "idle waste" in line.note
    assert est.reserved_in_use() == 0.0

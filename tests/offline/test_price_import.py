"""The bundled EC2 prices per region: rebuilt from SkyPilot's AWS catalog by tools/import_ec2_prices.py,
so the file is what the import of the committed extract makes (no figure typed by hand), and a
catalog that contradicts itself is refused rather than averaged."""

from __future__ import annotations

import csv
import io

import pytest

from infra.config import eks_regions
from infra.core.bundled import instance_types
from infra.offline import cost
from infra.offline.price_import import ImportProblem, ec2_tables, extract_differences, gpu_regions, merge
from tests.conftest import ROOT

EXTRACT = ROOT / "tools" / "skypilot_aws_vms_extract.csv"


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_the_bundled_ec2_tables_are_what_the_import_of_the_extract_makes():
    prices = cost.load_prices()
    types = {t for region in prices["regions"].values() for t in region["ec2_on_demand_hour"]}
    with EXTRACT.open(newline="") as handle:
        tables = ec2_tables(csv.DictReader(handle), types, set(eks_regions()))
    tables = gpu_regions(tables, {t for t in types if instance_types()[t].get("GpuInfo")})
    source = prices["regions"]["eu-north-1"]["ec2_source"].rsplit(", read ", 1)
    assert merge(prices, tables, source[0], source[1]) == prices


def test_a_region_where_only_system_types_are_priced_is_not_called_priced():
    tables = {"af-south-1": {"m6i.2xlarge": 0.508}, "eu-north-1": {"m7i.xlarge": 0.2142, "p5.48xlarge": 58.8928}}
    assert list(gpu_regions(tables, {"p5.48xlarge"})) == ["eu-north-1"]


def test_rows_without_a_price_are_skipped_and_other_types_and_regions_ignored():
    rows = _rows(
        "InstanceType,Price,Region\np5.48xlarge,,ap-southeast-2\np5.48xlarge,55.04,us-east-1\ng5.xlarge,1,us-east-1\n"
    )
    assert ec2_tables(rows, {"p5.48xlarge"}, {"us-east-1", "ap-southeast-2"}) == {"us-east-1": {"p5.48xlarge": 55.04}}


def test_two_prices_for_one_type_in_one_region_are_refused_naming_the_row():
    rows = _rows("InstanceType,Price,Region\np5.48xlarge,55.04,us-east-1\np5.48xlarge,56,us-east-1\n")
    with pytest.raises(ImportProblem, match="row 3: p5.48xlarge in us-east-1 costs both 55.04 and 56.0"):
        ec2_tables(rows, {"p5.48xlarge"}, {"us-east-1"})


def test_a_new_region_gets_only_ec2_prices_dated_and_sourced_and_the_rest_stays_unpriced():
    prices = cost.load_prices()
    updated = merge(prices, {"sa-east-1": {"p5.48xlarge": 70.0}}, "a catalog", "2026-12-05")
    assert updated["regions"]["sa-east-1"] == {
        "checked": "2026-12-05",
        "verified": False,
        "ec2_on_demand_hour": {"p5.48xlarge": 70.0},
        "ec2_source": "a catalog, read 2026-12-05",
    }
    assert "sa-east-1" not in prices["regions"] and cost._price_file_problem(updated) is None


# The catalog's rows are per availability zone (the columns the check reads; the rest are ignored).
_CATALOG = (
    "InstanceType,Price,Region,AvailabilityZone\n"
    "p5.48xlarge,58.8928,eu-north-1,eun1-az1\n"
    "p5.48xlarge,58.8928,eu-north-1,eun1-az3\n"
    "p5.48xlarge,55.04,us-east-1,use1-az2\n"
    "p5.48xlarge,,ap-southeast-2,apse2-az3\n"
)


def test_an_extract_that_is_the_catalogs_has_no_differences():
    extract = _rows("InstanceType,Price,Region\np5.48xlarge,58.8928,eu-north-1\np5.48xlarge,55.04,us-east-1\n")
    assert extract_differences(_rows(_CATALOG), extract, {"eu-north-1", "us-east-1"}) == []


def test_a_price_the_catalog_does_not_carry_is_named_with_the_catalogs():
    extract = _rows("InstanceType,Price,Region\np5.48xlarge,58.89,eu-north-1\np5.48xlarge,55.04,us-east-1\n")
    assert extract_differences(_rows(_CATALOG), extract, {"eu-north-1", "us-east-1"}) == [
        "p5.48xlarge in eu-north-1: the extract says 58.89, the catalog 58.8928"
    ]


def test_a_price_where_the_catalog_has_none_is_named():
    extract = _rows(
        "InstanceType,Price,Region\np5.48xlarge,58.8928,eu-north-1\np5.48xlarge,55.04,us-east-1\n"
        "p5.48xlarge,71.552,ap-southeast-2\n"
    )
    assert extract_differences(_rows(_CATALOG), extract, {"eu-north-1", "us-east-1"}) == [
        "p5.48xlarge in ap-southeast-2: the extract says 71.552, the catalog has no price"
    ]


def test_an_eks_region_the_catalog_prices_but_the_extract_leaves_out_is_named():
    extract = _rows("InstanceType,Price,Region\np5.48xlarge,55.04,us-east-1\n")
    assert extract_differences(_rows(_CATALOG), extract, {"eu-north-1", "us-east-1"}) == [
        "p5.48xlarge in eu-north-1: the catalog prices it (58.8928), the extract has no row"
    ]


def test_the_extract_check_command_exits_1_with_one_line_per_difference(tmp_path):
    import subprocess
    import sys

    catalog, extract = tmp_path / "vms.csv", tmp_path / "extract.csv"
    catalog.write_text(_CATALOG)
    extract.write_text("InstanceType,Price,Region\np5.48xlarge,58.89,eu-north-1\np5.48xlarge,55.04,us-east-1\n")
    tool = [sys.executable, str(ROOT / "tools" / "check_ec2_extract.py"), str(catalog), "--extract", str(extract)]
    done = subprocess.run(tool, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stdout.splitlines() == ["p5.48xlarge in eu-north-1: the extract says 58.89, the catalog 58.8928"]

"""`higgsfield types REGION`: the GPU types each AZ of a region offers, with GPUs, memory, EFA and
price from the bundled catalog, and the refusals of a type a region does not offer pointing to it."""

from __future__ import annotations

import json

import pytest

from infra.cli.main import main
from infra.config import ConfigError, load_job
from infra.core.bundled import where_offered, zone_offerings
from infra.offline import team_job
from infra.offline.cost import load_prices
from infra.offline.gpu_types import gpu_types
from tests.conftest import config_of


def test_every_listed_type_has_gpus_and_is_offered_in_exactly_the_azs_listed():
    offered = zone_offerings("eu-north-1")
    for found in gpu_types("eu-north-1"):
        assert found.gpu.startswith(("NVIDIA", "AMD", "Habana", "Xilinx", "AWS")), found
        assert found.zones == tuple(sorted(z for z, types in offered.items() if found.instance_type in types))


def test_an_h100_type_shows_its_gpus_memory_and_efa(capsys):
    assert main(["types", "eu-north-1"]) == 0
    row = next(line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] == ["p5.48xlarge"])
    assert row[1:5] == ["8", "x", "NVIDIA", "H100"] and row[5:9] == ["80", "192", "2048", "32"]


def test_the_memory_per_gpu_shown_is_what_a_job_file_can_ask_for():
    """dev's l40s pool is g6e.xlarge (44.7 GiB): `types` said 45, and a job asking 45 was refused."""
    shown = next(t.gib_per_gpu for t in gpu_types("us-west-2") if t.instance_type == "g6e.xlarge")

    def job(memory: int):
        resources = {"gpus": 1, "gpuType": "L40S", "gpuMemoryGiB": memory}
        return load_job({"name": "ft", "team": "ml", "command": ["python", "t.py"], "resources": resources})

    assert shown == 44
    assert team_job.render(job(shown), config_of("dev"))[1].pool.name == "l40s"
    with pytest.raises(ConfigError, match="gpuMemoryGiB"):
        team_job.render(job(shown + 1), config_of("dev"))


def test_prices_come_from_the_bundled_price_file_and_unpriced_is_said_never_zero(capsys):
    listed = load_prices()["regions"]["us-east-1"]["ec2_on_demand_hour"]
    priced = {t.instance_type: t.on_demand_hour for t in gpu_types("us-east-1")}
    assert priced["p5.48xlarge"] == listed["p5.48xlarge"]
    assert main(["types", "sa-east-1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "ON-DEMAND/HOUR -: not priced in sa-east-1" in out and "$0.00" not in out


def test_eu_north_1_types_carry_the_regions_own_on_demand_price():
    listed = load_prices()["regions"]["eu-north-1"]["ec2_on_demand_hour"]
    priced = {t.instance_type: t.on_demand_hour for t in gpu_types("eu-north-1")}
    assert (
        priced["p5.48xlarge"]
        == listed["p5.48xlarge"]
        != load_prices()["regions"]["us-east-1"]["ec2_on_demand_hour"]["p5.48xlarge"]
    )


def test_types_as_json(capsys):
    assert main(["types", "eu-north-1", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["region"] == "eu-north-1" and {t["instance_type"] for t in document["types"]} >= {"p5.48xlarge"}


def test_a_region_eks_does_not_run_in_is_refused_in_one_line(capsys):
    assert main(["types", "mars-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: REGION: 'mars-1' is not one of") and err.count("\n") == 1
    try:
        gpu_types("mars-1")
    except ConfigError as refused:
        assert refused.key == "REGION"


def test_a_type_a_region_does_not_offer_points_to_types_for_that_region_in_a_short_line():
    said = where_offered("g6e.xlarge", "eu-west-3")
    assert said.endswith("`higgsfield types eu-west-3` lists the GPU types each AZ of eu-west-3 offers")
    assert "more regions" in said and len(said) < 400

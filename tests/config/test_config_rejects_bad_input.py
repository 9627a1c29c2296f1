"""Every bad setting fails `higgsfield plan` with exit code 2 and a one-line message naming
the full key, before any resource is registered."""

from __future__ import annotations

import subprocess
import sys

import pytest

from infra.cli.main import main
from infra.config import ConfigError
from infra.offline.evaluate import record
from tests.conftest import assert_plan_rejects, delete_key, set_field, set_key

CASES = {
    "unknown_region": ("dev", set_key("aws:region", "us-middle-1"), "aws:region", "us-middle-1"),
    "zone_outside_region": (
        "dev",
        set_key("higgsfield:availabilityZones", ["us-west-2a", "us-east-1b"]),
        "higgsfield:availabilityZones[1]",
        "us-east-1b",
    ),
    "single_zone": (
        "dev",
        set_key("higgsfield:availabilityZones", ["us-west-2a"]),
        "higgsfield:availabilityZones",
        "at least 2",
    ),
    "malformed_vpc_cidr": (
        "dev",
        set_key("higgsfield:vpcCidr", "10.0.0.0/33"),
        "higgsfield:vpcCidr",
        "not an IPv4 CIDR",
    ),
    "public_vpc_cidr": ("dev", set_key("higgsfield:vpcCidr", "8.8.0.0/16"), "higgsfield:vpcCidr", "RFC 1918"),
    "size_not_an_integer": (
        "dev",
        set_field("higgsfield:cpuNodes", "minSize", "two"),
        "higgsfield:cpuNodes.minSize",
        "integer",
    ),
    "min_above_max": (
        "dev",
        set_field("higgsfield:cpuNodes", "minSize", 5),
        "higgsfield:cpuNodes",
        "minSize <= desiredSize <= maxSize",
    ),
    "desired_above_max": (
        "dev",
        set_field("higgsfield:cpuNodes", "desiredSize", 9),
        "higgsfield:cpuNodes",
        "minSize <= desiredSize <= maxSize",
    ),
    "unknown_environment": (
        "dev",
        set_key("higgsfield:environment", "qa"),
        "higgsfield:environment",
        "dev, staging, prod",
    ),
    "unsupported_kubernetes": (
        "dev",
        set_key("higgsfield:kubernetesVersion", "1.25"),
        "higgsfield:kubernetesVersion",
        "1.35",
    ),
    "world_open_endpoint_in_prod": (
        "prod",
        set_key("higgsfield:endpoint", {"private": True, "publicAccessCidrs": ["0.0.0.0/0"]}),
        "higgsfield:endpoint.publicAccessCidrs[0]",
        "internet",
    ),
    "internet_in_two_halves_in_prod": (
        "prod",
        set_key("higgsfield:endpoint", {"publicAccessCidrs": ["0.0.0.0/1", "128.0.0.0/1"]}),
        "higgsfield:endpoint.publicAccessCidrs",
        "100.0000% of the internet",
    ),
    "many_ranges_adding_up_in_prod": (
        "prod",
        set_key("higgsfield:endpoint", {"publicAccessCidrs": [f"{i}.0.0.0/12" for i in range(11, 14)]}),
        "higgsfield:endpoint.publicAccessCidrs",
        "of the internet (at most",
    ),
    "one_endpoint_range_twice": (
        "dev",
        set_key("higgsfield:endpoint", {"publicAccessCidrs": ["8.8.8.8/32", "1.1.1.1/32", "8.8.8.8/32"]}),
        "higgsfield:endpoint.publicAccessCidrs[2]",
        "8.8.8.8/32 is listed already",
    ),
    "environment_tag_from_config": (
        "prod",
        set_key("higgsfield:tags", {"higgsfield:environment": "dev"}),
        "higgsfield:tags.higgsfield:environment",
        "set by the program",
    ),
    "typo_in_object_field": (
        "dev",
        set_field("higgsfield:cpuNodes", "maxSzie", 3),
        "higgsfield:cpuNodes.maxSzie",
        "unknown setting",
    ),
    "typo_in_top_level_key": (
        "dev",
        set_key("higgsfield:vpcCIDR", "10.1.0.0/16"),
        "higgsfield:vpcCIDR",
        "unknown setting",
    ),
    "missing_environment": ("dev", delete_key("higgsfield:environment"), "higgsfield:environment", "required"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_setting_exits_2_and_names_the_key(case, project_copy, capsys):
    assert_plan_rejects(project_copy, capsys, *CASES[case])


@pytest.mark.parametrize("case", ["public_vpc_cidr", "typo_in_object_field"])
def test_bad_setting_is_rejected_before_any_resource_is_registered(case, project_copy):
    base, change, key, _ = CASES[case]
    root = project_copy(base, change)
    with pytest.raises(ConfigError) as raised:
        record("bad", root=root)
    assert raised.value.key == key
    assert raised.value.registered_before_error == 0


def test_world_open_endpoint_is_allowed_outside_prod_only_as_configured(project_copy):
    root = project_copy("dev", set_key("higgsfield:endpoint", {"publicAccessCidrs": ["0.0.0.0/0"]}))
    cluster = record("bad", root=root).one("eks:index:Cluster")
    assert cluster.inputs["publicAccessCidrs"] == ["0.0.0.0/0"]


def test_missing_stack_file_names_the_file_and_the_known_stacks(capsys):
    assert main(["plan", "nosuchstack"]) == 2
    err = capsys.readouterr().err
    assert "stacks/Pulumi.nosuchstack.yaml not found" in err
    assert "dev" in err and "prod" in err


def test_console_script_prints_one_line_and_no_traceback(project_copy):
    root = project_copy("dev", set_key("higgsfield:environment", "qa"))
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "plan", "bad"], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "higgsfield:environment" in done.stderr and "Traceback" not in done.stderr

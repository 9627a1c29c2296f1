"""Bad GPU pool, CUDA and autoscaler settings: exit 2, one line naming the key."""

from __future__ import annotations

import pytest

from tests.conftest import assert_plan_rejects, set_field, set_key, set_pool

POOLS = "higgsfield:gpuPools"
BLOCK_WINDOW = {"start": "2027-01-04T11:30:00Z", "end": "2027-01-18T11:30:00Z"}
DEV_POOL = {"name": "l40s", "instanceTypes": ["g6e.xlarge"], "availabilityZone": "us-west-2a", "maxSize": 2}

CASES = {
    "gate_off_in_prod_without_reason": (
        "prod",
        set_pool(0, healthGate={"enabled": False}),
        f"{POOLS}[0].healthGate.enabled",
        "needs healthGate.reason",
    ),
    "capacity_block_without_window": (
        "prod",
        set_pool(1, capacity={"type": "capacity-block", "reservationId": "cr-0a1b2c3d4e5f60718"}),
        f"{POOLS}[1].capacity.start",
        "is required for capacity type capacity-block",
    ),
    "capacity_block_ending_before_it_starts": (
        "prod",
        set_pool(
            1,
            capacity={
                "type": "capacity-block",
                "reservationId": "cr-0a1b2c3d4e5f60718",
                "start": "2027-01-18T11:30:00Z",
                "end": "2027-01-04T11:30:00Z",
            },
        ),
        f"{POOLS}[1].capacity.end",
        "is not after start",
    ),
    "capacity_block_drained_too_late": (
        "prod",
        set_pool(
            1,
            capacity={
                "type": "capacity-block",
                "reservationId": "cr-0a1b2c3d4e5f60718",
                **BLOCK_WINDOW,
                "drainBefore": "30m",
            },
        ),
        f"{POOLS}[1].capacity.drainBefore",
        "AWS asks for zero nodes 30m before the end",
    ),
    "window_on_on_demand_pool": (
        "prod",
        set_pool(0, capacity={"type": "on-demand", **BLOCK_WINDOW}),
        f"{POOLS}[0].capacity.start",
        "only capacity type capacity-block has a window",
    ),
    "capacity_block_time_without_zone": (
        "prod",
        set_pool(
            1,
            capacity={
                "type": "capacity-block",
                "reservationId": "cr-0a1b2c3d4e5f60718",
                "start": "2027-01-04 11:30",
                "end": "2027-01-18T11:30:00Z",
            },
        ),
        f"{POOLS}[1].capacity.start",
        "is not a UTC time",
    ),
    "instance_type_without_gpu": (
        "dev",
        set_pool(0, instanceTypes=["m7i.xlarge"]),
        f"{POOLS}[0].instanceTypes[0]",
        "has no GPU",
    ),
    "unknown_instance_type": (
        "dev",
        set_pool(0, instanceTypes=["p9.huge"]),
        f"{POOLS}[0].instanceTypes[0]",
        "'p9.huge' is not offered anywhere in us-west-2",
    ),
    "mixed_gpu_counts": (
        "dev",
        set_pool(0, instanceTypes=["g6e.xlarge", "g6e.12xlarge"]),
        f"{POOLS}[0].instanceTypes",
        "same GPU count",
    ),
    "mixed_efa_support": (
        "staging",
        set_pool(0, instanceTypes=["p4d.24xlarge", "p5.48xlarge"]),
        f"{POOLS}[0].instanceTypes",
        "EFA",
    ),
    "efa_on_type_without_efa": ("dev", set_pool(0, efa=True), f"{POOLS}[0].efa", "does not support EFA"),
    "zone_outside_stack_zones": (
        "dev",
        set_pool(0, availabilityZone="us-west-2c"),
        f"{POOLS}[0].availabilityZone",
        "higgsfield:availabilityZones",
    ),
    "type_not_offered_in_zone": (
        "dev",
        set_pool(0, instanceTypes=["p5en.48xlarge"], availabilityZone="us-west-2b"),
        f"{POOLS}[0].instanceTypes[0]",
        "not offered in us-west-2b",
    ),
    "min_above_max": ("dev", set_pool(0, minSize=3, maxSize=2), f"{POOLS}[0].minSize", "above maxSize"),
    "capacity_block_with_two_types": (
        "dev",
        set_pool(
            0,
            instanceTypes=["g6e.xlarge", "g6e.2xlarge"],
            capacity={"type": "capacity-block", "reservationId": "cr-0123456789abcdef0", **BLOCK_WINDOW},
        ),
        f"{POOLS}[0].instanceTypes",
        "exactly one instance type",
    ),
    "capacity_block_without_reservation": (
        "dev",
        set_pool(0, capacity={"type": "capacity-block", **BLOCK_WINDOW}),
        f"{POOLS}[0].capacity.reservationId",
        "capacity reservation id",
    ),
    "reservation_with_placement_group": (
        "prod",
        set_pool(2, placementGroup=True),
        f"{POOLS}[2].placementGroup",
        "must be false",
    ),
    "reservation_id_on_spot": (
        "dev",
        set_pool(0, capacity={"type": "spot", "reservationId": "cr-0123456789abcdef0"}),
        f"{POOLS}[0].capacity.reservationId",
        "only capacity types",
    ),
    "unknown_capacity_type": (
        "dev",
        set_pool(0, capacity={"type": "dedicated"}),
        f"{POOLS}[0].capacity.type",
        "on-demand, spot, capacity-block, reservation",
    ),
    "duplicate_pool_names": ("dev", set_key(POOLS, [DEV_POOL, DEV_POOL]), f"{POOLS}[1]", "duplicate name 'l40s'"),
    "typo_in_pool_field": ("dev", set_pool(0, maxSzie=3), f"{POOLS}[0].maxSzie", "unknown setting"),
    "raid0_without_local_nvme": (
        "dev",
        set_pool(0, instanceTypes=["g5g.xlarge"], localNvme="raid0"),
        f"{POOLS}[0].localNvme",
        "has no local NVMe drives",
    ),
    "cuda_newer_than_ami_driver": (
        "dev",
        set_key("higgsfield:cudaVersion", "13.1"),
        "higgsfield:cudaVersion",
        "needs NVIDIA driver 590 or newer, but the EKS AL2023 NVIDIA AMI ships driver 580",
    ),
    "unknown_cuda": (
        "dev",
        set_key("higgsfield:cudaVersion", "11.2"),
        "higgsfield:cudaVersion",
        "unknown CUDA version",
    ),
    "bad_expander": (
        "dev",
        set_field("higgsfield:autoscaler", "expander", "cheapest"),
        "higgsfield:autoscaler.expander",
        "least-waste",
    ),
    "bad_scale_down_delay": (
        "dev",
        set_field("higgsfield:autoscaler", "scaleDownUnneededTime", "ten minutes"),
        "higgsfield:autoscaler.scaleDownUnneededTime",
        "duration",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_gpu_setting_exits_2_and_names_the_key(case, project_copy, capsys):
    assert_plan_rejects(project_copy, capsys, *CASES[case])

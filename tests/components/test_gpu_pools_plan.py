"""GPU pools in every shipped stack: scale from zero, EFA on every card, the autoscaler can plan
them, and the device plugins reach them (one invariant per test, on the recorded plan)."""

from __future__ import annotations

import base64
import json

import pytest

from components.efa import efa_interfaces_for
from infra.core import catalog
from infra.offline.evaluate import Plan, Resource, instance_types
from tests.conftest import STACKS, config_of, plan_of

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ASG_TAG = "aws:autoscaling/tag:Tag"
TEMPLATE_TAG = "k8s.io/cluster-autoscaler/node-template"


def gpu_groups(plan: Plan) -> list[Resource]:
    return [
        g for g in plan.of_type(NODE_GROUP) if (g.inputs.get("labels") or {}).get("nvidia.com/gpu.present") == "true"
    ]


def deps_of(plan: Plan, r: Resource, type_: str) -> list[Resource]:
    return plan.dependencies_of(r, type_)


def asg_tags(plan: Plan, group: Resource) -> dict[str, str]:
    return {
        t.inputs["tag"]["key"]: t.inputs["tag"]["value"] for t in plan.of_type(ASG_TAG) if group.urn in t.dependencies
    }


def efa_groups(plan: Plan) -> list[Resource]:
    return [g for g in gpu_groups(plan) if g.inputs["labels"].get("vpc.amazonaws.com/efa.present") == "true"]


def pool_groups(stack: str, efa_only: bool = False) -> list[str]:
    """The GPU node groups a stack's settings ask for (named when the module is collected, before
    any plan): one per pool that managed node groups provision (the others are Karpenter's)."""
    return [
        f"gpu-{p.name}" for p in config_of(stack).gpu_pools if p.provisioner == "node-group" and (p.efa or not efa_only)
    ]


ALL_GPU_GROUPS = sorted((s, name) for s in STACKS for name in pool_groups(s))
ALL_EFA_GROUPS = sorted((s, name) for s in STACKS for name in pool_groups(s, efa_only=True))


@pytest.fixture(params=ALL_GPU_GROUPS, ids=lambda p: f"{p[0]}-{p[1]}")
def gpu_group(request) -> tuple[Plan, Resource]:
    stack, name = request.param
    plan = plan_of(stack)
    return plan, next(g for g in plan.of_type(NODE_GROUP) if g.name == name)


@pytest.fixture(params=ALL_EFA_GROUPS, ids=lambda p: f"{p[0]}-{p[1]}")
def efa_group(request) -> tuple[Plan, Resource]:
    stack, name = request.param
    plan = plan_of(stack)
    return plan, next(g for g in plan.of_type(NODE_GROUP) if g.name == name)


def test_the_plan_has_the_gpu_node_groups_its_pools_ask_for_and_no_other(plan, stack):
    assert sorted(g.name for g in gpu_groups(plan)) == sorted(pool_groups(stack))
    assert sorted(g.name for g in efa_groups(plan)) == sorted(pool_groups(stack, efa_only=True))


def test_every_stack_ships_gpu_pools_and_staging_and_prod_ship_efa_pools():
    assert all(gpu_groups(plan_of(s)) for s in STACKS)
    assert efa_groups(plan_of("staging")) and efa_groups(plan_of("prod"))


def _held_warm(plan: Plan, group: Resource) -> bool:
    """An ODCR pool held at its reserved count (tests/components/test_reserved_capacity.py)."""
    pool = next(p for p in plan.config.gpu_pools if p.name == group.inputs["labels"]["higgsfield.io/pool"])
    return pool.capacity_type == "reservation" and pool.capacity.warm


def test_gpu_pool_scales_to_zero(gpu_group):
    plan, group = gpu_group
    if _held_warm(plan, group):
        pytest.skip("a warm reservation pool is held at its reserved count")
    assert group.inputs["scalingConfig"]["minSize"] == 0
    assert group.inputs["scalingConfig"]["maxSize"] >= 1


def test_gpu_pool_leaves_desired_size_to_the_autoscaler(gpu_group):
    plan, group = gpu_group
    assert ("scalingConfig.desiredSize" in group.ignore_changes) != _held_warm(plan, group)


def test_gpu_pool_is_tainted_for_gpu_workloads_only(gpu_group):
    taints = gpu_group[1].inputs["taints"]
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"} in taints


def test_gpu_pool_uses_the_al2023_nvidia_ami(gpu_group):
    assert gpu_group[1].inputs["amiType"] in ("AL2023_x86_64_NVIDIA", "AL2023_ARM_64_NVIDIA")


def test_gpu_pool_nodes_require_imdsv2_with_hop_limit_1(gpu_group):
    plan, group = gpu_group
    (template,) = deps_of(plan, group, TEMPLATE)
    assert template.inputs["metadataOptions"]["httpTokens"] == "required"
    assert template.inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1


def test_gpu_pool_root_volume_is_encrypted(gpu_group):
    plan, group = gpu_group
    (template,) = deps_of(plan, group, TEMPLATE)
    assert all(m["ebs"]["encrypted"] == "true" for m in template.inputs["blockDeviceMappings"])


def test_gpu_pool_sits_in_one_private_subnet(gpu_group):
    plan, group = gpu_group
    subnets = deps_of(plan, group, "aws:ec2/subnet:Subnet")
    assert len(group.inputs["subnetIds"]) == 1 and len(subnets) == 1
    assert "kubernetes.io/role/internal-elb" in subnets[0].inputs["tags"]


def test_autoscaler_can_plan_a_node_of_the_pool_from_zero(gpu_group):
    """Every label and taint the node group puts on its nodes, and its GPUs, are on the ASG as
    node-template tags: without them a pending pod never triggers a scale-up from zero."""
    plan, group = gpu_group
    tags = asg_tags(plan, group)
    for key, value in group.inputs["labels"].items():
        assert tags[f"{TEMPLATE_TAG}/label/{key}"] == value
    effects = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
    for taint in group.inputs["taints"]:
        assert tags[f"{TEMPLATE_TAG}/taint/{taint['key']}"] == f"{taint['value']}:{effects[taint['effect']]}"
    gpus = {instance_types()[t]["GpuInfo"]["Gpus"][0]["Count"] for t in group.inputs["instanceTypes"]}
    assert tags[f"{TEMPLATE_TAG}/resources/nvidia.com/gpu"] == str(gpus.pop())


def test_efa_pool_advertises_its_efa_interfaces_and_huge_pages_to_the_autoscaler(efa_group):
    plan, group = efa_group
    tags = asg_tags(plan, group)
    (instance_type,) = group.inputs["instanceTypes"][:1]
    assert tags[f"{TEMPLATE_TAG}/resources/vpc.amazonaws.com/efa"] == str(
        instance_types()[instance_type]["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"]
    )
    assert tags[f"{TEMPLATE_TAG}/resources/hugepages-2Mi"].endswith("Mi")


def test_every_efa_card_is_attached(efa_group):
    """Exactly the instance's maximum EFA interfaces (AWS's bundled catalog), one per card."""
    plan, group = efa_group
    (template,) = deps_of(plan, group, TEMPLATE)
    nics = template.inputs["networkInterfaces"]
    efa = [n for n in nics if n.get("interfaceType") == "efa-only"]
    raw = instance_types()[group.inputs["instanceTypes"][0]]["NetworkInfo"]
    assert len(efa) == raw["EfaInfo"]["MaximumEfaInterfaces"]
    assert len({n["networkCardIndex"] for n in efa}) == len(efa)


def test_efa_pool_primary_interface_is_ena_at_card_0_device_0(efa_group):
    plan, group = efa_group
    (template,) = deps_of(plan, group, TEMPLATE)
    primary = [n for n in template.inputs["networkInterfaces"] if n["networkCardIndex"] == 0 and n["deviceIndex"] == 0]
    assert len(primary) == 1 and "interfaceType" not in primary[0]


def test_efa_pool_every_interface_carries_the_self_referencing_security_group(efa_group):
    plan, group = efa_group
    pool = group.inputs["labels"]["higgsfield.io/pool"]
    (sg,) = [
        s
        for s in plan.of_type("aws:ec2/securityGroup:SecurityGroup")
        if s.inputs.get("tags", {}).get("higgsfield.io/pool") == pool
    ]
    for rule in ("ingress", "egress"):
        assert any(r["self"] is True and r["protocol"] == "-1" for r in sg.inputs[rule]), rule
    (template,) = deps_of(plan, group, TEMPLATE)
    assert sg.urn in template.dependencies
    assert all(len(n["securityGroups"]) == 2 for n in template.inputs["networkInterfaces"])


def test_efa_pool_is_in_a_cluster_placement_group_unless_capacity_is_reserved(efa_group):
    plan, group = efa_group
    (template,) = deps_of(plan, group, TEMPLATE)
    reserved = "capacityReservationSpecification" in template.inputs
    groups = deps_of(plan, template, "aws:ec2/placementGroup:PlacementGroup")
    if reserved:
        assert groups == [] and "placement" not in template.inputs
    else:
        assert len(groups) == 1 and groups[0].inputs["strategy"] == "cluster"
        assert "groupName" in template.inputs["placement"]


def test_efa_pool_reserves_huge_pages_and_raids_local_nvme(efa_group):
    plan, group = efa_group
    (template,) = deps_of(plan, group, TEMPLATE)
    user_data = base64.b64decode(template.inputs["userData"]).decode()
    assert "vm.nr_hugepages=5128" in user_data
    assert "strategy: RAID0" in user_data


def test_all_efa_pools_of_a_stack_share_one_zone(stack):
    zones = {
        z
        for g in efa_groups(plan_of(stack))
        for z in (s.inputs["availabilityZone"] for s in deps_of(plan_of(stack), g, "aws:ec2/subnet:Subnet"))
    }
    assert len(zones) <= 1


@pytest.mark.parametrize(
    ("instance_type", "expected"),
    [("p5.48xlarge", 32), ("p5en.48xlarge", 16), ("p4d.24xlarge", 4), ("p6-b200.48xlarge", 8)],
)
def test_efa_interface_count_per_instance_type(instance_type, expected):
    from infra.offline.evaluate import _instance_type_result

    raw = _instance_type_result(instance_type)
    facts = catalog.InstanceFacts(
        name=instance_type,
        gpus=8,
        gpu_model=None,
        gpu_memory_mib=0,
        efa_supported=True,
        efa_max_interfaces=raw["efaMaximumInterfaces"],
        network_cards=tuple(c["index"] for c in raw["networkCards"]),
        nvme_disks=8,
        vcpus=192,
        architectures=("x86_64",),
    )
    layout = efa_interfaces_for(facts)
    assert sum(i.efa_only for i in layout) == expected
    assert [(i.network_card, i.device_index) for i in layout[:3]] == [(0, 0), (0, 1), (1, 0)]


def test_capacity_types_spot_on_demand_block_and_reservation_are_each_shipped():
    capacities = {}
    for stack in STACKS:
        plan = plan_of(stack)
        for group in gpu_groups(plan):
            (template,) = deps_of(plan, group, TEMPLATE)
            kind = group.inputs["capacityType"]
            if "capacityReservationSpecification" in template.inputs and kind == "ON_DEMAND":
                kind = "RESERVATION"
            capacities[kind] = (group, template)
    assert set(capacities) == {"SPOT", "ON_DEMAND", "CAPACITY_BLOCK", "RESERVATION"}
    block_group, block_template = capacities["CAPACITY_BLOCK"]
    assert block_template.inputs["instanceMarketOptions"]["marketType"] == "capacity-block"
    assert block_template.inputs["capacityReservationSpecification"]["capacityReservationTarget"][
        "capacityReservationId"
    ].startswith("cr-")
    assert len(block_group.inputs["instanceTypes"]) == 1


def test_autoscaler_discovers_this_cluster_and_runs_on_system_nodes(plan):
    release = next(
        r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "cluster-autoscaler"
    )
    values = release.inputs["values"]
    assert values["autoDiscovery"]["clusterName"] == plan.outputs["clusterName"]
    assert values["nodeSelector"] == {"higgsfield.io/role": "system"}
    assert values["extraArgs"]["balance-similar-node-groups"] is True
    assert release.inputs["version"]


def test_autoscaler_role_is_least_privilege_with_describe_nodegroup(plan):
    (policy,) = [p for p in plan.of_type("aws:iam/rolePolicy:RolePolicy") if "autoscaler" in p.name]
    statements = json.loads(policy.inputs["policy"])["Statement"]
    actions = [a for s in statements for a in s["Action"]]
    assert "eks:DescribeNodegroup" in actions
    assert not any("*" in a for a in actions)
    mutating = next(s for s in statements if "autoscaling:SetDesiredCapacity" in s["Action"])
    assert "Condition" in mutating


def test_autoscaler_gets_aws_credentials_through_pod_identity(plan):
    (association,) = plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    release = next(
        r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "cluster-autoscaler"
    )
    assert association.inputs["serviceAccount"] == release.inputs["values"]["rbac"]["serviceAccount"]["name"]
    assert association.inputs["namespace"] == release.inputs["namespace"]


def test_autoscaler_scale_down_delay_comes_from_config(plan, stack_settings):
    release = next(
        r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "cluster-autoscaler"
    )
    wanted = (stack_settings.get("higgsfield:autoscaler") or {}).get("scaleDownUnneededTime", "10m")
    assert release.inputs["values"]["extraArgs"]["scale-down-unneeded-time"] == wanted


@pytest.mark.parametrize("chart", ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"])
def test_device_plugins_select_gpu_nodes_only(plan, chart):
    """(Their tolerations: tests/components/test_node_daemons.py.)"""
    releases = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == chart]
    if chart == "aws-efa-k8s-device-plugin" and not efa_groups(plan):
        assert releases == []
        return
    (release,) = releases
    selector = release.inputs["values"]["nodeSelector"]
    assert selector in ({"nvidia.com/gpu.present": "true"}, {"vpc.amazonaws.com/efa.present": "true"})
    assert release.inputs["version"]


def test_every_gpu_node_matches_the_nvidia_plugin_selector(gpu_group):
    plan, group = gpu_group
    release = next(
        r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "nvidia-device-plugin"
    )
    assert release.inputs["values"]["nodeSelector"].items() <= group.inputs["labels"].items()


def test_nvidia_plugin_runs_gpu_feature_discovery_for_driver_and_cuda_labels(plan):
    release = next(
        r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "nvidia-device-plugin"
    )
    assert release.inputs["values"]["gfd"]["enabled"] is True

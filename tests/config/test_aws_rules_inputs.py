"""AWS's and Kubernetes' own rules on settings, refused naming the key before anything is created:
the system node group's size, Capacity Blocks, admin ARNs, subnet room, Karpenter's labels, tags."""

from __future__ import annotations

import copy

import pytest
import yaml

from infra.config import ConfigError
from infra.config.loading import validate
from tests.bundled_catalog import BundledCatalog
from tests.conftest import ROOT, assert_plan_rejects, set_field


@pytest.mark.parametrize(("minimum", "desired", "maximum"), [(0, 0, 1), (0, 0, 4)])
def test_an_empty_system_node_group_is_refused_naming_min_size(project_copy, capsys, minimum, desired, maximum):
    def change(config: dict) -> None:
        config["higgsfield:cpuNodes"] = {
            **config["higgsfield:cpuNodes"],
            "minSize": minimum,
            "desiredSize": desired,
            "maxSize": maximum,
        }

    assert_plan_rejects(
        project_copy, capsys, "dev", change, "higgsfield:cpuNodes.minSize", "nothing could ever scale it"
    )


def test_a_system_node_group_of_zero_nodes_in_all_is_refused(project_copy, capsys):
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_field("higgsfield:cpuNodes", "maxSize", 0),
        "higgsfield:cpuNodes.maxSize",
        "at least 1",
    )


# --- validated directly (the model with the offline plan's catalog): one rule each ---------------

CATALOG = BundledCatalog()
STACK = {s: yaml.safe_load((ROOT / "stacks" / f"Pulumi.{s}.yaml").read_text())["config"] for s in ("dev", "prod")}
BLOCK = ("higgsfield:gpuPools", 1, "capacity")  # prod's Capacity Block pool


def _problems(stack: str, change) -> list[tuple[str, str]]:
    config = copy.deepcopy(STACK[stack])
    change(config)
    try:
        validate(stack, config, catalog=CATALOG)
    except ConfigError as exc:
        return [(p.key, p.message) for p in exc.problems]
    return []


def _block(**fields):
    return lambda c: c["higgsfield:gpuPools"][1]["capacity"].update(fields)


def _pool(index: int, **fields):
    return lambda c: c["higgsfield:gpuPools"][index].update(fields)


def _admins(*arns):
    return lambda c: c.update({"higgsfield:admins": list(arns)})


REFUSED = {
    # Capacity Blocks (docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-purchase.html)
    "block_date_that_does_not_exist": (
        "prod",
        _block(start="2027-02-30T11:30:00Z"),
        "higgsfield:gpuPools[1].capacity.start",
        "not a real time",
    ),
    "block_ending_at_another_time": (
        "prod",
        _block(end="2027-01-18T12:00:00Z"),
        "higgsfield:gpuPools[1].capacity.end",
        "ends at 11:30 UTC",
    ),
    "block_of_16_days": (
        "prod",
        _block(end="2027-01-20T11:30:00Z"),
        "higgsfield:gpuPools[1].capacity.start",
        "1 to 14 days, or 21 to 182",
    ),
    "block_longer_than_182_days": (
        "prod",
        _block(end="2027-08-04T11:30:00Z"),
        "higgsfield:gpuPools[1].capacity.start",
        "at most 182 days",
    ),
    "block_of_more_than_64_instances": (
        "prod",
        _pool(1, maxSize=65),
        "higgsfield:gpuPools[1].maxSize",
        "at most 64 instances",
    ),
    "two_pools_one_reservation": (
        "prod",
        lambda c: c["higgsfield:gpuPools"][2]["capacity"].update(reservationId="cr-0a1b2c3d4e5f60718"),
        "higgsfield:gpuPools[2].capacity.reservationId",
        "gpuPools[1]'s reservation too",
    ),
    # subnet room (docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html)
    "vpc_too_small_for_the_pools": (
        "dev",
        lambda c: (c.update({"higgsfield:vpcCidr": "10.20.0.0/20"}), c["higgsfield:gpuPools"][0].update(maxSize=300)),
        "higgsfield:vpcCidr",
        "312 nodes",
    ),
    # the teams' CPU nodes: x86_64 types without GPUs, as the system nodes'
    "team_cpu_nodes_of_a_gpu_type": (
        "dev",
        lambda c: c.update({"higgsfield:teamCpuNodes": {"instanceTypes": ["g6e.xlarge"]}}),
        "higgsfield:teamCpuNodes.instanceTypes[0]",
        "g6e.xlarge has 1 GPUs: the teams' CPU nodes run",
    ),
    # t3.nano holds 4 pods (2 interfaces of 2 addresses each): the node daemons take them all
    "team_cpu_nodes_without_pod_slots_for_teams": (
        "dev",
        lambda c: c.update({"higgsfield:teamCpuNodes": {"instanceTypes": ["t3.nano"]}}),
        "higgsfield:teamCpuNodes.instanceTypes[0]",
        "t3.nano holds 4 pods, and the node daemons take about 10 of them",
    ),
    "cpu_nodes_without_pod_slots_for_the_teams_cpu_nodes_that_take_them": (
        "dev",
        lambda c: c["higgsfield:cpuNodes"].update({"instanceTypes": ["t3.micro"]}),
        "higgsfield:cpuNodes.instanceTypes[0]",
        "t3.micro holds 4 pods, and the node daemons take about 10 of them",
    ),
    "team_cpu_nodes_of_an_arm_type": (
        "dev",
        lambda c: c.update({"higgsfield:teamCpuNodes": {"instanceTypes": ["m7g.xlarge"]}}),
        "higgsfield:teamCpuNodes.instanceTypes[0]",
        "m7g.xlarge is not x86_64",
    ),
    # admins: IAM role/user ARNs of the stack's partition, by IAM's grammar
    "admin_of_another_partition": (
        "dev",
        _admins("arn:aws-cn:iam::111122223333:role/Admin"),
        "higgsfield:admins[0]",
        "partition aws-cn",
    ),
    "admin_of_another_service": (
        "dev",
        _admins("arn:aws:s3::111122223333:role/Admin"),
        "higgsfield:admins[0]",
        "not an IAM role or user ARN",
    ),
    "admin_role_name_iam_refuses": (
        "dev",
        _admins("arn:aws:iam::111122223333:role/" + "a" * 65),
        "higgsfield:admins[0]",
        "1-64 of",
    ),
    "admin_with_an_empty_path_segment": (
        "dev",
        _admins("arn:aws:iam::111122223333:role/ops//Admin"),
        "higgsfield:admins[0]",
        "IAM path",
    ),
    "admin_sts_assumed_role": (
        "dev",
        _admins("arn:aws:sts::111122223333:assumed-role/Admin/alice"),
        "higgsfield:admins[0]",
        "STS session",
    ),
    # Karpenter's restricted label domains
    # (aws/karpenter-provider-aws:pkg/apis/crds/karpenter.sh_nodepools.yaml@v1.14.1)
    "karpenter_pool_label_in_karpenter_sh": (
        "dev",
        _pool(0, provisioner="karpenter", labels={"karpenter.sh/capacity-type": "spot"}),
        "higgsfield:gpuPools[0].labels.karpenter.sh/capacity-type",
        "Karpenter reserves",
    ),
    "karpenter_pool_label_in_the_aws_domain": (
        "dev",
        _pool(0, provisioner="karpenter", labels={"team.karpenter.k8s.aws/x": "y"}),
        "higgsfield:gpuPools[0].labels.team.karpenter.k8s.aws/x",
        "Karpenter reserves",
    ),
    "karpenter_pool_hostname_label": (
        "dev",
        _pool(0, provisioner="karpenter", labels={"kubernetes.io/hostname": "n1"}),
        "higgsfield:gpuPools[0].labels.kubernetes.io/hostname",
        "Karpenter reserves",
    ),
    "malformed_default_provider_list": (
        "dev",
        lambda c: c.update({"pulumi:disable-default-providers": "aws"}),
        "pulumi:disable-default-providers",
        "list of package names",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_aws_and_kubernetes_rules_are_refused_naming_the_key(case):
    stack, change, key, says = REFUSED[case]
    problems = _problems(stack, change)
    assert any(k == key and says in m for k, m in problems), problems


ACCEPTED = {
    "a_block_bought_today_starting_at_another_time": ("prod", _block(start="2027-01-04T04:55:00Z")),
    "a_block_of_four_weeks": ("prod", _block(end="2027-02-01T11:30:00Z")),
    "an_admin_role_with_a_path": ("dev", _admins("arn:aws:iam::111122223333:role/platform/ops/Admin+1=x,y.z@w_v-u")),
    "a_karpenter_pool_with_its_own_label": (
        "dev",
        _pool(0, provisioner="karpenter", labels={"example.com/team": "ml"}),
    ),
    "a_node_group_pool_labelled_like_karpenter": ("dev", _pool(0, labels={"karpenter.sh/discovery": "x"})),
    "pulumi_disable_default_providers": ("dev", lambda c: c.update({"pulumi:disable-default-providers": ["*"]})),
    "pulumi_disable_default_providers_by_package": (
        "dev",
        lambda c: c.update({"pulumi:disable-default-providers": '["aws", "kubernetes"]'}),
    ),
    "a_tag_value_with_a_no_break_space": ("prod", lambda c: c["higgsfield:tags"].update(team="ml\u00a0platform")),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_valid_inputs_are_accepted(case):
    stack, change = ACCEPTED[case]
    assert _problems(stack, change) == []


def test_an_empty_required_tag_fails_the_policy():
    from tests.policies.test_policies import violations

    found = violations(
        "required-tags",
        "aws:ec2/vpc:Vpc",
        {"tags": {"team": " ", "cost-center": "x"}},
        {"required": ["team", "cost-center"]},
    )
    assert found and "team" in found[0] and "empty" in found[0], found

"""What every shipped stack's offline plan guarantees about the network, the cluster and the
CPU nodes (one invariant per test, asserted on the recorded plan)."""

from __future__ import annotations

import importlib
import inspect

from components.cluster import CONTROL_PLANE_LOG_TYPES
from infra.offline.evaluate import Plan, Resource

VPC = "aws:ec2/vpc:Vpc"
SUBNET = "aws:ec2/subnet:Subnet"
CLUSTER = "eks:index:Cluster"
KMS_KEY = "aws:kms/key:Key"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


def _system_node_group(plan: Plan) -> Resource:
    return next(r for r in plan.of_type(NODE_GROUP) if r.inputs.get("labels", {}).get("higgsfield.io/role") == "system")


def _launch_template_of(plan: Plan, node_group: Resource) -> Resource:
    (template,) = plan.dependencies_of(node_group, LAUNCH_TEMPLATE)
    return template


def _cluster_key(plan: Plan) -> Resource:
    (key,) = plan.dependencies_of(plan.one(CLUSTER), KMS_KEY)
    return key


def test_plan_has_one_vpc_with_the_configured_cidr(plan, stack_settings):
    assert plan.one(VPC).inputs["cidrBlock"] == stack_settings["higgsfield:vpcCidr"]


def test_private_and_public_subnet_in_every_configured_zone(plan, stack_settings):
    zones = stack_settings["higgsfield:availabilityZones"]
    subnets = plan.of_type(SUBNET)
    for kind in ("private", "public"):  # the ELB role tags: tests/security/test_tenant_attacks.py
        named = sorted(s.inputs["availabilityZone"] for s in subnets if f"-{kind}-" in s.inputs["tags"]["Name"])
        assert named == sorted(zones), kind


def test_no_subnet_hands_out_public_ips(plan):
    assert all(s.inputs.get("mapPublicIpOnLaunch") is False for s in plan.of_type(SUBNET))


def test_cluster_runs_the_configured_kubernetes_version(plan, stack_settings):
    assert plan.one(CLUSTER).inputs["version"] == stack_settings["higgsfield:kubernetesVersion"]


def test_cluster_sends_all_five_control_plane_log_types(plan):
    assert sorted(plan.one(CLUSTER).inputs["enabledClusterLogTypes"]) == sorted(CONTROL_PLANE_LOG_TYPES)
    assert len(CONTROL_PLANE_LOG_TYPES) == 5


def test_cluster_uses_api_authentication_with_access_entries_for_admins(plan, stack_settings):
    cluster = plan.one(CLUSTER).inputs
    assert cluster["authenticationMode"] == "API"
    principals = sorted(e["principalArn"] for e in cluster["accessEntries"].values())
    assert principals == sorted(stack_settings["higgsfield:admins"])


def test_cluster_secrets_are_encrypted_with_our_rotating_kms_key(plan):
    cluster = plan.one(CLUSTER)
    assert cluster.inputs["encryptionConfigKeyArn"]  # the ARN of the key it depends on
    assert _cluster_key(plan).inputs["enableKeyRotation"] is True


def test_endpoint_is_private_and_never_open_to_the_world(plan):
    cluster = plan.one(CLUSTER).inputs
    assert cluster["endpointPrivateAccess"] is True
    if cluster["endpointPublicAccess"]:
        assert cluster["publicAccessCidrs"], "public endpoint without an allow-list is open to 0.0.0.0/0"
        assert all(not c.endswith("/0") for c in cluster["publicAccessCidrs"])


def test_cluster_has_no_default_node_group(plan):
    assert plan.one(CLUSTER).inputs["skipDefaultNodeGroup"] is True


def test_system_nodes_require_imdsv2_with_hop_limit_1(plan):
    template = _launch_template_of(plan, _system_node_group(plan))
    metadata = template.inputs["metadataOptions"]
    assert metadata["httpTokens"] == "required"
    assert metadata["httpPutResponseHopLimit"] == 1


def test_system_nodes_root_volume_is_encrypted_gp3(plan):
    template = _launch_template_of(plan, _system_node_group(plan))
    (root,) = template.inputs["blockDeviceMappings"]
    assert root["ebs"]["encrypted"] == "true"
    assert root["ebs"]["volumeType"] == "gp3"


def test_system_nodes_sit_only_in_private_subnets(plan):
    group = _system_node_group(plan)
    subnets = plan.dependencies_of(group, SUBNET)
    assert subnets and all("kubernetes.io/role/internal-elb" in s.inputs["tags"] for s in subnets)


def test_system_nodes_match_the_configured_sizes_and_leave_desired_to_the_autoscaler(plan, stack_settings):
    group = _system_node_group(plan)
    wanted = stack_settings["higgsfield:cpuNodes"]
    scaling = group.inputs["scalingConfig"]
    assert (scaling["minSize"], scaling["maxSize"]) == (wanted["minSize"], wanted["maxSize"])
    assert group.inputs["instanceTypes"] == wanted["instanceTypes"]
    assert "scalingConfig.desiredSize" in group.ignore_changes


def test_node_groups_wait_for_the_addons_a_node_needs_and_platform_services_for_all(plan):
    """Control plane, then the add-ons a node needs to become Ready (pod network, kube-proxy, Pod
    Identity agent), then node groups, so that a Kubernetes upgrade goes in that order; CoreDNS
    turns ACTIVE only on a running node, so it comes up beside the node groups. Helm releases
    wait for every cluster add-on (the Pod Identity agent must run before the autoscaler and CSI
    driver ask for credentials)."""
    addons = {a.inputs["addonName"]: a for a in plan.of_type("aws:eks/addon:Addon")}
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        waits_for = {
            plan.by_urn(u).inputs.get("addonName")
            for u in group.dependencies
            if plan.by_urn(u).type == "aws:eks/addon:Addon"
        }
        assert waits_for == {"vpc-cni", "kube-proxy", "eks-pod-identity-agent"}, group.name
        assert plan.one(CLUSTER).urn in group.dependencies
    for release in plan.of_type("kubernetes:helm.sh/v3:Release"):
        assert addons["eks-pod-identity-agent"].urn in release.dependencies, release.name
        assert addons["coredns"].urn in release.dependencies, release.name


def _taggable(type_: str) -> bool:
    package, rest = type_.split(":", 1)
    module_path, cls_name = rest.split(":")
    module = {"aws": "pulumi_aws", "eks": "pulumi_eks"}.get(package)
    if module is None:
        return False
    module_path = module_path.split("/")[0]
    mod = importlib.import_module(module if module_path == "index" else f"{module}.{module_path}")
    return "tags" in inspect.signature(getattr(mod, cls_name)._internal_init).parameters


def test_every_taggable_resource_carries_the_configured_tags(plan, stack_settings):
    wanted = stack_settings["higgsfield:tags"]
    taggable = [r for r in plan.resources if _taggable(r.type)]
    assert len(taggable) > 10
    for r in taggable:
        tags = r.inputs.get("tags") or {}
        assert wanted.items() <= tags.items(), f"{r.type} {r.name} lacks {wanted}"


def test_dev_has_one_nat_gateway_and_prod_one_per_zone(plan, stack_settings):
    nats = plan.of_type("aws:ec2/natGateway:NatGateway")
    expected = (
        len(stack_settings["higgsfield:availabilityZones"]) if stack_settings["higgsfield:environment"] == "prod" else 1
    )
    assert len(nats) == expected


def test_prod_protects_the_cluster_and_its_key():
    from tests.conftest import plan_of

    prod = plan_of("prod")
    assert prod.one(CLUSTER).protect is True
    assert _cluster_key(prod).protect is True


def test_prod_retains_the_kms_key_on_delete():
    from tests.conftest import plan_of

    assert _cluster_key(plan_of("prod")).retain_on_delete is True


def test_dev_data_is_not_protected_so_it_can_be_torn_down():
    from tests.conftest import plan_of

    assert plan_of("dev").one(CLUSTER).protect is False


def test_every_component_uses_a_higgsfield_type_token_and_parents_its_children(plan):
    components = [r for r in plan.resources if not r.custom and r.type.startswith("higgsfield:")]
    assert components
    for c in components:
        assert len(c.type.split(":")) == 3
        assert plan.children(c), f"{c.type} has no children"

    def parent_type(r: Resource) -> str:
        return (r.parent or "").split("::")[2].split("$")[-1]

    orphans = [r.name for r in plan.resources if r.custom and parent_type(r) == "pulumi:pulumi:Stack"]
    assert orphans == []


def test_check_says_when_the_allow_list_is_still_an_example_range_no_request_comes_from():
    from infra.offline.check import endpoint_placeholder
    from tests.conftest import plan_of

    (finding,) = endpoint_placeholder(plan_of("dev"))
    assert finding.level == "advisory" and finding.message.startswith(
        "higgsfield:endpoint.publicAccessCidrs[0]: 203.0.113.0/24 is a documentation range"
    )
    assert endpoint_placeholder(plan_of("prod")) == []  # private: nothing to reach from outside

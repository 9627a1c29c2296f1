"""The policy pack: every policy passes a compliant resource, flags a violating one and copes
with a missing property; the pack runs clean over every shipped stack and catches a broken one."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
)
from pulumi_policy.proxy import unknown_checking_proxy

from components.karpenter import queue_policy
from components.logs import account_key_policy, log_key_policy
from infra.offline.check import run_policies
from policies import rules
from tests.conftest import STACKS, plan_of

BY_NAME = {p.name: p for p in rules.POLICIES}

DEPLOY_SUBJECT = "repo:o/r:environment:prod:job_workflow_ref:o/r/.github/workflows/deploy.yml@refs/heads/main"


def _opts(protect: bool = False, ignore_changes: list[str] | None = None) -> PolicyResourceOptions:
    return PolicyResourceOptions(protect, ignore_changes or [], None, [], PolicyCustomTimeouts(0, 0, 0), [], None)


def violations(policy: str, type_: str, props: dict, config: dict | None = None) -> list[str]:
    found: list[str] = []
    args = ResourceValidationArgs(
        type_, unknown_checking_proxy(props), f"urn:x::{type_}::r", "r", _opts(), None, config or {}
    )
    BY_NAME[policy].validate(args, lambda message, urn=None: found.append(message))
    return found


class R:
    """A resource for stack policies: `R(type, props, deps=[...], protect=..., ignore=[...])`."""

    count = 0

    def __new__(
        cls, type_: str, props: dict, deps: list | None = None, protect: bool = False, ignore: list[str] | None = None
    ):
        R.count += 1
        return PolicyResource(
            type_,
            unknown_checking_proxy(props),
            f"urn:{R.count}",
            f"r{R.count}",
            _opts(protect, ignore),
            None,
            None,
            deps or [],
            {},
        )


def stack_violations(policy: str, resources: list, config: dict | None = None) -> list[str]:
    found: list[str] = []
    BY_NAME[policy].validate(
        StackValidationArgs(resources, config or {}), lambda message, urn=None: found.append(message)
    )
    return found


def _opened_to(principal: object) -> str:
    """The account's key policy with one more statement letting `principal` decrypt."""
    document = json.loads(account_key_policy("arn:aws:sts::111122223333:assumed-role/deploy/x"))
    document["Statement"].append(
        {"Sid": "Opened", "Effect": "Allow", "Principal": {"AWS": principal}, "Action": "kms:Decrypt", "Resource": "*"}
    )
    return json.dumps(document)


EKS = rules.EKS_COMPONENT
GOOD_CLUSTER = {
    "endpointPrivateAccess": True,
    "endpointPublicAccess": True,
    "publicAccessCidrs": ["203.0.113.0/24"],
    "enabledClusterLogTypes": list(rules.LOG_TYPES),
    "authenticationMode": "API",
    "encryptionConfigKeyArn": "arn:kms",
    "version": "1.35",
    "nodeAssociatePublicIpAddress": False,
}

# (policy, type, compliant props, violating props, props missing the property, does missing violate?)
_BOUNDARY = "arn:aws:iam::111122223333:policy/higgsfield-prod-boundary"


def _trust(principal: dict) -> str:
    return json.dumps({"Statement": [{"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}]})


_QUEUE = "arn:aws:sqs:us-east-2:111122223333:higgsfield-prod-interruptions"


def _queue_opened_to(principal: Any, condition: dict | None = None) -> str:
    statement = {"Effect": "Allow", "Principal": principal, "Action": "sqs:SendMessage", "Resource": _QUEUE}
    return json.dumps({"Statement": [{**statement, **({"Condition": condition} if condition else {})}]})


RESOURCE_CASES = [
    (
        "eks-endpoint-restricted",
        EKS,
        GOOD_CLUSTER,
        {**GOOD_CLUSTER, "publicAccessCidrs": ["0.0.0.0/0"]},
        {k: v for k, v in GOOD_CLUSTER.items() if k not in ("endpointPublicAccess", "publicAccessCidrs")},
        True,
    ),
    (
        "eks-control-plane-logs",
        EKS,
        GOOD_CLUSTER,
        {**GOOD_CLUSTER, "enabledClusterLogTypes": ["api"]},
        {k: v for k, v in GOOD_CLUSTER.items() if k != "enabledClusterLogTypes"},
        True,
    ),
    (
        "eks-authentication-api",
        EKS,
        GOOD_CLUSTER,
        {**GOOD_CLUSTER, "authenticationMode": "CONFIG_MAP"},
        {k: v for k, v in GOOD_CLUSTER.items() if k != "authenticationMode"},
        True,
    ),
    (
        "eks-secrets-encrypted",
        rules.EKS_CLUSTER,
        {"encryptionConfig": {"resources": ["secrets"], "provider": {"keyArn": "k"}}},
        {"encryptionConfig": {"resources": [], "provider": {"keyArn": "k"}}},
        {},
        True,
    ),
    ("kms-key-rotation", rules.KMS_KEY, {"enableKeyRotation": True}, {"enableKeyRotation": False}, {}, True),
    (
        "kms-key-policy-one-account",
        rules.KMS_KEY,
        {"policy": log_key_policy("arn:aws:sts::111122223333:assumed-role/deploy/x", "us-east-2")},
        {"policy": _opened_to("arn:aws:iam::999999999999:root")},
        {},
        True,
    ),
    (
        "sqs-queue-policy-own-services",
        rules.SQS_QUEUE,
        {"policy": queue_policy(_QUEUE, "prod")},
        {"policy": _queue_opened_to({"AWS": "arn:aws:iam::999999999999:root"})},
        {},
        False,
    ),
    (
        "role-trust-in-the-account",
        rules.ROLE,
        {"assumeRolePolicy": _trust({"Service": "eks.amazonaws.com"}), "permissionsBoundary": _BOUNDARY},
        {"assumeRolePolicy": _trust({"AWS": "arn:aws:iam::999999999999:root"}), "permissionsBoundary": _BOUNDARY},
        {},
        False,
    ),
    (
        "eks-supported-version",
        EKS,
        GOOD_CLUSTER,
        {**GOOD_CLUSTER, "version": "1.27"},
        {k: v for k, v in GOOD_CLUSTER.items() if k != "version"},
        True,
    ),
    (
        "launch-template-imdsv2",
        rules.LAUNCH_TEMPLATE,
        {"metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1}},
        {"metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2}},
        {},
        True,
    ),
    (
        "launch-template-encrypted-volumes",
        rules.LAUNCH_TEMPLATE,
        {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "true"}}]},
        {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "false"}}]},
        {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {}}]},
        True,
    ),
    (
        "nodes-without-public-ips",
        rules.SUBNET,
        {"mapPublicIpOnLaunch": False},
        {"mapPublicIpOnLaunch": True},
        {},
        False,
    ),
    (
        "iam-no-wildcard-actions",
        "aws:iam/rolePolicy:RolePolicy",
        {"policy": json.dumps({"Statement": [{"Action": ["s3:GetObject"]}]})},
        {"policy": json.dumps({"Statement": [{"Action": "ec2:*"}]})},
        {},
        False,
    ),
    (
        "helm-release-pinned",
        rules.HELM_RELEASE,
        {"chart": "volcano", "version": "1.13.0"},
        {"chart": "volcano", "version": ""},
        {"chart": "volcano"},
        True,
    ),
    (
        "gpu-workloads-tolerate-gpu-taint",
        rules.HELM_RELEASE,
        {
            "chart": "nvidia-device-plugin",
            "values": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        },
        {"chart": "nvidia-device-plugin", "values": {"tolerations": [{"key": "other"}]}},
        {"chart": "nvidia-device-plugin"},
        True,
    ),
    (
        "gpu-workloads-tolerate-gpu-taint",
        rules.HELM_RELEASE,
        {"chart": "dcgm-exporter", "values": {"tolerations": [{"operator": "Exists"}]}},
        {
            "chart": "dcgm-exporter",
            "values": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}]},
        },
        {"chart": "dcgm-exporter"},
        True,
    ),
    (
        "required-tags",
        "aws:ec2/vpc:Vpc",
        {"tags": {"higgsfield:stack": "dev", "higgsfield:environment": "dev"}},
        {"tags": {"higgsfield:stack": "dev"}},
        {},
        True,
    ),
    (
        "iam-no-admin-managed-policies",
        rules.ROLE_POLICY_ATTACHMENT,
        {"policyArn": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"},
        {"policyArn": "arn:aws:iam::aws:policy/AdministratorAccess"},
        {},
        False,
    ),
    (
        "security-groups-no-world-ingress",
        rules.INGRESS_RULE,
        {"cidrIpv4": "10.0.0.0/16", "fromPort": 443},
        {"cidrIpv4": "0.0.0.0/0", "fromPort": 443},
        {"referencedSecurityGroupId": "sg-1"},
        False,
    ),
    (
        "ci-roles-trust-one-subject",
        rules.ROLE,
        {
            "tags": {rules.CI_IDENTITY_TAG: "deploy"},
            "assumeRolePolicy": json.dumps(
                {
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {
                                "Federated": "arn:aws:iam::1:oidc-provider/token.actions.githubusercontent.com"
                            },
                            "Condition": {"StringEquals": {"token.actions.githubusercontent.com:sub": DEPLOY_SUBJECT}},
                        }
                    ]
                }
            ),
        },
        {
            "tags": {rules.CI_IDENTITY_TAG: "deploy"},
            "assumeRolePolicy": json.dumps(
                {
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {
                                "Federated": "arn:aws:iam::1:oidc-provider/token.actions.githubusercontent.com"
                            },
                            "Condition": {"StringLike": {"token.actions.githubusercontent.com:sub": "repo:o/r:*"}},
                        }
                    ]
                }
            ),
        },
        {
            "tags": {},
            "assumeRolePolicy": json.dumps(
                {
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {
                                "Federated": "arn:aws:iam::1:oidc-provider/token.actions.githubusercontent.com"
                            },
                        }
                    ]
                }
            ),
        },
        True,
    ),
    (
        "log-retention-floor",
        rules.LOG_GROUP,
        {"name": "/aws/eks/x/cluster", "retentionInDays": 90},
        {"name": "/aws/eks/x/cluster", "retentionInDays": 30},
        {"name": "/aws/eks/x/cluster"},
        False,
    ),
]


@pytest.mark.parametrize("case", RESOURCE_CASES, ids=lambda c: c[0])
def test_resource_policy_passes_a_compliant_resource(case):
    policy, type_, good, _, _, _ = case
    assert violations(policy, type_, copy.deepcopy(good)) == []


@pytest.mark.parametrize("case", RESOURCE_CASES, ids=lambda c: c[0])
def test_resource_policy_flags_a_violating_resource(case):
    policy, type_, _, bad, _, _ = case
    assert violations(policy, type_, copy.deepcopy(bad))


@pytest.mark.parametrize("case", RESOURCE_CASES, ids=lambda c: c[0])
def test_resource_policy_handles_a_missing_property(case):
    policy, type_, _, _, missing, violates = case
    assert bool(violations(policy, type_, copy.deepcopy(missing))) is violates


def test_resource_policy_reads_its_config():
    assert violations("eks-supported-version", EKS, {"version": "1.36"}, {"supported": ["1.36"]}) == []
    assert violations("required-tags", "aws:ec2/vpc:Vpc", {"tags": {"team": "a"}}, {"required": ["team"]}) == []


# --- stack policies ---------------------------------------------------------------------------------


def _gpu_group(
    min_size=0,
    taints=True,
    ignore=True,
    tags=True,
    subnets=1,
    efa=0,
    placement=True,
    sg_self=True,
    instance="p5.48xlarge",
):
    subnet = R(rules.SUBNET, {"availabilityZone": "us-east-2b"})
    sg = R(
        rules.SECURITY_GROUP,
        {"ingress": [{"self": sg_self, "protocol": "-1"}], "egress": [{"self": True, "protocol": "-1"}]},
    )
    nics = [{"deviceIndex": 0, "networkCardIndex": 0}] + [
        {"interfaceType": "efa-only", "networkCardIndex": i} for i in range(efa)
    ]
    template = R(
        rules.LAUNCH_TEMPLATE,
        {"networkInterfaces": nics, **({"placement": {"groupName": "pg"}} if placement else {})},
        deps=[sg],
    )
    group = R(
        rules.NODE_GROUP,
        {
            "amiType": "AL2023_x86_64_NVIDIA",
            "instanceTypes": [instance],
            "subnetIds": ["s"] * subnets,
            "scalingConfig": {"minSize": min_size, "maxSize": 4},
            "labels": {"higgsfield.io/pool": "h100"},
            "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}] if taints else [],
        },
        deps=[template, subnet],
        ignore=["scalingConfig.desiredSize"] if ignore else [],
    )
    keys = [
        f"{rules.TEMPLATE_TAG}/resources/nvidia.com/gpu",
        f"{rules.TEMPLATE_TAG}/taint/nvidia.com/gpu",
        f"{rules.TEMPLATE_TAG}/label/higgsfield.io/pool",
    ]
    asg_tags = [R(rules.ASG_TAG, {"tag": {"key": k}}, deps=[group]) for k in (keys if tags else keys[:1])]
    return [subnet, sg, template, group, *asg_tags]


@pytest.mark.parametrize(
    ("change", "violates"),
    [
        ({}, False),
        ({"min_size": 2}, True),
        ({"taints": False}, True),
        ({"ignore": False}, True),
        ({"tags": False}, True),
    ],
)
def test_gpu_node_groups_scale_to_zero(change, violates):
    assert bool(stack_violations("gpu-node-groups-scale-to-zero", _gpu_group(**change))) is violates


def test_gpu_min_size_exception_needs_the_pool_in_config():
    assert (
        stack_violations(
            "gpu-node-groups-scale-to-zero", _gpu_group(min_size=1), {"exceptions": {"h100": "serving warm pool"}}
        )
        == []
    )


def test_gpu_policy_with_missing_scaling_config_flags_the_pool():
    resources = _gpu_group()
    group = next(r for r in resources if r.resource_type == rules.NODE_GROUP)
    del group.props["__target"]["scalingConfig"]
    assert stack_violations("gpu-node-groups-scale-to-zero", resources)


@pytest.mark.parametrize(
    ("change", "violates"),
    [
        ({"efa": 32}, False),
        ({"efa": 1}, True),
        ({"efa": 32, "subnets": 2}, True),
        ({"efa": 32, "placement": False}, True),
        ({"efa": 32, "sg_self": False}, True),
    ],
)
def test_efa_pools(change, violates):
    assert bool(stack_violations("efa-pools", _gpu_group(**change))) is violates


def test_efa_policy_ignores_pools_without_efa_interfaces():
    assert stack_violations("efa-pools", _gpu_group(efa=0)) == []


def _fsx(kind="PERSISTENT_2", kms=True, same_subnet=True, cidr_rule=False):
    group_parts = _gpu_group(efa=32)
    subnet = group_parts[0] if same_subnet else R(rules.SUBNET, {"availabilityZone": "us-east-2a"})
    sg = R(rules.SECURITY_GROUP, {})
    rule = R(
        rules.INGRESS_RULE,
        {
            "fromPort": 988,
            "toPort": 988,
            **({"cidrIpv4": "0.0.0.0/0"} if cidr_rule else {"referencedSecurityGroupId": "sg-n"}),
        },
        deps=[sg],
    )
    fs = R(rules.FSX, {"deploymentType": kind, **({"kmsKeyId": "arn:k"} if kms else {})}, deps=[subnet, sg])
    return [*group_parts, *([] if same_subnet else [subnet]), sg, rule, fs]


@pytest.mark.parametrize(
    ("change", "env", "violates"),
    [
        ({}, "prod", False),
        ({"kind": "SCRATCH_2", "kms": False}, "prod", True),
        ({"kms": False}, "prod", True),
        ({"same_subnet": False}, "prod", True),
        ({"cidr_rule": True}, "prod", True),
        ({"kind": "SCRATCH_2", "kms": False}, "dev", False),
    ],
)
def test_fsx_lustre(change, env, violates):
    assert bool(stack_violations("fsx-lustre", _fsx(**change), {"environment": env})) is violates


def test_node_role_may_only_hold_node_policies():
    trust = json.dumps({"Statement": [{"Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]})
    role = R("aws:iam/role:Role", {"assumeRolePolicy": trust})
    good = R(
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        {"policyArn": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"},
        deps=[role],
    )
    bad = R(
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        {"policyArn": "arn:aws:iam::aws:policy/AdministratorAccess"},
        deps=[role],
    )
    assert stack_violations("node-role-managed-policies", [role, good]) == []
    assert stack_violations("node-role-managed-policies", [role, good, bad])
    assert (
        stack_violations("node-role-managed-policies", [R("aws:iam/role:Role", {}), bad]) == []
    )  # no trust policy: not a node role


@pytest.mark.parametrize(
    ("protect", "env", "violates"), [(True, "prod", False), (False, "prod", True), (False, "dev", False)]
)
def test_prod_data_protected(protect, env, violates):
    resources = [R(rules.KMS_KEY, {}, protect=protect)]
    assert bool(stack_violations("prod-data-protected", resources, {"environment": env})) is violates


def test_every_policy_is_tested_here():
    tested = {c[0] for c in RESOURCE_CASES} | {
        "gpu-node-groups-scale-to-zero",
        "efa-pools",
        "fsx-lustre",
        "node-role-managed-policies",
        "prod-data-protected",
        "vpc-flow-logs",
        "control-plane-logs-encrypted",
        "roles-under-the-boundary",
        "fsx-export-versioned",
    }  # tests/delivery/test_ci_identity.py
    assert tested == set(BY_NAME)
    assert all(
        isinstance(p, ResourceValidationPolicy) == (p.name in {c[0] for c in RESOURCE_CASES}) for p in rules.POLICIES
    )


# --- the pack over real plans -------------------------------------------------------------------------


@pytest.mark.parametrize("stack_name", STACKS)
def test_pack_runs_clean_over_every_shipped_stack(stack_name):
    # with the stack's policy config, as `pulumi preview --policy-pack-config` and the workflows run it
    pack_config = json.loads(
        (Path(__file__).resolve().parents[2] / "policies" / "config" / f"{stack_name}.json").read_text()
    )
    found, not_run = run_policies(plan_of(stack_name), pack_config)
    assert found == [], [f.message for f in found]


def test_broken_stack_fails_with_the_right_policy_names():
    """A deliberately broken prod plan: public endpoint, GPU min 2, one EFA card on p5, FSx in another AZ."""
    plan = copy.deepcopy(plan_of("prod"))
    cluster = plan.one(EKS)
    cluster.inputs.update(endpointPublicAccess=True, publicAccessCidrs=["0.0.0.0/0"])
    h100 = next(g for g in plan.of_type(rules.NODE_GROUP) if g.inputs["labels"].get("higgsfield.io/pool") == "h100")
    h100.inputs["scalingConfig"]["minSize"] = 2
    (template,) = plan.dependencies_of(h100, rules.LAUNCH_TEMPLATE)
    template.inputs["networkInterfaces"] = template.inputs["networkInterfaces"][:2]  # ENA + 1 EFA of 32
    fs = plan.one(rules.FSX)
    other = next(
        s
        for s in plan.of_type(rules.SUBNET)
        if s.inputs["availabilityZone"] == "us-east-2a" and "kubernetes.io/role/internal-elb" in s.inputs["tags"]
    )
    fs.dependencies = [d for d in fs.dependencies if plan.by_urn(d).type != rules.SUBNET] + [other.urn]
    found, _ = run_policies(
        plan, json.loads((Path(__file__).resolve().parents[2] / "policies" / "config" / "prod.json").read_text())
    )
    assert {f.policy for f in found} == {
        "eks-endpoint-restricted",
        "gpu-node-groups-scale-to-zero",
        "efa-pools",
        "fsx-lustre",
    }


def test_check_command_passes_a_shipped_stack(capsys, monkeypatch):
    from infra.cli.main import main
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    assert main(["check", "staging"]) == 0
    assert "0 mandatory" in capsys.readouterr().out


def test_check_command_fails_a_gpu_pool_that_never_scales_to_zero(project_copy, capsys):
    from infra.cli.main import main
    from tests.conftest import set_pool

    project_copy("dev", set_pool(0, minSize=1))
    assert main(["check", "bad"]) == 1
    out = capsys.readouterr().out
    assert "gpu-node-groups-scale-to-zero" in out and "1 mandatory" in out


def test_check_command_honours_a_stack_policy_config(project_copy, capsys, tmp_path):
    from infra.cli.main import main
    from tests.conftest import set_pool

    project_copy("dev", set_pool(0, minSize=1))
    config = tmp_path / "advisory.json"
    dev = json.loads((Path(__file__).resolve().parents[2] / "policies" / "config" / "dev.json").read_text())
    config.write_text(json.dumps({**dev, "gpu-node-groups-scale-to-zero": "advisory"}))
    assert main(["check", "bad", "--policy-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "  advisory   gpu-node-groups-scale-to-zero" in out and "0 mandatory" in out


def test_efa_policy_with_a_template_missing_its_interfaces_skips_the_pool():
    resources = _gpu_group(efa=32)
    template = next(r for r in resources if r.resource_type == rules.LAUNCH_TEMPLATE)
    del template.props["__target"]["networkInterfaces"]
    assert stack_violations("efa-pools", resources) == []


def test_fsx_policy_flags_a_prod_file_system_missing_its_deployment_type():
    resources = _fsx()
    fs = next(r for r in resources if r.resource_type == rules.FSX)
    del fs.props["__target"]["deploymentType"]
    assert stack_violations("fsx-lustre", resources)


def test_prod_rules_apply_when_no_environment_is_configured():
    assert stack_violations("prod-data-protected", [R(rules.KMS_KEY, {})])  # fail closed


def _held(reservation: bool) -> list:
    """A pool at min = desired = max = 4, not ignoring desiredSize; its template targets a
    capacity reservation or not."""
    resources = _gpu_group(min_size=4, ignore=False)
    template = next(r for r in resources if r.resource_type == rules.LAUNCH_TEMPLATE)
    group = next(r for r in resources if r.resource_type == rules.NODE_GROUP)
    group.props["__target"]["scalingConfig"]["__target"].update(desiredSize=4, maxSize=4)
    if reservation:
        template.props["__target"]["capacityReservationSpecification"] = {
            "capacityReservationTarget": {"capacityReservationId": "cr-0fedcba9876543210"}
        }
    return resources


def test_a_reservation_held_warm_at_its_count_passes_the_scale_to_zero_policy():
    """docs/design/reserved-capacity.md: an ODCR is billed whether its instances run or not."""
    assert stack_violations("gpu-node-groups-scale-to-zero", _held(reservation=True)) == []


def test_a_pool_held_at_max_without_a_reservation_still_violates():
    assert len(stack_violations("gpu-node-groups-scale-to-zero", _held(reservation=False))) == 2


@pytest.mark.parametrize(
    "principal",
    ["*", "arn:aws:iam::111122223333:role/anyone", ["arn:aws:iam::111122223333:root", "*"]],
    ids=["wildcard", "a role", "a list with a wildcard"],
)
def test_a_key_policy_naming_more_than_the_accounts_root_is_flagged(principal):
    props = {"policy": _opened_to(principal)}
    assert violations("kms-key-policy-one-account", rules.KMS_KEY, props)


def _granted_to_a_service(condition: dict | None) -> str:
    """The account's key policy with a statement letting CloudWatch Logs and CloudTrail use the key."""
    document = json.loads(account_key_policy("arn:aws:sts::111122223333:assumed-role/deploy/x"))
    statement = {
        "Sid": "Services",
        "Effect": "Allow",
        "Principal": {"Service": ["logs.amazonaws.com", "cloudtrail.amazonaws.com"]},
        "Action": ["kms:Decrypt", "kms:CreateGrant", "kms:GenerateDataKey*"],
        "Resource": "*",
    }
    if condition is not None:
        statement["Condition"] = condition
    document["Statement"].append(statement)
    return json.dumps(document)


@pytest.mark.parametrize(
    "condition",
    [
        None,
        {"StringEquals": {"aws:SourceAccount": "999999999999"}},
        {"ArnLike": {"aws:SourceArn": "arn:aws:cloudtrail:us-east-2:*:trail/*"}},
        {"StringEqualsIfExists": {"aws:SourceAccount": "111122223333"}},
        # ForAllValues is true where the request carries no value for the key (IAM user guide,
        # reference_policies_condition-single-vs-multi-valued-context-keys): no pin, as IfExists
        {"ForAllValues:StringEquals": {"aws:SourceAccount": "111122223333"}},
    ],
    ids=["no condition", "another account", "any account's trail", "if it exists", "for all values"],
)
def test_a_service_granted_a_key_without_a_condition_naming_the_account_is_flagged(condition):
    """The confused deputy on a key: the service acts for every account, so another account's log group
    or trail would reach ours."""
    assert violations("kms-key-policy-one-account", rules.KMS_KEY, {"policy": _granted_to_a_service(condition)})


@pytest.mark.parametrize(
    "condition",
    [
        {"StringEquals": {"aws:SourceAccount": "111122223333"}},
        {"ArnLike": {"aws:SourceArn": "arn:aws:cloudtrail:us-east-2:111122223333:trail/*"}},
    ],
    ids=["source account", "source arn"],
)
def test_a_service_granted_a_key_for_the_accounts_own_resources_passes(condition):
    assert violations("kms-key-policy-one-account", rules.KMS_KEY, {"policy": _granted_to_a_service(condition)}) == []


@pytest.mark.parametrize(
    "principal",
    [
        {"AWS": "*"},
        {"Federated": "arn:aws:iam::999999999999:oidc-provider/token.actions.githubusercontent.com"},
        {"Federated": "accounts.google.com"},
    ],
    ids=["anyone", "another account's OIDC provider", "an outside identity provider"],
)
def test_a_stack_role_trusting_beyond_its_account_is_flagged(principal):
    """The boundary cannot see a trust (IAM has no condition key on it), and the deploy role may not rewrite one:
    the pack refuses a role created trusting another account, anyone, or an identity provider not the account's."""
    props = {"assumeRolePolicy": _trust(principal), "permissionsBoundary": _BOUNDARY}
    assert violations("role-trust-in-the-account", rules.ROLE, props)


def test_a_queue_policy_that_lets_eventbridge_send_for_any_account_is_flagged():
    """Karpenter's getting-started template (cloudformation.yaml@v1.14.1) lets events.amazonaws.com send with no
    condition: any account's rule could feed the controller forged interruptions."""
    assert violations(
        "sqs-queue-policy-own-services",
        rules.SQS_QUEUE,
        {"policy": _queue_opened_to({"Service": "events.amazonaws.com"})},
    )


def test_a_queue_policy_pinned_to_another_accounts_rules_is_flagged():
    condition = {"ArnLike": {"aws:SourceArn": "arn:aws:events:us-east-2:999999999999:rule/*"}}
    policy = _queue_opened_to({"Service": "events.amazonaws.com"}, condition)
    assert violations("sqs-queue-policy-own-services", rules.SQS_QUEUE, {"policy": policy})

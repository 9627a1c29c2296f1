"""Holes a review found in the pack, each shown open (the policy flags it) and closed (the
fix passes): the environment from a tag, an allow-list that is the whole internet in two halves,
NotAction and wildcard patterns, admin managed policies, world-open ingress, short prod logs,
a VPC without flow logs, control-plane logs without our key."""

from __future__ import annotations

import copy
import json

import pytest

from infra.offline.check import run_policies
from policies import rules
from tests.conftest import plan_of
from tests.policies.test_policies import EKS, GOOD_CLUSTER, R, stack_violations, violations


def _policy(*statements: dict) -> dict:
    return {"policy": json.dumps({"Version": "2012-10-17", "Statement": list(statements)})}


# --- the environment ------------------------------------------------------------------------


def _prod_tagged_dev():
    """The prod plan with `higgsfield:tags: {higgsfield:environment: dev}` on every resource,
    a SCRATCH_2 file system and an unprotected cluster."""
    plan = copy.deepcopy(plan_of("prod"))
    for r in plan.resources:
        if isinstance(r.inputs.get("tags"), dict):
            r.inputs["tags"]["higgsfield:environment"] = "dev"
    plan.one(rules.FSX).inputs["deploymentType"] = "SCRATCH_2"
    plan.one(EKS).protect = False
    return plan


def test_a_dev_tag_on_prod_does_not_switch_off_prod_rules():
    found, _ = run_policies(_prod_tagged_dev())
    assert {"fsx-lustre", "prod-data-protected"} <= {f.policy for f in found}


def test_check_takes_the_environment_from_the_typed_stack_config_over_the_pack_file():
    found, _ = run_policies(
        _prod_tagged_dev(), {"fsx-lustre": {"environment": "dev"}, "prod-data-protected": {"environment": "dev"}}
    )
    assert {"fsx-lustre", "prod-data-protected"} <= {f.policy for f in found}


def test_pack_file_of_each_stack_names_its_environment_for_every_policy_that_needs_one(stack):
    config = json.loads((rules_root() / "policies" / "config" / f"{stack}.json").read_text())
    needs = [p.name for p in rules.POLICIES if p.config_schema and "environment" in p.config_schema.properties]
    assert needs
    for name in needs:
        assert config[name]["environment"] == plan_of(stack).config.environment, name


def rules_root():
    from tests.conftest import ROOT

    return ROOT


# --- the endpoint allow-list ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cidrs", "violates"),
    [
        (["0.0.0.0/1", "128.0.0.0/1"], True),  # the whole internet in two halves
        (["0.0.0.0/0"], True),
        ([f"{i}.0.0.0/8" for i in range(1, 3)], True),  # two /8s: far above a /16's worth
        (["203.0.113.0/24", "198.51.100.0/24"], False),
        (["10.1.0.0/16"], False),  # exactly the default share
        (["10.1.0.0/16", "10.1.0.0/17"], False),  # overlaps count once
    ],
)
def test_endpoint_allow_list_may_cover_only_a_small_share_of_the_internet(cidrs, violates):
    assert bool(violations("eks-endpoint-restricted", EKS, {**GOOD_CLUSTER, "publicAccessCidrs": cidrs})) is violates


def test_endpoint_share_is_configurable():
    assert (
        violations(
            "eks-endpoint-restricted",
            EKS,
            {**GOOD_CLUSTER, "publicAccessCidrs": ["10.0.0.0/8"]},
            {"maxInternetShare": 1 / 256},
        )
        == []
    )


def test_endpoint_allow_list_that_is_not_cidrs_is_a_violation():
    assert violations("eks-endpoint-restricted", EKS, {**GOOD_CLUSTER, "publicAccessCidrs": ["office"]})


# --- IAM ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        {"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"},
        {"Effect": "Allow", "Action": "s3:GetObject", "NotResource": "arn:aws:s3:::secret/*"},
        {"Effect": "Allow", "Action": "iam:Pass*", "Resource": "*"},
        {"Effect": "Allow", "Action": "*:*", "Resource": "*"},
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:*Object"], "Resource": "*"},
        {"Action": "ec2:Describe?nstances", "Resource": "*"},  # Effect defaults to Allow
    ],
)
def test_iam_policy_with_a_negation_or_wildcard_pattern_is_flagged(statement):
    assert violations("iam-no-wildcard-actions", "aws:iam/rolePolicy:RolePolicy", _policy(statement))


def test_iam_deny_statements_may_use_wildcards():
    deny = {"Effect": "Deny", "NotAction": "s3:GetObject", "Resource": "*"}
    assert (
        violations(
            "iam-no-wildcard-actions",
            "aws:iam/policy:Policy",
            _policy(deny, {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}),
        )
        == []
    )


def test_iam_wildcards_in_a_role_inline_policy_are_flagged():
    inline = {"inlinePolicies": [{"name": "x", **_policy({"Effect": "Allow", "Action": "iam:Pass*", "Resource": "*"})}]}
    assert violations("iam-no-wildcard-actions", rules.ROLE, inline)
    assert (
        violations(
            "iam-no-wildcard-actions",
            rules.ROLE,
            {"inlinePolicies": [{"name": "x", **_policy({"Action": "iam:PassRole", "Resource": "*"})}]},
        )
        == []
    )


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::aws:policy/AdministratorAccess",
        "arn:aws:iam::aws:policy/PowerUserAccess",
        "arn:aws:iam::aws:policy/IAMFullAccess",
        "arn:aws-us-gov:iam::aws:policy/AdministratorAccess",
        "arn:aws:iam::aws:policy/job-function/SystemAdministrator",
    ],
)
def test_admin_managed_policy_on_a_pod_identity_role_is_flagged(arn):
    assert violations("iam-no-admin-managed-policies", rules.ROLE_POLICY_ATTACHMENT, {"policyArn": arn})


def test_admin_managed_policy_in_a_role_managed_policy_arns_is_flagged():
    assert violations(
        "iam-no-admin-managed-policies",
        rules.ROLE,
        {"managedPolicyArns": ["arn:aws:iam::aws:policy/AdministratorAccess"]},
    )
    assert (
        violations(
            "iam-no-admin-managed-policies",
            rules.ROLE,
            {"managedPolicyArns": ["arn:aws:iam::111122223333:policy/AdministratorAccess"]},
        )
        == []
    )  # ours: read by the other checks


def test_every_role_the_shipped_stacks_create_is_checked(stack):
    attachments = plan_of(stack).of_type(rules.ROLE_POLICY_ATTACHMENT)
    assert attachments  # the node role and the Pod Identity roles with managed policies
    for a in attachments:
        assert rules._managed_policy_name(a.inputs["policyArn"]) not in rules.ADMIN_POLICIES


# --- security groups ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "props"),
    [
        (
            rules.SECURITY_GROUP,
            {"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}]},
        ),
        (rules.SECURITY_GROUP, {"ingress": [{"protocol": "-1", "ipv6CidrBlocks": ["::/0"]}]}),
        (rules.INGRESS_RULE, {"cidrIpv6": "::/0", "ipProtocol": "tcp", "fromPort": 8080, "toPort": 8080}),
        (rules.SECURITY_GROUP_RULE, {"type": "ingress", "cidrBlocks": ["0.0.0.0/0"], "fromPort": 0, "toPort": 65535}),
    ],
)
def test_security_group_open_to_the_world_on_any_port_is_flagged(type_, props):
    assert violations("security-groups-no-world-ingress", type_, props)


def test_world_open_egress_is_not_ingress():
    assert (
        violations(
            "security-groups-no-world-ingress",
            rules.SECURITY_GROUP_RULE,
            {"type": "egress", "cidrBlocks": ["0.0.0.0/0"]},
        )
        == []
    )


def test_world_open_ingress_passes_only_when_allow_listed_with_a_reason():
    props = {"cidrIpv4": "0.0.0.0/0", "fromPort": 443}
    assert (
        violations(
            "security-groups-no-world-ingress", rules.INGRESS_RULE, props, {"exceptions": {"r": "public load balancer"}}
        )
        == []
    )
    assert violations("security-groups-no-world-ingress", rules.INGRESS_RULE, props, {"exceptions": {"r": ""}})
    assert violations("security-groups-no-world-ingress", rules.INGRESS_RULE, props, {"exceptions": {"other": "why"}})


# --- logs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "days", "violates"),
    [("prod", 30, True), ("prod", 90, False), ("prod", 365, False), ("dev", 7, False), (None, 30, True)],
)
def test_prod_log_retention_has_a_floor(env, days, violates):
    config = {"environment": env} if env else {}
    assert (
        bool(
            violations(
                "log-retention-floor",
                rules.LOG_GROUP,
                {"name": "/aws/vpc/x/flow-logs", "retentionInDays": days},
                config,
            )
        )
        is violates
    )


def test_log_retention_floor_is_configurable():
    assert (
        violations(
            "log-retention-floor",
            rules.LOG_GROUP,
            {"retentionInDays": 30},
            {"environment": "prod", "prodMinimumDays": 30},
        )
        == []
    )


def test_vpc_without_flow_logs_is_flagged():
    vpc = R(rules.VPC, {"cidrBlock": "10.0.0.0/16"})
    assert stack_violations("vpc-flow-logs", [vpc])
    assert stack_violations("vpc-flow-logs", [vpc, R(rules.FLOW_LOG, {"trafficType": "ALL"}, deps=[vpc])]) == []


def test_control_plane_log_group_without_our_key_is_flagged():
    key = R(rules.KMS_KEY, {"enableKeyRotation": True})
    name = {"name": "/aws/eks/higgsfield-prod/cluster"}
    assert stack_violations("control-plane-logs-encrypted", [R(rules.LOG_GROUP, name)])
    assert stack_violations(
        "control-plane-logs-encrypted",
        [R(rules.LOG_GROUP, {**name, "kmsKeyId": "arn:aws:kms:us-east-2:1:key/aws-owned"})],
    )
    assert (
        stack_violations(
            "control-plane-logs-encrypted", [key, R(rules.LOG_GROUP, {**name, "kmsKeyId": "k"}, deps=[key])]
        )
        == []
    )
    assert (
        stack_violations(
            "control-plane-logs-encrypted", [R(rules.LOG_GROUP, {"name": "/aws/containerinsights/x/host"})]
        )
        == []
    )


# --- the shipped plans close each hole ------------------------------------------------------------


def test_every_shipped_vpc_has_flow_logs_into_an_encrypted_group_with_the_stack_retention(plan):
    (vpc,) = plan.of_type(rules.VPC)
    (flow,) = plan.of_type(rules.FLOW_LOG)
    assert vpc.urn in flow.dependencies and flow.inputs["trafficType"] == "ALL"
    (group,) = plan.dependencies_of(flow, rules.LOG_GROUP)
    assert group.inputs["retentionInDays"] == plan.config.observability.log_retention_days
    assert plan.dependencies_of(group, rules.KMS_KEY)


def test_control_plane_logs_are_encrypted_with_our_rotating_logs_key(plan):
    (group,) = [g for g in plan.of_type(rules.LOG_GROUP) if g.inputs["name"].endswith("/cluster")]
    (key,) = plan.dependencies_of(group, rules.KMS_KEY)
    assert key.inputs["enableKeyRotation"] is True
    assert key.protect is plan.config.production


def test_logs_key_lets_cloudwatch_logs_of_the_region_encrypt_this_account_only():
    from components.logs import log_key_policy

    policy = json.loads(log_key_policy("arn:aws:kms:us-east-2:444455556666:key/k", "us-east-2"))
    admin, logs = policy["Statement"]
    assert admin["Principal"] == {"AWS": "arn:aws:iam::444455556666:root"}
    assert logs["Principal"] == {"Service": "logs.us-east-2.amazonaws.com"}
    assert (
        logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
        == "arn:aws:logs:us-east-2:444455556666:log-group:*"
    )
    assert not any("*" in a for a in logs["Action"])

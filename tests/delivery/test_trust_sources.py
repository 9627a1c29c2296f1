"""Service roles are assumed only for this account's own resources (issue 34 point 5, trust policies
with source conditions): a role a service assumes names aws:SourceAccount and aws:SourceArn wherever
the service documents them, evaluated as the requests the service sends (policies/iam_evaluation.py).
The EKS cluster and node roles stay without: AWS documents no source key for them (the comments at
components/cluster.py and components/nodes.py)."""

from __future__ import annotations

import json

import pytest

from policies.iam_evaluation import Policy, Request, evaluate
from tests.conftest import STACKS, config_of, plan_of

# Services AWS documents no source condition for, in the roles the program makes.
WITHOUT_SOURCE_KEYS = {"eks.amazonaws.com", "ec2.amazonaws.com"}
# Roles whose trust names its own conditions instead (session tags, OIDC claims).
OTHER_CONDITIONS = {"pods.eks.amazonaws.com"}


def _trusts(plan) -> dict[str, dict]:
    """Each role trusted by an AWS service: name -> its trust statement."""
    roles = {}
    for role in plan.of_type("aws:iam/role:Role"):
        (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
        if "Service" in statement["Principal"]:
            roles[role.name] = statement
    return roles


def _as_policy(statement: dict) -> Policy:
    return Policy(
        "trust", {"Statement": [{k: v for k, v in statement.items() if k != "Principal"} | {"Resource": "*"}]}
    )


@pytest.mark.parametrize("stack", STACKS)
def test_every_service_role_names_its_source_where_aws_documents_one(stack):
    for name, statement in _trusts(plan_of(stack)).items():
        service = statement["Principal"]["Service"]
        if service in WITHOUT_SOURCE_KEYS or service in OTHER_CONDITIONS:
            continue
        condition = statement.get("Condition", {})
        keys = {k for values in condition.values() for k in values}
        assert {"aws:SourceAccount", "aws:SourceArn"} <= keys, (stack, name, service)


def _flow_log_trust(stack: str = "prod") -> Policy:
    return _as_policy(_trusts(plan_of(stack))["network-flow-logs"])


def _flow_log(account: str, region: str = "us-east-2", kind: str = "vpc-flow-log") -> dict:
    return {"aws:SourceAccount": account, "aws:SourceArn": f"arn:aws:ec2:{region}:{account}:{kind}/fl-0123"}


def test_the_flow_logs_service_assumes_the_flow_log_role_for_this_accounts_flow_logs():
    account = config_of("prod").delivery.account_id
    assert evaluate(Request("sts:AssumeRole", "*", _flow_log(account)), [_flow_log_trust()]).allowed


@pytest.mark.parametrize(
    "context",
    [
        _flow_log("999999999999"),  # another account's flow log naming our role
        {},  # no source at all
    ],
    ids=["another-accounts-flow-log", "no-source"],
)
def test_the_flow_log_role_is_refused_for_any_other_source(context):
    assert not evaluate(Request("sts:AssumeRole", "*", context), [_flow_log_trust()]).allowed


def test_the_flow_log_role_is_refused_for_a_flow_log_of_another_region():
    account = config_of("prod").delivery.account_id
    assert not evaluate(Request("sts:AssumeRole", "*", _flow_log(account, "eu-west-1")), [_flow_log_trust()]).allowed


def test_the_roles_left_without_a_source_are_the_documented_eks_cluster_and_node_roles():
    unconditioned = {
        name: s["Principal"]["Service"] for name, s in _trusts(plan_of("prod")).items() if not s.get("Condition")
    }
    assert set(unconditioned.values()) == WITHOUT_SOURCE_KEYS, unconditioned

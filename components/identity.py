"""AWS permissions for pods, through EKS Pod Identity (no node credentials, no OIDC trust per role)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pulumi
import pulumi_aws as aws


def trust_policy(service: str, *actions: str) -> str:
    """An IAM trust policy letting one AWS service assume the role."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": service}, "Action": list(actions) or "sts:AssumeRole"}
            ],
        }
    )


def pod_identity_trust() -> str:
    """Trust policy for an EKS Pod Identity role (Pod Identity also tags the session)."""
    return trust_policy("pods.eks.amazonaws.com", "sts:AssumeRole", "sts:TagSession")


def pod_identity_role(
    name: str,
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    *,
    inline_policy: str | None = None,
    managed_policy_arn: str | None = None,
) -> tuple[aws.iam.Role, pulumi.Resource]:
    """A role pods can assume through Pod Identity, with either our inline policy or one AWS
    managed policy. Returns the role and its policy resource (wait for both before use)."""
    role = aws.iam.Role(
        name, assume_role_policy=pod_identity_trust(), tags=dict(tags), opts=pulumi.ResourceOptions(parent=parent)
    )
    child = pulumi.ResourceOptions(parent=parent)
    if inline_policy is not None:
        policy: pulumi.Resource = aws.iam.RolePolicy(name, role=role.id, policy=inline_policy, opts=child)
    else:
        policy = aws.iam.RolePolicyAttachment(name, role=role.name, policy_arn=managed_policy_arn, opts=child)
    return role, policy

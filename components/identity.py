"""AWS permissions for pods, through EKS Pod Identity (no node credentials, no OIDC trust per role)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import pulumi
import pulumi_aws as aws


def trust_policy(service: str, *actions: str) -> str:
    """An IAM trust policy letting one AWS service assume the role, with no source condition: only for
    services whose documentation names none for their role (the EKS cluster and node roles)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": service}, "Action": list(actions) or "sts:AssumeRole"}
            ],
        }
    )


def source_trust_policy(service: str, *, account: str, source_arn: str) -> str:
    """An IAM trust policy letting one AWS service assume the role only on behalf of resources of this
    account (`aws:SourceAccount`) matching `source_arn` (`aws:SourceArn`): the service's own request
    names the resource it acts for, so another account's resource cannot borrow the role (the confused
    deputy, docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": service},
                    "Action": "sts:AssumeRole",
                    "Condition": {
                        "StringEquals": {"aws:SourceAccount": account},
                        "ArnLike": {"aws:SourceArn": source_arn},
                    },
                }
            ],
        }
    )


# The session tags EKS Pod Identity puts on every role session it asks for (docs.aws.amazon.com/eks/
# latest/userguide/pod-id-abac.html, "Enable or disable session tags": eks-cluster-name,
# kubernetes-namespace, kubernetes-service-account, among others; on unless an association disables
# them, which ours never do). The trust policy names all three, so the role serves one service account
# of one cluster: no other association of the account (another cluster, a team namespace) can use it.
SESSION_TAGS = ("eks-cluster-name", "kubernetes-namespace", "kubernetes-service-account")
POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"  # the service principal that assumes a Pod Identity role


def pod_identity_trust(cluster: str, namespace: str, service_account: str) -> str:
    """Trust policy for an EKS Pod Identity role of one service account of one cluster."""
    values = dict(zip(SESSION_TAGS, (cluster, namespace, service_account), strict=True))
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": POD_IDENTITY_SERVICE},
                    "Action": ["sts:AssumeRole", "sts:TagSession"],
                    "Condition": {"StringEquals": {f"aws:RequestTag/{k}": v for k, v in values.items()}},
                }
            ],
        }
    )


def pod_identity_role(
    name: str,
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    *,
    cluster: str,
    namespace: str,
    service_account: str,
    inline_policy: pulumi.Input[str] | None = None,
    managed_policy_arn: str | None = None,
) -> tuple[aws.iam.Role, pulumi.Resource]:
    """A role the pods of one service account of one cluster can assume through Pod Identity, with
    either our inline policy or one AWS managed policy. Returns the role and its policy resource
    (wait for both before use)."""
    role = aws.iam.Role(
        name,
        assume_role_policy=pod_identity_trust(cluster, namespace, service_account),
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=parent),
    )
    child = pulumi.ResourceOptions(parent=parent)
    if inline_policy is not None:
        policy: pulumi.Resource = aws.iam.RolePolicy(name, role=role.id, policy=inline_policy, opts=child)
    else:
        policy = aws.iam.RolePolicyAttachment(name, role=role.name, policy_arn=managed_policy_arn, opts=child)
    return role, policy


def pod_identity(
    role_name: str,
    association_name: str,
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    *,
    cluster: str,
    namespace: str,
    service_account: str,
    inline_policy: pulumi.Input[str],
    depends_on: Sequence[pulumi.Resource] = (),
) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
    """A controller's credentials: pod_identity_role with our inline policy and its pod_identity_association.
    Returns the role and what its pods wait for (the role's policy and the association)."""
    role, policy = pod_identity_role(
        role_name,
        tags,
        parent,
        cluster=cluster,
        namespace=namespace,
        service_account=service_account,
        inline_policy=inline_policy,
    )
    association = pod_identity_association(
        association_name,
        tags,
        parent,
        cluster=cluster,
        namespace=namespace,
        service_account=service_account,
        role=role,
        depends_on=depends_on,
    )
    return role, [policy, association]


def pod_identity_association(
    name: str,
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    *,
    cluster: str,
    namespace: str,
    service_account: str,
    role: aws.iam.Role,
    depends_on: Sequence[pulumi.Resource] = (),
) -> aws.eks.PodIdentityAssociation:
    """Pod Identity's link from one service account of the cluster to `role` (pod_identity_role):
    its pods get the role's credentials from the node's agent."""
    return aws.eks.PodIdentityAssociation(
        name,
        cluster_name=cluster,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.arn,
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )

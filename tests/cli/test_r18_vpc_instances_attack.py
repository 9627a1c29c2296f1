"""Round 18, attacked: `higgsfield verify` aws.vpc-instances (infra/cli/verify/checks.py) names every instance of the
cluster's VPC that is no planned node group's, no planned Karpenter pool's and not the layout client. The deploy role
may launch instances there (ec2:* on `*`, without a role: no_role_to_an_instance) and tag them as it likes, but for the
aws: keys no caller writes ("May not begin with aws:": CreateTags' Tag.Key, boto/botocore:botocore/data/ec2/2016-11-15/
service-2.json). Each attack here is an instance of its own that the check must not take for the stack's."""

from __future__ import annotations

import pytest

from infra.cli.verify import checks, connect
from policies.iam_evaluation import Request, evaluate
from tests.cli.test_verify_checks import (  # noqa: F401 (fixtures)
    CLUSTER,
    GROUP_ASG,
    NOW,
    REGION,
    STACK,
    _instance,
    _vpc_holding,
    karpenter_plan,
    karpenters_tags,
    one,
)
from tests.delivery.test_ci_identity import ACCOUNT, EVERYTHING, _boundary, _deploy


def test_the_deploy_role_may_launch_an_instance_with_a_planned_pools_tags():
    """Decided, allowed: the deploy role's RunInstances asks no tag of Karpenter's and refuses none (its denials
    name public addresses and roles passed to EC2), so an instance of its own may carry the owned tag and a pool's."""
    instance = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/*"
    owned = {f"aws:RequestTag/kubernetes.io/cluster/{CLUSTER}": "owned", "aws:RequestTag/karpenter.sh/nodepool": "x"}
    assert evaluate(Request("ec2:RunInstances", instance, owned), [_deploy()]).allowed


@pytest.mark.parametrize(
    "left_out", ["karpenter.k8s.aws/ec2nodeclass", "eks:eks-cluster-name"], ids=["no-class", "no-cluster-name"]
)
def test_an_instance_with_a_pools_tags_that_karpenter_does_not_collect_fails(karpenter_plan, left_out):
    """Karpenter terminates an instance of its List that no NodeClaim names, 30 seconds after its launch; the List is
    by the pool's tag key, the class's tag key and the cluster's name (DefaultProvider.List, aws/karpenter-provider-aws:
    pkg/providers/instance/instance.go@v1.14.1; the instance garbage collection, pkg/controllers/nodeclaim/
    garbagecollection/controller.go@v1.14.1). An instance of the deploy role's own with the owned tag and a planned
    pool's, but without one of those, is never collected, has no NodeClaim for aws.node-claim-creators to find in
    the audit log, and is no instance of Karpenter's."""
    ctx = connect.Context(STACK, karpenter_plan, None, None, now=lambda: NOW)
    tags = {k: v for k, v in karpenters_tags("gpu-h100").items() if k != left_out}
    _vpc_holding(ctx, _instance(1, **{checks.ASG_TAG: GROUP_ASG}), _instance(6, **tags))
    outcome = one("aws.vpc-instances", ctx)
    assert outcome.status == "FAIL" and "i-00000000000000006" in outcome.evidence, outcome


def test_an_instance_named_for_another_cluster_fails(karpenter_plan):
    """Karpenter's List matches the cluster's name by value: an instance naming another cluster is collected by no
    Karpenter of this one."""
    ctx = connect.Context(STACK, karpenter_plan, None, None, now=lambda: NOW)
    tags = {**karpenters_tags("gpu-h100"), "eks:eks-cluster-name": "another"}
    _vpc_holding(ctx, _instance(6, **tags))
    assert one("aws.vpc-instances", ctx).status == "FAIL"


GROUP = f"arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:*:autoScalingGroupName/{GROUP_ASG}"


def test_the_deploy_role_may_not_attach_an_instance_of_its_own_to_a_node_groups_auto_scaling_group():
    """An attached instance "becomes a part of the Auto Scaling group" (the AttachInstances API reference), and
    aws.vpc-instances takes an instance of a planned group for that group's node: the deploy role's own instance, in
    the VPC, attached to a node group's group would be one. The program attaches nothing (EKS runs its groups)."""
    decision = evaluate(Request("autoscaling:AttachInstances", GROUP), [_deploy()])
    assert not decision.allowed and decision.denied_by[1] == "AdministratorsOnly", decision


def test_a_role_under_the_boundary_may_not_attach_an_instance_to_a_node_groups_auto_scaling_group():
    """A role the deploy role makes under the boundary with `*` (BECOME_A_STACK_ROLE) would attach its instance as the
    deploy role may not: the boundary refuses it too (GROUP_WRITES, in its AdministratorsOnly). No role under it
    attaches anything (components/delivery.py GROUP_WRITES names what each calls)."""
    decision = evaluate(Request("autoscaling:AttachInstances", GROUP), [EVERYTHING], boundary=_boundary())
    assert decision.denied_by == ("delivery-boundary", "AdministratorsOnly"), decision


def test_the_deploy_role_may_not_point_a_node_groups_auto_scaling_group_at_a_launch_template_of_its_own():
    """A group launches from the template UpdateAutoScalingGroup names and tags each launch with its name
    (aws:autoscaling:groupName: docs.aws.amazon.com/AutoScaling/latest/DeveloperGuide/ASTagging.html); a template of
    the deploy role's own without an instance profile asks no iam:PassRole, so the node group's group would run the
    deploy role's instances as its nodes in aws.vpc-instances' eyes. EKS changes its groups through its own
    service-linked role, never the deploy role."""
    decision = evaluate(Request("autoscaling:UpdateAutoScalingGroup", GROUP), [_deploy()])
    assert not decision.allowed and decision.denied_by[1] == "AdministratorsOnly", decision


def test_a_role_under_the_boundary_may_not_point_a_node_groups_auto_scaling_group_at_a_launch_template_of_its_own():
    """As the deploy role may not: the group's launches of that template would carry its aws:autoscaling:groupName.
    The cluster role's AmazonEKSClusterPolicy grants UpdateAutoScalingGroup, which EKS does not use (components/
    delivery.py GROUP_WRITES); the Cluster Autoscaler sets desired capacity alone."""
    decision = evaluate(Request("autoscaling:UpdateAutoScalingGroup", GROUP), [EVERYTHING], boundary=_boundary())
    assert decision.denied_by == ("delivery-boundary", "AdministratorsOnly"), decision

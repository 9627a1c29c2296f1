"""Requests beside the boundary's earlier tested denials that open the account's data to another account,
found by round 7's attacker. Each is sent by the deploy role, or by a role it made under the boundary with
`*` on `*` (the style of tests/delivery/test_ci_identity.py ATTACKS). Each must be refused by an explicit
Deny of the deploy role's own policy, and of the boundary (components/delivery.py CROSS_ACCOUNT_OPENINGS, in
ceiling_denials: both carry it)."""

from __future__ import annotations

import pytest

from policies.iam_evaluation import Request, evaluate
from tests.delivery.test_ci_identity import ACCOUNT, EVERYTHING, REGION, _boundary, _deploy

FILE_SYSTEM = f"arn:aws:fsx:{REGION}:{ACCOUNT}:file-system/fs-0123456789abcdef0"

ATTACKS = [
    (
        # The VPC's flow records (every node's and pod's connections, Lustre's included) published to a bucket
        # of another account: an S3 (or Firehose) destination needs `logs:CreateLogDelivery` and
        # `logs:DeleteLogDelivery` of its creator (docs.aws.amazon.com/vpc/latest/userguide/
        # flow-logs-s3-create-flow-log.html, "Prerequisite"), and the bucket's owner admits the creator's account
        # in its own bucket policy (flow-logs-s3-permissions.html: "Otherwise, the bucket owner must add this
        # policy to the bucket, specifying the AWS account ID of the flow log creator"). The boundary denies
        # `logs:CreateDelivery*` (the V2 vended-log API), which does not match `CreateLogDelivery` (the V1 one,
        # also used by Verified Access, Route 53 Resolver and others: docs.aws.amazon.com/verified-access/latest/
        # ug/access-logs-permissions.html). The program's own flow log goes to CloudWatch Logs through its role
        # (components/network.py) and needs neither.
        "publish the VPC's flow logs to another account's bucket",
        Request("logs:CreateLogDelivery", "*"),
    ),
    (
        # A repository policy without SetRepositoryPolicy: a creation template's `repositoryPolicy` (and
        # `customRoleArn`) is applied by ECR to each repository it creates for REPLICATION, PULL_THROUGH_CACHE or
        # CREATE_ON_PUSH (botocore/data/ecr/2015-09-21/service-2.json, CreateRepositoryCreationTemplate, RCTAppliedFor;
        # botocore 1.44.18): push a copy of the training image to a new name and another account pulls it. Whether
        # ECR also checks the caller's ecr:SetRepositoryPolicy for a template carrying a policy is not verified here.
        # The program makes no template (components/registry.py).
        "a repository creation template whose policy names another account",
        Request("ecr:CreateRepositoryCreationTemplate", f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/*"),
    ),
    (
        "give an existing creation template such a policy",
        Request("ecr:UpdateRepositoryCreationTemplate", f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/*"),
    ),
    (
        # The EC2 sibling of "default-encrypt the data bucket under another account's key (which that account could
        # later revoke)" (TheDataOutlivesTheDeploy): every launch template of the program asks for an encrypted
        # root volume without naming a key (components/nodes.py, gpu_pools.py, cpu_nodes.py: encrypted "true"), so
        # the account's default EBS key encrypts every node's disk; pointed at another account's key, that account
        # holds every new node's boot (and sees each use in its CloudTrail). The program never sets the default
        # (docs.aws.amazon.com/ebs/latest/userguide/work-with-ebs-encr.html, "Change the default KMS key").
        "make another account's key the default of every new node's disk",
        Request("ec2:ModifyEbsDefaultKmsKeyId", "*"),
    ),
    (
        # The program exports only through the association's auto-export policy and makes no task.
        "export every existing file under an association to its bucket",
        Request("fsx:CreateDataRepositoryTask", FILE_SYSTEM),
    ),
]


@pytest.mark.parametrize(("attack", "request_"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_the_deploy_role_cannot(attack, request_):
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by is not None and decision.denied_by[0] == "delivery-deploy", decision.reason


@pytest.mark.parametrize(("attack", "request_"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_role_it_made_with_every_permission_cannot_either(attack, request_):
    decision = evaluate(request_, [EVERYTHING], _boundary())
    assert not decision.allowed, decision.reason

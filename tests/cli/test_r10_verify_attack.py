"""Round 10's second attacker, on `higgsfield verify`'s AWS checks: states of a real account in which a check
passes while what it claims is false. The account is moto's healthy prod stack (tests/cli/test_verify_checks.py
`aws`), IAM answered by a Stubber with GetPolicyVersion's wire shape (a URL-encoded document, which botocore
decodes: handlers.json_decode_policies)."""

from __future__ import annotations

import json
import urllib.parse

import boto3
from botocore.stub import Stubber

from tests.cli.test_verify_checks import REGION, aws, aws_ctx, one, plan, subnets  # noqa: F401 (fixtures)


def _managed_policies_answer(aws_ctx, statement: dict) -> None:  # noqa: F811
    """IAM answers that AWS's AmazonEKS_CNI_Policy's default version now holds `statement` beside its ec2 one,
    every other managed policy the program attaches acting in ec2 alone."""
    from components.delivery import MANAGED_POLICIES

    client = boto3.client("iam", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.activate()
    aws_ctx.clients["iam"] = client
    for name in MANAGED_POLICIES:
        arn = f"arn:aws:iam::aws:policy/{name}"
        statements = [{"Effect": "Allow", "Action": ["ec2:Describe*"], "Resource": "*"}]
        if name == "AmazonEKS_CNI_Policy":
            statements.append(statement)
        document = {"Version": "2012-10-17", "Statement": statements}
        stub.add_response("get_policy", {"Policy": {"Arn": arn, "DefaultVersionId": "v8"}}, {"PolicyArn": arn})
        stub.add_response(
            "get_policy_version",
            {"PolicyVersion": {"Document": urllib.parse.quote(json.dumps(document)), "VersionId": "v8"}},
            {"PolicyArn": arn, "VersionId": "v8"},
        )


def test_a_managed_policy_allowing_every_action_but_those_it_names_fails(aws_ctx):  # noqa: F811
    """An Allow with NotAction acts in every service but those actions' (IAM's NotAction element): the policy then
    reaches far beyond the boundary's services though it lists no Action."""
    _managed_policies_answer(aws_ctx, {"Effect": "Allow", "NotAction": ["iam:*"], "Resource": "*"})
    outcome = one("aws.managed-policies", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith("AmazonEKS_CNI_Policy (v8) acts in *")


def test_a_managed_policy_allowing_the_action_star_fails(aws_ctx):  # noqa: F811
    """`"Action": "*"` (no service prefix at all) is every action of every service."""
    _managed_policies_answer(aws_ctx, {"Effect": "Allow", "Action": "*", "Resource": "*"})
    outcome = one("aws.managed-policies", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith("AmazonEKS_CNI_Policy (v8) acts in *")


def test_a_managed_policy_aws_extended_to_an_eks_write_fails_naming_it(aws_ctx):  # noqa: F811
    """The boundary allows EKS reads alone (components/delivery.py BOUNDED_EKS_ACTIONS): an EKS write AWS adds to a
    managed policy would be refused to its role under the boundary, though EKS is among the boundary's services."""
    _managed_policies_answer(aws_ctx, {"Effect": "Allow", "Action": "eks:UpdateNodegroupConfig", "Resource": "*"})
    outcome = one("aws.managed-policies", aws_ctx)
    assert outcome.status == "FAIL" and outcome.evidence.startswith(
        "AmazonEKS_CNI_Policy (v8) acts in eks:updatenodegroupconfig"
    )


def test_a_managed_policy_reading_eks_passes(aws_ctx):  # noqa: F811
    """AmazonEKSWorkerNodePolicy's eks:DescribeCluster, as AWS writes it."""
    _managed_policies_answer(aws_ctx, {"Effect": "Allow", "Action": "eks:DescribeCluster", "Resource": "*"})
    assert one("aws.managed-policies", aws_ctx).status == "PASS"


def test_a_managed_policy_naming_a_boundary_service_in_capitals_passes(aws_ctx):  # noqa: F811
    """IAM matches an action's service prefix whatever its case ("EC2:DescribeInstances" is ec2's): no false alarm."""
    _managed_policies_answer(aws_ctx, {"Effect": "Allow", "Action": "EC2:DescribeInstances", "Resource": "*"})
    outcome = one("aws.managed-policies", aws_ctx)
    assert outcome.status == "PASS"


def test_a_linked_bucket_whose_lifecycle_expires_old_versions_fails(aws_ctx, aws, plan):  # noqa: F811
    """Versioning Enabled, but a lifecycle rule deletes every noncurrent version a day after it is replaced: the
    bucket does not keep every version, and a write-back that overwrote a dataset is unrecoverable the next day."""
    bucket = plan.config.fsx.s3.bucket
    aws.client("s3").put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "tidy",
                    "Status": "Enabled",
                    "Filter": {"Prefix": ""},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
                }
            ]
        },
    )
    outcome = one("aws.data-versioning", aws_ctx)
    assert outcome.status == "FAIL"
    assert f"{bucket}: lifecycle rule tidy deletes versions 1 day(s) after they are replaced" in outcome.evidence


def test_a_log_group_under_another_accounts_key_fails(aws_ctx, aws, plan):  # noqa: F811
    """A planned group encrypted, but under a key another account owns: that account may disable the key or schedule
    its deletion, and the group's logs (the audit log's among them) are then neither written nor read."""
    from infra.cli.verify import checks

    name = str(plan.of_type(checks.LOG_GROUP)[0].inputs["name"])
    logs = aws.client("logs")
    logs.delete_log_group(logGroupName=name)
    logs.create_log_group(
        logGroupName=name, kmsKeyId="arn:aws:kms:us-east-2:999999999999:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    )
    logs.put_retention_policy(
        logGroupName=name, retentionInDays=plan.of_type(checks.LOG_GROUP)[0].inputs["retentionInDays"]
    )
    outcome = one("aws.log-groups", aws_ctx)
    assert outcome.status == "FAIL" and name in outcome.evidence


def _runner_projects(aws_ctx, plan, **webhook) -> None:  # noqa: F811
    """CodeBuild answers BatchGetProjects with each runner project's webhook holding the planned filter groups (as
    CodeBuild writes them: each group the list of its filters) and the other Webhook members given."""
    from infra.cli.verify import checks

    client = boto3.client("codebuild", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.activate()
    aws_ctx.clients["codebuild"] = client
    hooks = {
        r.inputs["projectName"]: [g["filters"] for g in r.inputs["filterGroups"]] for r in plan.of_type(checks.WEBHOOK)
    }
    projects = [{"name": n, "webhook": {"filterGroups": g, **webhook}} for n, g in hooks.items()]
    stub.add_response("batch_get_projects", {"projects": projects}, {"names": sorted(hooks)})


def test_a_runner_webhook_made_for_the_whole_github_organization_fails(aws_ctx, plan):  # noqa: F811
    """The same filters on an organization webhook (Webhook.scopeConfiguration, GITHUB_ORGANIZATION: botocore's
    codebuild service model) match a workflow of the same name in every repository of the organization: another
    repository's `deploy` or `preview` job would run in the stack's VPC with the runner's role."""
    _runner_projects(aws_ctx, plan, scopeConfiguration={"name": "acme", "scope": "GITHUB_ORGANIZATION"})
    outcome = one("aws.runner-webhooks", aws_ctx)
    assert outcome.status == "FAIL" and "GITHUB_ORGANIZATION acme" in outcome.evidence


def test_the_stacks_own_region_refusing_describe_subnets_does_not_pass(aws_ctx, subnets):  # noqa: F811
    """A refusal in the region the stack runs in is no organization's closure (the stack launches its nodes there):
    the caller lacks ec2:DescribeSubnets, and the check has seen nothing of the region. Every region refused so
    passed as "no subnet in the account's 0 region(s)"."""
    subnets({REGION: "UnauthorizedOperation", "eu-west-1": "UnauthorizedOperation"})
    outcome = one("aws.public-subnets", aws_ctx)
    assert outcome.status == "FAIL" and "DescribeSubnets" in outcome.evidence
    assert "ec2:DescribeSubnets" in outcome.fix

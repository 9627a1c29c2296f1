"""The KMS key our CloudWatch log groups (control plane, VPC flow logs) are encrypted with."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True, kw_only=True)
class LogKeyArgs:
    cluster_name: str
    region: str
    deployer_arn: pulumi.Input[str]  # deploying_identity(): the key's partition and account
    protect: bool
    tags: Mapping[str, str]


def deploying_identity() -> pulumi.Output[str]:
    """The ARN of whoever deploys (sts GetCallerIdentity, no permission needed): its partition and
    account are the keys' own, known before a key exists, so each key is created with its policy.
    The program asks once and passes it to each component that makes a key or a queue policy."""
    return aws.get_caller_identity_output().arn


def _account_administers(arn: str) -> dict:
    """The default key policy's one statement (docs.aws.amazon.com/kms/latest/developerguide/
    key-policy-default.html): the key's own account administers and uses it through IAM; the
    partition and account come from `arn`, any ARN of that account (the deploying identity's)."""
    partition, account = arn.split(":")[1], arn.split(":")[4]
    return {
        "Sid": "AccountAdministers",
        "Effect": "Allow",
        "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
        "Action": "kms:*",
        "Resource": "*",
    }


def account_key_policy(arn: str) -> str:
    """A key's policy that lets the key's account administer and use it through IAM and nothing
    else: no other account, no grant to an outside principal (the default's statement, written down
    so the key has a policy of ours that a review and the tests can read)."""
    return json.dumps({"Version": "2012-10-17", "Statement": [_account_administers(arn)]})


def key_with_policy(
    name: str,
    *,
    description: str,
    deployer_arn: pulumi.Input[str],
    policy: Callable[[str], str],
    tags: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> aws.kms.Key:
    """A customer managed key of ours: rotated every year, 30 days' deletion window, and created with its policy,
    `policy(deployer_arn)` (CreateKey's: no PutKeyPolicy afterwards, the deploy boundary's AdministratorsOnly)."""
    return aws.kms.Key(
        name,
        description=description,
        enable_key_rotation=True,
        deletion_window_in_days=30,
        policy=pulumi.Output.from_input(deployer_arn).apply(policy),
        tags=dict(tags),
        opts=opts,
    )


def log_key_policy(arn: str, region: str) -> str:
    """The account administers the key; CloudWatch Logs of this region may use it for this
    account's log groups only. CloudWatch Logs needs this in the key policy
    (docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html)."""
    partition, account = arn.split(":")[1], arn.split(":")[4]
    logs_encrypt = {
        "Sid": "CloudWatchLogsEncrypts",
        "Effect": "Allow",
        "Principal": {"Service": f"logs.{region}.amazonaws.com"},
        "Action": [
            "kms:Encrypt",
            "kms:Decrypt",
            "kms:ReEncryptFrom",
            "kms:ReEncryptTo",
            "kms:GenerateDataKey",
            "kms:GenerateDataKeyWithoutPlaintext",
            "kms:DescribeKey",
        ],
        "Resource": "*",
        "Condition": {
            "ArnLike": {"kms:EncryptionContext:aws:logs:arn": f"arn:{partition}:logs:{region}:{account}:log-group:*"}
        },
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [_account_administers(arn), logs_encrypt]})


class LogKey(pulumi.ComponentResource):
    """A customer-managed KMS key (rotation on) for the stack's CloudWatch log groups.

    Creates: the key with its policy (CreateKey's: account administers, CloudWatch Logs of the region encrypts
    this account's log groups), an alias. Replaced when: never by config; a new key leaves old
    log events readable only with the old one, which is why prod protects and retains it.
    """

    def __init__(self, name: str, args: LogKeyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:logs:LogKey", name, None, opts)
        keep = pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect)
        self.key = key_with_policy(
            name,
            description=f"CloudWatch Logs of {args.cluster_name}",
            deployer_arn=args.deployer_arn,
            policy=lambda arn: log_key_policy(arn, args.region),
            tags=args.tags,
            opts=keep,
        )
        aws.kms.Alias(
            name,
            name=f"alias/{args.cluster_name}-logs",
            target_key_id=self.key.key_id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.arn = self.key.arn
        self.register_outputs({"arn": self.arn})

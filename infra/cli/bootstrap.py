"""`higgsfield bootstrap STACK`: the first deploy of a stack, before CI can do it.

CI previews and deploys from CodeBuild runners inside the stack's VPC with roles the stack
creates, so the first `pulumi up` cannot run in CI: nothing exists yet. It runs once from an
operator's machine, as an administrator of the account who is neither the deploy role nor in
`higgsfield:admins` (EKS keeps the creator's admin access entry, and a second entry for the same
principal would collide), with the API endpoint opened to that machine's address only for the
duration. This prints the steps with the stack's own names; it runs nothing.
"""

from __future__ import annotations

from typing import Any

from infra.cli import stacks
from infra.cli.offline import project_root


def steps(config: Any) -> list[str]:
    """The bootstrap steps for a validated StackConfig with higgsfield:delivery."""
    stack, region, delivery = config.stack, config.region, config.delivery
    if delivery is None:
        return [f"{stack} has no higgsfield:delivery: CI neither previews nor deploys it; deploy it by hand (docs/getting-started.md)."]
    bucket, key = delivery.state_bucket, delivery.state_key_arn
    entry = next(e for e in stacks.stack_matrix(project_root())["include"] if e["stack"] == stack)
    endpoint = config.endpoint.public_access_cidrs
    restore = f"publicAccessCidrs {list(endpoint)}" if endpoint else "a private endpoint (publicAccessCidrs [])"
    return [
        f"Credentials: an administrator of account {delivery.account_id} (region {region}) that is not {entry['deployRole']} "
        f"and not in higgsfield:admins (EKS gives the cluster's creator its own admin access entry).",
        f"Backend (once per bucket): aws s3api create-bucket --bucket {bucket} --region {region}"
        + ("" if region == "us-east-1" else f" --create-bucket-configuration LocationConstraint={region}")
        + f" && aws s3api put-bucket-versioning --bucket {bucket} --versioning-configuration Status=Enabled"
        + f" && aws s3api put-public-access-block --bucket {bucket} --public-access-block-configuration "
        + "BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true",
        f"Secrets key (once): aws kms create-key --region {region} --description 'Pulumi secrets of {stack}'; "
        f"put its key ARN in higgsfield:delivery.stateKeyArn (now {key}).",
        f"GitHub connection (once per account and region): aws codeconnections create-connection --region {region} "
        f"--provider-type GitHub --connection-name higgsfield-{stack}, then finish the handshake in the console "
        f"(Developer Tools > Settings > Connections: status Available); put its ARN in higgsfield:delivery.runner.connectionArn.",
        f"pulumi login '{entry['backend']}' && pulumi stack init {stack} --secrets-provider 'awskms://{key}?region={region}'"
        f" (commit the secretsprovider/encryptedkey lines it adds to stacks/Pulumi.{stack}.yaml).",
        f"First deploy, from this machine, with the endpoint opened to it only: cp stacks/Pulumi.{stack}.yaml /tmp/Pulumi.{stack}.bootstrap.yaml, "
        f"set higgsfield:endpoint.publicAccessCidrs there to [\"$(curl -s https://checkip.amazonaws.com)/32\"], then "
        f"pulumi up --stack {stack} --config-file /tmp/Pulumi.{stack}.bootstrap.yaml --policy-pack policies --policy-pack-config policies/config/{stack}.json. "
        f"It creates the VPC, the cluster, the CI roles ({entry['previewRole']}, {entry['deployRole']}, {entry['imageRole']}), "
        f"their access entries" + (f" and the CodeBuild runner project {entry['runner']}" if entry["runner"] else "") + ".",
        f"GitHub: create the environment {entry['deployEnvironment']!r} (Settings > Environments) with deployment branches "
        f"limited to main" + (" and required reviewers" if config.environment != "dev" else "") + "; nothing else: role ARNs, "
        "region and backend come from the stack file (higgsfield stacks), and no secret is needed.",
        f"Close the endpoint: merge to main (or re-run deploy): the deploy job, on the runner inside the VPC, applies the "
        f"committed stack file, which restores {restore}.",
    ]


def render(config: Any) -> str:
    return "\n".join(f"{i}. {step}" for i, step in enumerate(steps(config), 1))

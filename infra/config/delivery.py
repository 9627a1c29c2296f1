"""CI delivery: preview/deploy identities and runners."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    Strict,
    model_validator,
)

from infra.config.base import Bool, Setting, derived, items, matching
from infra.config.errors import Problems
from infra.config.limits import S3_BUCKET_PATTERN, s3_bucket

# A GitHub account's numeric id (the webhook payload's `sender.id`), as a string: CodeBuild's
# ACTOR_ACCOUNT_ID filter matches it with a regular expression (botocore codebuild WebhookFilter).
GitHubAccountId = matching(r"^[1-9][0-9]{0,11}$", "is not a GitHub account id (digits: gh api users/LOGIN --jq .id)")


# The shipped stacks' stand-in for the user's own repository. Someone could own it on GitHub, and
# the CI roles trust the workflows of the repository named here: check and bootstrap say so.
PLACEHOLDER_REPOSITORY = "your-org/higgsfield"


class Runner(Setting):
    """GitHub Actions runners hosted on AWS CodeBuild, in the stack's private subnets, one ephemeral build per job."""

    enabled: Bool = True
    """Previews and deploys run inside the VPC (required unless the endpoint is open to 0.0.0.0/0, which prod
    refuses)."""
    connection_arn: (
        matching(
            r"^arn:aws[a-z-]*:(codeconnections|codestar-connections):[a-z0-9-]+:\d{12}:connection/[0-9a-f-]{36}$",
            "is not an AWS CodeConnections connection ARN (arn:aws:codeconnections:REGION:ACCOUNT:connection/UUID)",
        )
        | None
    ) = None
    """The CodeConnections connection to GitHub the runner project uses (created once in the console); required when
    enabled."""
    compute_type: Literal["BUILD_GENERAL1_SMALL", "BUILD_GENERAL1_MEDIUM", "BUILD_GENERAL1_LARGE"] = (
        "BUILD_GENERAL1_MEDIUM"
    )
    """The CodeBuild compute type of a runner (pulumi and the Helm charts need about 4 GB)."""
    deploy_actors: tuple[GitHubAccountId, ...] = items()
    """GitHub account ids (numeric, `gh api users/LOGIN --jq .id`) whose deploy jobs may start a deploy runner: the
    webhook's ACTOR_ACCOUNT_ID filter (the workflow_job event's sender: who merged to main, dispatched or re-ran the
    deploy). Required when enabled: no one else, and no pull request of anyone else, gets a build in the deploy
    runner. A change is an administrator's deploy (the deploy role may not write a runner's webhook: `higgsfield
    diff` names the command)."""
    preview_actors: tuple[GitHubAccountId, ...] = items()
    """GitHub account ids whose pull requests may start a preview runner (the webhook's ACTOR_ACCOUNT_ID filter).
    Required when enabled: the preview runner sits in the stack's VPC, so no one else - no fork, approved or not - gets
    a build in it. A change is an administrator's deploy, as for deployActors."""

    @model_validator(mode="after")
    def _connection_when_enabled(self) -> Runner:
        problems = Problems()
        if self.enabled and self.connection_arn is None:
            problems.add(
                "connectionArn",
                "is required when the runner is enabled: CodeBuild reaches GitHub through a CodeConnections connection",
            )
        if self.enabled and not self.deploy_actors:
            problems.add(
                "deployActors",
                "name the GitHub account ids allowed to start a deploy runner (gh api users/LOGIN --jq .id): "
                "without them any workflow job named deploy, a pull request's included, would get one",
            )
        if self.enabled and not self.preview_actors:
            problems.add(
                "previewActors",
                "name the GitHub account ids allowed to start a preview runner (gh api users/LOGIN --jq .id): "
                "without them any pull request's workflow named preview, a fork's included, would run in the VPC",
            )
        problems.raise_any()
        return self


class Delivery(Setting):
    """The CI identities and runners of .github/workflows (components/delivery.py): a preview role for pull requests, a
    deploy role for the stack's GitHub environment, an image-push role for main."""

    # GitHub's names: an owner of letters, digits and single inner hyphens, up to 39 ("may only contain
    # alphanumeric characters or single hyphens, and cannot begin or end with a hyphen"); a repository
    # of letters, digits, '.', '-', '_' up to 100, not '.' or '..' (the printed `gh api repos/OWNER/NAME`
    # paths would climb). The OIDC subject names the same repository.
    repository: matching(
        r"^[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}/(?!\.{1,2}$)[A-Za-z0-9._-]{1,100}$",
        "is not a GitHub repository (owner/name: owner of letters, digits and single inner hyphens; name not . or ..)",
    )
    """The GitHub repository (owner/name) whose workflows may assume the roles."""
    account_id: matching(r"^\d{12}$", "is not a 12-digit AWS account id")
    """The AWS account of this stack; the workflows build the role ARNs from it (higgsfield stacks)."""
    oidc_provider_arn: (
        matching(
            r"^arn:aws[a-z-]*:iam::\d{12}:oidc-provider/token\.actions\.githubusercontent\.com$",
            "is not the ARN of GitHub's OIDC provider "
            "(arn:aws:iam::ACCOUNT:oidc-provider/token.actions.githubusercontent.com)",
        )
        | None
    ) = None
    """GitHub's OIDC provider in the account, if it exists already (it is one per account); unset: the stack creates
    it."""
    deploy_environment: (
        matching(
            r"^(?!\.{1,2}$)[A-Za-z0-9._-]{1,255}$",
            "is not one GitHub environment name (letters, digits, . _ -; not . or ..; no wildcards)",
        )
        | None
    ) = derived(
        "The GitHub environment whose jobs may assume the deploy role (OIDC subject "
        "repo:OWNER/REPO:environment:NAME); default the stack name."
    )
    state_bucket: Annotated[
        str, Strict(), Field(max_length=63, json_schema_extra={"pattern": S3_BUCKET_PATTERN}), AfterValidator(s3_bucket)
    ]
    """The S3 bucket (in aws:region) of this stack's Pulumi backend, s3://BUCKET: the workflows log in to it, the
    preview role may read it (and write nothing there, its lock included)."""
    state_key_arn: matching(
        r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]{36}$",
        "is not a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/UUID; IAM grants on an alias ARN do not cover the key)",
    )
    """The KMS key (key ARN, not an alias) of the stack's awskms:// secrets provider: no passphrase in CI; the preview
    role may decrypt with it."""
    runner: Runner
    """Where previews and deploys run: `connectionArn` for CodeBuild runners in the VPC, or `enabled: false` (only for
    an endpoint open to 0.0.0.0/0)."""

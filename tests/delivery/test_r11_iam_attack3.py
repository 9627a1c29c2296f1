"""Round 11 attacker, third batch, on IAM: what the deploy role may still do with the runner projects it may not
write (components/delivery.py RunnersAreTheAdministrators), decided with policies/iam_evaluation.py on the prod plan's
policies. StartBuild takes overrides of the source, its auth, the buildspec, the image, the variables and the service
role (boto/botocore:botocore/data/codebuild/2016-10-06/service-2.json@1.44.18 StartBuildInput), some of them carried by
condition keys (docs.aws.amazon.com/codebuild/latest/userguide/action-context-keys.html: a Deny of StartBuild where
codebuild:source.buildspec is not Null refuses a buildspecOverride), and a runner's service role may use the stack's
GitHub connection (codeconnections:UseConnection, GetConnectionToken)."""

from __future__ import annotations

import pytest

from infra.core.names import runner_project
from policies.iam_evaluation import Request, evaluate
from tests.delivery.test_ci_identity import ACCOUNT, _boundary, _deploy
from tests.security.test_red_team import EVERYTHING

RUNNERS = [f"arn:aws:codebuild:us-east-2:{ACCOUNT}:project/{runner_project('prod', p)}" for p in ("deploy", "preview")]


@pytest.mark.parametrize("action", ["codebuild:StartBuild", "codebuild:StartBuildBatch", "codebuild:RetryBuild"])
@pytest.mark.parametrize("project", RUNNERS, ids=["deploy-runner", "preview-runner"])
def test_the_deploy_role_may_not_start_a_runner_build_of_its_own_choosing(action, project):
    """A build of a runner project with sourceLocationOverride names any repository the stack's GitHub connection
    reaches (the GitHub App's installation: the organization's private repositories too) and clones it with the
    runner's UseConnection; buildspecOverride sends it out (egress 443 to anywhere). So the deploy role, meant to
    deploy one repository, reads every repository of the installation, and runs a build no GitHub job asked for
    under the runner's role in the stack's VPC. The webhook's builds are CodeBuild's own, started by no principal:
    the runners need no one to hold StartBuild. Unverified here: whether such a build registers as a runner and
    takes a queued job of another workflow (no webhook payload names one). On AWS, as the deploy role of a staging
    stack: `aws codebuild start-build --project-name higgsfield-staging-deploy-runner --source-location-override
    https://github.com/ORG/OTHER-PRIVATE-REPO.git --buildspec-override 'version: 0.2
    phases: {build: {commands: [ls -la]}}'` is AccessDenied. Fixed: RunnersAreTheAdministrators denies StartBuild*
    and RetryBuild*."""
    assert evaluate(Request(action, project), [_deploy()]).denied_by == (
        "delivery-deploy",
        "RunnersAreTheAdministrators",
    )


@pytest.mark.parametrize("project", RUNNERS, ids=["deploy-runner", "preview-runner"])
def test_no_role_under_the_boundary_starts_a_runner_build(project):
    """A role the deploy role makes under the boundary, given `*`, may not start one: the boundary allows no
    CodeBuild action, so the hop through a bounded role adds nothing here."""
    assert not evaluate(Request("codebuild:StartBuild", project), [EVERYTHING], _boundary()).allowed

"""The stack's runner projects and their webhooks are the administrator's to make and change
(components/delivery.py RunnersAreTheAdministrators): what decides the code a runner runs in the stack's VPC with a
job's OIDC token is partly out of IAM's sight (an inline buildspec; a webhook's filter groups, which name the actors),
so the deploy role may not create or update either, even as the program plans them. Decided on the shipped prod
plan's policies with the condition keys CreateProject, UpdateProject and the webhook writes carry (Service
Authorization Reference, list_awscodebuild). On AWS, as the deploy role of a staging stack: `aws codebuild
update-project --name higgsfield-staging-deploy-runner --source type=GITHUB,location=https://github.com/OTHER/REPO.git`
and `aws codebuild update-webhook --project-name higgsfield-staging-preview-runner --filter-groups
'[[{"type":"EVENT","pattern":"WORKFLOW_JOB_QUEUED"}]]'` are each AccessDenied."""

from __future__ import annotations

import pytest

from components.delivery import runner_source
from infra.core import versions
from infra.core.names import runner_project
from policies.iam_evaluation import Request, evaluate
from tests.conftest import config_of
from tests.delivery.test_ci_identity import ACCOUNT, _deploy

PROJECT = f"arn:aws:codebuild:us-east-2:{ACCOUNT}:project/{runner_project('prod', 'deploy')}"
PREVIEW = f"arn:aws:codebuild:us-east-2:{ACCOUNT}:project/{runner_project('prod', 'preview')}"
AS_DEPLOYED = {
    "codebuild:source.location": runner_source(config_of("prod").delivery),
    "codebuild:environment.privilegedMode": "false",
    "codebuild:environment.image": versions.CODEBUILD_RUNNER_IMAGE,
    "codebuild:source.buildspec": "true",  # pulumi-aws sends the field, empty, always
}
REFUSED = ("delivery-deploy", "RunnersAreTheAdministrators")


def _decided(action: str, resource: str = PROJECT, **changed: object):
    return evaluate(Request(action, resource, {**AS_DEPLOYED, **changed}), [_deploy()])


@pytest.mark.parametrize("action", ["codebuild:CreateProject", "codebuild:UpdateProject"])
def test_a_runner_project_as_the_program_plans_it_is_the_administrators_to_write(action):
    assert _decided(action).denied_by == REFUSED


@pytest.mark.parametrize("action", ["codebuild:CreateProject", "codebuild:UpdateProject"])
def test_a_runner_project_moved_to_a_fork_is_refused(action):
    assert _decided(action, **{"codebuild:source.location": "https://github.com/someone/fork.git"}).denied_by == REFUSED


@pytest.mark.parametrize(
    "changed",
    [
        {"codebuild:secondarySources": "true"},
        {"codebuild:environment.privilegedMode": "true"},
        {"codebuild:environment.image": "docker.io/someone/runner:latest"},
        {"codebuild:environment.environmentVariables.name": ["PIP_INDEX_URL"]},
    ],
    ids=["second-source", "privileged", "someone-elses-image", "an-index-url"],
)
def test_a_runner_project_that_would_run_other_code_is_refused(changed):
    assert _decided("codebuild:UpdateProject", **changed).denied_by == REFUSED


def test_a_runner_project_given_an_inline_buildspec_is_refused():
    """codebuild:source.buildspec supports only Null and pulumi-aws sends the field always: a buildspec's content
    is out of IAM's sight, and it runs before the job wherever a workflow asks buildspec-override:true."""
    assert _decided("codebuild:UpdateProject").denied_by == REFUSED


def test_a_runner_project_made_public_is_refused():
    """A public project shows its builds' logs, a deploy's plan and outputs among them, to anyone."""
    request = Request("codebuild:UpdateProjectVisibility", PREVIEW, {"codebuild:projectVisibility": "PUBLIC_READ"})
    assert evaluate(request, [_deploy()]).denied_by == REFUSED


@pytest.mark.parametrize("action", ["codebuild:CreateWebhook", "codebuild:UpdateWebhook"])
def test_a_runner_webhook_scoped_to_an_organization_is_refused(action):
    request = Request(action, PROJECT, {"codebuild:scopeConfiguration.scope": "GITHUB_ORGANIZATION"})
    assert evaluate(request, [_deploy()]).denied_by == REFUSED


def test_a_preview_webhook_that_admits_every_actor_is_refused():
    """No IAM condition key carries a webhook's filterGroups, so an UpdateWebhook that drops the preview runner's
    ACTOR_ACCOUNT_ID filter (webhook_filters) is the same request, to IAM, as the program's own."""
    request = Request("codebuild:UpdateWebhook", PREVIEW, {"codebuild:buildType": "BUILD"})
    assert evaluate(request, [_deploy()]).denied_by == REFUSED


@pytest.mark.parametrize("action", ["codebuild:DeleteWebhook", "codebuild:DeleteProject", "codebuild:BatchGetProjects"])
def test_a_runner_is_the_deploy_roles_to_read_and_remove(action):
    """Removing a runner from the stack stays a CI deploy: made again, it is an administrator's."""
    assert evaluate(Request(action, PROJECT), [_deploy()]).allowed

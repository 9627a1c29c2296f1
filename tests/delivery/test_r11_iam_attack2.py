"""Attacks on the deploy role's runner-project denials (components/delivery.py RunnersBuildTheRepository and beside
it): other fields of CreateProject, UpdateProject, UpdateProjectVisibility and UpdateWebhook that make a runner
project run code the stack does not trust, or show what its builds print, while the source location stays the
repository's. Decided on the shipped prod plan's deploy role with the condition keys the Service Authorization
Reference lists for CodeBuild (list_awscodebuild: codebuild:environment.image,
codebuild:environment.environmentVariables, codebuild:projectVisibility; no key carries a webhook's filterGroups)."""

from __future__ import annotations

import pytest

from infra.core import versions
from infra.core.names import runner_project
from policies.iam_evaluation import Request, evaluate
from tests.delivery.test_ci_identity import ACCOUNT, _deploy
from tests.delivery.test_runner_projects_iam import AS_DEPLOYED

PREVIEW = f"arn:aws:codebuild:us-east-2:{ACCOUNT}:project/{runner_project('prod', 'preview')}"
DEPLOY = f"arn:aws:codebuild:us-east-2:{ACCOUNT}:project/{runner_project('prod', 'deploy')}"


@pytest.mark.parametrize("action", ["codebuild:CreateProject", "codebuild:UpdateProject"])
def test_a_runner_project_moved_to_an_image_of_someone_elses_is_refused(action):
    """Every later deploy job would run in that image, which sees the job's OIDC token and the deploy role's
    credentials: the repository stays ours, the code that runs its workflows does not."""
    theirs = {**AS_DEPLOYED, "codebuild:environment.image": "docker.io/someone/runner:latest"}
    decision = evaluate(Request(action, DEPLOY, theirs), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RunnersRunTheirImage"), decision.reason


def test_the_runner_image_the_program_pins_is_the_deploy_roles_to_set():
    ours = {**AS_DEPLOYED, "codebuild:environment.image": versions.CODEBUILD_RUNNER_IMAGE}
    assert evaluate(Request("codebuild:UpdateProject", DEPLOY, ours), [_deploy()]).allowed


def test_a_runner_project_made_public_is_refused():
    """A public project shows its builds' logs, a deploy's plan and outputs among them, to anyone."""
    public = {"codebuild:projectVisibility": "PUBLIC_READ"}
    decision = evaluate(Request("codebuild:UpdateProjectVisibility", PREVIEW, public), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RunnersArePrivate"), decision.reason


def test_a_runner_project_given_an_index_url_is_refused():
    """Every later job's steps inherit the project's variables: PIP_INDEX_URL there installs someone else's
    packages in each deploy."""
    index = {
        **AS_DEPLOYED,
        "codebuild:environment.environmentVariables": "true",
        "codebuild:environment.environmentVariables.name": ["PIP_INDEX_URL"],
    }
    decision = evaluate(Request("codebuild:UpdateProject", DEPLOY, index), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RunnersHaveNoVariables"), decision.reason


def test_a_preview_webhook_that_admits_every_actor_is_refused():
    """No IAM condition key carries a webhook's filterGroups, so an UpdateWebhook that drops the preview runner's
    ACTOR_ACCOUNT_ID filter (webhook_filters) is the same request, to IAM, as the program's own: the webhooks are the
    administrator's (WebhooksAreTheAdministrators). On AWS, as the deploy role: `aws codebuild update-webhook
    --project-name higgsfield-staging-preview-runner --filter-groups '[[{"type":"EVENT","pattern":
    "WORKFLOW_JOB_QUEUED"}]]'` is AccessDenied."""
    widened = Request("codebuild:UpdateWebhook", PREVIEW, {"codebuild:buildType": "BUILD"})
    assert evaluate(widened, [_deploy()]).denied_by == ("delivery-deploy", "WebhooksAreTheAdministrators")


@pytest.mark.xfail(
    strict=True,
    reason="open: a runner project's inline buildspec (codebuild:source.buildspec supports only Null, and "
    "pulumi-aws sends the field) runs before the job wherever a workflow asks buildspec-override:true, and in "
    "every StartBuild of the project",
)
def test_a_runner_project_given_an_inline_buildspec_is_refused():
    inline = {**AS_DEPLOYED, "codebuild:source.buildspec": "true"}
    assert not evaluate(Request("codebuild:UpdateProject", DEPLOY, inline), [_deploy()]).allowed

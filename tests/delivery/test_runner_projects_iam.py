"""The deploy role may write the stack's runner projects (its `codebuild:*` on `higgsfield-STACK-*`), but not move
one to another repository, give it a second source or Docker's daemon, nor scope its webhook beyond the repository
(components/delivery.py RunnersBuildTheRepository, RunnersHaveOneSource, RunnersAreUnprivileged,
WebhooksAreTheAdministrators): each would run workflows of repositories the stack does not trust inside its VPC with
the runner's role. Decided on the shipped prod plan's policies, with the keys CreateProject, UpdateProject,
CreateWebhook and UpdateWebhook carry (Service Authorization Reference, list_awscodebuild)."""

from __future__ import annotations

import pytest

from components.delivery import runner_source
from infra.core.names import runner_project
from policies.iam_evaluation import Request, evaluate
from tests.conftest import config_of
from tests.delivery.test_ci_identity import ACCOUNT, _deploy

PROJECT = f"arn:aws:codebuild:us-east-2:{ACCOUNT}:project/{runner_project('prod', 'deploy')}"
OURS = runner_source(config_of("prod").delivery)
AS_DEPLOYED = {"codebuild:source.location": OURS, "codebuild:environment.privilegedMode": "false"}


@pytest.mark.parametrize("action", ["codebuild:CreateProject", "codebuild:UpdateProject"])
def test_the_deploy_role_writes_a_runner_project_as_the_program_plans_it(action):
    assert evaluate(Request(action, PROJECT, AS_DEPLOYED), [_deploy()]).allowed


@pytest.mark.parametrize("action", ["codebuild:CreateProject", "codebuild:UpdateProject"])
def test_a_runner_project_moved_to_a_fork_is_refused(action):
    fork = {**AS_DEPLOYED, "codebuild:source.location": "https://github.com/someone/fork.git"}
    decision = evaluate(Request(action, PROJECT, fork), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RunnersBuildTheRepository"), decision.reason


def test_a_runner_project_given_a_second_source_is_refused():
    second = {**AS_DEPLOYED, "codebuild:secondarySources": "true"}
    decision = evaluate(Request("codebuild:UpdateProject", PROJECT, second), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RunnersHaveOneSource"), decision.reason


def test_a_privileged_runner_project_is_refused():
    privileged = {**AS_DEPLOYED, "codebuild:environment.privilegedMode": "true"}
    decision = evaluate(Request("codebuild:UpdateProject", PROJECT, privileged), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "RunnersAreUnprivileged"), decision.reason


@pytest.mark.parametrize("action", ["codebuild:CreateWebhook", "codebuild:UpdateWebhook"])
def test_a_runner_webhook_scoped_to_an_organization_is_refused(action):
    scoped = {"codebuild:scopeConfiguration.scope": "GITHUB_ORGANIZATION"}
    decision = evaluate(Request(action, PROJECT, scoped), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "WebhooksAreTheAdministrators"), decision.reason


def test_a_runners_webhook_is_the_administrators_to_write_even_as_planned():
    """No key carries the filter groups, so the program's own update looks like any other."""
    decision = evaluate(Request("codebuild:UpdateWebhook", PROJECT), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "WebhooksAreTheAdministrators"), decision.reason


def test_an_update_that_leaves_the_source_out_is_the_deploy_roles_to_make():
    """UpdateProject needs only the project's name (boto/botocore:botocore/data/codebuild/2016-10-06/
    service-2.json@1.44.18, UpdateProjectInput): a request without a source carries no source key."""
    assert evaluate(
        Request("codebuild:UpdateProject", PROJECT, {"codebuild:environment.privilegedMode": "false"}), [_deploy()]
    ).allowed

"""The CI identities and runners in the plan (components/delivery.py), as docs/security-ci.md describes them."""

from __future__ import annotations

import json
import re

import botocore.session
import pytest

from components.delivery import (
    CLUSTER_ADMIN_POLICY,
    DEPLOY_SERVICES,
    PREVIEW_GROUP,
    SCOPED_SERVICES,
    runner_interface_statements,
    webhook_filters,
)
from infra.offline.stacks import stack_matrix
from policies.iam_evaluation import Policy, Request, evaluate
from tests.conftest import ROOT, STACKS, assert_plan_rejects, manual_text, plan_of, set_key

DOCS = (ROOT / "docs" / "security-ci.md").read_text()
README = manual_text()  # the README and docs/
OIDC = "token.actions.githubusercontent.com"
CODEBUILD = botocore.session.get_session().get_service_model("codebuild")


def _role(plan, name: str):
    return next(r for r in plan.resources if r.type == "aws:iam/role:Role" and r.name == name)


def _trust(role) -> dict:
    (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    return statement


def _named(plan, type_: str, name: str):
    return next(r for r in plan.resources if r.type == type_ and r.name == name)


def test_ci_roles_trust_exactly_the_subjects_the_docs_name(plan):
    repository, environment = plan.config.delivery.repository, plan.config.delivery.deploy_environment
    workflow = f"job_workflow_ref:{repository}/.github/workflows"
    expected = {
        "delivery-preview": ("StringLike", f"pull_request:{workflow}/preview.yml@refs/pull/*/merge"),
        "delivery-deploy": ("StringEquals", f"environment:{environment}:{workflow}/deploy.yml@refs/heads/main"),
        "delivery-image": ("StringEquals", f"ref:refs/heads/main:{workflow}/image.yml@refs/heads/main"),
    }
    for name, (operator, tail) in expected.items():
        condition = _trust(_role(plan, name))["Condition"]
        assert condition["StringEquals"][f"{OIDC}:aud"] == "sts.amazonaws.com"
        assert condition[operator][f"{OIDC}:sub"] == f"repo:{repository}:{tail}"
        assert _trust(_role(plan, name))["Principal"]["Federated"].endswith(f":oidc-provider/{OIDC}")
    for said in (
        "`repo:OWNER/REPO:pull_request:job_workflow_ref:OWNER/REPO/.github/workflows/preview.yml@refs/pull/*/merge`",
        "`repo:OWNER/REPO:environment:ENV:job_workflow_ref:OWNER/REPO/.github/workflows/deploy.yml@refs/heads/main`",
        "`repo:OWNER/REPO:ref:refs/heads/main:job_workflow_ref:OWNER/REPO/.github/workflows/image.yml@refs/heads/main`",
    ):
        assert said in DOCS


def test_preview_role_reads_through_its_group_and_deploy_role_administers_the_cluster(plan):
    by_name = {r.name: r for r in plan.resources if r.type == "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"}
    assert set(by_name) == {"delivery-deploy"}  # no EKS access policy for the preview role
    assert by_name["delivery-deploy"].inputs["policyArn"] == CLUSTER_ADMIN_POLICY
    assert by_name["delivery-deploy"].inputs["accessScope"] == {"type": "cluster"}
    entries = {r.name: r for r in plan.resources if r.type == "aws:eks/accessEntry:AccessEntry"}
    assert entries["delivery-preview"].inputs["kubernetesGroups"] == [PREVIEW_GROUP]
    assert "AmazonEKSClusterAdminPolicy" in DOCS and PREVIEW_GROUP in DOCS


def test_role_names_are_the_arns_the_workflows_assume(plan):
    entry = next(e for e in stack_matrix(ROOT, True)["include"] if e["stack"] == plan.stack)
    for purpose in ("preview", "deploy", "image"):
        role = _role(plan, f"delivery-{purpose}").inputs["name"]
        assert entry[f"{purpose}Role"] == f"arn:aws:iam::{plan.config.delivery.account_id}:role/{role}"


def test_preview_role_changes_nothing(plan):
    policy = _named(plan, "aws:iam/rolePolicy:RolePolicy", "delivery-preview")
    for statement in json.loads(policy.inputs["policy"])["Statement"]:
        for action in statement["Action"]:
            assert action.split(":")[1].startswith(("Describe", "Get", "List")) or action == "kms:Decrypt", action


def test_deploy_role_covers_every_service_the_program_manages():
    prefix = {"vpc": "ec2", "cloudwatch": "logs"}
    for stack in STACKS:
        for r in plan_of(stack).resources:
            if r.custom and r.type.startswith("aws:"):
                module = r.type.split(":")[1].split("/")[0]
                assert prefix.get(module, module) in DEPLOY_SERVICES + SCOPED_SERVICES, r.type


def test_deploy_role_holds_no_iam_or_s3_wildcard_on_every_resource(plan):
    statements = json.loads(_named(plan, "aws:iam/rolePolicy:RolePolicy", "delivery-deploy").inputs["policy"])[
        "Statement"
    ]
    allows = [s for s in statements if s["Effect"] == "Allow"]  # (its denials name wildcards: ceiling_denials)
    for statement in allows:
        if statement["Resource"] == "*":
            assert not any(a.startswith(("iam:", "s3:")) and "*" in a for a in statement["Action"]), statement
    assert not any(a in ("*", "iam:*") for s in allows for a in s["Action"])


def test_image_role_pushes_to_the_stacks_repository_only(plan):
    policy = _named(plan, "aws:iam/rolePolicy:RolePolicy", "delivery-image")
    statements = json.loads(policy.inputs["policy"])["Statement"]
    scoped = [s for s in statements if s["Resource"] != "*"]
    assert [s["Action"] for s in statements if s["Resource"] == "*"] == [["ecr:GetAuthorizationToken"]]
    assert [s["Resource"] for s in scoped] == [
        f"arn:aws:ecr:{plan.config.region}:{plan.config.delivery.account_id}:repository/higgsfield-{plan.stack}/training"
    ]


# --- runners -----------------------------------------------------------------------------------------


def _webhook(plan, purpose: str):
    return _named(plan, "aws:codebuild/webhook:Webhook", f"delivery-{purpose}-runner")


def test_preview_and_deploy_have_separate_runner_projects_in_the_private_subnets(plan):
    projects = {r.inputs["name"]: r for r in plan.resources if r.type == "aws:codebuild/project:Project"}
    assert set(projects) == {f"higgsfield-{plan.stack}-preview-runner", f"higgsfield-{plan.stack}-deploy-runner"}
    private = {
        r.urn
        for r in plan.resources
        if r.type == "aws:ec2/subnet:Subnet" and "kubernetes.io/role/internal-elb" in (r.inputs.get("tags") or {})
    }
    for project in projects.values():
        assert project.inputs["vpcConfig"] and private and private <= set(project.dependencies)
        assert project.inputs["source"]["auth"]["type"] == "CODECONNECTIONS"


def test_runners_share_no_service_role_security_group_or_log_group(plan):
    for type_, key in (
        ("aws:iam/role:Role", "name"),
        ("aws:ec2/securityGroup:SecurityGroup", "description"),
        ("aws:cloudwatch/logGroup:LogGroup", "name"),
    ):
        preview, deploy = (_named(plan, type_, f"delivery-{p}-runner") for p in ("preview", "deploy"))
        assert preview.urn != deploy.urn and preview.inputs[key] != deploy.inputs[key]


def test_each_runner_webhook_starts_builds_only_for_queued_jobs_of_its_workflow(plan):
    for purpose in ("preview", "deploy"):
        filters = _webhook(plan, purpose).inputs["filterGroups"][0]["filters"]
        assert {"type": "EVENT", "pattern": "WORKFLOW_JOB_QUEUED"} in filters
        assert {"type": "WORKFLOW_NAME", "pattern": f"^{purpose}$"} in filters


def test_deploy_runner_webhook_admits_only_the_stacks_deploy_actors(plan):
    actors = plan.config.delivery.runner.deploy_actors
    filters = _webhook(plan, "deploy").inputs["filterGroups"][0]["filters"]
    assert actors and {"type": "ACTOR_ACCOUNT_ID", "pattern": f"^({'|'.join(actors)})$"} in filters


def test_webhook_filter_types_are_ones_codebuild_accepts_for_workflow_job_events():
    # botocore's model of the API (WebhookFilter.type): HEAD_REF/BASE_REF work with push and
    # pull-request events only, so a branch filter would not apply to WORKFLOW_JOB_QUEUED.
    accepted = set(CODEBUILD.shape_for("WebhookFilterType").enum)
    doc = CODEBUILD.shape_for("WebhookFilter").members["type"].documentation
    assert "WORKFLOW_NAME" in accepted and "ACTOR_ACCOUNT_ID" in accepted and "WORKFLOW_JOB_QUEUED" in doc
    for stack in STACKS:
        for purpose in ("preview", "deploy"):
            types = [f["type"] for f in _webhook(plan_of(stack), purpose).inputs["filterGroups"][0]["filters"]]
            assert set(types) <= accepted and not {"HEAD_REF", "BASE_REF", "FILE_PATH", "COMMIT_MESSAGE"} & set(
                types
            ), types


def _starts(filters: list[dict], event: dict) -> bool:
    """CodeBuild's filter group: every filter matches (EVENT by name, the rest by regex)."""
    values = {"EVENT": event["event"], "WORKFLOW_NAME": event["workflow"], "ACTOR_ACCOUNT_ID": event["sender"]}
    return all(
        (f["pattern"] == values["EVENT"])
        if f["type"] == "EVENT"
        else re.search(f["pattern"], values[f["type"]]) is not None
        for f in filters
    )


@pytest.mark.parametrize("who", ["fork pull request", "branch pull request of a collaborator"])
def test_a_pull_requests_workflow_named_deploy_gets_no_deploy_runner(who):
    """The attack of issue 22: a PR adds a workflow named `deploy` whose job asks for the deploy
    runner's label. Its sender is the PR's author, not one of the deploy actors."""
    runner = plan_of("prod").config.delivery.runner
    attack = {"event": "WORKFLOW_JOB_QUEUED", "workflow": "deploy", "sender": "987654321"}
    assert not _starts(webhook_filters("deploy", runner), attack)
    without_actors = [f for f in webhook_filters("deploy", runner) if f["type"] != "ACTOR_ACCOUNT_ID"]
    assert _starts(without_actors, attack), "the ACTOR_ACCOUNT_ID filter is what refuses it"


def test_a_deploy_of_an_allowed_actor_gets_the_deploy_runner():
    runner = plan_of("prod").config.delivery.runner
    assert _starts(
        webhook_filters("deploy", runner),
        {"event": "WORKFLOW_JOB_QUEUED", "workflow": "deploy", "sender": runner.deploy_actors[0]},
    )


def test_a_workflow_renamed_preview_cannot_start_the_deploy_runner():
    runner = plan_of("prod").config.delivery.runner
    attack = {"event": "WORKFLOW_JOB_QUEUED", "workflow": "preview", "sender": runner.deploy_actors[0]}
    assert not _starts(webhook_filters("deploy", runner), attack)


def test_runner_roles_write_their_own_logs_and_manage_network_interfaces_only(plan):
    for purpose in ("preview", "deploy"):
        project = f"higgsfield-{plan.stack}-{purpose}-runner"
        statements = json.loads(
            _named(plan, "aws:iam/rolePolicy:RolePolicy", f"delivery-{purpose}-runner").inputs["policy"]
        )["Statement"]
        actions = {a for s in statements for a in s["Action"]}
        assert {a.split(":")[0] for a in actions} == {"logs", "ec2", "codeconnections"}
        (logs,) = [s for s in statements if s["Action"][0].startswith("logs:")]
        assert logs["Resource"].endswith(f":log-group:/aws/codebuild/{project}:*")
        assert not any(a.startswith("sts:") or a.startswith("iam:") for a in actions)


def test_runner_log_groups_are_encrypted_with_the_stacks_logs_key(plan):
    key_policy = _named(plan, "aws:kms/key:Key", "logs")  # created with its policy
    for purpose in ("preview", "deploy"):
        group = _named(plan, "aws:cloudwatch/logGroup:LogGroup", f"delivery-{purpose}-runner")
        assert group.inputs.get("kmsKeyId") and key_policy.urn in group.dependencies


def test_an_enabled_runner_without_a_connection_names_the_key(project_copy, capsys):
    delivery = dict(plan_of("dev").config.delivery.model_dump(by_alias=True, exclude_none=True))
    delivery["runner"] = {"enabled": True, "deployActors": ["1"]}
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_key("higgsfield:delivery", delivery),
        "higgsfield:delivery.runner.connectionArn",
        "is required when the runner is enabled",
    )


def test_an_enabled_runner_without_deploy_actors_names_the_key(project_copy, capsys):
    delivery = dict(plan_of("dev").config.delivery.model_dump(by_alias=True, exclude_none=True))
    delivery["runner"] = {**delivery["runner"], "deployActors": []}
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_key("higgsfield:delivery", delivery),
        "higgsfield:delivery.runner.deployActors",
        "name the GitHub account ids",
    )


def test_an_enabled_runner_without_preview_actors_names_the_key(project_copy, capsys):
    """Any pull request's workflow named preview, a fork's once approved, got a build inside the VPC (issue 34)."""
    delivery = dict(plan_of("dev").config.delivery.model_dump(by_alias=True, exclude_none=True))
    delivery["runner"] = {**delivery["runner"], "previewActors": []}
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_key("higgsfield:delivery", delivery),
        "higgsfield:delivery.runner.previewActors",
        "name the GitHub account ids",
    )


@pytest.mark.parametrize("stack", STACKS)
def test_the_preview_runner_admits_only_the_listed_actors(stack):
    runner = plan_of(stack).config.delivery.runner
    filters = _webhook(plan_of(stack), "preview").inputs["filterGroups"][0]["filters"]
    fork = {"event": "WORKFLOW_JOB_QUEUED", "workflow": "preview", "sender": "987654321"}
    assert runner.preview_actors and not _starts(filters, fork)
    assert _starts(filters, {**fork, "sender": runner.preview_actors[0]})


def test_a_deploy_actor_that_is_a_login_not_an_id_names_the_key(project_copy, capsys):
    delivery = dict(plan_of("dev").config.delivery.model_dump(by_alias=True, exclude_none=True))
    delivery["runner"] = {**delivery["runner"], "deployActors": ["octocat"]}
    assert_plan_rejects(
        project_copy,
        capsys,
        "dev",
        set_key("higgsfield:delivery", delivery),
        "higgsfield:delivery.runner.deployActors[0]",
        "is not a GitHub account id",
    )


def test_no_runner_role_can_become_a_ci_identity(plan):
    """What a job in a runner holds is its project's service role; the CI roles trust GitHub's
    OIDC provider only, so neither runner's role (nor anything else in AWS) can assume them."""
    for purpose in ("preview", "deploy", "image"):
        statement = _trust(_role(plan, f"delivery-{purpose}"))
        assert set(statement["Principal"]) == {"Federated"} and statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    for purpose in ("preview", "deploy"):
        (statement,) = json.loads(_role(plan, f"delivery-{purpose}-runner").inputs["assumeRolePolicy"])["Statement"]
        assert statement["Principal"] == {"Service": "codebuild.amazonaws.com"}


def test_check_names_the_setting_when_no_one_is_a_deploy_actor():
    from infra.offline.delivery_checks import delivery_findings

    config = plan_of("prod").config
    runner = config.delivery.runner.model_copy(update={"deploy_actors": ()})
    changed = config.model_copy(update={"delivery": config.delivery.model_copy(update={"runner": runner})})
    assert "higgsfield:delivery.runner.deployActors" in [w for w, _ in delivery_findings(changed, {})]


RUNNER_VPC, RUNNER_SUBNETS = "vpc-0runner", ["subnet-0a", "subnet-0b"]
EC2 = "arn:aws:ec2:us-east-2:444455556666"


def _runner_interfaces() -> Policy:
    statements = runner_interface_statements("us-east-2", "444455556666", RUNNER_VPC, RUNNER_SUBNETS)
    return Policy("runner-eni", {"Statement": statements})


@pytest.mark.parametrize(
    "request_",
    [
        Request(
            "ec2:CreateNetworkInterface", f"{EC2}:network-interface/*", {"ec2:Subnet": f"{EC2}:subnet/subnet-0other"}
        ),
        Request("ec2:CreateNetworkInterface", f"{EC2}:subnet/subnet-0other"),
        Request("ec2:DeleteNetworkInterface", f"{EC2}:network-interface/eni-0db", {"ec2:Vpc": f"{EC2}:vpc/vpc-0data"}),
    ],
    ids=["interface-in-another-subnet", "another-subnet", "delete-anothers-interface"],
)
def test_a_runner_cannot_create_or_delete_network_interfaces_outside_its_subnets_and_vpc(request_):
    """Issue 34: both runner roles created and deleted network interfaces anywhere in the account."""
    assert not evaluate(request_, [_runner_interfaces()]).allowed


def test_a_runner_still_creates_and_deletes_its_own_interfaces():
    for request_ in (
        Request("ec2:CreateNetworkInterface", f"{EC2}:network-interface/*", {"ec2:Subnet": f"{EC2}:subnet/subnet-0a"}),
        Request("ec2:CreateNetworkInterface", f"{EC2}:subnet/subnet-0b"),
        Request("ec2:CreateNetworkInterface", f"{EC2}:security-group/sg-0runner"),
        Request(
            "ec2:DeleteNetworkInterface", f"{EC2}:network-interface/eni-0r", {"ec2:Vpc": f"{EC2}:vpc/{RUNNER_VPC}"}
        ),
    ):
        assert evaluate(request_, [_runner_interfaces()]).allowed, request_


def test_the_runner_roles_static_policy_grants_no_interface_writes(plan):
    for purpose in ("preview", "deploy"):
        statements = json.loads(
            _named(plan, "aws:iam/rolePolicy:RolePolicy", f"delivery-{purpose}-runner").inputs["policy"]
        )["Statement"]
        actions = {a for st in statements for a in st["Action"]}
        assert not {"ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface"} & actions


def test_codebuild_may_assume_a_runners_role_only_for_its_own_project_and_account(plan):
    """Issue 34: the runners' trust policies named no source (the confused deputy)."""
    account = plan.config.delivery.account_id
    for purpose in ("preview", "deploy"):
        project = f"higgsfield-{plan.stack}-{purpose}-runner"
        role = _named(plan, "aws:iam/role:Role", f"delivery-{purpose}-runner")
        (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": account}
        assert statement["Condition"]["ArnLike"]["aws:SourceArn"].endswith(f":{account}:project/{project}")

"""The CI identities and runners in the plan (components/delivery.py), as the README describes them."""

from __future__ import annotations

import json

from components.delivery import CLUSTER_ADMIN_POLICY, DEPLOY_SERVICES, VIEW_POLICY
from infra.cli.stacks import stack_matrix
from tests.conftest import ROOT, STACKS, assert_plan_rejects, manual_text, plan_of, set_key

README = manual_text()  # the README and docs/
OIDC = "token.actions.githubusercontent.com"


def _role(plan, name: str):
    return next(r for r in plan.resources if r.type == "aws:iam/role:Role" and r.name == name)


def _trust(role) -> dict:
    (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    return statement


def test_ci_roles_trust_exactly_the_subjects_the_readme_names(plan):
    repository, environment = plan.config.delivery.repository, plan.config.delivery.deploy_environment
    expected = {"delivery-preview": "pull_request", "delivery-deploy": f"environment:{environment}", "delivery-image": "ref:refs/heads/main"}
    for name, tail in expected.items():
        statement = _trust(_role(plan, name))
        assert statement["Condition"] == {"StringEquals": {f"{OIDC}:aud": "sts.amazonaws.com", f"{OIDC}:sub": f"repo:{repository}:{tail}"}}
        assert statement["Principal"]["Federated"].endswith(f":oidc-provider/{OIDC}")
    for said in ("`repo:OWNER/REPO:pull_request`", "`repo:OWNER/REPO:environment:<env>`", "`repo:OWNER/REPO:ref:refs/heads/main`"):
        assert said in README


def test_preview_role_views_and_deploy_role_administers_the_cluster_through_access_entries(plan):
    by_name = {r.name: r for r in plan.resources if r.type == "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"}
    assert by_name["delivery-preview"].inputs["policyArn"] == VIEW_POLICY
    assert by_name["delivery-deploy"].inputs["policyArn"] == CLUSTER_ADMIN_POLICY
    assert all(a.inputs["accessScope"] == {"type": "cluster"} for a in by_name.values())
    assert "AmazonEKSViewPolicy" in README and "AmazonEKSClusterAdminPolicy" in README


def test_role_names_are_the_arns_the_workflows_assume(plan):
    entry = next(e for e in stack_matrix(ROOT, True)["include"] if e["stack"] == plan.stack)
    for purpose in ("preview", "deploy", "image"):
        assert entry[f"{purpose}Role"] == f"arn:aws:iam::{plan.config.delivery.account_id}:role/{_role(plan, f'delivery-{purpose}').inputs['name']}"


def test_preview_role_changes_nothing_but_the_backend_lock(plan):
    policy = next(r for r in plan.resources if r.type == "aws:iam/rolePolicy:RolePolicy" and r.name == "delivery-preview")
    for statement in json.loads(policy.inputs["policy"])["Statement"]:
        for action in statement["Action"]:
            verb = action.split(":")[1]
            if verb in ("PutObject", "DeleteObject"):
                assert statement["Resource"].endswith("/.pulumi/locks/*")
            else:
                assert verb.startswith(("Describe", "Get", "List")) or action == "kms:Decrypt", action


def test_deploy_role_covers_every_service_the_program_manages():
    prefix = {"vpc": "ec2", "cloudwatch": "logs"}
    for stack in STACKS:
        for r in plan_of(stack).resources:
            if r.custom and r.type.startswith("aws:"):
                module = r.type.split(":")[1].split("/")[0]
                assert prefix.get(module, module) in DEPLOY_SERVICES, r.type


def test_image_role_pushes_to_the_stacks_repository_only(plan):
    policy = next(r for r in plan.resources if r.type == "aws:iam/rolePolicy:RolePolicy" and r.name == "delivery-image")
    statements = json.loads(policy.inputs["policy"])["Statement"]
    scoped = [s for s in statements if s["Resource"] != "*"]
    assert [s["Action"] for s in statements if s["Resource"] == "*"] == [["ecr:GetAuthorizationToken"]]
    assert [s["Resource"] for s in scoped] == [f"arn:aws:ecr:{plan.config.region}:{plan.config.delivery.account_id}:repository/higgsfield-{plan.stack}/training"]


def test_runner_runs_in_the_private_subnets_and_starts_only_for_queued_jobs(plan):
    project = next(r for r in plan.resources if r.type == "aws:codebuild/project:Project")
    network_subnets = {r.urn for r in plan.resources if r.type == "aws:ec2/subnet:Subnet" and "kubernetes.io/role/internal-elb" in (r.inputs.get("tags") or {})}
    assert project.inputs["name"] == f"higgsfield-{plan.stack}-runner" and project.inputs["vpcConfig"]
    assert network_subnets and network_subnets <= set(project.dependencies)
    assert project.inputs["source"]["auth"]["type"] == "CODECONNECTIONS"
    (webhook,) = [r for r in plan.resources if r.type == "aws:codebuild/webhook:Webhook"]
    assert {"type": "EVENT", "pattern": "WORKFLOW_JOB_QUEUED"} in webhook.inputs["filterGroups"][0]["filters"]


def test_an_enabled_runner_without_a_connection_names_the_key(project_copy, capsys):
    delivery = dict(plan_of("dev").config.delivery.model_dump(by_alias=True, exclude_none=True))
    delivery["runner"] = {"enabled": True}
    assert_plan_rejects(project_copy, capsys, "dev", set_key("higgsfield:delivery", delivery), "higgsfield:delivery.runner.connectionArn", "is required when the runner is enabled")

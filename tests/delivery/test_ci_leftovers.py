"""Issue 22's AWS leftovers, each fixed in the plan: the FSx CSI role tags nothing, the linked
bucket is versioned before anything exports into it, every log group of ours carries the stack's
logs key, no IRSA OIDC provider, and bootstrap makes the GitHub environment before the trust."""

from __future__ import annotations

import json

import pytest

from components.storage import csi_policy
from infra.cli import bootstrap
from tests.conftest import STACKS, plan_of


def _named(plan, type_: str, name: str):
    return next(r for r in plan.resources if r.type == type_ and r.name == name)


def test_fsx_csi_role_only_describes_file_systems():
    (statement,) = json.loads(csi_policy())["Statement"]
    assert statement["Action"] == ["fsx:DescribeFileSystems"]


def test_the_linked_bucket_is_versioned_and_stays_versioned_on_delete():
    for stack in STACKS:
        plan = plan_of(stack)
        if not plan.config.fsx.linked_buckets:
            continue
        versioning = _named(plan, "aws:s3/bucketVersioning:BucketVersioning", "lustre-s3-versioning")
        assert versioning.inputs["bucket"] == plan.config.fsx.s3.bucket
        assert versioning.inputs["versioningConfiguration"] == {"status": "Enabled"}
        assert versioning.retain_on_delete  # deleting the resource would suspend versioning


def test_every_log_group_of_ours_is_encrypted_with_the_stacks_logs_key():
    for stack in STACKS:
        plan = plan_of(stack)
        key_policy = _named(plan, "aws:kms/key:Key", "logs")  # created with its policy
        for group in (r for r in plan.resources if r.type == "aws:cloudwatch/logGroup:LogGroup"):
            assert group.inputs.get("kmsKeyId"), f"{stack}: {group.inputs['name']}"
            assert key_policy.urn in group.dependencies, (
                f"{stack}: {group.inputs['name']} is created before CloudWatch Logs may use the key"
            )


def test_container_insights_groups_are_the_ones_the_agent_writes():
    plan = plan_of("prod")
    names = {r.inputs["name"] for r in plan.resources if r.type == "aws:cloudwatch/logGroup:LogGroup"}
    assert {
        f"/aws/containerinsights/{plan.config.name}/{kind}"
        for kind in ("application", "dataplane", "host", "performance")
    } <= names


def test_no_irsa_oidc_provider_and_no_role_trusts_one():
    for stack in STACKS:
        plan = plan_of(stack)
        cluster = next(r for r in plan.resources if r.type == "eks:index:Cluster")
        assert cluster.inputs.get("createOidcProvider") is False
        for role in (r for r in plan.resources if r.type == "aws:iam/role:Role"):
            for statement in json.loads(role.inputs["assumeRolePolicy"])["Statement"]:
                federated = str(statement["Principal"].get("Federated", ""))
                assert not federated or federated.endswith("oidc-provider/token.actions.githubusercontent.com"), (
                    role.name
                )


def test_bootstrap_makes_and_checks_the_github_environment_before_any_deploy_trust():
    for stack in STACKS:
        steps = bootstrap.steps(plan_of(stack).config)
        environment = next(i for i, s in enumerate(steps) if s.startswith("GitHub environment"))
        verified = next(i for i, s in enumerate(steps) if s.startswith("Verify it"))
        subject = next(i for i, s in enumerate(steps) if "oidc/customization/sub" in s)
        trust = next(
            i
            for i, s in enumerate(steps)
            if plan_of(stack).config.delivery.deploy_environment
            and "higgsfield-" + stack + "-deploy" in s
            and "pulumi up" in s
        )
        assert environment < verified < trust and subject < trust, steps
        assert "deployment-branch-policies -f name=main" in steps[environment]
        assert ("required_reviewers" in steps[verified]) == (plan_of(stack).config.environment != "dev")


@pytest.mark.parametrize("stack", STACKS)
def test_no_administrator_bypasses_the_deploy_environments_rules(stack):
    """Issue 34: can_admins_bypass was left at GitHub's default (true)."""
    steps = bootstrap.steps(plan_of(stack).config)
    environment = next(s for s in steps if s.startswith("GitHub environment"))
    rules = json.loads(environment.split("<<< '", 1)[1].split("' && ", 1)[0])
    assert rules["can_admins_bypass"] is False
    assert any(".can_admins_bypass` prints false" in s for s in steps if s.startswith("Verify it"))


def test_bootstrap_sets_the_subject_template_the_roles_trust():
    steps = bootstrap.render(plan_of("prod").config)
    assert (
        "include_claim_keys[]=repo" in steps
        and "include_claim_keys[]=context" in steps
        and "include_claim_keys[]=job_workflow_ref" in steps
    )

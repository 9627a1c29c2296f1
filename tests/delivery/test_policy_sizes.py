"""IAM refuses a policy over its size quota (LimitExceeded), counted without whitespace: a customer managed
policy at most 6,144 characters, a role's inline policies together at most 10,240 (IAM User Guide,
reference_iam-quotas.html; components/delivery.py MANAGED_POLICY_CHARACTERS, ROLE_POLICY_CHARACTERS). The stack
boundary was 10,855 characters for prod: no stack could create it, so none could deploy its delivery component.
Sizes are read from the plan; a document computed at deploy time (the team log readers' policies name a log group
ARN known only then) is not checked here."""

from __future__ import annotations

from collections import defaultdict

import pytest

from components.delivery import MANAGED_POLICY_CHARACTERS, ROLE_POLICY_CHARACTERS, policy_characters
from infra.config.stack import ADMINS_CHARACTERS
from infra.offline.evaluate import Plan, record
from tests.conftest import STACKS, config_of, plan_of, set_key


def _known(document: object) -> bool:
    return isinstance(document, str) and document.startswith("{")


def _managed_policies(plan: Plan) -> dict[str, int]:
    return {
        r.name: policy_characters(r.inputs["policy"])
        for r in plan.of_type("aws:iam/policy:Policy")
        if _known(r.inputs.get("policy"))
    }


def _inline_policies_by_role(plan: Plan) -> dict[str, int]:
    roles = {r.urn: r.name for r in plan.of_type("aws:iam/role:Role")}
    sizes: dict[str, int] = defaultdict(int)
    for r in plan.of_type("aws:iam/rolePolicy:RolePolicy"):
        if _known(r.inputs.get("policy")):
            (role,) = [roles[u] for u in r.dependencies if u in roles]
            sizes[role] += policy_characters(r.inputs["policy"])
    return dict(sizes)


def _assert_within_quotas(plan: Plan) -> None:
    managed, inline = _managed_policies(plan), _inline_policies_by_role(plan)
    # the two ceilings are measured: the boundary, the deploy role's inline and managed policies
    assert {"delivery-boundary", "delivery-deploy-denials"} <= set(managed) and "delivery-deploy" in inline
    assert all(size <= MANAGED_POLICY_CHARACTERS for size in managed.values()), managed
    assert all(size <= ROLE_POLICY_CHARACTERS for size in inline.values()), inline


@pytest.mark.parametrize("stack", STACKS)
def test_every_policy_of_a_shipped_stack_fits_iams_quotas(stack):
    _assert_within_quotas(plan_of(stack))


def _admins(account: str, characters: int) -> list[str]:
    """As many admin role ARNs of `account` as make `characters` all together, each 40 long or a little more:
    about the shortest (a role name of one character makes 32), so that the list's quotes and commas weigh
    most."""
    prefix = f"arn:aws:iam::{account}:role/"
    count = characters // 40
    lengths = [characters // count + (i < characters % count) for i in range(count)]
    return [prefix + f"admin{i}-".ljust(length - len(prefix), "x") for i, length in enumerate(lengths)]


def test_prod_with_as_many_admins_as_the_config_allows_fits_iams_quotas(project_copy):
    account = plan_of("prod").config.delivery.account_id
    admins = _admins(account, ADMINS_CHARACTERS)
    assert sum(map(len, admins)) == ADMINS_CHARACTERS and len(admins) > len(plan_of("prod").config.admins)
    plan = record("bad", root=project_copy("prod", set_key("higgsfield:admins", admins)))
    _assert_within_quotas(plan)


def test_plan_names_higgsfield_admins_when_they_would_not_fit_the_deploy_policy(project_copy, capsys):
    from tests.conftest import assert_plan_rejects

    account = plan_of("prod").config.delivery.account_id
    admins = _admins(account, ADMINS_CHARACTERS + 1)
    assert_plan_rejects(
        project_copy, capsys, "prod", set_key("higgsfield:admins", admins), "higgsfield:admins", "10,240 characters"
    )


def _buckets_of_63_characters(config: dict) -> None:
    """prod's state and data buckets renamed to S3's longest names (63 characters, infra/config/limits.py)."""
    data, state = "higgsfield-prod-training-datasets-".ljust(63, "x"), "higgsfield-prod-pulumi-state-".ljust(63, "x")
    config["higgsfield:fsx"]["s3"]["bucket"] = data
    config["higgsfield:fsx"]["s3"]["importPath"] = f"s3://{data}/train"
    config["higgsfield:delivery"]["stateBucket"] = state


def test_prod_with_s3s_longest_bucket_names_fits_iams_quotas(project_copy):
    """Each bucket name is in the boundary five times: S3's longest names (63 characters) still fit IAM's 6,144."""
    _assert_within_quotas(record("bad", root=project_copy("prod", _buckets_of_63_characters)))


def test_plan_names_the_bucket_settings_when_the_boundary_would_not_fit(project_copy, capsys, monkeypatch):
    """A boundary over IAM's cap would be refused by CreatePolicy half way through a deploy: the plan refuses it
    first, naming the settings that grow it (the cap lowered below the longest names' boundary, which fits today)."""
    from components import delivery
    from tests.conftest import assert_plan_rejects

    monkeypatch.setattr(delivery, "MANAGED_POLICY_CHARACTERS", 6_000)
    assert_plan_rejects(
        project_copy,
        capsys,
        "prod",
        _buckets_of_63_characters,
        "higgsfield:delivery",
        "6,000 IAM allows a managed policy: it grows with the stack name (3 characters), "
        "higgsfield:delivery.stateBucket (63), higgsfield:fsx.s3.bucket (63)",
    )


def test_the_config_loader_measures_the_deploy_roles_managed_policy(monkeypatch):
    """oversized_policies measures the third document too: were IAM's cap on a managed policy below it, the config
    would be refused naming it, not half way through a deploy at CreatePolicy."""
    from components import delivery

    cfg = config_of("prod")
    size = policy_characters(
        delivery.deploy_denials_policy(cfg.delivery, cfg.stack, region=cfg.region, production=cfg.production)
    )
    monkeypatch.setattr(delivery, "MANAGED_POLICY_CHARACTERS", size - 1)
    messages = [p.message for p in delivery.oversized_policies(cfg)]
    assert any(
        m.startswith("the deploy role's managed policy higgsfield-prod-deploy-denials would be") for m in messages
    )

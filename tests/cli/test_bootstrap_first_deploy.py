"""`higgsfield bootstrap STACK` prints the whole first deploy for every stack, those `init` writes
(no higgsfield:delivery) included: state bucket, secrets key, `pulumi login` and `stack init`, the
image's repository and the image, then the first full `pulumi up`, in that order. The printed
commands run, in a shell whose aws, pulumi and higgsfield only say what they were asked."""

from __future__ import annotations

import subprocess

import pytest

from infra.cli import bootstrap
from tests.conftest import plan_of

FAKES = (
    'aws() { echo "aws $1 $2"; }\n'
    'pulumi() { case "$1 $*" in up*--target*) echo "pulumi up targeted";; up*) echo "pulumi up full";; '
    '*) echo "pulumi $1 $2";; esac; }\n'
    'higgsfield() { echo "higgsfield $1 $2"; }\n'
    "curl() { echo 192.0.2.1; }\ncp() { :; }\ngh() { :; }\n"
)

FIRST_DEPLOY = [
    "aws s3api create-bucket",
    "aws s3api put-bucket-versioning",
    "aws s3api put-public-access-block",
    "aws kms create-key",  # the secrets key
    "pulumi login",
    "pulumi stack init",  # with the key as secrets provider
    "pulumi up targeted",  # the image's ECR repository only
    "higgsfield image push",  # the image the gate runs
    "pulumi up full",  # cluster, pools, the gate
]


def _ran(config) -> list[str]:
    """What the printed commands ask of aws, pulumi and higgsfield, in order (gh, curl, cp left out)."""
    commands = [c for step in bootstrap.steps(config) for c in step.split("`")[1::2]]
    commands = [
        c for c in commands if not c.startswith(("gh ", "curl ", "cp ", "higgsfield bootstrap")) and "--print" not in c
    ]
    done = subprocess.run(["bash", "-ec", FAKES + "\n".join(commands)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    said = [line.split() for line in done.stdout.splitlines()]
    return [" ".join(words[:2] if words[1] == "login" else words[:3]) for words in said]


def test_a_stack_init_writes_gets_the_whole_first_deploy_in_order():
    config = plan_of("dev").config.model_copy(update={"delivery": None})  # as init writes it: no CI
    assert _ran(config) == FIRST_DEPLOY


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_a_stack_ci_deploys_gets_the_same_first_deploy_around_its_ci_steps(stack):
    ran = _ran(plan_of(stack).config)
    assert [r for r in ran if r != "aws codeconnections create-connection"] == FIRST_DEPLOY


def test_a_stack_without_ci_names_its_state_bucket_and_its_key_in_the_stack_init():
    config = plan_of("dev").config.model_copy(update={"delivery": None})
    text = "\n".join(bootstrap.steps(config))
    bucket = bootstrap.state_bucket(config)
    assert bucket == "higgsfield-state-111122223333-us-west-2"
    assert f"pulumi login 's3://{bucket}?region=us-west-2'" in text
    assert "pulumi stack init dev --secrets-provider 'awskms://KEY-ARN?region=us-west-2'" in text
    assert "--query KeyMetadata.Arn --output text` prints the key's ARN, KEY-ARN in the next step" in text


def test_bootstrap_of_a_stack_without_ci_fits_120_columns():
    config = plan_of("prod").config.model_copy(update={"delivery": None})
    assert max(map(len, bootstrap.render(config).splitlines())) <= 120


def test_the_first_deploy_of_a_stack_ci_deploys_names_the_deploy_roles_managed_policy_it_creates():
    """The deploy role's ceiling is its inline policy and higgsfield-STACK-deploy-denials (components/delivery.py
    deploy_denials_policy), which only an administrator creates or changes: the step that creates it says so."""
    (first_deploy,) = [s for s in bootstrap.steps(plan_of("prod").config) if s.startswith("First deploy")]
    assert "the deploy role's managed policy higgsfield-prod-deploy-denials" in first_deploy
    assert "Later changes to the boundary, that managed policy or the CI roles are refused" in first_deploy

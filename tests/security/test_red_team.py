"""Red team of the tenancy and platform boundaries: the paths beside the ones tests/delivery/test_ci_identity.py tries.

The deploy identity (components/delivery.py) reaches anything the permissions boundary allows,
not only what its own policy lists: it may write any inline policy on a role of its stack
(`StackRoles`), set that role's trust, pass it to CodeBuild and start a build as it (`codebuild:*`).
So the boundary alone is the ceiling, and these attacks are sent as such a role, bounded and given
`*` on `*`, evaluated with policies/iam_evaluation.py against the policies the prod plan renders.
"""

from __future__ import annotations

import pytest

from components.delivery import boundary_arn
from policies.iam_evaluation import Policy, Request, evaluate
from tests.conftest import config_of, plan_of
from tests.delivery.test_ci_identity import _deploy  # its inline and managed policies

ACCOUNT = config_of("prod").delivery.account_id
REGION = config_of("prod").region if hasattr(config_of("prod"), "region") else "us-east-2"
STACK_ROLE = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-lustre-csi-0123"
BOUNDARY = boundary_arn(ACCOUNT, "prod")
EVERYTHING = Policy("everything", {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


def _document(type_: str, name: str) -> Policy:
    r = next(r for r in plan_of("prod").resources if r.type == type_ and r.name == name)
    return Policy.of(name, r.inputs["policy"])


def _boundary() -> Policy:
    return _document("aws:iam/policy:Policy", "delivery-boundary")


# How the deploy role becomes a bounded role with `*`: every step is allowed, by design.
BECOME_A_STACK_ROLE = [
    Request("iam:PutRolePolicy", STACK_ROLE),
    # a new role's trust is CreateRole's (an existing one's cannot be rewritten: TrustIsSetAtCreate)
    Request("iam:CreateRole", STACK_ROLE, {"iam:PermissionsBoundary": boundary_arn(ACCOUNT, "prod")}),
    Request("iam:PassRole", STACK_ROLE, {"iam:PassedToService": "codebuild.amazonaws.com"}),
]


@pytest.mark.parametrize("request_", BECOME_A_STACK_ROLE, ids=lambda r: r.action)
def test_the_deploy_role_can_act_as_a_stack_role_with_any_inline_policy_so_it_shares_the_boundarys_denials(request_):
    # (the deploy role has no boundary: components/delivery.py deploy_policy carries ceiling_denials itself)
    assert evaluate(request_, [_deploy()]).allowed


# A customer-managed policy of the account that is not the boundary: an administrator's, the
# one bootstrap or an account baseline attaches to people. Rewriting it (a new default
# version) grants its holders, or whoever the attacker then becomes, anything.
OTHER_POLICY = f"arn:aws:iam::{ACCOUNT}:policy/PlatformAdmins"
POLICY_REWRITES = [
    Request("iam:CreatePolicyVersion", OTHER_POLICY),
    Request("iam:SetDefaultPolicyVersion", OTHER_POLICY),
    Request("iam:DeletePolicyVersion", OTHER_POLICY),
    Request("iam:DeletePolicy", OTHER_POLICY),
]


@pytest.mark.parametrize("request_", POLICY_REWRITES, ids=lambda r: r.action)
def test_a_bounded_role_cannot_rewrite_any_managed_policy_of_the_account(request_):
    decision = evaluate(request_, [EVERYTHING], _boundary())
    assert decision.reason == "not allowed by the permissions boundary delivery-boundary", decision.reason


@pytest.mark.parametrize("request_", POLICY_REWRITES, ids=lambda r: r.action)
def test_the_deploy_role_cannot_rewrite_any_managed_policy_of_the_account(request_):
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "ManagedPoliciesAreFixed"), decision.reason


# SSM: the boundary's services included `ssm:*` for one action two of our roles use
# (CloudWatchAgentServerPolicy's ssm:GetParameter on AmazonCloudWatch-*, Karpenter's on the
# public /aws/service/* AMI parameters). With `ssm:*` a bounded role runs a shell on any managed
# instance of the account (whatever its instance profile) and reads every SecureString.
INSTANCE = f"arn:aws:ec2:us-east-2:{ACCOUNT}:instance/i-0adminbastion"
SSM_ESCAPES = [
    Request("ssm:SendCommand", INSTANCE),
    Request("ssm:SendCommand", "arn:aws:ssm:us-east-2::document/AWS-RunShellScript"),
    Request("ssm:StartSession", INSTANCE),
    Request("ssm:GetParameter", f"arn:aws:ssm:us-east-2:{ACCOUNT}:parameter/prod/database/password"),
    Request("ssm:GetParametersByPath", f"arn:aws:ssm:us-east-2:{ACCOUNT}:parameter/prod"),
    Request("ssm:PutParameter", f"arn:aws:ssm:us-east-2:{ACCOUNT}:parameter/AmazonCloudWatch-linux"),
]


@pytest.mark.parametrize("request_", SSM_ESCAPES, ids=lambda r: f"{r.action} {r.resource.rsplit(':', 1)[-1]}")
def test_a_bounded_role_cannot_run_commands_on_instances_or_read_parameters_through_ssm(request_):
    decision = evaluate(request_, [EVERYTHING], _boundary())
    assert not decision.allowed and decision.reason == "not allowed by the permissions boundary delivery-boundary", (
        decision.reason
    )


@pytest.mark.parametrize(
    "resource",
    [
        "arn:aws:ssm:us-east-2::parameter/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/recommended/image_id",
        f"arn:aws:ssm:us-east-2:{ACCOUNT}:parameter/AmazonCloudWatch-linux",
    ],
)
def test_the_parameters_our_roles_read_are_still_under_the_boundary(resource):
    assert evaluate(Request("ssm:GetParameter", resource), [EVERYTHING], _boundary()).allowed


# Service-linked roles: the deploy role may create those of the program's services only
# (ServiceLinkedRoles' condition), a bounded role with `*` any: a service-linked role is
# the service's, but some carry broad rights that the service then uses on the caller's
# request (e.g. AWSServiceRoleForSSM lets SSM act on every instance).
@pytest.mark.parametrize(
    "service", ["ssm.amazonaws.com", "ops.apigateway.amazonaws.com", "organizations.amazonaws.com"]
)
def test_a_bounded_role_creates_only_the_service_linked_roles_of_the_programs_services(service):
    request = Request(
        "iam:CreateServiceLinkedRole",
        f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/{service}/x",
        {"iam:AWSServiceName": service},
    )
    decision = evaluate(request, [EVERYTHING], _boundary())
    assert decision.denied_by == ("delivery-boundary", "OnlyTheProgramsServiceLinkedRoles"), decision.reason


def test_the_service_linked_roles_eks_and_fsx_need_are_still_under_the_boundary():
    for service in ("eks.amazonaws.com", "elasticloadbalancing.amazonaws.com", "fsx.amazonaws.com"):
        request = Request(
            "iam:CreateServiceLinkedRole",
            f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/{service}/x",
            {"iam:AWSServiceName": service},
        )
        assert evaluate(request, [EVERYTHING], _boundary()).allowed, service


# Role names are prefixes: the boundary's `higgsfield-prod-*` also names every role of a stack
# called `prod-eu` (or `prod-2`), and two stacks of one environment may share an account
# (policies/rules.py account_findings refuses only a prod beside another environment). prod's
# deploy role could then rewrite the trust of prod-eu's CI identities, which its own
# CiIdentitiesAreAdministeredByBootstrap listed by prod's names only.
NEIGHBOUR_CI_ROLES = [
    "higgsfield-prod-eu-deploy",
    "higgsfield-prod-eu-preview",
    "higgsfield-prod-eu-image",
    "higgsfield-prod-eu-deploy-runner",
]


@pytest.mark.parametrize("action", ["iam:UpdateAssumeRolePolicy", "iam:PutRolePolicy"])
@pytest.mark.parametrize("role", NEIGHBOUR_CI_ROLES)
def test_the_deploy_role_cannot_take_over_the_ci_identities_of_a_stack_whose_name_starts_with_its_own(role, action):
    decision = evaluate(Request(action, f"arn:aws:iam::{ACCOUNT}:role/{role}"), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "CiIdentitiesAreAdministeredByBootstrap"), decision.reason


# --- the workflows ---------------------------------------------------------------------------------


def test_the_job_whose_matrix_steers_the_deploy_installs_nothing_unpinned():
    """stacks.yml's matrix names the deploy job's role, account, backend, runner label, GitHub
    environment and policy config (deploy.yml, `${{ matrix.* }}`): whatever runs in its `list`
    job decides where prod's deploy goes. A `pip install pyyaml` without a version or hash runs
    whatever PyPI serves that day there; it gets PyYAML from a hash-locked file instead."""
    import re

    import yaml

    from tests.conftest import ROOT

    stacks = yaml.safe_load((ROOT / ".github" / "workflows" / "stacks.yml").read_text())
    deploy = (ROOT / ".github" / "workflows" / "deploy.yml").read_text()
    assert "uses: ./.github/workflows/stacks.yml" in deploy and "matrix.deployRole" in deploy
    installs = [
        line.strip()
        for step in stacks["jobs"]["list"]["steps"]
        for line in step.get("run", "").splitlines()
        if "pip install" in line
    ]
    assert installs, "the list job installs PyYAML"
    for line in installs:
        assert "--require-hashes" in line and "--no-deps" in line and re.search(r"-r requirements/\S+\.txt", line), line
        lock = (ROOT / re.search(r"-r (requirements/\S+\.txt)", line).group(1)).read_text()
        entries = re.findall(r"^([A-Za-z0-9._-]+)==", lock, re.MULTILINE)
        assert entries == ["pyyaml"], entries

        # the same wheel hashes as the deploy lock: one PyYAML, not two that drift apart
        def block(text: str) -> str:
            return (
                re.search(r"^pyyaml==.*?(?=^\S|\Z)", text, re.MULTILINE | re.DOTALL).group(0).split("# via")[0].strip()
            )

        assert block(lock) == block((ROOT / "requirements" / "deploy.txt").read_text())


# The backend (state bucket and secrets key) is the administrator's (`higgsfield bootstrap` makes
# it; the program manages neither). The deploy role needs its objects and the key's
# encrypt/decrypt; with `s3:*` on the bucket and `kms:*` on `*` it could also open the bucket or
# the key to another account (a backdoor to every stack secret that outlives the role), suspend
# versioning and expire the history, or schedule the key's deletion (every secret lost).
STATE_BUCKET = f"arn:aws:s3:::{config_of('prod').delivery.state_bucket}"
STATE_KEY = config_of("prod").delivery.state_key_arn
# (the request, the denial that refuses it: TheBackendIsTheAdministrators' own, or one that refuses the action on
# every resource, which it therefore leaves out)
BACKEND_TAKEOVERS = [
    (Request("s3:PutBucketPolicy", STATE_BUCKET), "AdministratorsOnly"),
    (Request("s3:DeleteBucketPolicy", STATE_BUCKET), "TheBackendIsTheAdministrators"),
    (Request("s3:PutBucketAcl", STATE_BUCKET), "AdministratorsOnly"),
    (Request("s3:PutObjectAcl", f"{STATE_BUCKET}/.pulumi/stacks/higgsfield/prod.json"), "AdministratorsOnly"),
    (Request("s3:PutBucketPublicAccessBlock", STATE_BUCKET), "AdministratorsOnly"),
    (Request("s3:PutBucketVersioning", STATE_BUCKET), "TheBackendIsTheAdministrators"),
    (Request("s3:PutLifecycleConfiguration", STATE_BUCKET), "AdministratorsOnly"),
    (Request("s3:DeleteBucket", STATE_BUCKET), "TheBackendIsTheAdministrators"),
    (Request("kms:PutKeyPolicy", STATE_KEY), "AdministratorsOnly"),
    (Request("kms:CreateGrant", STATE_KEY), "TheBackendIsTheAdministrators"),
    (Request("kms:ScheduleKeyDeletion", STATE_KEY), "AdministratorsOnly"),
    (Request("kms:DisableKey", STATE_KEY), "AdministratorsOnly"),
]


@pytest.mark.parametrize(("request_", "sid"), BACKEND_TAKEOVERS, ids=lambda r: getattr(r, "action", r))
@pytest.mark.parametrize("identity", ["deploy", "bounded role with *"])
def test_neither_the_deploy_role_nor_a_role_it_made_can_open_or_destroy_the_backend(request_, sid, identity):
    if identity == "deploy":
        decision = evaluate(request_, [_deploy()])
        assert decision.denied_by == ("delivery-deploy", sid), decision.reason
    else:
        decision = evaluate(request_, [EVERYTHING], _boundary())
        assert decision.denied_by == ("delivery-boundary", sid), decision.reason


@pytest.mark.parametrize(
    "request_",
    [
        Request("s3:GetObject", f"{STATE_BUCKET}/.pulumi/stacks/higgsfield/prod.json"),
        Request("s3:PutObject", f"{STATE_BUCKET}/.pulumi/stacks/higgsfield/prod.json"),
        Request("s3:DeleteObject", f"{STATE_BUCKET}/.pulumi/locks/higgsfield/prod/x.json"),
        Request("s3:ListBucket", STATE_BUCKET),
        Request("kms:Encrypt", STATE_KEY),
        Request("kms:Decrypt", STATE_KEY),
        Request("kms:GenerateDataKey", STATE_KEY),
    ],
    ids=lambda r: r.action,
)
def test_the_deploy_role_still_reads_and_writes_its_state(request_):
    assert evaluate(request_, [_deploy()]).allowed

"""Round 8 IAM audit of the two ceilings (components/delivery.py: the stack boundary on every role but the deploy
role, and the deploy role's own inline policy): requests the deploy role, or a role it makes under the boundary
(the deploy role creates roles with any trust and any inline policy, so the boundary's allows are its reach), can
send that escalate past the ceilings or open the stack, and two ways the ceilings refuse what the program needs.
Each test fails on the code it was written against; each docstring says which statement lets the request
through, the source that says what the request does, and the impact."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from components.delivery import (
    MANAGED_POLICY_CHARACTERS,
    ROLE_POLICY_CHARACTERS,
    boundary_policy,
    deploy_policy,
    policy_characters,
)
from infra.config import ConfigError
from infra.config.stack import ADMINS_CHARACTERS
from infra.offline.evaluate import load_stack
from policies.iam_evaluation import Request, evaluate
from tests.conftest import ROOT, config_of
from tests.delivery.test_ci_identity import (
    ACCOUNT,
    BOUNDARY,
    CLUSTER,
    DEPLOY_ROLE,
    EVERYTHING,
    REGION,
    _boundary,
    _deploy,
)
from tests.delivery.test_policy_sizes import _admins

VPC = f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc/vpc-0stack"
SUBNET = f"arn:aws:ec2:{REGION}:{ACCOUNT}:subnet/subnet-0private"


def test_the_boundary_lets_the_codebuild_runners_make_their_network_interfaces_usable():
    """The runner's service role (`higgsfield-STACK-deploy-runner`, under the boundary: bound_every_role skips
    only `higgsfield-STACK-deploy`) is granted ec2:CreateNetworkInterfacePermission on the stack's interfaces for
    `ec2:AuthorizedService` codebuild.amazonaws.com (Delivery._runner, the `-eni` policy), as CodeBuild's VPC
    documentation requires of the service role (docs.aws.amazon.com/codebuild/latest/userguide/auth-and-access-
    control-iam-identity-based-access-control.html, "Allow CodeBuild access to AWS services required to create a
    VPC network interface"). The boundary's AdministratorsOnly denies that action on every resource, for every
    service, so CodeBuild cannot attach the runner's interface and no build of the preview or deploy runner starts
    in the VPC: with `runner.enabled` (every shipped stack) CI's jobs on the runners fail. The test that checks
    every inline grant against the boundary skips this policy, for its document is computed (the subnets' ids).
    Fix: deny CreateNetworkInterfacePermission only where `ec2:AuthorizedService` is not codebuild.amazonaws.com
    (StringNotEquals holds where the key is absent: a grant to an account carries none)."""
    request = Request(
        "ec2:CreateNetworkInterfacePermission",
        f"arn:aws:ec2:{REGION}:{ACCOUNT}:network-interface/eni-0runner",
        {"ec2:AuthorizedService": "codebuild.amazonaws.com", "ec2:Subnet": SUBNET},
    )
    decision = evaluate(request, [EVERYTHING], _boundary())
    assert decision.allowed, decision.reason


def test_no_role_under_the_boundary_makes_an_internet_facing_load_balancer_on_a_stack_without_public_ones():
    """prod sets no `higgsfield:publicLoadBalancers` (infra/config/stack.py: False), so the tenancy policy makes
    every team LoadBalancer carry the internal annotation (components/tenancy.py INTERNAL_LB_ANNOTATION: the
    in-tree AWS provider makes an internet-facing one otherwise, from any tagged public subnet). The IAM ceiling
    does not hold the same line: the boundary allows `elasticloadbalancing:*` on `*` (MANAGED_POLICY_SERVICES, for
    AmazonEKSClusterPolicy), with no denial on the scheme. So the deploy role, cluster admin by its access entry,
    applies a Service of type LoadBalancer without the annotation in a platform namespace (admission is the
    teams'), and the cluster role makes an internet-facing load balancer in front of the nodes; or it creates a
    stack role with `elasticloadbalancing:*` and a trust of its choosing and makes one directly. ELB's
    `elasticloadbalancing:Scheme` condition key covers CreateLoadBalancer of ALB, NLB and CLB (aws.amazon.com/
    about-aws/whats-new/2023/11/aws-elastic-load-balancing-iam-condition-keys/; Service Authorization
    Reference, list_awselasticloadbalancing.html). Impact: the stack's pods and nodes reachable from the internet
    while both ceilings refuse every public IPv4 address on an instance (NoPublicAddressOnLaunch,
    AdministratorsOnly). Fix: unless public_load_balancers, deny elasticloadbalancing:CreateLoadBalancer where
    `elasticloadbalancing:Scheme` is `internet-facing` in ceiling_denials."""
    assert not config_of("prod").public_load_balancers
    request = Request(
        "elasticloadbalancing:CreateLoadBalancer",
        f"arn:aws:elasticloadbalancing:{REGION}:{ACCOUNT}:loadbalancer/net/k8s-open/0123456789abcdef",
        {"elasticloadbalancing:Scheme": "internet-facing"},
    )
    decision = evaluate(request, [EVERYTHING], _boundary())
    assert not decision.allowed, decision.reason


def test_the_deploy_role_cannot_give_the_stacks_network_public_ipv6_addresses():
    """The ceilings refuse public IPv4 addresses (NoPublicAddressOnLaunch, AdministratorsOnly: "Public IPv4
    addresses on what runs in the stack"), and nothing of IPv6: the deploy role's `ec2:*` lets it add an
    Amazon-provided IPv6 block to the stack's VPC and to its private subnets (AssociateVpcCidrBlock takes
    AmazonProvidedIpv6CidrBlock, AssociateSubnetCidrBlock an Ipv6CidrBlock: boto/botocore:botocore/data/ec2/
    2016-11-15/service-2.json@1.44.18), route `::/0` to the VPC's internet gateway (CreateRoute) and give the
    nodes' interfaces IPv6 addresses (AssignIpv6Addresses, or RunInstances' Ipv6AddressCount, on which no condition
    key of the ceilings looks), all globally routable. The program never calls either association: its VPC and
    subnets are IPv4 only (components/network.py: cidr_block, no IPv6 argument). Impact: every node and, with the
    VPC CNI, pod reachable from the internet, past the IPv4 denials. Fix: deny ec2:AssociateVpcCidrBlock and
    ec2:AssociateSubnetCidrBlock whole in ceiling_denials (ADDRESS_OPENINGS)."""
    for request in (
        Request("ec2:AssociateVpcCidrBlock", VPC),
        Request("ec2:AssociateSubnetCidrBlock", SUBNET),
    ):
        decision = evaluate(request, [_deploy()])
        assert not decision.allowed, f"{request.action}: {decision.reason}"


def test_the_deploy_role_cannot_run_a_build_of_a_codebuild_project_that_is_not_the_stacks():
    """deploy_policy's ServicesOfTheProgram allows `codebuild:*` on `*`. StartBuild takes buildspecOverride (and
    environment, image and source overrides: boto/botocore:botocore/data/codebuild/2016-10-06/
    service-2.json@1.44.18, StartBuildInput), and runs the commands under the project's own service role; no
    iam:PassRole is asked, for no role is passed (PassOnlyTheStacksRoles never sees it). Any CodeBuild project of
    the account that is not the stack's, whose service role carries no stack boundary, runs the deploy role's
    commands with that role's credentials: an identity outside both ceilings. The program starts no build (the
    runners' webhooks do). Impact: escalation to the service role of any other project of the account. Fix: deny
    codebuild actions on every project but `arn:aws:codebuild:*:ACCOUNT:project/higgsfield-STACK-*` (NotResource)
    in deploy_policy, and StartBuild* / RetryBuild* on those too."""
    request = Request("codebuild:StartBuild", f"arn:aws:codebuild:{REGION}:{ACCOUNT}:project/account-baseline-apply")
    decision = evaluate(request, [_deploy()])
    assert not decision.allowed, decision.reason


def test_the_deploy_role_cannot_add_a_version_to_a_launch_template_that_is_not_the_stacks():
    """deploy_policy allows `ec2:*` and `autoscaling:*` on `*`. A new version of a launch template that an Auto
    Scaling group (or an EKS managed node group) of the account launches from by $Latest or $Default carries new
    user data and keeps the template's instance profile: EC2 Auto Scaling checks ec2:RunInstances and iam:PassRole
    when a user creates or updates the group, not when it launches (docs.aws.amazon.com/autoscaling/ec2/userguide/
    ec2-auto-scaling-launch-template-permissions.html, "Permissions validation for ec2:RunInstances and
    iam:PassRole"), so no PassRole of that profile's role is asked of the deploy role; a scale-out or an instance
    refresh (autoscaling:StartInstanceRefresh, also allowed) then runs its commands with that role's credentials.
    The program's templates carry the stack's tag (cfg.resource_tags, higgsfield:stack). Impact: escalation to the
    instance profile role of any group of the account, outside both ceilings (not verifiable offline: whether an
    instance refresh re-checks PassRole). Fix: in deploy_policy, deny ec2:CreateLaunchTemplateVersion and
    ec2:ModifyLaunchTemplate where `aws:ResourceTag/higgsfield:stack` is not the stack (StringNotEquals: absent
    denies; every launch template of the plan carries the tag)."""
    request = Request("ec2:CreateLaunchTemplateVersion", f"arn:aws:ec2:{REGION}:{ACCOUNT}:launch-template/lt-0other")
    decision = evaluate(request, [_deploy()])
    assert not decision.allowed, decision.reason


def test_the_deploy_role_enters_no_principal_in_a_cluster_that_is_not_the_stacks():
    """ClusterAccessStaysInTheAccount refuses an access entry for any principal but those the program enters (the
    admins, the preview and deploy roles), on Resource `*`: on every EKS cluster of the account. The deploy role
    is one of those principals, so it may enter itself in any other cluster of the account and associate
    AmazonEKSClusterAdminPolicy there (eks:CreateAccessEntry and eks:AssociateAccessPolicy act on the cluster ARN
    and carry eks:principalArn: Service Authorization Reference, list_amazonelasticcontainerserviceforkubernetes.
    html). `higgsfield check` refuses prod sharing an account with dev or staging, but not two stacks of one
    environment (prod and prod-eu) nor clusters the program does not make. Impact: cluster admin (every Secret)
    of every EKS cluster of the account whose authentication mode takes access entries. Fix: scope the statement's
    Resource, or add a denial on NotResource `arn:aws:eks:*:ACCOUNT:cluster/higgsfield-STACK` (and its
    access-entry ARNs) for the three access actions."""
    other = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/analytics"
    assert other != CLUSTER
    request = Request("eks:CreateAccessEntry", other, {"eks:principalArn": DEPLOY_ROLE})
    decision = evaluate(request, [_deploy()])
    assert not decision.allowed, decision.reason


# The longest values the config admits, each at IAM's or S3's own limit: a stack name of 26 characters (the
# config's bound for a stack CI deploys, infra/config/stack.py), buckets of 63 (S3's, infra/config/limits.py).
LONG_STACK = "research-eu-central-1-prod"
LONG_DATA_BUCKET = "higgsfield-research-eu-central-1-prod-training-datasets-archive"
LONG_STATE_BUCKET = "higgsfield-research-eu-central-1-prod-pulumi-state-444455556666"


def _loaded(tmp_path: Path, monkeypatch, stack: str, change) -> object | None:
    """prod's stack file as stack `stack`, changed, through the config loader: the validated config, or None
    where the loader refuses it (before anything is created)."""
    (tmp_path / "stacks").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    change(document["config"])
    (tmp_path / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(document))
    (tmp_path / "policies" / "config").mkdir(parents=True)
    shutil.copy(ROOT / "policies" / "config" / "prod.json", tmp_path / "policies" / "config" / f"{stack}.json")
    monkeypatch.chdir(tmp_path)
    try:
        return load_stack(stack, root=tmp_path)
    except ConfigError:
        return None


def _long_buckets(config: dict) -> None:
    config["higgsfield:fsx"]["s3"]["bucket"] = LONG_DATA_BUCKET
    config["higgsfield:fsx"]["s3"]["importPath"] = f"s3://{LONG_DATA_BUCKET}/train"
    config["higgsfield:delivery"]["stateBucket"] = LONG_STATE_BUCKET


def test_a_stack_config_the_loader_admits_renders_a_boundary_iam_accepts(tmp_path, monkeypatch):
    """The boundary is a customer managed policy, at most 6,144 characters (MANAGED_POLICY_CHARACTERS; IAM User
    Guide, reference_iam-quotas.html: CreatePolicy refuses a larger one, LimitExceeded). Shipped prod renders
    5,759; each bucket name is in it five times, the stack name several, and the config bounds only the admins
    (ADMINS_CHARACTERS), which the boundary does not list. prod's file with a 26-character stack name and
    63-character buckets, every value the loader admits, renders about 6,190: `higgsfield plan` passes and the
    deploy fails at CreatePolicy, after the cluster's other resources were made, with no delivery component.
    Fix: refuse at load time a stack whose rendered boundary (and deploy policy) exceeds IAM's quota, naming the
    settings that weigh (stack name, stateBucket, fsx.s3.bucket), as ADMINS_CHARACTERS does for the admins."""
    config = _loaded(tmp_path, monkeypatch, LONG_STACK, _long_buckets)
    if config is None:
        return  # refused before anything is created
    document = boundary_policy(
        config.delivery, LONG_STACK, config.fsx.linked_buckets, config.endpoint.public, region=config.region
    )
    assert policy_characters(document) <= MANAGED_POLICY_CHARACTERS, policy_characters(document)


def test_a_stack_config_the_loader_admits_renders_a_deploy_policy_iam_accepts(tmp_path, monkeypatch):
    """The deploy role's inline policies together are at most 10,240 characters (ROLE_POLICY_CHARACTERS). The
    admins' bound (ADMINS_CHARACTERS = 600) was sized on shipped prod's bucket names (test_policy_sizes renders
    prod with 600 characters of admins); the deploy policy names the state and data buckets five times each too,
    so prod (its own name) with 63-character buckets and admins within the bound renders about 10,350: the
    loader admits it, PutRolePolicy refuses it (LimitExceeded), and the administrator's bootstrap fails half way.
    Fix: bound the rendered policy, not the admins alone (or size ADMINS_CHARACTERS on the longest buckets and
    stack name the config admits)."""
    admins = _admins(ACCOUNT, ADMINS_CHARACTERS)

    def change(config: dict) -> None:
        _long_buckets(config)
        config["higgsfield:admins"] = admins

    config = _loaded(tmp_path, monkeypatch, "prod", change)
    if config is None:
        return
    document = deploy_policy(
        config.delivery, "prod", config.fsx.linked_buckets, config.admins, config.endpoint.public, region=config.region
    )
    assert policy_characters(document) <= ROLE_POLICY_CHARACTERS, policy_characters(document)


def test_no_role_under_the_boundary_reaches_a_codeconnections_connection_but_the_runners():
    """The boundary allows `codeconnections:*` and `codestar-connections:*` on `*` (boundary_policy's service
    list), where the one stack role that uses a connection, the runner's, needs GetConnectionToken, GetConnection
    and UseConnection on `runner.connectionArn` alone (Delivery._runner). The deploy role itself reaches only that
    connection (RunnerConnection), but a role it makes under the boundary with `codeconnections:*` may delete or
    rewire every connection and host of the account (DeleteConnection, UpdateHost, CreateSyncConfiguration,
    ...: boto/botocore:botocore/data/codeconnections/2023-12-01/service-2.json@1.44.18). Impact: the deploy role's
    reach over the account's source connections (CI of other projects stopped or repointed) exceeds its own
    policy. Fix: allow the two prefixes in the boundary on the runner's connection ARN only."""
    request = Request(
        "codeconnections:DeleteConnection",
        f"arn:aws:codeconnections:{REGION}:{ACCOUNT}:connection/00000000-0000-4000-8000-0000000000ff",
    )
    decision = evaluate(request, [EVERYTHING], _boundary())
    assert not decision.allowed, decision.reason


def test_no_identity_of_the_stack_passes_the_unbounded_deploy_role():
    """PassOnlyTheStacksRoles denies passing any role but `higgsfield-STACK-*`, a pattern that names the deploy
    role itself, the one role without the boundary; StackRoles allows iam:PassRole on the same pattern, and the
    boundary allows iam:PassRole on `*` (IAM_ACTIONS). So the deploy role, and any role under the boundary, may
    hand the deploy role to a service (CodeBuild's project role, an EKS pod identity association, an ECS task).
    Today only the deploy role's trust (GitHub's OIDC, one subject) keeps a service from assuming it; a trust an
    administrator widens later (for a runner, say) turns this into a build or pod with unbounded credentials. The
    program passes no OIDC-trusted CI identity (only the runner roles, to their projects). Impact: defence in
    depth of the one unbounded identity. Fix: deny iam:PassRole on the preview, deploy and image roles
    (role_name(STACK, purpose)) in ceiling_denials."""
    request = Request("iam:PassRole", DEPLOY_ROLE, {"iam:PassedToService": "codebuild.amazonaws.com"})
    decision = evaluate(request, [_deploy()])
    assert not decision.allowed, decision.reason


def test_the_deploy_role_creates_no_role_named_like_another_stacks_ci_identity():
    """StackRolesWithTheBoundary allows CreateRole on `role/higgsfield-STACK-*`, and a role's ARN holds its path
    (`role/PATH/NAME`): a path `/higgsfield-prod-x/` makes any name creatable (CreateRole's Path takes any ASCII
    between slashes, boto/botocore:botocore/data/iam/2010-05-08/service-2.json@1.44.18). CiIdentitiesAre-
    AdministeredByBootstrap's `role/higgsfield-*-deploy` catches the CI names at any path, but ARN patterns are
    case-sensitive while IAM role names are not ("Names are not distinguished by case", CreateRole's RoleName,
    same file). So `Higgsfield-Staging-Deploy` (bounded) is created, and staging's bootstrap in this account then
    fails: its `higgsfield-staging-deploy` already exists. Impact: a deploy role squats another stack's CI
    identities (denial of its bootstrap) and makes roles of any name, where deploy_policy's docstring says it
    makes only `higgsfield-STACK-*`. Fix: deny iam:CreateRole on `role/*/*` (a role at any path but `/`; a name
    holds no slash), which leaves only names starting with the lower-case `higgsfield-STACK-`."""
    request = Request(
        "iam:CreateRole",
        f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-x/Higgsfield-Staging-Deploy",
        {"iam:PermissionsBoundary": BOUNDARY},
    )
    decision = evaluate(request, [_deploy()])
    assert not decision.allowed, decision.reason

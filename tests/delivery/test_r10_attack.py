"""Round 10's attacker, beside `higgsfield verify`'s aws.public-subnets (infra/cli/verify/checks.py public_subnets):
what the deploy role, or a role it makes under the stack boundary (tests/delivery/test_ci_identity.py EVERYTHING),
can send to get an instance of the account on the internet after an administrator has made that check pass.
Decided by policies/iam_evaluation.py on the shipped prod plan's policies.

The check passes once no subnet maps public IPv4 or assigns IPv6 on launch, the fix it names being to delete each
region's default VPC; the deploy workflow skips it (the fix is an administrator's), so nothing looks again after a
deploy."""

from __future__ import annotations

import pytest

from policies.iam_evaluation import Request, evaluate
from tests.delivery.test_ci_identity import ACCOUNT, EVERYTHING, REGION, _boundary, _deploy

ELSEWHERE = "eu-west-1"  # a region the prod stack does not run in; the ceilings pin none

# CreateDefaultVpc "creates a default VPC with a size /16 IPv4 CIDR block and a default subnet in each Availability
# Zone ... If you deleted your previous default VPC, you can create a default VPC"; CreateDefaultSubnet "creates a
# default subnet with a size /20 IPv4 CIDR block in the specified Availability Zone in your default VPC"
# (boto/botocore:botocore/data/ec2/2016-11-15/service-2.json@1.44.18). A default subnet maps public IPv4 addresses
# on launch and the default VPC has an internet gateway and a 0.0.0.0/0 route to it (docs.aws.amazon.com/vpc/
# latest/userguide/default-vpc.html). Neither request takes a parameter but DryRun (and the subnet's zone): no
# condition key tells one from another, and the program calls neither (components/network.py makes its own VPC).
DEFAULT_NETWORK = [
    Request("ec2:CreateDefaultVpc", f"arn:aws:ec2:{ELSEWHERE}:{ACCOUNT}:vpc/*"),
    Request("ec2:CreateDefaultSubnet", f"arn:aws:ec2:{REGION}:{ACCOUNT}:subnet/*"),
]


@pytest.mark.parametrize("request_", DEFAULT_NETWORK, ids=[r.action for r in DEFAULT_NETWORK])
def test_the_deploy_role_cannot_bring_back_a_default_vpc_an_administrator_deleted(request_):
    """aws.public-subnets passes once an administrator deletes every region's default VPC; the deploy role then
    calls CreateDefaultVpc (or CreateDefaultSubnet where the default VPC lacks a zone's subnet) and launches into
    it without asking for an address (NoPublicAddressOnLaunch matches only a request that asks): the instance
    gets a public IPv4 address and an internet route. The deploy workflow skips aws.public-subnets, so no
    deploy sees it. Impact: an instance of the account reachable from, and reaching, the internet past every
    IPv4 denial; severity high (the ceilings' stated property). On AWS, as the deploy role: `aws ec2
    create-default-vpc --region eu-west-1 --dry-run` must be UnauthorizedOperation."""
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "AdministratorsOnly"), decision.reason


@pytest.mark.parametrize("request_", DEFAULT_NETWORK, ids=[r.action for r in DEFAULT_NETWORK])
def test_a_role_under_the_boundary_cannot_bring_back_a_default_vpc(request_):
    """The same through a role the deploy role made under the stack boundary with `*` on `*` (a build's)."""
    decision = evaluate(request_, [EVERYTHING], _boundary())
    assert decision.denied_by == ("delivery-boundary", "AdministratorsOnly"), decision.reason


# --- aws.cluster: the audit log types stay on, and the audit group's events are the deploy role's to write --------

# The cluster's control-plane log group (components/delivery.py AuditLogsStay names it by this pattern): EKS writes
# it, as the service; no role of the stack writes or reshapes its events.
AUDIT_GROUP = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/eks/higgsfield-prod/cluster"
# PutLogEvents "uploads a batch of log events to the specified log stream", CreateLogStream "creates a log stream
# for the specified log group"; PutTransformer: "CloudWatch Logs performs the transformations at the time of log
# ingestion", its processors including DeleteKeys, which "deletes entries from a log event"; PutDataProtectionPolicy
# masks what its identifiers match "when it is ingested into the log group"
# (boto/botocore:botocore/data/logs/2014-03-28/service-2.json@1.44.18).
AUDIT_WRITES = [
    Request("logs:CreateLogStream", f"{AUDIT_GROUP}:log-stream:kube-apiserver-audit-0"),
    Request("logs:PutLogEvents", f"{AUDIT_GROUP}:log-stream:kube-apiserver-audit-0"),
    Request("logs:PutTransformer", AUDIT_GROUP),
    Request("logs:PutDataProtectionPolicy", AUDIT_GROUP),
]


@pytest.mark.parametrize("request_", AUDIT_WRITES, ids=[r.action for r in AUDIT_WRITES])
def test_the_deploy_role_cannot_forge_or_strip_the_clusters_audit_events(request_):
    """aws.cluster passes while every planned log type is on, but the deploy role may add streams of forged
    kube-apiserver-audit events beside EKS's (an alibi, or noise around its own requests), or install a transformer
    that deletes `user` and `sourceIPs` from every event EKS writes from then on (or a data protection policy
    masking them to anyone without logs:Unmask): the trail is on and says nothing true. Severity medium (the audit
    trail's integrity; the deploy role is cluster admin). On AWS, as the deploy role: `aws logs
    put-transformer --log-group-identifier /aws/eks/higgsfield-prod/cluster --transformer-config
    '[{"parseJSON":{}},{"deleteKeys":{"withKeys":["user"]}}]'` must be AccessDenied."""
    decision = evaluate(request_, [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "OnlyEksWritesTheAuditLog"), decision.reason


@pytest.mark.parametrize("request_", AUDIT_WRITES, ids=[r.action for r in AUDIT_WRITES])
def test_a_role_under_the_boundary_cannot_forge_or_strip_the_clusters_audit_events(request_):
    decision = evaluate(request_, [EVERYTHING], _boundary())
    assert decision.denied_by == ("delivery-boundary", "OnlyEksWritesTheAuditLog"), decision.reason

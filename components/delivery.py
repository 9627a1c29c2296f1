"""The delivery pipeline's AWS side: who CI is when it looks, when it changes, and where it runs.

GitHub Actions gets AWS credentials only through GitHub's OIDC provider (no long-lived keys). Each
role's trust policy names one OIDC subject exactly (`StringEquals`, never a pattern), so which
job may assume which role is decided by how GitHub builds the subject claim
(docs.github.com/en/actions/reference/security/oidc, "Example subject claims"):
- preview: `repo:OWNER/REPO:pull_request`: any pull-request job of the repository (forks get no
  token). It reads: the instance-type catalog the program asks for, the backend's state and lock,
  the secrets key (decrypt only), and the cluster through an EKS access entry with
  AmazonEKSViewPolicy, which like Kubernetes' `view` role does not read Secrets.
- deploy: `repo:OWNER/REPO:environment:ENV`: only a job that runs in the stack's GitHub
  environment (whose protection rules decide who may). It runs `pulumi up` of the whole program,
  so its permissions are broad by nature (every service the program manages); its trust is what
  limits it. Cluster access: an access entry with AmazonEKSClusterAdminPolicy.
- image push: `repo:OWNER/REPO:ref:refs/heads/main`: jobs of main without an environment; may
  push to the stack's training-image repository only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra import versions
from components.registry import repository_name
from infra.cli.stacks import cluster_name, role_name, runner_project
from infra.config import Delivery as DeliverySettings

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
AUDIENCE = "sts.amazonaws.com"
VIEW_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
# What a preview asks AWS beyond its own credentials: the program's invokes
# (infra/catalog.py: ec2:DescribeInstanceTypes, ec2:DescribeInstanceTypeOfferings), the kubeconfig's
# `aws eks get-token` (eks:DescribeCluster for its endpoint). A preview does not refresh, so it
# reads no other resource. A missing action shows up as AccessDenied naming it: add it here.
PREVIEW_ACTIONS = ("ec2:DescribeInstanceTypes", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeAvailabilityZones", "eks:DescribeCluster")
# Every service the program manages (a test checks each resource type of every shipped plan is
# covered): `pulumi up` creates, updates and deletes in all of them.
DEPLOY_SERVICES = ("autoscaling", "codebuild", "ec2", "ecr", "eks", "fsx", "iam", "kms", "logs")
# What the deploy role never does: make long-lived credentials.
DEPLOY_DENIED = ("iam:CreateAccessKey", "iam:CreateLoginProfile", "iam:UpdateLoginProfile", "iam:CreateUser")
ECR_PUSH = (
    "ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:CompleteLayerUpload", "ecr:DescribeImages",
    "ecr:GetDownloadUrlForLayer", "ecr:InitiateLayerUpload", "ecr:PutImage", "ecr:UploadLayerPart",
)


def subjects(repository: str, deploy_environment: str) -> dict[str, str]:
    """The one OIDC subject each role trusts."""
    return {
        "preview": f"repo:{repository}:pull_request",
        "deploy": f"repo:{repository}:environment:{deploy_environment}",
        "image": f"repo:{repository}:ref:refs/heads/main",
    }


def github_trust(provider_arn: str, subject: str) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {f"{GITHUB_OIDC_HOST}:aud": AUDIENCE, f"{GITHUB_OIDC_HOST}:sub": subject}},
        }],
    })


def _document(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def preview_policy(settings: DeliverySettings) -> str:
    bucket = f"arn:aws:s3:::{settings.state_bucket}"
    return _document(
        {"Effect": "Allow", "Action": list(PREVIEW_ACTIONS), "Resource": "*"},
        {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": bucket},
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": f"{bucket}/*"},
        # The diy backend locks a stack for a preview too (a file under .pulumi/locks/).
        {"Effect": "Allow", "Action": ["s3:PutObject", "s3:DeleteObject"], "Resource": f"{bucket}/.pulumi/locks/*"},
        {"Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": settings.state_key_arn},
    )


def deploy_policy(settings: DeliverySettings, buckets: Sequence[str]) -> str:
    """Every action of every service the program manages; S3 only on the backend's and the data
    set's buckets; the runner's CodeConnections connection (a project names it as its source)."""
    statements = [
        {"Effect": "Allow", "Action": [f"{service}:*" for service in DEPLOY_SERVICES], "Resource": "*"},
        {"Effect": "Deny", "Action": list(DEPLOY_DENIED), "Resource": "*"},
    ]
    named = sorted({settings.state_bucket, *buckets})
    statements.append({"Effect": "Allow", "Action": ["s3:*"], "Resource": [a for b in named for a in (f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*")]})
    if settings.runner.connection_arn:
        statements.append({"Effect": "Allow", "Action": ["codeconnections:PassConnection", "codeconnections:UseConnection", "codeconnections:GetConnection"],
                           "Resource": settings.runner.connection_arn})
    return _document(*statements)


@dataclass(frozen=True)
class DeliveryArgs:
    stack: str
    region: str
    settings: DeliverySettings
    vpc_id: pulumi.Input[str]
    private_subnet_ids: Sequence[pulumi.Input[str]]
    cluster_security_group_id: pulumi.Input[str]
    data_buckets: Sequence[str]  # S3 buckets the program links (FSx data repository)
    log_retention_days: int
    cluster_ready: Sequence[pulumi.Resource]
    tags: Mapping[str, str]


class Delivery(pulumi.ComponentResource):
    """CI identities and runners for one stack.

    Creates: GitHub's OIDC provider unless `oidcProviderArn` names the account's existing one;
    the preview, deploy and image-push roles (named `<cluster>-preview|deploy|image`, each trusting
    one OIDC subject) with their inline policies; EKS access entries for the preview role
    (AmazonEKSViewPolicy) and the deploy role (AmazonEKSClusterAdminPolicy), cluster-wide; and,
    with the runner enabled, a CodeBuild project in the private subnets (its own security group,
    HTTPS to the API server's security group, a service role that writes its logs and manages its
    network interfaces only) with a webhook that starts one build per queued workflow job.
    Replaced when: the repository or deploy environment change (new trust, same role names: an
    in-place update), the cluster name changes (new role names), the runner's subnets change.
    """

    def __init__(self, name: str, args: DeliveryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:delivery:Delivery", name, None, opts)
        settings, tags, child = args.settings, dict(args.tags), pulumi.ResourceOptions(parent=self)
        # GitHub's provider has one ARN per account, known before it exists (so the pack checks the trust at preview).
        provider_arn = settings.oidc_provider_arn or f"arn:aws:iam::{settings.account_id}:oidc-provider/{GITHUB_OIDC_HOST}"
        role_opts = child
        if not settings.oidc_provider_arn:
            provider = aws.iam.OpenIdConnectProvider(f"{name}-github-oidc", url=f"https://{GITHUB_OIDC_HOST}", client_id_lists=[AUDIENCE], tags=tags, opts=child)
            role_opts = pulumi.ResourceOptions(parent=self, depends_on=[provider])
        trusted = subjects(settings.repository, settings.deploy_environment or "")
        self.roles: dict[str, aws.iam.Role] = {}
        policies = {"preview": preview_policy(settings), "deploy": deploy_policy(settings, args.data_buckets)}
        # The ARN of components/registry.py's repository, known before it exists (so the pack can check it at preview).
        repository = f"arn:aws:ecr:{args.region}:{settings.account_id}:repository/{repository_name(cluster_name(args.stack))}"
        policies["image"] = _document(
            {"Effect": "Allow", "Action": ["ecr:GetAuthorizationToken"], "Resource": "*"},
            {"Effect": "Allow", "Action": list(ECR_PUSH), "Resource": repository},
        )
        for purpose, subject in trusted.items():
            role = aws.iam.Role(
                f"{name}-{purpose}", name=role_name(args.stack, purpose),
                assume_role_policy=github_trust(provider_arn, subject),
                max_session_duration=3600 if purpose != "deploy" else 4 * 3600,  # a first prod deploy runs long
                tags={**tags, "higgsfield:ci-identity": purpose}, opts=role_opts)
            aws.iam.RolePolicy(f"{name}-{purpose}", role=role.id, policy=policies[purpose], opts=child)
            self.roles[purpose] = role
        for purpose, policy_arn in (("preview", VIEW_POLICY), ("deploy", CLUSTER_ADMIN_POLICY)):
            entry = aws.eks.AccessEntry(
                f"{name}-{purpose}", cluster_name=cluster_name(args.stack), principal_arn=self.roles[purpose].arn, type="STANDARD",
                tags=tags, opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.cluster_ready)))
            aws.eks.AccessPolicyAssociation(
                f"{name}-{purpose}", cluster_name=cluster_name(args.stack), principal_arn=entry.principal_arn, policy_arn=policy_arn,
                access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"), opts=child)
        if settings.runner.enabled:
            self._runner(name, args, tags)
        self.register_outputs({f"{p}_role_arn": r.arn for p, r in self.roles.items()})

    def _runner(self, name: str, args: DeliveryArgs, tags: dict[str, str]) -> None:
        """A CodeBuild project that hosts GitHub Actions runners inside the VPC
        (docs.aws.amazon.com/codebuild/latest/userguide/action-runner-overview.html): each queued
        job whose `runs-on` is `codebuild-<project>-${{ github.run_id }}-${{ github.run_attempt }}`
        starts one build, which registers an ephemeral runner for that one job."""
        child = pulumi.ResourceOptions(parent=self)
        project, runner, cluster = runner_project(args.stack), args.settings.runner, cluster_name(args.stack)
        group = aws.ec2.SecurityGroup(
            f"{name}-runner", vpc_id=args.vpc_id, description=f"CodeBuild GitHub Actions runners of {cluster}",
            egress=[aws.ec2.SecurityGroupEgressArgs(protocol="tcp", from_port=443, to_port=443, cidr_blocks=["0.0.0.0/0"],
                                                    description="HTTPS: GitHub, PyPI, AWS APIs, the cluster endpoint")],
            tags={**tags, "Name": project}, opts=child)
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-runner-to-api", security_group_id=args.cluster_security_group_id, referenced_security_group_id=group.id,
            ip_protocol="tcp", from_port=443, to_port=443, description="The CI runners reach the Kubernetes API", tags=tags, opts=child)
        logs = aws.cloudwatch.LogGroup(f"{name}-runner", name=f"/aws/codebuild/{project}", retention_in_days=args.log_retention_days, tags=tags, opts=child)
        service_role = aws.iam.Role(
            f"{name}-runner", name=role_name(args.stack, "runner"),
            assume_role_policy=_document({"Effect": "Allow", "Principal": {"Service": "codebuild.amazonaws.com"}, "Action": "sts:AssumeRole"}),
            tags=tags, opts=child)
        # CodeBuild in a VPC (docs.aws.amazon.com/codebuild/latest/userguide/auth-and-access-control-iam-identity-based-access-control.html,
        # "Allow CodeBuild access to AWS services required to create a VPC network interface").
        # A job can read these credentials from its container: they write logs and manage ENIs, nothing else.
        account, region = args.settings.account_id, args.region
        static = aws.iam.RolePolicy(f"{name}-runner", role=service_role.id, policy=_document(
            {"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
             "Resource": f"arn:aws:logs:{region}:{account}:log-group:/aws/codebuild/{project}:*"},
            {"Effect": "Allow", "Action": ["ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:DescribeDhcpOptions",
                                           "ec2:DescribeNetworkInterfaces", "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs"],
             "Resource": "*"},
            {"Effect": "Allow", "Action": ["codeconnections:GetConnectionToken", "codeconnections:GetConnection", "codeconnections:UseConnection"],
             "Resource": runner.connection_arn},
        ), opts=child)
        # The one statement that needs the subnets' ids (unknown until they exist): its own policy.
        in_subnets = aws.iam.RolePolicy(f"{name}-runner-eni", role=service_role.id, policy=pulumi.Output.all(*args.private_subnet_ids).apply(lambda ids: _document(
            {"Effect": "Allow", "Action": ["ec2:CreateNetworkInterfacePermission"], "Resource": f"arn:aws:ec2:{region}:{account}:network-interface/*",
             "Condition": {"StringEquals": {"ec2:AuthorizedService": "codebuild.amazonaws.com",
                                            "ec2:Subnet": [f"arn:aws:ec2:{region}:{account}:subnet/{i}" for i in ids]}}})), opts=child)
        self.runner = aws.codebuild.Project(
            f"{name}-runner", name=project, description=f"Ephemeral GitHub Actions runners for {args.settings.repository} inside {cluster}'s VPC",
            service_role=service_role.arn, build_timeout=120,
            artifacts=aws.codebuild.ProjectArtifactsArgs(type="NO_ARTIFACTS"),
            environment=aws.codebuild.ProjectEnvironmentArgs(
                type="LINUX_CONTAINER", compute_type=runner.compute_type, image=versions.CODEBUILD_RUNNER_IMAGE,
                image_pull_credentials_type="CODEBUILD", privileged_mode=False),
            source=aws.codebuild.ProjectSourceArgs(
                type="GITHUB", location=f"https://github.com/{args.settings.repository}.git",
                auth=aws.codebuild.ProjectSourceAuthArgs(type="CODECONNECTIONS", resource=runner.connection_arn)),
            vpc_config=aws.codebuild.ProjectVpcConfigArgs(vpc_id=args.vpc_id, subnets=list(args.private_subnet_ids), security_group_ids=[group.id]),
            logs_config=aws.codebuild.ProjectLogsConfigArgs(cloudwatch_logs=aws.codebuild.ProjectLogsConfigCloudwatchLogsArgs(group_name=logs.name)),
            tags=tags, opts=pulumi.ResourceOptions(parent=self, depends_on=[static, in_subnets, logs]))
        # Only queued workflow jobs of the two workflows that need the VPC start a runner.
        aws.codebuild.Webhook(
            f"{name}-runner", project_name=self.runner.name, build_type="BUILD",
            filter_groups=[aws.codebuild.WebhookFilterGroupArgs(filters=[
                aws.codebuild.WebhookFilterGroupFilterArgs(type="EVENT", pattern="WORKFLOW_JOB_QUEUED"),
                aws.codebuild.WebhookFilterGroupFilterArgs(type="WORKFLOW_NAME", pattern="^(preview|deploy)$"),
            ])], opts=child)

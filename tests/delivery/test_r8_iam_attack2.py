"""Round 8 IAM attack on the paths beside the r8-iamfix merge (components/delivery.py: `reach_denials`, the
boundary's `InternalLoadBalancersOnly`, `ADDRESS_OPENINGS`, `AuditLogsStay`, the allows without their conditions):
requests the deploy role, or a role it makes under the stack boundary (it creates roles with any trust and any
inline policy, and passes them to services it drives: tests/security/test_red_team.py BECOME_A_STACK_ROLE, so the
boundary's allows are its reach too), can still send to run code under an identity outside both ceilings, reach
another stack, or erase the audit trail. Each test fails on the code it was written against (decided by
policies/iam_evaluation.py on the shipped prod plan's policies); each docstring names the statement that lets the
request through, the source that says what the request does, the impact and a fix."""

from __future__ import annotations

import pytest

from components.karpenter import INTERRUPTION_EVENTS, karpenter_policy, queue_policy
from infra.core.names import interruption_queue, interruption_rule
from infra.offline.delivery_checks import account_findings
from policies.iam_evaluation import Policy, Request, evaluate
from tests.conftest import config_of
from tests.delivery.test_ci_identity import ACCOUNT, BOUNDARY, EVERYTHING, OWN_KEY, OWN_TAG, REGION, _boundary, _deploy

OTHER_CLUSTER = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/analytics"
NODE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-nodes-0123"  # bound_every_role's name_prefix
OTHER_LAUNCH_TEMPLATE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:launch-template/lt-0other"


def test_no_role_under_the_boundary_adds_a_version_to_a_launch_template_that_is_not_the_stacks():
    """OnlyTheStacksLaunchTemplates is in reach_denials, which only deploy_policy carries; the boundary allows `ec2:*`
    on `*` and has no such denial. The deploy role makes a role under the boundary with `ec2:*` inline and a trust
    of its choosing (CreateRole, PutRolePolicy on `higgsfield-STACK-*`: allowed) and runs a build of a runner
    project as that role (StartBuild's serviceRoleOverride: botocore's StartBuildInput; PassRole of a stack role;
    making a project of its own is an administrator's, RunnersAreTheAdministrators); that build adds a version with
    new user data to any launch template of the account. A new version that a group launches from by $Latest or
    $Default keeps the template's instance profile, and EC2 Auto Scaling checks iam:PassRole when a group is created
    or updated, not when it launches (docs.aws.amazon.com/autoscaling/ec2/
    userguide/ec2-auto-scaling-launch-template-permissions.html, "Permissions validation for ec2:RunInstances and
    iam:PassRole"): the next scale-out runs the commands as that group's role. So the escalation the fix closed for
    the deploy role stays open one hop away. Impact: the instance-profile role of any Auto Scaling group of the
    account, outside both ceilings. Fix: carry OnlyTheStacksLaunchTemplates in ceiling_denials (both ceilings); the
    boundary renders 6,065 of its 6,144 characters for prod, so room must be made first (e.g. the two connection
    prefixes, or shorter logs ARNs)."""
    role = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-x"
    project = f"arn:aws:codebuild:{REGION}:{ACCOUNT}:project/higgsfield-prod-deploy-runner"
    for step in (  # the hop: a bounded role of the deploy role's making, run by a build of its own project
        Request("iam:CreateRole", role, {"iam:PermissionsBoundary": BOUNDARY}),
        Request("iam:PutRolePolicy", role),
        Request("iam:PassRole", role, {"iam:PassedToService": "codebuild.amazonaws.com"}),
    ):
        assert evaluate(step, [_deploy()]).allowed, step.action
    # a runner build is no longer the deploy role's to start (RunnersAreTheAdministrators): the hop runs elsewhere,
    # as a pod of the cluster it administers under that role's Pod Identity, so the boundary must hold
    assert evaluate(Request("codebuild:StartBuild", project), [_deploy()]).denied_by == (
        "delivery-deploy",
        "RunnersAreTheAdministrators",
    )
    request = Request("ec2:CreateLaunchTemplateVersion", OTHER_LAUNCH_TEMPLATE)
    assert not evaluate(request, [_deploy()]).allowed  # the fix holds for the deploy role itself
    decision = evaluate(request, [EVERYTHING], _boundary())
    assert not decision.allowed, decision.reason


def test_the_deploy_role_adds_no_node_group_to_a_cluster_that_is_not_the_stacks():
    """OnlyTheStacksClusterAccess keeps the deploy role's access entries to the stack's cluster, but
    `eks:CreateNodegroup` (on the cluster's ARN: Service Authorization Reference, list_amazonelasticcontainer
    serviceforkubernetes.html) is allowed on every cluster of the account by DEPLOY_SERVICES' `eks:*`, and the node
    role it names may be the stack's own (PassOnlyTheStacksRoles lets it pass `higgsfield-STACK-*`). EKS itself
    enters a managed node group's node role in the cluster's access (an EC2_LINUX access entry, or the aws-auth
    ConfigMap: docs.aws.amazon.com/eks/latest/userguide/access-entries.html; this module's own
    access_entry_principals says "the nodes' entries are EKS's own, made by CreateNodegroup"), so no
    eks:CreateAccessEntry of the caller is asked. CreateNodegroup takes a launchTemplate (boto/botocore:botocore/
    data/eks/2017-11-01/service-2.json@1.44.18, CreateNodegroupRequest), which the deploy role creates with its
    user data and the stack's tag. The nodes join the other cluster: every DaemonSet and any pod the scheduler
    places there runs on a host the deploy role controls, with its service-account token and mounted Secrets.
    Any role under the boundary (eks:* on `*`, iam:PassRole of stack roles) can do the same. Impact: code and
    Secrets of every EKS cluster of the account (another stack's of the same environment, which `higgsfield check`
    admits in one account, or one the program does not make): what OnlyTheStacksClusterAccess meant to close. Fix:
    deny eks writes (`eks:Create*`, `eks:Update*`, `eks:Delete*`, `eks:Associate*`) on NotResource the stack's
    cluster and `arn:aws:eks:*:ACCOUNT:*/higgsfield-STACK/*` in both ceilings (widening OnlyTheStacksClusterAccess)."""
    passed = Request("iam:PassRole", NODE_ROLE, {"iam:PassedToService": "eks.amazonaws.com"})
    assert evaluate(passed, [_deploy()]).allowed  # its own node role, as a deploy passes it
    decision = evaluate(Request("eks:CreateNodegroup", OTHER_CLUSTER), [_deploy()])
    assert not decision.allowed, decision.reason


def test_no_role_under_the_boundary_adds_a_node_group_to_a_cluster_that_is_not_the_stacks():
    """The same node group from a role the deploy role makes under the boundary (`eks:*` on `*`, PassRole of the
    stack's roles): the boundary carries the denial too (OnlyTheStacksCluster, ceiling_denials)."""
    decision = evaluate(Request("eks:CreateNodegroup", OTHER_CLUSTER), [EVERYTHING], _boundary())
    assert not decision.allowed, decision.reason


def test_the_stacks_own_node_groups_add_ons_and_associations_stay_the_deploys():
    cluster = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/higgsfield-prod"
    for request in (
        Request("eks:CreateNodegroup", cluster),
        Request("eks:UpdateNodegroupVersion", f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/higgsfield-prod/gpu/0123"),
        Request("eks:DeleteAddon", f"arn:aws:eks:{REGION}:{ACCOUNT}:addon/higgsfield-prod/vpc-cni/0123"),
        Request("eks:UpdateClusterVersion", cluster),
    ):
        assert evaluate(request, [_deploy()]).allowed, request.action


PROD_EU = {"stack": "prod-eu", "account": ACCOUNT, "environment": "production", "deployEnvironment": "prod-eu"}


def test_check_refuses_a_stack_whose_name_extends_another_of_its_account():
    """deploy_policy's role writes and PassOnlyTheStacksRoles name `role/higgsfield-prod-*`, and
    OnlyTheStacksProjects `project/higgsfield-prod-*`: patterns that hold every role and runner project of a stack
    `prod-eu` (role_name joins with a `-` a stack name may hold). CiIdentitiesAreAdministeredByBootstrap protects
    only the other stacks' CI identities, not their node, Karpenter, CSI or layout roles, and a StartBuild with a
    buildspecOverride on `higgsfield-prod-eu-deploy-runner` runs as prod-eu's runner role. Impact: prod's deploy (one
    stack's reviewers) would read and rewrite prod-eu's data and state and run a node in its cluster. `higgsfield
    check` refuses the pair in one account (no character spent in either ceiling)."""
    prod = config_of("prod")
    other = {**PROD_EU, "environment": prod.environment}
    (finding,) = [f for f in account_findings(prod, [other]) if "extends" in f[2]]
    assert finding[0] == "mandatory" and "prod-eu" in finding[2]


def test_check_leaves_stacks_whose_names_only_share_a_prefix_without_a_dash():
    prod = config_of("prod")
    other = {**PROD_EU, "stack": "production", "environment": prod.environment}
    assert [f for f in account_findings(prod, [other]) if "extends" in f[2]] == []


def test_the_deploy_role_cannot_destroy_the_key_the_audit_trail_is_encrypted_with():
    """AuditLogsStay keeps the control plane's and the flow logs' groups, their retention and their key
    (`*ssociateKmsKey`), but both groups are encrypted under the stack's logs key (components/logs.py LogKey;
    components/cluster.py and components/network.py pass it as kms_key_id), and the deploy role's `kms:*` may
    schedule that key's deletion or disable it: TheBackendIsTheAdministrators refuses ScheduleKeyDeletion and
    Disable* on the state key alone. CloudWatch Logs cannot read a group's events while its key is disabled, and
    they are unrecoverable once it is deleted (docs.aws.amazon.com/AmazonCloudWatch/latest/logs/
    encrypt-log-data-kms.html); ScheduleKeyDeletion takes a PendingWindowInDays of 7 (boto/botocore:botocore/data/
    kms/2014-11-01/service-2.json@1.44.18), shorter than the key's own 30, and `protect` in Pulumi binds only
    `pulumi up`, not a direct API call. Impact: the audit trail of what the deploy role did in the cluster and the
    VPC, which AuditLogsStay says outlives any deploy, made unreadable by that deploy. Fix: deny
    kms:ScheduleKeyDeletion and kms:Disable* where `kms:ResourceAliases` (ForAnyValue) is
    `alias/higgsfield-STACK-logs`, and kms:DeleteAlias/UpdateAlias on that alias, in ceiling_denials."""
    context = {**OWN_TAG, "kms:ResourceAliases": ["alias/higgsfield-prod-logs"]}
    for action in ("kms:ScheduleKeyDeletion", "kms:DisableKey"):
        decision = evaluate(Request(action, OWN_KEY, context), [_deploy()])
        assert not decision.allowed, f"{action}: {decision.reason}"


def test_no_role_under_the_boundary_destroys_the_logs_key_or_stops_the_flow_log():
    """The same requests from a role the deploy role makes under the boundary (`kms:*`, `ec2:*` on `*`): the
    boundary refuses them too (AdministratorsOnly, ceiling_denials)."""
    context = {**OWN_TAG, "kms:ResourceAliases": ["alias/higgsfield-prod-logs"]}
    for request in (
        Request("kms:ScheduleKeyDeletion", OWN_KEY, context),
        Request("kms:DisableKey", OWN_KEY, context),
        Request("ec2:DeleteFlowLogs", f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc-flow-log/fl-0stack", OWN_TAG),
    ):
        decision = evaluate(request, [EVERYTHING], _boundary())
        assert not decision.allowed, f"{request.action}: {decision.reason}"


def test_the_deploy_role_cannot_stop_the_vpcs_flow_log():
    """AuditLogsStay keeps the flow-log group, not the flow log that writes to it: `ec2:DeleteFlowLogs` (on the
    vpc-flow-log resource, which carries aws:ResourceTag: Service Authorization Reference, list_amazonec2.html) is
    allowed by `ec2:*` with no denial, and the program deletes its flow log only when the stack is destroyed
    (components/network.py aws.ec2.FlowLog, tagged with the stack's tags). So before it acts, a deploy stops the
    VPC's record of its traffic (an instance it runs, a route it adds); the group stays, empty from then on. Impact:
    the network half of the audit trail ends at the deploy's will (the control plane's half likewise by
    eks:UpdateClusterConfig turning its `audit` log type off, for which IAM has no condition key: `higgsfield diff`
    or an alarm must watch it). Fix: deny ec2:DeleteFlowLogs where `aws:ResourceTag/higgsfield:stack` is the stack
    in ceiling_denials (destroying the stack is an administrator's)."""
    request = Request(
        "ec2:DeleteFlowLogs",
        f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc-flow-log/fl-0stack",
        {"aws:ResourceTag/higgsfield:stack": "prod"},
    )
    decision = evaluate(request, [_deploy()])
    assert not decision.allowed, decision.reason


def test_the_boundary_lets_karpenter_make_the_instance_profile_of_its_node_class():
    """Every Karpenter pool's EC2NodeClass names the node role (`role`: components/karpenter.py ec2_node_class), not
    an instance profile, so Karpenter's controller makes the profile itself: CreateInstanceProfile under
    `/karpenter/REGION/CLUSTER/UID/`, then AddRoleToInstanceProfile (DefaultProvider.Create and ensureRole,
    aws/karpenter-provider-aws:pkg/providers/instanceprofile/instanceprofile.go@v1.14.1),
    and karpenter_policy grants both (AllowScopedInstanceProfileCreationActions, ...Actions). The
    controller's role is a stack role, under the boundary, whose IAM allow is IAM_ACTIONS alone (PassRole,
    CreateServiceLinkedRole, GetInstanceProfile, ListInstanceProfiles): both calls are refused, the node class never
    gets its profile and no Karpenter pool launches a node. test_boundary_iam_allow_list's Karpenter test checks only
    the reads and PassRole ("no shipped stack runs it, so no plan checks its policy"). Impact: `provisioner:
    karpenter` pools (infra/config/stack.py karpenter_pools) run nothing on any stack CI deploys. Fix: name
    iam:CreateInstanceProfile, iam:TagInstanceProfile, iam:AddRoleToInstanceProfile,
    iam:RemoveRoleFromInstanceProfile and iam:DeleteInstanceProfile in IAM_ACTIONS on `instance-profile/karpenter/*`
    (their resource: the ARN holds the path), or have the program make the profile and name it in the node class
    (`instanceProfile`), which needs only the reads."""
    cluster = "higgsfield-prod"
    node_role = f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-node-0123"
    karpenter = Policy.of("karpenter", karpenter_policy(cluster, REGION, ACCOUNT, node_role, "arn:aws:sqs:x"))
    profile = f"arn:aws:iam::{ACCOUNT}:instance-profile/karpenter/{REGION}/{cluster}/uid/{cluster}_123"
    request = Request(
        "iam:CreateInstanceProfile",
        profile,
        {
            f"aws:RequestTag/kubernetes.io/cluster/{cluster}": "owned",
            "aws:RequestTag/eks:eks-cluster-name": cluster,
            "aws:RequestTag/topology.kubernetes.io/region": REGION,
            "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "gpu",
        },
    )
    assert evaluate(request, [karpenter]).allowed  # its own policy grants it
    decision = evaluate(request, [karpenter], _boundary())
    assert decision.allowed, decision.reason


def test_the_deploy_role_cannot_suspend_the_versioning_of_the_linked_data_bucket():
    """TheDataOutlivesTheDeploy ("the linked buckets keep every version") denies s3:DeleteObjectVersion and
    s3:DeleteBucket on the data buckets, and TheBackendIsTheAdministrators denies s3:PutBucketVersioning on the state
    bucket alone; deploy_policy's `s3:*` on the data buckets still allows PutBucketVersioning, whose
    VersioningConfiguration takes Status `Suspended` (boto/botocore:botocore/data/s3/2006-03-01/service-2.json
    @1.44.18; S3 has no condition key on the status). In a suspended bucket every write and DeleteObject acts on the
    `null` version and replaces or removes it for good (docs.aws.amazon.com/AmazonS3/latest/userguide/
    VersionSuspendedBehavior.html), so from then on FSx's NEW/CHANGED exports and the deploy role's own DeleteObject
    (allowed) destroy the data without a version to restore, where components/storage.py's BucketVersioning says an
    overwrite is recoverable. The program enables versioning once, when the bucket is linked, and a link is already
    an administrator's deploy (AdministratorsOnly). Any role under the boundary (`s3:*` on the
    same buckets) can do the same. Impact: the teams' training data written after the suspension lost beyond
    recovery by a deploy. Fixed: s3:PutBucketVersioning is in DATA_DESTRUCTION (both ceilings)."""
    bucket = config_of("prod").fsx.linked_buckets[0]
    decision = evaluate(Request("s3:PutBucketVersioning", f"arn:aws:s3:::{bucket}"), [_deploy()])
    assert not decision.allowed, decision.reason


QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{interruption_queue('prod')}"


def _rule(event: str = "spot") -> str:
    return f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{interruption_rule('prod', event)}"


def test_a_stack_ci_deploys_keeps_karpenters_interruption_queue_and_rules_an_administrator_made():
    """components/karpenter.py makes an SQS queue for interruption events and EventBridge rules feeding it. The
    administrator's deploy that adds the first Karpenter pool makes the queue and the targets
    (InterruptionFeedIsTheAdministrators); the deploy role's later deploys read and tag the queue and put the rules'
    patterns."""
    for action in ("sqs:GetQueueAttributes", "sqs:TagQueue"):
        assert evaluate(Request(action, QUEUE), [_deploy()]).allowed, action
    for action in ("events:DescribeRule", "events:TagResource", "events:DeleteRule"):
        assert evaluate(Request(action, _rule()), [_deploy()]).allowed, action
    source, detail_type = INTERRUPTION_EVENTS["spot"]  # the pattern components/karpenter.py gives it
    spot = {"events:source": [source], "events:detail-type": [detail_type]}
    assert evaluate(Request("events:PutRule", _rule(), spot), [_deploy()]).allowed


def test_karpenters_controller_under_the_boundary_reads_its_queue_and_the_price_list():
    """karpenter_policy lets the controller receive from the queue and read on-demand prices; the boundary allowed
    neither sqs nor pricing, so a bounded controller could not handle a spot interruption nor refresh prices."""
    cluster, node_role = "higgsfield-prod", f"arn:aws:iam::{ACCOUNT}:role/higgsfield-prod-nodes-0123"
    karpenter = Policy.of("karpenter", karpenter_policy(cluster, REGION, ACCOUNT, node_role, QUEUE))
    for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueUrl"):
        assert evaluate(Request(action, QUEUE), [karpenter], _boundary()).allowed, action
    assert evaluate(Request("pricing:GetProducts", "*"), [karpenter], _boundary()).allowed


def test_the_deploy_role_makes_no_other_queue_nor_rule():
    """sqs and events are the deploy role's on the stack's queue and rules alone (interruption_queue,
    interruption_rule): not another stack's, nor any other of the account."""
    for queue in (
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:higgsfield-staging-interruptions",
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders",
    ):
        decision = evaluate(Request("sqs:ReceiveMessage", queue), [_deploy()])
        assert decision.reason == "no identity policy allows it", decision.reason
    other_rule = f"arn:aws:events:{REGION}:{ACCOUNT}:rule/audit-forwarder"
    source, detail_type = INTERRUPTION_EVENTS["spot"]  # a pattern the denials let through
    spot = {"events:source": [source], "events:detail-type": [detail_type]}
    decision = evaluate(Request("events:PutRule", other_rule, spot), [_deploy()])
    assert decision.reason == "no identity policy allows it", decision.reason
    bus = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default"
    assert not evaluate(Request("events:PutPermission", bus), [_deploy()]).allowed


@pytest.mark.parametrize(
    "target",
    [
        "arn:aws:events:us-east-1:111122223333:event-bus/default",  # another account's bus
        f"arn:aws:sqs:{REGION}:111122223333:collector",  # another account's queue
        f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:anything",
    ],
)
def test_the_stacks_rules_feed_its_queue_and_nothing_else(target):
    """A rule of the stack's name targeting another account's bus or queue would send the account's events there
    (API calls included, with a pattern of its choosing) for as long as it stayed."""
    decision = evaluate(Request("events:PutTargets", _rule(), {"events:TargetArn": [QUEUE, target]}), [_deploy()])
    assert decision.denied_by == ("delivery-deploy", "InterruptionFeedIsTheAdministrators"), decision.reason


@pytest.mark.parametrize("action", ["sqs:SetQueueAttributes", "sqs:AddPermission"])
def test_no_one_under_either_ceiling_rewrites_the_interruption_queues_policy(action):
    """A queue policy naming another account lets it send the controller forged interruptions, on which Karpenter
    drains and deletes nodes; IAM cannot see whom a queue policy names, so the policy is CreateQueue's and both
    writes are refused: to the deploy role, and to a role it made with `*` on `*`."""
    assert evaluate(Request(action, QUEUE), [_deploy()]).denied_by == ("delivery-deploy", "AdministratorsOnly")
    bounded = evaluate(Request(action, QUEUE), [EVERYTHING], _boundary())
    assert bounded.denied_by == ("delivery-boundary", "AdministratorsOnly"), bounded.reason


def test_a_bounded_role_reads_no_other_queue_of_the_account():
    other = f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"
    decision = evaluate(Request("sqs:ReceiveMessage", other), [EVERYTHING], _boundary())
    assert decision.reason == "not allowed by the permissions boundary delivery-boundary", decision.reason


def test_only_the_stacks_rules_may_send_to_its_interruption_queue():
    """Karpenter's template lets events.amazonaws.com send with no condition, so any account's rule could target the
    queue; queue_policy admits the stack's own rules in its own account and region."""
    policy = Policy.of("queue", queue_policy(QUEUE, "prod"))
    assert evaluate(Request("sqs:SendMessage", QUEUE, {"aws:SourceArn": _rule("state")}), [policy]).allowed
    for source in (
        f"arn:aws:events:{REGION}:111122223333:rule/{interruption_rule('prod', 'spot')}",
        f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{interruption_rule('staging', 'spot')}",
    ):
        assert not evaluate(Request("sqs:SendMessage", QUEUE, {"aws:SourceArn": source}), [policy]).allowed, source
    assert not evaluate(Request("sqs:SendMessage", QUEUE), [policy]).allowed  # no rule at all

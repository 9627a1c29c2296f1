"""Changes that slip the guard, refused by `higgsfield diff` unless allowed, each saying why (issue
#23): a Kubernetes jump of two minors, removing protect/retain in code, deleting prod's log groups
(observability off), removing a team (its namespace and claims). And the pinned-chart policy
refuses version ranges. The plans compared are the recorded prod plan and edits of it."""

from __future__ import annotations

import copy
import functools
import pickle

import pytest

from components.karpenter import INTERRUPTION_EVENTS
from infra.offline.diff import (
    BUCKET_VERSIONING,
    DATA_REPOSITORY_ASSOCIATION,
    EVENT_TARGET,
    KEY_POLICY,
    PROJECT,
    QUEUE,
    QUEUE_POLICY,
    WEBHOOK,
    compare,
    render_diff,
)
from policies import rules
from tests.conftest import config_of, plan_of, with_a_karpenter_pool


@functools.cache
def _recorded(stack: str) -> bytes:
    return pickle.dumps(plan_of(stack).as_dict())


def _prod() -> dict:
    """A copy of prod's recorded plan of the test's own, to edit: unpickled from the plan pickled once a process
    (the same objects, shared references kept, as copy.deepcopy of it gave: a third of its CPU)."""
    return pickle.loads(_recorded("prod"))


def _cluster(plan: dict) -> dict:
    return next(r for r in plan["resources"] if r["type"] == "eks:index:Cluster")


def test_a_two_minor_kubernetes_jump_is_refused_saying_eks_goes_one_minor_at_a_time():
    base, head = _prod(), _prod()
    _cluster(base)["inputs"]["version"] = "1.33"
    _cluster(head)["inputs"]["version"] = "1.35"
    (refusal,) = [r for r in compare(base, head, set()).refused if "Kubernetes" in r]
    assert "upgrade of Kubernetes on cluster-eks from 1.33 to 1.35 is refused" in refusal
    assert "one minor version at a time" in refusal and "go through 1.34 first" in refusal


def test_a_one_minor_upgrade_goes_through():
    base, head = _prod(), _prod()
    _cluster(base)["inputs"]["version"] = "1.34"
    assert compare(base, head, set()).refused == []


def test_an_allow_lets_a_two_minor_jump_through():
    base, head = _prod(), _prod()
    _cluster(base)["inputs"]["version"] = "1.33"
    assert compare(base, head, {"kubernetesVersion"}).refused == []


@pytest.mark.parametrize("option", ["protect", "retain_on_delete"])
def test_removing_protect_or_retain_in_code_is_a_refused_change(option):
    base, head = _prod(), _prod()
    kept = next(r for r in head["resources"] if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem")
    assert kept[option]
    kept[option] = False
    diff = compare(base, head, set())
    assert any(
        r.startswith(f"removing {option} from aws:fsx/lustreFileSystem:LustreFileSystem lustre is refused (")
        for r in diff.refused
    ), diff.refused
    assert f"({option}): true → false" in render_diff("prod", "base", diff)  # shown as a change, not "no change"


def test_turning_observability_off_in_prod_refuses_deleting_its_log_groups():
    base, head = _prod(), _prod()
    head["resources"] = [
        r
        for r in head["resources"]
        if not (r["type"] == "aws:cloudwatch/logGroup:LogGroup" and r["name"].startswith("monitoring-"))
    ]
    refused = compare(base, head, set()).refused
    logs = [r for r in refused if "CloudWatch log group" in r]
    teams = len(config_of("prod").scheduler.teams)  # a container-log group per team (components/container_logs.py)
    assert len(logs) == 4 + teams and all("deletes the logs in it" in r for r in logs), refused
    assert compare(base, head, {"log-groups"}).refused == []


def test_deleting_a_dev_log_group_is_not_refused():
    base = copy.deepcopy(plan_of("dev").as_dict())
    head = copy.deepcopy(base)
    head["resources"] = [r for r in head["resources"] if r["type"] != "aws:cloudwatch/logGroup:LogGroup"]
    assert not [r for r in compare(base, head, set()).refused if "log group" in r]


def test_removing_a_team_refuses_deleting_its_namespace_and_claims():
    base, head = _prod(), _prod()

    def gone(r: dict) -> bool:
        return r["name"].startswith(("teams-vision", "lustre-pvc-vision", "lustre-pv-vision"))

    head["resources"] = [r for r in head["resources"] if not gone(r)]
    refused = compare(base, head, set()).refused
    assert any(
        r.startswith("delete of namespace teams-vision is refused (Kubernetes deletes every object in a namespace")
        for r in refused
    ), refused
    assert any(r.startswith("delete of claim lustre-pvc-vision") for r in refused), refused
    assert compare(base, head, {"namespaces", "claims"}).refused == []


@pytest.mark.parametrize(
    "version", [">=1.0.0", "^1", "~1", "1.x", "*", "1.2 - 1.4", "<2.0.0", "1.0.0 || 2.0.0", "1", "1.2"]
)
def test_the_pinned_chart_policy_refuses_version_ranges(version):
    found: list[str] = []
    from pulumi_policy import ResourceValidationArgs

    args = ResourceValidationArgs(
        rules.HELM_RELEASE, {"chart": "volcano", "version": version}, "urn", "volcano", None, None, {}
    )
    rules.helm_release_pinned.validate(args, lambda message, urn=None: found.append(message))
    assert found and "is a range, not a pin" in found[0], (version, found)


@pytest.mark.parametrize("version", ["1.15.1", "v0.5.30", "88.6.5", "1.0.0-rc.1", "2.1.0+build.5"])
def test_the_pinned_chart_policy_accepts_exact_versions(version):
    found: list[str] = []
    from pulumi_policy import ResourceValidationArgs

    args = ResourceValidationArgs(
        rules.HELM_RELEASE, {"chart": "volcano", "version": version}, "urn", "volcano", None, None, {}
    )
    rules.helm_release_pinned.validate(args, lambda message, urn=None: found.append(message))
    assert found == []


def _key(plan: dict, name: str = "logs") -> dict:
    return next(r for r in plan["resources"] if r["type"] == "aws:kms/key:Key" and r["name"] == name)


def test_a_new_policy_on_a_stack_key_is_refused_naming_the_administrators_command():
    """The deploy role's policy denies kms:PutKeyPolicy: a key's policy is CreateKey's. A change to it would fail
    the deploy, so diff refuses it and says who applies it and how."""
    base, head = _prod(), _prod()
    _key(head)["inputs"]["policy"] = _key(head)["inputs"]["policy"].replace("kms:*", "kms:Decrypt")
    (refusal,) = [r for r in compare(base, head, set()).refused if "KMS key" in r]
    assert refusal.startswith("a new policy on KMS key logs is refused (")
    assert f"pulumi up --stack prod --target '{_key(head)['urn']}'" in refusal and "administrator" in refusal


def test_the_key_policy_resources_of_an_older_stack_are_forgotten_by_an_administrator_not_deleted():
    """A stack made while the keys' policies were aws.kms.KeyPolicy resources: deleting one is a PutKeyPolicy of
    AWS's default (the CloudWatch Logs statement lost), so diff names `pulumi state delete` and a refresh."""
    base, head = _prod(), _prod()
    key = _key(base)
    urn = key["urn"].replace("aws:kms/key:Key", "aws:kms/keyPolicy:KeyPolicy")
    base["resources"].append({**key, "urn": urn, "type": "aws:kms/keyPolicy:KeyPolicy", "dependencies": [key["urn"]]})
    del key["inputs"]["policy"]
    refused = compare(base, head, set()).refused
    (forget,) = [r for r in refused if r.startswith("delete of key policy logs")]
    assert f"pulumi state delete --stack prod '{urn}'" in forget
    assert f"pulumi refresh --stack prod --target '{key['urn']}'" in forget
    assert any(r.startswith("a new policy on KMS key logs") for r in refused)


def test_an_unchanged_key_policy_goes_through():
    assert [r for r in compare(_prod(), _prod(), set()).refused if "key" in r.lower()] == []


def test_a_key_policy_resource_added_is_refused():
    base, head = _prod(), _prod()
    key = _key(head)
    head["resources"].append(
        {**key, "urn": key["urn"].replace("aws:kms/key:Key", "aws:kms/keyPolicy:KeyPolicy"), "type": KEY_POLICY}
    )
    assert any(
        r.startswith("aws.kms.KeyPolicy logs is refused (it is a PutKeyPolicy")
        for r in compare(base, head, set()).refused
    )


def _log_group(plan: dict, name: str) -> dict:
    return next(
        r for r in plan["resources"] if r["type"] == "aws:cloudwatch/logGroup:LogGroup" and r["inputs"]["name"] == name
    )


@pytest.mark.parametrize("group", ["/aws/eks/higgsfield-prod/cluster", "/aws/vpc/higgsfield-prod/flow-logs"])
def test_a_new_retention_on_an_audit_log_group_is_refused_naming_the_administrators_command(group):
    """The deploy role's policy denies logs:PutRetentionPolicy on the audit trail (AuditLogsStay): the change would
    fail the deploy, so diff refuses it and says who applies it."""
    base, head = _prod(), _prod()
    _log_group(head, group)["inputs"]["retentionInDays"] = 1
    (refusal,) = [r for r in compare(base, head, set()).refused if "audit log group" in r]
    assert refusal.startswith("a new retentionInDays on audit log group")
    assert f"pulumi up --stack prod --target '{_log_group(head, group)['urn']}'" in refusal


def test_a_new_trust_on_a_stack_role_is_refused_naming_the_administrators_command():
    """The deploy role's policy denies iam:UpdateAssumeRolePolicy (TrustIsSetAtCreate): IAM cannot see whom a trust
    names. A change to one would fail the deploy, so diff refuses it and says who applies it."""
    base, head = _prod(), _prod()
    role = next(r for r in head["resources"] if r["type"] == "aws:iam/role:Role" and r["name"] == "cluster-service")
    role["inputs"]["assumeRolePolicy"] = role["inputs"]["assumeRolePolicy"].replace(
        "eks.amazonaws.com", "ec2.amazonaws.com"
    )
    (refusal,) = [r for r in compare(base, head, set()).refused if "trust policy" in r]
    assert refusal.startswith("a new trust policy on IAM role cluster-service is refused (")
    assert f"pulumi up --stack prod --target '{role['urn']}'" in refusal


def _association(plan: dict) -> dict:
    return next(r for r in plan["resources"] if r["type"] == DATA_REPOSITORY_ASSOCIATION)


def test_a_new_link_of_the_file_system_to_a_bucket_is_refused_naming_the_administrators_command():
    """The deploy role's policy denies fsx:CreateDataRepositoryAssociation (AdministratorsOnly): no
    IAM condition key names the bucket, so every link is an administrator's, and diff says so before the deploy
    fails."""
    base, head = _prod(), _prod()
    base["resources"].remove(_association(base))
    (refusal,) = [r for r in compare(base, head, set()).refused if "data repository association" in r]
    assert refusal.startswith("a new FSx data repository association lustre-s3 is refused (")
    assert f"pulumi up --stack prod --target '{_association(head)['urn']}'" in refusal


def test_moving_the_link_to_another_bucket_is_refused_naming_the_administrators_command():
    base, head = _prod(), _prod()
    _association(head)["inputs"]["dataRepositoryPath"] = "s3://someone-elses-bucket/train"
    (refusal,) = [r for r in compare(base, head, set()).refused if "data repository association" in r]
    assert refusal.startswith("a replaced FSx data repository association lustre-s3 is refused (")


def test_the_links_auto_export_policy_goes_through():
    """UpdateDataRepositoryAssociation cannot move the path: it stays the deploy's."""
    base, head = _prod(), _prod()
    _association(head)["inputs"]["s3"]["autoExportPolicy"]["events"] = ["NEW"]
    assert [r for r in compare(base, head, set()).refused if "data repository association" in r] == []


def _versioning(plan: dict) -> dict:
    return next(r for r in plan["resources"] if r["type"] == BUCKET_VERSIONING)


def test_a_new_versioning_of_the_linked_bucket_is_refused_naming_the_administrators_command():
    """The deploy role's policy denies s3:PutBucketVersioning on the data buckets (TheDataOutlivesTheDeploy: no IAM
    key tells Enabled from Suspended), so the versioning made beside a new link is an administrator's too."""
    base, head = _prod(), _prod()
    base["resources"].remove(_versioning(base))
    (refusal,) = [r for r in compare(base, head, set()).refused if "BucketVersioning" in r]
    assert refusal.startswith(
        "a new BucketVersioning lustre-s3-versioning is refused (the deploy role may not set a linked data bucket"
    )
    assert f"pulumi up --stack prod --target '{_versioning(head)['urn']}'" in refusal


def test_suspending_the_linked_buckets_versioning_in_code_is_refused():
    base, head = _prod(), _prod()
    _versioning(head)["inputs"]["versioningConfiguration"]["status"] = "Suspended"
    (refusal,) = [r for r in compare(base, head, set()).refused if "BucketVersioning" in r]
    assert refusal.startswith("a changed BucketVersioning lustre-s3-versioning is refused (")


def _reader(plan: dict, team: str) -> dict:
    return next(r for r in plan["resources"] if r["name"] == f"monitoring-logs-team-{team}-reader")


def test_a_new_teams_log_reader_policy_is_refused_naming_the_administrators_deploy():
    """The deploy role's policy allows no iam:CreatePolicy: a new team's managed policy would fail the deploy
    half way, so diff says so first, and who deploys it."""
    base, head = _prod(), _prod()
    base["resources"].remove(_reader(base, "vision"))
    (refusal,) = [r for r in compare(base, head, set()).refused if "managed policy" in r]
    assert refusal.startswith("a new IAM managed policy monitoring-logs-team-vision-reader is refused (")
    assert "pulumi up --stack prod --policy-pack policies --policy-pack-config policies/config/prod.json (" in refusal


@pytest.mark.parametrize("field", ["policy", "tags"])
def test_a_change_to_a_managed_policy_of_the_stack_is_refused_naming_the_administrators_command(field):
    """ManagedPoliciesAreFixed denies every write of a managed policy, its tags included (a new default version
    would grant its holders anything)."""
    base, head = _prod(), _prod()
    reader = _reader(head, "llm")
    if field == "policy":
        reader["inputs"]["policy"] = '{"Version": "2012-10-17", "Statement": []}'
    else:
        reader["inputs"]["tags"] = {**reader["inputs"].get("tags", {}), "cost-center": "42"}
    (refusal,) = [r for r in compare(base, head, set()).refused if "managed policy" in r]
    assert "IAM managed policy monitoring-logs-team-llm-reader is refused (" in refusal
    assert f"pulumi up --stack prod --target '{reader['urn']}'" in refusal


def test_an_unchanged_managed_policy_goes_through():
    assert [r for r in compare(_prod(), _prod(), set()).refused if "managed policy" in r] == []


def _flow_log(plan: dict) -> dict:
    return next(r for r in plan["resources"] if r["type"] == "aws:ec2/flowLog:FlowLog")


def test_replacing_the_vpcs_flow_log_is_refused_naming_the_administrators_command():
    """Both ceilings deny ec2:DeleteFlowLogs (the audit trail): a replacement would fail the deploy half way."""
    base, head = _prod(), _prod()
    _flow_log(head)["inputs"]["trafficType"] = "REJECT"
    (refusal,) = [r for r in compare(base, head, set()).refused if "flow log" in r]
    assert refusal.startswith("replacement of VPC flow log network-flow-logs is refused (")
    assert f"pulumi up --stack prod --target '{_flow_log(head)['urn']}'" in refusal


def test_deleting_the_vpcs_flow_log_is_refused():
    base, head = _prod(), _prod()
    head["resources"].remove(_flow_log(head))
    assert [r for r in compare(base, head, set()).refused if r.startswith("delete of VPC flow log")]


def _staging() -> dict:
    return pickle.loads(_recorded("staging"))


def test_deleting_a_key_the_stack_does_not_retain_is_refused_naming_the_administrators_command():
    """Both ceilings deny kms:ScheduleKeyDeletion on every key (components/delivery.py AUDIT_TRAIL_ENDS), and
    pulumi-aws deletes a key with ScheduleKeyDeletion (resourceKeyDelete, hashicorp/terraform-provider-aws:
    internal/service/kms/key.go@00a35305, the stored copy): where the key is not retained on delete (staging's
    are not: protect is prod's), `--allow lustre-key` lets a CI deploy through to a refused call half way, the
    file system already gone, and every later deploy retries it. Staging drops its Lustre key when its
    deployment type leaves PERSISTENT_2 (components/storage.py)."""
    base, head = _staging(), _staging()
    key = _key(head, "lustre-key")
    assert not key["retain_on_delete"]
    head["resources"].remove(key)
    (refusal,) = [r for r in compare(base, head, set()).refused if "KMS key" in r]
    assert refusal.startswith("delete of KMS key lustre-key is refused (")
    assert f"pulumi up --stack staging --target '{key['urn']}'" in refusal


def _with_queue(plan: dict, **inputs) -> dict:
    """A stack with Karpenter's interruption queue (and, as deployed before its policy was CreateQueue's, an
    aws.sqs.QueuePolicy when `policy_resource`)."""
    queue = copy.deepcopy(_flow_log(plan))
    queue.update(
        type=QUEUE, name="karpenter-interruptions", urn=_flow_log(plan)["urn"].replace("flowLog:FlowLog", "queue:Queue")
    )
    queue["inputs"] = {"name": "higgsfield-prod-interruptions", "messageRetentionSeconds": 300, "tags": {}, **inputs}
    plan["resources"].append(queue)
    return queue


def test_a_new_attribute_on_the_interruption_queue_is_refused_naming_the_administrators_command():
    """Both ceilings deny sqs:SetQueueAttributes (IAM cannot see whom a queue policy names), which pulumi-aws calls
    for any change of a queue but its tags: a CI deploy would fail half way."""
    base, head = _prod(), _prod()
    _with_queue(base)
    queue = _with_queue(head, messageRetentionSeconds=600)
    (refusal,) = [r for r in compare(base, head, set()).refused if "SQS queue" in r]
    assert refusal.startswith(
        "new attributes on SQS queue karpenter-interruptions (messageRetentionSeconds) is refused ("
    )
    assert f"pulumi up --stack prod --target '{queue['urn']}'" in refusal


def test_new_tags_on_the_interruption_queue_go_through():
    base, head = _prod(), _prod()
    _with_queue(base)
    _with_queue(head, tags={"team": "platform"})
    assert [r for r in compare(base, head, set()).refused if "SQS queue" in r] == []


def test_deleting_a_queue_policy_resource_is_refused_naming_the_state_delete():
    """A stack deployed before the queue's policy was CreateQueue's holds an aws.sqs.QueuePolicy, whose delete is
    a SetQueueAttributes neither ceiling allows."""
    base, head = _prod(), _prod()
    policy = _with_queue(base)
    policy.update(type=QUEUE_POLICY, name="karpenter-interruptions-policy", urn=policy["urn"] + "Policy")
    (refusal,) = [r for r in compare(base, head, set()).refused if "queue policy" in r]
    assert f"pulumi state delete --stack prod '{policy['urn']}'" in refusal


def _with_rule(plan: dict, **inputs) -> dict:
    """One of Karpenter's EventBridge rules, named by the stack (or generated, without `name`)."""
    rule = copy.deepcopy(_flow_log(plan))
    rule.update(
        type="aws:cloudwatch/eventRule:EventRule",
        name="karpenter-spot",
        urn=_flow_log(plan)["urn"].replace("ec2/flowLog:FlowLog", "cloudwatch/eventRule:EventRule"),
    )
    rule["inputs"] = {"name": "higgsfield-prod-karpenter-spot", "tags": {}, **inputs}
    plan["resources"].append(rule)
    return rule


def _generated_names(*resources: dict) -> None:
    """As an administrator deployed Karpenter before the stack named its queue and rules: no `name` input."""
    for resource in resources:
        del resource["inputs"]["name"]


def test_naming_an_administrator_deployed_interruption_queue_is_refused_naming_the_administrators_command():
    """A queue deployed with a generated name (`karpenter-interruptions-1a2b3c4`) is replaced by the stack's
    (`name` is ForceNew): the deploy makes the new one and then deletes the old, whose name is outside the deploy
    role's `sqs:*` (components/delivery.py deploy_policy names interruption_queue alone), so the deploy fails half
    way, the old queue and its rules left behind."""
    base, head = _prod(), _prod()
    _generated_names(_with_queue(base))
    _with_queue(head)
    (refusal,) = [r for r in compare(base, head, set()).refused if "SQS queue" in r]
    assert refusal.startswith("replacement of SQS queue karpenter-interruptions is refused (")
    assert "pulumi up --stack prod" in refusal


def test_naming_an_administrator_deployed_interruption_rule_is_refused_naming_the_administrators_command():
    """The same of each EventBridge rule: `name` is ForceNew (hashicorp/terraform-provider-aws:internal/service/
    events/rule.go@0cdab4ae), and events:DeleteRule and RemoveTargets on a generated name are outside the deploy
    role's `events:*` (interruption_rule)."""
    base, head = _prod(), _prod()
    _generated_names(_with_rule(base))
    _with_rule(head)
    (refusal,) = [r for r in compare(base, head, set()).refused if "EventBridge rule" in r]
    assert refusal.startswith("replacement of EventBridge rule karpenter-spot is refused (")
    assert "pulumi up --stack prod" in refusal


def test_removing_the_interruption_queue_of_the_stacks_name_is_refused_naming_the_administrators_command():
    """The deploy role may not DeleteQueue (components/delivery.py InterruptionFeedIsTheAdministrators: a queue made
    again could carry a policy IAM cannot see), so removing the last Karpenter pool would fail half way."""
    base, head = _prod(), _prod()
    _with_queue(base)
    (refusal,) = [r for r in compare(base, head, set()).refused if "SQS queue" in r]
    assert refusal.startswith("delete of SQS queue karpenter-interruptions is refused (")
    assert "sqs:DeleteQueue" in refusal and "pulumi up --stack prod" in refusal


def test_removing_a_rule_of_the_stacks_name_goes_through():
    base, head = _prod(), _prod()
    _with_rule(base)
    assert [r for r in compare(base, head, set()).refused if "EventBridge rule" in r] == []


def _role_policy(plan: dict, name: str) -> dict:
    return next(r for r in plan["resources"] if r["type"] == "aws:iam/rolePolicy:RolePolicy" and r["name"] == name)


def test_a_new_ceiling_for_the_deploy_role_is_refused_naming_bootstrap():
    """The deploy role's own inline policy is a CI identity's (CiIdentitiesAreAdministeredByBootstrap denies its
    PutRolePolicy): a release that changes it, as round 9's Karpenter grants did, failed a CI deploy half way."""
    base, head = _prod(), _prod()
    _role_policy(base, "delivery-deploy")["inputs"]["policy"] = '{"Version": "2012-10-17", "Statement": []}'
    (refusal,) = [r for r in compare(base, head, set()).refused if "CI identity" in r]
    assert refusal.startswith("change of CI identity policy delivery-deploy is refused (")
    assert "higgsfield bootstrap prod" in refusal


def test_a_stack_ci_deploys_upgrading_to_the_deploy_roles_managed_denials_is_sent_to_an_administrator():
    """The release that gives the deploy role its managed policy (components/delivery.py deploy_denials_policy): the
    deploy role may create no managed policy and attach none but AWS's (OnlyTheProgramsManagedPolicies; its own
    role's attachments: CiIdentitiesAreAdministeredByBootstrap), so a CI deploy of that release would fail at
    CreatePolicy. The diff of a base without the policy refuses both the policy and its attachment, the latter
    naming `higgsfield bootstrap`."""
    base, head = _prod(), _prod()
    base["resources"] = [r for r in base["resources"] if r["name"] != "delivery-deploy-denials"]
    refused = compare(base, head, set()).refused
    assert [r for r in refused if r.startswith("a new IAM managed policy delivery-deploy-denials is refused (")]
    (attachment,) = [r for r in refused if r.startswith("new CI identity policy attachment delivery-deploy-denials")]
    assert "higgsfield bootstrap prod" in attachment


def test_a_ci_identitys_refusal_names_the_administrators_pulumi_up_not_only_bootstrap():
    """`higgsfield bootstrap STACK` only prints steps: the command that applies a CI identity's change is the
    administrator's `pulumi up --stack STACK`, the same one the release's other administrator refusals name, so an
    upgrade that changes the deploy role's policies reads as one command to run."""
    base, head = _prod(), _prod()
    _role_policy(base, "delivery-deploy")["inputs"]["policy"] = '{"Version": "2012-10-17", "Statement": []}'
    (refusal,) = [r for r in compare(base, head, set()).refused if "CI identity" in r]
    assert (
        "with administrator credentials (outside the deploy role's policy), before the merge that CI deploys: "
        "pulumi up --stack prod" in refusal
    )
    assert "which applies it" not in refusal


def test_a_new_managed_policy_attached_to_a_stack_role_that_is_no_ci_identity_is_not_a_ci_identitys_change():
    base, head = _prod(), _prod()
    attachments = [r for r in base["resources"] if r["type"] == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"]
    base["resources"].remove(next(r for r in attachments if r["name"] != "delivery-deploy-denials"))
    assert [r for r in compare(base, head, set()).refused if "CI identity" in r] == []


def test_a_runners_new_network_interface_policy_is_refused_naming_bootstrap():
    base, head = _prod(), _prod()
    base["resources"].remove(_role_policy(base, "delivery-deploy-runner-eni"))
    assert [
        r
        for r in compare(base, head, set()).refused
        if r.startswith("new CI identity policy delivery-deploy-runner-eni")
    ]


def test_a_new_policy_of_a_stack_role_that_is_no_ci_identity_goes_through():
    base, head = _prod(), _prod()
    _role_policy(base, "lustre-csi")["inputs"]["policy"] = '{"Version": "2012-10-17", "Statement": []}'
    assert [r for r in compare(base, head, set()).refused if "CI identity" in r] == []


def test_adding_the_first_karpenter_pool_is_refused_naming_the_administrators_deploy(tmp_path):
    """Karpenter's interruption queue and its rules' targets are an administrator's to make (components/delivery.py
    InterruptionFeedIsTheAdministrators): a CI deploy of the first Karpenter pool would fail at CreateQueue. The diff
    of staging against the same stack with a Karpenter pool refuses the queue and each target, naming the command."""
    base, head = plan_of("staging").as_dict(), with_a_karpenter_pool(tmp_path, "staging").as_dict()
    refused = compare(base, head, set()).refused
    queues = [r for r in refused if r.startswith("a new SQS queue karpenter-interruptions is refused (")]
    targets = [r for r in refused if r.startswith("a new EventBridge target karpenter-")]
    assert len(queues) == 1 and len(targets) == len(INTERRUPTION_EVENTS), refused
    assert all(
        "sqs:CreateQueue and events:PutTargets" in r and "pulumi up --stack staging" in r for r in queues + targets
    )


def test_a_changed_interruption_target_is_refused_naming_the_administrators_deploy():
    """pulumi-aws updates an EventTarget with PutTargets, which the deploy role's policy denies."""
    base, head = _prod(), _prod()
    for plan, arn in ((base, "arn:aws:sqs:us-east-2:1:old"), (head, "arn:aws:sqs:us-east-2:1:new")):
        target = _with_rule(plan, arn=arn)
        target.update(type=EVENT_TARGET, urn=target["urn"].replace("eventRule:EventRule", "eventTarget:EventTarget"))
    (refusal,) = [r for r in compare(base, head, set()).refused if "EventBridge target" in r]
    assert refusal.startswith("a changed EventBridge target karpenter-spot is refused (")


def _webhook(plan: dict) -> dict:
    return next(r for r in plan["resources"] if r["type"] == WEBHOOK)


def test_a_changed_runner_webhook_is_refused_naming_the_administrators_command():
    """The deploy role's policy denies UpdateWebhook (components/delivery.py RunnersAreTheAdministrators: IAM cannot
    see a webhook's filter groups), so a release or a config change that changes whose workflows a runner takes
    (an actor added to the preview runner) would fail a CI deploy half way."""
    base, head = _prod(), _prod()
    _webhook(base)["inputs"]["filterGroups"] = []
    (refusal,) = [r for r in compare(base, head, set()).refused if "CodeBuild webhook" in r]
    assert refusal.startswith(f"a changed CodeBuild webhook {_webhook(head)['name']} is refused (")
    assert "may not make or change a runner's project or webhook" in refusal and "pulumi up --stack prod" in refusal


def test_turning_a_runner_on_is_refused_at_its_new_webhooks():
    base, head = _prod(), _prod()
    base["resources"] = [r for r in base["resources"] if r["type"] != WEBHOOK]
    refused = [r for r in compare(base, head, set()).refused if "CodeBuild webhook" in r]
    assert refused and all(r.startswith("a new CodeBuild webhook ") for r in refused)


def test_a_runner_image_bump_is_refused_naming_the_administrators_command():
    """A release that moves the runners' image changes their projects, which only an administrator may."""
    base, head = _prod(), _prod()
    project = next(r for r in base["resources"] if r["type"] == PROJECT)
    project["inputs"]["environment"] = {**project["inputs"]["environment"], "image": "an-older-image"}
    (refusal,) = [r for r in compare(base, head, set()).refused if "CodeBuild project" in r]
    assert refusal.startswith(f"a changed CodeBuild project {project['name']} is refused (")


def test_an_administrators_refusal_says_its_command_runs_before_the_merge():
    """CI's deploy of the merge would be refused the same call, failing half way: the administrator's command comes
    first (docs/upgrading.md, "A release the deploy role may not apply"), and the refusal says so where it names it."""
    base, head = _prod(), _prod()
    base["resources"] = [r for r in base["resources"] if r["name"] != "delivery-deploy-denials"]
    (policy,) = [r for r in compare(base, head, set()).refused if r.startswith("a new IAM managed policy")]
    assert "before the merge that CI deploys: pulumi up --stack prod" in policy


def test_an_administrators_command_runs_the_policy_pack_as_cis_deploy_does():
    """A deploy by hand with administrator credentials meets the same guards as CI's (.github/workflows/deploy.yml
    policyPacks, policyPackConfigs): without them the replacement guard and the rest of the pack are skipped."""
    base, head = _prod(), _prod()
    base["resources"] = [r for r in base["resources"] if r["name"] != "delivery-deploy-denials"]
    (policy,) = [r for r in compare(base, head, set()).refused if r.startswith("a new IAM managed policy")]
    assert "pulumi up --stack prod --policy-pack policies --policy-pack-config policies/config/prod.json" in policy


def _repository(plan: dict) -> dict:
    return next(r for r in plan["resources"] if r["type"] == "aws:ecr/repository:Repository")


def test_a_new_tag_mutability_on_the_training_repository_is_refused_naming_the_administrators_command():
    """The deploy role's policy denies ecr:PutImageTagMutability (ImagesAreTheImageRoles), which pulumi-aws calls when
    the repository's setting changes: a CI deploy would fail half way, so the administrator's command is named."""
    base, head = _prod(), _prod()
    _repository(head)["inputs"]["imageTagMutability"] = "MUTABLE"
    (refusal,) = [r for r in compare(base, head, set()).refused if "tag mutability" in r]
    assert "ecr:PutImageTagMutability" in refusal
    assert f"pulumi up --stack prod --target '{_repository(head)['urn']}'" in refusal


def test_the_training_repositorys_other_changes_go_through():
    base, head = _prod(), _prod()
    _repository(head)["inputs"]["imageScanningConfiguration"] = {"scanOnPush": False}
    assert [r for r in compare(base, head, set()).refused if "tag mutability" in r] == []

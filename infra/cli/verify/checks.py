"""The checks of `higgsfield verify`, in the order of the day-one journey (docs/day-one-journey.md):
the account's cluster and node groups, then the cluster's controllers, the objects the cluster made,
queues, admission, the health gate, GPU nodes and logs, then the trials (with --allow-cost; the node
loss also with --disruptive), then what is not automated, each with its command. docs/verify.md says
what each proves and the rights it needs."""

from __future__ import annotations

import base64
import datetime
import fnmatch
import itertools
import json
import posixpath
import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import yaml
from botocore import exceptions as aws_errors

from components import storage
from components.addons import KUBELET_LOG_MONITORS, MONITORS_ANNOTATION, MONITORS_SETTINGS
from components.identity import POD_IDENTITY_SERVICE, SESSION_TAGS
from components.karpenter import CLUSTER_NAME_TAG, NODECLASS_TAG, NODEPOOL_TAG, karpenter_policy
from components.karpenter import CONTROLLER_IMAGE as KARPENTER_IMAGE
from components.karpenter import DEPLOYMENT as KARPENTER_DEPLOYMENT
from components.karpenter import NAMESPACE as KARPENTER_NAMESPACE
from components.karpenter import SERVICE_ACCOUNT as KARPENTER_ACCOUNT
from components.tenancy import (
    CPU_SERVICES_SHAPE,
    ON_TEAM_CPU_NODES_BY_VOLCANO,
    SCHEDULER,
    SELECTS_TEAM_CPU_NODES,
    WITHOUT_GPUS_OFF_GPU_NODES,
)
from infra.cli.preflight import DENIED_CODES
from infra.cli.verify import Outcome, Spec, failed, passed, skipped
from infra.config import CPU_SERVICE_PRIORITY_CLASS
from infra.core import names, versions
from infra.offline import crd_schemas
from infra.offline.diff import BUCKET_VERSIONING, REPOSITORY
from infra.offline.evaluate import COMPUTED
from infra.offline.pods import gpus_of, on_team_cpu_nodes, request_in_full

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
EKS_CLUSTER = "eks:index:Cluster"
SCHEDULE = "aws:autoscaling/schedule:Schedule"
VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
VAP_BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
# What the API server writes into a binding's matchResources that the plan leaves out (SetDefaults_MatchResources,
# kubernetes/kubernetes:pkg/apis/admissionregistration/v1beta1/defaults.go, a stored copy whose ref was not read; v1
# keeps the v1beta1 types' defaults): a planned binding and its live copy are compared with these on both sides.
MATCH_RESOURCES_DEFAULTS = {"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}}
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
CRON_JOB = "kubernetes:batch/v1:CronJob"
# A planned CronJob (the gang deadline's runs every minute) is late once its last success is older than this.
CRON_JOB_LATE_S = 10 * 60
AUTOSCALER = "higgsfield:autoscaler:ClusterAutoscaler"
VOLCANO_GROUP, VOLCANO_VERSION = "scheduling.volcano.sh", "v1beta1"
ATTACK_NAME = "higgsfield-verify-attack"
TRIAL_JOB_NAME = names.JOB_NAME_PREFIXES["TFJob"] + ATTACK_NAME
# A controller the operator's webhook accepts in runPolicy.managedBy (MultiKueueController,
# kubeflow/trainer:pkg/apis/kubeflow.org/v1/common_types.go@v1.9.4), which the team policy refuses.
OTHER_MANAGER = "kueue.x-k8s.io/multikueue"
ATTACK_FINALIZER = "higgsfield.io/verify-attack"  # a finalizer no controller removes
# What the misnamed job would run were it admitted and resumed (it is neither): any image.
ATTACK_IMAGE = "public.ecr.aws/docker/library/busybox:1.37"

# The controllers' leader-election Leases (docs/controllers.md cites each at its pinned ref): the
# Training Operator's (kubeflow/trainer:cmd/training-operator.v1/main.go@v1.9.4 --leader-election-id
# default), the Cluster Autoscaler's (kubernetes/autoscaler:cluster-autoscaler/main.go@
# cluster-autoscaler-1.35.2, name `cluster-autoscaler` in the release namespace). Volcano's scheduler
# and controllers lock in volcano-system (installer/helm/chart/volcano/templates/scheduler.yaml@v1.15.1
# --leader-elect-resource-namespace): every Lease there must be held and fresh, and there are two.
# Each with whether the stack runs that controller: a stack of Karpenter pools only runs no autoscaler.
LEASES: tuple[tuple[str, str, str, Callable[[Any], bool]], ...] = (
    ("kubeflow", "1ca428e5.training-operator.kubeflow.org", "the Training Operator", lambda ctx: True),
    (names.KUBE_SYSTEM, "cluster-autoscaler", "the Cluster Autoscaler", lambda ctx: bool(ctx.plan.of_type(AUTOSCALER))),
    # the only Lease its chart's Role lets it write (resourceNames: aws/karpenter-provider-aws:charts/karpenter/
    # templates/role.yaml@v1.14.1), in its release's namespace (components/karpenter.py NAMESPACE)
    (names.KUBE_SYSTEM, "karpenter-leader-election", "Karpenter", lambda ctx: bool(ctx.config.karpenter_pools)),
)
VOLCANO_NAMESPACE, VOLCANO_LEASES = "volcano-system", 2
# The webhook that moves a PodGroup to its namespace's queue (components/training.py enables
# /podgroups/mutate; docs/day-one-journey.md step 6 names the configuration).
PODGROUP_WEBHOOK = "volcano-admission-service-podgroups-mutate"
# The Cluster Autoscaler's status ConfigMap (kube-system, `--status-config-map-name` default) and its
# health condition's values Healthy/Unhealthy (kubernetes/autoscaler:cluster-autoscaler/clusterstate/
# api/types.go, a stored version, not the pinned tag): written as YAML (`clusterWide.health.status`)
# by newer releases, as text (`Health: Healthy`) by older ones; both are read.
AUTOSCALER_STATUS = "cluster-autoscaler-status"

# Pulumi's Server-Side Apply field manager, `pulumi-kubernetes-<random suffix>` (pulumi/pulumi-kubernetes#2271):
# beside the creator's, it shows the plan's patch took its fields over.
PULUMI_MANAGER = "pulumi-kubernetes"
LOG_DAYS, LOG_PAGES = 7, 20  # how far back a job's records are looked for, and how many pages at most


def _iso(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- the account -----------------------------------------------------------------------------------


def _region_of(arn: str) -> str:
    return arn.split(":")[3]


def bootstrap(ctx: Any) -> Outcome:
    """What `higgsfield bootstrap` had an administrator make (journey step 1): the state bucket
    versioned, the secrets key enabled, the runners' GitHub connection completed in the console."""
    delivery = ctx.config.delivery
    if delivery is None:
        return skipped("no higgsfield:delivery: CI does not deploy this stack")
    problems: list[str] = []
    seen: list[str] = []
    versioning = ctx.client("s3").get_bucket_versioning(Bucket=delivery.state_bucket).get("Status", "never enabled")
    (seen if versioning == "Enabled" else problems).append(
        f"state bucket {delivery.state_bucket}: versioning {versioning}"
    )
    if delivery.state_key_arn:
        kms = ctx.client("kms", _region_of(delivery.state_key_arn))
        state = kms.describe_key(KeyId=delivery.state_key_arn)["KeyMetadata"]["KeyState"]
        (seen if state == "Enabled" else problems).append(f"secrets key: {state}")
    runner = delivery.runner
    if runner.enabled and runner.connection_arn:
        connections = ctx.client("codeconnections", _region_of(runner.connection_arn))
        status = connections.get_connection(ConnectionArn=runner.connection_arn)["Connection"]["ConnectionStatus"]
        (seen if status == "AVAILABLE" else problems).append(f"GitHub connection: {status}")
    if problems:
        return failed(
            "; ".join(problems),
            "`higgsfield bootstrap STACK` prints each step; a PENDING connection is completed in the console "
            "(Developer Tools > Connections > Update pending connection)",
        )
    return passed("; ".join(seen))


def _described_cluster(ctx: Any) -> dict:
    """DescribeCluster's `cluster` of the stack's cluster, asked once a run: aws.cluster asks first, and the checks
    after it that read the cluster's issuer or network take its answer."""
    if "cluster" not in ctx.found:
        name = names.cluster_name(ctx.config.stack)
        ctx.found["cluster"] = ctx.client("eks").describe_cluster(name=name)["cluster"]
    return ctx.found["cluster"]


def _runner_projects(ctx: Any, projects: list[str]) -> list[dict]:
    """BatchGetProjects' `projects` of the runner projects, asked once a run for aws.runner-webhooks and
    aws.runner-projects alike."""
    key = "codebuild_projects:" + ",".join(sorted(projects))
    if key not in ctx.found:
        ctx.found[key] = ctx.client("codebuild").batch_get_projects(names=sorted(projects)).get("projects", [])
    return ctx.found[key]


def cluster(ctx: Any) -> Outcome:
    cfg = ctx.config
    name = names.cluster_name(cfg.stack)
    info = _described_cluster(ctx)
    ctx.found["endpoint"] = info.get("endpoint", "")
    seen = f"{name}: {info.get('status')}, Kubernetes {info.get('version')}"
    # A cluster made before access entries reports no accessConfig; CreateCluster's authenticationMode defaults to
    # CONFIG_MAP (botocore's eks service model, CreateAccessConfigRequest), the aws-auth ConfigMap the stack does not
    # manage deciding who administers the cluster: it fails as CONFIG_MAP does.
    mode = (info.get("accessConfig") or {}).get("authenticationMode") or "CONFIG_MAP (not reported)"
    if info.get("status") != "ACTIVE":
        return failed(seen, f"wait for ACTIVE (`aws eks describe-cluster --name {name}`), or rerun `pulumi up`")
    if info.get("version") != cfg.kubernetes_version:
        return failed(
            f"{seen}; the stack pins {cfg.kubernetes_version}",
            "run `pulumi up` (docs/upgrading.md: one minor at a time)",
        )
    if mode != "API":
        return failed(f"{seen}, authentication mode {mode}", "the stack uses API mode: rerun `pulumi up`")
    off = _logs_off(ctx, info)
    if off:
        # No IAM condition key says which log types an eks:UpdateClusterConfig switches off
        # (docs/security-ci.md): the deploy role can, and `pulumi up` alone does not see the drift.
        return failed(
            f"{seen}; control-plane logs off: {', '.join(off)}",
            f"`pulumi refresh` then `pulumi up` as an administrator turns them back on; CloudTrail's "
            f"UpdateClusterConfig events on {name} say who switched them off",
        )
    return passed(f"{seen}, authentication {mode}, control-plane logs on")


def _logs_off(ctx: Any, info: dict) -> list[str]:
    """The control-plane log types the plan sends (the audit log among them) that the live cluster does not:
    DescribeCluster's `logging.clusterLogging`, a list of {types, enabled} (botocore's eks service model, Logging
    and LogSetup)."""
    planned = {t for c in ctx.plan.of_type(EKS_CLUSTER) for t in c.inputs.get("enabledClusterLogTypes") or []}
    sent = {
        t
        for entry in (info.get("logging") or {}).get("clusterLogging") or []
        if entry.get("enabled")
        for t in entry.get("types") or []
    }
    return sorted(planned - sent)


def no_irsa_provider(ctx: Any) -> Outcome:
    """No IAM OIDC identity provider for the cluster's issuer: pods get AWS roles through EKS Pod Identity
    (docs/design/control-plane.md; the program sets createOidcProvider false). With one, a role whose trust names
    it could be assumed with a service account token of the cluster, outside the Pod Identity associations."""
    name = names.cluster_name(ctx.config.stack)
    cluster = _described_cluster(ctx)
    issuer = ((cluster.get("identity") or {}).get("oidc") or {}).get("issuer") or ""
    host = issuer.removeprefix("https://")
    iam = ctx.client("iam")
    providers = [p["Arn"] for p in iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]]
    found = [arn for arn in providers if host and arn.endswith(f":oidc-provider/{host}")]
    if found:
        return failed(
            f"{found[0]} trusts the cluster's service account tokens",
            "an administrator reads which roles trust it (`aws iam list-roles`, their AssumeRolePolicyDocument), "
            f"moves them to Pod Identity, then `aws iam delete-open-id-connect-provider --open-id-connect-provider-arn "
            f"{found[0]}`",
        )
    return passed(f"no IAM OIDC provider for {issuer or name + ' (no issuer)'}: pods use Pod Identity")


def _answer(call: Callable[..., dict], absent: str, **asked: Any) -> dict | None:
    """`call(**asked)`'s answer, None where AWS answers the error code `absent` (what was asked for is not there:
    no such repository, add-on, role, lifecycle configuration); any other error is raised."""
    try:
        return call(**asked)
    except aws_errors.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != absent:
            raise
        return None


def _cluster_groups(ctx: Any) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """The cluster's node groups, described once a run: by the plan's resource name those each planned group's name
    matches (Pulumi auto-names it NAME-xxxxxxx), and by their own name the others, which the plan does not make.
    ctx.found["node_groups"] keeps the first of each planned one (aws.capacity-schedules reads its Auto Scaling
    group)."""
    if "cluster_groups" not in ctx.found:
        eks, name = ctx.client("eks"), names.cluster_name(ctx.config.stack)
        live = [
            g for page in eks.get_paginator("list_nodegroups").paginate(clusterName=name) for g in page["nodegroups"]
        ]
        described: dict[str, dict] = {}

        def describe(group: str) -> dict:
            if group not in described:
                described[group] = eks.describe_nodegroup(clusterName=name, nodegroupName=group)["nodegroup"]
            return described[group]

        planned: dict[str, list[dict]] = {}
        for resource in ctx.plan.of_type(NODE_GROUP):
            planned[resource.name] = [describe(g) for g in live if g == resource.name or _auto_named(resource.name, g)]
        taken = {g["nodegroupName"] for groups in planned.values() for g in groups}
        ctx.found["cluster_groups"] = (planned, {g: describe(g) for g in live if g not in taken})
        ctx.found["node_groups"] = {n: groups[0] for n, groups in planned.items() if groups}
    return ctx.found["cluster_groups"]


def _auto_named(resource_name: str, name: str) -> bool:
    """Whether `name` is Pulumi's auto-name of the plan's resource `resource_name`: the resource name, a dash, 7
    random hex digits (`gpu-h100-1a2b3c4`), so that pool h100 never takes pool h100-odcr's group."""
    return re.fullmatch(re.escape(resource_name) + "-[0-9a-f]{7}", name) is not None


def _metadata_not_planned(at: str, planned: dict, live: dict, *, said: tuple[str, ...] = ()) -> list[str]:
    """Each instance metadata option the plan sets (a launch template's `metadataOptions`, the API's name its input's
    capitalized) that the live MetadataOptions does not have, but for those `said` already: a hop limit above 1 lets
    every pod on a node reach its role's credentials."""
    problems = []
    for option, want in sorted(planned.items()):
        key = option[0].upper() + option[1:]
        if key not in said and live.get(key) != want:
            problems.append(f"{at}: metadata option {key} {live.get(key, 'unset')}, planned {want}")
    return problems


def _node_roles(planned: dict[str, list[dict]]) -> list[str]:
    """The roles the planned groups are on: one, the stack's node role (infra/__main__.py passes NodeRole's to every
    group and to Karpenter's nodes), unless a group of a planned name was made on another."""
    return sorted({g["nodeRole"] for groups in planned.values() for g in groups if g.get("nodeRole")})


def _taints(items: list[dict] | None) -> set[tuple[str, str]]:
    """(key, effect) of node group taints, as the plan and the EKS API both write them (NO_SCHEDULE)."""
    return {(t["key"], t["effect"]) for t in items or []}


def node_groups(ctx: Any) -> Outcome:
    """Every node group of the cluster is the plan's, and they share the one node role the program makes: EKS enters
    a group's node role in the cluster's access as a node itself (an EC2_LINUX access entry), so a group the deploy
    role added with a role of its own making, which IAM cannot refuse (no condition key carries CreateNodegroup's
    nodeRole), would let whoever that role trusts act as a node (tests/delivery/test_r13_boundary_attack.py)."""
    (planned, others), problems = _cluster_groups(ctx), []
    cluster = names.cluster_name(ctx.config.stack)
    for resource in ctx.plan.of_type(NODE_GROUP):
        groups = planned[resource.name]
        if not groups:
            problems.append(f"{resource.name}: missing")
            continue
        if len(groups) > 1:
            listed = ", ".join(g["nodegroupName"] for g in groups)
            problems.append(f"{resource.name}: {len(groups)} groups ({listed}), the plan makes one")
        live = groups[0]
        want, got = resource.inputs["scalingConfig"], live.get("scalingConfig", {})
        if live.get("status") != "ACTIVE":
            problems.append(f"{resource.name}: {live.get('status')}")
        if (got.get("minSize"), got.get("maxSize")) != (want["minSize"], want["maxSize"]):
            problems.append(
                f"{resource.name}: min/max {got.get('minSize')}/{got.get('maxSize')}, "
                f"planned {want['minSize']}/{want['maxSize']}"
            )
        missing = _taints(resource.inputs.get("taints")) - _taints(live.get("taints"))
        if missing:
            problems.append(f"{resource.name}: without taint {', '.join(k for k, _ in sorted(missing))}")
        problems += _launched_as_planned(ctx, resource, live)
    roles = _node_roles(planned)
    if len(roles) > 1:
        on = "; ".join(f"{g['nodegroupName']} on {g.get('nodeRole')}" for gs in planned.values() for g in gs)
        problems.append(f"the planned groups are on {len(roles)} node roles, the plan gives them one ({on})")
    for name, live in sorted(others.items()):
        problems.append(f"{name}: a node group the plan does not make, on node role {live.get('nodeRole')}")
    count = len(ctx.plan.of_type(NODE_GROUP))
    if problems:
        return failed(
            "; ".join(problems),
            "run `pulumi up` (a console edit drifts from the plan: `pulumi refresh`, which also finds a group's launch "
            "template version that is not the plan's); a group the plan does not make, one of a planned name on "
            f"another node role, or one with an SSH key, is removed with `aws eks delete-nodegroup --cluster-name "
            f"{cluster} --nodegroup-name GROUP` (then `pulumi refresh` and `pulumi up` make a planned one again); "
            "CloudTrail's CreateNodegroup events say who made it",
        )
    return passed(
        f"{count} node group(s) ACTIVE with the planned sizes and taints, launched as planned, none other, on one node "
        "role"
    )


def _launched_as_planned(ctx: Any, resource: Any, live: dict) -> list[str]:
    """What a planned group's nodes boot as that IAM cannot refuse the deploy role to change, the plan's or said: no
    SSH key (CreateNodegroup's remoteAccess, which opens port 22), and a launch template version (UpdateNodegroupVersion
    takes any; CreateLaunchTemplateVersion on the stack's own template is the deploy role's) with the plan's user data,
    no AMI of its own (the group's AMI type picks it: components/nodes.py launch_template), no key pair, no instance
    profile, no public address, and the plan's metadata options (IMDSv2 alone, hop limit 1). Its fields:
    LaunchTemplateData in boto/botocore:botocore/data/ec2/2016-11-15/service-2.json@1.44.18."""
    problems = []
    remote = live.get("remoteAccess")
    if remote:
        problems.append(f"{resource.name}: remote access (SSH key {remote.get('ec2SshKey')}), the plan gives none")
    template = next((t for t in ctx.plan.of_type(LAUNCH_TEMPLATE) if t.parent == resource.parent), None)
    if template is None:
        return problems
    used = live.get("launchTemplate") or {}
    if not used.get("id") and not used.get("name"):
        return [*problems, f"{resource.name}: launches from no launch template, planned {template.name}"]
    which = {"LaunchTemplateId": used["id"]} if used.get("id") else {"LaunchTemplateName": used["name"]}
    found = ctx.client("ec2").describe_launch_template_versions(
        **which, Versions=[str(used.get("version") or "$Default")]
    )
    data = found["LaunchTemplateVersions"][0].get("LaunchTemplateData") or {}
    at = f"{resource.name}: launch template {used.get('id') or used.get('name')} version {used.get('version')}"
    want = template.inputs.get("userData")
    if (want is None or isinstance(want, str) and "<computed>" not in want) and data.get("UserData") != want:
        problems.append(f"{at}: its user data is not the plan's")
    problems += [f"{at}: {key} {data[key]}, the plan sets none" for key in ("ImageId", "KeyName") if data.get(key)]
    if data.get("IamInstanceProfile"):
        problems.append(
            f"{at}: instance profile {data['IamInstanceProfile']}, the plan sets none (EKS adds the node role's)"
        )
    if any(ni.get("AssociatePublicIpAddress") for ni in data.get("NetworkInterfaces") or []):
        problems.append(f"{at}: a network interface asks for a public address")
    metadata = data.get("MetadataOptions") or {}
    if metadata.get("HttpTokens") != "required":
        problems.append(f"{at}: IMDSv1 allowed (HttpTokens not required)")
    # every other metadata option the plan sets (components/nodes.py launch_template)
    planned = template.inputs.get("metadataOptions") or {}
    return problems + _metadata_not_planned(at, planned, metadata, said=("HttpTokens",))


ADDON = "aws:eks/addon:Addon"
# An add-on an AWS service installs on every cluster of the account, whoever made the cluster: GuardDuty's security
# agent, with EKS Runtime Monitoring's automated agent configuration (EKS_ADDON_MANAGEMENT), which an organization's
# GuardDuty administrator may set for its member accounts ("GuardDuty will manage the deployment of and updates to the
# security agent for all the Amazon EKS clusters in your account": docs.aws.amazon.com/guardduty/latest/ug/
# eks-runtime-monitoring-configuration-standalone-acc.html). It takes no role ("This add-on doesn't require any
# permissions": awsdocs/amazon-eks-user-guide:latest/ug/workloads/eks-add-ons.adoc@4d52b4d0), so one without a role
# is GuardDuty's and no failure; one with a role is someone's own.
GUARDDUTY_AGENT = "aws-guardduty-agent"


def _configuration(text: Any) -> Any:
    """An add-on's configuration values (JSON or YAML text, as EKS takes them) as data; none is {}."""
    return yaml.safe_load(text) or {} if isinstance(text, str) else {}


def addons(ctx: Any) -> Outcome:
    """Every managed add-on of the cluster (ListAddons, every page) is one the plan installs, and each the plan installs
    is there, ACTIVE, at the stack's pin where it has one, at or above its floor (versions.ADDON_FLOORS), and with the
    planned configuration values: an add-on downgraded or reconfigured by hand (the node monitoring agent's kernel
    monitor turned back on: components/addons.py NODE_MONITORING_AGENT_CONFIGURATION), or one a console install left
    older, is what `pulumi up` would not show (the add-ons keep what someone changed: resolve_conflicts_on_update
    PRESERVE). An add-on the plan does not make runs its own pods, perhaps with a role of its own, and IAM cannot
    refuse it to the deploy role (its own cluster's add-ons are its to make; OnlyTheStacksCluster refuses only another
    cluster's), so it fails, named; but for GuardDuty's agent without a role (GUARDDUTY_AGENT), which GuardDuty puts
    on every cluster of an account that asks it to. DescribeAddon's `addon.{addonVersion, status,
    configurationValues, serviceAccountRoleArn, podIdentityAssociations}` and ListAddons' `addons`
    (boto/botocore:botocore/data/eks/2017-11-01/service-2.json@1.44.18)."""
    planned = {
        str(r.inputs["addonName"]): (
            str(r.inputs.get("addonVersion") or ""),
            _configuration(r.inputs.get("configurationValues")),
        )
        for r in ctx.plan.of_type(ADDON)
    }
    eks, cluster = ctx.client("eks"), names.cluster_name(ctx.config.stack)
    pages = eks.get_paginator("list_addons").paginate(clusterName=cluster)
    listed = {name for page in pages for name in page["addons"]}
    problems, seen = [], []
    for name, (planned_version, configured) in sorted(planned.items()):
        if name not in listed:
            problems.append(f"{name}: missing")
            continue
        described = _answer(eks.describe_addon, "ResourceNotFoundException", clusterName=cluster, addonName=name)
        if described is None:
            problems.append(f"{name}: missing")
            continue
        addon = described["addon"]
        version, status = str(addon.get("addonVersion", "?")), addon.get("status", "?")
        live = _configuration(addon.get("configurationValues"))
        pin = planned_version if re.match(versions.ADDON_VERSION_PATTERN, planned_version) else None
        floor = versions.below_floor(name, version)
        if floor:
            problems.append(f"{name} {version}: below {floor}, the oldest this platform runs")
        elif pin and version != pin:
            problems.append(f"{name} {version}: the stack pins {pin}")
        elif live != configured:
            problems.append(f"{name} {version}: configured {json.dumps(live)}, planned {json.dumps(configured)}")
        elif status not in ("ACTIVE", "UPDATING"):
            problems.append(f"{name} {version}: {status}")
        else:
            seen.append(f"{name} {version}")
    for name in sorted(listed - planned.keys()):
        if name != GUARDDUTY_AGENT:
            problems.append(f"{name}: an add-on the plan does not make")
            continue
        addon = eks.describe_addon(clusterName=cluster, addonName=name)["addon"]
        roles = [addon["serviceAccountRoleArn"]] if addon.get("serviceAccountRoleArn") else []
        roles += addon.get("podIdentityAssociations") or []
        if roles:
            problems.append(f"{name}: carries {', '.join(roles)}, GuardDuty's agent no role")
        else:
            seen.append(f"{name} {addon.get('addonVersion', '?')} (GuardDuty's, no role)")
    if problems:
        return failed(
            "; ".join(problems),
            "`pulumi refresh` then `pulumi up` sets the planned versions and configuration; pin a newer one in "
            "higgsfield:addonVersions where EKS's default is below the floor (infra/core/versions.py ADDON_FLOORS); "
            f"`aws eks delete-addon --cluster-name {cluster} --addon-name NAME` removes one the plan does not make, "
            "its pods with it; CloudTrail's CreateAddon events say who made it",
        )
    return passed(", ".join(seen) + ", none other" if seen else "no add-on, none planned")


def _group_of_pool(ctx: Any, parent: str | None) -> dict | None:
    for planned in ctx.plan.of_type(NODE_GROUP):
        if planned.parent == parent:
            return ctx.found.get("node_groups", {}).get(planned.name)
    return None


def capacity_schedules(ctx: Any) -> Outcome:
    planned = ctx.plan.of_type(SCHEDULE)
    if not planned:
        return skipped("no Capacity Block pool: no scheduled actions planned")
    autoscaling, problems = ctx.client("autoscaling"), []
    for action in planned:
        group = _group_of_pool(ctx, action.parent)
        asgs = [a["name"] for a in ((group or {}).get("resources") or {}).get("autoScalingGroups", [])]
        if not asgs:
            problems.append(f"{action.name}: no Auto Scaling group found for its pool")
            continue
        live = autoscaling.describe_scheduled_actions(
            AutoScalingGroupName=asgs[0], ScheduledActionNames=[action.inputs["scheduledActionName"]]
        )["ScheduledUpdateGroupActions"]
        want = action.inputs
        if not live:
            problems.append(f"{action.name}: missing on {asgs[0]}")
            continue
        got = live[0]
        sizes = (got.get("MinSize"), got.get("MaxSize"), got.get("DesiredCapacity"))
        if sizes != (want.get("minSize"), want.get("maxSize"), want.get("desiredCapacity")):
            problems.append(
                f"{action.name}: min/max/desired {sizes}, planned {want.get('minSize')}/{want.get('maxSize')}"
            )
    if problems:
        return failed("; ".join(problems), "run `pulumi up`; a window already past is removed by the next `pulumi up`")
    return passed(f"{len(planned)} scheduled action(s) on their Auto Scaling groups as planned")


def reservations(ctx: Any) -> Outcome:
    pools = [p for p in ctx.config.gpu_pools if p.capacity.reservation_id and p.provisioner == "node-group"]
    if not pools:
        return skipped("no reservation or Capacity Block pool")
    ids = sorted({p.capacity.reservation_id for p in pools})
    found = ctx.client("ec2").describe_capacity_reservations(CapacityReservationIds=ids)["CapacityReservations"]
    by_id = {r["CapacityReservationId"]: r for r in found}
    problems, seen = [], []
    for pool in pools:
        r = by_id.get(pool.capacity.reservation_id)
        if r is None:
            problems.append(f"{pool.name}: {pool.capacity.reservation_id} not found")
            continue
        seen.append(f"{pool.name}: {r['State']} {r.get('InstanceType')} x{r.get('TotalInstanceCount')}")
        live_ok = r["State"] in ("active", "scheduled", "payment-pending")
        if not live_ok or r.get("InstanceType") not in pool.instance_types:
            problems.append(f"{pool.name}: {r['State']} {r.get('InstanceType')}, planned {pool.instance.name}")
    if problems:
        return failed(
            "; ".join(problems), "renew or fix higgsfield:gpuPools[].capacity.reservationId, then `pulumi up`"
        )
    return passed("; ".join(seen))


# --- the cluster -----------------------------------------------------------------------------------


def _allowed_actions(document: dict) -> tuple[list[str], bool]:
    """Each Allow's actions, lower-cased (IAM matches an action whatever its case), and whether an Allow reaches
    every action: the action `*`, or a NotAction, which allows every action but those it names (IAM JSON policy
    elements: NotAction, docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_notaction.html)."""
    statements = document.get("Statement") or []
    allows = [s for s in (statements if isinstance(statements, list) else [statements]) if s.get("Effect") == "Allow"]
    actions = [a for s in allows for a in ([s["Action"]] if isinstance(s.get("Action"), str) else s.get("Action", []))]
    everything = any(a == "*" for a in actions) or any("NotAction" in s for s in allows)
    return [a.lower() for a in actions], everything


def _beyond_the_boundary(document: dict) -> list[str]:
    """What a policy document allows that the stack boundary refuses its roles: the services outside
    MANAGED_POLICY_SERVICES (`*` for every service), and in a service the boundary does not allow whole (EKS, IAM,
    SSM) the actions it does not name (NARROWED_SERVICE_ACTIONS; which resources it allows them on is not read)."""
    from components.delivery import MANAGED_POLICY_SERVICES, NARROWED_SERVICE_ACTIONS

    actions, everything = _allowed_actions(document)
    services = {a.split(":", 1)[0] for a in actions if ":" in a} - set(MANAGED_POLICY_SERVICES)
    narrowed = {p.split(":", 1)[0] for p in NARROWED_SERVICE_ACTIONS}
    unnamed = {
        a
        for a in actions
        if a.split(":", 1)[0] in narrowed
        and not any(fnmatch.fnmatchcase(a, p.lower()) for p in NARROWED_SERVICE_ACTIONS)
    }
    return sorted(services | unnamed | ({"*"} if everything else set()))


def managed_policies(ctx: Any) -> Outcome:
    """Each AWS managed policy the program attaches (components/delivery.py MANAGED_POLICIES) still acts only in the
    services the stack boundary lets its roles reach (MANAGED_POLICY_SERVICES, read in their documents once), and in
    EKS, IAM and SSM only the actions the boundary names (NARROWED_SERVICE_ACTIONS). AWS edits its managed policies:
    an action beyond them would be refused to the role under the boundary, and the component that needs it would
    fail at run time, not at deploy."""
    from components.delivery import MANAGED_POLICIES

    iam, beyond = ctx.client("iam"), []
    for name in MANAGED_POLICIES:
        arn = f"arn:aws:iam::aws:policy/{name}"
        version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
        # botocore decodes the URL-encoded document into a dict (handlers.json_decode_policies)
        document = iam.get_policy_version(PolicyArn=arn, VersionId=version)["PolicyVersion"]["Document"]
        extra = _beyond_the_boundary(document)
        if extra:
            beyond.append(f"{name} ({version}) acts in {', '.join(extra)}")
    if beyond:
        return failed(
            "; ".join(beyond) + ": outside the stack boundary, so its roles are refused those calls",
            "read the policy's new version (`aws iam get-policy-version`); if the component needs the calls, add the "
            "service to MANAGED_POLICY_SERVICES (an EKS, IAM or SSM action to the lists NARROWED_SERVICE_ACTIONS "
            "joins) and the boundary (components/delivery.py), an administrator's `higgsfield bootstrap STACK`",
        )
    return passed(f"{len(MANAGED_POLICIES)} AWS managed policies act only in the boundary's services")


WEBHOOK = "aws:codebuild/webhook:Webhook"


def _filter_groups(groups: list | None) -> list[list[tuple[str, str, bool]]]:
    """A webhook's filter groups as comparable values: each group's (type, pattern, excluded) in order. The plan
    gives a group as {filters: [...]} (pulumi-aws's Webhook), CodeBuild's API as the list itself (FilterGroup, a
    list of WebhookFilter: botocore's codebuild service model)."""
    return [
        [
            (f.get("type", ""), f.get("pattern", ""), bool(f.get("excludeMatchedPattern")))
            for f in (g.get("filters", []) if isinstance(g, dict) else g)
        ]
        for g in groups or []
    ]


def runner_webhooks(ctx: Any) -> Outcome:
    """Each runner project's webhook has the planned filter groups: the event, the workflow's name and the actors
    GitHub may start a build for (components/delivery.py webhook_filters). A filter edited in the console, or one
    dropped, lets another workflow or another actor run in the stack's VPC with the runner's role."""
    planned = {str(r.inputs["projectName"]): r.inputs.get("filterGroups") for r in ctx.plan.of_type(WEBHOOK)}
    if not planned:
        return skipped("no CodeBuild runner (higgsfield:delivery.runner)")
    hooks = {p["name"]: p.get("webhook") or {} for p in _runner_projects(ctx, list(planned))}
    problems = [f"{name}: missing" for name in sorted(planned) if name not in hooks]
    problems += [
        f"{name}: its webhook's filters differ from the plan's"
        for name in sorted(planned)
        if name in hooks and _filter_groups(hooks[name].get("filterGroups")) != _filter_groups(planned[name])
    ]
    # The plan's webhooks are the repository's; one scoped to an organization or to all of GitHub
    # (Webhook.scopeConfiguration, botocore's codebuild service model) takes a workflow of the same name from
    # every repository there, and the filters name no repository.
    problems += [
        f"{name}: its webhook takes {scope.get('scope', '?')} {scope.get('name', '?')}'s events, not the repository's"
        for name in sorted(planned)
        if (scope := hooks.get(name, {}).get("scopeConfiguration"))
    ]
    if problems:
        return failed(
            "; ".join(problems),
            "`pulumi refresh` then `pulumi up` sets the planned filters again; CloudTrail's UpdateWebhook events on "
            "the project say who changed them",
        )
    return passed(f"{len(planned)} runner webhook(s) with the planned filters")


PROJECT = "aws:codebuild/project:Project"
# What a runner's builds run, as the plan sets it (pulumi-aws's ProjectEnvironment inputs) and CodeBuild answers it
# (boto/botocore:botocore/data/codebuild/2016-10-06/service-2.json@1.44.18, ProjectEnvironment: the same names):
# another image, or privileged mode, changes what runs with the runner's role. computeType sizes the build host alone.
RUNNER_ENVIRONMENT = ("type", "image", "imagePullCredentialsType", "privilegedMode")
# What the plan leaves unset that would change what a runner's build runs or where (the same service model):
# ProjectEnvironment's environmentVariables (an index or a proxy for every install), certificate (a CA the build
# trusts), registryCredential (another registry's image), fleet (a fleet's own VPC and role); ProjectSource's
# buildspec (commands beside the runner's); Project's secondarySources (another repository's files) and
# fileSystemLocations (a file system mounted into the build).
RUNNER_UNPLANNED = (
    ("environment", ("environmentVariables", "certificate", "registryCredential", "fleet")),
    ("source", ("buildspec",)),
    ("", ("secondarySources", "fileSystemLocations")),
)


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return "none" if value is None else str(value)


def _project_drift(name: str, want: dict, got: dict, role: str, network: dict[str, Any]) -> list[str]:
    """How a live runner project (BatchGetProjects' Project) differs from its plan in where or what its builds run.
    The plan's service role, VPC, subnets and security group are computed at deploy: `role` and `network` are what
    they are by name (_runner_network)."""
    source, vpc, environment = got.get("source") or {}, got.get("vpcConfig") or {}, got.get("environment") or {}
    pairs = [
        ("source.type", source.get("type"), want["source"]["type"]),
        ("source.location", source.get("location"), want["source"]["location"]),
        ("source.auth", (source.get("auth") or {}).get("resource"), want["source"]["auth"]["resource"]),
        ("serviceRole", got.get("serviceRole"), role),
        ("vpcConfig.vpcId", vpc.get("vpcId"), network["vpc"]),
        ("vpcConfig.subnets", sorted(vpc.get("subnets") or []), network["subnets"]),
        ("vpcConfig.securityGroupIds", sorted(vpc.get("securityGroupIds") or []), network["groups"]),
        *((f"environment.{k}", environment.get(k), want["environment"].get(k)) for k in RUNNER_ENVIRONMENT),
    ]
    problems = [
        f"{name}: {field} {_shown(live)}, planned {_shown(plan)}" for field, live, plan in pairs if live != plan
    ]
    problems += [
        f"{name}: {where + '.' if where else ''}{key} set, not planned"
        for where, keys in RUNNER_UNPLANNED
        for key in keys
        if ((got.get(where) or {}) if where else got).get(key)
    ]
    return problems


def _runner_network(ctx: Any, projects: list[str]) -> dict[str, dict[str, Any]]:
    """Where each runner project is planned to run: the cluster's VPC and subnets (infra/__main__.py gives the
    runners and the cluster the same private subnets; components/cluster.py gives the cluster no public ones, and the
    EKS cluster's subnetIds are then the private ones alone: pulumi/pulumi-eks:nodejs/eks/cluster/cluster.ts@v4.3.0,
    clusterSubnetIds, the newest tag of the mirror; the stack pins 4.4.0), and the group components/delivery.py makes
    for the project, tagged with its name, in that VPC."""
    cluster = _described_cluster(ctx)
    vpc = (cluster.get("resourcesVpcConfig") or {}).get("vpcId")
    subnets = sorted((cluster.get("resourcesVpcConfig") or {}).get("subnetIds") or [])
    filters = [{"Name": "vpc-id", "Values": [str(vpc)]}, {"Name": "tag:Name", "Values": projects}]
    groups = ctx.client("ec2").describe_security_groups(Filters=filters)["SecurityGroups"]
    tagged = {g["GroupId"]: {t["Key"]: t["Value"] for t in g.get("Tags") or []}.get("Name") for g in groups}
    return {
        p: {"vpc": vpc, "subnets": subnets, "groups": sorted(i for i, n in tagged.items() if n == p)} for p in projects
    }


def runner_projects(ctx: Any) -> Outcome:
    """Each runner project builds the planned repository with its own role, in the stack's private subnets and its
    own security group, from the planned image. The webhook's filters (runner_webhooks) say which workflow runs; the
    project says whose repository that workflow comes from and what it runs with: one whose source was moved to a
    fork, or whose role, network or image changed, runs other code, or runs it elsewhere, with the runner's rights."""
    planned = {str(r.inputs["name"]): r.inputs for r in ctx.plan.of_type(PROJECT)}
    if not planned:
        return skipped("no CodeBuild runner (higgsfield:delivery.runner)")
    live = {p["name"]: p for p in _runner_projects(ctx, list(planned))}
    network, account = _runner_network(ctx, sorted(planned)), ctx.config.delivery.account_id
    problems: list[str] = []
    for name, want in sorted(planned.items()):
        if name not in live:
            problems.append(f"{name}: missing")
            continue
        # components/delivery.py names each runner's service role as its project
        role = f"arn:aws:iam::{account}:role/{name}"
        problems += _project_drift(name, want, live[name], role, network[name])
    if problems:
        return failed(
            "; ".join(problems),
            "`pulumi refresh` then `pulumi up` sets the planned project again; CloudTrail's UpdateProject events on "
            "the project say who changed it, and its builds since (`aws codebuild list-builds-for-project`) what ran",
        )
    return passed(f"{len(planned)} runner project(s) with the planned source, role, network and image")


LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"


def _account_of(arn: str) -> str:
    """The account field of an ARN (a log group's `arn`, a KMS key's: DescribeLogGroups' LogGroup.arn and kmsKeyId,
    botocore's logs service model); a key whose owner is another account may be disabled or deleted by it, and the
    group's logs are then neither written nor read."""
    parts = arn.split(":")
    return parts[4] if len(parts) > 5 else ""


def log_groups(ctx: Any) -> Outcome:
    """Every log group the plan makes is there, under a KMS key, at its planned retention, and no other group under
    the cluster's Container Insights prefix is without a key: the agents create a group they do not find, and one
    they made before the stack's (a node up before `pulumi up` finished) would take the logs unencrypted."""
    planned = {str(r.inputs["name"]): r.inputs for r in ctx.plan.of_type(LOG_GROUP)}
    agents = f"/aws/containerinsights/{names.cluster_name(ctx.config.stack)}/"
    pages = ctx.client("logs").get_paginator("describe_log_groups")
    live: dict[str, dict] = {}
    for prefix in sorted({*planned, agents}):
        for page in pages.paginate(logGroupNamePrefix=prefix):
            live.update((g["logGroupName"], g) for g in page["logGroups"])
    problems = []
    for name, inputs in sorted(planned.items()):
        group = live.get(name)
        if group is None:
            problems.append(f"{name}: missing")
            continue
        if not group.get("kmsKeyId"):
            problems.append(f"{name}: not encrypted")
        elif _account_of(group["kmsKeyId"]) != _account_of(group.get("arn", "")):
            problems.append(f"{name}: encrypted under account {_account_of(group['kmsKeyId'])}'s key")
        if inputs.get("retentionInDays") and group.get("retentionInDays") != inputs["retentionInDays"]:
            problems.append(
                f"{name}: kept {group.get('retentionInDays') or 'forever'}, planned {inputs['retentionInDays']} days"
            )
    problems += [
        f"{name}: not the stack's, not encrypted"
        for name, group in sorted(live.items())
        if name.startswith(agents) and name not in planned and not group.get("kmsKeyId")
    ]
    if problems:
        return failed(
            "; ".join(problems),
            "`pulumi refresh` then `pulumi up` makes or mends the stack's; a group the agents made first (not "
            "encrypted) is deleted by an administrator (`aws logs delete-log-group --log-group-name NAME`), then "
            "`pulumi up`",
        )
    return passed(f"{len(planned)} log group(s) encrypted at their planned retention")


ECR_LIFECYCLE_POLICY = "aws:ecr/lifecyclePolicy:LifecyclePolicy"
ECR_REPOSITORY_POLICY = "aws:ecr/repositoryPolicy:RepositoryPolicy"
# Lists of a lifecycle rule's selection that ECR may give back in another order, as it gives back the rules in order
# of rulePriority: pulumi-aws's provider compares a policy so (equivalentLifecyclePolicyJSON, hashicorp/
# terraform-provider-aws:internal/service/ecr/lifecycle_policy.go@00a35305dc1b297a6fcdecdfbba33f1e63c3da39, a stored
# copy; the ref pulumi-aws bridges not read). Whether GetLifecyclePolicy returns the text as put or normalized is not
# read here: both sides are parsed (docs/verify.md gives the command that shows it).
UNORDERED_SELECTIONS = ("tagPrefixList", "tagPatternList")
IMAGE_REPOSITORY_FIX = (
    "a missing repository: `pulumi refresh` then `pulumi up` makes it again, and the image workflow pushes the "
    "training image again; a lifecycle policy or scan on push not the plan's: `pulumi refresh` then `pulumi up` puts "
    "the plan's back (an image a rule expired is gone: the image workflow pushes it again); a tag mutability, "
    "encryption or repository policy not the plan's: an administrator sets it (`aws ecr put-image-tag-mutability "
    "--image-tag-mutability IMMUTABLE`, `aws ecr delete-repository-policy`; the deploy role may not), and the "
    "encryption only by deleting the repository for `pulumi up` to make again. CloudTrail's PutLifecyclePolicy, "
    "PutImageTagMutability, SetRepositoryPolicy and CreateRepository events on it say who"
)


def _lifecycle_rules(policy: dict) -> dict[Any, dict]:
    """A lifecycle policy's rules by rulePriority (unique in a policy), each selection's unordered lists sorted."""
    rules: dict[Any, dict] = {}
    for rule in policy.get("rules") or []:
        selection = dict(rule.get("selection") or {})
        for key in UNORDERED_SELECTIONS:
            if key in selection:
                selection[key] = sorted(selection[key])
        rules[rule.get("rulePriority")] = {**rule, "selection": selection}
    return rules


def _lifecycle_drift(name: str, live: str | None, planned: str | None) -> list[str]:
    """How the repository's lifecycle policy (GetLifecyclePolicy's lifecyclePolicyText, None where ECR answers
    LifecyclePolicyNotFoundException) is not the plan's: each rule not the plan's named whole, since one rule
    expiring or archiving the tag every job runs takes the training image away."""
    if live is None:
        return [f"{name}: no lifecycle policy, planned one"] if planned is not None else []
    if planned is None:
        return [f"{name}: a lifecycle policy the plan does not set"]
    live_policy, planned_policy = json.loads(live), json.loads(planned)
    live_rules, planned_rules = _lifecycle_rules(live_policy), _lifecycle_rules(planned_policy)
    problems = [
        f"{name}: lifecycle rule {json.dumps(rule, sort_keys=True, separators=(',', ':'))} is not the plan's"
        for priority, rule in sorted(live_rules.items(), key=lambda item: str(item[0]))
        if planned_rules.get(priority) != rule
    ]
    problems += [
        f"{name}: the plan's lifecycle rule {priority} ({rule.get('description', 'no description')}) is missing"
        for priority, rule in sorted(planned_rules.items(), key=lambda item: str(item[0]))
        if priority not in live_rules
    ]
    rest = {k: v for k, v in live_policy.items() if k != "rules"}
    if rest != {k: v for k, v in planned_policy.items() if k != "rules"}:
        problems.append(f"{name}: lifecycle policy keys {sorted(rest)} not the plan's")
    return problems


def _repository_policy_grants(text: str) -> str:
    """What a repository policy's statements let whom do, in a line."""
    statements = json.loads(text).get("Statement") or []
    return "; ".join(
        f"{s.get('Effect')} {s.get('Action')} to {s.get('Principal')}"
        for s in (statements if isinstance(statements, list) else [statements])
    )


def _planned_policy_of(ctx: Any, kind: str, repository: str) -> str | None:
    """The plan's policy text of `kind` (a lifecycle or repository policy) on `repository`, None where it sets none."""
    return next(
        (str(r.inputs["policy"]) for r in ctx.plan.of_type(kind) if r.inputs.get("repository") == repository), None
    )


def _repository_drift(ctx: Any, ecr: Any, repository: Any) -> list[str]:
    """How one planned repository is not as planned (DescribeRepositories' Repository.{imageTagMutability,
    imageTagMutabilityExclusionFilters, imageScanningConfiguration, encryptionConfiguration}, GetLifecyclePolicy's
    lifecyclePolicyText, GetRepositoryPolicy's policyText, and their errors RepositoryNotFoundException,
    LifecyclePolicyNotFoundException, RepositoryPolicyNotFoundException: boto/botocore:botocore/data/ecr/2015-09-21/
    service-2.json@1.44.18)."""
    want, name = repository.inputs, str(repository.inputs["name"])
    described = _answer(ecr.describe_repositories, "RepositoryNotFoundException", repositoryNames=[name])
    if described is None:
        return [f"{name}: missing"]
    (live,) = described["repositories"]
    problems = []
    mutability, planned_mutability = live.get("imageTagMutability"), want.get("imageTagMutability", "MUTABLE")
    if mutability != planned_mutability:
        problems.append(f"{name}: tag mutability {mutability}, planned {planned_mutability}")
    filters = sorted(f"{f['filterType']} {f['filter']}" for f in live.get("imageTagMutabilityExclusionFilters") or [])
    planned_filters = sorted(
        f"{f['filterType']} {f['filter']}" for f in want.get("imageTagMutabilityExclusionFilters") or []
    )
    if filters != planned_filters:
        problems.append(
            f"{name}: tag mutability exclusion filter(s) {', '.join(filters) or 'none'}, planned "
            f"{', '.join(planned_filters) or 'none'}"
        )
    encryption = live.get("encryptionConfiguration") or {}
    planned_encryption = (want.get("encryptionConfigurations") or [{}])[0]
    if encryption.get("encryptionType") != planned_encryption.get("encryptionType", "AES256"):
        problems.append(
            f"{name}: encryption {encryption.get('encryptionType')}, planned "
            f"{planned_encryption.get('encryptionType', 'AES256')}"
        )
    elif planned_encryption.get("kmsKey") and encryption.get("kmsKey") != planned_encryption["kmsKey"]:
        problems.append(f"{name}: encrypted under {encryption.get('kmsKey')}, planned {planned_encryption['kmsKey']}")
    scanning = bool((live.get("imageScanningConfiguration") or {}).get("scanOnPush"))
    if scanning != bool((want.get("imageScanningConfiguration") or {}).get("scanOnPush")):
        problems.append(f"{name}: scan on push {'on' if scanning else 'off'}, planned {'off' if scanning else 'on'}")
    lifecycle = _answer(ecr.get_lifecycle_policy, "LifecyclePolicyNotFoundException", repositoryName=name)
    problems += _lifecycle_drift(
        name,
        lifecycle["lifecyclePolicyText"] if lifecycle else None,
        _planned_policy_of(ctx, ECR_LIFECYCLE_POLICY, name),
    )
    planned_policy = _planned_policy_of(ctx, ECR_REPOSITORY_POLICY, name)
    answer = _answer(ecr.get_repository_policy, "RepositoryPolicyNotFoundException", repositoryName=name)
    policy = answer["policyText"] if answer else None
    if policy is not None and planned_policy is None:
        problems.append(f"{name}: a repository policy the plan does not set ({_repository_policy_grants(policy)})")
    elif planned_policy is not None and policy is None:
        problems.append(f"{name}: no repository policy, planned one")
    elif planned_policy is not None and json.loads(policy or "{}") != json.loads(planned_policy):
        problems.append(f"{name}: a repository policy not the plan's ({_repository_policy_grants(policy or '{}')})")
    return problems


def image_repository(ctx: Any) -> Outcome:
    """The training image's repository (components/registry.py) is as planned: its tags immutable, encrypted and
    scanned as planned, the plan's lifecycle policy, no repository policy. The deploy role may put any lifecycle
    policy (`pulumi up` does; no condition key carries a rule), so a rule expiring or archiving the tag every team's
    jobs run is not refused, and in a dev stack it may delete the repository and make it again with movable tags."""
    planned = ctx.plan.of_type(REPOSITORY)
    if not planned:
        return skipped("no ECR repository planned")
    ecr = ctx.client("ecr")
    problems = [p for repository in planned for p in _repository_drift(ctx, ecr, repository)]
    if problems:
        return failed("; ".join(problems), IMAGE_REPOSITORY_FIX)
    return passed(
        "; ".join(
            f"{r.inputs['name']}: {r.inputs.get('imageTagMutability')}, the planned encryption, scanning, "
            "lifecycle policy and repository policy (or none)"
            for r in planned
        )
    )


VERSIONING_FIX = (
    "an administrator runs `aws s3api put-bucket-versioning --bucket BUCKET --versioning-configuration Status=Enabled` "
    "(the deploy role may not); what was written while it was off has no earlier version"
)
# The deploy role may not write a lifecycle configuration: s3:PutLifecycleConfiguration is among
# components/delivery.py CROSS_ACCOUNT_OPENINGS, which AdministratorsOnly refuses on every resource (REFUSED_WHOLE).
LIFECYCLE_FIX = (
    "an administrator removes the rule's NoncurrentVersionExpiration (`aws s3api put-bucket-lifecycle-configuration`, "
    "or `aws s3api delete-bucket-lifecycle` where it is the only rule; the deploy role may not); the versions it "
    "deleted are gone"
)


def _expiring_versions(s3: Any, bucket: str) -> list[str]:
    """The bucket's enabled lifecycle rules that delete noncurrent versions (GetBucketLifecycleConfiguration's
    Rules, LifecycleRule.NoncurrentVersionExpiration: botocore's s3 service model): versioning Enabled then keeps a
    replaced object's earlier version only that many days. A bucket without a lifecycle configuration answers
    NoSuchLifecycleConfiguration."""
    configuration = _answer(s3.get_bucket_lifecycle_configuration, "NoSuchLifecycleConfiguration", Bucket=bucket)
    rules = (configuration or {}).get("Rules") or []
    return [
        f"lifecycle rule {rule.get('ID', '(unnamed)')} deletes versions "
        f"{rule['NoncurrentVersionExpiration'].get('NoncurrentDays', '?')} day(s) after they are replaced"
        for rule in rules
        if rule.get("Status") == "Enabled" and rule.get("NoncurrentVersionExpiration")
    ]


def data_versioning(ctx: Any) -> Outcome:
    """Each linked bucket the file system writes back into keeps every version, as the plan's BucketVersioning made
    it: a suspended bucket replaces or removes the only copy of an object at each later write, and a lifecycle rule
    that expires noncurrent versions deletes them days later. Only an administrator may set either
    (`TheDataOutlivesTheDeploy`: no IAM key tells Enabled from Suspended; LIFECYCLE_FIX)."""
    buckets = sorted({str(r.inputs["bucket"]) for r in ctx.plan.of_type(BUCKET_VERSIONING)})
    if not buckets:
        return skipped("no linked bucket the file system writes back into")
    s3 = ctx.client("s3")
    states = {b: s3.get_bucket_versioning(Bucket=b).get("Status", "never enabled") for b in buckets}
    off = [f"{b}: versioning {s}" for b, s in states.items() if s != "Enabled"]
    expiring = [f"{b}: {rule}" for b in buckets for rule in _expiring_versions(s3, b)]
    if off or expiring:
        fixes = [VERSIONING_FIX] * bool(off) + [LIFECYCLE_FIX] * bool(expiring)
        return failed("; ".join(off + expiring), "; ".join(fixes))
    return passed("; ".join(f"{b}: versioning Enabled" for b in buckets))


INSTANCE = "aws:ec2/instance:Instance"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"


def _stacks_file_system(ctx: Any, name: str) -> dict | Outcome:
    """The stack's file system, from DescribeFileSystems (paginated; FileSystem.Tags, VpcId, DNSName, SubnetIds,
    LustreConfiguration.{MountName, RootSquashConfiguration}: boto/botocore:botocore/data/fsx/2018-03-01/
    service-2.json@1.44.18): the one Lustre file system in the cluster's VPC (DescribeCluster's
    resourcesVpcConfig.vpcId: no update moves a cluster to another VPC), tagged Name `name` (the program's tag:
    components/storage.py); else the failure that says why. Not by its tag alone: the deploy role moves tags
    (fsx:TagResource, UntagResource) and makes file systems (CreateFileSystem) and VPCs, so a decoy of that Name,
    listed first or alone, with a layout client of its own at the same address (another VPC of the same block holds
    one too), would stand in for the stack's, whose exemptions would go unread."""
    vpc = (_described_cluster(ctx).get("resourcesVpcConfig") or {}).get("vpcId")
    found = [
        fs
        for page in ctx.client("fsx").get_paginator("describe_file_systems").paginate()
        for fs in page["FileSystems"]
        if fs.get("FileSystemType") == "LUSTRE" and fs.get("VpcId") == vpc
    ]
    if not found:
        return failed(f"file system {name}: missing from the cluster's VPC {vpc}", "run `pulumi up`")
    fix = (
        "an administrator finds the stack's by its ID (`pulumi stack export`: the LustreFileSystem's id), tags it back "
        "and deletes what is not the stack's; CloudTrail's CreateFileSystem, TagResource and UntagResource events say "
        "who did it"
    )
    if len(found) > 1:
        ids = ", ".join(fs["FileSystemId"] for fs in found)
        return failed(f"{len(found)} Lustre file systems in the cluster's VPC {vpc} ({ids}), the stack makes one", fix)
    if {"Key": "Name", "Value": name} not in (found[0].get("Tags") or []):
        return failed(f"file system {found[0]['FileSystemId']} in the cluster's VPC {vpc}: not tagged Name {name}", fix)
    return found[0]


def _planned_layout(ctx: Any) -> tuple[Any, Any] | None:
    """The plan's layout client (the instance tagged LAYOUT_TAG) and its file system, or None without FSx."""
    client = next((r for r in ctx.plan.of_type(INSTANCE) if storage.LAYOUT_TAG in (r.inputs.get("tags") or {})), None)
    planned_fs = next((r for r in ctx.plan.of_type(LUSTRE) if client and r.parent == client.parent), None)
    return None if client is None or planned_fs is None else (client, planned_fs)


def layout_client(ctx: Any) -> Outcome:
    """The FSx layout client is the file system's one root-squash exemption (its address's NID: components/storage.py
    LAYOUT_CLIENT_*), so whatever holds that address is root on every team's directory. The deploy role may not
    rewrite its user data or swap its disks (AdministratorsOnly, VolumesStayWithTheirInstance), but `pulumi up`
    terminates and relaunches it at the address, so it may too, with an image, user data or key of its own, or put a
    network interface of its own at the address (an explicit reservation hands it to whoever asks for it by address).
    Here: the file system (the one Lustre file system in the cluster's VPC, tagged as planned) squashes and exempts
    as planned; the one thing at the address is one instance's primary interface; that instance has the plan's tag
    and user data (the layout of the stack's settings, mounting the live file system), an Amazon image and the root
    volume made from it and no other disk, no instance profile or key pair, the plan's metadata options, and one
    interface in the planned security group, which admits nothing in."""
    planned = _planned_layout(ctx)
    if planned is None:
        return skipped("no FSx for Lustre file system: no layout client")
    client, planned_fs = planned
    fs_name, address = planned_fs.inputs["tags"]["Name"], str(client.inputs["privateIp"])
    live_fs = _stacks_file_system(ctx, fs_name)
    if isinstance(live_fs, Outcome):
        return live_fs
    problems = []
    want_squash = planned_fs.inputs.get("rootSquashConfiguration") or {}
    squash = (live_fs.get("LustreConfiguration") or {}).get("RootSquashConfiguration") or {}
    if (squash.get("RootSquash"), sorted(squash.get("NoSquashNids") or [])) != (
        want_squash.get("rootSquash"),
        sorted(want_squash.get("noSquashNids") or []),
    ):
        problems.append(
            f"file system {fs_name}: root squash {squash.get('RootSquash', 'off')} exempting "
            f"{', '.join(squash.get('NoSquashNids') or []) or 'none'}, planned {want_squash.get('rootSquash')} "
            f"exempting {', '.join(want_squash.get('noSquashNids') or [])}"
        )
    ec2 = ctx.client("ec2")
    holders = ec2.describe_network_interfaces(
        Filters=[
            {"Name": "addresses.private-ip-address", "Values": [address]},
            {"Name": "subnet-id", "Values": list(live_fs.get("SubnetIds") or [])},
        ]
    )["NetworkInterfaces"]
    instances = set()
    for eni in holders:
        attached = eni.get("Attachment") or {}
        if attached.get("InstanceId") and attached.get("DeviceIndex") == 0:
            instances.add(attached["InstanceId"])
        else:
            problems.append(
                f"{address}: held by network interface {eni['NetworkInterfaceId']} "
                + (
                    f"(device {attached.get('DeviceIndex')} of {attached['InstanceId']})"
                    if attached.get("InstanceId")
                    else "(attached to no instance)"
                )
            )
    if not instances:
        problems.append(f"{address}: no instance holds it, the planned layout client is missing")
    for instance_id in sorted(instances):
        problems += _layout_client_as_planned(ctx, ec2, instance_id, client, live_fs)
    if problems:
        return failed(
            "; ".join(problems),
            "an administrator terminates what holds the address (`aws ec2 terminate-instances`, `aws ec2 "
            "delete-network-interface`), reads what it wrote as root (`lfs find /fsx -newer` on a client) and runs "
            "`pulumi up`, which launches the planned layout client there; CloudTrail's RunInstances, "
            "CreateNetworkInterface and UpdateFileSystem events say who did it",
        )
    return passed(f"{address}: the planned layout client alone, as launched from its image; squash as planned")


def _layout_client_as_planned(ctx: Any, ec2: Any, instance_id: str, client: Any, live_fs: dict) -> list[str]:
    """What an instance at the layout client's address carries that the plan's does not (DescribeInstances'
    Instance, DescribeInstanceAttribute's userData, DescribeImages, DescribeVolumes, DescribeSecurityGroups:
    boto/botocore:botocore/data/ec2/2016-11-15/service-2.json@1.44.18)."""
    live = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    at, problems = f"instance {instance_id}", []
    tags = {t["Key"]: t["Value"] for t in live.get("Tags") or []}
    digest = client.inputs["tags"][storage.LAYOUT_TAG]
    if tags.get(storage.LAYOUT_TAG) != digest:
        problems.append(f"{at}: layout {tags.get(storage.LAYOUT_TAG, 'untagged')}, planned {digest}")
    want = storage.layout_user_data(
        storage.layout_of(ctx.config.fsx, ctx.config.scheduler.team_uids),
        str(live_fs.get("DNSName")),
        str((live_fs.get("LustreConfiguration") or {}).get("MountName")),
    )
    data = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData").get("UserData") or {}
    if base64.b64decode(data.get("Value") or "").decode(errors="replace") != want:
        problems.append(f"{at}: its user data is not the plan's layout of this file system")
    problems += [
        f"{at}: {key} {live[key]}, the plan sets none" for key in ("IamInstanceProfile", "KeyName") if live.get(key)
    ]
    template = next((t for t in ctx.plan.of_type(LAUNCH_TEMPLATE) if t.name == client.name), None)
    planned_metadata = (template.inputs if template else {}).get("metadataOptions") or {}
    problems += _metadata_not_planned(at, planned_metadata, live.get("MetadataOptions") or {})
    problems += _launched_from_amazons_image(ec2, at, live)
    interfaces, groups = live.get("NetworkInterfaces") or [], live.get("SecurityGroups") or []
    if len(interfaces) != 1:
        problems.append(f"{at}: {len(interfaces)} network interfaces, the plan gives it one")
    # the plan's group of the client's (components/storage.py `NAME-layout-sg`), Pulumi-named NAME-layout-sg-xxxxxxx
    planned_group = next(g for g in ctx.plan.of_type(SECURITY_GROUP) if g.name == f"{client.name}-sg")
    others = [g["GroupName"] for g in groups if not _auto_named(planned_group.name, g["GroupName"])]
    if others or not groups:
        problems.append(f"{at}: security groups {', '.join(others) or 'none'}, planned its own alone")
    elif not planned_group.inputs.get("ingress"):
        described = ec2.describe_security_groups(GroupIds=[g["GroupId"] for g in groups])["SecurityGroups"]
        problems += [
            f"{at}: {g['GroupName']} admits traffic in, the plan none" for g in described if g.get("IpPermissions")
        ]
    return problems


def _launched_from_amazons_image(ec2: Any, at: str, live: dict) -> list[str]:
    """The instance runs an image of Amazon's (the plan's is the AL2023 SSM parameter's, which moves: its owner, not
    its ID, is compared) from the root volume made from that image's snapshot, and no other disk: a root volume
    replaced from another snapshot, or attached after launch, boots what its maker wrote, user data or not, and so may
    a second disk made from a copy of an AL2023 root volume (its file system has the image's UUID, which the boot
    mounts as root: AWS's troubleshooting page "instance booting from the wrong volume", not read here); the EBS CSI
    driver's role, under the boundary, attaches volumes, so VolumesStayWithTheirInstance holds the deploy role alone."""
    image_id = live.get("ImageId", "?")
    images = ec2.describe_images(ImageIds=[image_id], IncludeDeprecated=True)["Images"]
    if not images or images[0].get("ImageOwnerAlias") != "amazon":
        owner = images[0].get("OwnerId") if images else "unknown (no longer described)"
        return [f"{at}: image {image_id} of owner {owner}, planned Amazon's AL2023"]
    image = images[0]
    snapshots = {
        (m.get("Ebs") or {}).get("SnapshotId")
        for m in image.get("BlockDeviceMappings") or []
        if m.get("DeviceName") == image.get("RootDeviceName")
    }
    root = next(
        (m for m in live.get("BlockDeviceMappings") or [] if m.get("DeviceName") == live.get("RootDeviceName")), None
    )
    if root is None:
        return [f"{at}: no root volume attached"]
    volume = ec2.describe_volumes(VolumeIds=[root["Ebs"]["VolumeId"]])["Volumes"][0]
    problems = [
        f"{at}: volume {(m.get('Ebs') or {}).get('VolumeId', '?')} at {m.get('DeviceName')} beside its root, the plan "
        "gives it its root alone"
        for m in live.get("BlockDeviceMappings") or []
        if m is not root
    ]
    if volume.get("SnapshotId") not in snapshots:
        problems.append(
            f"{at}: root volume {volume['VolumeId']} from snapshot {volume.get('SnapshotId') or 'none'}, not its "
            f"image's ({', '.join(sorted(s for s in snapshots if s)) or 'none'})"
        )
    if not volume.get("Encrypted"):
        problems.append(f"{at}: root volume {volume['VolumeId']} not encrypted, planned encrypted")
    return problems


# The FSx calls whose request sets a file system's RootSquashConfiguration: those whose input reaches
# LustreRootSquashConfiguration (CreateFileSystemLustreConfiguration, UpdateFileSystemLustreConfiguration; the
# restore's LustreConfiguration is CreateFileSystemLustreConfiguration too: boto/botocore:botocore/data/fsx/2018-03-01/
# service-2.json@1.44.18). EFS has calls of the same names, told apart by their event source.
SQUASH_EVENTS = ("CreateFileSystem", "CreateFileSystemFromBackup", "UpdateFileSystem")
FSX_EVENT_SOURCE = "fsx.amazonaws.com"
EVENT_HISTORY_DAYS = 90  # LookupEvents: "events that occurred in a Region within the last 90 days"
SQUASH_OFF = "0:0"  # LustreRootSquashConfiguration.RootSquash: "A value of 0 (zero) ... disables root squash"


def _member(obj: Any, name: str) -> Any:
    """`obj`'s member `name`, its case ignored (None when `obj` is no object or has none): CloudTrail writes an FSx
    request's members with a lowercase first letter (`resourceARN` for TagResource's ResourceARN:
    awsdocs/amazon-fsx-lustre-user-guide:doc_source/logging-using-cloudtrail.md@b646de73cee7e472db3846599f45472ed4e83119),
    which is assumed, not seen, for the members below the top."""
    if not isinstance(obj, dict):
        return None
    return next((value for key, value in obj.items() if str(key).lower() == name.lower()), None)


def _event_file_systems(record: dict, event: dict) -> set[str]:
    """The file system IDs one event names: its request's fileSystemId (UpdateFileSystem), its response's
    fileSystem.fileSystemId (the creates', whose ID FSx assigns), and LookupEvents' Resources."""
    request, response = _member(record, "requestParameters"), _member(record, "responseElements")
    named = {_member(request, "fileSystemId"), _member(_member(response, "fileSystem"), "fileSystemId")}
    named |= {str(r.get("ResourceName") or "").rpartition("/")[2] for r in event.get("Resources") or []}
    return {str(n) for n in named if isinstance(n, str) and n.startswith("fs-")}


def _squash_not_planned(record: dict, name: str, want: dict) -> list[str] | None:
    """What an event of the stack's file system set of root squash that the plan does not (RootSquash other than
    the plan's, a NID the plan does not exempt; NIDs compared without case), [] for nothing, or None when its
    parameters cannot be read (CloudTrail's redaction puts a string where an object was). A create without a
    RootSquashConfiguration makes a file system that squashes nobody; an update without one leaves squash as it was."""
    request = _member(record, "requestParameters")
    if not isinstance(request, dict):
        return None
    lustre = _member(request, "lustreConfiguration")
    squash = _member(lustre, "rootSquashConfiguration")
    if lustre is not None and not isinstance(lustre, dict) or squash is not None and not isinstance(squash, dict):
        return None
    if squash is None:
        return [] if name == "UpdateFileSystem" else ["created without root squash (every client is root)"]
    problems = []
    root, nids = _member(squash, "rootSquash"), _member(squash, "noSquashNids")
    if root is not None and str(root) != want["rootSquash"]:
        problems.append("root squash off" if str(root) == SQUASH_OFF else f"root squashed to {root}")
    if nids is not None and not isinstance(nids, list):
        return None
    planned = {str(n).lower() for n in want["noSquashNids"]}
    others = [str(n) for n in nids or [] if str(n).lower() not in planned]
    if others:
        problems.append(f"exempted {', '.join(others)}")
    return problems


def _squash_events(ctx: Any) -> Iterator[dict]:
    """The region's events of SQUASH_EVENTS in CloudTrail's event history (LookupEvents, one EventName a request,
    every page: boto/botocore:botocore/data/cloudtrail/2013-11-01/service-2.json@1.44.18 and paginators-1.json;
    at most two requests a second per account and Region, past which CloudTrail answers ThrottlingException, which
    the client's standard retries back off from: botocore/retries/standard.py _THROTTLED_ERROR_CODES@1.44.18)."""
    end = ctx.now()
    pages = ctx.client("cloudtrail").get_paginator("lookup_events")
    for name in SQUASH_EVENTS:
        for page in pages.paginate(
            LookupAttributes=[{"AttributeKey": "EventName", "AttributeValue": name}],
            StartTime=end - datetime.timedelta(days=EVENT_HISTORY_DAYS),
            EndTime=end,
        ):
            yield from page.get("Events") or []


def squash_history(ctx: Any) -> Outcome:
    """No call of the last 90 days exempted from root squash an address the plan does not, or set squash otherwise,
    on the stack's file system: aws.layout-client sees the squash of the moment, and the deploy role, which may call
    fsx:UpdateFileSystem (`pulumi up` does) with parameters no IAM key reads, may add an exemption for an address of
    its own, use it and remove it before verify runs. CloudTrail's event history keeps each call for 90 days in its
    Region (LookupEvents; the file system's region is the stack's): CreateFileSystem, CreateFileSystemFromBackup and
    UpdateFileSystem (SQUASH_EVENTS) from any caller, the console's and CloudFormation's as well (each a call to FSx).

    Assumed, not seen on an account here: an event's CloudTrailEvent carries the request as the API takes it,
    members with a lowercase first letter (`{"fileSystemId": ..., "lustreConfiguration": {"rootSquashConfiguration":
    {"rootSquash": ..., "noSquashNids": [...]}}}`), compared without case; `aws cloudtrail lookup-events
    --lookup-attributes AttributeKey=EventName,AttributeValue=UpdateFileSystem --max-results 1` shows one. An event of
    the stack's file system (or of none it names) whose parameters cannot be read fails as unreadable: a pass would
    be the blind spot this check closes. The plan's NIDs are the layout client's reserved address, its subnet's last
    (components/storage.py layout_client_ip); UpdateFileSystem takes no SubnetIds, so a new address comes with a new
    file system, whose events alone are read, and an earlier plan's exemption never fails here. A refused call
    changed nothing: named only when it asked for squash the plan does not set. An event reaches the history about
    5 minutes after its call, not guaranteed (docs/verify.md)."""
    planned = _planned_layout(ctx)
    if planned is None:
        return skipped("no FSx for Lustre file system: no layout client")
    _, planned_fs = planned
    want = planned_fs.inputs["rootSquashConfiguration"]
    live_fs = _stacks_file_system(ctx, planned_fs.inputs["tags"]["Name"])
    if isinstance(live_fs, Outcome):
        return live_fs
    fs_id = live_fs["FileSystemId"]
    problems, unreadable, read = [], [], 0
    try:
        events = list(_squash_events(ctx))
    except aws_errors.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in DENIED_CODES:
            raise
        return failed(
            f"CloudTrail refused LookupEvents ({exc.response['Error']['Code']})",
            "run it as an identity allowed cloudtrail:LookupEvents (an administrator's; the deploy role is not, and "
            "the deploy workflow skips this check): `higgsfield verify STACK --only aws.squash-history`",
        )
    for event in events:
        try:
            record = json.loads(event.get("CloudTrailEvent") or "")
        except ValueError:
            record = None
        source = _member(record, "eventSource") or event.get("EventSource")
        if source != FSX_EVENT_SOURCE:
            continue
        named, name = _event_file_systems(record or {}, event), event.get("EventName", "?")
        if fs_id not in named and (named or name != "UpdateFileSystem"):
            continue  # another file system's, or a create that made none (refused, or its response unread)
        refused = _member(record, "errorCode")
        who = _member(_member(record, "userIdentity"), "arn") or event.get("Username") or "unknown caller"
        via = _member(_member(record, "userIdentity"), "invokedBy")
        at = f"{event.get('EventTime', '?')} {name} by {who}" + (f" via {via}" if via else "")
        at += f" (event {event.get('EventId', '?')})"
        found = _squash_not_planned(record, name, want) if isinstance(record, dict) else None
        if refused:  # changed nothing; named for what it asked
            problems += [f"{at}: refused ({refused}), asked: {p}" for p in found or []]
            continue
        read += 1
        if found is None:
            unreadable.append(f"{at}: parameters unreadable")
        else:
            problems += [f"{at}: {p}" for p in found]
    if problems or unreadable:
        return failed(
            f"file system {fs_id}: " + "; ".join(problems + unreadable),
            "an administrator reads each event (`aws cloudtrail lookup-events --lookup-attributes "
            "AttributeKey=EventId,AttributeValue=ID`), revokes the caller's sessions (IAM: revoke active sessions on "
            "its role) and rotates every secret kept on the file system: the exempt address was root on every team's "
            "directory; the VPC's flow log says when it spoke to the file system (TCP 988), CloudTrail's RunInstances, "
            "CreateNetworkInterface and AssignPrivateIpAddresses events what held it; `higgsfield verify STACK --only "
            "aws.layout-client` says whether the exemption is still there",
        )
    return passed(
        f"file system {fs_id}: {read} FSx event(s) in the last {EVENT_HISTORY_DAYS} days, "
        "none setting squash but as planned"
    )


def kube_api(ctx: Any) -> Outcome:
    version = ctx.kube.version()
    seen = f"{ctx.kube.host} answers {version.get('gitVersion')}"
    minor = f"{version.get('major')}.{str(version.get('minor', '')).rstrip('+')}"
    endpoint = ctx.found.get("endpoint")
    update = f"aws eks update-kubeconfig --name {names.cluster_name(ctx.config.stack)} --region {ctx.config.region}"
    if endpoint and endpoint.rstrip("/") != ctx.kube.host.rstrip("/"):
        return failed(
            f"the kubeconfig's context points at {ctx.kube.host}, the stack's cluster is at {endpoint}", update
        )
    if not endpoint:  # aws.cluster left out or failed: the ARN `aws eks update-kubeconfig` names the cluster by says
        # (aws/aws-cli:awscli/customizations/eks/update_kubeconfig.py@01e092bd14440bf96585c32c6e42be51c6a9b6de)
        arn = re.fullmatch(r"arn:aws[\w-]*:eks:([\w-]+):\d+:cluster/(.+)", getattr(ctx.kube, "cluster", ""))
        if arn is None:
            seen += " (not compared with the stack's endpoint, which aws.cluster did not read)"
        elif (arn[1], arn[2]) != (ctx.config.region, names.cluster_name(ctx.config.stack)):
            return failed(f"the kubeconfig's context is {arn[0]}, not the stack's cluster", update)
    if minor != ctx.config.kubernetes_version:
        return failed(f"{seen}; the stack pins {ctx.config.kubernetes_version}", "run `pulumi up` (docs/upgrading.md)")
    return passed(seen)


def _fresh(lease: dict, now: datetime.datetime) -> str | None:
    """Why a Lease is not held by a live leader, or None."""
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity"):
        return "held by nobody"
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    if not renewed:
        return "never renewed"
    age = (now - _iso(renewed)).total_seconds()
    if age > float(spec.get("leaseDurationSeconds") or 15) * 2:
        return f"last renewed {age:.0f} s ago"
    return None


def leases(ctx: Any) -> Outcome:
    from kubernetes.client.exceptions import ApiException

    now = ctx.now()
    problems: list[str] = []
    held: list[str] = []
    for namespace, name, who, runs in LEASES:
        if not runs(ctx):
            continue
        try:
            lease = ctx.kube.lease(namespace, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            problems.append(f"{who}: no Lease {namespace}/{name}")
            continue
        why = _fresh(lease, now)
        (problems if why else held).append(f"{who} ({namespace}/{name}): {why or lease['spec']['holderIdentity']}")
    volcano = ctx.kube.leases(VOLCANO_NAMESPACE)
    stale = [f"{lease['metadata']['name']} {why}" for lease in volcano if (why := _fresh(lease, now))]
    if len(volcano) < VOLCANO_LEASES or stale:
        problems.append(
            f"Volcano: {len(volcano)} Lease(s) in {VOLCANO_NAMESPACE}" + (f", {'; '.join(stale)}" if stale else "")
        )
    else:
        held.append(f"Volcano: {len(volcano)} Leases held")
    if problems:
        return failed(
            "; ".join(problems),
            "a controller without its Lease does nothing: `kubectl -n NS logs deploy/NAME` and "
            "`kubectl auth can-i update leases/NAME -n NS --as system:serviceaccount:NS:SA` (docs/controllers.md)",
        )
    return passed("; ".join(held))


def cluster_made(ctx: Any) -> Outcome:
    """Objects the cluster creates itself carry our fields after the first apply (docs/day-one-journey.md 5)."""
    problems, seen = [], []
    queue = ctx.kube.cluster_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", "default")
    if (queue.get("spec") or {}).get("reclaimable") is not False:
        problems.append(f"Volcano's default queue: reclaimable {queue.get('spec', {}).get('reclaimable')!r}")
    else:
        seen.append("default queue not reclaimable")
    for team in ctx.config.scheduler.teams:
        sa = ctx.kube.service_account(team.name, "default")
        managers = sorted({m.get("manager", "?") for m in sa["metadata"].get("managedFields") or []})
        if sa.get("automountServiceAccountToken") is not False:
            problems.append(f"{team.name}/default mounts a token (managers: {', '.join(managers) or 'none'})")
        elif not any(m.startswith(PULUMI_MANAGER) for m in managers):
            problems.append(
                f"{team.name}/default has no {PULUMI_MANAGER} field manager (managers: {', '.join(managers)})"
            )
        else:
            seen.append(f"{team.name}/default tokenless")
    if problems:
        return failed("; ".join(problems), "rerun `pulumi up`: the Server-Side Apply patches take these fields over")
    return passed("; ".join(seen))


# Karpenter's node classes and pools (components/karpenter.py ec2_node_class, node_pool), as the CRDs of
# aws/karpenter-provider-aws:pkg/apis/crds/@v1.14.1 serve them. Every field of their spec says what Karpenter
# launches: a class's image, user data, root volume (blockDeviceMappings: an unencrypted one, or one made from a
# snapshot, which is another image), kubelet (clusterDNS), instance profile, metadata service, a public address; a
# pool's class, taints and startup taints (the health gate's), requirements, limits and disruption. The API server
# holds each planned object with its CRD's schema defaults filled in where the plan leaves a field out (a class's
# metadataOptions, a pool's disruption and expireAfter: infra/offline/crd_schemas.py defaulted), so a live spec is the
# planned one so defaulted, IDs known only at deploy (the role, subnets, security groups) aside. The live object is
# compared as returned, never defaulted: a field the plan sets and live lacks is drift, whatever its default.
NODE_CLASSES = ("karpenter.k8s.aws", "v1", "ec2nodeclasses")
NODE_POOLS = ("karpenter.sh", "v1", "nodepools")


def _drift(live: Any, want: Any, path: str = "") -> list[str]:
    """The dotted paths at which `live` is not `want`, where the plan's COMPUTED (an ID known only after deploy)
    stands for any one value; lists are compared whole."""
    if want == COMPUTED:
        return [] if live is not None and not isinstance(live, dict | list) else [path]
    if isinstance(want, dict) and isinstance(live, dict):
        keys = sorted({*live, *want})
        return [p for k in keys for p in _drift(live.get(k), want.get(k), f"{path}.{k}" if path else k)]
    if isinstance(want, list) and isinstance(live, list) and len(live) == len(want):
        return [] if all(not _drift(a, b) for a, b in zip(live, want, strict=True)) else [path]
    return [] if live == want else [path]


def _karpenter_drift(ctx: Any, kind: str, api: tuple[str, str, str]) -> tuple[list[str], dict[str, dict]] | None:
    """Each live object of a Karpenter kind the plan does not make, each planned one missing, and the spec fields
    of the others not as planned; with the planned specs by name, their CRD's defaults filled in. None: the kind is
    not served (no Karpenter CRDs) and the plan makes none."""
    from kubernetes.client.exceptions import ApiException

    planned = {
        r.inputs["metadata"]["name"]: crd_schemas.defaulted(r.inputs).get("spec") or {}
        for r in ctx.plan.resources
        if r.inputs.get("kind") == kind
    }
    try:
        live = {o["metadata"]["name"]: o.get("spec") or {} for o in ctx.kube.cluster_objects(*api)}
    except ApiException as exc:
        if exc.status != 404 or planned:
            raise
        return None
    problems = [f"{name}: not planned" for name in sorted(set(live) - set(planned))]
    problems += [f"{name}: missing" for name in sorted(set(planned) - set(live))]
    for name in sorted(set(live) & set(planned)):
        changed = _drift(live[name], planned[name])
        if changed:
            problems.append(f"{name}: {', '.join(changed)} not as planned")
    return problems, planned


def node_classes(ctx: Any) -> Outcome:
    """Every EC2NodeClass in the cluster is one the plan makes, its spec as planned: the deploy role, cluster admin
    in Kubernetes, could edit one's user data, image or root volume, or add one a NodePool names, and Karpenter would
    launch nodes on the node role running it, where no IAM policy and no AWS check looks (aws.node-groups reads the
    node groups' launch templates; Karpenter makes its own from these). A class naming another role launches
    nothing (Karpenter's controller may pass the node role alone, components/karpenter.py AllowPassingInstanceRole)."""
    found = _karpenter_drift(ctx, "EC2NodeClass", NODE_CLASSES)
    if found is None:
        return passed("no Karpenter pool and no EC2NodeClass kind in the cluster")
    problems, planned = found
    if problems:
        return failed(
            "EC2NodeClass " + "; ".join(problems),
            "`kubectl get ec2nodeclass NAME -o yaml` against `higgsfield plan STACK`; `pulumi up` sets a planned class "
            "back (a missing one too); one the plan does not make goes with `kubectl delete ec2nodeclass NAME` after "
            "the NodePools naming it (Karpenter drains their nodes first); the API server's audit log says who "
            "wrote it",
        )
    if not planned:
        return passed("no Karpenter pool, and no EC2NodeClass in the cluster")
    return passed(f"{len(planned)} EC2NodeClass(es) as planned, none other")


# A NodeClaim is what Karpenter launches an instance for; one the deploy role writes itself, of no NodePool, is
# launched all the same: the lifecycle controller takes every claim whose nodeClassRef is an EC2NodeClass (IsManaged,
# kubernetes-sigs/karpenter:pkg/utils/nodeclaim/nodeclaim.go@6e7eab7a0f48, the core Karpenter v1.14.1 vendors). A
# pool's claims carry its name as this label and its template's class, taints and startup taints (NodeClaimTemplate.
# ToNodeClaim, pkg/apis/v1/nodepool.go@6e7eab7a0f48; an empty list is left out), and its requirements narrowed by the
# pods' (an `In` of the pool's values, or fewer: NewNodeClaimTemplate, pkg/controllers/provisioning/scheduling/
# nodeclaimtemplate.go@6e7eab7a0f48).
NODE_CLAIMS = ("karpenter.sh", "v1", "nodeclaims")
NODEPOOL_LABEL = NODEPOOL_TAG  # Karpenter writes a claim's pool under one key: its label, its instance's tag
FROM_THE_POOL = ("nodeClassRef", "taints", "startupTaints")


def _claims_off_their_pool(ctx: Any, pools: dict[str, dict]) -> list[str]:
    """Each NodeClaim that names no planned NodePool, or whose class, taints, startup taints or requirements are not
    its pool's planned ones."""
    problems = []
    for claim in ctx.kube.cluster_objects(*NODE_CLAIMS):
        name, pool = claim["metadata"]["name"], (claim["metadata"].get("labels") or {}).get(NODEPOOL_LABEL)
        if pool not in pools:
            problems.append(f"NodeClaim {name}: of no planned NodePool ({pool or f'no {NODEPOOL_LABEL} label'})")
            continue
        want, got = (pools[pool].get("template") or {}).get("spec") or {}, claim.get("spec") or {}
        off = [f for f in FROM_THE_POOL if _drift(got.get(f) or [], want.get(f) or [])]
        asked = {r["key"]: r for r in got.get("requirements") or [] if r.get("operator") == "In"}
        off += [
            f"requirement {r['key']}"
            for r in want.get("requirements") or []
            if r.get("operator") == "In"
            and not set((asked.get(r["key"]) or {}).get("values") or [None]) <= set(r["values"])
        ]
        if off:
            problems.append(f"NodeClaim {name}: {', '.join(off)} not its NodePool {pool}'s")
    return problems


def node_pools(ctx: Any) -> Outcome:
    """Every Karpenter NodePool in the cluster is one the plan makes, its spec as planned, and every NodeClaim is of
    one, with its class, taints and startup taints: a pool or claim the plan does not make may name a planned class
    (kube.node-classes passes) and launch GPU nodes without the health gate's startup taint or the GPU taint, of
    other types, without limits, or disrupting training pods; the deploy role, cluster admin in Kubernetes, may write
    either, and no AWS check sees it."""
    found = _karpenter_drift(ctx, "NodePool", NODE_POOLS)
    if found is None:
        return passed("no Karpenter pool and no NodePool kind in the cluster")
    drift, planned = found
    problems = [f"NodePool {p}" for p in drift] + _claims_off_their_pool(ctx, planned)
    if problems:
        return failed(
            "; ".join(problems),
            "`kubectl get nodepool NAME -o yaml` against `higgsfield plan STACK`; `pulumi up` sets a planned pool "
            "back (a missing one too); a pool or claim the plan does not make goes with `kubectl delete nodepool "
            "NAME` or `kubectl delete nodeclaim NAME` (Karpenter drains its nodes first; a claim made before a planned "
            "change of its pool's taints is replaced by Drift once no training pod holds its node); the API server's "
            "audit log says who wrote it",
        )
    if not planned:
        return passed("no Karpenter pool, and no NodePool or NodeClaim in the cluster")
    return passed(f"{len(planned)} NodePool(s) as planned, none other; every NodeClaim one of theirs")


# The API server's audit log: EKS writes it into the cluster's log group (components/cluster.py
# CONTROL_PLANE_LOG_TYPES), in streams named kube-apiserver-audit-* (docs.aws.amazon.com/eks/latest/userguide/
# control-plane-logs.html), one audit.k8s.io/v1 Event a record. Karpenter names a claim by generateName, and a record
# holds the generated name only where the policy logs the request object, so the records are not matched to claims:
# every NodeClaim create since an hour before the oldest Karpenter instance's launch is read (a claim is made before its
# instance; the hour is margin for a launch that waited). A claim is made by a create (POST), or by a server-side apply
# (`kubectl apply --server-side`) of one that does not exist: a PATCH, its record's verb `patch` (RequestInfoFactory,
# kubernetes/kubernetes:staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go@db8b216c), answered 201 where
# it created the object (PatchResource's wasCreated, patch.go@00f75347 in the same tree's handlers/). A PUT makes no
# custom resource (customResourceStrategy.AllowCreateOnUpdate is false: kubernetes/kubernetes:staging/src/
# k8s.io/apiextensions-apiserver/pkg/registry/customresource/strategy.go@f9cfc9d9), and a claim's spec is immutable once
# made (`self == oldSelf`: aws/karpenter-provider-aws:pkg/apis/crds/karpenter.sh_nodeclaims.yaml@v1.14.1).
AUDIT_STREAMS = "kube-apiserver-audit"
CLAIM_CREATES = (
    '{ $.objectRef.apiGroup = "karpenter.sh" && $.objectRef.resource = "nodeclaims" && '
    '($.verb = "create" || ($.verb = "patch" && $.responseStatus.code = 201)) }'
)
KARPENTER_USER = f"system:serviceaccount:{KARPENTER_NAMESPACE}:{KARPENTER_ACCOUNT}"
# Three more ways to act as Karpenter's account, each in the records EKS's audit policy keeps (aws/
# aws-eks-best-practices:content/security/docs/detective.md@1d3b1085713aeb200cca60f72392ac99811ce565, "The audit policy
# for EKS is as follows"): a write of the core, apps or batch groups is logged at RequestResponse, so its record holds
# the request's body (requestObject) and the stored object (responseObject), unless it outgrows CloudWatch's 256 KB
# entry (then it is truncated, unreadable here, or metadata only: a write with no body is named); a get of them at
# Request; a Secret at Metadata (its name, not its type). A pod running as the account (the kubelet asks its token, as
# for Karpenter's own), or an exec, attach or ephemeral container into Karpenter's pod (the mounted token), is found in
# KARPENTER_PODS; a workload whose pods run as it in KARPENTER_WORKLOADS. Each selects every such write in Karpenter's
# namespace and the account is read here: a JSON filter cannot select a record by a key it lacks. A mutating webhook
# may set a pod's account after its request: the stored pod, responseObject, holds what runs.
KARPENTER_PODS = (
    f'{{ $.objectRef.resource = "pods" && $.objectRef.namespace = "{KARPENTER_NAMESPACE}" && ($.verb = "create" || '
    '$.objectRef.subresource = "exec" || $.objectRef.subresource = "attach" || '
    '$.objectRef.subresource = "ephemeralcontainers") }'
)
# The pods of Karpenter's Deployment are made by the ReplicaSet controller, which on EKS acts as its own account
# (kube-controller-manager's --use-service-account-credentials); the other controllers make the pods of the other
# workloads, whose own records are read.
CONTROLLER_ACCOUNTS = (
    "replicaset-controller",
    "deployment-controller",
    "daemon-set-controller",
    "statefulset-controller",
    "job-controller",
    "replication-controller",
)
POD_MAKER, RS_MAKER = (f"system:serviceaccount:{KARPENTER_NAMESPACE}:{a}" for a in CONTROLLER_ACCOUNTS[:2])
POD_MAKERS = {f"system:serviceaccount:{KARPENTER_NAMESPACE}:{a}" for a in CONTROLLER_ACCOUNTS} - {RS_MAKER}
# Whose tokens are asked in Karpenter's namespace, and by whom: Karpenter's account's by the kubelet of the node its
# pod runs on (system:node:NAME), the controllers' above by kube-controller-manager alone, which asks each a token
# with its own credentials (DynamicControllerClientBuilder, tokenSourceImpl.Token: kubernetes/kubernetes:staging/src/
# k8s.io/controller-manager/pkg/clientbuilder/client_builder_dynamic.go@00115d34). Anyone else holding a controller's
# token could make pods or ReplicaSets as that controller, which KARPENTER_PODS and KARPENTER_WORKLOADS exempt.
CONTROLLER_MANAGER = "system:kube-controller-manager"
KARPENTER_TOKENS = (
    '{ $.objectRef.resource = "serviceaccounts" && $.objectRef.subresource = "token" && '
    f'$.objectRef.namespace = "{KARPENTER_NAMESPACE}" && $.verb = "create" && ('
    + " || ".join(f'$.objectRef.name = "{a}"' for a in (KARPENTER_ACCOUNT, *CONTROLLER_ACCOUNTS))
    + ") }"
)
WORKLOADS = ("deployments", "replicasets", "statefulsets", "daemonsets", "jobs", "cronjobs", "replicationcontrollers")
KARPENTER_WORKLOADS = (
    f'{{ $.objectRef.namespace = "{KARPENTER_NAMESPACE}" && '
    '($.verb = "create" || $.verb = "update" || $.verb = "patch") && ('
    + " || ".join(f'$.objectRef.resource = "{w}"' for w in WORKLOADS)
    + ") }"
)
# The API server annotates each request a Secret-based (legacy) token authenticated, the token's subject as the value,
# whatever made the Secret (JWTTokenAuthenticator.AuthenticateToken: a token with no audience, kubernetes/kubernetes:
# pkg/serviceaccount/jwt.go@023feb4a622fb6828dad0c1af0a0770746a37ee4), and the Secret's name under
# legacy-token-manual-secret or legacy-token-autogenerated-secret (legacyValidator.Validate, legacy.go in the same
# package). A JSON selector cannot name a key holding "/", so the pattern selects the records holding both phrases
# and the annotation's value is read here.
LEGACY_TOKEN = "authentication.k8s.io/legacy-token"
KARPENTER_LEGACY_TOKENS = f'"{LEGACY_TOKEN}" "{KARPENTER_USER}"'
# The kubelet's API runs a command in a pod by its exec, attach and run paths (/exec/NAMESPACE/POD/...), each behind
# the API server's nodes/proxy (kubernetes/kubernetes:pkg/kubelet/server/auth_test.go@
# 7caff55fd9c4689bb393da2654ec1cbe06cf4f44, AuthzTestCases), whose records name the node alone: the path is read from
# the request's URI (/api/v1/nodes/NAME/proxy/PATH).
KUBELET_SHELLS = ("exec", "attach", "run")
NODE_PROXIES = '{ $.objectRef.resource = "nodes" && $.objectRef.subresource = "proxy" }'
NODE_PROXY_PATH = re.compile(r"/api/v1/nodes/[^/]+/proxy(/.*)?")
CLAIM_LEAD = datetime.timedelta(hours=1)
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


def _live_instances(ctx: Any, *filters: dict) -> Iterator[dict]:
    """Every instance DescribeInstances finds with `filters` that is not terminated (LIVE_STATES), every page."""
    pages = ctx.client("ec2").get_paginator("describe_instances")
    live = {"Name": "instance-state-name", "Values": list(LIVE_STATES)}
    for page in pages.paginate(Filters=[*filters, live]):
        for reservation in page.get("Reservations") or []:
            yield from reservation.get("Instances") or []


def _karpenter_launches(ctx: Any) -> list[datetime.datetime]:
    """When each instance Karpenter launched for the stack's cluster and not yet terminated was launched: Karpenter
    tags every instance it launches with the cluster's owned tag and its NodePool (components/karpenter.py
    karpenter_policy, AllowScopedEC2InstanceActionsWithTags), a forged claim's as well."""
    owned = {"Name": f"tag:kubernetes.io/cluster/{names.cluster_name(ctx.config.stack)}", "Values": ["owned"]}
    return sorted(i["LaunchTime"] for i in _live_instances(ctx, owned, {"Name": "tag-key", "Values": [NODEPOOL_TAG]}))


def _audit_lines(
    ctx: Any, since: datetime.datetime, pattern: str, judge: Callable[[dict], str | None]
) -> Iterator[str]:
    """What `judge` says of each of the cluster's audit records since `since` that the filter `pattern` selects
    (None: nothing), every page; a record that is no JSON object is named as unreadable."""
    pages = ctx.client("logs").get_paginator("filter_log_events")
    for page in pages.paginate(
        logGroupName=f"/aws/eks/{names.cluster_name(ctx.config.stack)}/cluster",
        logStreamNamePrefix=AUDIT_STREAMS,
        filterPattern=pattern,
        startTime=int(since.timestamp() * 1000),
        endTime=int(ctx.now().timestamp() * 1000),
    ):
        for event in page.get("events") or []:
            try:
                record = json.loads(event.get("message") or "")
            except ValueError:
                record = None
            if not isinstance(record, dict):
                yield f"an unreadable audit record ({event.get('logStreamName')}, event {event.get('eventId')})"
            elif (line := judge(record)) is not None:
                yield line


def _logged(record: dict, what: str) -> str:
    """A line naming a record's request: when, `what`, its audit id."""
    return f"{record.get('requestReceivedTimestamp')} {what} ({record.get('auditID')})"


def _user(record: dict) -> Any:
    return (record.get("user") or {}).get("username")


def _made(record: dict, created: Iterable[int]) -> bool:
    """Whether the request the record logs was carried out and stored something: a status in `created`, and not a
    dry run by its query's dryRun key, the one the API server reads (the rest of a query it ignores:
    Convert_url_Values_To_v1_CreateOptions, kubernetes/kubernetes:staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/
    zz_generated.conversion.go@025f2834), not by `dryRun=` anywhere in it (`?xdryRun=1` creates)."""
    code = (record.get("responseStatus") or {}).get("code")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(str(record.get("requestURI"))).query)
    return isinstance(code, int) and code in created and not query.get("dryRun")


def _claim_created(record: dict) -> str | None:
    """A NodeClaim create (CLAIM_CREATES) that the API server carried out for anyone but Karpenter's service account:
    who, when, the audit id. A refused create (a status of 300 or more) or a dry run made nothing."""
    user = _user(record)
    if _made(record, (201,) if record.get("verb") == "patch" else range(200, 300)) and user != KARPENTER_USER:
        name = (record.get("objectRef") or {}).get("name") or "(a generated name)"
        return _logged(record, f"{user} created NodeClaim {name}")
    return None


def _token_asked(record: dict) -> str | None:
    """A token of Karpenter's service account asked by anyone but a node, or of a pod-making controller's asked by
    anyone but kube-controller-manager (KARPENTER_TOKENS): the kubelet asks the tokens a pod mounts (as
    system:node:NAME), so another asker holds Karpenter's identity, and what it creates is logged as Karpenter's
    (`kubectl create token karpenter -n kube-system`, a TokenRequest: the create of the serviceaccounts/token
    subresource); a controller's token makes its pods and ReplicaSets the controller's."""
    user = str(_user(record))
    account = str((record.get("objectRef") or {}).get("name"))
    own = user.startswith("system:node:") if account == KARPENTER_ACCOUNT else user == CONTROLLER_MANAGER
    if _made(record, range(200, 300)) and not own:
        return _logged(record, f"{user} asked a token of system:serviceaccount:{KARPENTER_NAMESPACE}:{account}")
    return None


def _body(record: dict) -> dict | None:
    """What a write stored (responseObject), else what it asked (requestObject): None where the record holds neither,
    a write whose record outgrew CloudWatch's entry and kept its metadata only."""
    for key in ("responseObject", "requestObject"):
        if isinstance(record.get(key), dict):
            return record[key]
    return None


def _runs_as(spec: Any) -> Any:
    return spec.get("serviceAccountName") if isinstance(spec, dict) else None


def _not_karpenters(spec: Any) -> list[str]:
    """The images of a pod spec's containers and init containers other than Karpenter's controller's: each container
    of a pod mounts its account's token, and Karpenter's chart runs one container of its own image (KARPENTER_IMAGE,
    at any tag or digest, so an upgrade's is Karpenter's too)."""
    spec = spec if isinstance(spec, dict) else {}
    images = [
        str(c.get("image")) if isinstance(c, dict) else str(c)
        for key in ("initContainers", "containers")
        for c in spec.get(key) or []
    ]
    return [
        i for i in images if i != KARPENTER_IMAGE and not i.startswith((f"{KARPENTER_IMAGE}:", f"{KARPENTER_IMAGE}@"))
    ]


def _pod_written(record: dict) -> str | None:
    """A pod in Karpenter's namespace (KARPENTER_PODS) running as Karpenter's account that anyone but the ReplicaSet
    controller created (`kubectl run --overrides`, a pod of the admin's own: the kubelet asks its token, so what it
    creates is logged as Karpenter's), or that the controller created but did not ask to run as it, or with an image
    not Karpenter's (a mutating webhook's doing); a pod there whose record holds no body made by anyone but a
    workload's controller; an exec, attach or ephemeral container into one of Karpenter's pods (named after its
    Deployment) that the API server let through (kubectl's websocket exec is a `get`, answered 101), which reads the
    token the pod mounts."""
    ref, user = record.get("objectRef") or {}, _user(record)
    name, sub = ref.get("name") or "(a generated name)", ref.get("subresource")
    if sub in ("exec", "attach", "ephemeralcontainers"):
        if str(ref.get("name")).startswith(f"{KARPENTER_DEPLOYMENT}-") and _made(record, range(100, 300)):
            return _logged(record, f"{user} ran {sub} in Karpenter's pod {name}")
        return None
    if sub or record.get("verb") != "create" or not _made(record, range(200, 300)):
        return None
    body = _body(record)
    if body is None:
        return None if user in POD_MAKERS else _logged(record, f"{user} created pod {name}, its body not in the log")
    if _runs_as(body.get("spec")) != KARPENTER_ACCOUNT:
        return None
    # The ReplicaSet controller asks for its template's pod (requestObject); a mutating webhook may change the
    # account, or add a container, before it is stored (responseObject).
    request = record.get("requestObject")
    asked = _runs_as(request.get("spec")) if isinstance(request, dict) else KARPENTER_ACCOUNT
    others = _not_karpenters(body.get("spec"))
    if user != POD_MAKER:
        return _logged(record, f"{user} created pod {name} running as {KARPENTER_USER}")
    if asked != KARPENTER_ACCOUNT:
        return _logged(record, f"{user} created pod {name} running as {KARPENTER_USER}, asked as {asked}")
    if others:
        return _logged(record, f"{user} created pod {name} running {', '.join(others)} as {KARPENTER_USER}")
    return None


def _node_shell(record: dict) -> str | None:
    """An exec, attach or run into one of Karpenter's pods through a node's proxy (NODE_PROXIES: `kubectl get --raw
    /api/v1/nodes/NAME/proxy/exec/kube-system/POD/controller?command=...`, a `get` answered 101 over a websocket) that
    the API server let through: the kubelet runs it, and reading the token the pod mounts leaves no pods/exec."""
    found = NODE_PROXY_PATH.fullmatch(urllib.parse.urlsplit(str(record.get("requestURI"))).path)
    path = posixpath.normpath("/" + urllib.parse.unquote(found.group(1) or "").lstrip("/")) if found else ""
    parts = path.split("/")[1:]
    if (
        len(parts) > 2
        and parts[0] in KUBELET_SHELLS
        and parts[1] == KARPENTER_NAMESPACE
        and parts[2].startswith(f"{KARPENTER_DEPLOYMENT}-")
        and _made(record, range(100, 300))
    ):
        node = (record.get("objectRef") or {}).get("name")
        return _logged(
            record, f"{_user(record)} ran {parts[0]} in Karpenter's pod {parts[2]} through node {node}'s proxy"
        )
    return None


def _workload_written(record: dict) -> str | None:
    """A workload in Karpenter's namespace (KARPENTER_WORKLOADS) whose pods run as Karpenter's account, made or
    changed by anyone, or written with no body in its record: its pods are the controllers', so only the workload's
    record names who. Karpenter's own Deployment is the deploy role's to write (`pulumi up` installs and upgrades its
    Helm release) while its template runs Karpenter's image alone (_not_karpenters), and the ReplicaSets of every
    Deployment the Deployment controller's; a status or scale change (a subresource) runs nothing new."""
    ref, user = record.get("objectRef") or {}, _user(record)
    resource, name = ref.get("resource"), ref.get("name") or "(a generated name)"
    if resource not in WORKLOADS or ref.get("subresource") or not _made(record, range(200, 300)):
        return None
    if (resource, user) == ("replicasets", RS_MAKER):
        return None
    verb = {"create": "created", "update": "updated", "patch": "patched"}.get(str(record.get("verb")))
    body = _body(record)
    spec = (body or {}).get("spec") or {}
    if resource == "cronjobs":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    pod = (spec.get("template") or {}).get("spec")
    if body is None:
        return _logged(record, f"{user} {verb} {resource} {name}, its body not in the log")
    if (resource, name) == ("deployments", KARPENTER_DEPLOYMENT):
        others = ", ".join(_not_karpenters(pod))
        return (
            _logged(record, f"{user} {verb} {resource} {name} running {others} as {KARPENTER_USER}") if others else None
        )
    if _runs_as(pod) == KARPENTER_ACCOUNT:
        return _logged(record, f"{user} {verb} {resource} {name} running as {KARPENTER_USER}")
    return None


def _legacy_tokens_used() -> Callable[[dict], str | None]:
    """A judge of the requests a Secret-based token of Karpenter's account authenticated (KARPENTER_LEGACY_TOKENS; a
    Secret of type kubernetes.io/service-account-token, which the token controller fills): Karpenter's pod mounts a
    TokenRequest token, so such a token's holder is someone else, and what it creates is logged as Karpenter's. It
    names each Secret once."""
    seen: set[str] = set()

    def judge(record: dict) -> str | None:
        notes = record.get("annotations") or {}
        if notes.get(LEGACY_TOKEN) != KARPENTER_USER:
            return None
        secret = notes.get(f"{LEGACY_TOKEN}-manual-secret") or notes.get(f"{LEGACY_TOKEN}-autogenerated-secret") or "?"
        if secret in seen:
            return None
        seen.add(secret)
        return _logged(record, f"a Secret-based token of {KARPENTER_USER} (Secret {secret}) was used")

    return judge


def node_claim_creators(ctx: Any) -> Outcome:
    """Every instance Karpenter runs for the cluster is of a NodeClaim Karpenter made: the API server's audit log
    holds no NodeClaim create of anyone else's, and nothing else acting as Karpenter's account (a token asked by anyone
    but a node, a pod or workload running as it, a Secret-based token of it, a shell in its pod), since the oldest was
    launched. A claim the deploy role writes itself
    is launched by Karpenter all the same, outside every NodePool's limits, and one copying its pool's label, class,
    taints and requirements passes kube.node-pools; only the audit log, which the deploy role may not delete or
    write (components/delivery.py AuditLogsStay, OnlyEksWritesTheAuditLog), says who made it. A claim not yet
    launched is read by the next run."""
    launches = _karpenter_launches(ctx)
    if not launches:
        return passed("no instance of Karpenter's in the cluster")
    kept = datetime.timedelta(days=ctx.config.observability.log_retention_days)
    since = max(launches[0] - CLAIM_LEAD, ctx.now() - kept)
    judges = (
        (CLAIM_CREATES, _claim_created),
        (KARPENTER_TOKENS, _token_asked),
        (KARPENTER_PODS, _pod_written),
        (NODE_PROXIES, _node_shell),
        (KARPENTER_WORKLOADS, _workload_written),
        (KARPENTER_LEGACY_TOKENS, _legacy_tokens_used()),
    )
    others = [line for pattern, judge in judges for line in _audit_lines(ctx, since, pattern, judge)]
    if others:
        return failed(
            "; ".join(others),
            "`kubectl get nodeclaims` and `kubectl delete nodeclaim NAME` for each claim Karpenter did not make "
            "(Karpenter drains its node first); the audit id finds the request in the log group "
            "(`aws logs filter-log-events --log-group-name /aws/eks/CLUSTER/cluster "
            "--filter-pattern '{ $.auditID = \"AUDIT_ID\" }'`): "
            "revoke the user's sessions; delete a pod or workload named (`kubectl delete -n kube-system KIND NAME`), "
            "a Secret named (`kubectl delete secret -n kube-system NAME`), and restart Karpenter's pods after a shell "
            "in one (`kubectl rollout restart -n kube-system deployment/karpenter`: new pods, new tokens)",
        )
    older = [t for t in launches if t - CLAIM_LEAD < ctx.now() - kept]
    if older:
        return skipped(
            f"{len(older)} of {len(launches)} Karpenter instance(s) older than the audit log's {kept.days} days "
            "(logRetentionDays): who made their claims is no longer kept; the others' claims Karpenter's",
            "`kubectl delete nodeclaim NAME` of an old one lets Karpenter make it again if its pods need it",
        )
    return passed(f"{len(launches)} Karpenter instance(s), each claim made by {KARPENTER_USER} (the audit log)")


# EC2 Auto Scaling tags each instance it launches with its group's name under aws:autoscaling:groupName, a key no
# caller may write or delete (aws: keys are AWS's: docs.aws.amazon.com/autoscaling/ec2/userguide/
# ec2-auto-scaling-tagging.html; docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_Tags.html, tag restrictions).
ASG_TAG = "aws:autoscaling:groupName"


def _karpenters(tags: dict[str, str], cluster: str) -> bool:
    """Whether an instance's tags are all those Karpenter launches the cluster's with (the owned tag, the pool's, the
    class's and the cluster's name: getTags, aws/karpenter-provider-aws:pkg/utils/utils.go@v1.14.1). The last three
    are what its garbage collection lists by (DefaultProvider.List, pkg/providers/instance/instance.go@v1.14.1), and
    it terminates one it lists that no NodeClaim's providerID names, 30 seconds after its launch (pkg/controllers/
    nodeclaim/garbagecollection/controller.go@v1.14.1): an instance of the deploy role's own with Karpenter's tags is
    either collected, or missing one of them, and so not taken for Karpenter's here."""
    return (
        tags.get(f"kubernetes.io/cluster/{cluster}") == "owned"
        and tags.get(CLUSTER_NAME_TAG) == cluster
        and NODEPOOL_TAG in tags
        and NODECLASS_TAG in tags
    )


def vpc_instances(ctx: Any) -> Outcome:
    """Every instance in the cluster's VPC is one the stack runs: a node of a node group the plan makes (by its Auto
    Scaling group's tag, which no caller writes), one Karpenter launched for a planned NodePool (all the tags Karpenter
    launches with: _karpenters), or the FSx layout client at its planned address (aws.layout-client reads the rest
    of it). An instance of the deploy role's own in the VPC reaches the file system and the nodes; and a forged
    NodeClaim's instance with Karpenter's tags taken off leaves aws.node-claim-creators' window, but not this list.
    An instance given all of a planned pool's Karpenter tags passes here: Karpenter, which kube.leases finds running,
    terminates it unless a NodeClaim names it, and aws.node-claim-creators then reads the audit log from its launch."""
    cluster = names.cluster_name(ctx.config.stack)
    vpc = (_described_cluster(ctx).get("resourcesVpcConfig") or {}).get("vpcId")
    planned, _ = _cluster_groups(ctx)
    asgs = {
        a["name"]
        for groups in planned.values()
        for g in groups
        for a in (g.get("resources") or {}).get("autoScalingGroups") or []
    }
    pools = {r.inputs["metadata"]["name"] for r in ctx.plan.resources if r.inputs.get("kind") == "NodePool"}
    layout = _planned_layout(ctx)
    address = str(layout[0].inputs["privateIp"]) if layout else None
    seen, unknown = 0, []
    for instance in _live_instances(ctx, {"Name": "vpc-id", "Values": [str(vpc)]}):
        seen += 1
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
        if tags.get(ASG_TAG) in asgs:
            continue
        if _karpenters(tags, cluster) and tags.get(NODEPOOL_TAG) in pools:
            continue
        if address and instance.get("PrivateIpAddress") == address and storage.LAYOUT_TAG in tags:
            continue
        shown = ", ".join(f"{k}={v}" for k, v in sorted(tags.items())) or "no tags"
        unknown.append(f"{instance.get('InstanceId')} (launched {instance.get('LaunchTime')}; {shown})")
    if unknown:
        return failed(
            f"in {vpc}, not the stack's: " + "; ".join(unknown),
            "an administrator reads who launched each (CloudTrail RunInstances, its instance id) and terminates it "
            "(`aws ec2 terminate-instances --instance-ids ID`); one under a NodeClaim Karpenter did not make: "
            "`kubectl delete nodeclaim NAME` (its karpenter.sh/nodeclaim tag, if left, names it)",
        )
    return passed(f"{seen} instance(s) in {vpc}, each a planned node group's, a planned pool's or the layout client")


def queues(ctx: Any) -> Outcome:
    from kubernetes.client.exceptions import ApiException

    problems, seen = [], []
    try:
        ctx.kube.mutating_webhook(PODGROUP_WEBHOOK)
    except ApiException as exc:
        if exc.status != 404:
            raise
        problems.append(f"no MutatingWebhookConfiguration {PODGROUP_WEBHOOK}: PodGroups keep queue default")
    for team in ctx.config.scheduler.teams:
        queue = ctx.kube.cluster_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", team.queue)
        state = (queue.get("status") or {}).get("state", "?")
        annotation = (ctx.kube.namespace(team.name)["metadata"].get("annotations") or {}).get(names.QUEUE_ANNOTATION)
        if state != "Open" or annotation != team.queue:
            problems.append(f"{team.name}: queue {team.queue} {state}, namespace annotation {annotation!r}")
        else:
            seen.append(f"{team.name} -> {team.queue} Open")
    if problems:
        return failed("; ".join(problems), "`kubectl get queue -o wide`; rerun `pulumi up`")
    return passed("; ".join(seen))


def _autoscaler_health(text: str) -> str:
    import re

    import yaml

    try:
        status = yaml.safe_load(text)
    except yaml.YAMLError:
        status = None
    if isinstance(status, dict) and "clusterWide" in status:
        return str(((status.get("clusterWide") or {}).get("health") or {}).get("status", "?"))
    found = re.search(r"Health:\s+(\w+)", text)
    return found.group(1) if found else "?"


def autoscaler_status(ctx: Any) -> Outcome:
    """The autoscaler reconciles: its status ConfigMap says the cluster is Healthy (journey step 8)."""
    if not ctx.plan.of_type(AUTOSCALER):
        return skipped("no Cluster Autoscaler in this stack")
    status = ctx.kube.config_map(names.KUBE_SYSTEM, AUTOSCALER_STATUS)
    health = _autoscaler_health((status.get("data") or {}).get("status", ""))
    if health != "Healthy":
        return failed(
            f"{names.KUBE_SYSTEM}/{AUTOSCALER_STATUS}: cluster-wide health {health}",
            f"`kubectl -n {names.KUBE_SYSTEM} get configmap {AUTOSCALER_STATUS} -o yaml` names the unready node "
            "groups; docs/autoscaling.md",
        )
    return passed(f"{names.KUBE_SYSTEM}/{AUTOSCALER_STATUS}: Healthy")


def _warnings(policy: dict) -> list[str]:
    """The API server's type-checking warnings of a policy's CEL (status.typeChecking.expressionWarnings)."""
    checked = ((policy.get("status") or {}).get("typeChecking") or {}).get("expressionWarnings") or []
    return [w.get("warning", "") for w in checked]


def _binding_spec(spec: dict) -> dict:
    """A ValidatingAdmissionPolicyBinding's spec with the API server's matchResources defaults filled in."""
    if "matchResources" not in spec:
        return spec
    return {**spec, "matchResources": {**MATCH_RESOURCES_DEFAULTS, **(spec["matchResources"] or {})}}


def admission_policies(ctx: Any) -> Outcome:
    """Every planned ValidatingAdmissionPolicy is present and type-checked, and every planned binding is present with
    its planned spec: a policy judges only what a binding hands it, so one whose binding is gone, audits or warns
    instead of denying, or excludes a kind or a namespace, refuses nothing there while the policy itself is intact
    (the deploy role is cluster admin)."""
    want = {r.inputs["metadata"]["name"] for r in ctx.plan.of_type(VAP)}
    live = {p["metadata"]["name"]: p for p in ctx.kube.admission_policies()}
    problems = [f"missing: {name}" for name in sorted(want - set(live))]
    problems += [
        f"{name}: type-checking warning {_warnings(live[name])[0]}"
        for name in sorted(want & set(live))
        if _warnings(live[name])
    ]
    bindings = {b["metadata"]["name"]: b.get("spec") or {} for b in ctx.kube.admission_policy_bindings()}
    for planned in sorted(ctx.plan.of_type(VAP_BINDING), key=lambda r: r.inputs["metadata"]["name"]):
        name = planned.inputs["metadata"]["name"]
        if name not in bindings:
            problems.append(f"binding {name}: missing")
            continue
        changed = _drift(_binding_spec(bindings[name]), _binding_spec(planned.inputs.get("spec") or {}))
        if changed:
            problems.append(f"binding {name}: {', '.join(changed)} not as planned")
    if problems:
        return failed(
            "; ".join(problems),
            "rerun `pulumi up` (`pulumi refresh` first where a binding was edited: `kubectl get "
            "validatingadmissionpolicybinding NAME -o yaml` against `higgsfield plan STACK`); a warning means a CEL "
            "expression reads a field the schema lacks; the API server's audit log says who changed a binding",
        )
    return passed(
        f"{len(want)} ValidatingAdmissionPolicies present, type-checked without warnings, each binding as planned"
    )


def _attack(team: Any, other_queue: str) -> dict:
    return {
        "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": ATTACK_NAME, "namespace": team.name},
        "spec": {"minMember": 1, "queue": other_queue},
    }


def trial_job(
    team: Any,
    name: str = ATTACK_NAME,
    clean_pod_policy: str = names.CLEAN_POD_POLICY,
    managed_by: str | None = None,
    finalizer: str | None = None,
) -> dict:
    """A suspended TFJob the team's policy admits as it stands (given a name with `tf-`). Tried four times:
    under a name only a PyTorchJob may take (names.job_name_problem: the operator finds a job's PodGroup by
    name alone), with cleanPodPolicy None (its pods would outlive its PodGroup), managed by another
    controller (the operator would ignore it, its suspension included: docs/design/tenancy.md), and with a
    finalizer in its template (its pods, deleted, would stay on their nodes)."""
    spec = {
        "securityContext": {"runAsUser": team.uid, "runAsGroup": team.uid, "fsGroup": team.uid},
        "containers": [
            {
                "name": "tensorflow",
                "image": ATTACK_IMAGE,
                "command": ["true"],
                "securityContext": {"allowPrivilegeEscalation": False},
            }
        ],
    }
    request_in_full({"spec": spec}, team)  # what a rendered job's containers request (the team policy asks it)
    return {
        "apiVersion": f"{names.KUBEFLOW_GROUP}/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": team.name},
        "spec": {
            "runPolicy": {
                "suspend": True,
                "cleanPodPolicy": clean_pod_policy,
                "schedulingPolicy": {"queue": team.queue},
                **({"managedBy": managed_by} if managed_by else {}),
            },
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {**({"metadata": {"finalizers": [finalizer]}} if finalizer else {}), "spec": spec},
                }
            },
        },
    }


def plain_class(cfg: Any, team: Any) -> str | None:
    """A class of the team's that a plain GPU workload may name (serving or evaluation), if it has one."""
    workloads = {c.name: c.workload for c in cfg.scheduler.priority_classes}
    return next((c for c in team.priority_classes if workloads.get(c, "training") != "training"), None)


def _on_gpu_nodes(team: Any, priority_class: str | None) -> dict:
    """The trial job's pod spec (a fresh one: the caller's to change) placed on the GPU nodes as the team policy
    admits a plain workload's pod there: it tolerates the GPU taint, Volcano schedules it, and it names a class a
    plain workload may (`priority_class`, a serving or evaluation one)."""
    spec: dict = trial_job(team)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["tolerations"] = [{"key": names.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    spec["schedulerName"] = SCHEDULER
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def gpu_daemon_set(team: Any, priority_class: str | None) -> dict:
    """A DaemonSet that tolerates the GPU taint and asks a node's GPUs: the autoscalers would count its pod on every
    GPU node they plan, so no gang would fit one (docs/design/tenancy.md). Otherwise one the team policy admits: a
    GPU pod of Volcano's, in a class a plain workload may name (`priority_class`, a serving or evaluation one)."""
    spec = _on_gpu_nodes(team, priority_class)
    spec["containers"][0]["resources"] = {"limits": {names.GPU_RESOURCE: 8}}
    labels = {"app": ATTACK_NAME}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": ATTACK_NAME, "namespace": team.name},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": spec}},
    }


DEADLINE_FIELD = "spec.activeDeadlineSeconds"  # what the team policy's refusal of a pod without one names


# What a Job without GPUs does wrong in each of kube.tenant-attacks' dry runs, with the phrase of the team policy's
# refusal for it: run to no deadline on the teams' CPU nodes, run on the GPU nodes, be bound by another scheduler
# there, or tolerate their taint without selecting them.
CPU_ONLY_FAULTS = {
    "deadline": ("a Job without GPUs on the teams' CPU nodes and no deadline", "its deadline", DEADLINE_FIELD),
    "gpu-nodes": ("a Job without GPUs on the GPU nodes", "asking no GPU there", WITHOUT_GPUS_OFF_GPU_NODES),
    "scheduler": (
        "a Job without GPUs on the teams' CPU nodes for kube-scheduler",
        "its scheduler",
        ON_TEAM_CPU_NODES_BY_VOLCANO,
    ),
    "selector": (
        "a Job without GPUs tolerating the teams' CPU nodes without selecting them",
        "its selector",
        SELECTS_TEAM_CPU_NODES,
    ),
    "service-class": (
        f"a Job without GPUs on the teams' CPU nodes in {CPU_SERVICE_PRIORITY_CLASS}",
        "its class",
        CPU_SERVICES_SHAPE,
    ),
}


def cpu_only_job(team: Any, priority_class: str | None, fault: str = "deadline") -> dict:
    """A suspended batch Job whose pod asks no GPU and does one thing wrong (CPU_ONLY_FAULTS): by default it runs on
    the teams' CPU nodes to no activeDeadlineSeconds, so the CPU-only quota (scope Terminating) would not count it
    (docs/design/tenancy.md, "Pods without GPUs run to a deadline"); `gpu-nodes`: on the GPU nodes (as
    gpu_daemon_set's pod is), where a pod without GPUs would hold a node its team's GPUs do not pay for;
    `service-class`: in the class of services without GPUs, which goes on a Deployment's pods alone. Otherwise one
    the team policy admits, its container's requests the trial job's."""
    spec = _on_gpu_nodes(team, priority_class)
    if fault != "gpu-nodes":
        on_team_cpu_nodes(spec)
    if fault not in ("deadline", "service-class"):
        spec["activeDeadlineSeconds"] = names.LONGEST_POD_DEADLINE
    if fault == "service-class":  # the class's mark in place of the deadline, on a kind it may not go on
        spec["priorityClassName"] = CPU_SERVICE_PRIORITY_CLASS
    if fault == "scheduler":
        spec.pop("schedulerName")
    if fault == "selector":
        spec.pop("nodeSelector")
    spec["restartPolicy"] = "Never"  # a Job's pods may not restart Always (the API server's validation)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": ATTACK_NAME, "namespace": team.name},
        "spec": {"suspend": True, "backoffLimit": 0, "template": {"spec": spec}},
    }


def _refusal(ctx: Any, group: str, version: str, namespace: str, plural: str, body: dict) -> tuple[int, str] | None:
    """The status and message of a dry-run CREATE refused by a ValidatingAdmissionPolicy; None where it was
    admitted."""
    from kubernetes.client.exceptions import ApiException

    try:
        ctx.kube.create_namespaced(group, version, namespace, plural, body, dry_run=True)
    except ApiException as exc:
        message = (json.loads(exc.body or "{}") or {}).get("message", "")
        if exc.status in (403, 422) and "ValidatingAdmissionPolicy" in message:
            return exc.status, message
        raise
    return None


def _refused(ctx: Any, group: str, version: str, namespace: str, plural: str, body: dict) -> str | None:
    """The status of a dry-run CREATE refused by a ValidatingAdmissionPolicy; None where it was admitted."""
    refusal = _refusal(ctx, group, version, namespace, plural, body)
    return f"refused ({refusal[0]})" if refusal else None


def tenant_attacks(ctx: Any) -> Outcome:
    """Each team submits, as dry runs the API server must refuse: a PodGroup to a queue not its own, a
    TFJob under a name only a PyTorchJob may take, one that would keep its pods once finished, one
    handed to another controller, one whose pods carry a finalizer, a DaemonSet on the GPU nodes, and Jobs of pods
    without GPUs each doing one thing wrong (CPU_ONLY_FAULTS)."""
    teams = ctx.config.scheduler.teams
    problems, seen = [], []
    for team in teams:
        for job, what in (
            (trial_job(team), f"a TFJob named {ATTACK_NAME} (no tf-)"),
            (trial_job(team, name=TRIAL_JOB_NAME, clean_pod_policy="None"), "a TFJob with cleanPodPolicy None"),
            (trial_job(team, name=TRIAL_JOB_NAME, managed_by=OTHER_MANAGER), f"a TFJob managed by {OTHER_MANAGER}"),
            (trial_job(team, name=TRIAL_JOB_NAME, finalizer=ATTACK_FINALIZER), "a TFJob whose pods carry a finalizer"),
        ):
            verdict = _refused(ctx, *_kubeflow(job), job)
            if verdict:
                seen.append(f"{team.name}: {what} {verdict}")
            else:
                problems.append(f"{team.name}: {what} was admitted (dry run)")
        verdict = _refused(
            ctx, "apps", "v1", team.name, "daemonsets", gpu_daemon_set(team, plain_class(ctx.config, team))
        )
        what = "a DaemonSet on the GPU nodes"
        (seen if verdict else problems).append(f"{team.name}: {what} {verdict or 'was admitted (dry run)'}")
        # each refused for the one thing it does wrong (a test checks that against the policy's CEL): a refusal for
        # anything else would pass on a policy without the rule
        for fault, (what, why, mark) in CPU_ONLY_FAULTS.items():
            job = cpu_only_job(team, plain_class(ctx.config, team), fault)
            refusal = _refusal(ctx, "batch", "v1", team.name, "jobs", job)
            if refusal is None:
                problems.append(f"{team.name}: {what} was admitted (dry run)")
            elif mark not in refusal[1]:
                problems.append(f"{team.name}: {what} was refused ({refusal[0]}), not for {why}: {refusal[1]}")
            else:
                seen.append(f"{team.name}: {what} refused ({refusal[0]}) for {why}")
        # Volcano's /podgroups/mutate moves a PodGroup in queue `default` to its namespace's queue
        # (components/training.py): with one queue there is no other team's queue to try.
        other = next((t.queue for t in teams if t.queue != team.queue), None)
        if other is None:
            continue
        verdict = _refused(ctx, VOLCANO_GROUP, VOLCANO_VERSION, team.name, "podgroups", _attack(team, other))
        if verdict:
            seen.append(f"{team.name}: a PodGroup in another queue {verdict}")
        else:
            problems.append(f"{team.name}: a PodGroup in queue {other} was admitted (dry run)")
    if problems:
        return failed(
            "; ".join(problems), "check the team's ValidatingAdmissionPolicyBinding (docs/security-tenancy.md)"
        )
    return passed("; ".join(seen) or "no team namespace to try")


ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
# What the CI preview group may do nowhere (components/delivery.py PREVIEW_READS), by namespaced (verb, group,
# resource), each asked cluster-wide ("") and in every namespace of the cluster, where a RoleBinding could grant it:
# read a Secret (a list or a watch reveals each whole, as a get does one: kubernetes/website:content/en/docs/concepts/
# security/rbac-good-practices.md@037ed19f, "Listing secrets"), a pod, a container's log or an event; run or attach to
# a command in a pod (SPDY's POST is `create`; a WebSocket's GET is `get`, and `create` too only where the
# AuthorizePodWebsocketUpgradeCreatePermission gate is on, from 1.35: kubernetes/website:content/en/docs/reference/
# command-line-tools-reference/feature-gates/AuthorizePodWebsocketUpgradeCreatePermission.md@0637786b); mint a
# ServiceAccount's token ("Token request") or act as one ("Impersonate verb"); relabel a namespace, its Pod Security
# levels among the labels ("Namespace modification": a RoleBinding in a namespace grants it on that namespace).
PREVIEW_NEVER = (
    ("get", "", "secrets"),
    ("list", "", "secrets"),
    ("watch", "", "secrets"),
    ("get", "", "pods"),
    ("list", "", "pods"),
    ("watch", "", "pods"),
    ("get", "", "pods/log"),
    ("get", "", "pods/exec"),
    ("create", "", "pods/exec"),
    ("get", "", "pods/attach"),
    ("create", "", "pods/attach"),
    ("list", "", "events"),
    ("watch", "", "events"),
    ("create", "", "serviceaccounts/token"),
    ("impersonate", "", "serviceaccounts"),
    ("patch", "", "namespaces"),
)
# What the preview lists or watches in no team namespace, beside NAMED_READS' kinds (ConfigMaps among them), by
# (group, resource): a team's Services (the Training Operator's per replica of every job, named after it), workloads
# and jobs (their env, commands and images), its Kubeflow jobs and their PodGroups (components/delivery.py
# PREVIEW_READS).
PREVIEW_NEVER_IN_TEAMS = (
    ("", "services"),
    ("apps", "daemonsets"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("batch", "cronjobs"),
    ("batch", "jobs"),
    *((names.KUBEFLOW_GROUP, resource) for resource in names.KUBEFLOW_JOB_KINDS.values()),
    ("scheduling.volcano.sh", "podgroups"),
)
# And cluster-wide, of the cluster-scoped kinds: a list of the PersistentVolumes, a team claim's among them
# (components/kubernetes_objects.py CLUSTER_NAMED_READS); (rbac-good-practices.md above) the kubelet's API
# (nodes/proxy, whose `get` alone runs a command in every pod of a node), any user's or group's rights (impersonate),
# a role with rights the preview has not or a binding to one (escalate, bind); a webhook sent every object admitted
# ("Control admission webhooks"), a client certificate of any name ("CSRs and certificate issuing"), a hostPath
# volume ("Persistent volume creation").
PREVIEW_NEVER_CLUSTER = (
    ("list", "", "persistentvolumes"),
    ("get", "", "nodes/proxy"),
    ("impersonate", "", "users"),
    ("impersonate", "", "groups"),
    ("bind", "rbac.authorization.k8s.io", "clusterroles"),
    ("escalate", "rbac.authorization.k8s.io", "clusterroles"),
    ("create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
    ("create", "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("update", "certificates.k8s.io", "certificatesigningrequests/approval"),
    ("create", "", "persistentvolumes"),
)


# The session name of every preview's role (preview.yml's configure-aws-credentials names none: its default,
# aws-actions/configure-aws-credentials:src/index.ts@0a279261 ROLE_SESSION_NAME); a pull request may name another.
PREVIEW_SESSION = "GitHubActions"


def _preview_bindings(ctx: Any, role_user: str) -> tuple[list[str], set[str]]:
    """The bindings whose subject is a user of the preview role (`role_user`: its prefix, before the session's name),
    each as a problem, and the namespaces of the RoleBindings whose subject the preview is (that user, its group, or
    `system:authenticated`). A binding to that user is as much the preview's as one to its group, and preview.yml is
    the pull request's own (its role trusts preview.yml at refs/pull/*/merge), so the pull request names its session:
    a binding to any session's user is a pull request's (the reviews ask as PREVIEW_SESSION's)."""
    found, bound = [], set()
    for binding in ctx.kube.role_bindings():
        meta = binding.get("metadata") or {}
        where = "/".join(filter(None, (meta.get("namespace"), meta.get("name"))))
        for subject in binding.get("subjects") or []:
            kind, name = subject.get("kind"), str(subject.get("name", ""))
            if kind == "User" and name.startswith(role_user):
                found.append(f"its role's user {name} is a subject of {binding['kind']} {where}")
            if (kind == "User" and name.startswith(role_user)) or (
                kind == "Group" and name in (names.PREVIEW_GROUP, "system:authenticated")
            ):
                bound |= {meta["namespace"]} if binding["kind"] == "RoleBinding" else set()
    return found, bound


def preview_access(ctx: Any) -> Outcome:
    """The CI preview (a pull request's identity in the cluster: its role's user, of the preview group), as the API
    server's authorizer answers for it, and no binding to its role's user of another session (_preview_bindings): it
    may do none of PREVIEW_NEVER nor PREVIEW_NEVER_CLUSTER; in a team namespace it lists or watches none of the kinds a
    team makes there beside the program (components/kubernetes_objects.py NAMED_READS) nor PREVIEW_NEVER_IN_TEAMS,
    and it gets the program's own objects there by name, and its PersistentVolumes cluster-wide (each planned by-name
    rule's every name, of the by-name Roles and the preview's ClusterRole), which a preview reads before its dry run.
    A namespaced request is asked cluster-wide (a review of namespace "" is answered by the ClusterRoleBindings alone)
    and in each namespace a RoleBinding binds the preview in, the one other grant RBAC has (a RoleBinding grants in its
    own namespace alone); EKS's access policies, granted by the entry and not by RBAC, are aws.preview-entry's."""
    from components.kubernetes_objects import NAMED_READS, PREVIEW_GETS

    role_user = names.assumed_role_user(ctx.config.delivery.account_id, names.role_name(ctx.config.stack, "preview"))
    problems, bound = _preview_bindings(ctx, role_user)
    asked = 0

    def expect(allowed: bool, verb: str, group: str, resource: str, namespace: str, name: str = "") -> None:
        nonlocal asked
        asked += 1
        if (
            ctx.kube.may(role_user + PREVIEW_SESSION, names.PREVIEW_GROUP, verb, group, resource, namespace, name)
            != allowed
        ):
            where = f"in {namespace}" if namespace else "cluster-wide"
            what = f"{resource}/{name}" if name else resource
            problems.append(f"{'may not' if allowed else 'may'} {verb} {what} {where}")

    for verb, group, resource in PREVIEW_NEVER_CLUSTER:
        expect(False, verb, group, resource, "")
    teams = {team.name for team in ctx.config.scheduler.teams}
    team_kinds = [*((group, resource) for (group, _kind), resource in NAMED_READS.items()), *PREVIEW_NEVER_IN_TEAMS]
    for namespace in ["", *sorted(bound)]:
        for verb, group, resource in PREVIEW_NEVER:
            expect(False, verb, group, resource, namespace)
        for group, resource in team_kinds if namespace == "" or namespace in teams else ():
            expect(False, "list", group, resource, namespace)
            expect(False, "watch", group, resource, namespace)
    for planned in [*ctx.plan.of_type(ROLE), *ctx.plan.of_type(CLUSTER_ROLE)]:
        meta = planned.inputs["metadata"]
        if meta.get("name") not in (PREVIEW_GETS, names.PREVIEW_GROUP):
            continue
        for rule in planned.inputs.get("rules") or []:
            # each name of the rule (one review a name: the plan's rules name one group and one resource each)
            for group, resource, name in itertools.product(
                rule["apiGroups"], rule["resources"], rule.get("resourceNames") or []
            ):
                expect(True, "get", group, resource, meta.get("namespace", ""), name)
    if problems:
        return failed(
            f"the CI preview (group {names.PREVIEW_GROUP}): " + "; ".join(problems),
            "compare the cluster's RBAC for the group with the plan (`kubectl get clusterrolebindings,rolebindings -A "
            f"-o wide | grep {names.PREVIEW_GROUP}`): a binding not the program's widens a pull request's reads; "
            "a missing one, `pulumi up`",
        )
    return passed(f"{asked} reviews as {names.PREVIEW_GROUP} answered as planned")


def _kubeflow(job: dict) -> tuple[str, str, str, str]:
    group, version = job["apiVersion"].split("/")
    return group, version, job["metadata"]["namespace"], names.KUBEFLOW_JOB_KINDS[job["kind"]]


def _team_jobs(ctx: Any) -> Iterator[tuple[str, str, dict]]:
    """(team, kind, job) of every Kubeflow job in a team namespace."""
    for team in ctx.config.scheduler.teams:
        for kind, plural in names.KUBEFLOW_JOB_KINDS.items():
            for job in ctx.kube.namespaced_objects(names.KUBEFLOW_GROUP, "v1", team.name, plural):
                yield team.name, kind, job


def job_names(ctx: Any) -> Outcome:
    """Kubeflow jobs made before the name rule: a job of another kind could still take such a job's name
    and share its gang (docs/design/tenancy.md)."""
    problems, count = [], 0
    for team, kind, job in _team_jobs(ctx):
        count += 1
        problem = names.job_name_problem(job["metadata"]["name"], kind)
        if problem:
            problems.append(f"{team}/{job['metadata']['name']}: {problem}")
    if problems:
        return failed(
            "; ".join(problems),
            "let these jobs finish, then submit them again under a name with their kind's prefix: until then a "
            "job of another kind may be created under the same name and share the gang",
        )
    return passed(f"{count} Kubeflow jobs in team namespaces, each named as its kind")


def job_placement(ctx: Any) -> Outcome:
    """Kubeflow jobs made before pods without GPUs left the GPU nodes: a replica template that tolerates the GPU taint
    and asks no GPU. The team policy lets the Training Operator make such a job's pods (its templates were judged
    when they were made), so such a pod, its launcher's, keeps a GPU node beside its workers; none left, a release
    may drop that exemption (docs/design/tenancy.md, "Pods without GPUs run on the teams' CPU nodes")."""
    problems, count = [], 0
    for team, kind, job in _team_jobs(ctx):
        count += 1
        conditions = (job.get("status") or {}).get("conditions") or []
        if any(c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True" for c in conditions):
            continue  # finished: the operator makes no pod of it again
        for key, replicas in (job.get("spec") or {}).items():
            if not key.endswith("ReplicaSpecs"):
                continue
            for replica, spec in (replicas or {}).items():
                template = (spec or {}).get("template") or {}
                if _gpu_node_pod_without_gpus(template):
                    problems.append(
                        f"{team}/{kind} {job['metadata']['name']}: its {replica} on the GPU nodes without GPUs"
                    )
    if problems:
        return failed(
            "; ".join(problems),
            "each such pod keeps a GPU node its team's GPUs do not pay for; move it to the teams' CPU nodes (suspend "
            'the job, give the template nodeSelector higgsfield.io/team-cpu: "true" and that taint\'s toleration in '
            "place of nvidia.com/gpu's, resume it) or let the job finish: docs/upgrading.md, \"From a stack deployed "
            'at c7f0bfd or earlier"',
        )
    return passed(f"{count} Kubeflow jobs in team namespaces, none with a pod without GPUs on the GPU nodes")


def job_cleanup(ctx: Any) -> Outcome:
    """Kubeflow jobs made before cleanPodPolicy was required: once finished, their running pods would
    outlive their PodGroup, outside every queue (docs/design/tenancy.md)."""
    problems, count = [], 0
    for team, _, job in _team_jobs(ctx):
        count += 1
        policy = ((job.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy")
        if policy not in names.CLEAN_POD_POLICIES:
            problems.append(f"{team}/{job['metadata']['name']}: cleanPodPolicy {policy or 'unset (None)'}")
    if problems:
        return failed(
            "; ".join(problems),
            f"set spec.runPolicy.cleanPodPolicy: {names.CLEAN_POD_POLICY} on these jobs (kubectl patch --type merge), "
            "or let them finish and delete their pods: until then a finished job's pods keep their GPUs",
        )
    return passed(f"{count} Kubeflow jobs in team namespaces, each deleting its running pods when it finishes")


CPU_ONLY_RESOURCES = ("requests.cpu", "requests.memory")


def _charged(pod: dict, now: datetime.datetime) -> bool:
    """Whether a quota charges the pod its compute resources: not in a terminal phase, and not deleted longer ago
    than its grace period (a pod stuck terminating on a lost node: QuotaV1Pod, kubernetes/kubernetes:pkg/quota/v1/
    evaluator/core/pods.go@05e7cb29)."""
    if (pod.get("status") or {}).get("phase") in names.ENDED_POD_PHASES:
        return False
    meta = pod["metadata"]
    deleted, grace = meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds")
    return not (deleted and grace is not None and now > _iso(deleted) + datetime.timedelta(seconds=grace))


def _requested(spec: dict, resource: str) -> Any:
    """A pod spec's request of `resource` (cpu, memory) as a quota charges it (a Decimal of cores or bytes): its
    containers' and sidecars' (init containers with restartPolicy Always) requests summed, or the most an init
    container asks beside the sidecars started before it if that is more; the pod-level request instead where the
    spec sets one; plus the runtime class's overhead (PodUsageFunc in pods.go@05e7cb29 charges
    resourcehelper.PodRequests: AggregateContainerRequests and PodRequests in kubernetes/kubernetes:staging/src/
    k8s.io/component-helpers/resource/helpers.go@0085214e)."""
    from kubernetes.utils.quantity import parse_quantity

    def asked(container: dict) -> Any:
        return parse_quantity(((container.get("resources") or {}).get("requests") or {}).get(resource, 0))

    total = sum((asked(c) for c in spec.get("containers") or []), parse_quantity(0))
    sidecars = most_of_an_init = parse_quantity(0)
    for init in spec.get("initContainers") or []:
        if init.get("restartPolicy") == "Always":
            total, sidecars = total + asked(init), sidecars + asked(init)
            most_of_an_init = max(most_of_an_init, sidecars)
        else:
            most_of_an_init = max(most_of_an_init, sidecars + asked(init))
    total = max(total, most_of_an_init)
    pod_level = ((spec.get("resources") or {}).get("requests") or {}).get(resource)
    if pod_level is not None:
        total = parse_quantity(pod_level)
    return total + parse_quantity((spec.get("overhead") or {}).get(resource, 0))


def _quantity(value: Any, resource: str) -> str:
    """A summed quantity as a person reads it: cores, memory in the largest binary unit that holds it whole."""
    if resource.endswith("cpu"):
        return f"{value.normalize():f}"
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value % size == 0:
            return f"{value // size:f}{unit}"
    return f"{value:f}"


def _hard_as_quantities(spec: dict) -> dict:
    """A ResourceQuota's spec with its hard limits as quantities: the API server stores each in its canonical form
    (1024Mi as 1Gi), the same quantity."""
    from kubernetes.utils.quantity import parse_quantity

    return {**spec, "hard": {k: parse_quantity(v) for k, v in (spec.get("hard") or {}).items()}}


def _gpu_node_pod_without_a_deadline(pod: dict) -> bool:
    """A pod placed on the GPU nodes without GPUs (_gpu_node_pod_without_gpus) that runs to no deadline: the team
    policy refuses one at CREATE, so it was made before the rule, and no CPU-only quota counts it
    (docs/upgrading.md, its listing's test)."""
    return not _with_a_deadline(pod.get("spec") or {}) and _gpu_node_pod_without_gpus(pod)


def _used_not_asked(used: dict, counted: list[dict]) -> list[str]:
    """Each CPU_ONLY_RESOURCES figure of a quota's status.used that is not what `counted` pods request, with both; and
    its pods where it reports them (the quota controller does, for a quota with a `pods` room), which tells pods that
    ask no CPU or memory apart."""
    from kubernetes.utils.quantity import parse_quantity

    differ = []
    for key in CPU_ONLY_RESOURCES:
        resource = key.split(".", 1)[1]
        ours = sum((_requested(p.get("spec") or {}, resource) for p in counted), parse_quantity(0))
        if key not in used or parse_quantity(used[key]) != ours:
            differ.append(f"{key} {used.get(key, 'unset')}, its pods' {_quantity(ours, resource)}")
    if "pods" in used and parse_quantity(used["pods"]) != len(counted):
        differ.append(f"pods {used['pods']}, its pods' {len(counted)}")
    return differ


def _beyond_hard(hard: dict, used: dict) -> list[str]:
    """Each figure of a quota's status.used above its hard limit, with both."""
    from kubernetes.utils.quantity import parse_quantity

    return [
        f"{key} {used[key]} of {hard[key]}"
        for key in hard
        if key in used and parse_quantity(used[key]) > parse_quantity(hard[key])
    ]


def _with_a_deadline(spec: dict) -> bool:
    """The mark the `cpu-only` quota (scope Terminating) counts a pod by."""
    return spec.get("activeDeadlineSeconds") is not None


def _a_cpu_service(spec: dict) -> bool:
    """The mark the `cpu-services` quota (its PriorityClass scope) counts a pod by."""
    return spec.get("priorityClassName") == CPU_SERVICE_PRIORITY_CLASS


def _cpu_only_marks(pod: dict) -> int:
    """How many of the marks that put a pod without GPUs in a quota of CPU-only work's room it carries."""
    spec = pod.get("spec") or {}
    return _with_a_deadline(spec) + _a_cpu_service(spec)


def _team_cpu_node_pods_not_in_one_quota(pods: list[dict], now: datetime.datetime) -> list[dict]:
    """The pods without GPUs on the teams' CPU nodes, not ended, that carry both marks or neither (_cpu_only_marks):
    counted twice, or by no quota of CPU-only work's room. The team policy admits neither."""
    return [p for p in pods if _charged(p, now) and _team_cpu_node_pod_without_gpus(p) and _cpu_only_marks(p) != 1]


def _tolerating_without_gpus(pod: dict, taint_key: str) -> bool:
    """A pod that tolerates the taint `taint_key` (it may be placed on those nodes) and asks no GPU."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return any(t.get("key") == taint_key for t in tolerations) and not gpus_of(pod)


def _team_cpu_node_pod_without_gpus(pod: dict) -> bool:
    """A pod that may be placed on the teams' CPU nodes and asks no GPU."""
    return _tolerating_without_gpus(pod, names.TEAM_CPU_TAINT_KEY)


def _gpu_node_pod_without_gpus(pod: dict) -> bool:
    """A pod placed on the GPU nodes (it tolerates the GPU taint) that asks no GPU."""
    return _tolerating_without_gpus(pod, names.GPU_RESOURCE)


def _kubeflow_pods_outliving_their_gpu_pods(pods: list[dict], now: datetime.datetime) -> list[tuple[dict, dict]]:
    """The Kubeflow jobs' pods without GPUs bound to the GPU nodes, not ended nor being deleted, while none of their
    job's pods with GPUs is bound and running (a retried worker left Pending counts as none): the Cluster Autoscaler
    drains no pod of a controller it does not know to replicate, so each keeps its GPU node from scale-down for as
    long as it runs (docs/design/tenancy.md, "CPU-only work's room"). An MPI launcher is bound with its workers (one
    gang) and ends with them. Not seen: such a pod on another node than its job's running GPU pods. Each with its
    job's owner reference."""

    def job_of(pod: dict) -> dict | None:
        owner = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
        return owner if owner and owner.get("kind") in names.KUBEFLOW_JOB_KINDS else None

    def bound(pod: dict) -> bool:
        return bool((pod.get("spec") or {}).get("nodeName")) and not pod["metadata"].get("deletionTimestamp")

    live = [(p, job) for p in pods if _charged(p, now) and bound(p) and (job := job_of(p))]
    with_gpus = {(job["kind"], job["name"]) for p, job in live if gpus_of(p) > 0}
    return [
        (p, job) for p, job in live if _gpu_node_pod_without_gpus(p) and (job["kind"], job["name"]) not in with_gpus
    ]


def cpu_only_quota(ctx: Any) -> Outcome:
    """Each team namespace's `cpu-only` and `cpu-services` ResourceQuotas are as planned (components/teams.py
    cpu_only_quota, scope Terminating, and cpu_service_quota, the class of services without GPUs: CPU-only work's
    room), and what each counts (status.used) is what its pods, not ended, ask (those with a deadline; those of the
    class): that the API server puts in each quota exactly the pods the team policy marks, which the tests only
    model; and that neither counts more than its room (pods made before it, or under a larger one, run on). And no
    pod without GPUs runs on the GPU nodes without a deadline (made before the rule), outside that room, nor on the
    teams' CPU nodes with both marks or neither (in both quotas, or in none)."""
    from components.teams import cpu_only_quota as planned_cpu_only
    from components.teams import cpu_service_quota as planned_services
    from components.tenancy import CPU_ONLY_QUOTA, CPU_SERVICE_QUOTA

    # each quota of pods without GPUs, and the pods the team policy marks for it
    quotas_of_pods_without_gpus = (
        (CPU_ONLY_QUOTA, planned_cpu_only, _with_a_deadline, "pod(s) with a deadline"),
        (CPU_SERVICE_QUOTA, planned_services, _a_cpu_service, f"pod(s) of {CPU_SERVICE_PRIORITY_CLASS}"),
    )

    now, problems, seen = ctx.now(), [], []
    fixes: dict[str, str] = {}  # what to do, once per kind of problem found
    reapply = "rerun `pulumi up`; `kubectl -n TEAM get resourcequota {} -o yaml` against the plan"
    for team in ctx.config.scheduler.teams:
        quotas = {q["metadata"]["name"]: q for q in ctx.kube.resource_quotas(team.name)}
        pods = ctx.kube.pods(team.name)
        for pod in pods:
            if _charged(pod, now) and _gpu_node_pod_without_a_deadline(pod):
                problems.append(
                    f"{team.name}/{pod['metadata']['name']}: on the GPU nodes without GPUs and without a "
                    f"deadline, counted by no {CPU_ONLY_QUOTA} quota"
                )
                fixes["pods"] = (
                    'such a pod was made before the rule: docs/upgrading.md, "From a stack deployed at 3733dc2 or '
                    'earlier: pods without GPUs run to a deadline", says how to move its work'
                )
        for pod in _team_cpu_node_pods_not_in_one_quota(pods, now):
            problems.append(
                f"{team.name}/{pod['metadata']['name']}: on the teams' CPU nodes without GPUs, counted by "
                f"{'both' if _cpu_only_marks(pod) else 'neither'} of {CPU_ONLY_QUOTA} (a deadline) and "
                f"{CPU_SERVICE_QUOTA} (priorityClassName {CPU_SERVICE_PRIORITY_CLASS})"
            )
            fixes["marks"] = (
                "the team policy admits such a pod with exactly one of the two marks: one with both or neither was "
                "admitted without it (`kubectl get validatingadmissionpolicybinding higgsfield-team-TEAM`; rerun "
                "`pulumi up`); delete the pod, its controller makes it again under the policy"
            )
        for pod, job in _kubeflow_pods_outliving_their_gpu_pods(pods, now):
            node = pod["spec"]["nodeName"]
            problems.append(
                f"{team.name}/{pod['metadata']['name']} ({job['kind']} {job['name']}, on {node}): without GPUs "
                "while none of its job's GPU pods runs, it keeps its GPU node from the Cluster Autoscaler's scale-down"
            )
            fixes["outlived"] = (
                "a Kubeflow job's pod blocks its node's scale-down while it runs: end the job (`kubectl -n TEAM "
                "delete KIND NAME`) or ask its team why its GPU pods ended (docs/design/tenancy.md, \"CPU-only work's "
                "room\"); a job read between its GPU pods' end and its own shows too: rerun in a minute"
            )
        for name, planned_quota, counts, what in quotas_of_pods_without_gpus:
            live = quotas.get(name)
            if live is None:
                problems.append(f"{team.name}: no ResourceQuota {name}")
                fixes[f"quota {name}"] = reapply.format(name)
                continue
            planned = planned_quota(team)["spec"]
            changed = _drift(_hard_as_quantities(live.get("spec") or {}), _hard_as_quantities(planned))
            if changed:
                problems.append(f"{team.name}: {name} {', '.join(changed)} not as planned")
                fixes[f"quota {name}"] = reapply.format(name)
                continue
            counted = [p for p in pods if counts(p.get("spec") or {}) and _charged(p, now)]
            used = (live.get("status") or {}).get("used") or {}
            differ = _used_not_asked(used, counted)
            names_of = ", ".join(sorted(p["metadata"]["name"] for p in counted)) or "none"
            if differ:
                problems.append(f"{team.name}: {name} counts {'; '.join(differ)} ({what}, not ended: {names_of})")
                fixes["used"] = (
                    "the quota controller recounts within seconds of most changes, and a pod deleted past its grace "
                    "(a lost node's) at its full resync (5 minutes by default): rerun after that; a mismatch that "
                    "stays means the API server counts other pods than the policy marks for it (`kubectl -n TEAM "
                    "describe quota QUOTA`, `kubectl -n TEAM get pods -o wide`)"
                )
                continue
            hard = planned["hard"]
            # A quota refuses new pods only: pods it counts beyond its room (made before it was, or under a larger
            # room before an upgrade lowered it) run on, and hold more of the teams' CPU nodes than their maxSize is
            # sized for.
            over = _beyond_hard(hard, used)
            if over:
                problems.append(
                    f"{team.name}: {name} counts more than its room: {', '.join(over)} ({what}: {names_of})"
                )
                fixes["over"] = (
                    "pods a quota counts beyond its room were made before it or under a larger one "
                    "(docs/upgrading.md): they run until they end or are deleted; delete what the team can spare "
                    "(`kubectl -n TEAM get pods -o wide`), its pods with a deadline end by it"
                )
                continue
            seen.append(
                f"{team.name}: {name} as planned ({hard['requests.cpu']} vCPUs, {hard['requests.memory']}), "
                f"counting {len(counted)} {what} ({used['requests.cpu']} vCPUs, {used['requests.memory']})"
            )
    if problems:
        return failed("; ".join(problems), "; ".join(fixes.values()))
    return passed("; ".join(seen) or "no team namespace")


# The Warning reasons of a controller's refused pod create, each event's message ending in the API server's error:
# the Training Operator's pod control ("Error creating: <err>", kubeflow/trainer:pkg/controller.v1/control/
# pod_control.go@v1.9.4) and its MPIJob launcher and workers ("launcher pod created failed: <err>", "worker pod
# created failed: <err>", reason commonutil.NewReason(MPIJob, Failed): pkg/controller.v1/mpi/
# mpijob_controller.go@v1.9.4; the worker's own FailedCreatePod there carries no error); the Job and ReplicaSet
# controllers' RealPodControl ("Error creating: <err>", kubernetes/kubernetes:pkg/controller/controller_utils.go@
# 1f8996f8).
REFUSED_POD_REASONS = ("FailedCreatePod", "MPIJobFailed", "FailedCreate")
# The err of a ValidatingAdmissionPolicy's denial (kubernetes/apiserver:pkg/admission/plugin/policy/validating/
# dispatcher.go@v0.35.0; the binding left out where it has none) and of a quota's (pkg/admission/plugin/
# resourcequota/controller.go@v0.35.0, prettyPrint's resource=quantity lists joined by commas).
POLICY_DENIAL = re.compile(r"ValidatingAdmissionPolicy '([^']+)'(?: with binding '[^']*')? denied request: (.+)", re.S)
QUOTA_EXCEEDED = re.compile(r"exceeded quota: ([^,\s]+), requested: (\S+), used: (\S+), limited: (\S+)")


def _what_refused(message: str) -> tuple[bool, str] | None:
    """What refused the pod, said as a person reads it, and whether a policy did (True: the policy and its sentence)
    or a quota (False: the quota and its figures); None for a failure that is not admission's (the pod already
    exists, a timeout)."""
    found = POLICY_DENIAL.search(message)
    if found:
        return True, f"{found.group(1)}: {found.group(2).strip()}"
    found = QUOTA_EXCEEDED.search(message)
    if found:
        quota, requested, used, limited = found.groups()
        return False, f"exceeded quota {quota} (requested {requested}, used {used}, limited {limited})"
    return None


def _event_last_seen(event: dict) -> str:
    """When an event last happened: a core/v1 event's lastTimestamp, else what the events API writes (the series'
    last observation, its eventTime), else its creation."""
    return (
        event.get("lastTimestamp")
        or (event.get("series") or {}).get("lastObservedTime")
        or event.get("eventTime")
        or event["metadata"].get("creationTimestamp", "")
    )


def refused_pods(ctx: Any) -> Outcome:
    """Pods a controller (the Training Operator, the Job or ReplicaSet controller) could not create because a team
    policy refused them: the job it owns then waits for ever, its other pods holding their nodes. The tests model the
    operator's pods; only a live cluster's events show what it adds to them. Those events are the only trace, and
    the API server keeps them about an hour (its --event-ttl). A quota's refusal is named but fails nothing: a full
    quota is the team's to wait out (a launcher waits for CPU-only room: docs/design/tenancy.md)."""
    refused: dict[tuple[str, str, str], dict] = {}  # (namespace, kind, name) -> count, last, sentences
    waiting: dict[tuple[str, str, str], dict] = {}  # the same, refused by a quota
    teams = [team.name for team in ctx.config.scheduler.teams]
    for team in teams:
        for event in ctx.kube.events(team):
            if event.get("type") != "Warning" or event.get("reason") not in REFUSED_POD_REASONS:
                continue
            what = _what_refused(event.get("message") or "")
            if what is None:
                continue
            by_policy, why = what
            involved = event.get("involvedObject") or {}
            seen = (refused if by_policy else waiting).setdefault(
                (team, involved.get("kind", "?"), involved.get("name", "?")), {"count": 0, "last": "", "why": set()}
            )
            seen["count"] += event.get("count") or (event.get("series") or {}).get("count") or 1
            seen["last"] = max(seen["last"], _event_last_seen(event))
            seen["why"].add(why)

    def lines(found: dict[tuple[str, str, str], dict]) -> str:
        return "; ".join(
            f"{team}/{kind} {name}: a pod refused {seen['count']} time(s), last at {seen['last']}: "
            + " | ".join(sorted(seen["why"]))
            for (team, kind, name), seen in sorted(found.items())
        )

    quotas = f"; waiting for quota room (a full quota, not a fault): {lines(waiting)}" if waiting else ""
    if refused:
        return failed(
            lines(refused) + quotas,
            "the job waits for ever for the refused pod, its other pods holding their nodes: a job the platform "
            "renders (`higgsfield jobs render`) refused is a platform bug, report it with this line; a team's own "
            "job: docs/troubleshooting.md, the row of the message, then resubmit it (`kubectl -n TEAM describe "
            "KIND NAME` shows the events; one up to an hour old may predate a fix)",
        )
    return passed(
        f"no controller's pod refused by a team policy in the events of {len(teams)} team namespace(s) "
        f"(the API server keeps events about an hour){quotas}"
    )


def daemon_sets(ctx: Any) -> Outcome:
    problems, seen = [], []
    for planned in ctx.plan.of_type(DAEMON_SET):
        meta = planned.inputs["metadata"]
        status = ctx.kube.daemon_set(meta["namespace"], meta["name"]).get("status") or {}
        want, ready = status.get("desiredNumberScheduled", 0), status.get("numberReady", 0)
        if ready < want:
            problems.append(f"{meta['namespace']}/{meta['name']}: {ready}/{want} ready")
        else:
            seen.append(f"{meta['name']} {ready}/{want}")
    if problems:
        return failed("; ".join(problems), "`kubectl -n NS describe ds NAME` (ImagePullBackOff: push the image first)")
    return passed("; ".join(seen) or "no DaemonSet planned")


def cron_jobs(ctx: Any) -> Outcome:
    """Each planned CronJob succeeded within CRON_JOB_LATE_S. The gang deadline's pass fails when a team's
    admission policy refuses one of its patches, or when it cannot read the cluster: its idle nodes are then
    held (docs/capacity.md)."""
    now, problems, seen = ctx.now(), [], []
    for planned in ctx.plan.of_type(CRON_JOB):
        meta = planned.inputs["metadata"]
        found = ctx.kube.namespaced_objects("batch", "v1", meta["namespace"], "cronjobs")
        status = next((o.get("status") or {} for o in found if o["metadata"]["name"] == meta["name"]), None)
        where = f"{meta['namespace']}/{meta['name']}"
        if status is None:
            problems.append(f"{where}: missing")
            continue
        last = status.get("lastSuccessfulTime")
        age = (now - _iso(last)).total_seconds() if last else None
        if age is None or age > CRON_JOB_LATE_S:
            problems.append(f"{where}: last success {'never' if age is None else f'{age:.0f} s ago'}")
        else:
            seen.append(f"{where}: last success {age:.0f} s ago")
    if problems:
        return failed(
            "; ".join(problems),
            "`kubectl -n NS get jobs` and the logs of its last failed Job (a refused patch names the job and the "
            "policy)",
        )
    return passed("; ".join(seen) or "no CronJob planned")


# The node monitoring agent renews each condition it manages every 5 minutes (heartbeatInterval, aws/eks-node-
# monitoring-agent:pkg/manager/node_exporter.go@v1.6.4) and never removes one: a node keeps the condition of a monitor
# turned off after it ran, its heartbeat stopped. Three missed renewals: the monitor is off.
AGENT_CONDITION_STALE_S = 3 * 5 * 60


# The agent's pods, as the add-on's chart labels them (selectorLabels: templates/_helpers.tpl and daemonset.yaml,
# aws/eks-node-monitoring-agent:charts/eks-node-monitoring-agent@v1.6.4), in the add-on's namespace.
AGENT_PODS = "app.kubernetes.io/name=eks-node-monitoring-agent"


def _planned_agents(ctx: Any) -> dict[str, str]:
    """Node -> when the agent's pod there started, for each agent pod that carries the planned monitors' settings
    (MONITORS_ANNOTATION): a condition it never renewed since was left by the agent before it."""
    found = {}
    for pod in ctx.kube.pods(names.KUBE_SYSTEM, AGENT_PODS):
        annotations = pod["metadata"].get("annotations") or {}
        started = (pod.get("status") or {}).get("startTime")
        if annotations.get(MONITORS_ANNOTATION) == MONITORS_SETTINGS and started:
            found[(pod.get("spec") or {}).get("nodeName", "")] = started
    return found


def _renewed(condition: dict, now: datetime.datetime, agent_since: str | None) -> bool:
    """The agent renewed this condition lately, and not before the node's agent with the planned settings started
    (`agent_since`; an older agent renewed it up to its replacement, minutes before a deploy's verify): the monitor
    that sets it runs."""
    beat = condition.get("lastHeartbeatTime")
    if not beat:
        return True
    if agent_since and _iso(beat) < _iso(agent_since):
        return False
    return (now - _iso(beat)).total_seconds() < AGENT_CONDITION_STALE_S


GATE_FIX = "`kubectl -n higgsfield-health logs ds/health-gate-POOL` on the node (docs/troubleshooting.md)"


def _agent_problems(
    node: dict, now: datetime.datetime, stack: str, agent_since: str | None
) -> tuple[list[str], dict[str, str]]:
    """What a node's conditions of the monitors that read the kubelet's log (addons.KUBELET_LOG_MONITORS) say that node
    repair may act on, and what to do, per kind: one renewed lately (its monitor runs), or one left False from before
    the monitor went off (repair replaces the node 30 minutes on, renewed or not). One left True is harmless."""
    name, problems, fixes = node["metadata"]["name"], [], {}
    for condition in (node.get("status") or {}).get("conditions") or []:
        kind = condition.get("type")
        if kind not in KUBELET_LOG_MONITORS.values():
            continue
        if _renewed(condition, now, agent_since):
            problems.append(
                f"{name}: carries {kind}, renewed lately: a monitor of the node monitoring agent that reads the "
                "kubelet's log runs, and a team's pod can turn it False through that log, which node repair acts on "
                "(components/addons.py NODE_MONITORING_AGENT_CONFIGURATION)"
            )
            fixes["on"] = (
                f"`higgsfield verify {stack} --only aws.addons` compares the agent's configuration with the plan; "
                "`pulumi refresh` then `pulumi up` sets it back; right after a deploy that changed it, the agent's "
                "DaemonSet may still be rolling: `kubectl -n kube-system rollout status ds/eks-node-monitoring-agent`, "
                "then verify again"
            )
        elif condition.get("status") == "False":
            problems.append(
                f"{name}: carries {kind} False, last renewed {condition.get('lastHeartbeatTime')}: left from before "
                "its monitor went off (the agent never removes a condition), and node repair still acts on it"
            )
            fixes["left"] = (
                "remove the left-over condition: `kubectl get node NODE -o json | jq 'del(.status.conditions[] | "
                'select(.type == "TYPE"))\' | kubectl replace --subresource status -f -` (a 409 Conflict: the node '
                "changed meanwhile, run it again)"
            )
    return problems, fixes


def gpu_nodes(ctx: Any) -> Outcome:
    gated = {p.name for p in ctx.config.gpu_pools if p.health_gate.enabled}
    efa = {p.name for p in ctx.config.gpu_pools if p.efa}
    nodes = ctx.kube.nodes(names.POOL_LABEL)
    if not nodes:
        return skipped("no GPU node is up (pools at zero): the trial (--allow-cost) brings one up")
    now, problems, seen, agents = ctx.now(), [], [], _planned_agents(ctx)
    fixes: dict[str, str] = {}  # what to do, once per kind of problem found
    for node in nodes:
        meta, pool = node["metadata"], node["metadata"]["labels"].get(names.POOL_LABEL)
        taints = {t["key"] for t in (node.get("spec") or {}).get("taints") or []}
        health = meta["labels"].get(names.HEALTH_LABEL)
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        gpus = allocatable.get(names.GPU_RESOURCE, "0")
        agent, agent_fixes = _agent_problems(node, now, ctx.config.stack, agents.get(meta["name"]))
        if agent:
            problems += agent
            fixes.update(agent_fixes)
        elif pool in gated and (health != "healthy") != (names.STARTUP_TAINT_KEY in taints):
            problems.append(
                f"{meta['name']}: health {health!r} but startup taint {'on' if health == 'healthy' else 'off'}"
            )
            fixes["gate"] = GATE_FIX
        elif health == "healthy" and gpus in ("0", 0):
            problems.append(f"{meta['name']}: healthy with no {names.GPU_RESOURCE} allocatable")
            fixes["gate"] = GATE_FIX
        elif health == "healthy" and pool in efa and allocatable.get(names.EFA_RESOURCE, "0") in ("0", 0):
            problems.append(f"{meta['name']}: healthy on an EFA pool with no {names.EFA_RESOURCE} allocatable")
            fixes["gate"] = GATE_FIX
        else:
            seen.append(f"{meta['name']} ({pool}): {health or 'not gated'}, {gpus} GPU")
    if problems:
        return failed("; ".join(problems), "; ".join(fixes.values()))
    return passed("; ".join(seen))


def container_logs(ctx: Any) -> Outcome:
    """A training pod's log records in CloudWatch carry its job, replica and node (docs/logs.md)."""
    group = f"/aws/containerinsights/{names.cluster_name(ctx.config.stack)}/application"
    events = ctx.client("logs").filter_log_events(
        logGroupName=group, filterPattern=f'"{names.JOB_NAME_LABEL}"', limit=50
    )["events"]
    records = []
    for event in events:
        try:
            records.append(json.loads(event["message"]))
        except ValueError:
            continue
    if not records:
        return skipped(f"no training job has logged to {group} yet", "rerun after a job (or with --allow-cost)")
    for record in records:
        k8s = record.get("kubernetes") or {}
        labels = k8s.get("labels") or {}
        job, replica = labels.get(names.JOB_NAME_LABEL), labels.get(names.REPLICA_TYPE_LABEL)
        if job and replica and k8s.get("host"):
            return passed(f"{group}: job {job}, replica {replica}, node {k8s['host']}")
    return failed(
        f"{len(records)} record(s) in {group} without the job, replica and node together",
        "the Fluent Bit config must keep pod labels (`Labels On`, components/container_logs.py)",
    )


def _sends_for_the_stacks_rules(statement: dict, rules: str) -> bool:
    """An Allow of the queue's policy: EventBridge alone, for rules whose ARNs start so (queue_policy's shape)."""
    principal = statement.get("Principal")
    services = principal.get("Service") if isinstance(principal, dict) and len(principal) == 1 else None
    sources = [
        value
        for operator, keys in (statement.get("Condition") or {}).items()
        if operator in ("ArnLike", "ArnEquals")
        for key, values in keys.items()
        if key.lower() == "aws:sourcearn"
        for value in (values if isinstance(values, list) else [values])
    ]
    return (
        services in ("events.amazonaws.com", ["events.amazonaws.com"])
        and bool(sources)
        and all(str(v).startswith(rules) for v in sources)
    )


# GetQueueUrl of a missing queue: the modeled QueueDoesNotExist, or its query-compatible code, which botocore reports
# for SQS's JSON protocol (botocore/data/sqs/2012-11-05/service-2.json: `awsQueryCompatible`, `QueueDoesNotExist`).
NO_SUCH_QUEUE = ("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue")


def karpenter_queue(ctx: Any) -> Outcome:
    """Karpenter's interruption queue (docs/security-ci.md, "Karpenter in a stack CI deploys"): it exists by the
    stack's name and keeps the policy it was made with, which lets EventBridge send for the stack's own rules
    alone; run as the deploy role, a rewrite of that policy is refused (both ceilings deny SetQueueAttributes).
    The rewrite tried is the queue's own policy, so an account where it is allowed is left as it was."""
    cfg = ctx.config
    if not cfg.karpenter_pools:
        return skipped("no `provisioner: karpenter` pool")
    name = names.interruption_queue(cfg.stack)
    sqs = ctx.client("sqs")
    try:
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    except aws_errors.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in NO_SUCH_QUEUE:
            raise
        return failed(
            f"no queue named {name}: the stack's first Karpenter pool is not deployed yet, or an administrator "
            "deployed Karpenter before the stack named its queue (a generated name)",
            "not deployed yet: the next deploy makes it; a generated name: an administrator deploys the change that "
            f"names it, with administrator credentials: {names.pulumi_up(cfg.stack)} (the deploy role may not delete "
            f"the old queue; `higgsfield diff {cfg.stack} --base REF` names it)",
        )
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy", "QueueArn"])["Attributes"]
    region, account = attributes["QueueArn"].split(":")[3:5]
    rules = f"arn:aws:events:{region}:{account}:rule/{names.interruption_rule(cfg.stack, '')}"
    statements = json.loads(attributes.get("Policy") or "{}").get("Statement") or []
    allows = [s for s in statements if s.get("Effect") == "Allow"]
    if not allows or not all(_sends_for_the_stacks_rules(s, rules) for s in allows):
        return failed(
            f"{name}: its policy lets in more than EventBridge for the stack's rules: {json.dumps(allows)}",
            f"an administrator deletes the queue, then `{names.pulumi_up(cfg.stack, '--refresh')}` makes it again with "
            "the stack's (its policy is CreateQueue's: components/karpenter.py queue_policy)",
        )
    seen = f"{name}: EventBridge sends for the stack's rules alone"
    deploy = names.role_name(cfg.stack, "deploy")
    if f":assumed-role/{deploy}/" not in str(ctx.found.get("identity") or ""):
        return passed(f"{seen}; not run as {deploy}, so its refusal to rewrite the policy was not tried")
    try:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": attributes.get("Policy") or ""})
    except aws_errors.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in DENIED_CODES:
            return passed(f"{seen}; {deploy} may not rewrite it (AccessDenied)")
        raise
    return failed(
        f"{deploy} rewrote {name}'s policy (SetQueueAttributes was allowed; the policy is unchanged)",
        f'an administrator deploys with administrator credentials: `{names.pulumi_up(cfg.stack)}` (the "First '
        f"deploy\" step of `higgsfield bootstrap {cfg.stack}`, with the committed stack file): the deploy role's "
        "policy must carry AdministratorsOnly (components/delivery.py)",
    )


EVENT_RULE = "aws:cloudwatch/eventRule:EventRule"
# What the plan sets of a rule's target (components/karpenter.py: an EventTarget of the queue's ARN alone, Pulumi
# giving its Id). EventBridge's Target has more (boto/botocore:botocore/data/events/2015-10-07/service-2.json@1.44.18,
# Target: RoleArn, Input, InputPath, InputTransformer, DeadLetterConfig, RetryPolicy and each target kind's
# parameters), and no IAM key carries them (events:TargetArn is the target's Arn alone): a DeadLetterConfig of another
# account's queue receives every event the target could not take.
PLANNED_TARGET = ("Id", "Arn")


def karpenter_rules(ctx: Any) -> Outcome:
    """Each EventBridge rule the plan makes for Karpenter (interruption_rule's names) is there and sends to the
    stack's interruption queue alone, with nothing the plan does not set: the deploy role may PutTargets on the
    stack's rules, and what a target carries beside its ARN no IAM key sees (docs/security-ci.md)."""
    patterns = {str(r.inputs["name"]): r.inputs.get("eventPattern") for r in ctx.plan.of_type(EVENT_RULE)}
    rules = sorted(patterns)
    if not rules:
        return skipped("no `provisioner: karpenter` pool: no interruption rule planned")
    cfg = ctx.config
    account = ctx.client("sts").get_caller_identity()["Account"]
    queue = f"arn:aws:sqs:{cfg.region}:{account}:{names.interruption_queue(cfg.stack)}"
    events = ctx.client("events")
    pages = events.get_paginator("list_targets_by_rule")
    problems: list[str] = []
    for rule in rules:
        try:
            # The deploy role's `events:*` on the rules' names takes DisableRule, and PutRule with any pattern of
            # Karpenter's sources and detail types (components/delivery.py RuleSourcesAreKarpenters): a DISABLED rule,
            # or one matching another of Karpenter's events, keeps its target and sends nothing of its own event
            # (DescribeRuleResponse State and EventPattern: boto/botocore:botocore/data/events/2015-10-07/
            # service-2.json@1.44.18).
            described = events.describe_rule(Name=rule)
            targets = [t for page in pages.paginate(Rule=rule) for t in page["Targets"]]
        except aws_errors.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            problems.append(f"{rule}: missing")
            continue
        if described.get("State") != "ENABLED":
            problems.append(f"{rule}: {described.get('State')}")
        if patterns[rule] and json.loads(described.get("EventPattern") or "null") != json.loads(patterns[rule]):
            problems.append(f"{rule}: matches {described.get('EventPattern')}, planned {patterns[rule]}")
        if not any(t.get("Arn") == queue for t in targets):
            problems.append(f"{rule}: does not send to {queue}")
        problems += [f"{rule}: target {t.get('Id')} sends to {t.get('Arn')}" for t in targets if t.get("Arn") != queue]
        problems += [
            f"{rule}: target {t.get('Id')} sets {', '.join(sorted(extra))}, not planned"
            for t in targets
            if (extra := set(t) - set(PLANNED_TARGET))
        ]
    if problems:
        return failed(
            "; ".join(problems),
            "`pulumi refresh` then `pulumi up` mends the stack's targets and makes a missing rule; a target the stack "
            "did not make is removed with `aws events remove-targets --rule RULE --ids ID`; CloudTrail's PutTargets "
            "events on the rule say who added it",
        )
    return passed(f"{len(rules)} interruption rule(s) send to {queue} alone, as planned")


def _has_ipv6(subnet: dict) -> bool:
    """The subnet holds an IPv6 block: a launch there may ask for an address of it (RunInstances' Ipv6AddressCount,
    boto/botocore:botocore/data/ec2/2016-11-15/service-2.json@1.44.18), which NoPublicAddressOnLaunch's key does not
    cover (ec2:AssociatePublicIpAddress is AssociatePublicIpAddress, "a public IPv4 address", same file)."""
    blocks = subnet.get("Ipv6CidrBlockAssociationSet") or []
    return any((b.get("Ipv6CidrBlockState") or {}).get("State") == "associated" for b in blocks)


def public_subnets(ctx: Any) -> Outcome:
    """No subnet in any region of the account gives an instance a public address it did not ask for, or one it may
    ask for unrefused. Both ceilings refuse a launch that asks for public IPv4 (`NoPublicAddressOnLaunch`, on
    `ec2:AssociatePublicIpAddress`, a request's own flag) and keep `ModifySubnetAttribute` to administrators, but a
    launch into a subnet that already maps public IPv4 (a default VPC's, in every region) or assigns IPv6 gets an
    address without asking, one into a subnet with an IPv6 block gets a (public) IPv6 address by asking, and the
    ceilings do not pin a region (docs/security-ci.md)."""
    regions = sorted(r["RegionName"] for r in ctx.client("ec2").describe_regions()["Regions"])
    found: dict[str, list[str]] = {}
    refused: list[str] = []  # a region an organization's policy closes: nothing of the stack launches there either
    for region in regions:
        pages = ctx.client("ec2", region).get_paginator("describe_subnets").paginate()
        try:
            public = [
                s["SubnetId"]
                for page in pages
                for s in page["Subnets"]
                if s.get("MapPublicIpOnLaunch") or s.get("AssignIpv6AddressOnCreation") or _has_ipv6(s)
            ]
        except aws_errors.ClientError as exc:
            # the stack runs in its own region, which no organization's policy closes to it: a refusal there is
            # the caller's missing right, and the check has seen nothing
            if exc.response.get("Error", {}).get("Code") not in DENIED_CODES or region == ctx.config.region:
                raise
            refused.append(region)
            continue
        if public:
            found[region] = public
    closed = f"; DescribeSubnets refused in {', '.join(refused)}" if refused else ""
    if not found:
        return passed(
            f"no subnet in the account's {len(regions) - len(refused)} region(s) hands out a public address on launch "
            f"or holds an IPv6 block{closed}"
        )
    listed = "; ".join(
        f"{region}: {', '.join(ids[:3])}" + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        for region, ids in found.items()
    )
    return failed(
        f"{sum(map(len, found.values()))} subnet(s) hand out public addresses on launch or hold an IPv6 block "
        f"({listed}){closed}",
        "a role of the stack could launch an instance there that the internet reaches; an administrator runs, for "
        "each, `aws ec2 modify-subnet-attribute --region REGION --subnet-id SUBNET --no-map-public-ip-on-launch` "
        "(and `--no-assign-ipv6-address-on-creation`; an IPv6 block: `aws ec2 disassociate-subnet-cidr-block "
        "--association-id ASSOCIATION`), or deletes the region's default VPC, its gateways and subnets first (every "
        'region at once: docs/getting-started.md, "Default VPCs")',
    )


# --- the table -------------------------------------------------------------------------------------

EKS_READ = "eks:DescribeCluster"
KUBE_API = "kube.api"


ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"


def preview_entry(ctx: Any) -> Outcome:
    """The CI preview role's EKS access entry puts it in the preview group alone (names.PREVIEW_GROUP), under EKS's
    default username, and has no access policy (components/delivery.py Delivery). EKS authorizes an access policy by
    the entry, not by a group, and a group added to the entry (a team's: its rights in its namespace) is one
    kube.preview-access, asking as the preview group, never asks as: either widens a pull request's reads unseen
    (AmazonEKSAdminViewPolicy reads every Secret: awsdocs/amazon-eks-user-guide:latest/ug/manage-access/k8s-access/
    access-policy-reference.adoc@145543a9). DescribeAccessEntry's accessEntry.kubernetesGroups and username,
    ListAssociatedAccessPolicies' associatedAccessPolicies (botocore's eks model)."""
    planned = [r for r in ctx.plan.of_type(ACCESS_ENTRY) if r.inputs.get("kubernetesGroups") == [names.PREVIEW_GROUP]]
    if not planned:
        return skipped("no CI preview role (higgsfield:delivery)")
    stack, eks = ctx.config.stack, ctx.client("eks")
    role = f"arn:aws:iam::{ctx.config.delivery.account_id}:role/{names.role_name(stack, 'preview')}"
    entry = {"clusterName": names.cluster_name(stack), "principalArn": role}
    problems = []
    live = eks.describe_access_entry(**entry)["accessEntry"]
    groups = sorted(live.get("kubernetesGroups") or [])
    if groups != [names.PREVIEW_GROUP]:
        problems.append(f"its entry's groups are {', '.join(groups) or 'none'}, planned {names.PREVIEW_GROUP}")
    # The plan sets no username: EKS's default is the role's session (names.assumed_role_user), another is whoever
    # that user is bound as.
    default_user = names.assumed_role_user(ctx.config.delivery.account_id, names.role_name(stack, "preview"))
    if live.get("username", default_user + "{{SessionName}}") != default_user + "{{SessionName}}":
        problems.append(f"its entry's username is {live['username']}, planned EKS's {default_user}{{{{SessionName}}}}")
    for page in eks.get_paginator("list_associated_access_policies").paginate(**entry):
        for policy in page.get("associatedAccessPolicies") or []:
            scope = policy.get("accessScope") or {}
            where = ", ".join(scope.get("namespaces") or []) or scope.get("type", "?")
            problems.append(f"{policy['policyArn'].rpartition('/')[2]} is associated with its entry ({where})")
    if problems:
        return failed(
            f"the preview role {role}: " + "; ".join(problems),
            "`pulumi up` sets the planned groups again; `aws eks disassociate-access-policy --cluster-name "
            f"{names.cluster_name(stack)} --principal-arn {role} --policy-arn ARN` takes a policy off; CloudTrail's "
            "UpdateAccessEntry and AssociateAccessPolicy events say who changed it",
        )
    return passed(f"the preview role's entry: {names.PREVIEW_GROUP} alone, no access policy")


IAM_ROLE = "aws:iam/role:Role"
NODE_ROLE = "higgsfield:nodes:NodeRole"


def _allows(document: Any) -> list[dict]:
    """A policy document's Allow statements (a lone statement as a list of one). IAM's GetRole returns the document
    URL-encoded, which boto3 decodes to a dict; text is read as the same JSON."""
    if isinstance(document, str):
        document = json.loads(urllib.parse.unquote(document))
    statements = document.get("Statement") or []
    return [st for st in (statements if isinstance(statements, list) else [statements]) if st.get("Effect") == "Allow"]


def _trusted(document: Any) -> list[str]:
    """Who a trust policy's Allow statements let assume the role, each as `KIND VALUE` (`Service ec2.amazonaws.com`,
    `AWS arn:aws:iam::111122223333:root`); a NotPrincipal, or `*`, trusts everyone but what it names."""
    trusted: list[str] = []
    for statement in _allows(document):
        if "NotPrincipal" in statement:
            trusted.append(f"everyone but {json.dumps(statement['NotPrincipal'])} (NotPrincipal)")
        principal = statement.get("Principal")
        if principal == "*":
            trusted.append("AWS *")
        for kind, values in (principal or {}).items() if isinstance(principal, dict) else ():
            trusted.extend(f"{kind} {v}" for v in ([values] if isinstance(values, str) else values))
    return trusted


def _planned_node_role(ctx: Any) -> Any:
    """The plan's node role (components/nodes.py NodeRole's role), the one every node group and Karpenter's nodes
    are on."""
    (role,) = [r for r in ctx.plan.of_type(IAM_ROLE) if (r.parent or "").split("::")[-2].endswith(NODE_ROLE)]
    return role


def _planned_node_trust(role: Any) -> tuple[str, list[str]]:
    """The plan's node role's trust policy (components/nodes.py NodeRole: ec2.amazonaws.com alone) and whom it
    trusts."""
    document = role.inputs["assumeRolePolicy"]
    return document, _trusted(json.loads(document))


def _planned_principals(cfg: Any) -> set[str]:
    """The principals the program enters in the cluster's access itself (STANDARD entries): the configured admins
    (components/cluster.py, pulumi-eks's access entries; another account's too, entered by an administrator's deploy)
    and, with higgsfield:delivery, the CI preview and deploy roles (components/delivery.py Delivery)."""
    from components.delivery import access_entry_principals

    ci = access_entry_principals(cfg.delivery, cfg.stack, cfg.admins) if cfg.delivery else []
    return {*cfg.admins, *ci}


def cluster_access(ctx: Any) -> Outcome:
    """Who the cluster lets in is who the plan enters, and no one else: every access entry (ListAccessEntries'
    principal ARNs, DescribeAccessEntry's accessEntry.type and createdAt, whose types are STANDARD and the node types
    EC2_LINUX, EC2_WINDOWS, EC2, FARGATE_LINUX, HYBRID_LINUX, HYPERPOD_LINUX: CreateAccessEntryRequest in
    boto/botocore:botocore/data/eks/2017-11-01/service-2.json@1.44.18) is a STANDARD
    one of a planned principal (_planned_principals), the node role's, which EKS enters as a node for the planned
    groups (CreateAccessEntry's `type`: "it's unnecessary to create access entries for IAM roles used with ... managed
    Amazon EC2 nodes"; Karpenter's nodes take the same role: docs/karpenter.md), or the cluster creator's, which
    EKS makes with the cluster (pulumi-eks asks bootstrapClusterCreatorAdminPermissions: docs/day-one-journey.md
    step 2) and so the one STANDARD entry of no planned principal made before the cluster's first node group. And
    every role EKS enters as a node (the node groups', planned or not) trusts no one the plan's node role does not
    (iam:GetRole's AssumeRolePolicyDocument): IAM cannot read a trust, nor CreateNodegroup's nodeRole, so a node role
    trusting another account is found here, not refused. Nor its rights (_rights_not_planned against the plan's node
    role): the deploy role may put any policy on a role of the stack's, the node role too, and every node, and any
    instance launched with the node role's instance profile, would act with it."""
    cfg, eks = ctx.config, ctx.client("eks")
    cluster = names.cluster_name(cfg.stack)
    planned_groups, others = _cluster_groups(ctx)
    node_roles, people = _node_roles(planned_groups), _planned_principals(cfg)
    unplanned_roles = {g.get("nodeRole"): name for name, g in others.items()}
    pages = eks.get_paginator("list_access_entries").paginate(clusterName=cluster)
    principals = [arn for page in pages for arn in page.get("accessEntries") or []]
    entries = [eks.describe_access_entry(clusterName=cluster, principalArn=a)["accessEntry"] for a in principals]
    problems: list[str] = []
    unplanned: list[dict] = []
    for entry in entries:
        arn, kind = entry["principalArn"], entry.get("type", "STANDARD")
        if arn in node_roles and kind == "STANDARD":
            problems.append(f"the node role {arn} is entered as STANDARD, not as a node")
        elif arn in people and kind != "STANDARD":
            problems.append(f"{arn} is entered as {kind}, planned STANDARD")
        elif arn not in node_roles and arn not in people:
            unplanned.append(entry)
    # the creator's: the oldest STANDARD entry of no planned principal, made before any planned group
    first_group = min(
        (g["createdAt"] for gs in planned_groups.values() for g in gs if g.get("createdAt")), default=None
    )
    standard = sorted((e for e in unplanned if e.get("type", "STANDARD") == "STANDARD"), key=lambda e: e["createdAt"])
    creator = standard[0] if standard and (first_group is None or standard[0]["createdAt"] < first_group) else None
    for entry in unplanned:
        if entry is creator:
            continue
        arn = entry["principalArn"]
        group = unplanned_roles.get(arn)
        made = f" (the node role of group {group}, which the plan does not make)" if group else ""
        problems.append(f"{arn}: an entry ({entry.get('type', 'STANDARD')}) the plan does not make{made}")
    iam, node_role = ctx.client("iam"), _planned_node_role(ctx)
    planned_trust, allowed = _planned_node_trust(node_role)
    # every role EKS enters as a node: the planned groups', and those of the groups the plan does not make
    for role in sorted({*node_roles, *(r for r in unplanned_roles if r)}):
        found = _answer(iam.get_role, "NoSuchEntity", RoleName=role.rpartition("/")[2])
        if found is None:
            problems.append(f"the node role {role} does not exist")
            continue
        live = found["Role"]
        beyond = [t for t in _trusted(live["AssumeRolePolicyDocument"]) if t not in allowed]
        if beyond:
            problems.append(f"the node role {role} trusts {', '.join(beyond)}, planned {', '.join(allowed)} alone")
        # its rights: every node, and any instance launched with its instance profile, acts with them
        problems += [f"the node role {role}: {p}" for p in _rights_not_planned(iam, ctx, node_role, live)]
    if problems:
        return failed(
            "; ".join(problems),
            f"an entry the plan does not make is removed with `aws eks delete-access-entry --cluster-name {cluster} "
            "--principal-arn ARN` (a node role's after its group: aws.node-groups); an administrator sets the node "
            f"role's trust back with `aws iam update-assume-role-policy --role-name ROLE --policy-document "
            f"'{planned_trust}'` (the deploy role may not: TrustIsSetAtCreate); a policy the plan does not give the "
            "node role goes with `aws iam delete-role-policy` or `aws iam detach-role-policy` (`pulumi up` keeps it); "
            "CloudTrail's CreateAccessEntry, CreateNodegroup, UpdateAssumeRolePolicy, PutRolePolicy and "
            "AttachRolePolicy events say who did it",
        )
    seen = f"{len(entries)} access entries: {len(entries) - len(unplanned)} planned"
    seen += f", the creator's ({creator['principalArn']})" if creator else ""
    return passed(f"{seen}; the node role {', '.join(node_roles) or '(no group)'} trusts {', '.join(allowed)} alone")


POD_IDENTITY = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


def _trusts_only(document: Any, cluster: str, namespace: str, service_account: str) -> bool:
    """The role's trust lets Pod Identity in for that service account of that cluster alone: each Allow statement
    trusts Pod Identity's service and no one else (_trusted: no other principal, no `*`, no NotPrincipal: any
    principal may pass any session tag it likes with sts:TagSession) and asks every session tag
    (components/identity.py SESSION_TAGS, pod_identity_trust) with its value."""
    allows = _allows(document)
    want = {f"aws:RequestTag/{k}": v for k, v in zip(SESSION_TAGS, (cluster, namespace, service_account), strict=True)}
    return bool(allows) and all(
        _trusted({"Statement": [st]}) == [f"Service {POD_IDENTITY_SERVICE}"]
        and all(((st.get("Condition") or {}).get("StringEquals") or {}).get(k) == v for k, v in want.items())
        for st in allows
    )


def _pod_identity_roles(ctx: Any) -> dict[tuple[str, str], Any]:
    """The plan's Pod Identity role for each (namespace, service account) its trust names (components/identity.py
    pod_identity_trust): an add-on's association is for its own namespace, which the plan says only there."""
    tags = [f"aws:RequestTag/{k}" for k in SESSION_TAGS[1:]]
    roles: dict[tuple[str, str], Any] = {}
    for role in ctx.plan.of_type(IAM_ROLE):
        document = role.inputs.get("assumeRolePolicy")
        if isinstance(document, str) and POD_IDENTITY_SERVICE in document:
            for statement in json.loads(document)["Statement"]:
                asked = (statement.get("Condition") or {}).get("StringEquals") or {}
                roles[(asked.get(tags[0], ""), asked.get(tags[1], ""))] = role
    return roles


ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"


def _past_account(arn: str) -> str:
    """An IAM ARN's resource part (`policy/higgsfield-prod-boundary`): the plan's account is the stack file's, or
    the offline evaluation's own."""
    return arn.split(":", 5)[-1]


def _rights_not_planned(iam: Any, ctx: Any, planned: Any, live: dict, computed: dict | None = None) -> list[str]:
    """How the live role `live` (GetRole's Role) differs in its rights from the plan's role `planned`: its inline
    policies (the plan's RolePolicy resources that name the role; a document the plan computes only at deploy is
    `computed`, where the caller works it out from the account, else counted, not read), its attached managed
    policies (RolePolicyAttachment), its permissions boundary and its name. A role the deploy role made with the
    right trust and more rights passed the trust check alone.

    Documents compare as parsed JSON, not as text: pulumi-aws re-serializes a RolePolicy's document before
    PutRolePolicy (keys sorted, whitespace dropped, Version moved first; the structure kept: resourceRolePolicyPut in
    hashicorp/terraform-provider-aws:internal/service/iam/role_policy.go@02f97af85f89a04e8ed89f5e8b64a9a67f3cfe07,
    LegacyPolicyNormalize in hashicorp/terraform-provider-aws:internal/verify/json.go@
    529284fb0bb1ef9cc4933007ec0857f538bb22df), and boto3 returns GetRolePolicy's URL-encoded document decoded
    (json_decode_policies, boto/botocore:botocore/handlers.py@1.44.18)."""
    name = live["RoleName"]
    inline, attached = [], set()
    for r in ctx.plan.resources:
        if planned.urn in (r.dependencies or ()):
            if r.type == ROLE_POLICY:
                document = r.inputs.get("policy")
                if document != COMPUTED:
                    inline.append(json.loads(document))
                else:
                    inline.append(computed if computed is not None else COMPUTED)
            elif r.type == ROLE_POLICY_ATTACHMENT:
                attached.add(r.inputs.get("policyArn"))
    problems = []
    prefix = planned.inputs.get("name") or planned.inputs.get("namePrefix") or ""
    if not name.startswith(prefix):
        problems.append(f"not a role of the plan's ({prefix}...)")
    unread = [d for d in inline if d == COMPUTED]
    unmatched = []
    for page in iam.get_paginator("list_role_policies").paginate(RoleName=name):
        for policy in page.get("PolicyNames") or []:
            document = iam.get_role_policy(RoleName=name, PolicyName=policy)["PolicyDocument"]
            document = json.loads(urllib.parse.unquote(document)) if isinstance(document, str) else document
            if document in inline:
                inline.remove(document)
            elif unread:
                unread.pop()
            else:
                unmatched.append(policy)
    if unmatched:
        problems.append(f"inline policy {', '.join(unmatched)} not as planned")
    if [d for d in inline if d != COMPUTED]:
        problems.append("a planned inline policy missing")
    pages = iam.get_paginator("list_attached_role_policies").paginate(RoleName=name)
    live_attached = {a["PolicyArn"] for page in pages for a in page.get("AttachedPolicies") or []}
    if live_attached - attached:
        problems.append(f"attached {', '.join(sorted(live_attached - attached))}, which the plan does not attach")
    boundary = planned.inputs.get("permissionsBoundary")
    live_boundary = (live.get("PermissionsBoundary") or {}).get("PermissionsBoundaryArn")
    if (
        isinstance(boundary, str)
        and boundary != COMPUTED
        and (not live_boundary or _past_account(live_boundary) != _past_account(boundary))
    ):
        problems.append(
            f"permissions boundary {live_boundary or 'none'}, where the plan sets {_past_account(boundary)}"
        )
    return problems


def _karpenter_policy(ctx: Any, account: str) -> dict | None:
    """Karpenter's controller policy as `pulumi up` computes it (components/karpenter.py karpenter_policy), from what
    the account holds: the node role the cluster's planned groups are on (the program gives Karpenter's nodes the
    same) and the stack's interruption queue, whose ARN its name and the account make. None where the groups are on
    no one role (aws.node-groups fails on that): the document is then counted, not read."""
    roles = _node_roles(_cluster_groups(ctx)[0])
    if len(roles) != 1:
        return None
    region, stack = ctx.config.region, ctx.config.stack
    queue = f"arn:aws:sqs:{region}:{account}:{names.interruption_queue(stack)}"
    return json.loads(karpenter_policy(names.cluster_name(stack), region, account, roles[0], queue))


def pod_identities(ctx: Any) -> Outcome:
    """Every Pod Identity association of the cluster is one the program makes (its PodIdentityAssociation resources,
    or an add-on's own, which EKS owns by the add-on: DescribePodIdentityAssociation's ownerArn), with session tags on
    and no target role (PodIdentityAssociation's disableSessionTags and targetRoleArn, boto/botocore:botocore/data/
    eks/2017-11-01/service-2.json@1.44.18: a target role is assumed in a chain, in any account), to a role whose
    trust names that association's cluster, namespace and service account, and whose policies, boundary and name are
    those the plan gives the role of that service account (_rights_not_planned). The deploy role may associate any
    service account of its own cluster, a team's too, with any role it made; IAM reads neither. An add-on's
    podIdentityAssociations make the association alone: its role, and what the role may do, are the caller's
    (docs.aws.amazon.com/eks/latest/userguide/add-ons-iam.html, checked 2026-12-07)."""
    eks, cluster = ctx.client("eks"), names.cluster_name(ctx.config.stack)
    pairs = {(r.inputs["namespace"], r.inputs["serviceAccount"]) for r in ctx.plan.of_type(POD_IDENTITY)}
    by_addon = {
        r.inputs["addonName"]: {a["serviceAccount"] for a in r.inputs.get("podIdentityAssociations") or []}
        for r in ctx.plan.of_type(ADDON)
    }
    pages = eks.get_paginator("list_pod_identity_associations").paginate(clusterName=cluster)
    ids = [a["associationId"] for page in pages for a in page.get("associations") or []]
    iam, problems, seen, trusted = ctx.client("iam"), [], set(), _pod_identity_roles(ctx)
    for association_id in ids:
        a = eks.describe_pod_identity_association(clusterName=cluster, associationId=association_id)["association"]
        pair, owner = (a["namespace"], a["serviceAccount"]), a.get("ownerArn") or ""
        where = f"{pair[0]}/{pair[1]}"
        addon = owner.split("/")[2] if ":addon/" in owner else None
        if addon is not None and (pair[1] not in by_addon.get(addon, set()) or pair not in trusted):
            problems.append(f"{where}: made by add-on {addon}, which the plan does not give it")
        elif addon is None and pair not in pairs:
            problems.append(f"{where}: an association the plan does not make")
        seen.add(pair)
        if a.get("targetRoleArn"):
            problems.append(f"{where}: chains into target role {a['targetRoleArn']}")
        if a.get("disableSessionTags"):
            problems.append(f"{where}: session tags off (its role's trust cannot tell which service account asks)")
        if (a.get("workloadIdentityConfig") or {}).get("enabled"):
            problems.append(f"{where}: workload identity on (its pods get an identity the plan never gives)")
        role, account = a["roleArn"].rpartition("/")[2], _account_of(a["roleArn"])
        if a.get("associationArn") and account != _account_of(a["associationArn"]):
            # GetRole reads this account's role of that name: another account's role is not read
            problems.append(f"{where}: role {a['roleArn']} of another account")
            continue
        live = iam.get_role(RoleName=role)["Role"]
        if not _trusts_only(live["AssumeRolePolicyDocument"], cluster, *pair):
            problems.append(f"{where}: role {role} does not trust that service account of {cluster} alone")
        elif pair in trusted:
            computed = _karpenter_policy(ctx, account) if pair == (KARPENTER_NAMESPACE, KARPENTER_ACCOUNT) else None
            problems += [
                f"{where}: role {role}: {p}" for p in _rights_not_planned(iam, ctx, trusted[pair], live, computed)
            ]
    problems += [f"{ns}/{sa}: missing" for ns, sa in sorted(pairs - seen)]
    if problems:
        return failed(
            "Pod Identity: " + "; ".join(problems),
            f"`aws eks delete-pod-identity-association --cluster-name {cluster} --association-id ID` removes one the "
            "plan does not make (`aws eks list-pod-identity-associations` lists the IDs); `pulumi up` mends a planned "
            "one; CloudTrail's CreatePodIdentityAssociation and UpdatePodIdentityAssociation events say who did it",
        )
    return passed(f"{len(ids)} Pod Identity association(s), each planned, tagged and to its own role")


def specs() -> list[Spec]:
    """Every check, in order (`higgsfield verify STACK --list`)."""
    from infra.cli.verify import fabric, node_loss, trial

    return [
        Spec("aws.bootstrap", "the state bucket is versioned, the secrets key enabled, the GitHub connection AVAILABLE",
             bootstrap, "aws", "s3:GetBucketVersioning, kms:DescribeKey, codeconnections:GetConnection"),
        Spec("aws.cluster", "the EKS cluster is ACTIVE at the stack's Kubernetes version, API authentication, "
             "its planned control-plane logs (audit among them) on",
             cluster, "aws", EKS_READ),
        Spec("aws.node-groups", "every planned node group is ACTIVE with the planned min/max and taints, no SSH key, "
             "its launch template version as planned (user data, no AMI, key or public address), no other group is "
             "there, and all are on one node role",
             node_groups, "aws", "eks:ListNodegroups, eks:DescribeNodegroup, ec2:DescribeLaunchTemplateVersions",
             after=("aws.cluster",)),
        Spec("aws.addons", "every planned EKS add-on is ACTIVE, at its pin and at or above its floor, configured as "
             "planned, and no other add-on is there but GuardDuty's agent without a role",
             addons, "aws", "eks:ListAddons, eks:DescribeAddon", after=("aws.cluster",)),
        Spec("aws.capacity-schedules", "Capacity Block windows: the scheduled actions are on the pool's group",
             capacity_schedules, "aws", "autoscaling:DescribeScheduledActions", after=("aws.node-groups",)),
        Spec("aws.reservations", "reservation and Capacity Block pools: the reservation is live, of the pool's type",
             reservations, "aws", "ec2:DescribeCapacityReservations"),
        Spec("aws.no-irsa-provider", "no IAM OIDC provider trusts the cluster's service account tokens (Pod "
             "Identity only)", no_irsa_provider, "aws", "eks:DescribeCluster, iam:ListOpenIDConnectProviders",
             after=("aws.cluster",)),
        Spec("aws.preview-entry", "the CI preview role's access entry: the preview group alone, no access policy",
             preview_entry, "aws", "eks:DescribeAccessEntry, eks:ListAssociatedAccessPolicies",
             after=("aws.cluster",)),
        Spec("aws.cluster-access", "every access entry of the cluster is a planned principal's, the node role's "
             "(as a node) or the creator's; every node group's role trusts what the plan's node role does (EC2) alone "
             "and has its policies and boundary",
             cluster_access, "aws", "eks:ListAccessEntries, eks:DescribeAccessEntry, eks:ListNodegroups, "
             "eks:DescribeNodegroup, iam:GetRole, iam:ListRolePolicies, iam:GetRolePolicy, "
             "iam:ListAttachedRolePolicies", after=("aws.cluster",)),
        Spec("aws.pod-identities", "every Pod Identity association is the program's (or a planned add-on's), with "
             "session tags, no target role, to a role trusting that service account alone with the plan's rights",
             pod_identities, "aws", "eks:ListPodIdentityAssociations, eks:DescribePodIdentityAssociation, iam:GetRole, "
             "iam:ListRolePolicies, iam:GetRolePolicy, iam:ListAttachedRolePolicies, eks:ListNodegroups, "
             "eks:DescribeNodegroup",
             after=("aws.cluster",)),
        Spec("aws.managed-policies", "the AWS managed policies the program attaches act only in the boundary's "
             "services", managed_policies, "aws", "iam:GetPolicy, iam:GetPolicyVersion"),
        Spec("aws.runner-webhooks", "each runner project's webhook has the planned event, workflow and actor filters",
             runner_webhooks, "aws", "codebuild:BatchGetProjects"),
        Spec("aws.runner-projects", "each runner project builds the planned repository with its own role, in the "
             "stack's private subnets and its own security group, from the planned image", runner_projects, "aws",
             "codebuild:BatchGetProjects, eks:DescribeCluster, ec2:DescribeSecurityGroups"),
        Spec("aws.log-groups", "every planned log group is there, encrypted, at its retention; no agent-made one "
             "unencrypted", log_groups, "aws", "logs:DescribeLogGroups"),
        Spec("aws.image-repository", "the training image's repository is there with the planned tag mutability, "
             "encryption, scan on push and lifecycle policy, and no repository policy the plan does not set",
             image_repository, "aws", "ecr:DescribeRepositories, ecr:GetLifecyclePolicy, ecr:GetRepositoryPolicy"),
        Spec("aws.data-versioning", "each linked bucket the file system writes back into keeps every version",
             data_versioning, "aws", "s3:GetBucketVersioning, s3:GetLifecycleConfiguration"),
        Spec("aws.layout-client", "the FSx layout client, root on every team's directory: the cluster VPC's one "
             "file system squash exempts its address alone, which one instance holds with the planned layout, image, "
             "root volume alone and metadata options, no profile, key or way in",
             layout_client, "aws", "fsx:DescribeFileSystems, eks:DescribeCluster, ec2:DescribeNetworkInterfaces, "
             "ec2:DescribeInstances, ec2:DescribeInstanceAttribute, ec2:DescribeImages, ec2:DescribeVolumes, "
             "ec2:DescribeSecurityGroups"),
        # three event names a run, each every page, at two lookups a second at most (throttled ones retried)
        Spec("aws.squash-history", "no FSx call of the last 90 days (CloudTrail's event history) set the file "
             "system's root squash otherwise than planned or exempted another address, even one undone since",
             squash_history, "aws", "fsx:DescribeFileSystems, eks:DescribeCluster, cloudtrail:LookupEvents",
             timeout_s=120.0),
        Spec("aws.karpenter-queue", "Karpenter's interruption queue keeps its policy: EventBridge for the stack's "
             "rules alone, a rewrite refused to the deploy role",
             karpenter_queue, "aws", "sqs:GetQueueUrl, sqs:GetQueueAttributes, sqs:SetQueueAttributes (refused)"),
        Spec("aws.karpenter-rules", "Karpenter's interruption rules send to the stack's queue alone, with no "
             "dead-letter queue, role or input the plan does not set", karpenter_rules, "aws",
             "events:DescribeRule, events:ListTargetsByRule"),
        # the cluster's Karpenter instances, then the audit log's claim creates since the oldest, page by page
        Spec("aws.node-claim-creators", "every NodeClaim under a Karpenter instance was made by Karpenter (the API "
             "server's audit log), none by the deploy role or another user, nor by one acting as Karpenter's account "
             "(a token asked, a pod or workload of its own, a Secret-based token, a shell in Karpenter's pod)",
             node_claim_creators, "aws",
             "ec2:DescribeInstances, logs:FilterLogEvents", timeout_s=120.0),
        Spec("aws.vpc-instances", "every instance in the cluster's VPC is a planned node group's, a planned "
             "Karpenter pool's or the layout client", vpc_instances, "aws",
             "eks:DescribeCluster, eks:ListNodegroups, eks:DescribeNodegroup, ec2:DescribeInstances"),
        # every enabled region read one after the other (17 or more), each call within the clients' own timeouts
        Spec("aws.public-subnets", "no subnet in any region hands out a public address on launch or holds an IPv6 "
             "block (a default VPC's do)", public_subnets, "aws", "ec2:DescribeRegions, ec2:DescribeSubnets",
             timeout_s=120.0),
        Spec(KUBE_API, "the kubeconfig's context is the stack's cluster and answers at its version",
             kube_api, "kube", "none (GET /version is public to authenticated users)"),
        Spec("kube.leases", "the Training Operator, Volcano, the autoscaler and Karpenter hold fresh leader Leases",
             leases, "kube", "get/list leases in kubeflow, kube-system, volcano-system", after=(KUBE_API,)),
        Spec("kube.autoscaler-status", "the Cluster Autoscaler reconciles: its status ConfigMap says Healthy",
             autoscaler_status, "kube", "get configmaps in kube-system", after=(KUBE_API,)),
        Spec("kube.cluster-made", "objects the cluster made (default queue, teams' default SAs) carry our fields",
             cluster_made, "kube", "get queues; get serviceaccounts in team namespaces", after=(KUBE_API,)),
        Spec("kube.node-classes", "every Karpenter EC2NodeClass is planned and its spec as planned: image, user data, "
             "root volume, kubelet, instance profile, metadata options, no public address",
             node_classes, "kube", "list ec2nodeclasses", after=(KUBE_API,)),
        Spec("kube.node-pools", "every Karpenter NodePool is planned and its spec as planned (class, taints and the "
             "health gate's startup taint, requirements, limits, disruption), every NodeClaim of one, with its taints",
             node_pools, "kube", "list nodepools, nodeclaims", after=(KUBE_API,)),
        Spec("kube.queues", "every team's queue is Open, its namespace names it, PodGroups are moved to it",
             queues, "kube", "get queues, namespaces, mutatingwebhookconfigurations", after=(KUBE_API,)),
        Spec("kube.admission-policies", "every planned ValidatingAdmissionPolicy is present, without CEL warnings, "
             "and bound as planned", admission_policies, "kube",
             "list validatingadmissionpolicies, validatingadmissionpolicybindings", after=(KUBE_API,)),
        Spec("kube.tenant-attacks", "admission refuses a PodGroup in another team's queue, a misnamed Kubeflow job, "
             "one that would keep its pods once finished, one managed by another controller, one whose pods carry a "
             "finalizer, a DaemonSet on the GPU nodes, a Job without GPUs there that runs to no deadline",
             tenant_attacks, "kube", "create podgroups, tfjobs, daemonsets, jobs (dryRun) in team namespaces",
             after=(KUBE_API,)),
        Spec("kube.preview-access", "the CI preview group reads no Secret, pod, log or event, runs nothing in a pod "
             "or node, mints no token, impersonates, binds or escalates nothing, lists no team's own ServiceAccounts, "
             "claims, quotas or RBAC, and gets the program's objects by name",
             preview_access, "kube", "create subjectaccessreviews, list namespaces, clusterrolebindings, rolebindings",
             timeout_s=120.0,
             after=(KUBE_API,)),
        Spec("kube.job-names", "each team Kubeflow job is named as its kind (none from before the rule)",
             job_names, "kube", "list Kubeflow jobs in team namespaces", after=(KUBE_API,)),
        Spec("kube.job-placement", "no team Kubeflow job puts a pod without GPUs on the GPU nodes (none from before "
             "the rule)", job_placement, "kube", "list Kubeflow jobs in team namespaces", after=(KUBE_API,)),
        Spec("kube.job-cleanup", "each team Kubeflow job deletes its running pods once finished (cleanPodPolicy)",
             job_cleanup, "kube", "list Kubeflow jobs in team namespaces", after=(KUBE_API,)),
        Spec("kube.refused-pods", "no controller's pod (the Training Operator's, a Job's) was refused by a team "
             "policy in the last hour (the events the API server keeps); quota refusals named",
             refused_pods, "kube", "list events in team namespaces", after=(KUBE_API,)),
        Spec("kube.cpu-only-quota", "every team's cpu-only and cpu-services quotas are as planned and count "
             "exactly their pods (a deadline; the class of services); no pod without GPUs runs on the GPU nodes "
             "without a deadline, nor a Kubeflow job's beyond its job's GPU pods",
             cpu_only_quota, "kube", "list resourcequotas, pods in team namespaces", after=(KUBE_API,)),
        Spec("kube.daemon-sets", "the health gate and node DaemonSets are ready on every node they select",
             daemon_sets, "kube", "get daemonsets", after=(KUBE_API,)),
        Spec("kube.cron-jobs", "the gang deadline's CronJob succeeded in the last 10 minutes",
             cron_jobs, "kube", "list cronjobs in higgsfield-capacity", after=(KUBE_API,)),
        Spec("kube.gpu-nodes", "GPU nodes: the gate's label agrees with the startup taint; healthy ones offer "
             "GPUs/EFA; none carries a live KernelReady or ContainerRuntimeReady (no repair reads the kubelet's log)",
             gpu_nodes, "kube", "list nodes; list pods in kube-system", after=(KUBE_API,)),
        Spec("aws.container-logs", "training pods' log records carry job, replica and node (CloudWatch)",
             container_logs, "aws", "logs:FilterLogEvents"),
        *trial.specs(),
        *fabric.specs(),
        *node_loss.specs(),
        Spec("manual.upgrade", "a Kubernetes minor upgrade on an idle pool: control plane, add-ons, node groups",
             cluster, "aws+kube", "the deploy role",
             manual="pulumi preview, then pulumi up with the next minor (docs/upgrading.md)"),
    ]  # fmt: skip

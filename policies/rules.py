"""Higgsfield's guardrails as Pulumi CrossGuard policies.

Each policy says what is wrong and how to fix it, and has an enforcement level a stack can
change (`--policy-pack-config`, see policies/config/). Properties that are unknown during a
preview raise `UnknownValueError` when read; CrossGuard then reports the policy as not run for
that resource, and `higgsfield check` does the same. Presence is tested with `has()`, which never
reads a value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from infra.core.internet import MAX_INTERNET_SHARE, internet_share
from infra.core.names import AUTOSCALER_TEMPLATE as TEMPLATE_TAG
from infra.core.names import GITHUB_OIDC_HOST as GITHUB_OIDC
from infra.core.names import GPU_RESOURCE as GPU_TAINT
from infra.core.names import HELM_RELEASE, LOG_GROUP
from infra.core.versions import KUBERNETES_SUPPORTED

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY

EKS_COMPONENT = "eks:index:Cluster"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
KMS_KEY = "aws:kms/key:Key"
SQS_QUEUE = "aws:sqs/queue:Queue"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
SUBNET = "aws:ec2/subnet:Subnet"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
ASG_TAG = "aws:autoscaling/tag:Tag"
LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
LUSTRE_PORTS = {(988, 988), (1018, 1023)}
NODE_POLICIES = {
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
}


def has(props: Mapping[str, Any], key: str) -> bool:
    """Whether `key` is set, without reading its (possibly unknown) value."""
    return key in list(iter(props))


def get(props: Any, *path: str | int, default: Any = None) -> Any:
    """Read a nested value; missing keys give `default`, unknown values raise as CrossGuard does."""
    value = props
    for key in path:
        if isinstance(key, int):
            if key >= len(value):
                return default
        elif not has(value, key):
            return default
        value = value[key]
    return default if value is None else value


def _tags(props: Mapping[str, Any]) -> Mapping[str, str]:
    return get(props, "tags", default={}) if has(props, "tags") else {}


# The environment a policy applies prod's rules for comes from the policy's config, which
# `higgsfield check` fills from the typed stack config (`higgsfield:environment`) and
# policies/config/<stack>.json carries for `pulumi preview --policy-pack` - never from a tag,
# which any stack can set in `higgsfield:tags`. Without one, prod's rules apply (fail closed).
_ENVIRONMENT = {"environment": {"type": "string", "enum": ["dev", "staging", "prod"]}}


def _environment(config: Mapping[str, Any]) -> str:
    return config.get("environment") or "prod"


def _policy(name: str, description: str, level: EnforcementLevel = MANDATORY, schema: PolicyConfigSchema | None = None):
    """Decorator: a ResourceValidationPolicy from a `check(args, report)` function."""

    def make(check) -> ResourceValidationPolicy:
        return ResourceValidationPolicy(
            name=name, description=description, validate=check, enforcement_level=level, config_schema=schema
        )

    return make


def _stack_policy(
    name: str, description: str, level: EnforcementLevel = MANDATORY, schema: PolicyConfigSchema | None = None
):
    def make(check) -> StackValidationPolicy:
        return StackValidationPolicy(
            name=name, description=description, validate=check, enforcement_level=level, config_schema=schema
        )

    return make


# --- the control plane ---------------------------------------------------------------------------


def _endpoint(args: ResourceValidationArgs) -> tuple[bool, list[str]]:
    props = args.props
    if args.resource_type == EKS_COMPONENT:
        return bool(get(props, "endpointPublicAccess", default=True)), list(get(props, "publicAccessCidrs", default=[]))
    vpc = get(props, "vpcConfig", default={})
    return bool(get(vpc, "endpointPublicAccess", default=True)), list(get(vpc, "publicAccessCidrs", default=[]))


_ENDPOINT = PolicyConfigSchema(properties={"maxInternetShare": {"type": "number", "minimum": 0, "maximum": 1}})


@_policy(
    "eks-endpoint-restricted",
    "The EKS API endpoint is private, or public only to an allow-list covering a small share of the internet.",
    schema=_ENDPOINT,
)
def eks_endpoint_restricted(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in (EKS_COMPONENT, EKS_CLUSTER):
        return
    public, cidrs = _endpoint(args)
    if not public:
        return
    limit = args.get_config().get("maxInternetShare", MAX_INTERNET_SHARE)
    try:
        share = internet_share(cidrs) if cidrs else 1.0
    except ValueError as exc:
        report(f"publicAccessCidrs {cidrs} is not a list of IPv4 CIDRs ({exc}).")
        return
    if share > limit:
        report(
            f"The API server is open to {share:.4%} of the internet (publicAccessCidrs "
            f"{cidrs or 'unset: 0.0.0.0/0'}; at most {limit:.4%}). "
            "Set higgsfield:endpoint.publicAccessCidrs to your VPN/office ranges, or [] to keep it private."
        )


@_policy("eks-control-plane-logs", "All five EKS control-plane log types go to CloudWatch.")
def eks_control_plane_logs(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in (EKS_COMPONENT, EKS_CLUSTER):
        return
    enabled = set(get(args.props, "enabledClusterLogTypes", default=[]))
    missing = [t for t in LOG_TYPES if t not in enabled]
    if missing:
        report(f"Control-plane log types missing: {', '.join(missing)}. Enable all of {', '.join(LOG_TYPES)}.")


@_policy(
    "eks-authentication-api",
    "EKS authenticates through access entries (authentication mode API), not the aws-auth ConfigMap.",
)
def eks_authentication_api(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type == EKS_COMPONENT:
        mode = get(args.props, "authenticationMode")
    elif args.resource_type == EKS_CLUSTER:
        mode = get(args.props, "accessConfig", "authenticationMode")
    else:
        return
    if mode != "API":
        report(
            f"Authentication mode is {mode or 'unset (CONFIG_MAP)'}; set it to API and grant access with access "
            "entries."
        )


@_policy("eks-secrets-encrypted", "Kubernetes Secrets are envelope-encrypted with a customer-managed KMS key.")
def eks_secrets_encrypted(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type == EKS_COMPONENT:
        if not has(args.props, "encryptionConfigKeyArn"):
            report("No encryptionConfigKeyArn: pass a KMS key of ours (rotation on) to encrypt Secrets.")
    elif args.resource_type == EKS_CLUSTER:
        configs = get(args.props, "encryptionConfig", default=None)
        configs = [configs] if isinstance(configs, Mapping) else list(configs or [])
        if not any("secrets" in list(get(c, "resources", default=[])) for c in configs):
            report("No encryptionConfig for secrets: encrypt Secrets with a customer-managed KMS key.")


@_policy("kms-key-rotation", "Every KMS key of ours rotates yearly.")
def kms_key_rotation(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type == KMS_KEY and get(args.props, "enableKeyRotation") is not True:
        report("enableKeyRotation is not true: turn on automatic rotation.")


def _principals(statement: Mapping) -> list[str]:
    """The principals a resource policy's statement names ('*' for a bare or AWS wildcard)."""
    principal = statement.get("Principal", "*")
    if principal == "*" or not isinstance(principal, Mapping):
        return ["*"]
    return [("*" if v == "*" else f"{kind}={v}") for kind, values in principal.items() for v in _listed(values)]


def _a_service(principal: str) -> bool:
    """An AWS service principal, as _principals names it."""
    return principal.startswith("Service=") and principal.endswith(".amazonaws.com")


def _key_policy_principals(document: str) -> list[str]:
    """Every principal a key policy's statements name."""
    return [p for statement in _statements(document) for p in _principals(statement)]


# Condition keys that tie an AWS service's use of a key to this account's resources (the confused-deputy
# keys, IAM user guide "The confused deputy problem"; CloudWatch Logs' encryption context names the log
# group's ARN, docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html).
SOURCE_KEYS = ("aws:SourceAccount", "aws:SourceArn")


def _services_unpinned(statement: Mapping, accounts: set[str]) -> list[str]:
    """The service principals an Allow statement grants without a condition on SOURCE_KEYS or a
    kms:EncryptionContext key whose every value names one of `accounts` (ARNs by their account field,
    aws:SourceAccount by its value)."""
    principal = statement.get("Principal")
    if statement.get("Effect") != "Allow" or not isinstance(principal, Mapping) or "Service" not in principal:
        return []

    def names_the_account(key: str, value: Any) -> bool:
        text = str(value)
        if key.lower() == "aws:sourceaccount":
            return text in accounts
        parts = text.split(":")
        return len(parts) > 4 and parts[4] in accounts

    pinned = False
    for operator, keys in (statement.get("Condition") or {}).items():
        # IfExists and ForAllValues hold where the request has no such key; a negated operator for any other value
        if not isinstance(keys, Mapping) or any(w in operator for w in ("IfExists", "ForAllValues", "Not")):
            continue
        for key, values in keys.items():
            listed = _listed(values)
            source = key.lower() in {k.lower() for k in SOURCE_KEYS} or key.lower().startswith("kms:encryptioncontext:")
            if source and listed and all(names_the_account(key, v) for v in listed):
                pinned = True
    return [] if pinned else [f"Service={s}" for s in _listed(principal["Service"])]


@_policy(
    "kms-key-policy-one-account",
    "Every KMS key of ours is created with its key policy, which names one account's root and AWS services "
    "only: no wildcard principal, no second account (AWS's lockout check makes that one account the deployer's), "
    "and each AWS service only for that account's resources (aws:SourceAccount, aws:SourceArn or the encryption "
    "context naming it).",
)
def kms_key_policy_one_account(args: ResourceValidationArgs, report: ReportViolation) -> None:
    # The deploy boundary denies kms:PutKeyPolicy (components/delivery.py AdministratorsOnly), so the policy
    # CreateKey gets is the key's for good; IAM cannot read it, the pack can. CreateKey refuses a policy that would
    # not let its caller administer the key (the policy lockout safety check, which the boundary keeps on).
    if args.resource_type != KMS_KEY:
        return
    document = get(args.props, "policy")
    if not isinstance(document, str) or not document:
        report("No policy: give the key its key policy at creation (the deploy role may not PutKeyPolicy later).")
        return
    principals = _key_policy_principals(document)
    accounts = {p.split(":")[4] for p in principals if p.startswith("AWS=arn:") and p.count(":") >= 5}
    odd = [p for p in principals if not (p.startswith("AWS=arn:") and p.endswith(":root")) and not _a_service(p)]
    if odd or len(accounts) > 1:
        report(
            f"key policy principals {', '.join(sorted(set(principals)))}: only one account's root and AWS services "
            "(another account, a role or a wildcard would open the key beyond the account)"
        )
    unpinned = sorted({p for s in _statements(document) for p in _services_unpinned(s, accounts)})
    if unpinned:
        report(
            f"key policy grants {', '.join(unpinned)} without a condition naming this account "
            f"({', '.join(SOURCE_KEYS)} or kms:EncryptionContext:*, each value naming the account): the service "
            "acts for every account's resources, so another account's log group, trail or topic would reach the key"
        )


@_policy(
    "sqs-queue-policy-own-services",
    "Every SQS queue of ours lets only AWS services send to it, each for this account's resources (aws:SourceAccount "
    "or aws:SourceArn naming the queue's account): no other account, role or wildcard is allowed anything.",
)
def sqs_queue_policy_own_services(args: ResourceValidationArgs, report: ReportViolation) -> None:
    # Both ceilings deny sqs:SetQueueAttributes and sqs:AddPermission (components/delivery.py AdministratorsOnly), so
    # the policy CreateQueue gets is the queue's; IAM cannot read it, the pack can. Karpenter's interruption queue is
    # the program's one queue: a sender of another account could feed its controller forged interruptions.
    if args.resource_type != SQS_QUEUE:
        return
    document = get(args.props, "policy")
    if not isinstance(document, str) or not document:
        return  # no policy: the queue is its account's alone
    statements = _statements(document)
    accounts = {
        str(r).split(":")[4] for s in statements for r in _listed(s.get("Resource", [])) if str(r).count(":") >= 5
    }
    allows = [s for s in statements if s.get("Effect") == "Allow"]
    others = sorted({p for s in allows for p in _principals(s) if not _a_service(p)})
    unpinned = sorted({p for s in allows for p in _services_unpinned(s, accounts)})
    if others or len(accounts) != 1:
        report(
            f"queue policy allows {', '.join(others) or 'a queue of another account'}: only AWS services may be "
            "allowed on a queue of ours, on its own ARN"
        )
    if unpinned:
        report(
            f"queue policy lets {', '.join(unpinned)} send without a condition naming this account "
            f"({', '.join(SOURCE_KEYS)}): any account's rule or topic could feed the queue"
        )


_VERSIONS = PolicyConfigSchema(properties={"supported": {"type": "array", "items": {"type": "string"}}})
SUPPORTED_KUBERNETES = KUBERNETES_SUPPORTED  # the default of the pack config `supported`


@_policy("eks-supported-version", "The Kubernetes version is one EKS supports.", schema=_VERSIONS)
def eks_supported_version(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in (EKS_COMPONENT, EKS_CLUSTER):
        return
    supported = args.get_config().get("supported") or SUPPORTED_KUBERNETES
    version = get(args.props, "version")
    if version not in supported:
        report(
            f"Kubernetes {version or '(unset: the newest, unpinned)'} is not on the supported list "
            f"{', '.join(supported)}; pin one of them."
        )


# --- nodes ----------------------------------------------------------------------------------------


@_policy(
    "launch-template-imdsv2", "Launch templates require IMDSv2 with hop limit 1, so pods cannot reach node credentials."
)
def launch_template_imdsv2(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    metadata = get(args.props, "metadataOptions", default={})
    if get(metadata, "httpTokens") != "required":
        report("metadataOptions.httpTokens must be 'required' (IMDSv2 only).")
    if get(metadata, "httpPutResponseHopLimit") != 1:
        report(
            "metadataOptions.httpPutResponseHopLimit must be 1: containers must not reach the instance's credentials."
        )


@_policy("launch-template-encrypted-volumes", "Every EBS volume of a launch template is encrypted.")
def launch_template_encrypted_volumes(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    for mapping in get(args.props, "blockDeviceMappings", default=[]):
        ebs = get(mapping, "ebs", default=None)
        if ebs is not None and str(get(ebs, "encrypted")).lower() != "true":
            report(f"Volume {get(mapping, 'deviceName')} is not encrypted: set ebs.encrypted to true.")


@_policy("nodes-without-public-ips", "Nodes live in private subnets and never get public IP addresses.")
def nodes_without_public_ips(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type == SUBNET and get(args.props, "mapPublicIpOnLaunch") is True:
        report("mapPublicIpOnLaunch is true: instances launched here get public IPs. Set it to false.")
    elif args.resource_type == LAUNCH_TEMPLATE:
        for nic in get(args.props, "networkInterfaces", default=[]):
            if str(get(nic, "associatePublicIpAddress")).lower() == "true":
                report("A network interface associates a public IP: remove associatePublicIpAddress.")
    elif args.resource_type == EKS_COMPONENT and get(args.props, "nodeAssociatePublicIpAddress") is not False:
        report("nodeAssociatePublicIpAddress must be false.")


def _statements(document: Any) -> list[Mapping]:
    doc = json.loads(document) if isinstance(document, str) else document
    statements = doc.get("Statement", [])
    return [statements] if isinstance(statements, Mapping) else list(statements)


def _policy_documents(args: ResourceValidationArgs) -> list[Any]:
    """Every permission policy document a resource carries: a policy's own, or a role's inline ones."""
    if args.resource_type in (
        "aws:iam/rolePolicy:RolePolicy",
        "aws:iam/policy:Policy",
        "aws:iam/userPolicy:UserPolicy",
        "aws:iam/groupPolicy:GroupPolicy",
    ):
        return [get(args.props, "policy", default="{}")]
    if args.resource_type == "aws:iam/role:Role":
        return [get(p, "policy", default="{}") for p in get(args.props, "inlinePolicies", default=[])]
    return []


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


_WILDCARD_EXCEPTIONS = PolicyConfigSchema(
    properties={"exceptions": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}}}
)


@_policy(
    "iam-no-wildcard-actions",
    "Our IAM policies allow named actions only: no wildcard anywhere in an action ('*', 'iam:Pass*', 's3:*Object'), "
    "no NotAction or NotResource; a policy allow-listed here by name, with a reason, may use service wildcards.",
    schema=_WILDCARD_EXCEPTIONS,
)
def iam_no_wildcard_actions(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if (args.get_config().get("exceptions") or {}).get(args.name):
        return
    for document in _policy_documents(args):
        for statement in _statements(document):
            if statement.get("Effect", "Allow") != "Allow":
                continue  # a Deny may be as broad as it likes
            for negated in ("NotAction", "NotResource"):
                if negated in statement:
                    report(
                        f"An Allow statement uses {negated} {statement[negated]!r}: it grants everything not listed. "
                        "List what the role needs in Action/Resource."
                    )
            for action in _listed(statement.get("Action")):
                if "*" in action or "?" in action:
                    report(f"Action {action!r} is a wildcard pattern: list the actions the role needs.")


# --- Kubernetes workloads -----------------------------------------------------------------------------

_GPU_CHARTS = PolicyConfigSchema(properties={"charts": {"type": "array", "items": {"type": "string"}}})
GPU_CHARTS = ("nvidia-device-plugin", "aws-efa-k8s-device-plugin", "dcgm-exporter")


# Helm reads a chart `version` as a constraint: "This constraint can be a specific tag (e.g. 1.1.1)
# or it may reference a valid range (e.g. ^2.0.0). If this is not specified, the latest version is
# used" (helm.sh/docs/helm/helm_install, --version; the ranges are Masterminds/semver constraints:
# >=, ^, ~, 1.x, *, a - b, ||). Only an exact SemVer 2.0.0 version (semver.org) pins a chart.
EXACT_CHART_VERSION = re.compile(r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?")


@_policy("helm-release-pinned", "Every Helm release pins an exact chart version, not a range.")
def helm_release_pinned(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != HELM_RELEASE:
        return
    version = get(args.props, "version")
    if not version:
        report(f"Chart {get(args.props, 'chart')} has no version: pin it in infra/core/versions.py.")
    elif not isinstance(version, str) or not EXACT_CHART_VERSION.fullmatch(version.strip()):
        report(
            f"Chart {get(args.props, 'chart')} version {version!r} is a range, not a pin (Helm installs the newest "
            "chart it matches): "
            "pin one exact version (1.2.3) in infra/core/versions.py."
        )


def tolerates(toleration: dict, key: str, value: str, effect: str) -> bool:
    """Kubernetes' matching (core/v1 Toleration): an empty key with operator Exists matches every
    key; Exists matches any value, Equal (the default) only its value; no effect matches all."""
    operator = get(toleration, "operator") or "Equal"
    key_ok = get(toleration, "key") == key or (not get(toleration, "key") and operator == "Exists")
    value_ok = operator == "Exists" or (get(toleration, "value") or "") == value
    return key_ok and value_ok and get(toleration, "effect") in (effect, None, "")


@_policy(
    "gpu-workloads-tolerate-gpu-taint",
    "Workloads that must run on GPU nodes tolerate the nvidia.com/gpu taint.",
    schema=_GPU_CHARTS,
)
def gpu_workloads_tolerate_gpu_taint(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != HELM_RELEASE:
        return
    charts = args.get_config().get("charts") or GPU_CHARTS
    if get(args.props, "chart") not in charts:
        return
    tolerations = get(args.props, "values", "tolerations", default=[])
    if not any(tolerates(t, GPU_TAINT, "true", "NoSchedule") for t in tolerations):
        report(
            f"{get(args.props, 'chart')} does not tolerate {GPU_TAINT}=true:NoSchedule; it would never run on GPU "
            "nodes."
        )


# --- tags -------------------------------------------------------------------------------------------

_TAGS = PolicyConfigSchema(properties={"required": {"type": "array", "items": {"type": "string"}}})
REQUIRED_TAGS = ("higgsfield:stack", "higgsfield:environment")


def taggable(resource_type: str) -> bool:
    """Whether an AWS resource type takes tags (from the pulumi_aws SDK's own signature)."""
    import importlib
    import inspect

    if not resource_type.startswith("aws:"):
        return False
    module_path, class_name = resource_type.split(":", 1)[1].split(":")
    module = module_path.split("/")[0]
    try:
        cls = getattr(
            importlib.import_module("pulumi_aws" if module == "index" else f"pulumi_aws.{module}"), class_name
        )
    except (ImportError, AttributeError):
        return False
    return "tags" in inspect.signature(cls._internal_init).parameters


@_policy("required-tags", "Every taggable AWS resource carries the required tags.", schema=_TAGS)
def required_tags(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not taggable(args.resource_type):
        return
    required = args.get_config().get("required") or REQUIRED_TAGS
    tags = _tags(args.props)
    present = list(iter(tags))
    missing = [t for t in required if t not in present]
    empty = [t for t in required if t in present and isinstance(tags[t], str) and not tags[t].strip()]
    if missing:
        report(f"Missing tags {', '.join(missing)}: pass the stack's resource_tags to this resource.")
    if empty:  # AWS takes an empty value, but it says nothing: a cost report groups it with the untagged
        report(f"Required tags {', '.join(empty)} are empty: set a value (higgsfield:tags).")


# --- stack-wide: node roles, GPU pools, EFA, FSx, production ------------------------------------------


def _by_urn(resources: Iterable[Any]) -> dict[str, Any]:
    return {r.urn: r for r in resources}


def _deps(r: Any, index: Mapping[str, Any], type_: str) -> list[Any]:
    return [index[d.urn] for d in (r.dependencies or []) if d.urn in index and index[d.urn].resource_type == type_]


@_stack_policy(
    "node-role-managed-policies", "Node roles carry only the worker, ECR read-only and CNI managed policies."
)
def node_role_managed_policies(args: StackValidationArgs, report: ReportViolation) -> None:
    node_roles = {
        r.urn
        for r in args.resources
        if r.resource_type == "aws:iam/role:Role"
        and "ec2.amazonaws.com" in json.dumps(json.loads(get(r.props, "assumeRolePolicy", default="{}")))
    }
    for r in args.resources:
        if r.resource_type != "aws:iam/rolePolicyAttachment:RolePolicyAttachment":
            continue
        if any(d.urn in node_roles for d in r.dependencies or []) and get(r.props, "policyArn") not in NODE_POLICIES:
            report(
                f"Node role has {get(r.props, 'policyArn')}: nodes get only {', '.join(sorted(NODE_POLICIES))}; give "
                "pods their own Pod Identity role.",
                r.urn,
            )


def _gpu_groups(resources: Iterable[Any]) -> list[Any]:
    return [
        r for r in resources if r.resource_type == NODE_GROUP and "NVIDIA" in str(get(r.props, "amiType", default=""))
    ]


_MIN_SIZE = PolicyConfigSchema(
    properties={"exceptions": {"type": "object", "additionalProperties": {"type": "string"}}}
)


def _held_reservation(group: Any, resources: Iterable[Any]) -> bool:
    """A pool held warm at its reserved count (docs/design/reserved-capacity.md, components/gpu_pools.py
    scaling): min = desired = max, on a launch template that targets a capacity reservation - it
    is billed whether its instances run or not, so running them costs nothing more."""
    sizes = [get(group.props, "scalingConfig", k) for k in ("minSize", "desiredSize", "maxSize")]
    if len(set(sizes)) != 1 or not sizes[0]:
        return False
    feeding = {d.urn for d in group.dependencies or []}
    return any(
        r.resource_type == "aws:ec2/launchTemplate:LaunchTemplate"
        and r.urn in feeding
        and get(
            r.props,
            "capacityReservationSpecification",
            "capacityReservationTarget",
            "capacityReservationId",
            default=None,
        )
        for r in resources
    )


@_stack_policy(
    "gpu-node-groups-scale-to-zero",
    "GPU node groups scale to zero (or hold a paid reservation warm), carry the GPU taint and autoscaler templates, "
    "and ignore desiredSize.",
    schema=_MIN_SIZE,
)
def gpu_node_groups_scale_to_zero(args: StackValidationArgs, report: ReportViolation) -> None:
    exceptions = args.get_config().get("exceptions") or {}  # node group name -> reason
    for group in _gpu_groups(args.resources):
        pool = get(group.props, "labels", "higgsfield.io/pool", default=group.name)
        held = _held_reservation(group, args.resources)
        if get(group.props, "scalingConfig", "minSize") != 0 and pool not in exceptions and not held:
            report(
                f"GPU pool {pool} has minSize {get(group.props, 'scalingConfig', 'minSize')}: idle GPUs cost money. "
                "Use 0, or add the pool with a reason to this policy's exceptions.",
                group.urn,
            )
        taints = get(group.props, "taints", default=[])
        if not any(get(t, "key") == GPU_TAINT and get(t, "effect") == "NO_SCHEDULE" for t in taints):
            report(
                f"GPU pool {pool} lacks the {GPU_TAINT}=true:NoSchedule taint: CPU pods would land on GPU nodes.",
                group.urn,
            )
        if "scalingConfig.desiredSize" not in list(group.opts.ignore_changes or []) and not held:
            report(
                f"GPU pool {pool} does not ignore scalingConfig.desiredSize: "
                "every pulumi up would undo the autoscaler.",
                group.urn,
            )
        tags = [
            get(t.props, "tag", "key", default="")
            for t in args.resources
            if t.resource_type == ASG_TAG and any(d.urn == group.urn for d in t.dependencies or [])
        ]
        needed = [f"{TEMPLATE_TAG}/resources/nvidia.com/gpu", f"{TEMPLATE_TAG}/taint/{GPU_TAINT}"]
        needed += [f"{TEMPLATE_TAG}/label/{k}" for k in list(iter(get(group.props, "labels", default={})))]
        missing = [n for n in needed if n not in tags]
        if missing:
            report(
                f"GPU pool {pool}'s ASG lacks autoscaler node-template tags {', '.join(missing)}: it cannot scale "
                "from zero.",
                group.urn,
            )


def _efa_max_interfaces(instance_type: str) -> int | None:
    """AWS's figure: the catalog bundled with moto when installed (offline), else the EC2 API."""
    try:
        from infra.core.bundled import instance_types

        raw = instance_types().get(instance_type)
        if raw is not None:
            return int(raw.get("NetworkInfo", {}).get("EfaInfo", {}).get("MaximumEfaInterfaces", 0))
    except Exception:  # noqa: BLE001 - fall back to the API
        pass
    try:
        import boto3

        found = boto3.client("ec2").describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
        return int(found[0]["NetworkInfo"].get("EfaInfo", {}).get("MaximumEfaInterfaces", 0))
    except Exception:  # noqa: BLE001 - reported by the caller as "cannot verify"
        return None


def _self_referencing(sg: Any) -> bool:
    def all_self(rules: Any) -> bool:
        return any(get(r, "self") is True and str(get(r, "protocol")) == "-1" for r in rules)

    return all_self(get(sg.props, "ingress", default=[])) and all_self(get(sg.props, "egress", default=[]))


@_stack_policy(
    "efa-pools",
    "EFA pools: one subnet, a placement group or reservation, a self-referencing security group, every EFA card "
    "attached.",
)
def efa_pools(args: StackValidationArgs, report: ReportViolation) -> None:
    index = _by_urn(args.resources)
    for group in _gpu_groups(args.resources):
        templates = _deps(group, index, LAUNCH_TEMPLATE)
        if not templates:
            continue
        template = templates[0]
        nics = get(template.props, "networkInterfaces", default=[])
        efa = [n for n in nics if get(n, "interfaceType") in ("efa", "efa-only")]
        if not efa:
            continue
        pool = get(group.props, "labels", "higgsfield.io/pool", default=group.name)
        if len(get(group.props, "subnetIds", default=[])) != 1:
            report(
                f"EFA pool {pool} spans several subnets: EFA traffic stays within one AZ; use one subnet.", group.urn
            )
        if not has(template.props, "placement") and not has(template.props, "capacityReservationSpecification"):
            report(
                f"EFA pool {pool} has no cluster placement group (nor a reservation that brings placement).",
                template.urn,
            )
        groups = _deps(template, index, SECURITY_GROUP)
        if not any(_self_referencing(sg) for sg in groups):
            report(
                f"EFA pool {pool}'s interfaces lack a security group allowing all traffic to and from itself.",
                template.urn,
            )
        instance_type = (get(group.props, "instanceTypes", default=[None]) or [None])[0]
        expected = _efa_max_interfaces(instance_type) if instance_type else None
        if expected is None:
            report(
                f"Cannot verify EFA interfaces of EFA pool {pool} ({instance_type}): no instance-type data (install "
                "moto or give AWS credentials).",
                template.urn,
            )
        elif len(efa) != expected:
            report(
                f"EFA pool {pool} attaches {len(efa)} EFA interfaces; {instance_type} has {expected}: attach one per "
                "network card.",
                template.urn,
            )


@_stack_policy(
    "fsx-lustre",
    "FSx for Lustre: persistent in prod, KMS-encrypted, Lustre ports only from security groups, in the EFA pools' "
    "subnet.",
    schema=PolicyConfigSchema(properties=_ENVIRONMENT),
)
def fsx_lustre(args: StackValidationArgs, report: ReportViolation) -> None:
    index = _by_urn(args.resources)
    prod = _environment(args.get_config()) == "prod"
    efa_subnets = set()
    for group in _gpu_groups(args.resources):
        templates = _deps(group, index, LAUNCH_TEMPLATE)
        if templates and any(
            get(n, "interfaceType") == "efa-only" for n in get(templates[0].props, "networkInterfaces", default=[])
        ):
            efa_subnets.update(s.urn for s in _deps(group, index, SUBNET))
    for fs in (r for r in args.resources if r.resource_type == FSX):
        kind = str(get(fs.props, "deploymentType", default=""))
        if prod and not kind.startswith("PERSISTENT"):
            report(
                f"FSx {fs.name} is {kind or 'SCRATCH'} in prod: scratch file systems lose data on failure; use "
                "PERSISTENT_2.",
                fs.urn,
            )
        if kind.startswith("PERSISTENT") and not has(fs.props, "kmsKeyId"):
            report(f"FSx {fs.name} has no kmsKeyId: encrypt it with a key of ours.", fs.urn)
        subnets = {s.urn for s in _deps(fs, index, SUBNET)}
        if efa_subnets and not subnets <= efa_subnets:
            report(
                f"FSx {fs.name} is not in the EFA pools' subnet: every read crosses AZs. Put it in the EFA pools' AZ.",
                fs.urn,
            )
        for sg in _deps(fs, index, SECURITY_GROUP):
            for rule in (
                r
                for r in args.resources
                if r.resource_type == INGRESS_RULE and any(d.urn == sg.urn for d in r.dependencies or [])
            ):
                ports = (get(rule.props, "fromPort"), get(rule.props, "toPort"))
                if ports not in LUSTRE_PORTS or has(rule.props, "cidrIpv4") or has(rule.props, "cidrIpv6"):
                    report(
                        f"FSx {fs.name} allows {ports} from "
                        f"{get(rule.props, 'cidrIpv4', default='a security group')}: only TCP 988 and 1018-1023 from "
                        "the node security group.",
                        rule.urn,
                    )
            for inline in get(sg.props, "ingress", default=[]):
                if get(inline, "cidrBlocks", default=[]):
                    report(
                        f"FSx security group {sg.name} allows CIDR {get(inline, 'cidrBlocks')}: only the node "
                        "security group may reach Lustre.",
                        sg.urn,
                    )


@_stack_policy(
    "prod-data-protected",
    "In prod the cluster, FSx file systems and KMS keys are protected from deletion.",
    schema=PolicyConfigSchema(properties=_ENVIRONMENT),
)
def prod_data_protected(args: StackValidationArgs, report: ReportViolation) -> None:
    if _environment(args.get_config()) != "prod":
        return
    for r in args.resources:
        if r.resource_type in (EKS_COMPONENT, EKS_CLUSTER, FSX, KMS_KEY) and not r.opts.protect:
            report(
                f"{r.resource_type} {r.name} is not protected in prod: set protect=True (and retain_on_delete for "
                "data).",
                r.urn,
            )


# --- tenancy and hardening: admin policies, world-open ingress, logs ------------------

ROLE = "aws:iam/role:Role"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
POLICY_ATTACHMENT = "aws:iam/policyAttachment:PolicyAttachment"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
VPC = "aws:ec2/vpc:Vpc"
FLOW_LOG = "aws:ec2/flowLog:FlowLog"
WORLD = ("0.0.0.0/0", "::/0")


def _trusted_in(principal: str, account: str | None) -> bool:
    """An AWS service, or an IAM or OIDC principal (an ARN) of `account` (any account's where unknown)."""
    kind, _, value = principal.partition("=")
    if kind == "Service":
        return value.endswith(".amazonaws.com")
    parts = value.split(":")
    return kind in ("AWS", "Federated") and len(parts) > 5 and parts[0] == "arn" and parts[4] in (account or parts[4])


@_policy(
    "role-trust-in-the-account",
    "A role's trust names AWS services and principals of the role's own account only (the account of its "
    "permissions boundary): IAM cannot read a trust, and the deploy role may not rewrite one after CreateRole "
    "(components/delivery.py TrustIsSetAtCreate), so the trust a role is created with is its for good.",
)
def role_trust_in_the_account(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != ROLE:
        return
    document = get(args.props, "assumeRolePolicy")
    if not isinstance(document, str) or not document:
        return  # unknown until the apply (an output of another resource): the deploy's pack run sees it
    boundary = str(get(args.props, "permissionsBoundary", default="") or "")
    account = boundary.split(":")[4] if boundary.count(":") >= 5 else None
    odd = sorted({p for p in _key_policy_principals(document) if not _trusted_in(p, account)})
    if odd:
        report(
            f"trust names {', '.join(odd)}: only AWS services and principals of "
            f"{'account ' + account if account else 'the account'} (another account, a wildcard or an outside "
            "identity provider would assume a role of this stack)"
        )


# AWS managed policies that amount to administering the account (or IAM, which is the same).
ADMIN_POLICIES = (
    "AdministratorAccess",
    "PowerUserAccess",
    "IAMFullAccess",
    "AdministratorAccess-Amplify",
    "AdministratorAccess-AWSElasticBeanstalk",
    "AWSOrganizationsFullAccess",
    "job-function/SystemAdministrator",
    "job-function/NetworkAdministrator",
    "job-function/DatabaseAdministrator",
)

_ADMIN = PolicyConfigSchema(properties={"denied": {"type": "array", "items": {"type": "string"}}})


def _managed_policy_name(arn: str) -> str | None:
    """`arn:aws:iam::aws:policy/job-function/SystemAdministrator` -> `job-function/SystemAdministrator`,
    for AWS managed policies in any partition; None for policies of an account."""
    parts = arn.split(":", 5)
    if (
        len(parts) == 6
        and parts[0] == "arn"
        and parts[2] == "iam"
        and parts[4] == "aws"
        and parts[5].startswith("policy/")
    ):
        return parts[5][len("policy/") :]
    return None


@_policy(
    "iam-no-admin-managed-policies",
    "No role we create holds an AWS managed admin policy (AdministratorAccess, PowerUserAccess, IAMFullAccess, ...).",
    schema=_ADMIN,
)
def iam_no_admin_managed_policies(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type in (ROLE_POLICY_ATTACHMENT, POLICY_ATTACHMENT):
        arns = [get(args.props, "policyArn", default="")]
    elif args.resource_type == ROLE:
        arns = list(get(args.props, "managedPolicyArns", default=[]))
    else:
        return
    denied = set(args.get_config().get("denied") or ADMIN_POLICIES)
    for arn in arns:
        if _managed_policy_name(str(arn)) in denied:
            report(f"{arn} administers the account: give the role an inline policy with the actions it needs.")


_WORLD_INGRESS = PolicyConfigSchema(
    properties={"exceptions": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}}}
)


def _world_cidrs(*values: Any) -> list[str]:
    return [c for v in values for c in _listed(v) if c in WORLD]


@_policy(
    "security-groups-no-world-ingress",
    "No security group takes ingress from 0.0.0.0/0 or ::/0, unless allow-listed here with a reason.",
    schema=_WORLD_INGRESS,
)
def security_groups_no_world_ingress(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = args.props
    if args.resource_type == SECURITY_GROUP:
        open_ = [
            c
            for rule in get(props, "ingress", default=[])
            for c in _world_cidrs(get(rule, "cidrBlocks"), get(rule, "ipv6CidrBlocks"))
        ]
    elif args.resource_type == INGRESS_RULE:
        open_ = _world_cidrs(get(props, "cidrIpv4"), get(props, "cidrIpv6"))
    elif args.resource_type == SECURITY_GROUP_RULE and get(props, "type") == "ingress":
        open_ = _world_cidrs(get(props, "cidrBlocks"), get(props, "ipv6CidrBlocks"))
    else:
        return
    exceptions = args.get_config().get("exceptions") or {}
    if open_ and not exceptions.get(args.name):
        report(
            f"{args.name} allows ingress from {', '.join(open_)}: name the sources, or add {args.name!r} with a "
            "reason to this policy's exceptions."
        )


_RETENTION = PolicyConfigSchema(properties={**_ENVIRONMENT, "prodMinimumDays": {"type": "integer", "minimum": 1}})
PROD_MINIMUM_LOG_DAYS = 90


@_policy(
    "log-retention-floor",
    "In prod every CloudWatch log group keeps its events at least the configured days (never-expire is fine).",
    schema=_RETENTION,
)
def log_retention_floor(args: ResourceValidationArgs, report: ReportViolation) -> None:
    config = args.get_config()
    if args.resource_type != LOG_GROUP or _environment(config) != "prod":
        return
    floor = config.get("prodMinimumDays") or PROD_MINIMUM_LOG_DAYS
    days = get(args.props, "retentionInDays", default=0)
    if days and days < floor:
        report(
            f"Log group {get(args.props, 'name', default=args.name)} keeps {days} days; prod keeps at least {floor} "
            "(higgsfield:observability.logRetentionDays)."
        )


@_stack_policy("vpc-flow-logs", "Every VPC has flow logs.")
def vpc_flow_logs(args: StackValidationArgs, report: ReportViolation) -> None:
    logged = {d.urn for r in args.resources if r.resource_type == FLOW_LOG for d in r.dependencies or []}
    for vpc in (r for r in args.resources if r.resource_type == VPC):
        if vpc.urn not in logged:
            report(f"VPC {vpc.name} has no flow log: add an aws.ec2.FlowLog for it (components/network.py).", vpc.urn)


def _control_plane_log_group(r: Any) -> bool:
    name = str(get(r.props, "name", default=""))
    return r.resource_type == LOG_GROUP and name.startswith("/aws/eks/") and name.endswith("/cluster")


@_stack_policy(
    "control-plane-logs-encrypted", "EKS control-plane log groups are encrypted with a KMS key of this stack."
)
def control_plane_logs_encrypted(args: StackValidationArgs, report: ReportViolation) -> None:
    index = _by_urn(args.resources)
    for group in (r for r in args.resources if _control_plane_log_group(r)):
        if not has(group.props, "kmsKeyId") or not _deps(group, index, KMS_KEY):
            report(
                f"Log group {get(group.props, 'name')} is not encrypted with a KMS key of ours: set kmsKeyId to the "
                "stack's logs key.",
                group.urn,
            )


# --- CI identities (components/delivery.py) ------------------------------------------------------

CI_IDENTITY_TAG = "higgsfield:ci-identity"


def _github_subjects(trust: Any) -> list[tuple[str, list[str]]]:
    """(condition operator, subjects) of every statement trusting GitHub's OIDC provider."""
    found = []
    for statement in _statements(trust):
        federated = _listed(get(statement, "Principal", "Federated"))
        if statement.get("Effect", "Allow") != "Allow" or not any(
            str(f).endswith(f"oidc-provider/{GITHUB_OIDC}") for f in federated
        ):
            continue
        conditions = statement.get("Condition") or {}
        operators = [
            (op, _listed(values.get(f"{GITHUB_OIDC}:sub")))
            for op, values in conditions.items()
            if f"{GITHUB_OIDC}:sub" in values
        ]
        found += operators or [("none", [])]
    return found


def _pull_request_number_only(subject: str) -> bool:
    """A subject pattern whose one wildcard is the pull request's number (`...@refs/pull/*/merge`)."""
    return (
        "?" not in subject
        and subject.count("*") == 1
        and subject.endswith("@refs/pull/*/merge")
        and ":pull_request:" in subject
    )


@_policy(
    "ci-roles-trust-one-subject",
    "A role GitHub Actions can assume trusts exact OIDC subjects that name the workflow file (StringEquals; "
    "StringLike only for a pull request's number); a deploy role only its GitHub environment's jobs, never a pull "
    "request.",
)
def ci_roles_trust_one_subject(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != ROLE:
        return
    purpose = _tags(args.props).get(CI_IDENTITY_TAG)
    for operator, subjects in _github_subjects(get(args.props, "assumeRolePolicy", default="{}")):
        exact = operator == "StringEquals" and subjects and not any("*" in s or "?" in s for s in subjects)
        numbered = operator == "StringLike" and subjects and all(_pull_request_number_only(s) for s in subjects)
        if not (exact or numbered):
            report(
                f"{args.name} trusts GitHub with {operator} {subjects}: any matching job, pull requests included, "
                "gets it. Trust exact subjects with StringEquals (components/delivery.py)."
            )
        elif not all(":job_workflow_ref:" in s for s in subjects):
            report(
                f"{args.name} trusts {subjects}, which name no workflow: any workflow of the branch or environment, "
                "a pull request's new one included, gets it. "
                "Bind the subject to the workflow file (job_workflow_ref, components/delivery.py SUB_CLAIM_KEYS)."
            )
        elif purpose == "deploy" and not all(":environment:" in s for s in subjects):
            report(
                f"{args.name} is a deploy role trusting {subjects}: only repo:OWNER/REPO:environment:ENV, the "
                "stack's protected GitHub environment (higgsfield:delivery.deployEnvironment), may deploy."
            )
        elif purpose != "preview" and any(":pull_request" in s for s in subjects):
            report(
                f"{args.name} ({purpose or 'untagged'}) trusts pull requests ({subjects}): only the preview role may."
            )


BOUNDARY_SUFFIX = "-boundary"
DEPLOY_SUFFIX = "-deploy"


@_stack_policy(
    "roles-under-the-boundary",
    "In a stack with a permissions boundary (components/delivery.py), every IAM role but the deploy role carries it: "
    "nothing the deploy identity creates exceeds the stack's ceiling.",
)
def roles_under_the_boundary(args: StackValidationArgs, report: ReportViolation) -> None:
    boundaries = [
        r
        for r in args.resources
        if r.resource_type == "aws:iam/policy:Policy"
        and str(get(r.props, "name", default="")).endswith(BOUNDARY_SUFFIX)
    ]
    if not boundaries:
        return
    arns = {f":policy/{get(b.props, 'name')}" for b in boundaries}
    # The deploy role's ceiling is its own policies (deploy_policy, deploy_denials_policy): exempt by its exact name,
    # higgsfield-STACK-deploy beside higgsfield-STACK-boundary, which no other role of the account can
    # have (IAM role names are unique), never by a tag anyone who tags a role could set.
    deploy_roles = {str(get(b.props, "name"))[: -len(BOUNDARY_SUFFIX)] + DEPLOY_SUFFIX for b in boundaries}
    for role in (r for r in args.resources if r.resource_type == ROLE):
        if str(get(role.props, "name", default="")) in deploy_roles:
            continue
        attached = str(get(role.props, "permissionsBoundary", default=""))
        if not any(attached.endswith(a) for a in arns):
            report(
                f"Role {role.name} has permissions boundary {attached or 'none'}: every role of this stack must "
                f"carry {sorted(arns)[0][1:]} (components/delivery.py bound_every_role).",
                role.urn,
            )


def _bucket_of(url: Any) -> str:
    return str(url or "").removeprefix("s3://").split("/", 1)[0]


@_stack_policy(
    "fsx-export-versioned",
    "A file system that exports to S3 (NEW, CHANGED) writes into a bucket with versioning Enabled by this stack: an "
    "overwrite of the master copy stays recoverable.",
)
def fsx_export_versioned(args: StackValidationArgs, report: ReportViolation) -> None:
    versioned = {
        str(get(r.props, "bucket"))
        for r in args.resources
        if r.resource_type == "aws:s3/bucketVersioning:BucketVersioning"
        and get(r.props, "versioningConfiguration", "status") == "Enabled"
    }
    for r in args.resources:
        if r.resource_type == "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation" and get(
            r.props, "s3", "autoExportPolicy", "events"
        ):
            bucket = _bucket_of(get(r.props, "dataRepositoryPath"))
        elif r.resource_type == "aws:fsx/lustreFileSystem:LustreFileSystem" and get(r.props, "exportPath"):
            bucket = _bucket_of(get(r.props, "exportPath"))
        else:
            continue
        if bucket not in versioned:
            report(
                f"{r.name} exports to s3://{bucket}, which this stack does not version: an export overwrites the S3 "
                "copy for good. "
                "Enable versioning on it (aws.s3.BucketVersioning, components/storage.py).",
                r.urn,
            )


TENANCY_POLICIES = [
    iam_no_admin_managed_policies,
    role_trust_in_the_account,
    security_groups_no_world_ingress,
    log_retention_floor,
    vpc_flow_logs,
    control_plane_logs_encrypted,
]


POLICIES = [
    eks_endpoint_restricted,
    eks_control_plane_logs,
    eks_authentication_api,
    eks_secrets_encrypted,
    kms_key_rotation,
    kms_key_policy_one_account,
    sqs_queue_policy_own_services,
    eks_supported_version,
    launch_template_imdsv2,
    launch_template_encrypted_volumes,
    nodes_without_public_ips,
    iam_no_wildcard_actions,
    helm_release_pinned,
    gpu_workloads_tolerate_gpu_taint,
    required_tags,
    node_role_managed_policies,
    gpu_node_groups_scale_to_zero,
    efa_pools,
    fsx_lustre,
    prod_data_protected,
    *TENANCY_POLICIES,
    ci_roles_trust_one_subject,
    roles_under_the_boundary,
    fsx_export_versioned,
]

"""`higgsfield diff STACK --base REF`: what a change does to a stack, before any cloud sees it.

Both sides are offline plans (the base evaluated with the base's own code and stack files), so
the comparison is resource by resource: added, removed, changed inputs, and the changes that
**replace** a resource because they touch an input the provider cannot update in place.
Replacing or deleting data that lives (the cluster, an FSx file system, a KMS key) is refused
unless the change says so: `--allow NAME` or the stack's `higgsfield:allowReplace`.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.config import ConfigError
from infra.core.names import LOG_GROUP, RUNNER_PURPOSES, interruption_rule, pulumi_up, role_name, runner_project
from infra.offline import node_class_drift, pool_removal, rolls
from infra.offline.evaluate import COMPUTED, StackNotFound, record
from infra.offline.evaluate import stack_file as read_stack_file
from infra.offline.stack_file import StackFileError
from policies.rules import ROLE_POLICY_ATTACHMENT

# Inputs that force a new resource, per type (the Terraform AWS provider's ForceNew attributes,
# which pulumi-aws inherits; for the pulumi-eks component, the inputs of its aws.eks.Cluster that
# force one). Deliberately conservative: an input that may only sometimes update in place is here.
REPLACE_ON: dict[str, tuple[str, ...]] = {
    "eks:index:Cluster": (
        "name",
        "vpcId",
        "privateSubnetIds",
        "publicSubnetIds",
        "subnetIds",
        "encryptionConfigKeyArn",
        "serviceRole",
        "ipFamily",
        "kubernetesServiceIpAddressRange",
    ),
    "aws:eks/cluster:Cluster": (
        "name",
        "roleArn",
        "vpcConfig.subnetIds",
        "encryptionConfig",
        "kubernetesNetworkConfig",
    ),
    # every setting of a flow log but its tags (hashicorp/terraform-provider-aws:internal/service/ec2/
    # vpc_flow_log.go, ForceNew on each: read through the code search, its ref not pinned here)
    "aws:ec2/flowLog:FlowLog": (
        "vpcId",
        "subnetId",
        "eniId",
        "transitGatewayId",
        "transitGatewayAttachmentId",
        "trafficType",
        "logDestination",
        "logDestinationType",
        "logGroupName",
        "logFormat",
        "iamRoleArn",
        "deliverCrossAccountRole",
        "destinationOptions",
        "maxAggregationInterval",
    ),
    "aws:eks/nodeGroup:NodeGroup": (
        "clusterName",
        "nodeGroupName",
        "nodeGroupNamePrefix",
        "nodeRoleArn",
        "subnetIds",
        "instanceTypes",
        "amiType",
        "capacityType",
        "diskSize",
        "remoteAccess",
    ),
    "aws:eks/addon:Addon": ("clusterName", "addonName"),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": ("clusterName", "namespace", "serviceAccount"),
    "aws:fsx/lustreFileSystem:LustreFileSystem": (
        "deploymentType",
        "storageType",
        "subnetIds",
        "securityGroupIds",
        "kmsKeyId",
        "importPath",
        "exportPath",
        "fileSystemTypeVersion",
        "driveCacheType",
        "perUnitStorageThroughput",
        "copyTagsToBackups",
        "backupId",
        "importedFileChunkSize",
    ),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": (
        "fileSystemId",
        "fileSystemPath",
        "dataRepositoryPath",
        "batchImportMetaDataOnCreate",
        "importedFileChunkSize",
    ),
    "aws:kms/key:Key": ("customerMasterKeySpec", "keyUsage", "multiRegion", "customKeyStoreId", "xksKeyId"),
    "aws:ec2/vpc:Vpc": ("cidrBlock", "instanceTenancy"),
    "aws:ec2/subnet:Subnet": ("vpcId", "cidrBlock", "availabilityZone", "availabilityZoneId"),
    "aws:ec2/securityGroup:SecurityGroup": ("vpcId", "name", "namePrefix", "description"),
    "aws:ec2/placementGroup:PlacementGroup": ("name", "strategy", "partitionCount", "spreadLevel"),
    "aws:ec2/natGateway:NatGateway": ("subnetId", "allocationId", "connectivityType"),
    "aws:ec2/eip:Eip": ("domain",),
    "aws:iam/role:Role": ("name", "namePrefix", "path"),
    # ForceNew in queueSchema: hashicorp/terraform-provider-aws:internal/service/sqs/queue.go@00a35305
    "aws:sqs/queue:Queue": ("name", "namePrefix", "fifoQueue"),
    # ForceNew in resourceRule: hashicorp/terraform-provider-aws:internal/service/events/rule.go@0cdab4ae
    "aws:cloudwatch/eventRule:EventRule": ("name", "namePrefix", "eventBusName"),
}
KUBERNETES_REPLACE_ON = ("metadata.name", "metadata.namespace")
KEPT = {  # data that lives: replacing or deleting it loses data or cuts every workload off
    "eks:index:Cluster": "cluster",
    "aws:eks/cluster:Cluster": "cluster",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "FSx file system",
    "aws:kms/key:Key": "KMS key",
}
# Changes AWS refuses or the provider turns into a replacement although the input updates in place
# otherwise; refused like a replacement, allowed the same way (--allow NAME / higgsfield:allowReplace).
# - EKS: UpdateClusterVersion only moves one minor version forward; there is no downgrade.
# - FSx for Lustre: UpdateFileSystem only increases StorageCapacity, and the Terraform AWS provider
#   (which pulumi-aws bridges) forces a new file system when it decreases:
#   hashicorp/terraform-provider-aws:internal/service/fsx/lustre_file_system.go@06ee53d9fed4877dc55cefbe3ba1423b863eda61
#   resourceLustreFileSystemSchemaCustomizeDiff (`n < o` -> d.ForceNew("storage_capacity")); the same
#   file's ForceNew list is the LustreFileSystem row of REPLACE_ON. Not checked against the provider
# version pulumi_aws pins here: `git -C <terraform-provider-aws> show <tag>:internal/service/fsx/lustre_file_system.go`.
KUBERNETES_VERSION_INPUT = {"eks:index:Cluster": "version", "aws:eks/cluster:Cluster": "version"}
SHRINK_REPLACES = {"aws:fsx/lustreFileSystem:LustreFileSystem": "storageCapacity"}
ENVIRONMENT_TAG = "higgsfield:environment"
# "Because Amazon EKS runs a highly available control plane, you can update only one minor version
# at a time" (docs.aws.amazon.com/eks/latest/userguide/update-cluster.html). What EKS answers for a
# jump is not checked here: `aws eks update-cluster-version --name C --kubernetes-version 1.35` on 1.33.
EKS_ONE_MINOR = "docs.aws.amazon.com/eks/latest/userguide/update-cluster.html"
NAMESPACE = "kubernetes:core/v1:Namespace"
CLAIM = "kubernetes:core/v1:PersistentVolumeClaim"
# Which kind of resource a computed input comes from, by its name (a recorded plan keeps only
# which resources an input set depends on, not which input came from which): an input is blamed on
# a replaced dependency of that kind only; with no dependency of that kind, on any replaced one.
COMPUTED_FROM = (
    ("subnet", "aws:ec2/subnet:"),
    ("securitygroup", "aws:ec2/securityGroup:"),
    ("vpc", "aws:ec2/vpc:"),
    ("kms", "aws:kms/key:"),
    ("keyarn", "aws:kms/key:"),
    ("role", "aws:iam/role:"),
    ("filesystem", "aws:fsx/"),
)
CODE_PATHS = ("infra", "components", "examples", "policies", "Pulumi.yaml", "pyproject.toml")


@dataclass
class Change:
    urn: str
    type: str
    name: str
    paths: list[str]
    replace_paths: list[str] = field(default_factory=list)
    values: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # leaf path -> (old, new)
    because: dict[str, str] = field(
        default_factory=dict
    )  # computed replace-on path -> replaced resource it is computed from
    consequences: list[str] = field(
        default_factory=list
    )  # what rolling a GPU pool's nodes does (infra/offline/rolls.py), or drifting them (node_class_drift.py)
    drifts: bool = False  # an EC2NodeClass's or NodePool's change drifts its pool's nodes (node_class_drift.py)

    @property
    def replaces(self) -> bool:
        return bool(self.replace_paths)


@dataclass
class Diff:
    added: list[dict]
    removed: list[dict]
    changed: list[Change]
    refused: list[str]
    secrets: dict[str, str] = field(default_factory=dict)  # encrypted setting -> how it changed (by its ciphertext)
    allowed: list[str] = field(default_factory=list)  # what an allow let through, each with the name that did
    new_stack: bool = False  # the stack has no file at the base ref: everything is an addition
    # URN of a removed resource -> what deleting it does (a Karpenter pool's NodePool: infra/offline/pool_removal.py)
    removal_consequences: dict[str, list[str]] = field(default_factory=dict)

    @property
    def replaced(self) -> list[Change]:
        return [c for c in self.changed if c.replaces]


# what goes through once a resource loses `protect` (True) or `retainOnDelete` (False)
_WITHOUT = {
    True: "`pulumi destroy` or a deleting change goes through",
    False: "a delete removes the resource in AWS too",
}


def _flatten(value: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each leaf of `value` under its path (`a.b[0].c`), an empty mapping or list as a leaf of its own; into `out`,
    one dict for the whole value rather than one per level merged upwards."""
    out = {} if out is None else out
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else k, out)
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = {} if isinstance(value, dict) else [] if isinstance(value, list) else value
    return out


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + ".") or path.startswith(p + "[") for p in prefixes)


def _replace_inputs(type_: str) -> tuple[str, ...]:
    return (
        KUBERNETES_REPLACE_ON
        if type_.startswith("kubernetes:") and not type_.startswith("kubernetes:helm")
        else REPLACE_ON.get(type_, ())
    )


def _portable(value: Any, code_root: str | None) -> Any:
    """Paths into the checkout that built a plan (the operator's kustomization) as <code>/...,
    so that two checkouts of the same code compare equal."""
    if code_root and isinstance(value, str) and value.startswith(code_root + os.sep):
        return "<code>" + value[len(code_root) :]
    if isinstance(value, dict):
        return {k: _portable(v, code_root) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable(v, code_root) for v in value]
    return value


def deploy_order(resources: list[dict]) -> dict[str, int]:
    """Each resource's step in the order Pulumi creates and updates them: one after the last thing
    it depends on (a dependency on a component waits for all of the component's resources)."""
    by_urn = {r["urn"]: r for r in resources}
    children: dict[str, list[str]] = {}
    for r in resources:
        if r.get("parent") in by_urn:
            children.setdefault(r["parent"], []).append(r["urn"])
    steps: dict[str, int] = {}

    def step(urn: str) -> int:
        if urn not in steps:
            steps[urn] = 0  # a cycle (none in a valid plan) ends here
            steps[urn] = 1 + max((done(d) for d in by_urn[urn]["dependencies"] if d in by_urn), default=0)
        return steps[urn]

    def done(urn: str) -> int:
        return max([step(urn), *(done(c) for c in children.get(urn, ()))])

    return {urn: step(urn) for urn in by_urn}


def _version(value: Any) -> tuple[int, ...] | None:
    return (
        tuple(int(x) for x in value.split("."))
        if isinstance(value, str) and re.fullmatch(r"[0-9]+(\.[0-9]+)*", value)
        else None
    )


def _skips_a_minor(old: Any, new: Any) -> bool:
    """`1.33` -> `1.35`: a forward jump of more than one minor version."""
    a, b = _version(old), _version(new)
    return bool(a and b and len(a) >= 2 and len(b) >= 2 and a[0] == b[0] and b[1] - a[1] > 1) or bool(
        a and b and b[0] > a[0]
    )


def _next_minor(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


def _environment(resources: dict[str, dict]) -> str | None:
    for r in resources.values():
        tags = r["inputs"].get("tags")
        if isinstance(tags, dict) and isinstance(tags.get(ENVIRONMENT_TAG), str):
            return tags[ENVIRONMENT_TAG]
    return None


def _computed_from(path: str, dependencies: list[str], after: dict, replaced: set[str]) -> dict | None:
    """The replaced resource a computed input `path` is computed from, or None."""
    kind = next((t for word, t in COMPUTED_FROM if word in path.lower().replace("_", "")), None)
    of_kind = [d for d in dependencies if kind and d in after and after[d]["type"].startswith(kind)]
    hit = next((d for d in (of_kind or dependencies) if d in replaced and d in after), None)
    return after[hit] if hit else None


def _propagate(before: dict, after: dict, changes: dict[str, Change]) -> None:
    """A resource whose replace-on input is `<computed>` and that depends on a replaced (or new)
    resource gets a new value for that input: it is replaced too, and so on down the chain."""
    replaced = {u for u, c in changes.items() if c.replaces} | (set(after) - set(before))
    grew = True
    while grew:
        grew = False
        for urn in sorted(set(before) & set(after)):
            if urn in replaced:
                continue
            new = after[urn]
            computed = [
                p
                for p, v in _flatten(new["inputs"]).items()
                if v == COMPUTED and _under(p, _replace_inputs(new["type"]))
            ]
            blamed = {p: c for p in computed if (c := _computed_from(p, new["dependencies"], after, replaced))}
            if not blamed:
                continue
            change = changes.setdefault(urn, Change(urn, new["type"], new["name"], []))
            computed = sorted(blamed)
            for p, source in blamed.items():
                change.because[p] = f"{source['type']} {source['name']}"
                change.values.setdefault(p, (COMPUTED, COMPUTED))
            change.paths = sorted(set(change.paths) | set(computed))
            change.replace_paths = sorted(set(change.replace_paths) | set(computed))
            replaced.add(urn)
            grew = True


def _new_template_versions(after: dict, changes: dict[str, Change]) -> None:
    """A node group whose launch template gets a new version (rolls.new_template_version) is updated to it:
    its `launchTemplate.version`, which the plan knows only as computed, changes."""
    for change in list(changes.values()):
        if change.type != rolls.LAUNCH_TEMPLATE or change.replaces or not rolls.new_template_version(change.paths):
            continue
        for group in rolls.launched_from(after, change.urn):
            rolled = changes.setdefault(group["urn"], Change(group["urn"], group["type"], group["name"], []))
            if rolled.replaces:
                continue
            rolled.paths = sorted({*rolled.paths, rolls.TEMPLATE_VERSION})
            rolled.values[rolls.TEMPLATE_VERSION] = ("its current version", f"the new version of {change.name}")


class _Refusals:
    """The changes `higgsfield diff` refuses unless their name (or an umbrella name) is allowed."""

    def __init__(self, allowed: set[str]) -> None:
        self.allowed, self.refused, self.let_through = allowed, [], []

    def __call__(self, what: str, name: str, why: str = "", also: str | None = None) -> None:
        """Refuse `what` unless `name` (or the umbrella name `also`) is allowed; `why` says what it costs."""
        by = name if name in self.allowed else also if also is not None and also in self.allowed else None
        if by is not None:
            self.let_through.append(f"{what} (allowed by {by})")
        else:
            because = f" ({why})" if why else ""
            umbrella = f" (or --allow {also} for all of them)" if also else ""
            self.refused.append(
                f"{what} is refused{because}: allow it with --allow {name}{umbrella} or higgsfield:allowReplace"
            )


def compare(base: dict, head: dict, allowed: set[str]) -> Diff:
    """Compare two recorded plans (the JSON of `higgsfield plan --json`)."""
    before = {r["urn"]: {**r, "inputs": _portable(r["inputs"], base.get("code_root"))} for r in base["resources"]}
    after = {r["urn"]: {**r, "inputs": _portable(r["inputs"], head.get("code_root"))} for r in head["resources"]}
    refuse = _Refusals(allowed)
    changes: dict[str, Change] = {}
    for urn in sorted(set(before) & set(after)):
        change = _change(before[urn], after[urn], refuse)
        if change is not None:
            changes[urn] = change
    _propagate(before, after, changes)
    _new_template_versions(after, changes)
    for change in changes.values():
        if change.type == pool_removal.NODE_CLASS and not change.replaces:
            change.drifts, change.consequences = node_class_drift.consequences(
                after, before[change.urn], after[change.urn], change.paths
            )
        if change.type == pool_removal.NODEPOOL and not change.replaces:
            change.drifts, change.consequences = node_class_drift.nodepool_consequences(
                before[change.urn], after[change.urn], change.paths
            )
        if change.type == rolls.NODE_GROUP and not change.replaces and rolls.rolls(change.paths):
            change.consequences = rolls.consequences(after, after[change.urn])
            block = rolls.capacity_block_open(after, after[change.urn])
            if block:
                refuse(
                    f"rolling the nodes of Capacity Block pool {block} inside its window",
                    block,
                    f"AWS asks for a desired size of 0 when a Capacity Block group is upgraded "
                    f"({rolls.CAPACITY_BLOCK_UPGRADE}); deploy it after the block's drain, or allow it to replace "
                    "the block's nodes one at a time (MINIMAL)",
                )
    order = deploy_order(head["resources"])
    changed = sorted(
        changes.values(), key=lambda c: (order.get(c.urn, 0), c.urn)
    )  # in the order the deploy updates them
    added = [after[u] for u in sorted(set(after) - set(before))]
    removed = [before[u] for u in sorted(set(before) - set(after))]
    removal_consequences = {
        r["urn"]: pool_removal.consequences(before, after, r) for r in removed if r["type"] == pool_removal.NODEPOOL
    }
    _refuse_losing_data(str(head.get("stack", "STACK")), before, after, removed, changed, refuse)
    _refuse_key_policy_writes(str(head.get("stack", "STACK")), added, removed, changed, refuse)
    _refuse_audit_log_writes(str(head.get("stack", "STACK")), after, changed, refuse)
    _refuse_trust_policy_writes(str(head.get("stack", "STACK")), changed, refuse)
    if not base.get("new_stack"):  # a new stack's first deploy is the administrator's (`higgsfield bootstrap`)
        _refuse_data_repository_links(str(head.get("stack", "STACK")), added, changed, refuse)
        _refuse_managed_policy_writes(str(head.get("stack", "STACK")), added, removed, changed, refuse)
        _refuse_ci_identity_writes(str(head.get("stack", "STACK")), before, after, added, removed, changed, refuse)
    _refuse_flow_log_ends(str(head.get("stack", "STACK")), before, removed, changed, refuse)
    _refuse_queue_attribute_writes(str(head.get("stack", "STACK")), added, removed, changed, refuse)
    _refuse_tag_mutability_writes(str(head.get("stack", "STACK")), changed, refuse)
    _refuse_interruption_ends(str(head.get("stack", "STACK")), before, removed, changed, refuse)
    _refuse_interruption_feed(str(head.get("stack", "STACK")), added, changed, refuse)
    _refuse_runner_writes(str(head.get("stack", "STACK")), added, changed, refuse)
    return Diff(
        added,
        removed,
        changed,
        refuse.refused,
        _secret_changes(base.get("secrets"), head.get("secrets")),
        refuse.let_through,
        bool(base.get("new_stack")),
        removal_consequences,
    )


# The names an allow may use besides a resource's own: umbrella names of the refusals above.
UMBRELLA_NAMES = ("kubernetesVersion", "log-groups", "namespaces", "claims", "environment")


def unknown_allow_names(names: set[str], base: dict, head: dict) -> list[str]:
    """The --allow names that name no resource of either plan and no umbrella name: a typo, which
    would otherwise let nothing through silently."""
    known = {r["name"] for plan in (base, head) for r in plan["resources"]} | set(UMBRELLA_NAMES)
    return sorted(names - known)


def _change(old: dict, new: dict, refuse: _Refusals) -> Change | None:
    """What changed in one resource present in both plans, and which of it replaces the resource;
    refuses Kubernetes downgrades and skipped minors, and protection removed."""
    a, b = _flatten(old["inputs"]), _flatten(new["inputs"])
    paths = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
    replace_on = _replace_inputs(new["type"])
    replace_paths = [p for p in paths if _under(p, replace_on)]
    shrunk = SHRINK_REPLACES.get(new["type"])
    if shrunk and isinstance(a.get(shrunk), int) and isinstance(b.get(shrunk), int) and b[shrunk] < a[shrunk]:
        replace_paths.append(shrunk)
    _refuse_kubernetes_version(new, a, b, refuse)
    for option, words in (("protect", "protect"), ("retain_on_delete", "retain_on_delete")):
        if old.get(option) and not new.get(option):
            refuse(
                f"removing {words} from {new['type']} {new['name']}",
                new["name"],
                f"without it {_WITHOUT[option == 'protect']}; the code no longer keeps it",
            )
    for option in ("protect", "retain_on_delete"):  # resource options: shown as changes, not only inputs
        if bool(old.get(option)) != bool(new.get(option)):
            paths.append(f"({option})")
            a[f"({option})"], b[f"({option})"] = bool(old.get(option)), bool(new.get(option))
    because: dict[str, str] = {}
    if set(old["dependencies"]) != set(new["dependencies"]):
        paths.append("(dependencies)")
        # an input known only after deploy that now comes from another resource (a new subnet, key, ...)
        for p, v in b.items():
            if v == COMPUTED and _under(p, replace_on) and p not in replace_paths:
                source = _new_source(p, old["dependencies"], new["dependencies"])
                if source is not False:
                    replace_paths.append(p)
                if isinstance(source, str):
                    because[p] = source
                    paths.append(p)
    if not paths:
        return None
    values = {p: (a.get(p), b.get(p)) for p in paths if p in a or p in b}
    change = Change(new["urn"], new["type"], new["name"], paths, sorted(set(replace_paths)), values)
    change.because.update(because)
    return change


def _urn_type(urn: str) -> str:
    """The resource type in a URN (`urn:pulumi:STACK::PROJECT::PARENT$TYPE::NAME`); "" for another id."""
    parts = urn.split("::")
    return parts[-2].rsplit("$", 1)[-1] if len(parts) >= 3 else ""


def _new_source(path: str, old: list[str], new: list[str]) -> str | bool:
    """Which new dependency a computed input `path` now comes from (`type name`); False when the
    dependencies of its kind are the same as before (the input is not new: a list's unchanged
    entries stay, e.g. the subnet of an AZ that stays), True when its kind is not known (it may
    have changed). A list entry `x[i]` is the i-th dependency of its kind, in the order the
    program passed them (the order the plan records them in)."""
    kind = next((t for word, t in COMPUTED_FROM if word in path.lower().replace("_", "")), None)
    if kind is None:
        return True
    before = [d for d in old if _urn_type(d).startswith(kind)]
    after = [d for d in new if _urn_type(d).startswith(kind)]
    if not before and not after:  # no dependency of its kind is known: it may have changed
        return True
    index = re.search(r"\[(\d+)\]$", path)
    if index and len(before) == len(after):
        i = int(index[1])
        if i >= len(after) or before[i] == after[i]:
            return False
        return f"{_urn_type(after[i])} {after[i].rsplit('::', 1)[-1]}"
    if set(before) == set(after):
        return False
    added = [d for d in after if d not in before]
    return f"{_urn_type(added[0])} {added[0].rsplit('::', 1)[-1]}" if added else True


def _refuse_kubernetes_version(new: dict, a: dict, b: dict, refuse: _Refusals) -> None:
    """A downgrade, or an upgrade that skips a minor version (EKS goes one at a time)."""
    version = KUBERNETES_VERSION_INPUT.get(new["type"])
    if not version:
        return
    if _version(a.get(version)) and _version(b.get(version)) and _version(b[version]) < _version(a[version]):
        refuse(f"downgrade of Kubernetes on {new['name']} ({a[version]} → {b[version]})", "kubernetesVersion")
    elif _skips_a_minor(a.get(version), b.get(version)):
        refuse(
            f"upgrade of Kubernetes on {new['name']} from {a[version]} to {b[version]}",
            "kubernetesVersion",
            f"EKS updates a cluster one minor version at a time ({EKS_ONE_MINOR}): go through "
            f"{_next_minor(a[version])} first, with its add-ons and node groups",
        )


def _refuse_losing_data(
    stack: str, before: dict, after: dict, removed: list[dict], changed: list[Change], refuse: _Refusals
) -> None:
    """Deleting or replacing what holds data (file systems, volumes, logs in prod, namespaces,
    claims), and moving a protected stack to another environment. A KMS key the stack does not retain
    is deleted with kms:ScheduleKeyDeletion, which both ceilings deny (components/delivery.py
    AUDIT_TRAIL_ENDS): its refusal names the administrator's command, for an allow alone would let a
    CI deploy through to a refused call half way."""
    for resource, verb in [(r, "delete") for r in removed] + [
        (before[c.urn], "replace") for c in changed if c.replaces
    ]:
        kind = KEPT.get(resource["type"])
        if kind and resource["type"] == KEY and not resource.get("retain_on_delete"):
            refuse(
                f"{verb} of {kind} {resource['name']}",
                resource["name"],
                "the deploy role may not delete a key (its policy denies kms:ScheduleKeyDeletion); "
                f"{_administrator_applies(stack, resource['urn'])}",
            )
        elif kind:
            refuse(f"{verb} of {kind} {resource['name']}", resource["name"])
    was, now = _environment(before), _environment(after)
    for resource in removed:
        kind = resource["type"]
        if kind == LOG_GROUP and was == "prod":
            refuse(
                f"delete of CloudWatch log group {resource['name']} in prod",
                resource["name"],
                "deleting a log group deletes the logs in it: turning observability or flow logs off loses prod's "
                "history",
                also="log-groups",
            )
        elif kind == NAMESPACE:
            refuse(
                f"delete of namespace {resource['name']}",
                resource["name"],
                "Kubernetes deletes every object in a namespace with it: the team's jobs, claims, secrets and "
                "service accounts",
                also="namespaces",
            )
        elif kind == CLAIM:
            refuse(
                f"delete of claim {resource['name']}",
                resource["name"],
                "the jobs that mount it lose their volume; the claim's binding to its volume is not recreated by a "
                "later apply",
                also="claims",
            )
    if was and now and was != now and any(r.get("protect") for r in before.values()):
        refuse(f"changing the environment of a protected stack ({was} → {now}) drops protect/retain", "environment")


KEY, KEY_POLICY = "aws:kms/key:Key", "aws:kms/keyPolicy:KeyPolicy"
ADMIN = "with administrator credentials (outside the deploy role's policy)"


def _updated_in_place(changed: list[Change], resource_type: str, path: str) -> list[Change]:
    """The changes that update `path` of a `resource_type` in place (a replacement is refused apart)."""
    return [c for c in changed if c.type == resource_type and not c.replaces and path in c.paths]


# When: CI's deploy of the merge would be refused the same call, so the administrator's command runs first
# (docs/upgrading.md, "A release the deploy role may not apply").
BEFORE_THE_MERGE = "before the merge that CI deploys"


def _administrator_applies(stack: str, urn: str) -> str:
    """The command that applies one resource's change the deploy role's policy refuses."""
    target = f"--target '{urn}'"
    return f"an administrator applies it {ADMIN}, {BEFORE_THE_MERGE}: {pulumi_up(stack, target)}"


def _administrator_deploys(stack: str) -> str:
    """The command that applies a change the deploy role's policy refuses and a --target would cut short."""
    return f"an administrator deploys this change {ADMIN}, {BEFORE_THE_MERGE}: {pulumi_up(stack)}"


def _refuse_key_policy_writes(
    stack: str, added: list[dict], removed: list[dict], changed: list[Change], refuse: _Refusals
) -> None:
    """A key's policy is CreateKey's: the deploy role's policy denies kms:PutKeyPolicy
    (components/delivery.py AdministratorsOnly), so a new policy on an existing key, and an
    aws.kms.KeyPolicy added or deleted (both are a PutKeyPolicy; a delete puts AWS's default back),
    fail the deploy: they are an administrator's, and the refusal names the command."""
    for change in _updated_in_place(changed, KEY, "policy"):
        refuse(
            f"a new policy on KMS key {change.name}",
            change.name,
            "the deploy role may not rewrite a key policy (its policy denies kms:PutKeyPolicy); "
            f"{_administrator_applies(stack, change.urn)} (if AWS already holds this policy, pulumi refresh "
            f"--stack {stack} --target '{change.urn}' is enough)",
        )
    _refuse_policy_resources(stack, added, removed, refuse, KEY_POLICY, KEY, ("aws.kms", "key", "PutKeyPolicy"))


def _refuse_policy_resources(
    stack: str,
    added: list[dict],
    removed: list[dict],
    refuse: _Refusals,
    policy_type: str,
    owner_type: str,
    names: tuple[str, str, str],
) -> None:
    """A resource policy made apart from its resource (aws.kms.KeyPolicy, aws.sqs.QueuePolicy), whose create and
    delete are both a call the deploy role may not make (`names`: the module, the owner's kind, the call): a new
    one belongs in its owner's create; a deleted one, left by an older stack, is forgotten by an administrator,
    whose refresh then reads the owner's policy as AWS holds it."""
    module, kind, call = names
    owner = f"{module}.{kind.title()}"
    for resource in added:
        if resource["type"] == policy_type:
            refuse(
                f"{owner}Policy {resource['name']}",
                resource["name"],
                f"it is a {call}, which the deploy role may not call: give the {owner} its policy "
                f"(Create{kind.title()}'s)",
            )
    for resource in removed:
        if resource["type"] == policy_type:
            owners = " ".join(f"--target '{u}'" for u in resource["dependencies"] if _urn_type(u) == owner_type)
            refuse(
                f"delete of {kind} policy {resource['name']}",
                resource["name"],
                f"deleting it is a {call}, which the deploy role may not call; an administrator forgets it "
                f"{ADMIN}: pulumi state delete --stack {stack} '{resource['urn']}', then pulumi refresh --stack "
                f"{stack} {owners}".rstrip(),
            )


ROLE = "aws:iam/role:Role"


def _refuse_trust_policy_writes(stack: str, changed: list[Change], refuse: _Refusals) -> None:
    """A role's trust is CreateRole's: the deploy role's policy denies iam:UpdateAssumeRolePolicy
    (components/delivery.py TrustIsSetAtCreate), so a new trust on an existing role fails the deploy:
    it is an administrator's, who reads the trust it names, and the refusal names the command."""
    for change in _updated_in_place(changed, ROLE, "assumeRolePolicy"):
        refuse(
            f"a new trust policy on IAM role {change.name}",
            change.name,
            "the deploy role may not rewrite a role's trust (its policy denies iam:UpdateAssumeRolePolicy: IAM "
            f"cannot see whom a trust names); {_administrator_applies(stack, change.urn)}, having read it",
        )


ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
# What a CI identity's policy is, by resource type: its inline policies, and the managed ones attached to it (the
# deploy role's denials: components/delivery.py deploy_denials_policy).
CI_IDENTITY_POLICIES = {ROLE_POLICY: "policy", ROLE_POLICY_ATTACHMENT: "policy attachment"}
# The roles CI acts as (components/delivery.py OIDC_IDENTITIES and the runners' service roles): an administrator's.
CI_PURPOSES = ("preview", "deploy", "image")


def _refuse_ci_identity_writes(
    stack: str,
    before: dict,
    after: dict,
    added: list[dict],
    removed: list[dict],
    changed: list[Change],
    refuse: _Refusals,
) -> None:
    """The CI identities (the preview, deploy and image roles, the runners' roles) are an administrator's: the deploy
    role's policy denies every write of them (components/delivery.py CiIdentitiesAreAdministeredByBootstrap), the
    deploy role's own inline policy and the attachment of its managed one among them. A release that changes what
    they may do (a new ceiling, a service the program now manages) fails a CI deploy half way at PutRolePolicy or
    AttachRolePolicy; `higgsfield bootstrap STACK` applies it."""
    names = {role_name(stack, p) for p in CI_PURPOSES} | {runner_project(stack, p) for p in RUNNER_PURPOSES}
    roles = {u for u, r in {**before, **after}.items() if r["type"] == ROLE and r["inputs"].get("name") in names}

    def of_a_ci_identity(resource: dict) -> bool:
        return resource["type"] in CI_IDENTITY_POLICIES and any(d in roles for d in resource.get("dependencies") or [])

    ended = [(r, "delete of") for r in removed if of_a_ci_identity(r)]
    ended += [(r, "new") for r in added if of_a_ci_identity(r)]
    ended += [(after[c.urn], "change of") for c in changed if of_a_ci_identity(after[c.urn])]
    for resource, what in ended:
        refuse(
            f"{what} CI identity {CI_IDENTITY_POLICIES[resource['type']]} {resource['name']}",
            resource["name"],
            "the deploy role may not change a CI identity (its policy denies every write of the preview, deploy and "
            f"image roles and the runners': CiIdentitiesAreAdministeredByBootstrap); {_administrator_deploys(stack)} "
            f'(the "First deploy" step of `higgsfield bootstrap {stack}`, with the committed stack file)',
        )


DATA_REPOSITORY_ASSOCIATION = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
BUCKET_VERSIONING = "aws:s3/bucketVersioning:BucketVersioning"


def _refuse_data_repository_links(stack: str, added: list[dict], changed: list[Change], refuse: _Refusals) -> None:
    """A file system's link to a bucket is an administrator's: the deploy role's policy denies
    fsx:CreateDataRepositoryAssociation (components/delivery.py AdministratorsOnly; IAM
    cannot see which bucket a link names), so a new or replaced association fails the deploy, and the
    refusal names the command. So is the linked bucket's versioning, made beside the link: the policy denies
    s3:PutBucketVersioning on the data buckets (DATA_DESTRUCTION: no IAM key tells Enabled from Suspended), so a
    new or changed BucketVersioning fails the deploy too."""
    created = [(r["name"], r["urn"], "a new") for r in added if r["type"] == DATA_REPOSITORY_ASSOCIATION]
    created += [(c.name, c.urn, "a replaced") for c in changed if c.type == DATA_REPOSITORY_ASSOCIATION and c.replaces]
    for name, urn, which in created:
        refuse(
            f"{which} FSx data repository association {name}",
            name,
            "the deploy role may not link the file system to a bucket (its policy denies "
            "fsx:CreateDataRepositoryAssociation: IAM cannot see which bucket a link names); "
            f"{_administrator_applies(stack, urn)}, having read the bucket it names",
        )
    for _, name, urn, which in _made({BUCKET_VERSIONING}, {BUCKET_VERSIONING}, added, changed):
        refuse(
            f"{which} BucketVersioning {name}",
            name,
            "the deploy role may not set a linked data bucket's versioning (its policy denies s3:PutBucketVersioning "
            f"there: no IAM key tells Enabled from Suspended); {_administrator_applies(stack, urn)}",
        )


MANAGED_POLICY = "aws:iam/policy:Policy"


def _refuse_managed_policy_writes(
    stack: str, added: list[dict], removed: list[dict], changed: list[Change], refuse: _Refusals
) -> None:
    """An IAM managed policy of the stack (its boundary, each team's log reader: components/observability.py) is an
    administrator's: the deploy role's policy allows no iam:CreatePolicy and denies every other write of a managed
    policy, its tags included (components/delivery.py ManagedPoliciesAreFixed: a new default
    version would grant its holders anything). So a new team's log reader, or any change to one, fails the deploy;
    the refusal names the command."""
    for resource in added:
        if resource["type"] == MANAGED_POLICY:
            refuse(
                f"a new IAM managed policy {resource['name']}",
                resource["name"],
                "the deploy role may not create a managed policy (its policy allows no iam:CreatePolicy); "
                f"{_administrator_deploys(stack)} (the policy may need resources of the same change, such as a new "
                "team's log group, which a --target would leave out)",
            )
    for change in changed:
        if change.type == MANAGED_POLICY:
            refuse(
                f"a {'replaced' if change.replaces else 'changed'} IAM managed policy {change.name}",
                change.name,
                "the deploy role may not change a managed policy (its policy denies policy versions, tags and "
                f"deletes: ManagedPoliciesAreFixed); {_administrator_applies(stack, change.urn)}",
            )
    for resource in removed:
        if resource["type"] == MANAGED_POLICY:
            refuse(
                f"delete of IAM managed policy {resource['name']}",
                resource["name"],
                "the deploy role may not delete a managed policy (ManagedPoliciesAreFixed); "
                f"{_administrator_applies(stack, resource['urn'])}",
            )


FLOW_LOG = "aws:ec2/flowLog:FlowLog"


def _made(
    new: set[str], updated: set[str], added: list[dict], changed: list[Change]
) -> list[tuple[str, str, str, str]]:
    """(type, name, URN, "a new" or "a changed") of each resource a deploy makes of types `new`, or changes of
    types `updated`: _ended's twin, for what the deploy role may not create or update."""
    made = [(r["type"], r["name"], r["urn"], "a new") for r in added if r["type"] in new]
    return made + [(c.type, c.name, c.urn, "a changed") for c in changed if c.type in updated]


def _ended(types: set[str], before: dict, removed: list[dict], changed: list[Change]) -> list[tuple[dict, str]]:
    """The resources of `types` a deploy deletes: removed ("delete") or replaced ("replacement"), as they were."""
    ended = [(r, "delete") for r in removed if r["type"] in types]
    return ended + [(before[c.urn], "replacement") for c in changed if c.type in types and c.replaces]


def _refuse_flow_log_ends(
    stack: str, before: dict, removed: list[dict], changed: list[Change], refuse: _Refusals
) -> None:
    """The VPC's flow log is part of the audit trail: both ceilings deny ec2:DeleteFlowLogs (components/delivery.py
    AUDIT_TRAIL_ENDS), so a deploy that deletes or replaces one (a flow log's settings are CreateFlowLogs' alone)
    would fail half way; the refusal names the administrator's command."""
    for resource, what in _ended({FLOW_LOG}, before, removed, changed):
        refuse(
            f"{what} of VPC flow log {resource['name']}",
            resource["name"],
            f"the deploy role may not delete a flow log (its policy denies ec2:DeleteFlowLogs: the audit trail); "
            f"{_administrator_applies(stack, resource['urn'])}",
        )


QUEUE, QUEUE_POLICY = "aws:sqs/queue:Queue", "aws:sqs/queuePolicy:QueuePolicy"
UNTAGGED = ("tags", "tagsAll")  # a queue's tags are TagQueue's; every other input is an attribute


def _refuse_queue_attribute_writes(
    stack: str, added: list[dict], removed: list[dict], changed: list[Change], refuse: _Refusals
) -> None:
    """A queue's attributes, its policy among them, are CreateQueue's: both ceilings deny sqs:SetQueueAttributes
    (components/delivery.py CROSS_ACCOUNT_OPENINGS), which pulumi-aws calls for any change but the tags, and which an
    aws.sqs.QueuePolicy's create and delete are. So those fail the deploy: the refusal names the command."""
    for change in changed:
        attributes = [p for p in change.paths if p.split(".")[0] not in UNTAGGED]
        if change.type == QUEUE and not change.replaces and attributes:
            refuse(
                f"new attributes on SQS queue {change.name} ({', '.join(attributes)})",
                change.name,
                "the deploy role may not set a queue's attributes (both ceilings deny sqs:SetQueueAttributes: IAM "
                f"cannot see whom a queue policy names); {_administrator_applies(stack, change.urn)}",
            )
    _refuse_policy_resources(
        stack, added, removed, refuse, QUEUE_POLICY, QUEUE, ("aws.sqs", "queue", "SetQueueAttributes")
    )


REPOSITORY = "aws:ecr/repository:Repository"


def _refuse_tag_mutability_writes(stack: str, changed: list[Change], refuse: _Refusals) -> None:
    """A repository's tag mutability is CreateRepository's: the deploy role's policy denies ecr:PutImageTagMutability
    (components/delivery.py ImagesAreTheImageRoles), which pulumi-aws calls when the setting changes, so that change
    fails the deploy: the refusal names the command."""
    for change in _updated_in_place(changed, REPOSITORY, "imageTagMutability"):
        refuse(
            f"a new tag mutability on ECR repository {change.name}",
            change.name,
            "the deploy role may not change whether a repository's tags move (its policy denies "
            f"ecr:PutImageTagMutability); {_administrator_applies(stack, change.urn)}",
        )


EVENT_RULE = "aws:cloudwatch/eventRule:EventRule"


def _refuse_interruption_ends(
    stack: str, before: dict, removed: list[dict], changed: list[Change], refuse: _Refusals
) -> None:
    """Karpenter's interruption queue is made once: the deploy role's policy denies sqs:DeleteQueue
    (components/delivery.py InterruptionFeedIsTheAdministrators), so a deploy that deletes or replaces a queue (the
    last Karpenter pool removed, or a queue an administrator deployed with a generated name, before the stack named
    it) would fail half way. The deploy role reaches EventBridge on the stack's rules by their names alone
    (deploy_policy: interruption_rule), so the same holds for a rule of a generated name. The refusal names the
    administrator's command."""
    kinds = {QUEUE: "SQS queue", EVENT_RULE: "EventBridge rule"}
    for resource, what in _ended(set(kinds), before, removed, changed):
        name = str(resource["inputs"].get("name") or "")
        if resource["type"] == QUEUE:
            why = "the deploy role may not delete a queue (its policy denies sqs:DeleteQueue: a queue made again "
            why += "could carry a policy IAM cannot see)"
        elif fnmatch.fnmatchcase(name, interruption_rule(stack, "*")):
            continue
        else:
            why = f"the deploy role reaches only the stack's rules, by name, and this one's is {name or 'generated'}"
        refuse(
            f"{what} of {kinds[resource['type']]} {resource['name']}",
            resource["name"],
            f"{why}; {_administrator_deploys(stack)}",
        )


EVENT_TARGET = "aws:cloudwatch/eventTarget:EventTarget"


def _refuse_interruption_feed(stack: str, added: list[dict], changed: list[Change], refuse: _Refusals) -> None:
    """Karpenter's interruption queue and its rules' targets are an administrator's to make (components/delivery.py
    InterruptionFeedIsTheAdministrators: IAM sees neither a queue's policy nor a target's dead-letter queue), so a
    deploy that adds the stack's first Karpenter pool, or a target, or puts a target again (pulumi-aws's update of
    an EventTarget is a PutTargets) would fail half way. The refusal names the administrator's command."""
    for resource_type, name, _, which in _made({QUEUE, EVENT_TARGET}, {EVENT_TARGET}, added, changed):
        what = "SQS queue" if resource_type == QUEUE else "EventBridge target"
        refuse(
            f"{which} {what} {name}",
            name,
            "the deploy role may not make Karpenter's interruption queue or put its rules' targets (its policy denies "
            "sqs:CreateQueue and events:PutTargets: IAM sees neither a queue's policy nor a target's dead-letter "
            f"queue); {_administrator_deploys(stack)}",
        )


WEBHOOK, PROJECT = "aws:codebuild/webhook:Webhook", "aws:codebuild/project:Project"


def _refuse_runner_writes(stack: str, added: list[dict], changed: list[Change], refuse: _Refusals) -> None:
    """A runner's project and webhook say what code runs in the stack's VPC and whose workflows: the deploy role's
    policy denies their creates and updates (components/delivery.py RunnersAreTheAdministrators: IAM sees neither
    an inline buildspec nor a webhook's filter groups), so a new runner, a changed one (another image, actor,
    compute type) fails a CI deploy half way. The refusal names the administrator's command."""
    kinds = {WEBHOOK: "CodeBuild webhook", PROJECT: "CodeBuild project"}
    for kind, name, urn, which in _made(set(kinds), set(kinds), added, changed):
        refuse(
            f"{which} {kinds[kind]} {name}",
            name,
            "the deploy role may not make or change a runner's project or webhook (its policy denies them: IAM cannot "
            "see an inline buildspec nor whose workflows a webhook's filters admit); "
            + _administrator_applies(stack, urn),
        )


def _audit_log(resource: dict) -> bool:
    """The control plane's and the VPC's flow-log groups (components/delivery.py AuditLogsStay)."""
    name = str(resource.get("inputs", {}).get("name", ""))
    return (name.startswith("/aws/eks/") and name.endswith("/cluster")) or (
        name.startswith("/aws/vpc/") and name.endswith("/flow-logs")
    )


def _refuse_audit_log_writes(stack: str, after: dict, changed: list[Change], refuse: _Refusals) -> None:
    """The deploy role's policy denies PutRetentionPolicy and Associate/DisassociateKmsKey on the audit
    log groups (AuditLogsStay): a new retention or key on one fails the deploy, so it is an
    administrator's, and the refusal names the command."""
    for change in changed:
        if change.type != LOG_GROUP or change.replaces or not _audit_log(after.get(change.urn, {})):
            continue
        moved = sorted({"retentionInDays", "kmsKeyId"} & {p.split(".")[0] for p in change.paths})
        if moved:
            refuse(
                f"a new {' and '.join(moved)} on audit log group {change.name}",
                change.name,
                "the deploy role may not change the audit trail's retention or key (its policy denies "
                f"logs:PutRetentionPolicy and logs:AssociateKmsKey there); {_administrator_applies(stack, change.urn)}",
            )


def _secret_changes(before: dict | None, after: dict | None) -> dict[str, str]:
    """Encrypted settings whose ciphertext changed: the value did (it is unknown offline, so the
    resources it reaches cannot be named). A plan of older code, without `secrets`, says nothing."""
    if before is None or after is None:
        return {}
    changes = {}
    for key in sorted(set(before) | set(after)):
        if key not in before:
            changes[key] = "encrypted now (its value is unknown offline)"
        elif key not in after:
            changes[key] = "no longer encrypted (or removed)"
        elif before[key] != after[key]:
            changes[key] = "encrypted value changed: its ciphertext differs (the value is unknown offline)"
    return changes


# --- the base side ------------------------------------------------------------------------------


def _git(root: Path, *args: str, text: bool = True) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=text)
    except FileNotFoundError:
        raise StackNotFound("--base: diff reads the base from git, and there is no git on PATH") from None


def check_base(ref: str, stack: str, root: Path) -> None:
    """Refuse a base that cannot be read (no git, or no such commit) before anything is evaluated."""
    if shutil.which("git") is None:
        raise StackNotFound(
            f"--base {ref!r}: `higgsfield diff` compares with a git ref and git is not on PATH; without git, compare "
            f"two `higgsfield plan {stack} --json` outputs"
        )
    if _git(root, "rev-parse", "--is-inside-work-tree").returncode:
        raise StackNotFound(
            f"--base {ref!r}: {root} is not a git repository, and diff compares the stack with a commit of it: "
            f"`git init && git add -A && git commit -m start` makes one, or compare two `higgsfield plan {stack} "
            "--json` outputs"
        )
    if _git(root, "rev-parse", "--verify", f"{ref}^{{commit}}").returncode:
        if _git(root, "rev-parse", "--verify", "HEAD^{commit}").returncode:
            raise StackNotFound(
                f"--base {ref!r}: this repository has no commit yet, and diff compares the stack with one: "
                "`git add -A && git commit -m start` makes one"
            )
        raise StackNotFound(f"--base {ref!r} is not a commit of this repository")


def plan_json_at(ref: str, stack: str, root: Path) -> dict:
    """The plan of `stack` at git `ref`, evaluated with that ref's code and stack files."""
    check_base(ref, stack, root)
    stack_file = f"stacks/Pulumi.{stack}.yaml"
    # where the project stands in its repository ("" at the top, "platform/" in a larger one): the
    # ref's files are read by their paths from the repository's top
    prefix = _git(root, "rev-parse", "--show-prefix").stdout.strip()
    if _git(root, "cat-file", "-e", f"{ref}:{prefix}{stack_file}").returncode:
        # a new stack: all additions
        return {"project": "higgsfield", "stack": stack, "resources": [], "outputs": {}, "new_stack": True}
    code_changed = _git(root, "diff", "--quiet", ref, "--", *CODE_PATHS).returncode != 0
    with tempfile.TemporaryDirectory() as tmp:
        if not code_changed:
            # Same code: evaluate the base's config files with the code already loaded here.
            (Path(tmp) / "stacks").mkdir()
            for path in ("Pulumi.yaml", stack_file):  # as committed, bytes and all: the reader judges them
                (Path(tmp) / path).write_bytes(_git(root, "show", f"{ref}:{prefix}{path}", text=False).stdout)
            try:
                return record(stack, root=Path(tmp)).as_dict()
            except StackFileError as exc:  # named as the ref's file, not the copy's
                raise StackFileError(Path(f"{ref}:{exc.path.relative_to(tmp)}"), exc.line, exc.message) from None
        worktree = Path(tmp) / "base"
        _git(root, "worktree", "add", "--detach", str(worktree), ref).check_returncode()
        project = worktree / prefix
        try:
            out = Path(tmp) / "plan.json"
            env = {**os.environ, "PYTHONPATH": str(project)}
            done = subprocess.run(
                [sys.executable, "-m", "infra.cli", "plan", stack, "--json", str(out)],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
            )
            if done.returncode:
                raise StackNotFound(
                    f"the plan of {stack} at {ref} failed: "
                    f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
                )
            return json.loads(out.read_text())
        finally:
            _git(root, "worktree", "remove", "--force", str(worktree))


def diff_stack(stack: str, base_ref: str, root: Path, allow: set[str]) -> Diff:
    """The diff; a `--allow` name that names nothing of either plan is refused (ConfigError). A base
    that cannot be read is refused first: the evaluation of the working tree takes seconds."""
    read_stack_file(root, stack)  # a folder that is no project, or no such stack, is said before any git advice
    check_base(base_ref, stack, root)
    head = record(stack, root=root)
    base, after = plan_json_at(base_ref, stack, root), head.as_dict()
    unknown = unknown_allow_names(set(allow), base, after)
    if unknown:
        raise ConfigError(
            "--allow",
            f"{', '.join(unknown)} names no resource of {stack} (at {base_ref} or now) and no umbrella name "
            f"({', '.join(UMBRELLA_NAMES)}): nothing would be allowed; the names are those `higgsfield plan {stack}` "
            "lists and a refusal says",
        )
    allowed = set(allow) | set(getattr(head.config, "allow_replace", ()))
    return compare(base, after, allowed)


SHOWN = 60  # the characters of a value a diff line shows
BEFORE_CHANGE = 20  # of those, how many before the first that changed, when the start is alike


def _show(value: Any, start: int = 0) -> str:
    """`value` in at most SHOWN characters, from `start` (0: its beginning), each cut end marked `...`."""
    if value is None:
        return "(unset)"
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) <= SHOWN:
        return text
    start = min(start, len(text) - (SHOWN - 3))
    head = "..." if start else ""
    room = SHOWN - len(head)
    return head + (text[start:] if len(text) - start <= room else text[start : start + room - 3] + "...")


def _show_change(old: Any, new: Any) -> str:
    """`old → new`, each cut to SHOWN characters; two long texts alike past where a cut would end are shown
    from a little before their first difference, so the line says what changed."""
    start = 0
    if isinstance(old, str) and isinstance(new, str):
        alike = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        if alike >= SHOWN - 3:
            start = alike - BEFORE_CHANGE
    return f"{_show(old, start)} → {_show(new, start)}"


def _text_of_base64(value: Any) -> str | None:
    """A launch template's user data (base64 of a MIME multipart text) as its text; None for anything else."""
    if not isinstance(value, str) or not value:
        return None
    try:
        text = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return text if "\n" in text else None


def _show_lines_change(old: Any, new: Any) -> str | None:
    """Two texts of several lines (a launch template's base64 user data, decoded; an EC2NodeClass's user data, a
    script) as the lines that change, `- ` removed and `+ ` added, cut to 3 x SHOWN characters, so the change stays
    one line of the diff; None unless both are such text."""
    before, after = _text_of_base64(old), _text_of_base64(new)
    label = "(decoded) "
    if before is None or after is None:
        if not all(isinstance(v, str) and "\n" in v for v in (old, new)):
            return None
        before, after, label = old, new, ""
    changed = [
        f"{line[0]} {line[1:].strip()}"
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip()
    ]
    text = "; ".join(changed) or "the same lines"
    room = 3 * SHOWN
    return label + (text if len(text) <= room else text[: room - 3] + "...")


def as_json(stack: str, base_ref: str, diff: Diff) -> dict:
    def change(c: Change) -> dict:
        return {
            "type": c.type,
            "name": c.name,
            "urn": c.urn,
            "replace": c.replaces,
            "replace_because": c.replace_paths,
            "paths": c.paths,
            "values": {p: {"old": old, "new": new} for p, (old, new) in c.values.items()},
            "computed_from_replaced": c.because,
            "consequences": c.consequences,
        }

    return {
        "stack": stack,
        "base": base_ref,
        "add": [{"type": r["type"], "name": r["name"]} for r in diff.added],
        "delete": [
            {"type": r["type"], "name": r["name"], "consequences": diff.removal_consequences.get(r["urn"], [])}
            for r in diff.removed
        ],
        "change": [change(c) for c in diff.changed],
        "refused": diff.refused,
        "allowed": diff.allowed,
        "new_stack": diff.new_stack,
        "secrets_changed": diff.secrets,
    }


def render_diff(stack: str, base_ref: str, diff: Diff) -> str:
    lines = [
        f"Changes to {stack} since {base_ref}: {len(diff.added)} to add, {len(diff.changed)} to change "
        f"({len(diff.replaced)} replaced), {len(diff.removed)} to delete"
    ]
    if diff.new_stack:
        lines.append(
            f"note: a new stack: stacks/Pulumi.{stack}.yaml is not at {base_ref}, so every resource is an addition"
        )
    lines += [f"  + {r['type']} {r['name']}" for r in diff.added]
    for r in diff.removed:
        removal = diff.removal_consequences.get(r["urn"], [])
        lines.append(f"  - {r['type']} {r['name']}" + ("  DRAINS the pool's nodes (see !)" if removal else ""))
        lines += [f"      ! {line}" for line in removal]
    for c in diff.changed:
        if c.replaces:
            lines.append(f"  +- {c.type} {c.name}  REPLACE because of {', '.join(c.replace_paths)}")
        else:
            rolling = "  ROLLS its nodes (each drained; see !)" if c.consequences else ""
            if c.type in (pool_removal.NODE_CLASS, pool_removal.NODEPOOL):
                rolling = "  DRIFTS its pool's nodes (see !)" if c.drifts else ""
            lines.append(f"  ~ {c.type} {c.name}{rolling}")
        for path in c.paths[:12]:
            if path in c.because:
                lines.append(f"      {path}: computed from replaced {c.because[path]}")
            elif path in c.values:
                old, new = c.values[path]
                lines.append(f"      {path}: {_show_lines_change(old, new) or _show_change(old, new)}")
            else:
                lines.append(f"      {path}")
        if len(c.paths) > 12:
            lines.append(f"      ... {len(c.paths) - 12} more")
        lines += [f"      ! {line}" for line in c.consequences]
    lines += [f"  ~ secret {key}: {how}" for key, how in diff.secrets.items()]
    lines += [f"allowed: {what}" for what in diff.allowed]
    if diff.refused:
        lines.append(
            f"{len(diff.refused)} change(s) refused (why: on stderr; --allow NAME or higgsfield:allowReplace lets an "
            "intended one through)"
        )
    return "\n".join(lines)

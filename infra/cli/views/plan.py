"""The text of `higgsfield plan`: a summary block first (counts per kind, GPU pools and their
capacity, queues and teams against that capacity, FSx throughput), then the resource tree by
component with the settings that matter. Repeated siblings without settings of their own are
collapsed into one line (`9 autoscaler template tags`) unless `verbose`."""

from __future__ import annotations

from collections.abc import Callable, Collection

from infra.cli.views.table import table, wrap
from infra.offline.evaluate import COMPUTED, Plan, Resource
from infra.offline.plan import Summary, get, lustre_throughput_mb_s, summarize

COLLAPSE_AT = 2  # this many siblings of one type, none with settings shown, print as one line
KINDS_SHOWN = 12  # the most numerous kinds named in the summary; the rest are counted

# What a group of collapsed siblings is called; other types print as "N × TYPE".
PLURALS = {
    "aws:autoscaling/tag:Tag": "autoscaler template tags",
    "aws:ec2/routeTable:RouteTable": "route tables",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "route table associations",
    "aws:ec2/eip:Eip": "Elastic IPs",
    "aws:ec2/natGateway:NatGateway": "NAT gateways",
    "aws:cloudwatch/logGroup:LogGroup": "log groups",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": "role policy attachments",
    "aws:iam/role:Role": "IAM roles",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": "security group ingress rules",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy": "NetworkPolicies",
    "kubernetes:core/v1:PersistentVolume": "PersistentVolumes",
    "kubernetes:core/v1:PersistentVolumeClaim": "PersistentVolumeClaims",
    "kubernetes:core/v1:ResourceQuota": "ResourceQuotas",
    "kubernetes:core/v1:ServiceAccount": "ServiceAccounts",
    "kubernetes:core/v1:Namespace": "Namespaces",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy": "ValidatingAdmissionPolicies",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding": "ValidatingAdmissionPolicyBindings",
    "kubernetes:scheduling.k8s.io/v1:PriorityClass": "PriorityClasses",
    "kubernetes:scheduling.volcano.sh/v1beta1:Queue": "Volcano queues",
    "kubernetes:scheduling.volcano.sh/v1beta1:QueuePatch": "Volcano queues the scheduler creates (patched)",
    "kubernetes:core/v1:ServiceAccountPatch": "ServiceAccounts the cluster creates (patched)",
    "kubernetes:helm.sh/v3:Release": "Helm releases",
}


# --- one line per resource: the settings a reviewer wants to see ------------------------------


def _cluster(i: dict) -> str:
    public = ", ".join(i.get("publicAccessCidrs") or []) if i.get("endpointPublicAccess") else "none"
    logs = ",".join(i.get("enabledClusterLogTypes") or [])
    return (
        f"k8s {i.get('version')}, auth {i.get('authenticationMode')}, endpoint private + public [{public}], logs "
        f"{logs}, secrets KMS"
    )


def _node_group(i: dict) -> str:
    s = i.get("scalingConfig") or {}
    return (
        f"{','.join(i.get('instanceTypes') or [])} {i.get('capacityType')} {i.get('amiType')} "
        f"k8s {i.get('version')}{' AMI ' + i['releaseVersion'] if i.get('releaseVersion') else ''}, "
        f"min {s.get('minSize')} / desired {s.get('desiredSize')} / max {s.get('maxSize')}"
    )


def _launch_template(i: dict) -> str:
    md = i.get("metadataOptions") or {}
    root = get((i.get("blockDeviceMappings") or [{}])[0], "ebs", default={})
    nics = i.get("networkInterfaces") or []
    efa = sum(1 for n in nics if n.get("interfaceType") in ("efa", "efa-only"))
    text = (
        f"IMDS tokens {md.get('httpTokens')} hop {md.get('httpPutResponseHopLimit')}, root "
        f"{root.get('volumeSize')} GiB {root.get('volumeType')} encrypted={root.get('encrypted')}"
    )
    return text + (f", {efa} EFA interfaces" if nics else "")


def _lustre(i: dict) -> str:
    from components.storage import MOUNT_PATH, PVC_NAME

    per_tib = i.get("perUnitStorageThroughput") or "200 (fixed)"
    return (
        f"{i.get('deploymentType')} {i.get('storageCapacity')} GiB x {per_tib} MB/s/TiB = "
        f"{lustre_throughput_mb_s(i):,.0f} MB/s, "
        f"{i.get('dataCompressionType')}, backups {i.get('automaticBackupRetentionDays')} d; jobs mount PVC "
        f"{PVC_NAME} at {MOUNT_PATH}"
    )


SUMMARIES: dict[str, Callable[[dict], str]] = {
    "aws:fsx/lustreFileSystem:LustreFileSystem": _lustre,
    "aws:ec2/vpc:Vpc": lambda i: f"cidr {i.get('cidrBlock')}",
    "aws:ec2/subnet:Subnet": lambda i: f"{i.get('availabilityZone')} {i.get('cidrBlock')}",
    "aws:ec2/vpcEndpoint:VpcEndpoint": lambda i: f"{i.get('vpcEndpointType')} {i.get('serviceName')}",
    "aws:kms/key:Key": lambda i: (
        f"rotation {i.get('enableKeyRotation')}, deletion window {i.get('deletionWindowInDays')} days"
    ),
    "aws:eks/addon:Addon": lambda i: f"{i.get('addonName')} {i.get('addonVersion')}",
    "aws:eks/nodeGroup:NodeGroup": _node_group,
    "aws:ec2/launchTemplate:LaunchTemplate": _launch_template,
    "eks:index:Cluster": _cluster,
}


# ignore_changes paths, in words (Pulumi does not change them after creation)
IGNORED = {"scalingConfig.desiredSize": "desired size"}


def _flags(r: Resource) -> str:
    flags = [name for name, on in (("protected", r.protect), ("retained", r.retain_on_delete)) if on]
    if r.ignore_changes:  # what Pulumi leaves as it finds it: set by someone else (the autoscaler) at run time
        flags.append("left to the autoscaler: " + ",".join(IGNORED.get(p, p) for p in r.ignore_changes))
    return f"  [{'; '.join(flags)}]" if flags else ""


def _described(r: Resource) -> str:
    summary = SUMMARIES.get(r.type, lambda i: "")(r.inputs)
    return (f": {summary}" if summary else "") + _flags(r)


# --- the summary block ------------------------------------------------------------------------


def _short(type_: str, all_types: list[str]) -> str:
    """`Tag` for aws:autoscaling/tag:Tag, unless another type ends in the same name."""
    name = type_.rsplit(":", 1)[-1]
    return name if sum(1 for t in all_types if t.rsplit(":", 1)[-1] == name) == 1 else type_


def summary_lines(s: Summary) -> list[str]:
    lines = [f"{s.resources} resources: {s.custom} cloud/Kubernetes resources in {s.components} components"]
    types = [t for t, _ in s.kinds]
    shown, rest = s.kinds[:KINDS_SHOWN], [n for _, n in s.kinds[KINDS_SHOWN:]]
    text = ", ".join(f"{n} {_short(t, types)}" for t, n in shown)
    if rest:
        text += f" and {sum(rest)} more of {len(rest)} other kinds"
    lines += wrap("by kind: " + text)
    if s.gpu_pools:
        lines.append(f"GPU pools: {len(s.gpu_pools)}, at most {s.gpu_nodes} nodes and {s.gpu_capacity} GPUs at maxSize")
        lines += table(
            ["pool", "instance types", "GPUs", "EFA", "AZ", "min", "max", "max GPUs", "capacity"],
            [
                [
                    p["pool"],
                    ",".join(p["instance_types"]),
                    str(p["gpus_per_node"]),
                    str(p["efa_interfaces"]),
                    ",".join(p["availability_zones"]),
                    str(p["min"]),
                    str(p["max"]),
                    str(p["max_gpus"]),
                    p["capacity"],
                ]
                for p in s.gpu_pools
            ],
            right=(2, 3, 5, 6, 7),
        )
    if s.queues:
        lines.append(f"Queues (Volcano GPU capability) and teams (GPU quota) against {s.gpu_capacity} GPUs:")

        def share(gpus: int) -> str:
            return f"{100 * gpus / s.gpu_capacity:.0f}%" if s.gpu_capacity else "-"

        lines += table(
            ["queue", "weight", "GPUs", "of capacity", "teams"],
            [
                [
                    q["queue"],
                    str(q["weight"]),
                    str(q["gpu_capability"]),
                    share(q["gpu_capability"]),
                    ", ".join(
                        f"{t['team']} {t['gpu_quota'] if t['gpu_quota'] is not None else 'no quota'}"
                        for t in q["teams"]
                    )
                    or "-",
                ]
                for q in s.queues
            ],
            right=(1, 2, 3),
        )
    for fs in s.file_systems:
        per_tib = fs["per_tib_mb_s"] or "200 (fixed)"
        lines.append(
            f"FSx for Lustre {fs['name']}: {fs['deployment_type']} {fs['storage_gib']:,} GiB x {per_tib} MB/s/TiB "
            f"= {fs['throughput_mb_s']:,.0f} MB/s in {','.join(fs['availability_zones'])}"
        )
    return lines


# --- the tree ---------------------------------------------------------------------------------


def _tree_lines(plan: Plan, verbose: bool) -> list[str]:
    children: dict[str | None, list[Resource]] = {}
    for r in plan.resources:
        children.setdefault(r.parent, []).append(r)
    lines: list[str] = []

    def emit(depth: int, text: str) -> None:
        lines.extend(wrap(text, indent=2 * depth, hanging=4) or [" " * 2 * depth + text])

    def walk(parent: str | None, depth: int) -> None:
        siblings = sorted(children.get(parent, []), key=lambda r: (r.custom, r.type, r.name))
        by_type: dict[str, list[Resource]] = {}
        for r in siblings:
            by_type.setdefault(r.type, []).append(r)
        for r in siblings:
            group = by_type[r.type]
            plain = all(not _described(g) and g.urn not in children for g in group)
            if not verbose and r.custom and plain and len(group) >= COLLAPSE_AT:
                if r is group[0]:
                    emit(depth, f"+ {len(group)} {PLURALS.get(r.type, f'× {r.type}')}")
                continue
            emit(depth, f"{'+' if r.custom else '▸'} {r.type} {r.name}{_described(r)}")
            walk(r.urn, depth + 1)

    roots = {r.parent for r in plan.resources} - {r.urn for r in plan.resources}
    for root in sorted(roots, key=str):
        walk(root, 1)
    return lines


def _sorted(value: object) -> object:
    """Output values with their keys in order, so the text is the same on every run."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    return value


def note_lines(plan: Plan, said: Collection[str] = ()) -> list[str]:
    """What the offline plan cannot know (Plan.notes), a `note:` line each, less those `said` already."""
    return [f"note: {note}" for note in plan.notes if note not in said]


def render(plan: Plan, verbose: bool = False) -> str:
    """The summary block, then the tree (collapsed unless `verbose`), then the outputs."""
    where = f" in {plan.config.region}" if plan.config is not None else ""
    lines = [
        f"Offline plan of {plan.project}/{plan.stack}{where} (preview under mocks; {COMPUTED} = known after deploy)"
    ]
    lines += note_lines(plan)
    lines += summary_lines(summarize(plan))
    lines.append(
        "Resources by component" + (":" if verbose else " (repeated resources collapsed; --verbose lists each):")
    )
    lines += _tree_lines(plan, verbose)
    lines += wrap("Outputs: " + ", ".join(f"{k}={_sorted(v)}" for k, v in sorted(plan.outputs.items())), indent=0)
    return "\n".join(lines)

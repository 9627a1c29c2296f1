"""What an update that rolls a GPU node group's nodes does to its pool and to the gangs on it.

A change of a managed node group's `version` or `releaseVersion` (a Kubernetes upgrade, a new
AMI release), or a new version of its launch template (the nodes' user data, a kubelet setting),
replaces every node of the group, `maxUnavailable` at a time, each drained first
(docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html). `higgsfield diff`
prints these lines under each such node group, so an upgrade never reads as a harmless `~`.
"""

from __future__ import annotations

from typing import Any

from components.gpu_pools import POOL_LABEL, UPDATE_STRATEGY_NO_SURGE

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
SCHEDULE = "aws:autoscaling/schedule:Schedule"
# A node group's launch template version: the template's latest version, known only at deploy, so a plan's
# node group shows no change of it; `launched_from` finds the groups whose template gets a new one.
TEMPLATE_VERSION = "launchTemplate.version"
# A change of any of these is an UpdateNodegroupVersion, which rolls the nodes (hashicorp/terraform-provider-aws:
# internal/service/eks/node_group.go@b11fc0fd resourceNodeGroupUpdate: launch_template, release_version, version).
ROLLING_INPUTS = ("version", "releaseVersion", TEMPLATE_VERSION)
# The launch template inputs whose change makes no new template version; a change of any other is a
# CreateLaunchTemplateVersion and a new latest version (hashicorp/terraform-provider-aws:internal/service/ec2/
# ec2_launch_template.go@c49358f8 resourceLaunchTemplateUpdate: its updateKeys, then tags and the default version
# apart).
UNVERSIONED_TEMPLATE_INPUTS = ("tags", "tagsAll", "defaultVersion", "updateDefaultVersion")
# "When upgrading managed node groups with Capacity Blocks, make sure that the desired size of the
# node group is set to 0" (awsdocs/amazon-eks-user-guide:latest/ug/ml/capacity-blocks-mng.adoc@
# 0a7189e931ca51de88c9f104637bb84fcfab2353, Considerations).
CAPACITY_BLOCK_UPGRADE = "docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html"
GANGS = (
    "each drain sends SIGTERM to the pods on that node: a training gang's ranks take their final checkpoint and "
    "exit 143, which rendered jobs retry (restartPolicy ExitCode) without counting it against backoffLimit, and "
    "the gang runs again once the replacement node passes the health gate (docs/upgrading.md); serving replicas "
    "and evaluation pods are started again elsewhere by their Deployment or Job"
)


def rolls(change_paths: list[str]) -> bool:
    """Whether a node group change replaces its nodes."""
    return any(p in ROLLING_INPUTS for p in change_paths)


def new_template_version(template_paths: list[str]) -> bool:
    """Whether a launch template change with these changed input paths makes a new template version."""
    return any(p.split(".")[0].split("[")[0] not in UNVERSIONED_TEMPLATE_INPUTS for p in template_paths)


def launched_from(resources: dict[str, dict], template_urn: str) -> list[dict]:
    """The node groups (of `resources`, by URN) that launch their nodes from the template `template_urn`."""
    return [
        r
        for r in resources.values()
        if r["type"] == NODE_GROUP and r["inputs"].get("launchTemplate") and template_urn in r["dependencies"]
    ]


def _sibling(resources: dict[str, dict], group: dict, type_: str, suffix: str) -> dict | None:
    """The resource of `type_` named `<group name><suffix>` under the same component."""
    name = f"{group['name']}{suffix}"
    return next(
        (
            r
            for r in resources.values()
            if r["type"] == type_ and r["name"] == name and r.get("parent") == group.get("parent")
        ),
        None,
    )


def _capacity(resources: dict[str, dict], group: dict) -> tuple[str, str | None]:
    """('capacity-block' | 'reservation' | 'on-demand' | 'spot', the reservation id if any)."""
    template = _sibling(resources, group, LAUNCH_TEMPLATE, "-lt") or {"inputs": {}}
    target = (template["inputs"].get("capacityReservationSpecification") or {}).get("capacityReservationTarget") or {}
    reservation = target.get("capacityReservationId")
    kind = group["inputs"].get("capacityType")
    if kind == "CAPACITY_BLOCK":
        return "capacity-block", reservation
    if reservation:
        return "reservation", reservation
    return ("spot" if kind == "SPOT" else "on-demand"), None


def capacity_block_open(resources: dict[str, dict], group: dict) -> str | None:
    """The pool of a Capacity Block node group whose block is open as the plan was made (its
    `-open` scheduled action already past, its `-drain` still ahead), else None."""
    pool = (group["inputs"].get("labels") or {}).get(POOL_LABEL)
    if not pool or _capacity(resources, group)[0] != "capacity-block":
        return None
    opened = _sibling(resources, group, SCHEDULE, "-open")
    drained = _sibling(resources, group, SCHEDULE, "-drain")
    return pool if opened is None and drained is not None else None


def consequences(resources: dict[str, dict], group: dict) -> list[str]:
    """What rolling `group` (a node group of the head plan, its resources by URN) does, one line each;
    empty for a node group that is not a GPU pool's."""
    inputs: dict[str, Any] = group["inputs"]
    pool = (inputs.get("labels") or {}).get(POOL_LABEL)
    if not pool:
        return []
    scaling = inputs.get("scalingConfig") or {}
    low, high = scaling.get("minSize", 0), scaling.get("maxSize", 0)
    update = inputs.get("updateConfig") or {}
    strategy = update.get("updateStrategy") or "DEFAULT"
    at_once = update.get("maxUnavailable", 1)
    kind, reservation = _capacity(resources, group)
    minimal = strategy == UPDATE_STRATEGY_NO_SURGE
    if minimal:
        how = f"{at_once} node at a time drained and terminated before its replacement starts (updateStrategy MINIMAL)"
    else:
        how = f"a replacement launched before each node is drained, {at_once} at a time (updateStrategy DEFAULT)"
    lines = []
    if kind in ("reservation", "capacity-block") and not minimal:
        lines.append(
            f"pool {pool} ({kind} {reservation}): DEFAULT launches a surge instance the reservation has "
            "no room for: the update stalls or fails with NodeCreationFailure; "
            "reserved pools need updateStrategy MINIMAL"
        )
    if kind == "reservation":
        held = f"{high} nodes held on the reservation" if low == high and high else f"0 to {high} nodes"
        lines.append(
            f"pool {pool} (reservation {reservation}, {held}): {how}; "
            f"the pool runs {max(high - at_once, 0)} of {high} nodes during each step, and a gang that needs "
            f"the whole reservation waits for each replacement: up to {high} restarts from its checkpoint"
        )
    elif kind == "capacity-block":
        opened = _sibling(resources, group, SCHEDULE, "-open")
        drained = _sibling(resources, group, SCHEDULE, "-drain")
        start = opened["inputs"].get("startTime") if opened else None
        end = drained["inputs"].get("startTime") if drained else None
        window = (f"open from {start}" if start else "inside its window") + (f", drained from {end}" if end else "")
        lines.append(
            f"pool {pool} (Capacity Block {reservation}, {window}): outside the block the group is at 0 "
            f"and updates at once; inside it up to {high} nodes are replaced, {how}. AWS asks for a desired "
            f"size of 0 when a Capacity Block group is upgraded ({CAPACITY_BLOCK_UPGRADE}): deploy this "
            "before the block opens or after its drain"
        )
    else:
        lines.append(
            f"pool {pool} ({kind}, {low} to {high} nodes): the nodes running at the deploy are replaced, "
            f"{how}; an idle pool at 0 has nothing to roll"
        )
    lines.append(f"running work on {pool}: {GANGS}")
    return lines

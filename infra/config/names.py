"""Names the program derives from settings, checked for collisions before anything is created.
Two teams, datasets or pools whose derived names are equal would be a duplicate URN
(Pulumi stops the deploy midway: "Duplicate resource URN") or two objects with one name (the
second overwrites the first, or the API server refuses it); two access entries for one principal
are refused by EKS ("An IAM principal can't be included in more than one access entry",
docs.aws.amazon.com/eks/latest/userguide/creating-access-entries.html).

The names are derived here as the components derive them (components/teams.py Teams,
components/storage.py LustreFileSystem._volume / _pv_claim, components/gpu_pools.py GpuPoolGroup,
components/delivery.py); tests/config/test_hostile_inputs.py checks these functions against the names in
the recorded plans of the shipped stacks, so a component that renames its resources fails a test
until this module follows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infra.config.base import NAMESPACE
from infra.core.names import AUTOSCALER_TEMPLATE, POOL_LABEL, role_name

StackConfig = Any  # infra.config.stack.StackConfig (which calls `collisions`; not imported back)

TEAMS_COMPONENT = "teams"  # infra/__main__.py: Teams("teams", ...)
STORAGE_COMPONENT = "lustre"  # infra/__main__.py: LustreFileSystem("lustre", ...)
# components/tenancy.py network_policies: the NetworkPolicies of every team namespace (by name).
TEAM_NETWORK_POLICIES = (
    "default-deny",
    "allow-own-namespace",
    "allow-dns",
    "allow-metrics-scrape",
    "allow-launcher-to-api-server",
)
# components/gpu_pools.py: the node-template tags are written onto each pool's ASG as resources
# named GROUP-asg-<tag key without the template prefix, '/' as '-'>.


def team_resource_names(cfg: StackConfig, team_index: int) -> list[str]:
    """The resource names components/teams.py gives team `team_index`'s objects."""
    team = cfg.scheduler.teams[team_index]
    base = f"{TEAMS_COMPONENT}-{team.name}"
    # KubernetesObjects only (one resource type, so one name is one URN); the default service
    # account is a KubernetesPatch and the gang deadline a component of its own type.
    suffixes = ["admission", "admission-binding"]
    suffixes += [f"deny-{c.name}" for c in cfg.scheduler.priority_classes if c.name not in team.priority_classes]
    suffixes += [f"netpol-{n}" for n in TEAM_NETWORK_POLICIES]
    return [base, *(f"{base}-{s}" for s in suffixes)]


def volume_names(cfg: StackConfig) -> list[tuple[str, str, str]]:
    """(setting, resource name, PersistentVolume name) of every volume components/storage.py makes."""
    cluster = f"{NAMESPACE}-{cfg.stack}"
    found = [
        (f"{NAMESPACE}:fsx", f"{STORAGE_COMPONENT}-pv-health", f"{cluster}-fsx-health")
    ]  # no root volume: the layout client mounts it
    for i, team in enumerate(cfg.scheduler.teams):
        found.append(
            (
                f"{NAMESPACE}:scheduler.teams[{i}].name",
                f"{STORAGE_COMPONENT}-pv-{team.name}",
                f"{cluster}-fsx-{team.name}",
            )
        )
        for j, dataset in enumerate(cfg.fsx.datasets):
            if team.name == dataset.owner or team.name in dataset.readers:
                suffix = f"ds-{dataset.name}"
                found.append(
                    (
                        f"{NAMESPACE}:fsx.datasets[{j}].name",
                        f"{STORAGE_COMPONENT}-pv-{team.name}-{suffix}",
                        f"{cluster}-fsx-{team.name}-{suffix}",
                    )
                )
    return found


def asg_tag_resource_name(group: str, key: str) -> str:
    """The aws.autoscaling.Tag resource name of node group `group`'s ASG tag `key` (components/nodes.py
    tag_autoscaling_group): the key without the node-template prefix, its slashes as dashes."""
    return f"{group}-asg-{key.removeprefix(AUTOSCALER_TEMPLATE + '/').replace('/', '-')}"


def pool_tag_resource_names(group: str, template_tags: list[str]) -> list[str]:
    """The aws.autoscaling.Tag resource names of GPU pool group `group` (components/gpu_pools.py)."""
    return [f"{group}-asg-pool", *(asg_tag_resource_name(group, key) for key in template_tags)]


def _pool_names(cfg: StackConfig) -> Iterator[tuple[str, str]]:
    """The pools' label and taint tag resource names (the extended-resource tags have their own
    prefix, resources/, and cannot meet these)."""
    from infra.config.limits import GPU_TAINT_KEY, PLATFORM_LABELS, STARTUP_TAINT_KEY

    for i, pool in enumerate(cfg.gpu_pools):
        labels = [*PLATFORM_LABELS[:1], POOL_LABEL, *pool.labels]  # nvidia.com/gpu.present, the pool, the pool's own
        taints = [
            GPU_TAINT_KEY,
            *(t.key for t in pool.taints),
            *([STARTUP_TAINT_KEY] if pool.health_gate.enabled else []),
        ]
        keys = [f"{AUTOSCALER_TEMPLATE}/label/{k}" for k in dict.fromkeys(labels)] + [
            f"{AUTOSCALER_TEMPLATE}/taint/{k}" for k in dict.fromkeys(taints)
        ]
        for name in pool_tag_resource_names(f"gpu-{pool.name}", keys):
            yield f"{NAMESPACE}:gpuPools[{i}]", name


def _first_owner(entries: Iterator[tuple[str, str]], what: str) -> list[tuple[str, str]]:
    """A problem for each name that an earlier setting already derived."""
    owners: dict[str, str] = {}
    found = []
    for where, name in entries:
        if name in owners and owners[name] != where:
            found.append((where, f"derives the {what} {name!r}, which {owners[name]} derives too: rename one"))
        elif name in owners:
            found.append(
                (
                    where,
                    f"derives the {what} {name!r} twice (two of its labels or taints differ only in '/' and '-'): "
                    "rename one",
                )
            )
        owners.setdefault(name, where)
    return found


def collisions(cfg: StackConfig) -> list[tuple[str, str]]:
    """(full key, message) for every derived name that two settings share."""
    found: list[tuple[str, str]] = []
    # access entries: the admins, and the CI roles' entries (components/delivery.py)
    principals: list[tuple[str, str]] = [(f"{NAMESPACE}:admins[{i}]", arn) for i, arn in enumerate(cfg.admins)]
    if cfg.delivery is not None:
        partition = (
            "aws-cn" if cfg.region.startswith("cn-") else "aws-us-gov" if cfg.region.startswith("us-gov-") else "aws"
        )
        principals += [
            (
                f"{NAMESPACE}:delivery (its {purpose} role)",
                f"arn:{partition}:iam::{cfg.delivery.account_id}:role/{role_name(cfg.stack, purpose)}",
            )
            for purpose in ("preview", "deploy")
        ]
    seen: dict[str, str] = {}
    for where, arn in principals:
        if arn in seen:
            found.append(
                (
                    where if where.startswith(f"{NAMESPACE}:admins") else seen[arn],
                    f"{arn} has an access entry already "
                    f"({seen[arn] if where.startswith(f'{NAMESPACE}:admins') else where}); EKS allows one per "
                    "principal: remove the duplicate",
                )
            )
        seen.setdefault(arn, where)
    # team objects (namespace and its objects share one resource type: a name is a URN)
    found += _first_owner(
        (
            (f"{NAMESPACE}:scheduler.teams[{i}].name", n)
            for i in range(len(cfg.scheduler.teams))
            for n in team_resource_names(cfg, i)
        ),
        "resource name",
    )
    if cfg.fsx.enabled:
        # resource names and PersistentVolume names correspond one to one: one check covers both
        found += _first_owner(((w, r) for w, r, _ in volume_names(cfg)), "volume (resource and PersistentVolume) name")
    found += _first_owner(_pool_names(cfg), "autoscaler tag resource name")
    return list(dict.fromkeys(found))

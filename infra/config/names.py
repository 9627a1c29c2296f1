"""Names the program derives from settings, checked for collisions before anything is created
(issue #23). Two teams, datasets or pools whose derived names are equal would be a duplicate URN
(Pulumi stops the deploy midway: "Duplicate resource URN") or two objects with one name (the
second overwrites the first, or the API server refuses it); two access entries for one principal
are refused by EKS ("An IAM principal can't be included in more than one access entry",
docs.aws.amazon.com/eks/latest/userguide/creating-access-entries.html).

The names are derived here as the components derive them (components/teams.py Teams,
components/storage.py LustreFileSystem._volume / _pv_claim, components/gpu_pools.py GpuPoolGroup,
components/delivery.py); tests/test_hostile_inputs.py checks these functions against the names in
the recorded plans of the shipped stacks, so a component that renames its resources fails a test
until this module follows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from infra.config.base import NAMESPACE

if TYPE_CHECKING:
    from infra.config.stack import StackConfig

TEAMS_COMPONENT = "teams"  # infra/__main__.py: Teams("teams", ...)
STORAGE_COMPONENT = "lustre"  # infra/__main__.py: LustreFileSystem("lustre", ...)


def team_resource_names(cfg: StackConfig, team_index: int) -> list[str]:
    """The resource names components/teams.py gives team `team_index`'s objects."""
    from components import tenancy

    team = cfg.scheduler.teams[team_index]
    base = f"{TEAMS_COMPONENT}-{team.name}"
    suffixes = ["gpu", "admission", "admission-binding", "default-sa"]
    suffixes += [f"deny-{c.name}" for c in cfg.scheduler.priority_classes if c.name not in team.priority_classes]
    suffixes += [f"netpol-{n['metadata']['name']}" for n in tenancy.network_policies(team.name, monitoring_namespace="m", api_server_cidr="10.0.0.0/32")]
    return [base, *(f"{base}-{s}" for s in suffixes)]


def volume_names(cfg: StackConfig) -> list[tuple[str, str, str]]:
    """(setting, resource name, PersistentVolume name) of every volume components/storage.py makes."""
    cluster = f"{NAMESPACE}-{cfg.stack}"
    found = [(f"{NAMESPACE}:fsx", f"{STORAGE_COMPONENT}-pv-health", f"{cluster}-fsx-health"),
             (f"{NAMESPACE}:fsx", f"{STORAGE_COMPONENT}-pv-root", f"{cluster}-fsx-root")]
    for i, team in enumerate(cfg.scheduler.teams):
        found.append((f"{NAMESPACE}:scheduler.teams[{i}].name", f"{STORAGE_COMPONENT}-pv-{team.name}", f"{cluster}-fsx-{team.name}"))
        for j, dataset in enumerate(cfg.fsx.datasets):
            if team.name == dataset.owner or team.name in dataset.readers:
                suffix = f"ds-{dataset.name}"
                found.append((f"{NAMESPACE}:fsx.datasets[{j}].name", f"{STORAGE_COMPONENT}-pv-{team.name}-{suffix}", f"{cluster}-fsx-{team.name}-{suffix}"))
    return found


def pool_tag_resource_names(group: str, template_tags: list[str]) -> list[str]:
    """The aws.autoscaling.Tag resource names of GPU pool group `group` (components/gpu_pools.py)."""
    from components.gpu_pools import AUTOSCALER_TEMPLATE

    return [f"{group}-asg-pool", *(f"{group}-asg-{key.removeprefix(AUTOSCALER_TEMPLATE + '/').replace('/', '-')}" for key in template_tags)]


def _pool_names(cfg: StackConfig) -> Iterator[tuple[str, str]]:
    from components.gpu_pools import autoscaler_template_tags

    for i, pool in enumerate(cfg.gpu_pools):
        if pool._instance is None:  # not validated against the catalog: its tags are unknown
            continue
        for name in pool_tag_resource_names(f"gpu-{pool.name}", list(autoscaler_template_tags(pool))):
            yield f"{NAMESPACE}:gpuPools[{i}]", name


def _first_owner(entries: Iterator[tuple[str, str]], what: str) -> list[tuple[str, str]]:
    """A problem for each name that an earlier setting already derived."""
    owners: dict[str, str] = {}
    found = []
    for where, name in entries:
        if name in owners and owners[name] != where:
            found.append((where, f"derives the {what} {name!r}, which {owners[name]} derives too: rename one"))
        elif name in owners:
            found.append((where, f"derives the {what} {name!r} twice (two of its labels or taints differ only in '/' and '-'): rename one"))
        owners.setdefault(name, where)
    return found


def collisions(cfg: StackConfig) -> list[tuple[str, str]]:
    """(full key, message) for every derived name that two settings share."""
    found: list[tuple[str, str]] = []
    # access entries: the admins, and the CI roles' entries (components/delivery.py)
    principals: list[tuple[str, str]] = [(f"{NAMESPACE}:admins[{i}]", arn) for i, arn in enumerate(cfg.admins)]
    if cfg.delivery is not None:
        from infra.cli.stacks import role_name

        partition = "aws-cn" if cfg.region.startswith("cn-") else "aws-us-gov" if cfg.region.startswith("us-gov-") else "aws"
        principals += [(f"{NAMESPACE}:delivery (its {purpose} role)", f"arn:{partition}:iam::{cfg.delivery.account_id}:role/{role_name(cfg.stack, purpose)}")
                       for purpose in ("preview", "deploy")]
    seen: dict[str, str] = {}
    for where, arn in principals:
        if arn in seen:
            found.append((where if where.startswith(f"{NAMESPACE}:admins") else seen[arn],
                          f"{arn} has an access entry already ({seen[arn] if where.startswith(f'{NAMESPACE}:admins') else where}); EKS allows one per principal: remove the duplicate"))
        seen.setdefault(arn, where)
    # team objects (namespace and its objects share one resource type: a name is a URN)
    found += _first_owner(((f"{NAMESPACE}:scheduler.teams[{i}].name", n) for i in range(len(cfg.scheduler.teams)) for n in team_resource_names(cfg, i)),
                          "resource name")
    if cfg.fsx.enabled:
        # resource names and PersistentVolume names correspond one to one: one check covers both
        found += _first_owner(((w, r) for w, r, _ in volume_names(cfg)), "volume (resource and PersistentVolume) name")
    found += _first_owner(_pool_names(cfg), "autoscaler tag resource name")
    return list(dict.fromkeys(found))

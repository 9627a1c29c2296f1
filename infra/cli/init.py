"""`higgsfield init STACK --region R [--from EXISTING]`: a stack of one's own in another region.

Copies stacks/Pulumi.EXISTING.yaml (comments kept) and policies/config/EXISTING.json, and moves
what is regional: aws:region, the availability zones (ones that offer every GPU pool's instance
types and the system nodes' types, per AWS's catalog as bundled with moto), each pool's zone,
and the FSx zone (left to its default: the EFA pools' zone). What cannot move - a capacity
reservation or Capacity Block belongs to one AZ of one account - becomes on-demand, with a note.
The new stack is validated like any other before anything is written.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from infra.bundled import source, where_offered, zone_offerings
from infra.cli.jobs import round_trip_yaml
from infra.cli.offline import StackNotFound, project_root
from infra.config import DNS_LABEL, ConfigError, eks_regions

G = "higgsfield"


@dataclass
class NewStack:
    name: str
    region: str
    source: str
    stack_file: Path
    policy_file: Path
    stack_text: str
    policy_text: str
    notes: list[str] = field(default_factory=list)


def _replace(seq: list, values: list) -> None:
    """Replace a YAML sequence's items in place (its flow style and comments stay)."""
    seq[:] = values


def _zone_for(types: list[str], region: str, offered: dict[str, frozenset[str]], prefer: list[str], key: str) -> str:
    zones = sorted(z for z, have in offered.items() if set(types) <= have)
    if not zones:
        missing = [t for t in types if not any(t in have for have in offered.values())]
        if missing:
            raise ConfigError(key, "; ".join(f"instance type {t!r} is not offered anywhere in {region}; {where_offered(t, region)}" for t in missing))
        per_type = "; ".join(f"{t}: {', '.join(sorted(z for z, have in offered.items() if t in have))}" for t in types)
        raise ConfigError(key, f"no AZ of {region} offers all of {', '.join(types)} ({per_type}; {source()}): split the pool or drop a type")
    return next((z for z in prefer if z in zones), zones[0])


def new_stack(name: str, region: str, base: str = "dev", root: Path | None = None) -> NewStack:
    """The files of stack `name` in `region`, made from stack `base` (nothing written yet)."""
    root = root or project_root()
    if not re.fullmatch(DNS_LABEL, name):
        raise ConfigError("STACK", f"{name!r} is not a valid stack name: a lowercase DNS label of at most 30 characters (it names the cluster, PVs and namespaces)")
    stack_file, policy_file = root / "stacks" / f"Pulumi.{name}.yaml", root / "policies" / "config" / f"{name}.json"
    for path in (stack_file, policy_file):
        if path.exists():
            raise ConfigError("STACK", f"{path.relative_to(root)} exists already; pick another name (or delete it)")
    base_file = root / "stacks" / f"Pulumi.{base}.yaml"
    if not base_file.is_file():
        raise StackNotFound(f"--from {base}: {base_file.relative_to(root)} not found")
    if region not in eks_regions():
        raise ConfigError("--region", f"{region!r} is not an AWS region with EKS; known: {', '.join(eks_regions())}")
    offered = zone_offerings(region)
    if not offered:
        raise ConfigError("--region", f"{source()} has no instance-type offerings for {region}, so no AZs can be chosen offline")

    y = round_trip_yaml()
    doc = y.load(base_file.read_text())
    config = doc["config"]
    result = NewStack(name, region, base, stack_file, policy_file, "", "")
    old_region = config["aws:region"]
    config["aws:region"] = region

    pool_zones: list[str] = []
    for i, pool in enumerate(config.get(f"{G}:gpuPools") or []):
        zone = _zone_for(list(pool["instanceTypes"]), region, offered, pool_zones, f"{G}:gpuPools[{i}].instanceTypes")
        pool["availabilityZone"] = zone
        pool_zones.append(zone)
        capacity = pool.get("capacity") or {}
        if capacity.get("type") in ("reservation", "capacity-block"):
            result.notes.append(
                f"gpuPools[{i}] ({pool['name']}): {capacity['type']} {capacity.get('reservationId')} is {base}'s, in {old_region}; "
                f"the new stack buys on-demand until you set capacity to a reservation of yours in {zone}"
            )
            pool["capacity"] = {"type": "on-demand"}
            if pool.get("placementGroup") is False:
                del pool["placementGroup"]  # reservations bring their own placement; on-demand EFA needs the group

    cpu_types = list((config.get(f"{G}:cpuNodes") or {}).get("instanceTypes") or [])
    for t in cpu_types:
        if not any(t in have for have in offered.values()):
            raise ConfigError(f"{G}:cpuNodes.instanceTypes", f"instance type {t!r} is not offered anywhere in {region}; {where_offered(t, region)}")
    # The pools' zones first, then others that offer the system nodes' types, as many as the base had.
    wanted = max(2, len(config.get(f"{G}:availabilityZones") or []), len(set(pool_zones)))
    others = sorted(z for z, have in offered.items() if z not in pool_zones and set(cpu_types) <= have)
    zones = list(dict.fromkeys(pool_zones)) + others
    if len(zones) < wanted:
        raise ConfigError(f"{G}:availabilityZones", f"{region} has {len(zones)} AZs that offer the stack's instance types ({source()}); the stack needs {wanted}")
    _replace(config[f"{G}:availabilityZones"], sorted(zones[:wanted]))

    fsx = config.get(f"{G}:fsx")
    if fsx is not None and "availabilityZone" in fsx:
        del fsx["availabilityZone"]  # its default: the EFA pools' zone
    if fsx is not None and fsx.get("s3"):
        result.notes.append(f"fsx.s3.bucket {fsx['s3'].get('bucket')!r} is {base}'s (in {old_region}): point it at a bucket of yours in {region}")
    if config.get(f"{G}:trainingImage") and f".{old_region}." in str(config[f"{G}:trainingImage"]):
        result.notes.append(f"trainingImage names a registry in {old_region}: jobs pull it across regions unless you push it to {region}")
    config.pop(f"{G}:allowReplace", None)  # the base's intended replacements are not the new stack's

    text = io.StringIO()
    y.dump(doc, text)
    result.stack_text = text.getvalue()
    base_policy = root / "policies" / "config" / f"{base}.json"
    result.policy_text = base_policy.read_text() if base_policy.is_file() else json.dumps({}, indent=2) + "\n"
    if not base_policy.is_file():
        result.notes.append(f"{base} has no policy config: {policy_file.relative_to(root)} runs every policy at its default level")
    return result


def write(stack: NewStack, root: Path | None = None) -> None:
    """Write the stack's files, then read the stack back through the config loader; a stack that
    does not validate is removed again and its problems raised."""
    from infra.cli.offline import load_stack

    root = root or project_root()
    stack.policy_file.parent.mkdir(parents=True, exist_ok=True)
    stack.stack_file.write_text(stack.stack_text)
    stack.policy_file.write_text(stack.policy_text)
    try:
        load_stack(stack.name, root)
    except ConfigError:
        stack.stack_file.unlink()
        stack.policy_file.unlink()
        raise


def render(stack: NewStack, root: Path) -> str:
    lines = [
        f"wrote {stack.stack_file.relative_to(root)} (from {stack.source}, region {stack.region}) and {stack.policy_file.relative_to(root)}",
        *(f"  note: {n}" for n in stack.notes),
        f"next: higgsfield plan {stack.name}; higgsfield check {stack.name}; higgsfield cost {stack.name}; "
        f"with credentials for the account: higgsfield preflight {stack.name}",
    ]
    return "\n".join(lines)

"""`higgsfield init STACK --region R [--from EXISTING] [--gpu-pool ...] [--team ...] ...`: a stack of
one's own, in another region, with one's own instance types, pools, sizes and teams.

Copies stacks/Pulumi.EXISTING.yaml (comments kept) and policies/config/EXISTING.json, and moves
what is regional: aws:region, the availability zones (ones that offer every GPU pool's instance
types and the system nodes' types, per AWS's catalog as bundled with moto), each pool's zone
(every EFA pool in one zone, the zone FSx then takes by default), and the FSx zone. Flags replace
the GPU pools (`--gpu-pool NAME:TYPE[,TYPE]:MIN-MAX`), the system nodes' types (`--cpu-type`), the
teams (`--team NAME[:GPUS]`), the environment, the cluster admins (`--admin ARN`) and who reaches the
public API endpoint (`--public-access-cidr CIDR`; the base's documentation ranges are not copied).

What belongs to another account, region or CI is never carried over silently: a capacity
reservation or Capacity Block (one AZ of one account) becomes on-demand; the CI connection, state
bucket and key (`higgsfield:delivery`), a training image in another region's registry and the S3
link are cleared, each with a note saying how to set the new stack's own, and so is a health gate
image (the gate runs it privileged on every GPU node); the admins are asked for (`--admin`,
required), never copied.
The new stack is validated like any other before anything is written: in a scratch copy of the
project, so an interrupted or refused init leaves nothing in stacks/. The files are then published
under a lock (on the stacks folder), each by a hard link that fails if the name exists, so two inits
at once never write over each other's stack, and a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import ipaddress
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from infra.config import DNS_LABEL, ConfigError, eks_regions
from infra.config.errors import Problem
from infra.config.limits import off_the_internet
from infra.config.stack import not_an_eks_region
from infra.core.assets import shipped
from infra.core.bundled import instance_types, source, where_offered, zone_offerings
from infra.core.internet import MAX_INTERNET_SHARE, internet_share
from infra.core.names import DNS_LABEL_RULE
from infra.core.names import NAMESPACE as G
from infra.offline.evaluate import StackNotFound, project_root, stack_names
from infra.offline.jobs import round_trip_yaml
from infra.offline.stack_file import read_project


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
    project_files: list[Path] = field(default_factory=list)  # what init wrote besides the stack (a new project)
    ci_files: list[Path] = field(default_factory=list)  # the workflows and requirements --ci wrote


def _replace(seq: list, values: list) -> None:
    """Replace a YAML sequence's items in place (its flow style and comments stay)."""
    seq[:] = values


def _zone_for(types: list[str], region: str, offered: dict[str, frozenset[str]], prefer: list[str], key: str) -> str:
    zones = sorted(z for z, have in offered.items() if set(types) <= have)
    if not zones:
        missing = [t for t in types if not any(t in have for have in offered.values())]
        if missing:
            raise ConfigError(
                key,
                "; ".join(
                    f"instance type {t!r} is not offered anywhere in {region}; {where_offered(t, region)}"
                    for t in missing
                ),
            )
        per_type = "; ".join(f"{t}: {', '.join(sorted(z for z, have in offered.items() if t in have))}" for t in types)
        raise ConfigError(
            key,
            f"no AZ of {region} offers all of {', '.join(types)} ({per_type}; {source()}): split the pool or drop a "
            "type",
        )
    return next((z for z in prefer if z in zones), zones[0])


@dataclass(frozen=True)
class PoolSpec:
    """`--gpu-pool NAME:TYPE[,TYPE...][:MIN-MAX]`: an on-demand GPU pool (sizes default 0-2)."""

    name: str
    instance_types: tuple[str, ...]
    min_size: int = 0
    max_size: int = 2

    @classmethod
    def parse(cls, text: str) -> PoolSpec:
        parts = text.split(":")
        sizes = re.fullmatch(r"([0-9]{1,9})-([0-9]{1,9})", parts[2]) if len(parts) == 3 else None
        if len(parts) not in (2, 3) or not parts[0] or not parts[1] or (len(parts) == 3 and not sizes):
            raise ConfigError(
                "--gpu-pool", f"{text!r} is not NAME:TYPE[,TYPE...][:MIN-MAX] (e.g. h100:p5.48xlarge:0-4)"
            )
        low, high = (int(sizes[1]), int(sizes[2])) if sizes else (0, 2)
        if low > high:
            raise ConfigError("--gpu-pool", f"{text!r}: its minimum {low} is above its maximum {high} (MIN-MAX nodes)")
        return cls(parts[0], tuple(parts[1].split(",")), low, high)


@dataclass(frozen=True)
class TeamSpec:
    """`--team NAME[:GPUS]`: a team on the stack's first queue with every priority class."""

    name: str
    gpus: int | None = None

    @classmethod
    def parse(cls, text: str) -> TeamSpec:
        match = re.fullmatch(r"([^:]+)(?::([0-9]{1,9}))?", text)
        if not match:
            raise ConfigError("--team", f"{text!r} is not NAME[:GPUS] (e.g. vision:8)")
        if not re.fullmatch(DNS_LABEL, match[1]):  # one line: it names both the team and its queue
            raise ConfigError(f"--team {text}", f"the team's name {match[1]!r} must be {DNS_LABEL_RULE}")
        return cls(match[1], int(match[2]) if match[2] is not None else None)


@dataclass(frozen=True)
class Choices:
    """What the flags of `init` say; None keeps the base stack's."""

    pools: tuple[PoolSpec, ...] = ()
    cpu_types: tuple[str, ...] = ()
    teams: tuple[TeamSpec, ...] = ()
    environment: str | None = None
    admins: tuple[str, ...] = ()
    public_access_cidrs: tuple[str, ...] = ()


def _gpus(instance_type: str) -> int:
    facts = instance_types().get(instance_type) or {}
    return sum(g.get("Count", 0) for g in (facts.get("GpuInfo") or {}).get("Gpus", []))


def _efa(instance_type: str) -> bool:
    return bool(((instance_types().get(instance_type) or {}).get("NetworkInfo") or {}).get("EfaSupported"))


TEAM_UID_BASE, TEAM_UID_SPAN = 20000, 1_000_000  # above system and login UIDs, far below 2^31


def _team_uid(name: str, taken: set) -> int:
    """A team's UID from its name (20000 and up), so the same team owns its files under the same UID
    in every stack init makes, whichever stack it starts from; the next free one on a clash (added
    to `taken`)."""
    import zlib

    uid = TEAM_UID_BASE + zlib.crc32(name.encode()) % TEAM_UID_SPAN
    while uid in taken:
        uid += 1
    taken.add(uid)
    return uid


def _apply_choices(config: dict, choices: Choices, result: NewStack, base: str) -> None:
    """The flags' pools, system-node types, teams, environment and admins, in the copied config."""
    if choices.pools:
        config[f"{G}:gpuPools"] = [
            {
                "name": p.name,
                "instanceTypes": list(p.instance_types),
                "availabilityZone": "",
                "minSize": p.min_size,
                "maxSize": p.max_size,
            }
            for p in choices.pools
        ]
        total = sum(p.max_size * _gpus(p.instance_types[0]) for p in choices.pools)
        for queue in (config.get(f"{G}:scheduler") or {}).get("queues") or []:
            queue["gpuCapability"] = min(
                queue.get("gpuCapability", total), total
            )  # what the new pools can provide at most
        capability = {q["name"]: q["gpuCapability"] for q in (config.get(f"{G}:scheduler") or {}).get("queues") or []}
        for team in (config.get(f"{G}:scheduler") or {}).get("teams") or []:
            team["gpuQuota"] = capability.get(
                team.get("queue"), min(team.get("gpuQuota", total), total)
            )  # a team's queue is its quota
            if "servingGpuQuota" in team:
                team["servingGpuQuota"] = min(team["servingGpuQuota"], team["gpuQuota"])
    if choices.cpu_types:
        config.setdefault(f"{G}:cpuNodes", {})["instanceTypes"] = list(choices.cpu_types)
    if choices.teams:
        scheduler = config.setdefault(f"{G}:scheduler", {})
        queues = scheduler.get("queues") or []
        if not queues:
            raise ConfigError("--team", f"{base} has no higgsfield:scheduler.queues for the teams to submit to")
        most = sum(
            p.get("maxSize", 0) * _gpus(p["instanceTypes"][0]) for p in config.get(f"{G}:gpuPools") or []
        )  # every GPU the pools hold
        specs = scheduler.get("priorityClasses") or []
        classes = [c["name"] for c in specs]
        serving = any(c.get("workload") == "serving" for c in specs)
        taken = {t.get("uid") for t in scheduler.get("teams") or []}
        # Each team a queue of its own: the queue's capability is the team's GPU quota, whole gangs
        # at a time (docs/design/autoscaler-demand.md); serving classes get a quarter of it.
        gpus = {t.name: most if t.gpus is None else t.gpus for t in choices.teams}
        scheduler["queues"] = [{"name": t.name, "weight": 1, "gpuCapability": gpus[t.name]} for t in choices.teams]
        scheduler["teams"] = [
            {
                "name": t.name,
                "queue": t.name,
                "gpuQuota": gpus[t.name],
                "priorityClasses": list(classes),
                "uid": _team_uid(t.name, taken),
                **({"servingGpuQuota": max(1, gpus[t.name] // 4) if gpus[t.name] else 0} if serving else {}),
            }
            for t in choices.teams
        ]
        owners = {t.name for t in choices.teams}
        fsx = config.get(f"{G}:fsx") or {}
        if any(d.get("owner") not in owners for d in fsx.get("datasets") or []):
            fsx.pop("datasets", None)
            result.notes.append(f"fsx.datasets named {base}'s teams: removed; add datasets owned by the new teams")
    if choices.environment:
        config[f"{G}:environment"] = choices.environment
    if choices.admins:
        config[f"{G}:admins"] = list(choices.admins)


def _endpoint(config: dict, choices: Choices, result: NewStack, base: str) -> None:
    """The flags' public endpoint allow-list; without them the base's, less its documentation
    ranges (the shipped stacks' placeholders: no request comes from them)."""
    from infra.config.limits import documentation_range

    endpoint = config.get(f"{G}:endpoint") or {}
    cidrs = endpoint.get("publicAccessCidrs")
    if choices.public_access_cidrs:
        config[f"{G}:endpoint"] = endpoint
        if cidrs is None:
            endpoint["publicAccessCidrs"] = list(choices.public_access_cidrs)
        else:
            _replace(cidrs, list(choices.public_access_cidrs))
        return
    placeholders = [c for c in cidrs or [] if documentation_range(str(c))]
    if placeholders:
        _replace(cidrs, [c for c in cidrs if c not in placeholders])
        private = "" if cidrs else "; the API endpoint is private: kubectl from the VPC or the VPN"
        result.notes.append(
            f"endpoint.publicAccessCidrs {', '.join(map(str, placeholders))} of {base} is a documentation range no "
            "request "
            f"comes from: not copied{private}; --public-access-cidr YOUR-EGRESS/32 (repeatable) lets kubectl in from "
            "there"
        )


def _clear_what_is_not_ours(
    config: dict, result: NewStack, base: str, old_region: str, region: str, admins_given: bool
) -> None:
    """Settings bound to the base's account, region or CI are cleared, each with a note."""
    delivery = config.pop(f"{G}:delivery", None)
    if delivery is not None:
        result.notes.append(
            f"higgsfield:delivery (CI: account {delivery.get('accountId')}, state bucket, state key, GitHub "
            f"connection) is {base}'s: "
            f"not copied; add the new stack's own, then `higgsfield bootstrap {result.name}` prints the first deploy"
        )
    if not admins_given:  # asked for, never copied: they are another account's principals
        raise ConfigError(
            "--admin",
            f"the new stack needs the IAM role or user ARN (repeatable) of who administers its cluster; "
            f"{base}'s admins are not copied. Their account also names the registry of the training image",
        )
    image = config.get(f"{G}:trainingImage")
    if image and (f".{old_region}." in str(image) or ".ecr." in str(image)):
        del config[f"{G}:trainingImage"]
        result.notes.append(
            f"trainingImage {image} is in {base}'s registry: not copied; the stack builds its own into its ECR in "
            f"{region} "
            f"(`higgsfield image build {result.name}`, docs/training-image.md)"
        )
    gate = config.pop(f"{G}:healthGateImage", None)
    if gate:  # it runs privileged on every GPU node: set for a stack on purpose, never inherited
        result.notes.append(
            f"healthGateImage {gate} is {base}'s: not copied, since the health gate runs it privileged on every GPU "
            "node; "
            f"the gate runs the stack's own training image (`higgsfield image build {result.name}`), or set "
            "healthGateImage yourself"
        )
    fsx = config.get(f"{G}:fsx")
    if fsx is not None and fsx.get("s3"):
        bucket = fsx.pop("s3").get("bucket")
        checkpoints = config.get(f"{G}:checkpoints") or {}
        if checkpoints.get("exportToS3"):
            checkpoints["exportToS3"] = False
        result.notes.append(
            f"fsx.s3 linked {base}'s bucket {bucket!r} (in {old_region}): not copied; link a bucket of yours in "
            f"{region} (fsx.s3)"
        )


def _drop_secrets(doc: dict, result: NewStack, base: str) -> None:
    """The base's encrypted values and its secrets provider, key and salt are not copied: the
    ciphertexts are the base stack's (Pulumi re-encrypts a copied secret with the new stack's key,
    which needs the value; offline it is unknown), and a shared salt or data key would let the new
    stack's passphrase or KMS key open the base's secrets. Each dropped value is noted."""
    dropped = [key for key in ("secretsprovider", "encryptedkey", "encryptionsalt") if doc.pop(key, None) is not None]
    where: list[str] = []

    def secret(value: object) -> bool:
        return isinstance(value, dict) and list(value) == ["secure"]

    def strip(value: object, loc: str) -> None:
        if isinstance(value, dict):
            for key in [k for k, v in value.items() if secret(v)]:
                del value[key]
                where.append(f"{loc}.{key}" if loc else str(key))
            for key, item in value.items():
                strip(item, f"{loc}.{key}" if loc else str(key))
        elif isinstance(value, list):
            for i in [i for i, v in enumerate(value) if secret(v)][::-1]:
                del value[i]
                where.append(f"{loc}[{i}]")
            for i, item in enumerate(value):
                strip(item, f"{loc}[{i}]")

    strip(doc["config"], "")
    if where:
        result.notes.append(
            f"{', '.join(sorted(where))}: encrypted with {base}'s key: not copied; set each for {result.name} with "
            f"`pulumi config set --secret KEY ...` (--path for one inside a setting)"
        )
    if dropped:
        result.notes.append(
            f"{', '.join(dropped)} of {base}: not copied (its keys); `pulumi stack init {result.name} "
            "--secrets-provider ...` makes the new stack's own"
        )


def new_stack(
    name: str, region: str, base: str = "dev", root: Path | None = None, choices: Choices = Choices()
) -> NewStack:
    """The files of stack `name` in `region`, made from stack `base` and the flags' `choices`
    (nothing written yet)."""
    root = root or project_root()
    if os.path.lexists(root / "Pulumi.yaml"):  # the project init writes into, refused in one line if it is none
        read_project(root / "Pulumi.yaml")  # (no Pulumi.yaml at all: init makes the project, start_project)
    if not re.fullmatch(DNS_LABEL, name):
        raise ConfigError(
            "STACK",
            f"{name!r} is not a valid stack name: a lowercase DNS label of at most 30 characters (it names the "
            "cluster, PVs and namespaces)",
        )
    stack_file, policy_file = root / "stacks" / f"Pulumi.{name}.yaml", root / "policies" / "config" / f"{name}.json"
    for path in (stack_file, policy_file):
        if path.exists():
            raise ConfigError("STACK", f"{path.relative_to(root)} exists already; pick another name (or delete it)")
    base_file = base_stack_file(root, base)
    if not base_file.is_file():
        raise StackNotFound(
            f"--from {base}: stacks/Pulumi.{base}.yaml not found in {root} nor among the shipped stacks "
            f"({', '.join(stack_names(shipped('')))})"
        )
    if region not in eks_regions():
        raise ConfigError("--region", not_an_eks_region(region))
    for cidr in choices.public_access_cidrs:  # before it is written: `::/0` would not even be YAML in a flow list
        try:
            ipaddress.IPv4Network(cidr)
        except ValueError as exc:
            raise ConfigError(f"--public-access-cidr {cidr}", f"{cidr!r} is not an IPv4 CIDR ({exc})") from None
    # the policy pack's eks-endpoint-restricted refuses such a stack at every deploy (policies/rules.py): said here,
    # before the stack file is written, naming the widest range (one the settings refuse, off the internet, is theirs
    # to name; the pack counts every other range)
    public = [c for c in choices.public_access_cidrs if not off_the_internet(ipaddress.IPv4Network(c))]
    if public and internet_share(public) > MAX_INTERNET_SHARE:
        widest = min(public, key=lambda c: ipaddress.IPv4Network(c).prefixlen)
        raise ConfigError(
            f"--public-access-cidr {widest}",
            f"the ranges open the API server to {internet_share(public):.4%} of the internet, "
            f"more than the policy pack's eks-endpoint-restricted allows ({MAX_INTERNET_SHARE:.4%}, a /16): name your "
            "office or VPN egress ranges (a /32 each), or none to keep the endpoint private",
        )
    offered = zone_offerings(region)
    if not offered:
        raise ConfigError(
            "--region",
            f"{source()} has no instance-type offerings for {region}, so init cannot choose its AZs: copy a stack "
            f"file and set aws:region and the zones yourself (its types and zones are checked by `higgsfield "
            f"preflight {name}`)",
        )

    from infra.offline.stack_file import read

    base_stack = read(base_file)  # the reader's bounds (size, depth, aliases, types) before ruamel reads it
    if base_stack.problems:
        first = base_stack.problems[0]
        raise StackNotFound(
            f"--from {base}: {base_file}:{first.line or 1} {first.key}: {first.message} "
            f"(`higgsfield plan {base}` lists every problem)"
        )
    y = round_trip_yaml()
    doc = y.load(base_file.read_text())
    config = doc["config"]
    if not choices.pools:
        _refuse_pools_not_offered(name, region, base, root, choices, config.get(f"{G}:gpuPools") or [], offered)
    result = NewStack(name, region, base, stack_file, policy_file, "", "")
    old_region = config["aws:region"]
    config["aws:region"] = region
    _apply_choices(config, choices, result, base)
    _clear_what_is_not_ours(config, result, base, old_region, region, bool(choices.admins))
    _drop_secrets(doc, result, base)
    _endpoint(config, choices, result, base)

    pools = config.get(f"{G}:gpuPools") or []
    # Every EFA pool in one zone (one that offers all their types), where FSx goes by default:
    # reads and checkpoints never cross AZs.
    efa_pools = [p for p in pools if p.get("efa", True) and _efa(p["instanceTypes"][0])]
    efa_types = {t for p in efa_pools for t in p["instanceTypes"]}
    shared = sorted(z for z, have in offered.items() if efa_types and efa_types <= have)
    pool_zones: list[str] = shared[:1]
    if len(efa_pools) > 1 and not shared:
        result.notes.append(
            f"no AZ of {region} offers every EFA pool's types ({', '.join(sorted(efa_types))}): the EFA pools are in "
            "different AZs and FSx is in the first one's, so the others read and checkpoint across AZs"
        )
    for i, pool in enumerate(pools):
        zone = _zone_for(list(pool["instanceTypes"]), region, offered, pool_zones, f"{G}:gpuPools[{i}].instanceTypes")
        pool["availabilityZone"] = zone
        pool_zones.append(zone)
        capacity = pool.get("capacity") or {}
        if capacity.get("type") in ("reservation", "capacity-block"):
            result.notes.append(
                f"gpuPools[{i}] ({pool['name']}): {capacity['type']} {capacity.get('reservationId')} is {base}'s, in "
                f"{old_region}; "
                f"the new stack buys on-demand until you set capacity to a reservation of yours in {zone}"
            )
            pool["capacity"] = {"type": "on-demand"}
            if pool.get("placementGroup") is False:
                del pool["placementGroup"]  # reservations bring their own placement; on-demand EFA needs the group

    cpu_types = list((config.get(f"{G}:cpuNodes") or {}).get("instanceTypes") or [])
    for t in cpu_types:
        if not any(t in have for have in offered.values()):
            raise ConfigError(
                f"{G}:cpuNodes.instanceTypes",
                f"instance type {t!r} is not offered anywhere in {region}; {where_offered(t, region)}",
            )
    # The pools' zones first, then others that offer the system nodes' types, as many as the base had.
    wanted = max(2, len(config.get(f"{G}:availabilityZones") or []), len(set(pool_zones)))
    others = sorted(z for z, have in offered.items() if z not in pool_zones and set(cpu_types) <= have)
    zones = list(dict.fromkeys(pool_zones)) + others
    if len(zones) < wanted:
        raise ConfigError(
            f"{G}:availabilityZones",
            f"{region} has {len(zones)} AZs that offer the stack's instance types ({source()}); the stack needs "
            f"{wanted}",
        )
    _replace(config[f"{G}:availabilityZones"], sorted(zones[:wanted]))

    fsx = config.get(f"{G}:fsx")
    if fsx is not None and "availabilityZone" in fsx:
        del fsx["availabilityZone"]  # its default: the EFA pools' zone
    config.pop(f"{G}:allowReplace", None)  # the base's intended replacements are not the new stack's

    text = io.StringIO()
    y.dump(doc, text)
    result.stack_text = text.getvalue()
    base_policy = base_file.parents[1] / "policies" / "config" / f"{base}.json"
    result.policy_text = base_policy.read_text() if base_policy.is_file() else json.dumps({}, indent=2) + "\n"
    if not base_policy.is_file():
        result.notes.append(
            f"{base} has no policy config: {policy_file.relative_to(root)} runs every policy at its default level"
        )
    return result


def _refuse_pools_not_offered(
    name: str, region: str, base: str, root: Path, choices: Choices, pools: list, offered: dict[str, frozenset[str]]
) -> None:
    """The base's pools, copied without --gpu-pool, each need their types in `region`: a pool whose
    types are not offered there is refused in one line that names the pools, the flag that replaces
    them and, where the catalog has one that validates, the nearest offered pools as flags to paste.
    Never substituted silently: a GPU type decides what fits and what it costs."""
    everywhere = frozenset().union(*offered.values())
    missing = [p for p in pools if not set(p.get("instanceTypes") or []) <= everywhere]
    if not missing:
        return
    what = "; ".join(f"{p['name']} ({', '.join(p['instanceTypes'])})" for p in missing)
    nearest = {t: _nearest_offered(t, everywhere) for p in missing for t in p["instanceTypes"] if t not in everywhere}
    hint = ""
    if all(nearest.values()):
        specs = tuple(
            PoolSpec(
                p["name"],
                tuple(dict.fromkeys(nearest.get(t) or t for t in p["instanceTypes"])),
                int(p.get("minSize", 0)),
                int(p.get("maxSize", 2)),
            )
            for p in pools
        )
        placeholder = ("arn:aws:iam::000000000000:role/placeholder",)  # the suggestion is checked, not written
        try:
            new_stack(
                name,
                region,
                base,
                root,
                Choices(**{**vars(choices), "pools": specs, "admins": choices.admins or placeholder}),
            )
        except ConfigError:
            specs = ()
        if specs:
            flags = " ".join(
                f"--gpu-pool {s.name}:{','.join(s.instance_types)}:{s.min_size}-{s.max_size}" for s in specs
            )
            swaps = "; ".join(
                dict.fromkeys(
                    f"{n} for {t}: the same {_gpu_words(t)}"
                    if _gpu_words(n) == _gpu_words(t)
                    else f"{_gpu_words(n)} for {_gpu_words(t)}"
                    for t, n in nearest.items()
                    if n
                )
            )
            hint = f"; the nearest offered there, on demand: {flags} ({swaps})"
    raise ConfigError(
        "--region",
        f"{base}'s GPU pool{'s' if len(missing) > 1 else ''} {what} {'are' if len(missing) > 1 else 'is'} not offered "
        f"in {region} ({source()}): pass the pools as --gpu-pool NAME:TYPE:MIN-MAX (`higgsfield types {region}` "
        f"lists the GPU types each AZ offers){hint}; nothing was written",
    )


def _gpu_facts(instance_type: str) -> tuple[int, int, str, bool, int]:
    """(GPUs, GiB of one GPU, GPU model, EFA, vCPUs) of a type, from the bundled catalog."""
    facts = instance_types().get(instance_type) or {}
    gpu_info = facts.get("GpuInfo") or {}
    gpus = _gpus(instance_type)
    model = " ".join(dict.fromkeys(str(g.get("Name", "")) for g in gpu_info.get("Gpus", [])))
    per_gpu = gpu_info.get("TotalGpuMemoryInMiB", 0) // max(1, gpus) // 1024
    return gpus, per_gpu, model, _efa(instance_type), (facts.get("VCpuInfo") or {}).get("DefaultVCpus", 0)


def _gpu_words(instance_type: str) -> str:
    gpus, per_gpu, model, _, _ = _gpu_facts(instance_type)
    return f"{gpus} x {model} {per_gpu} GiB"


def _nearest_offered(instance_type: str, offered: frozenset[str]) -> str | None:
    """The offered GPU type nearest `instance_type`: as many GPUs a node (the quotas count them),
    EFA if it has EFA (multi-node training), then the closest memory of one GPU (what a model
    needs; on a tie the larger, and never under half of it: a T4 is no stand-in for an H100), the
    closest vCPUs, then the closest name (g6e -> g6)."""
    import difflib

    gpus, per_gpu, _, efa, vcpus = _gpu_facts(instance_type)
    if not gpus:
        return None
    candidates = [t for t in offered if _gpus(t) == gpus and (_efa(t) or not efa) and 2 * _gpu_facts(t)[1] >= per_gpu]

    def distance(other: str) -> tuple[int, bool, int, float, str]:
        _, their_gib, _, _, their_vcpus = _gpu_facts(other)
        similarity = difflib.SequenceMatcher(None, instance_type, other).ratio()
        return abs(their_gib - per_gpu), their_gib < per_gpu, abs(their_vcpus - vcpus), -similarity, other

    return min(candidates, key=distance, default=None)


def base_stack_file(root: Path, base: str) -> Path:
    """The stack `--from` names: the project's own, else the shipped one of that name (a project
    made by init in an empty folder starts from the shipped dev, staging or prod)."""
    own = root / "stacks" / f"Pulumi.{base}.yaml"
    return own if own.is_file() else shipped(f"stacks/Pulumi.{base}.yaml")


# What a project made in an empty folder holds besides its stacks: the project file, whose program
# and policy pack are the installed package's, run through two small entry points. Pulumi's Python
# host runs the project's `main` (the project folder by default) with runpy.run_path, which runs a
# folder's __main__.py
# (pulumi/pulumi:sdk/python/cmd/pulumi-language-python-exec@0491e0d1a5054b2977f1c119c04ccd34920556a4).
# The entry point's own folder leaves the import path first, so a folder of the project named
# `infra` (or `policies`) never stands in for the installed package.
_ENTRY = '''"""This project's {what}: the installed higgsfield package's ({source})."""

import runpy
import sys
from pathlib import Path

# The installed package's `{module}`, never a folder of that name here: this folder leaves the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != _HERE]
runpy.run_module("{module}", run_name="__main__", alter_sys=True)
'''
_PROGRAM = _ENTRY.format(what="Pulumi program", source="infra/__main__.py", module="infra")
_POLICY_PACK = _ENTRY.format(
    what="policy pack (`pulumi up --policy-pack policies`)", source="policies/rules.py", module="policies"
)


def _virtualenv(root: Path) -> str | None:
    """The virtualenv this CLI runs in (where the package is installed) as the project's runtime,
    when it is inside the project: relative to it, as Pulumi resolves a relative `virtualenv`
    against the project folder (pulumi/pulumi:sdk/python/toolchain/pip.go@c944503e9d440bd57967123360e9b8bdde287988
    resolveVirtualEnvironmentPath). Elsewhere None: an absolute path of one machine would be
    committed, so the project names none and Pulumi runs `python3` from PATH, or PULUMI_PYTHON_CMD
    (pip.go CommandPath): the activated virtualenv (init's note says so)."""
    if sys.prefix == sys.base_prefix:
        return None
    venv = Path(sys.prefix).resolve()
    return venv.relative_to(root.resolve()).as_posix() if venv.is_relative_to(root.resolve()) else None


def runtime_note(root: Path) -> str | None:
    """What init says when the project names no virtualenv: how Pulumi finds the package."""
    if _virtualenv(root) is not None:
        return None
    python = Path(sys.executable)
    where = f" in {sys.prefix}" if sys.prefix != sys.base_prefix else ""
    return (
        f"Pulumi.yaml names no virtualenv (a path of this machine would be committed): `pulumi` runs python3 from "
        f"PATH, so activate the environment higgsfield is installed{where} first, or export PULUMI_PYTHON_CMD={python}"
    )


def project_files(ci: bool = False, root: Path | None = None) -> dict[str, str]:
    """{path in the project: text} of a new project: Pulumi.yaml (the shipped project file, its
    program the installed package's, in the virtualenv the package is installed in when that is in
    the project, else python3 from PATH; with `ci`, in .venv of the project, where the workflows
    install it), the program's and the policy pack's entry points, the policy pack's project file,
    and the JSON Schemas the stack files (and job files) name for an editor (`higgsfield schema
    --write` rewrites them after an upgrade)."""
    from infra.cli.schema import JOB_SCHEMA_PATH, SCHEMA_PATH, job_schema_text, schema_text

    y = round_trip_yaml()
    project = y.load(shipped("Pulumi.yaml").read_text())
    project.pop("main", None)  # the project folder: its __main__.py runs the installed program
    options = project["runtime"]["options"]
    policy = y.load(_packaged_policy().read_text())
    venv = None if ci else _virtualenv(root or Path.cwd())  # with ci: the shipped files' .venv, ../.venv stay
    for runtime_options, up in ((options, ""), ((policy.get("runtime") or {}).get("options") or {}, "../")):
        if venv:
            runtime_options["virtualenv"] = up + venv  # the policy pack's is relative to policies/
        elif not ci:
            runtime_options.pop("virtualenv", None)
    texts = {}
    for name, doc in (("Pulumi.yaml", project), ("policies/PulumiPolicy.yaml", policy)):
        out = io.StringIO()
        y.dump(doc, out)
        texts[name] = out.getvalue()
    texts["__main__.py"] = _PROGRAM
    texts["policies/__main__.py"] = _POLICY_PACK
    texts[str(SCHEMA_PATH)] = schema_text()
    texts[str(JOB_SCHEMA_PATH)] = job_schema_text()
    return texts


def _packaged_policy() -> Path:
    import policies

    return Path(policies.__file__).resolve().parent / "PulumiPolicy.yaml"


def start_project(root: Path, extra: dict[str, str] | None = None, ci: bool = False) -> list[Path]:
    """Write a new project's files (and `extra`) into `root` (none of them there yet); the paths
    written. A file of that name already there (a folder that is no project yet, but not empty) is
    refused before anything is written."""
    files = project_files(ci, root) | (extra or {})
    taken = [name for name in files if (root / name).exists()]
    if taken:
        raise ConfigError(
            taken[0],
            f"exists already in {root}, which has no Pulumi.yaml: init would make a project here and never writes "
            "over your files; run it in an empty folder (or move the file away)",
        )
    written = []
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x") as file:  # never over a file of the user's
            file.write(text)
        written.append(path)
    return written


def write(stack: NewStack, root: Path | None = None, publish: bool = True) -> None:
    """Validate the stack's files in a scratch copy of the project (the config loader reads them
    there), then publish them into the project: under the init lock, each by a hard link from a
    file written whole, which fails when the name exists (another init's stack is never written
    over). A stack that does not validate raises its problems with nothing written."""
    from infra.offline.evaluate import load_stack
    from infra.offline.stack_file import StackFileError

    root = root or project_root()
    with tempfile.TemporaryDirectory(prefix="higgsfield-init-") as scratch:
        copy = Path(scratch)
        (copy / "stacks").mkdir()
        project_file = root / "Pulumi.yaml"
        shutil.copyfile(project_file if project_file.is_file() else shipped("Pulumi.yaml"), copy / "Pulumi.yaml")
        written = copy / "stacks" / stack.stack_file.name
        written.write_text(stack.stack_text)
        try:
            load_stack(stack.name, copy)  # raises ConfigError: nothing was written into the project
        except StackFileError as exc:  # what init wrote does not read back: never name the scratch copy
            raise ConfigError(
                "STACK",
                f"the stack init would write does not read back (line {exc.line}: {exc.message}); nothing was written",
            ) from None
        if not publish:
            return
        try:
            stack.policy_file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            folder = stack.policy_file.parent.relative_to(root)
            raise ConfigError(
                "STACK", f"{folder} cannot hold the policy config ({exc.strerror}); nothing was written"
            ) from None
        stack.stack_file.parent.mkdir(parents=True, exist_ok=True)
        policy = _staged(stack.policy_file, stack.policy_text)
        staged = _staged(stack.stack_file, stack.stack_text)
        try:
            with _init_lock(root):
                _publish(policy, stack.policy_file, root)
                try:
                    _publish(staged, stack.stack_file, root)
                except BaseException:
                    stack.policy_file.unlink(missing_ok=True)
                    raise
        finally:
            policy.unlink(missing_ok=True)
            staged.unlink(missing_ok=True)


def _staged(final: Path, text: str) -> Path:
    """`text` written whole into a hidden file beside `final` (same file system, for the link)."""
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent)
    with os.fdopen(fd, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    return Path(name)


def _publish(staged: Path, final: Path, root: Path) -> None:
    try:
        os.link(staged, final)
    except FileExistsError:
        raise ConfigError(
            "STACK", f"{final.relative_to(root)} exists already (written meanwhile?); pick another name (or delete it)"
        ) from None


@contextlib.contextmanager
def _init_lock(root: Path) -> Iterator[None]:
    """One init at a time publishes into this project: an advisory lock on the stacks folder itself
    (released on exit), so no lock file is left behind to be committed."""
    (root / "stacks").mkdir(exist_ok=True)
    try:
        fd = os.open(root / "stacks", os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise ConfigError("STACK", f"stacks cannot be locked for init ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def create(
    name: str,
    region: str,
    base: str,
    root: Path,
    choices: Choices,
    flags: Sequence[str] = (),
    new_project: bool = False,
    ci: bool = False,
) -> NewStack:
    """new_stack, then write; a refusal names the flag whose value it is about (`--gpu-pool
    h100:p5.48xlarge:0-999: maxSize ...`), else the setting of the stack that was not written, and
    never a line of a file that is not there."""
    try:
        stack = new_stack(name, region, base, root, choices)
        ci_texts, ci_notes = _ci(root, new_project) if ci else ({}, [])
        if new_project:  # validated in a scratch copy first: a refused init leaves the folder as it was
            write(stack, root, publish=False)
            written = [p.relative_to(root) for p in start_project(root, ci_texts, ci)]
            stack.project_files = [p for p in written if str(p) not in ci_texts]
            stack.ci_files = [p for p in written if str(p) in ci_texts]
            runtime = None if ci else runtime_note(root)
            if runtime:
                stack.notes.append(runtime)
        write(stack, root)
        if ci and not new_project:
            stack.ci_files = _add_missing(root, ci_texts, ci_notes)
        stack.notes += ci_notes
    except ConfigError as exc:
        problems = []
        for problem in exc.problems:
            key = problem.key
            pool = re.match(rf"{G}:gpuPools\[(\d+)\]", key)
            team = re.match(rf"{G}:scheduler\.(teams|queues)\[(\d+)\]", key)
            cidr = re.match(rf"{G}:endpoint\.publicAccessCidrs\[(\d+)\]", key) if choices.public_access_cidrs else None
            if pool and choices.pools and int(pool[1]) < len(flags):
                problems.append(
                    Problem((f"--gpu-pool {flags[int(pool[1])]}",), f"{key[len(G) + 1 :]}: {problem.message}")
                )
            elif cidr and int(cidr[1]) < len(choices.public_access_cidrs):
                problems.append(
                    Problem((f"--public-access-cidr {choices.public_access_cidrs[int(cidr[1])]}",), problem.message)
                )
            elif key == f"{G}:endpoint.publicAccessCidrs" and choices.public_access_cidrs:  # the flags' list whole
                problems.append(Problem(("--public-access-cidr",), f"{problem.message} (one range a flag)"))
            elif team and choices.teams and int(team[2]) < len(choices.teams):  # one queue per --team, in order
                spec = choices.teams[int(team[2])]
                problems.append(
                    Problem(
                        (f"--team {spec.name}" + (f":{spec.gpus}" if spec.gpus is not None else ""),),
                        f"{key[len(G) + 1 :]}: {problem.message}",
                    )
                )
            elif key.startswith(f"{G}:") or key.startswith("aws:"):
                problems.append(
                    Problem(
                        (key,), f"{problem.message} (in the stack init would write from {base}; nothing was written)"
                    )
                )
            else:
                problems.append(problem)
        raise ConfigError(problems[0].key, problems[0].message, problems) from None
    return stack


def _ci(root: Path, new_project: bool) -> tuple[dict[str, str], list[str]]:
    from infra.cli import init_ci

    if not new_project:
        init_ci.refuse_in(root)
    return init_ci.ci_files()


def _add_missing(root: Path, texts: dict[str, str], notes: list[str]) -> list[Path]:
    """Write each CI file the project lacks; one it has is kept (noted), never written over."""
    written = []
    for name, text in texts.items():
        path = root / name
        if path.exists():
            notes.append(f"kept {name} (exists already; init --ci never writes over a file)")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x") as file:
            file.write(text)
        written.append(path.relative_to(root))
    return written


def as_json(stack: NewStack, root: Path) -> dict:
    """What init wrote, as data."""
    return {
        "stack": stack.name,
        "region": stack.region,
        "from": stack.source,
        "project": str(root),
        "new_project_files": [str(p) for p in stack.project_files],
        "ci_files": [str(p) for p in stack.ci_files],
        "stack_file": str(stack.stack_file.relative_to(root)),
        "policy_file": str(stack.policy_file.relative_to(root)),
        "notes": stack.notes,
        "next": [f"higgsfield {c} {stack.name}" for c in ("plan", "check", "cost", "preflight", "bootstrap")],
    }


def render(stack: NewStack, root: Path) -> str:
    """What was written, each note wrapped within 120 columns, and the next commands."""
    from infra.cli.views.table import wrap

    lines = []
    if stack.project_files:
        lines.append(
            f"new project in {root}: {', '.join(map(str, stack.project_files))} (the program and the policy pack are "
            "the installed higgsfield package's; the training image is built from its images/training unless you "
            "copy them here)"
        )
    if stack.ci_files:
        lines += wrap(f"CI: {', '.join(map(str, stack.ci_files))}", indent=0)
    lines.append(
        f"wrote {stack.stack_file.relative_to(root)} (from {stack.source}, region {stack.region}) and "
        f"{stack.policy_file.relative_to(root)}"
    )
    for note in stack.notes:
        lines += wrap(f"note: {note}", indent=2, hanging=6)
    lines += [
        f"next: higgsfield plan {stack.name}; higgsfield check {stack.name}; higgsfield cost {stack.name}",
        f"      with credentials for the account: higgsfield preflight {stack.name}; the first deploy: higgsfield "
        f"bootstrap {stack.name}",
    ]
    return "\n".join(lines)

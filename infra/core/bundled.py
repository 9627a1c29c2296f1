"""AWS's EC2 catalog as bundled with moto (a runtime dependency): every instance type's facts
(DescribeInstanceTypes) and where each is offered (DescribeInstanceTypeOfferings per AZ, for
every region moto ships). The offline plan answers the program's invokes from it; `init` picks
AZs from it; "not offered" errors say where a type is offered instead. It is a snapshot:
`higgsfield preflight STACK` re-checks offerings against the account itself.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from functools import cache
from pathlib import Path
from typing import Any


def _moto_dir() -> Path:
    # Located without importing moto.ec2 (that import alone costs over a second).
    spec = importlib.util.find_spec("moto")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("moto is not installed: it carries AWS's instance-type catalog (pip install -e .)")
    return Path(spec.submodule_search_locations[0], "ec2", "resources")


def _moto_json(*parts: str) -> Any:
    return json.loads(gzip.decompress((_moto_dir() / Path(*parts)).read_bytes()))


@cache
def source() -> str:
    """What the facts are, for messages: `AWS's catalog as bundled with moto 5.2.5`."""
    from importlib.metadata import version

    return f"AWS's catalog as bundled with moto {version('moto')}"


@cache
def instance_types() -> dict[str, dict[str, Any]]:
    """AWS's EC2 DescribeInstanceTypes catalog as shipped with moto."""
    catalog: dict[str, dict[str, Any]] = _moto_json("instance_types.json.gz")
    return catalog


@cache
def regions() -> tuple[str, ...]:
    """The regions whose per-AZ offerings moto ships."""
    folder = _moto_dir() / "instance_type_offerings" / "availability-zone"
    return tuple(sorted(p.name.removesuffix(".json.gz") for p in folder.glob("*.json.gz")))


@cache
def zone_offerings(region: str) -> dict[str, frozenset[str]]:
    """Instance types offered per availability zone of `region` (empty: no data for the region)."""
    try:
        rows = _moto_json("instance_type_offerings", "availability-zone", f"{region}.json.gz")
    except FileNotFoundError:
        return {}
    zones: dict[str, set[str]] = {}
    for row in rows:
        zones.setdefault(row["Location"], set()).add(row["InstanceType"])
    return {zone: frozenset(types) for zone, types in zones.items()}


def zones_offering(instance_type: str, region: str) -> list[str]:
    """The AZs of `region` that offer `instance_type`."""
    return sorted(zone for zone, types in zone_offerings(region).items() if instance_type in types)


def where_offered(instance_type: str, near: str | None = None) -> str:
    """Where `instance_type` is offered, for an error message: every region with its AZs
    (`near` first, then regions of its area - eu-, us-, ... -, then the others), and where the
    facts come from."""
    found = {r: zones_offering(instance_type, r) for r in regions()}
    found = {r: z for r, z in found.items() if z}
    checked = f"{source()}; `higgsfield preflight STACK` re-checks against your account"
    if not found:
        if instance_type not in instance_types():  # a typo, not a type nobody offers
            import difflib

            close = difflib.get_close_matches(instance_type.lower(), list(instance_types()), n=3, cutoff=0.8)
            return f"no such instance type in {source()}" + (f"; did you mean {' or '.join(close)}?" if close else "")
        return f"it is offered in no region ({checked})"
    area = (near or "").split("-")[0] + "-"
    ordered = sorted(found, key=lambda r: (r != near, not r.startswith(area), r))
    shown = ordered[:SHOWN_REGIONS]  # the nearest; a line, not a catalog
    more = f" and {len(ordered) - len(shown)} more regions" if len(ordered) > len(shown) else ""
    here = f"; `higgsfield types {near}` lists the GPU types each AZ of {near} offers" if near in regions() else ""
    return (
        "offered in "
        + ", ".join(f"{r} ({' '.join(z.removeprefix(r) for z in found[r])})" for r in shown)
        + f"{more} ({checked}){here}"
    )


SHOWN_REGIONS = 4  # regions a "not offered" message names (the stack's own and its area's first)

"""EC2 on-demand prices per region for the bundled price file, from SkyPilot's AWS catalog.

SkyPilot's catalog (skypilot-org/skypilot-catalog, `catalogs/v8/aws/vms.csv`, rebuilt by its own CI
from AWS's public price list: Linux, On-Demand, shared tenancy, one row per type and availability
zone) is a maintained source of EC2 prices for every region SkyPilot fetches; AWS's Pricing API
needs credentials and `higgsfield cost STACK --refresh` reads it per stack. This module turns the
catalog's rows into the `ec2_on_demand_hour` table of each region of `prices.json`; the other
figures of a region (EKS, EBS, NAT, FSx, ...) are not in the catalog and stay as they were, so a
region new to the file prices its EC2 lines and marks the rest not priced until `--refresh`.
`tools/import_ec2_prices.py` is the command that runs it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any


class ImportProblem(Exception):
    """The catalog cannot be read as prices (one line naming the row)."""


def ec2_tables(
    rows: Iterable[dict[str, str]], instance_types: set[str], regions: set[str]
) -> dict[str, dict[str, float]]:
    """Per region of `regions`, the $/hour of each type of `instance_types` the rows list there.
    A row without a price (SkyPilot keeps types AWS lists but does not price) is skipped; two
    different prices for one type in one region are refused, as the catalog's AZ rows share one."""
    tables: dict[str, dict[str, float]] = {}
    for number, row in enumerate(rows, 2):
        name, region, price = row.get("InstanceType", ""), row.get("Region", ""), (row.get("Price") or "").strip()
        if name not in instance_types or region not in regions or not price:
            continue
        try:
            value = float(price)
        except ValueError:
            raise ImportProblem(f"row {number}: Price {price!r} of {name} in {region} is no number") from None
        known = tables.setdefault(region, {}).setdefault(name, value)
        if known != value:
            raise ImportProblem(f"row {number}: {name} in {region} costs both {known} and {value}")
    return {region: dict(sorted(table.items())) for region, table in sorted(tables.items())}


def gpu_regions(tables: dict[str, dict[str, float]], gpu_types: set[str]) -> dict[str, dict[str, float]]:
    """The tables of the regions where at least one GPU type is priced: a region where only the
    system node group's types are is no region a pool can run in, so it is not called priced."""
    return {region: table for region, table in tables.items() if gpu_types & set(table)}


def merge(prices: dict[str, Any], tables: dict[str, dict[str, float]], source: str, read: str) -> dict[str, Any]:
    """A copy of `prices` whose regions take their EC2 tables from `tables`, each noting where the
    table came from and when it was read (`ec2_source`); a region new to the file gets only that,
    dated `read`. A type the catalog does not price in a region the file had keeps the file's figure."""
    updated = copy.deepcopy(prices)
    for region, table in tables.items():
        regional = updated["regions"].setdefault(region, {"checked": read, "verified": False})
        regional["ec2_on_demand_hour"] = dict(sorted((regional.get("ec2_on_demand_hour", {}) | table).items()))
        regional["ec2_source"] = f"{source}, read {read}"
    updated["regions"] = dict(sorted(updated["regions"].items()))
    return updated


def extract_differences(
    catalog: Iterable[dict[str, str]], extract: Iterable[dict[str, str]], regions: set[str]
) -> list[str]:
    """Where the committed extract (`tools/skypilot_aws_vms_extract.csv`, one row per type and
    region) and the catalog it was transcribed from disagree, one line each, sorted: a price the
    catalog has no row for, a price the catalog's rows of that type and region do not all carry
    (its rows are per availability zone), and a region of `regions` where the catalog prices one
    of the extract's types but the extract has no row. An empty list: the extract is the catalog's."""
    claimed = {(row["InstanceType"], row["Region"]): float(row["Price"]) for row in extract}
    types = {name for name, _ in claimed}
    found: dict[tuple[str, str], set[float]] = {}
    for row in catalog:
        key, text = (row.get("InstanceType", ""), row.get("Region", "")), (row.get("Price") or "").strip()
        if key[0] in types and text:
            found.setdefault(key, set()).add(float(text))
    problems = []
    for (name, region), price in claimed.items():
        seen = found.get((name, region))
        if not seen:
            problems.append(f"{name} in {region}: the extract says {price:g}, the catalog has no price")
        elif seen != {price}:
            problems.append(
                f"{name} in {region}: the extract says {price:g}, the catalog "
                + ", ".join(f"{p:g}" for p in sorted(seen))
            )
    for (name, region), seen in found.items():
        if region in regions and (name, region) not in claimed:
            problems.append(
                f"{name} in {region}: the catalog prices it ({', '.join(f'{p:g}' for p in sorted(seen))}), "
                "the extract has no row"
            )
    return sorted(problems)

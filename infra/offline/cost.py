"""`higgsfield cost STACK`: what a stack costs idle (GPU pools at minSize) and at full scale
(every GPU pool at maxSize), itemised per resource and subtotalled per pool, from the offline
plan and a dated price file with a price list per region.

What cannot be priced is reported as not priced, never guessed and never fatal: a region or an
instance type the price file does not list (`--refresh` takes every figure from the Pricing API),
spot (the price moves) and Capacity Blocks (paid up front when purchased). An On-Demand Capacity
Reservation is billed at the On-Demand rate whether instances run in it or not (EC2 User Guide,
"Capacity Reservation pricing and billing",
docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-pricing-billing.html), so a
pool that targets one costs the whole reservation idle and nothing more at full scale. The
reservation's size is not in the plan: it is taken as the pool's maxSize (`higgsfield preflight`
reads the real TotalInstanceCount).

The text report is `infra/cli/views/cost.py`; this module computes.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.core.names import TEAM_CPU_LABEL
from infra.offline.evaluate import Plan

PRICE_FILE = Path(__file__).resolve().parent / "data" / "prices.json"
NOT_PRICED = "not priced"
REFRESHABLE = "refresh"  # an unpriced line `higgsfield cost STACK --refresh` prices


@dataclass(frozen=True)
class Assumptions:
    """Usage that no plan can know; each shows up in the report."""

    nat_gb_per_month: float = 100.0  # traffic through each NAT gateway (image pulls, S3 outside the gateway endpoint)
    control_plane_log_gb_per_month: float = 50.0  # all five control-plane log types of a busy cluster


@dataclass
class Line:
    item: str
    resource: str
    idle_hour: float | None
    full_hour: float | None
    note: str = ""
    group: str = "platform"  # the pool (or shared part of the platform) the line is subtotalled under
    reserved_in_use: bool = (
        False  # a reservation held warm: billed whether used or not, and its nodes run, gated, for jobs
    )
    no_list_price: str = ""  # what the line buys when no price list has its price (spot, Capacity Block)


def priced_sum(lines: list[Line], column: str) -> float | None:
    """The sum of `column` over the lines that have a price in it; None when none has (an
    unknown is never added as $0)."""
    known = [getattr(line, column) for line in lines if getattr(line, column) is not None]
    return sum(known) if known else None


@dataclass
class Estimate:
    stack: str
    region: str
    lines: list[Line] = field(default_factory=list)
    prices_checked: str = ""
    prices_verified: bool = False
    hours_per_month: int = 730
    region_listed: bool = True  # the price file has a price list for the region
    ec2_source: str = ""  # where the region's EC2 prices came from, when not from the file's own source
    every_region: list[str] = field(default_factory=list)  # figures taken from the file's every_region list

    def total(self, column: str) -> float:
        return sum(getattr(line, column) or 0.0 for line in self.lines)

    def reserved_in_use(self) -> float:
        """$/hour of reservations held warm: paid for and running, for jobs (inside the idle total)."""
        return sum(line.idle_hour or 0.0 for line in self.lines if line.reserved_in_use)

    @property
    def unpriced(self) -> list[Line]:
        return [line for line in self.lines if line.idle_hour is None or line.full_hour is None]

    def unpriced_reasons(self) -> dict[str, int]:
        """The lines without a price, counted by why: REFRESHABLE for a figure the price file lacks
        for the region (the Pricing API has it), else what the line buys (spot, Capacity Block),
        whose price no price list holds."""
        reasons: dict[str, int] = {}
        for line in self.unpriced:
            reason = line.no_list_price or REFRESHABLE
            reasons[reason] = reasons.get(reason, 0) + 1
        return reasons

    @property
    def nothing_priced(self) -> bool:
        """A region the price file does not list, or no line with a price: there is no total to show
        (the free items alone would headline $0.00)."""
        return not self.region_listed or all(line.idle_hour is None and line.full_hour is None for line in self.lines)

    def groups(self) -> list[tuple[str, list[Line]]]:
        """Lines per group, the most expensive group (at full scale) first, and within a group the
        most expensive line first; ties by name, so the order is stable."""
        by_group: dict[str, list[Line]] = {}
        for line in self.lines:
            by_group.setdefault(line.group, []).append(line)

        def rank(lines: list[Line]) -> float:
            return -sum(line.full_hour or 0.0 for line in lines)

        ordered = sorted(by_group.items(), key=lambda kv: (rank(kv[1]), kv[0]))
        return [
            (name, sorted(lines, key=lambda e: (-(e.full_hour or 0.0), -(e.idle_hour or 0.0), e.item, e.resource)))
            for name, lines in ordered
        ]


def priced_regions(path: Path = PRICE_FILE) -> list[str]:
    """The regions the bundled price file has a price list for."""
    return sorted(load_prices(path)["regions"])


class PriceError(Exception):
    pass


def load_prices(path: Path = PRICE_FILE, option: str = "--prices") -> dict[str, Any]:
    """The price file; a file that is no JSON object of regions is refused naming the option and the file."""
    from infra.offline.option_files import OptionFileError, read_json_object

    prices = read_json_object(path, option, 'a price file ({"regions": {REGION: ...}})')
    if not isinstance(prices.get("regions"), dict):
        raise OptionFileError(
            f'{option} {path}: has no "regions" object, so it is no price file '
            f"(see {PRICE_FILE.name} in infra/offline/data)"
        )
    wrong = _price_file_problem(prices)
    if wrong:
        raise OptionFileError(f"{option} {path}: {wrong} (see {PRICE_FILE.name} in infra/offline/data)")
    return prices


# Figures AWS prices at one rate whatever the region (EKS's control plane, KMS keys): they price every
# region the file lists unless the region's own list has the figure (a refresh writes its own).
EVERY_REGION = "every_region"

# What a region of a price file holds besides prices: when and whether it was refreshed, what a
# refresh read (`source`) and where its EC2 table came from (`ec2_source`, tools/import_ec2_prices.py).
_REGION_NOTES = {"checked": str, "verified": bool, "not_refreshed": list, "source": str, "ec2_source": str}


def _price(value: Any) -> bool:
    """A price: a finite number of dollars, not below zero (JSON also reads NaN and Infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _price_file_problem(prices: dict[str, Any]) -> str | None:
    """What makes `prices` no price file (the first thing found), or None: every figure a price,
    per key or per instance type / tier, so the estimate never meets text, a list or NaN."""
    hours = prices.get("hours_per_month")
    if not (_price(hours) and hours):
        return f'"hours_per_month" must be a number of hours above zero, got {json.dumps(hours)[:40]}'
    for key, kind in (("checked", str), ("verified", bool)):
        if not isinstance(prices.get(key), kind):
            return f'"{key}" must be {"text" if kind is str else "true or false"}'
    lists = [(f"regions.{region}", figures) for region, figures in prices["regions"].items()]
    if EVERY_REGION in prices:
        lists.append((EVERY_REGION, prices[EVERY_REGION]))
    for where, figures in lists:
        if not isinstance(figures, dict):
            return f"{where} must be an object of prices, got {json.dumps(figures)[:40]}"
        for key, value in figures.items():
            if key in _REGION_NOTES:
                if not isinstance(value, _REGION_NOTES[key]):
                    return f"{where}.{key} is not what a refresh writes there"
                continue
            each = value.items() if isinstance(value, dict) else [(None, value)]
            for sub, figure in each:
                if not _price(figure):
                    at = f"{where}.{key}" + (f".{sub}" if sub is not None else "")
                    return f"{at} must be a price (a number, 0 or more), got {json.dumps(figure)[:40]}"
    return None


class _RegionPrices:
    """The price list of one region; a missing figure is None, with the reason kept for the note."""

    def __init__(self, prices: dict[str, Any], region: str, stack: str = "STACK"):
        self.region, self.stack = region, stack
        self.listed = region in prices["regions"]
        self._prices = prices["regions"].get(region, {})
        self._every_region = prices.get(EVERY_REGION, {}) if self.listed else {}

    def get(self, key: str, sub: str | None = None) -> float | None:
        value = self._prices.get(key, self._every_region.get(key))
        if sub is not None:
            value = (value or {}).get(sub)
        return value

    def from_every_region(self) -> list[str]:
        """The figures this region takes from the file's every_region list (its own list lacks them)."""
        return sorted(k for k, v in self._every_region.items() if _price(v) and k not in self._prices)

    def missing(self, what: str) -> str:
        if not self.listed:
            return f"{NOT_PRICED}: the price file has no prices for {self.region}"
        return f"{NOT_PRICED}: no price for {what} in {self.region}; run `higgsfield cost {self.stack} --refresh`"


def _times(count: float, rate: float | None) -> float | None:
    return None if rate is None else count * rate


def _types_note(types: list[str], rates: dict[str, float | None], nodes: int) -> str:
    """For a node group that may launch several instance types: each type's $/hour, in the order a
    managed node group fills On-Demand capacity (the order the types are listed; EKS User Guide,
    docs.aws.amazon.com/eks/latest/userguide/managed-node-groups.html, "Managed node group capacity
    types"), the figure priced at the first, and what `nodes` of the dearest would cost."""
    if len(types) < 2:
        return ""
    each = ", ".join(f"{name} {_money_hour(rates[name])}" for name in types)
    note = f"instance types in EKS's On-Demand order: {each}; priced at {types[0]}"
    known = [rate for rate in rates.values() if rate is not None]
    first = rates[types[0]]
    if known and (first is None or max(known) > first):
        note += f", up to {_money_hour(nodes * max(known))} at full scale if every node is the dearest priced type"
    return note


def _money_hour(rate: float | None) -> str:
    return NOT_PRICED if rate is None else f"${rate:,.2f}/hour"


def estimate(plan: Plan, prices: dict[str, Any], assumptions: Assumptions = Assumptions()) -> Estimate:
    cfg = plan.config
    rp = _RegionPrices(prices, cfg.region, plan.stack)
    per_month = prices["hours_per_month"]
    regional = prices["regions"].get(cfg.region, {})
    est = Estimate(
        plan.stack,
        cfg.region,
        prices_checked=regional.get("checked", prices["checked"]),
        prices_verified=regional.get("verified", prices["verified"]),
        hours_per_month=per_month,
        region_listed=rp.listed,
        ec2_source=regional.get("ec2_source", ""),
        every_region=rp.from_every_region(),
    )

    def add(
        item: str,
        resource: str,
        idle: float | None,
        full: float | None,
        note: str = "",
        group: str = "platform",
        missing: str = "",
        in_use: bool = False,
        no_list_price: str = "",
    ) -> None:
        if missing and (idle is None or full is None):
            note = f"{note}; {rp.missing(missing)}" if note else rp.missing(missing)
        est.lines.append(Line(item, resource, idle, full, note, group, in_use, no_list_price))

    pools = {p.name: p for p in cfg.gpu_pools}

    from infra.core.versions import EKS_EXTENDED_SUPPORT

    extended = cfg.kubernetes_version in EKS_EXTENDED_SUPPORT
    cluster_rate = rp.get("eks_cluster_extended_support_hour" if extended else "eks_cluster_hour")
    add(
        "EKS control plane",
        cfg.name,
        cluster_rate,
        cluster_rate,
        f"Kubernetes {cfg.kubernetes_version}" + (" (extended support)" if extended else ""),
        missing="the EKS control plane",
    )

    gb_month = rp.get("ebs_gp3_gb_month")
    gb_hour = None if gb_month is None else gb_month / per_month
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        labels = group.inputs.get("labels") or {}
        scaling = group.inputs["scalingConfig"]
        (template,) = plan.dependencies_of(group, "aws:ec2/launchTemplate:LaunchTemplate")
        root_gib = template.inputs["blockDeviceMappings"][0]["ebs"]["volumeSize"]
        types = list(group.inputs["instanceTypes"])
        instance, named = types[0], "/".join(types)  # every type the group may launch is named
        rate = rp.get("ec2_on_demand_hour", instance)
        rates = {name: rp.get("ec2_on_demand_hour", name) for name in types}
        teams_cpu = labels.get(TEAM_CPU_LABEL) == "true"  # the teams' CPU nodes: none idle, maxSize at full scale
        if not teams_cpu and labels.get("nvidia.com/gpu.present") != "true":  # the system nodes run all the time
            nodes = scaling["desiredSize"]
            add(
                f"EC2 {named} on-demand x {nodes}",
                group.name,
                _times(nodes, rate),
                _times(nodes, rate),
                "; ".join(filter(None, ["system nodes at desiredSize", _types_note(types, rates, nodes)])),
                "system nodes",
                missing=instance,
            )
            ebs = _times(nodes * root_gib, gb_hour)
            add(f"EBS gp3 root {root_gib} GiB x {nodes}", group.name, ebs, ebs, group="system nodes", missing="EBS gp3")
            continue
        low, high = scaling["minSize"], scaling["maxSize"]
        capacity = group.inputs["capacityType"]
        reserved = "capacityReservationSpecification" in template.inputs
        pool = "teams' CPU nodes" if teams_cpu else f"GPU pool {labels.get('higgsfield.io/pool', group.name)}"
        if capacity == "SPOT":
            add(
                f"EC2 {named} spot x {low}..{high}",
                group.name,
                None if low else 0.0,
                None,
                f"spot: {NOT_PRICED} (the price moves; see the Spot price history)",
                pool,
                no_list_price="spot",
            )
        elif capacity == "CAPACITY_BLOCK":
            setting = pools.get(labels.get("higgsfield.io/pool", ""))
            warm = setting is not None and setting.capacity.warm
            add(
                f"EC2 {instance} Capacity Block x {high if warm else f'{low}..{high}'}" + (" (warm)" if warm else ""),
                group.name,
                None,
                None,
                f"Capacity Block: prepaid when purchased, {NOT_PRICED} here; "
                + (
                    "held warm: all its nodes run, gated, from the block's start to drainBefore ahead of its end "
                    "(used capacity)"
                    if warm
                    else "capacity.warm is false: the pool scales to zero inside the paid window (idle waste)"
                ),
                pool,
                in_use=warm,
                no_list_price="Capacity Block",
            )
        elif reserved:
            whole = _times(high, rate)
            warm = low == high  # held at min = desired = max (components/gpu_pools.py scaling)
            if warm:
                add(
                    f"EC2 {instance} reservation x {high} (warm)",
                    group.name,
                    whole,
                    whole,
                    f"On-Demand Capacity Reservation held warm: its {high} nodes run, gated and ready for jobs, for "
                    "as long as it is "
                    "billed (the On-Demand rate whether instances run or not) - used capacity, not idle waste; "
                    "sized as the pool's "
                    f"maxSize (`higgsfield preflight` shows its real count)",
                    pool,
                    missing=instance,
                    in_use=True,
                )
            else:
                add(
                    f"EC2 {instance} reservation x {high} (idle)",
                    group.name,
                    whole,
                    whole,
                    "On-Demand Capacity Reservation with capacity.warm false: billed at the On-Demand rate whether "
                    "instances run in it "
                    f"or not, so idle waste while the pool is at zero; sized as the pool's maxSize {high} "
                    "(`higgsfield preflight` shows its real count)",
                    pool,
                    missing=instance,
                )
        else:
            add(
                f"EC2 {named} on-demand x {low}..{high}",
                group.name,
                _times(low, rate),
                _times(high, rate),
                "; ".join(
                    filter(None, ["the teams' pods without GPUs" if teams_cpu else "", _types_note(types, rates, high)])
                ),
                group=pool,
                missing=instance,
            )
        add(
            f"EBS gp3 root {root_gib} GiB x {low}..{high}",
            group.name,
            _times(low * root_gib, gb_hour),
            _times(high * root_gib, gb_hour),
            group=pool,
            missing="EBS gp3",
        )

    for pool in (p for p in cfg.gpu_pools if p.provisioner == "karpenter"):  # no node group: a Karpenter NodePool
        group, instance = f"GPU pool {pool.name}", pool.instance.name
        if pool.capacity_type == "spot":
            add(
                f"EC2 {instance} spot x 0..{pool.max_size} (Karpenter)",
                f"karpenter-{pool.name}",
                0.0,
                None,
                f"spot: {NOT_PRICED} (the price moves; see the Spot price history)",
                group,
                no_list_price="spot",
            )
        else:
            rate = rp.get("ec2_on_demand_hour", instance)
            add(
                f"EC2 {instance} on-demand x 0..{pool.max_size} (Karpenter)",
                f"karpenter-{pool.name}",
                0.0 if rate is not None else None,
                _times(pool.max_size, rate),
                "Karpenter NodePool: nodes only for pending pods, removed when empty",
                group,
                missing=instance,
            )
        add(
            f"EBS gp3 root {pool.root_volume_gib} GiB x 0..{pool.max_size}",
            f"karpenter-{pool.name}",
            0.0 if gb_hour is not None else None,
            _times(pool.max_size * pool.root_volume_gib, gb_hour),
            group=group,
            missing="EBS gp3",
        )

    nat_hour, nat_gb = rp.get("nat_gateway_hour"), rp.get("nat_gateway_gb")
    for nat in plan.of_type("aws:ec2/natGateway:NatGateway"):
        rate = (
            None if nat_hour is None or nat_gb is None else nat_hour + assumptions.nat_gb_per_month * nat_gb / per_month
        )
        add(
            "NAT gateway",
            nat.name,
            rate,
            rate,
            f"incl. {assumptions.nat_gb_per_month:g} GB/month processed (assumption)",
            "network",
            missing="NAT gateways",
        )
    for endpoint in plan.of_type("aws:ec2/vpcEndpoint:VpcEndpoint"):
        if endpoint.inputs.get("vpcEndpointType") == "Interface":
            zones = len(cfg.availability_zones)
            rate = _times(zones, rp.get("vpc_interface_endpoint_az_hour"))
            add(
                f"VPC interface endpoint x {zones} AZs",
                endpoint.name,
                rate,
                rate,
                group="network",
                missing="interface endpoints",
            )
    for fs in plan.of_type("aws:fsx/lustreFileSystem:LustreFileSystem"):
        kind = fs.inputs["deploymentType"]
        tier = kind if kind == "SCRATCH_2" else f"{kind}/{fs.inputs['perUnitStorageThroughput']}"
        tier_month = rp.get("fsx_lustre_gb_month", tier)
        rate = None if tier_month is None else fs.inputs["storageCapacity"] * tier_month / per_month
        add(
            f"FSx Lustre {tier} {fs.inputs['storageCapacity']} GiB",
            fs.name,
            rate,
            rate,
            "backups not included",
            "storage",
            missing=f"FSx for Lustre {tier}",
        )
    key_month = rp.get("kms_key_month")
    for key in plan.of_type("aws:kms/key:Key"):
        rate = None if key_month is None else key_month / per_month
        add("KMS key", key.name, rate, rate, missing="KMS keys")
    ingest = rp.get("cloudwatch_logs_ingest_gb")
    logs = None if ingest is None else assumptions.control_plane_log_gb_per_month * ingest / per_month
    add(
        "CloudWatch Logs ingestion",
        "control plane",
        logs,
        logs,
        f"{assumptions.control_plane_log_gb_per_month:g} GB/month (assumption)",
        missing="CloudWatch Logs",
    )
    return est


def as_json(est: Estimate) -> dict:
    m = est.hours_per_month

    def totals(lines: list[Line]) -> dict[str, Any]:
        """Sums of the priced lines (null where none is priced), and whether every line was."""
        idle, full = priced_sum(lines, "idle_hour"), priced_sum(lines, "full_hour")
        return {
            "idle_hour": idle,
            "full_hour": full,
            "idle_month": None if idle is None else idle * m,
            "full_month": None if full is None else full * m,
            "complete": not any(line in est.unpriced for line in lines),
        }

    return {
        "stack": est.stack,
        "region": est.region,
        "prices_checked": est.prices_checked,
        "prices_verified": est.prices_verified,
        "ec2_prices_source": est.ec2_source or None,
        "every_region_prices": est.every_region,
        "hours_per_month": m,
        "headline": {
            "idle_month": None if est.nothing_priced else est.total("idle_hour") * m,
            "full_hour": None if est.nothing_priced else est.total("full_hour"),
            "reserved_in_use_month": est.reserved_in_use() * m,
            "idle_waste_month": (est.total("idle_hour") - est.reserved_in_use()) * m,
            "complete": not est.unpriced,
            "not_priced": len(est.unpriced),
        },
        "groups": [
            {"group": name, "subtotal": totals(lines), "lines": [dict(line.__dict__) for line in lines]}
            for name, lines in est.groups()
        ],
        "lines": [dict(line.__dict__) for _, lines in est.groups() for line in lines],
        "total": totals(est.lines),
        "unpriced": [line.item for line in est.unpriced],
    }


# --- refreshing prices through the AWS Pricing API ----------------------------------------------------


@functools.cache
def _region_descriptions() -> dict[str, str]:
    """Every region botocore's endpoint data knows, with its description (read once: the file is
    a megabyte, and a refresh asks for a location per price)."""
    import botocore

    endpoints = json.loads((Path(botocore.__file__).parent / "data" / "endpoints.json").read_text())
    return {
        code: region["description"]
        for partition in endpoints["partitions"]
        for code, region in partition["regions"].items()
    }


def location_of(region: str) -> str:
    """The Pricing API's `location` for a region code: the region's description in botocore's
    endpoint data (e.g. us-east-2 -> "US East (Ohio)", eu-north-1 -> "Europe (Stockholm)")."""
    if region not in _region_descriptions():
        raise PriceError(f"{region} is not a region botocore knows; the Pricing API cannot be asked for it")
    return _region_descriptions()[region]


def on_demand_price(client: Any, instance_type: str, region: str) -> float:
    """The Linux, shared-tenancy, on-demand hourly price from the Pricing API (`pricing` client)."""
    filters = [
        {"Type": "TERM_MATCH", "Field": field_, "Value": value}
        for field_, value in (
            ("instanceType", instance_type),
            ("location", location_of(region)),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
        )
    ]
    response = client.get_products(ServiceCode="AmazonEC2", Filters=filters, MaxResults=10)
    for raw in response["PriceList"]:
        product = json.loads(raw) if isinstance(raw, str) else raw
        for term in product["terms"]["OnDemand"].values():
            for dimension in term["priceDimensions"].values():
                usd = float(dimension["pricePerUnit"]["USD"])
                if usd > 0:
                    return usd
    raise PriceError(f"the Pricing API returned no on-demand price for {instance_type} in {region}")


# Every other figure the estimate uses, as the Price List names it: (price-file key, service code,
# the usage type's suffix after the region prefix, e.g. USE2-AmazonEKS-Hours:perCluster). Usage
# types per the service's price list (docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/
# price-changes.html, the Price List files of each service code); unverified from this machine
# (no AWS access): `aws pricing get-products --region us-east-1 --service-code AmazonEKS
# --filters Type=TERM_MATCH,Field=location,Value="US East (Ohio)"` shows the real usage types.
SERVICE_PRICES = (
    ("eks_cluster_hour", "AmazonEKS", "AmazonEKS-Hours:perCluster"),
    ("eks_cluster_extended_support_hour", "AmazonEKS", "AmazonEKS-Hours:extendedSupport"),
    ("ebs_gp3_gb_month", "AmazonEC2", "EBS:VolumeUsage.gp3"),
    ("nat_gateway_hour", "AmazonEC2", "NatGateway-Hours"),
    ("nat_gateway_gb", "AmazonEC2", "NatGateway-Bytes"),
    ("vpc_interface_endpoint_az_hour", "AmazonVPC", "VpcEndpoint-Hours"),
    ("kms_key_month", "awskms", "KMS-Keys"),
    ("cloudwatch_logs_ingest_gb", "AmazonCloudWatch", "DataProcessing-Bytes"),
)
# FSx for Lustre tiers (the price file's keys) by the Price List's deploymentOption and throughput
# attributes; a tier no product matches keeps the file's figure and is named in the refresh note.
FSX_TIERS = {
    "PERSISTENT_2/125": ("Persistent 2", "125"),
    "PERSISTENT_2/250": ("Persistent 2", "250"),
    "PERSISTENT_2/500": ("Persistent 2", "500"),
    "PERSISTENT_2/1000": ("Persistent 2", "1000"),
    "SCRATCH_2": ("Scratch 2", "200"),
}


def _usd(product: dict) -> float | None:
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dimension in term["priceDimensions"].values():
            usd = float(dimension["pricePerUnit"].get("USD", 0))
            if usd > 0:
                return usd
    return None


def _products(client: Any, service: str, region: str, **attributes: str) -> Any:
    filters = [
        {"Type": "TERM_MATCH", "Field": k, "Value": v}
        for k, v in {"location": location_of(region), **attributes}.items()
    ]
    for page in client.get_paginator("get_products").paginate(ServiceCode=service, Filters=filters):
        for raw in page["PriceList"]:
            yield json.loads(raw) if isinstance(raw, str) else raw


def service_price(client: Any, service: str, usage_suffix: str, region: str) -> float | None:
    """The first-tier on-demand price of the usage type ending in `usage_suffix` (after the
    region's prefix), or None when the Price List has no such product in the region."""
    for product in _products(client, service, region):
        usage = product["product"]["attributes"].get("usagetype", "")
        if usage == usage_suffix or usage.endswith(f"-{usage_suffix}"):
            price = _usd(product)
            if price is not None:
                return price
    return None


def fsx_price(client: Any, deployment: str, throughput: str, region: str) -> float | None:
    for product in _products(client, "AmazonFSx", region, fileSystemType="Lustre"):
        attributes = product["product"]["attributes"]
        if attributes.get("deploymentOption") == deployment and attributes.get("throughputCapacity") == throughput:
            return _usd(product)
    return None


def refresh(prices: dict[str, Any], instance_types: list[str], region: str, client: Any, today: str) -> dict[str, Any]:
    """A copy of `prices` with every figure of `region` from the Pricing API: each listed instance
    type's EC2 price (an error when one has none) and every other service's (a region the file did
    not list gets a price list of its own). Figures the API has no product for are left as they
    were and listed in the region's `not_refreshed`."""
    updated = json.loads(json.dumps(prices))
    regional = updated["regions"].setdefault(region, {})
    ec2 = regional.setdefault("ec2_on_demand_hour", {})
    for instance_type in sorted(set(instance_types)):
        ec2[instance_type] = on_demand_price(client, instance_type, region)
    missing = []
    for key, service, usage in SERVICE_PRICES:
        price = service_price(client, service, usage, region)
        if price is None:
            missing.append(key)
        else:
            regional[key] = price
    fsx = regional.setdefault("fsx_lustre_gb_month", {})
    for tier, (deployment, throughput) in FSX_TIERS.items():
        price = fsx_price(client, deployment, throughput, region)
        if price is None:
            missing.append(f"fsx_lustre_gb_month.{tier}")
        else:
            fsx[tier] = price
    regional.pop("ec2_source", None)  # every EC2 figure is now the API's
    regional.update(
        checked=today,
        verified=not missing,
        not_refreshed=missing,
        source=f"AWS Pricing API (GetProducts, {location_of(region)}): EC2, EBS, NAT, VPC endpoints, EKS, FSx, KMS, "
        "CloudWatch Logs",
    )
    return updated

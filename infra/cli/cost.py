"""`higgsfield cost STACK`: what a stack costs idle (GPU pools at minSize) and at full scale
(every GPU pool at maxSize), itemised per resource, from the offline plan and a dated price file.

Spot and Capacity Block pools are never priced as on-demand: spot prices move (flagged as not
priced) and a Capacity Block is paid up front when purchased (flagged as prepaid). A pool that
targets an On-Demand Capacity Reservation is billed by the reservation, used or not (flagged).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.cli.offline import Plan

PRICE_FILE = Path(__file__).resolve().parent / "data" / "prices.json"


@dataclass(frozen=True)
class Assumptions:
    """Usage that no plan can know; each shows up in the report."""

    nat_gb_per_month: float = 100.0          # traffic through each NAT gateway (image pulls, S3 outside the gateway endpoint)
    control_plane_log_gb_per_month: float = 50.0  # all five control-plane log types of a busy cluster


@dataclass
class Line:
    item: str
    resource: str
    idle_hour: float | None
    full_hour: float | None
    note: str = ""


@dataclass
class Estimate:
    stack: str
    region: str
    lines: list[Line] = field(default_factory=list)
    prices_checked: str = ""
    hours_per_month: int = 730

    def total(self, column: str) -> float:
        return sum(getattr(line, column) or 0.0 for line in self.lines)

    @property
    def unpriced(self) -> list[Line]:
        return [line for line in self.lines if line.idle_hour is None or line.full_hour is None]


class PriceError(Exception):
    pass


def load_prices(path: Path = PRICE_FILE) -> dict[str, Any]:
    return json.loads(path.read_text())


def _instance_hour(prices: dict, instance_type: str) -> float:
    try:
        return prices["ec2_on_demand_hour"][instance_type]
    except KeyError:
        raise PriceError(f"no price for {instance_type} in {PRICE_FILE.name}; run `higgsfield cost STACK --refresh`") from None


def estimate(plan: Plan, prices: dict[str, Any], assumptions: Assumptions = Assumptions()) -> Estimate:
    cfg = plan.config
    if cfg.region not in prices["regions"]:
        raise PriceError(f"the price file has no prices for {cfg.region} (it covers {', '.join(prices['regions'])}); run --refresh")
    per_month = prices["hours_per_month"]
    est = Estimate(plan.stack, cfg.region, prices_checked=prices["checked"], hours_per_month=per_month)
    add = est.lines.append

    from infra.versions import EKS_EXTENDED_SUPPORT

    cluster_rate = prices["eks_cluster_extended_support_hour"] if cfg.kubernetes_version in EKS_EXTENDED_SUPPORT else prices["eks_cluster_hour"]
    add(Line("EKS control plane", cfg.name, cluster_rate, cluster_rate, f"Kubernetes {cfg.kubernetes_version}"))

    gb_hour = prices["ebs_gp3_gb_month"] / per_month
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        labels = group.inputs.get("labels") or {}
        scaling = group.inputs["scalingConfig"]
        (template,) = plan.dependencies_of(group, "aws:ec2/launchTemplate:LaunchTemplate")
        root_gib = template.inputs["blockDeviceMappings"][0]["ebs"]["volumeSize"]
        instance = group.inputs["instanceTypes"][0]
        if labels.get("nvidia.com/gpu.present") != "true":  # the system nodes run all the time
            nodes = scaling["desiredSize"]
            rate = _instance_hour(prices, instance)
            add(Line(f"EC2 {instance} on-demand x {nodes}", group.name, nodes * rate, nodes * rate, "system nodes at desiredSize"))
            add(Line(f"EBS gp3 root {root_gib} GiB x {nodes}", group.name, nodes * root_gib * gb_hour, nodes * root_gib * gb_hour))
            continue
        low, high = scaling["minSize"], scaling["maxSize"]
        capacity = group.inputs["capacityType"]
        reserved = "capacityReservationSpecification" in template.inputs
        pool = labels.get("higgsfield.io/pool", group.name)
        if capacity == "SPOT":
            add(Line(f"EC2 {instance} spot x {low}..{high}", group.name, None if low else 0.0, None, "spot: not priced (the price moves; see the Spot price history)"))
        elif capacity == "CAPACITY_BLOCK":
            add(Line(f"EC2 {instance} Capacity Block x {low}..{high}", group.name, None, None, "Capacity Block: prepaid when purchased, not priced here"))
        elif reserved:
            add(Line(f"EC2 {instance} reservation x {low}..{high}", group.name, None, None, "On-Demand Capacity Reservation: billed by the reservation whether used or not, not per pool"))
        else:
            rate = _instance_hour(prices, instance)
            add(Line(f"EC2 {instance} on-demand x {low}..{high}", group.name, low * rate, high * rate, f"GPU pool {pool}"))
        add(Line(f"EBS gp3 root {root_gib} GiB x {low}..{high}", group.name, low * root_gib * gb_hour, high * root_gib * gb_hour))

    for nat in plan.of_type("aws:ec2/natGateway:NatGateway"):
        data = assumptions.nat_gb_per_month * prices["nat_gateway_gb"] / per_month
        rate = prices["nat_gateway_hour"] + data
        add(Line("NAT gateway", nat.name, rate, rate, f"incl. {assumptions.nat_gb_per_month:g} GB/month processed (assumption)"))
    for endpoint in plan.of_type("aws:ec2/vpcEndpoint:VpcEndpoint"):
        if endpoint.inputs.get("vpcEndpointType") == "Interface":
            zones = len(cfg.availability_zones)
            rate = zones * prices["vpc_interface_endpoint_az_hour"]
            add(Line(f"VPC interface endpoint x {zones} AZs", endpoint.name, rate, rate))
    for fs in plan.of_type("aws:fsx/lustreFileSystem:LustreFileSystem"):
        kind = fs.inputs["deploymentType"]
        tier = kind if kind == "SCRATCH_2" else f"{kind}/{fs.inputs['perUnitStorageThroughput']}"
        rate = fs.inputs["storageCapacity"] * prices["fsx_lustre_gb_month"][tier] / per_month
        add(Line(f"FSx for Lustre {tier} {fs.inputs['storageCapacity']} GiB", fs.name, rate, rate, "backups not included"))
    for key in plan.of_type("aws:kms/key:Key"):
        rate = prices["kms_key_month"] / per_month
        add(Line("KMS key", key.name, rate, rate))
    logs = assumptions.control_plane_log_gb_per_month * prices["cloudwatch_logs_ingest_gb"] / per_month
    add(Line("CloudWatch Logs ingestion", "control plane", logs, logs, f"{assumptions.control_plane_log_gb_per_month:g} GB/month (assumption)"))
    return est


def render(est: Estimate) -> str:
    def money(value: float | None, factor: float = 1.0) -> str:
        return "not priced" if value is None else f"${value * factor:,.2f}"

    m = est.hours_per_month
    rows = [f"Cost of {est.stack} ({est.region}), prices checked {est.prices_checked}; month = {m} h",
            f"  {'item':<44} {'resource':<26} {'idle $/h':>12} {'full $/h':>12} {'idle $/month':>14} {'full $/month':>14}  note"]
    for line in est.lines:
        rows.append(
            f"  {line.item:<44} {line.resource:<26} {money(line.idle_hour):>12} {money(line.full_hour):>12} "
            f"{money(line.idle_hour, m):>14} {money(line.full_hour, m):>14}  {line.note}"
        )
    idle, full = est.total("idle_hour"), est.total("full_hour")
    rows.append(f"  {'TOTAL (priced items)':<44} {'':<26} {money(idle):>12} {money(full):>12} {money(idle, m):>14} {money(full, m):>14}")
    if est.unpriced:
        rows.append(f"  {len(est.unpriced)} item(s) not priced: see their notes; the totals exclude them")
    return "\n".join(rows)


def as_json(est: Estimate) -> dict:
    m = est.hours_per_month
    return {
        "stack": est.stack,
        "region": est.region,
        "prices_checked": est.prices_checked,
        "lines": [dict(line.__dict__) for line in est.lines],
        "total": {"idle_hour": est.total("idle_hour"), "full_hour": est.total("full_hour"), "idle_month": est.total("idle_hour") * m, "full_month": est.total("full_hour") * m},
        "unpriced": [line.item for line in est.unpriced],
    }


# --- refreshing EC2 prices through the AWS Pricing API ----------------------------------------------

LOCATIONS = {"us-east-1": "US East (N. Virginia)", "us-east-2": "US East (Ohio)", "us-west-2": "US West (Oregon)"}


def on_demand_price(client: Any, instance_type: str, region: str) -> float:
    """The Linux, shared-tenancy, on-demand hourly price from the Pricing API (`pricing` client)."""
    filters = [
        {"Type": "TERM_MATCH", "Field": field_, "Value": value}
        for field_, value in (
            ("instanceType", instance_type),
            ("location", LOCATIONS[region]),
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


def refresh(prices: dict[str, Any], instance_types: list[str], region: str, client: Any, today: str) -> dict[str, Any]:
    """A copy of `prices` with every listed instance type's price from the Pricing API."""
    updated = json.loads(json.dumps(prices))
    for instance_type in sorted(set(instance_types)):
        updated["ec2_on_demand_hour"][instance_type] = on_demand_price(client, instance_type, region)
    updated.update(checked=today, verified=True, source=f"AWS Pricing API (GetProducts, AmazonEC2, {LOCATIONS[region]}) and public price pages")
    return updated

"""`higgsfield cost STACK`: hourly and monthly cost, idle and at full scale, per resource."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from infra.cli.arguments import stack_argument
from infra.cli.output import add_report_options, emit, error


def register(sub: argparse._SubParsersAction) -> None:
    cost = sub.add_parser("cost", help="hourly and monthly cost, idle and at full scale, per resource")
    stack_argument(cost)
    add_report_options(cost)
    cost.add_argument("--prices", metavar="FILE", help="price file (default: the one shipped in infra/offline/data)")
    cost.add_argument(
        "--refresh",
        action="store_true",
        help="update the prices of everything the stack creates from the AWS Pricing API (needs credentials)",
    )
    cost.add_argument(
        "--measured",
        metavar="FILE",
        help="also price each cold start as `higgsfield verify STACK --allow-cost --save FILE` measured it",
    )
    cost.add_argument("--strict", action="store_true", help="exit 1 when anything the stack creates is not priced")
    cost.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infra.cli.views.cost import render
    from infra.offline import cost
    from infra.offline.evaluate import record

    plan = record(args.stack)
    price_file = Path(args.prices) if args.prices else cost.PRICE_FILE
    prices = cost.load_prices(price_file)
    if args.refresh:
        refreshed = _refresh(plan, prices, price_file)
        if refreshed is None:
            return 2
        prices = refreshed
    est = cost.estimate(plan, prices)
    starts = _cold_starts(args, plan, prices)
    if starts is None:
        emit(args, lambda: cost.as_json(est), lambda: render(est))
    else:
        emit(args, lambda: {**cost.as_json(est), "cold_starts": starts[0]}, lambda: render(est) + "\n" + starts[1])
    if args.strict and est.unpriced:
        unpriced = ", ".join(sorted({line.resource for line in est.unpriced}))
        error(f"cost of {args.stack}: {len(est.unpriced)} item(s) not priced (--strict): {unpriced}")
        return 1
    return 0


def _refresh(plan, prices: dict, price_file: Path) -> dict | None:
    """The prices refreshed from the AWS Pricing API and written to `price_file`; None (said on
    stderr) when AWS refuses."""
    import datetime

    import boto3

    from infra.offline import cost

    types = [t for g in plan.of_type("aws:eks/nodeGroup:NodeGroup") for t in g.inputs["instanceTypes"]]
    try:
        client = boto3.client("pricing", region_name="us-east-1")
        prices = cost.refresh(prices, types, plan.config.region, client, datetime.date.today().isoformat())
    except cost.PriceError as exc:
        error(str(exc))
        return None
    except Exception as exc:  # noqa: BLE001 - credentials or API errors, said in one line
        error(f"--refresh needs AWS credentials allowed pricing:GetProducts ({type(exc).__name__}: {exc})")
        return None
    price_file.write_text(json.dumps(prices, indent=2) + "\n")
    left = prices["regions"][plan.config.region]["not_refreshed"]
    print(
        f"refreshed {len(set(types))} instance prices and every other service's into {price_file}"
        + (f"; no product in the Price List for {', '.join(left)} (kept as they were)" if left else ""),
        file=sys.stderr,
    )
    return prices


def _cold_starts(args: argparse.Namespace, plan, prices: dict) -> tuple[list[dict], str] | None:
    """--measured: each measured cold start's cost (JSON rows, text), or None without the option."""
    from infra.cli.output import UsageError
    from infra.offline import measured

    if not args.measured:
        return None
    try:
        found = measured.for_stack(measured.load(Path(args.measured)), args.stack)
    except measured.MeasuredError as exc:
        raise UsageError(str(exc)) from None
    assert found is not None
    hourly = prices["regions"].get(plan.config.region, {}).get("ec2_on_demand_hour", {})
    pools = {p.name: p for p in plan.config.gpu_pools}
    rates = {
        name: None
        if name not in pools or pools[name].capacity_type in ("spot", "capacity-block")
        else hourly.get(t.instance_type)
        for name, t in found.pools.items()
    }
    rows = measured.cold_start_costs(found, rates)
    lines = [f"Cold starts, measured ({found.source}, {found.measured_at}): paid from launch to the first step"]
    for r in rows:
        money = "not priced" if r.usd is None else f"${r.usd:,.2f}"
        lines.append(f"  {r.pool}: {r.nodes} x {r.instance_type}, {r.seconds / 60:.1f} min: {money} per cold start")
    data = [
        {"pool": r.pool, "nodes": r.nodes, "instance_type": r.instance_type, "seconds": r.seconds, "usd": r.usd}
        for r in rows
    ]
    return data, "\n".join(lines)

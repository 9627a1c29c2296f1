"""The text report of `higgsfield cost`: two headline figures, then one table with a subtotal per
pool (most expensive first), then the numbered notes the table's rows point to."""

from __future__ import annotations

from infra.cli.views.table import money, table, wrap
from infra.offline.cost import REFRESHABLE, Estimate, Line, priced_regions, priced_sum


def render(est: Estimate) -> str:
    m = est.hours_per_month
    idle, full = est.total("idle_hour"), est.total("full_hour")
    unpriced = est.unpriced
    if est.nothing_priced:  # never a $0.00 headline for what could not be priced
        lines = wrap(
            f"Cost of {est.stack} ({est.region}): not priced in {est.region}: the bundled price file has no prices "
            f"for it; `higgsfield cost {est.stack} --refresh` (AWS credentials) takes the region's prices from the "
            f"Pricing API. Priced: {', '.join(priced_regions())} (docs/reference/reports.md)",
            indent=0,
        )
    else:
        lines = wrap(
            f"Cost of {est.stack} ({est.region}): idle {money(idle, m)}/month, full scale {money(full)}/hour"
            + _left_out(est),
            indent=0,
        )
        lines.append(f"  full scale {money(full, m)}/month; idle {money(idle)}/hour; month = {m} h")
    warm = est.reserved_in_use()
    if warm and not est.nothing_priced:
        lines.append(
            f"  of idle: reservations held warm {money(warm, m)}/month (used: gated nodes ready for jobs), "
            f"idle waste {money(idle - warm, m)}/month"
        )
    if unpriced:
        lines += wrap(
            f"{len(unpriced)} item(s) not priced, excluded from the totals (marked *); their resources: "
            + ", ".join(sorted({entry.resource for entry in unpriced}))
        )
    lines += wrap(f"prices checked {est.prices_checked}: {_price_source(est)}")
    lines.append("")

    notes: list[str] = []

    def item(line: Line) -> str:
        if not line.note:
            return f"  {line.item}"
        if line.note not in notes:
            notes.append(line.note)
        return f"  {line.item} [{notes.index(line.note) + 1}]"

    def figures(values: list[Line]) -> list[str]:
        """A sum over `values`: `not priced` when none of them has a price, marked * when it
        leaves some out (never a $0.00 that stands for "unknown")."""
        shown = []
        for field, factor in (("idle_hour", m), ("full_hour", 1.0), ("full_hour", m)):
            total = priced_sum(values, field)
            partial = " *" if any(getattr(entry, field) is None for entry in values) else ""
            shown.append("not priced" if total is None or est.nothing_priced else money(total, factor) + partial)
        return shown

    def price(value: float | None, factor: float = 1.0) -> str:
        """A line's figure; in a region without prices none, not even a spot pool's $0.00 at zero nodes."""
        return money(None if est.nothing_priced else value, factor)

    rows = []
    for group, members in est.groups():
        rows.append([group, "(subtotal)", *figures(members)])
        for line in members:
            rows.append(
                [item(line), line.resource, price(line.idle_hour, m), price(line.full_hour), price(line.full_hour, m)]
            )
    rows.append(["TOTAL (priced items)", "", *figures(est.lines)])
    lines += table(["item", "resource", "idle $/month", "full $/hour", "full $/month"], rows, right=(2, 3, 4))
    if notes:
        lines.append("Notes:")
        for number, note in enumerate(notes, 1):
            lines += wrap(f"[{number}] {note}")
    return "\n".join(lines)


def _left_out(est: Estimate) -> str:
    """What the headline's figures leave out: how many items, and per reason how many, naming the
    stack's own refresh command for the figures the price file lacks for the region."""
    reasons = est.unpriced_reasons()
    if not reasons:
        return ""
    count = sum(reasons.values())
    parts = [
        f"{n} in {est.region}: higgsfield cost {est.stack} --refresh" if reason == REFRESHABLE else f"{n} {reason}"
        for reason, n in sorted(reasons.items(), key=lambda kv: (kv[0] != REFRESHABLE, kv[0]))
    ]
    return f" + {count} item{'s' if count > 1 else ''} not priced ({'; '.join(parts)})"


def _price_source(est: Estimate) -> str:
    """Where the region's prices came from: the Pricing API after a refresh, else each bundled source."""
    if est.prices_verified:
        return "prices from the AWS Pricing API"
    taken = [f"EC2 from {est.ec2_source}"] if est.ec2_source else []
    if est.every_region:  # e.g. eks_cluster_hour, kms_key_month: EKS and KMS
        services = " and ".join(sorted({key.split("_")[0].upper() for key in est.every_region}))
        taken.append(f"{services} at the one rate AWS states for every region")
    rest = "list prices as last known, unverified until `--refresh`"
    return "; ".join([*taken, f"the rest {rest}" if taken else rest])

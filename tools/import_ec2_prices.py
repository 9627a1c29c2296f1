"""Rebuild the EC2 tables of the bundled price file (infra/offline/data/prices.json) from SkyPilot's
AWS catalog, for every commercial region EKS runs in where the catalog prices one of the file's GPU types.

    python tools/import_ec2_prices.py CATALOG.csv --commit SHA [--read YYYY-MM-DD] [--type TYPE ...]

CATALOG.csv is `catalogs/v8/aws/vms.csv` of github.com/skypilot-org/skypilot-catalog at commit SHA
(its header names InstanceType, Price and Region; the other columns are not read). The instance
types are those the price file already prices, plus each --type. What was read and when is written
into every region the import touched (`ec2_source`). Check the result with
`PYTHONPATH=. python -m pytest tests/offline/test_price_import.py` and regenerate the doc examples
(`PYTHONPATH=. python tests/docs/test_doc_examples.py --write`).

tools/skypilot_aws_vms_extract.csv holds the rows of the catalog at 00148f2af367 that the bundled
file was built from (one row per type and region, the columns read), so the import reruns here.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.config import eks_regions  # noqa: E402
from infra.core.bundled import instance_types  # noqa: E402
from infra.offline.cost import PRICE_FILE, load_prices  # noqa: E402
from infra.offline.price_import import ec2_tables, gpu_regions, merge  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("catalog", type=Path, help="SkyPilot's catalogs/v8/aws/vms.csv (or the rows of it)")
    parser.add_argument("--commit", required=True, help="the skypilot-catalog commit the CSV is from")
    parser.add_argument("--read", default=datetime.date.today().isoformat(), help="when it was read (YYYY-MM-DD)")
    parser.add_argument("--type", action="append", default=[], help="an instance type to add (repeatable)")
    parser.add_argument("--prices", type=Path, default=PRICE_FILE, help="the price file to rewrite")
    args = parser.parse_args()

    prices = load_prices(args.prices)
    types = {t for region in prices["regions"].values() for t in region.get("ec2_on_demand_hour", {})}
    types |= set(args.type)
    with args.catalog.open(newline="") as handle:
        tables = ec2_tables(csv.DictReader(handle), types, set(eks_regions()))
    tables = gpu_regions(tables, {t for t in types if (instance_types().get(t) or {}).get("GpuInfo")})
    # Linux, On-Demand, shared tenancy: what SkyPilot's fetcher keeps of AWS's price list
    # (skypilot-org/skypilot:sky/catalog/data_fetchers/fetch_aws.py@v0.14.1, _get_pricing_table).
    source = f"SkyPilot's AWS catalog (skypilot-org/skypilot-catalog@{args.commit[:12]}, AWS price list)"
    args.prices.write_text(json.dumps(merge(prices, tables, source, args.read), indent=2) + "\n")
    print(f"{args.prices}: EC2 prices of {len(types)} types in {len(tables)} regions: {', '.join(tables)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Check the committed extract of SkyPilot's AWS catalog against the catalog itself.

    python tools/check_ec2_extract.py CATALOG.csv [--extract tools/skypilot_aws_vms_extract.csv]

CATALOG.csv is `catalogs/v8/aws/vms.csv` of github.com/skypilot-org/skypilot-catalog at the
commit the bundled prices name (each region's `ec2_source` in infra/offline/data/prices.json),
downloaded whole, e.g.
`curl -LO https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/<commit>/catalogs/v8/aws/vms.csv`.
Every row of the extract must be a price every availability-zone row of its type and region
carries, and every EKS region where the catalog prices one of the extract's types must have its
row. Exit 1 with one line per difference; exit 0 when the extract is the catalog's.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.config import eks_regions  # noqa: E402
from infra.offline.price_import import extract_differences  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("catalog", type=Path, help="SkyPilot's catalogs/v8/aws/vms.csv, whole")
    parser.add_argument("--extract", type=Path, default=ROOT / "tools" / "skypilot_aws_vms_extract.csv")
    args = parser.parse_args()
    with args.catalog.open(newline="") as catalog, args.extract.open(newline="") as extract:
        rows = list(csv.DictReader(extract))
        problems = extract_differences(csv.DictReader(catalog), rows, set(eks_regions()))
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"{args.extract.name}: all {len(rows)} rows are {args.catalog}'s prices")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

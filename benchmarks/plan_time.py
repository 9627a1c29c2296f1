"""Time `higgsfield plan STACK` as a whole process (what a user waits for), per shipped stack.

    python benchmarks/plan_time.py [--runs 5]

Prints resources, median and worst wall seconds of N runs. Not a test: timings depend on the
machine; the README records the figures with the machine they were measured on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.offline import stack_names  # noqa: E402


def time_plan(stack: str, runs: int) -> tuple[int, list[float]]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "plan.json")
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "infra.cli", "plan", stack, "--json", str(out)], cwd=ROOT, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
        resources = len(json.loads(out.read_text())["resources"])
    return resources, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{'stack':<10} {'resources':>9} {'median s':>9} {'worst s':>8}")
    for stack in stack_names(ROOT):
        resources, times = time_plan(stack, args.runs)
        print(f"{stack:<10} {resources:>9} {statistics.median(times):>9.2f} {max(times):>8.2f}")


if __name__ == "__main__":
    main()

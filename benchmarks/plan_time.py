"""Time `higgsfield plan` as a whole process: every shipped stack, and generated stacks with
1, 10, 50 and 100 GPU pools, so that growth per resource is visible.

    python benchmarks/plan_time.py [--runs 3] [--pools 1 10 50 100]

Prints resources, median wall seconds of N runs and seconds per resource. Not a test: timings
depend on the machine; the README records the figures with the machine they were measured on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _time_plan(project: Path, stack: str, runs: int) -> tuple[int, float]:
    out = Path(tempfile.mkdtemp()) / f"plan-{stack}.json"
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "infra.cli", "plan", stack, "--json", str(out)],
            cwd=project,
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        times.append(time.perf_counter() - start)
    resources = len(json.loads(out.read_text())["resources"])
    shutil.rmtree(out.parent)
    return resources, statistics.median(times)


def _generated_project(tmp: Path, pools: int) -> Path:
    """dev with `pools` on-demand g6e.xlarge pools (the queue sized to fit them)."""
    project = tmp / f"pools-{pools}"
    (project / "stacks").mkdir(parents=True)
    shutil.copy(ROOT / "Pulumi.yaml", project / "Pulumi.yaml")
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    config = doc["config"]
    config["higgsfield:gpuPools"] = [
        {"name": f"pool-{i}", "instanceTypes": ["g6e.xlarge"], "availabilityZone": "us-west-2a", "maxSize": 2}
        for i in range(pools)
    ]
    config["higgsfield:scheduler"]["queues"][0]["gpuCapability"] = 2 * pools
    (project / "stacks" / "Pulumi.gen.yaml").write_text(yaml.safe_dump(doc))
    return project


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pools", type=int, nargs="*", default=[1, 10, 50, 100])
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; median of "
        f"{args.runs} runs"
    )
    print(f"{'stack':<14} {'resources':>9} {'seconds':>8} {'ms/resource':>12}")
    for stack in sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml")):
        resources, seconds = _time_plan(ROOT, stack, args.runs)
        print(f"{stack:<14} {resources:>9} {seconds:>8.2f} {1000 * seconds / resources:>12.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        for pools in args.pools:
            resources, seconds = _time_plan(_generated_project(Path(tmp), pools), "gen", args.runs)
            print(f"{f'{pools} GPU pools':<14} {resources:>9} {seconds:>8.2f} {1000 * seconds / resources:>12.1f}")


if __name__ == "__main__":
    main()

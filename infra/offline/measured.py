"""Timings measured on a live cluster by `higgsfield verify STACK --allow-cost --save FILE` (its
trial gang, infra/cli/verify/trial.py), read back by `timeline --job POOL --measured FILE` and
`cost --measured FILE` in place of the estimates.

The file is JSON, one entry per pool measured:
    {"stack": "prod", "measured_at": "2026-12-05T09:00:00+00:00",
     "pools": {"h100": {"instance_type": "p5.48xlarge", "nodes": 1, "scale_up_s": 95.0,
                        "node_boot_s": 240.0, "gate_s": 170.0, "image_pull_s": 2.0, "first_step_s": 540.0}}}
Each figure is seconds between two moments the API server recorded (docs/verify.md):
scale_up_s: the trial's pods created -> their node registered (Volcano, the autoscaler, EC2 launch);
node_boot_s: node registered -> Ready; gate_s: Ready -> the startup taint off (the gate pod's pull
and checks); image_pull_s: the trial pod's own pull (Pulling -> Pulled); first_step_s: pods created
-> the first line of the first step (the whole cold start)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FIELDS = ("scale_up_s", "node_boot_s", "gate_s", "image_pull_s", "first_step_s")


class MeasuredError(Exception):
    """The file is not a measurements file (said in one line, naming the file and the key)."""


@dataclass(frozen=True)
class PoolTimings:
    instance_type: str
    nodes: int
    scale_up_s: float
    node_boot_s: float
    gate_s: float
    image_pull_s: float
    first_step_s: float


@dataclass(frozen=True)
class Measured:
    stack: str
    measured_at: str
    pools: dict[str, PoolTimings]
    source: str = ""  # the file it was read from

    def as_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "measured_at": self.measured_at,
            "pools": {name: asdict(t) for name, t in sorted(self.pools.items())},
        }


def save(path: Path, measured: Measured) -> None:
    """Write `measured`, merged over the pools an earlier run of the same stack saved there."""
    pools = dict(measured.pools)
    if path.exists():
        earlier = load(path)
        if earlier.stack == measured.stack:
            pools = {**earlier.pools, **pools}
    merged = Measured(measured.stack, measured.measured_at, pools)
    path.write_text(json.dumps(merged.as_json(), indent=2, sort_keys=True) + "\n")


def load(path: Path) -> Measured:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise MeasuredError(
            f"--measured: no file {path} (write it with `higgsfield verify STACK --save FILE`)"
        ) from exc
    except ValueError as exc:
        raise MeasuredError(f"--measured: {path} is not JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("pools"), dict):
        raise MeasuredError(f"--measured: {path}: no `pools` mapping (written by `higgsfield verify --save`?)")
    pools = {}
    for name, entry in data["pools"].items():
        try:
            pools[name] = PoolTimings(
                str(entry["instance_type"]), int(entry["nodes"]), *(float(entry[f]) for f in FIELDS)
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MeasuredError(f"--measured: {path}: pools.{name}: missing or bad {exc}") from exc
        if any(getattr(pools[name], f) < 0 for f in FIELDS):
            raise MeasuredError(f"--measured: {path}: pools.{name}: a negative time")
    return Measured(str(data.get("stack", "")), str(data.get("measured_at", "")), pools, str(path))


def for_stack(measured: Measured | None, stack: str) -> Measured | None:
    """The measurements when they are the stack's; another stack's file is refused."""
    if measured is not None and measured.stack != stack:
        raise MeasuredError(f"--measured: {measured.source} holds stack {measured.stack!r}'s timings, not {stack!r}")
    return measured


@dataclass(frozen=True)
class ColdStartCost:
    pool: str
    nodes: int
    instance_type: str
    seconds: float
    usd: float | None  # None: no on-demand price (spot moves, a Capacity Block is prepaid)


def cold_start_costs(measured: Measured, rates: dict[str, float | None]) -> list[ColdStartCost]:
    """What each measured cold start costs: its nodes, paid from launch to the first step."""
    out = []
    for name, t in sorted(measured.pools.items()):
        rate = rates.get(name)
        usd = None if rate is None else rate * t.nodes * t.first_step_s / 3600
        out.append(ColdStartCost(name, t.nodes, t.instance_type, t.first_step_s, usd))
    return out

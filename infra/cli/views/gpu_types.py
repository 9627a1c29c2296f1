"""The text of `higgsfield types REGION`: one GPU type a row, the AZs that offer it, its price."""

from __future__ import annotations

from infra.cli.views.table import money, table, wrap
from infra.offline.gpu_types import GpuType


def render(region: str, types: list[GpuType], source: str) -> str:
    if not types:
        return f"GPU instance types in {region}: none offered ({source})"
    zones = sorted({z for t in types for z in t.zones})
    rows = [
        [
            t.instance_type,
            f"{t.gpus} x {t.gpu}" if t.gpus else f"part of 1 x {t.gpu}",  # g6f: a fraction of a GPU
            str(t.gib_per_gpu),
            str(t.vcpus),
            f"{t.memory_gib:g}",
            str(t.efa_interfaces) if t.efa_interfaces else "-",
            " ".join(z.removeprefix(region) for z in t.zones),
            money(t.on_demand_hour, missing="-"),
        ]
        for t in types
    ]
    lines = [f"GPU instance types in {region}, by AZ ({', '.join(zones)}):"]
    lines += table(
        ["TYPE", "GPUS", "GIB/GPU", "VCPUS", "MEMORY GIB", "EFA", "AZS", "ON-DEMAND/HOUR"], rows, right=(2, 3, 4, 5, 7)
    )
    unpriced = sum(t.on_demand_hour is None for t in types)
    priced = (
        f"; ON-DEMAND/HOUR -: not priced in {region} (the bundled price file's regions: docs/reference/reports.md)"
        if unpriced
        else ""
    )
    lines += wrap(
        f"From {source} and the bundled price file; GIB/GPU: one GPU's memory, rounded down, as a job file's "
        f"resources.gpuMemoryGiB asks for it; EFA: the most EFA interfaces (- none){priced}. Use a type as "
        "`higgsfield init STACK --region REGION --gpu-pool NAME:TYPE:MIN-MAX`; `higgsfield preflight STACK` "
        "re-checks offerings and quotas against your account.",
        indent=0,
    )
    return "\n".join(lines)

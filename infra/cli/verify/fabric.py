"""NCCL across nodes (`verify --allow-cost --nodes 2` or more): the stack's own post-deploy health
check (`higgsfield healthcheck render STACK POOL`, infra/offline/healthcheck.py) applied on the
trial's pool, in the team namespace whose queue the trial used (the check runs as that team: its
UID, its queue, its storage, as its admission policy requires), its verdict read from each pod's
log, then deleted whatever happened.

Each pod of the check prints its report as one JSON line (images/training/node_check.py
`Report.json`: `{"node", "healthy", "results": [{"check", "value", "expected", "ok"}]}`); on an
EFA pool the all-reduce passes only when NCCL picked aws-ofi-nccl's efa provider and reached the
instance type's bus bandwidth (components/efa.py)."""

from __future__ import annotations

import json
import time
from typing import Any

from infra.cli.verify import Outcome, Spec, failed, passed, skipped


def reports(log: str) -> list[dict]:
    """The node_check reports a pod's log holds (its JSON lines; the timestamp prefix dropped)."""
    found = []
    for row in log.splitlines():
        text = row.partition(" ")[2] if row[:4].isdigit() else row
        if text.startswith("{") and '"healthy"' in text:
            try:
                found.append(json.loads(text))
            except ValueError:
                continue
    return found


def _value(report: dict, check: str) -> str:
    return next((r["value"] for r in report.get("results", []) if r.get("check") == check), "?")


def run(ctx: Any) -> Outcome:
    from infra.offline import healthcheck

    plan = ctx.found.get("trial")
    if plan is None:
        return skipped("no trial planned")
    if plan.nodes < 2:
        return skipped("NCCL across nodes needs a trial of 2 nodes or more", "rerun with --allow-cost --nodes 2")
    team = next((t.name for t in ctx.config.scheduler.teams if t.queue == plan.queue), None)
    if team is None:
        return skipped(f"no team submits to queue {plan.queue}: the health check runs as a team")
    objects = healthcheck.render(ctx.config, plan.pool.name, team=team, nodes=plan.nodes, image=plan.image)
    app = f"healthcheck-{plan.pool.name}-nccl"
    created: list[dict] = []
    deadline = time.monotonic() + ctx.trial_timeout_s
    try:
        for obj in objects:
            ctx.kube.create(obj)
            created.append(obj)
        while time.monotonic() < deadline and not ctx.cancel.is_set():
            pods = ctx.kube.pods(team, f"app={app}")
            found = [r for p in pods for r in reports(ctx.kube.pod_log(team, p["metadata"]["name"]))]
            if len(found) >= plan.nodes:
                return _verdict(found, plan)
            ctx.cancel.wait(ctx.poll_s)
        return failed(
            "stopped before the ranks reported (interrupted, or out of time)"
            if ctx.cancel.is_set()
            else f"no NCCL report from {plan.nodes} pod(s) within {ctx.trial_timeout_s:.0f} s",
            f"`kubectl -n {team} get pytorchjob {app}` and its pods' logs (docs/day-one-journey.md 12)",
        )
    finally:
        for obj in reversed(created):
            ctx.kube.delete(obj)
        ctx.found["fabric_deleted"] = [o["metadata"]["name"] for o in created]


def _verdict(found: list[dict], plan: Any) -> Outcome:
    worst = next((r for r in found if not r.get("healthy")), found[0])
    seen = (
        f"{len(found)} rank report(s) on {plan.pool.name}: NCCL network {_value(worst, 'NCCL network')}, "
        f"all-reduce bus bandwidth {_value(worst, 'NCCL all-reduce busbw')}"
    )
    if all(r.get("healthy") for r in found):
        return passed(seen)
    bad = [f"{r['check']} {r['value']} (expected {r['expected']})" for r in worst["results"] if not r.get("ok")]
    return failed(
        f"{seen}; {'; '.join(bad)}",
        "NCCL fell back or is slow: docs/day-one-journey.md 12 (`NCCL_DEBUG=INFO`, `fi_info -p efa` on the node)",
    )


def specs() -> list[Spec]:
    return [
        Spec(
            "trial.nccl",
            "NCCL across the trial's nodes selects EFA and reaches the pool's bus bandwidth (then deleted)",
            run,
            "kube",
            "create/delete configmaps, jobs, pytorchjobs in a team namespace; list pods; get pods/log",
            timeout_s=3700.0,
            after=("trial.gang",),
            costs=True,
        )
    ]

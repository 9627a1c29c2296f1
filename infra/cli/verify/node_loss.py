"""A lost node (`verify --allow-cost --disruptive --nodes 2`): the platform's own checkpointing job
(`higgsfield jobs render STACK pytorch-ddp`: examples/train_ddp.py behind examples/checkpointing.py)
runs across the trial's nodes, and once it has published a complete checkpoint the EC2 instance
under ONE of its nodes is terminated; the check passes when the gang is rescheduled and resumes
from that checkpoint, timed from the termination. Its objects are deleted whatever happened.

Where it runs: the team namespace whose queue the trial uses (as trial.nccl does), not a namespace
of its own, because a checkpoint that outlives a node needs the team's shared storage: FSx is
mounted through one static PersistentVolume per team namespace, pinned to that namespace's
`shared-data` claim (components/storage.py), so a fresh namespace has no storage a restarted gang
could read back. The job is named VERIFY_PREFIX + a timestamp (its checkpoint directory on FSx too,
so it never touches a team job's checkpoints) and carries the verify label.

What it reads from outside, the job's rank 0 log (the master pod's, `[rank 0] ...`):
- `step N loss L world W checkpoint` after each save. The background publisher starts a save's
  copy only after the previous one finished (BackgroundPublisher.submit waits), and rank 0's copy
  ends with the COMPLETE marker once every rank published (CheckpointStore.publish; a failed one
  is raised there and ends the job). So the second such line proves the first checkpoint complete.
- `resumed from DIR (step N), continuing at step N+1` on a start that loaded the newest complete
  checkpoint, or `no complete checkpoint in DIR: starting at step 0`: a restart that lost the work.
The progress metric (images/training/progress.py) says the step too, but only to Prometheus; the
COMPLETE marker is on FSx, which only a pod mounts.

What it terminates, and nothing else: the instance under the node of one worker pod of its own job,
read from the node's spec.providerID (`aws:///ZONE/i-...`, as the Cluster Autoscaler builds it:
kubernetes/autoscaler:cluster-autoscaler/cloudprovider/aws/aws_auto_scaling_groups.go
buildInstanceRefFromAWS@cluster-autoscaler-1.35.2), and only when every other pod on that node
belongs to a platform DaemonSet, outside the team namespaces (no one else's work is on it), and EC2
says the instance is running in that zone. The replacement node is the autoscaler's to bring and to take back."""

from __future__ import annotations

import datetime
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

from infra.cli.verify import Outcome, Spec, failed, skipped, trial
from infra.core.names import JOB_NAME_LABEL as JOB_LABEL
from infra.core.names import REPLICA_TYPE_LABEL as REPLICA_LABEL

VERIFY_PREFIX = "verify-node-loss-"
EXAMPLE = "pytorch-ddp"
# The job trains until it is deleted (train_ddp.py reads STEPS), checkpointing every CHECKPOINT_EVERY
# steps: the example's own 500 steps end in seconds on GPUs, before a node could be terminated.
STEPS = str(10**9)
CHECKPOINT_EVERY = "1000"
CHECKPOINT_LINE = re.compile(r"\bstep (\d+) loss \S+ world \d+ checkpoint")
RESUMED_LINE = re.compile(r"\bresumed from (\S+) \(step (\d+)\), continuing at step (\d+)")
FROM_ZERO = re.compile(r"\bno complete checkpoint in (\S+): starting at step 0")
PROVIDER_ID = re.compile(r"^aws:///([a-z0-9-]+)/(i-[0-9a-f]+)$")


@dataclass(frozen=True)
class Plan:
    """The node-loss trial on the trial gang's pool, nodes and queue, run as `team`."""

    trial: trial.Plan
    team: str
    seconds: float  # the trial's cold start and scale-down, plus the lost peer's timeout and a new node's boot

    @property
    def usd(self) -> float | None:
        rate = self.trial.rate_usd_h
        return None if rate is None else rate * self.trial.nodes * self.seconds / 3600

    def describe(self) -> str:
        money = f"about ${self.usd:,.2f}" if self.usd is not None else "not priced (spot or Capacity Block)"
        return (
            f"node-loss trial: {EXAMPLE} as team {self.team} on {self.trial.nodes} x {self.trial.pool.instance.name} "
            f"of pool {self.trial.pool.name}; TERMINATES the EC2 instance under one of its nodes; about "
            f"{self.seconds / 60:.0f} min, {money}"
        )


def render(cfg: Any, plan: Plan, name: str) -> list[dict]:
    """The rendered job (its ConfigMap, its PyTorchJob) named `name`, labelled, training until deleted."""
    from infra.cli.verify.trial import VERIFY_LABEL
    from infra.offline import jobs
    from infra.offline.pods import merge_env

    objects = jobs.render(
        EXAMPLE,
        cfg,
        pool=plan.trial.pool.name,
        team=plan.team,
        workers=plan.trial.nodes - 1,
        image=plan.trial.image,
        checkpoints=True,
        name=name,
    )
    for obj in objects:
        obj["metadata"].setdefault("labels", {})[VERIFY_LABEL] = "true"
    for template in jobs.pod_templates(objects[-1]):
        template.setdefault("metadata", {}).setdefault("labels", {})[VERIFY_LABEL] = "true"
        merge_env(template["spec"]["containers"][0], {"STEPS": STEPS, "CHECKPOINT_EVERY_STEPS": CHECKPOINT_EVERY})
    return objects


def choose(cfg: Any, chosen: trial.Plan) -> Plan:
    """The node-loss trial for the trial gang's choice, or a ConfigError saying why it cannot run."""
    from infra.config import ConfigError
    from infra.offline import cold_start, jobs

    if chosen.nodes < 2:
        raise ConfigError("--nodes", "a lost node needs a job across 2 nodes or more: rerun with --nodes 2")
    if not cfg.fsx.enabled:
        raise ConfigError(
            "higgsfield:fsx.enabled", "no shared storage: a multi-node job's checkpoints could not outlive a node"
        )
    team = next((t.name for t in cfg.scheduler.teams if t.queue == chosen.queue), None)
    if team is None:
        raise ConfigError("--pool", f"no team submits to queue {chosen.queue}: the job runs as a team")
    plan = Plan(chosen, team, chosen.seconds + jobs.COLLECTIVE_TIMEOUT_S + cold_start.cold_path(chosen.pool, 1).seconds)
    render(cfg, plan, VERIFY_PREFIX + "0")  # the job fits the pool, the team's quota and its queue, or says why
    return plan


# --- what the job says -----------------------------------------------------------------------------


def _stamped(log: str) -> list[tuple[datetime.datetime | None, str]]:
    """A log read with timestamps=true as (time, text) lines (RFC 3339, nanoseconds cut to micro)."""
    rows = []
    for row in log.splitlines():
        stamp, _, text = row.partition(" ")
        try:
            at = datetime.datetime.fromisoformat(
                (stamp[:26] + "Z" if len(stamp) > 27 else stamp).replace("Z", "+00:00")
            )
        except ValueError:
            at, text = None, row
        rows.append((at, text))
    return rows


def complete_step(log: str) -> int | None:
    """The newest checkpoint rank 0's log proves complete: the one before its last `checkpoint` line."""
    steps = [int(m.group(1)) for _, text in _stamped(log) if (m := CHECKPOINT_LINE.search(text))]
    return steps[-2] if len(steps) >= 2 else None


def restart_after(log: str, since: datetime.datetime) -> tuple[datetime.datetime, int | None, str] | None:
    """The first start logged at or after `since`: its time, the step it loaded (None: step 0) and the line."""
    for at, text in _stamped(log):
        if at is None or at < since:
            continue
        if m := RESUMED_LINE.search(text):
            return at, int(m.group(2)), text.strip()
        if FROM_ZERO.search(text):
            return at, None, text.strip()
    return None


def _replica(pod: dict) -> str:
    labels = pod["metadata"].get("labels") or {}
    return (labels.get(REPLICA_LABEL) or "").lower()


def _master(pods: list[dict]) -> dict | None:
    return next((p for p in pods if _replica(p) == "master"), None)


def _bound(pods: list[dict]) -> dict[str, str]:
    """The job's pods running on a node: pod name -> node name."""
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods
        if (p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("phase") == "Running"
    }


def _scheduled_at(pod: dict) -> datetime.datetime | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return trial._at(condition.get("lastTransitionTime"))
    return None


def _log(kube: Any, namespace: str, pod: str) -> str:
    """A pod's log, empty while there is none to read: the pod just deleted (404), its container not
    started yet (400, "... is waiting to start")."""
    from kubernetes.client.exceptions import ApiException

    try:
        return str(kube.pod_log(namespace, pod))
    except ApiException as exc:
        if exc.status in (400, 404):
            return ""
        raise


# --- what it terminates ----------------------------------------------------------------------------


class Refused(Exception):
    """The node is not one the check may terminate: said, nothing terminated."""


def target(ctx: Any, namespace: str, job: str, node_name: str) -> tuple[str, str]:
    """The instance id (and zone) under `node_name`, when the node runs a pod of the check's own `job`
    and no pod but DaemonSets' besides, and EC2 says it is running there; Refused otherwise."""
    on_node = ctx.kube.pods_on(node_name)

    def of_job(pod: dict) -> bool:
        meta = pod["metadata"]
        return meta.get("namespace") == namespace and (meta.get("labels") or {}).get(JOB_LABEL) == job

    # a team may run DaemonSets of its own (its edit rights): only the platform's, outside every team
    # namespace, are the node's agents rather than someone's work
    teams = {t.name for t in ctx.config.scheduler.teams}

    def of_daemon_set(pod: dict) -> bool:
        meta = pod["metadata"]
        owners = meta.get("ownerReferences") or []
        return meta.get("namespace") not in teams and any(o.get("kind") == "DaemonSet" for o in owners)

    if not any(of_job(p) for p in on_node):
        raise Refused(f"node {node_name} runs no pod of job {namespace}/{job}")
    others = [
        f"{p['metadata'].get('namespace')}/{p['metadata']['name']}"
        for p in on_node
        if not of_job(p) and not of_daemon_set(p)
    ]
    if others:
        raise Refused(f"node {node_name} also runs {', '.join(others)}, not of job {job}")
    provider = (ctx.kube.node(node_name).get("spec") or {}).get("providerID") or ""
    found = PROVIDER_ID.match(provider)
    if not found:
        raise Refused(f"node {node_name}'s providerID {provider!r} names no EC2 instance (aws:///ZONE/i-...)")
    zone, instance = found.groups()
    reservations = ctx.client("ec2").describe_instances(InstanceIds=[instance])["Reservations"]
    described = [i for r in reservations for i in r["Instances"] if i["InstanceId"] == instance]
    if not described:
        raise Refused(f"EC2 has no instance {instance} (node {node_name})")
    state, placed = described[0]["State"]["Name"], described[0]["Placement"]["AvailabilityZone"]
    if state != "running" or placed != zone:
        raise Refused(f"instance {instance} is {state} in {placed}, not running in {zone} as node {node_name} says")
    return instance, zone


def _terminate(ctx: Any, instance: str) -> str:
    answer = ctx.client("ec2").terminate_instances(InstanceIds=[instance])["TerminatingInstances"]
    return next(i["CurrentState"]["Name"] for i in answer if i["InstanceId"] == instance)


# --- the check -------------------------------------------------------------------------------------


def _wait(ctx: Any, deadline: float, probe: Any) -> Any:
    """`probe()` every poll until it returns something, the deadline passes or the run is stopped."""
    while time.monotonic() < deadline and not ctx.cancel.is_set():
        found = probe()
        if found is not None:
            return found
        ctx.cancel.wait(ctx.poll_s)
    return None


def _fix(team: str, job: str) -> str:
    return (
        f"`kubectl -n {team} describe pytorchjob {job}`, `kubectl -n {team} logs {job}-master-0`, the autoscaler's "
        "`kubectl -n kube-system get configmap cluster-autoscaler-status -o yaml` (docs/day-one-journey.md 13-14)"
    )


def _stopped(ctx: Any, what: str) -> str:
    return f"stopped {what} (interrupted)" if ctx.cancel.is_set() else f"{what} within {ctx.trial_timeout_s:.0f} s"


def _run_job(ctx: Any, plan: Plan, job: str) -> Outcome:
    kube, team, replicas = ctx.kube, plan.team, plan.trial.nodes

    def pods() -> list[dict]:
        return kube.pods(team, f"{JOB_LABEL}={job}")

    def checkpointed() -> tuple[int, list[dict]] | None:
        found = pods()
        master = _master(found)
        if master is None or len(_bound(found)) < replicas:
            return None
        step = complete_step(_log(kube, team, master["metadata"]["name"]))
        return None if step is None else (step, found)

    ready = _wait(ctx, time.monotonic() + ctx.trial_timeout_s, checkpointed)
    if ready is None:
        return failed(
            f"no complete checkpoint on {replicas} running node(s): " + _stopped(ctx, "none"), _fix(team, job)
        )
    step, before = ready
    workers = sorted((p for p in before if _replica(p) == "worker"), key=lambda p: p["metadata"]["name"])
    victim = workers[0] if workers else before[0]
    node = _bound(before)[victim["metadata"]["name"]]
    try:
        instance, zone = target(ctx, team, job, node)
    except Refused as exc:
        return failed(
            f"refused to terminate: {exc}; nothing was terminated",
            "the node runs other work, or is not what it says: rerun when the pool runs nothing else, or name "
            "another with --pool",
        )
    print(
        f"verify {ctx.stack}: terminating {instance} ({zone}), node {node} of {victim['metadata']['name']}",
        file=sys.stderr,
    )
    lost_at, old = ctx.now(), {p["metadata"]["uid"] for p in before}  # timed from the request
    state = _terminate(ctx, instance)
    ctx.found["node_loss_terminated"] = {"instance": instance, "node": node, "zone": zone}
    said = f"terminated {instance} ({state}) under node {node} ({victim['metadata']['name']}) after checkpoint {step}"
    rescheduled: list[datetime.datetime] = []

    def resumed() -> tuple[datetime.datetime, int | None, str] | None:
        master = _master(pods())
        restart = restart_after(_log(kube, team, master["metadata"]["name"]), lost_at) if master else None
        fresh = [p for p in pods() if p["metadata"]["uid"] not in old]  # after the log: a restart's pods are here
        if not rescheduled and len(_bound(fresh)) >= replicas and node not in _bound(fresh).values():
            rescheduled.append(max((_scheduled_at(p) or ctx.now() for p in fresh), default=ctx.now()))
        return restart

    restart = _wait(ctx, time.monotonic() + ctx.trial_timeout_s, resumed)
    if restart is None:
        where = "rescheduled, " if rescheduled else "not rescheduled, "
        return failed(f"{said}; the gang was {where}" + _stopped(ctx, "no resume"), _fix(team, job))
    at, loaded, line = restart
    if loaded is None or loaded < step:
        return failed(
            f"{said}; the gang restarted without it: {line!r}",
            f"checkpoints must be on shared storage ({plan.team}'s FSx claim): " + _fix(team, job),
        )
    timings = {
        "rescheduled_s": round(((rescheduled[0] if rescheduled else at) - lost_at).total_seconds(), 1),
        "resumed_s": round((at - lost_at).total_seconds(), 1),
        "checkpoint_step": float(step),
        "resumed_step": float(loaded),
    }
    return Outcome(
        "PASS",
        f"{said}; rescheduled in {timings['rescheduled_s']:.0f} s, resumed from step {loaded} in "
        f"{timings['resumed_s']:.0f} s (the replacement node is the autoscaler's)",
        timings=timings,
    )


def run(ctx: Any) -> Outcome:
    plan = ctx.found.get("node_loss")
    if plan is None:
        return skipped("no node-loss trial planned", "rerun with --allow-cost --disruptive --nodes 2")
    if isinstance(plan, str):
        return skipped(plan)
    job = VERIFY_PREFIX + ctx.now().strftime("%Y%m%d%H%M%S")
    created: list[dict] = []
    try:
        for obj in render(ctx.config, plan, job):
            ctx.kube.create(obj)
            created.append(obj)
        return _run_job(ctx, plan, job)
    finally:
        left = []
        for obj in reversed(created):
            try:
                ctx.kube.delete(obj)
            except Exception as exc:  # noqa: BLE001 - every object is tried; what stays is said
                left.append(f"{obj['kind']} {obj['metadata']['name']} ({type(exc).__name__})")
        ctx.found["node_loss_deleted"] = [o["metadata"]["name"] for o in created]
        if left:
            print(f"verify {ctx.stack}: could not delete {', '.join(left)} in {plan.team}", file=sys.stderr)


def specs() -> list[Spec]:
    return [
        Spec(
            "trial.node-loss",
            "a checkpointing job resumes from its checkpoint after the EC2 instance under one of its nodes is "
            "terminated, timed (then deleted)",
            run,
            "aws+kube",
            "ec2:DescribeInstances, ec2:TerminateInstances (one instance, under its own job); create/delete "
            "configmaps, pytorchjobs in a team namespace; list pods, get nodes, get pods/log",
            timeout_s=7300.0,
            after=("trial.gang",),
            costs=True,
            disrupts=True,
        )
    ]

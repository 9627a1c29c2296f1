"""Gives back the nodes of a gang that cannot be whole (docs/capacity.md).

When EC2 delivers 10 of the 16 nodes a gang asked for, Volcano binds none of its pods (gang) and the
10 wait, idle. The Cluster Autoscaler does not remove them: before it looks for unneeded nodes it
packs the pending pods onto the nodes there are (filterOutSchedulableByPacking, kubernetes/
autoscaler:cluster-autoscaler/core/podlistprocessor/filter_out_schedulable.go@cluster-autoscaler-
1.35.2), so the idle nodes look used for as long as the gang's pods exist. Only removing the pods
gives them back. This program (a CronJob, components/gang_deadline.py) does that:

- a gang that waits (its PodGroup Inqueue, or Pending for a batch Job's gang, whose pods exist
  before its queue admits it), none of whose waiting pods is bound (a finished one holds nothing),
  while one of its pods may land on an idle node (one the autoscaler bought and nobody uses), has a
  clock: its job's annotation `higgsfield.io/waiting-since`, set by the first pass that sees it so
  (clock_actions). Once that is older than the deadline of the pools its pods may land on (boot +
  healthGate.timeout + a margin: the nodes are not coming; the longest, when they may land on
  several), its job is suspended with the annotation `higgsfield.io/gave-back-at`: a Kubeflow job's
  `runPolicy.suspend: true` (the operator deletes its pods and PodGroup, kubeflow/trainer:pkg/
  controller.v1/common/job.go@v1.9.4), a batch Job's `spec.suspend: true` (the Job controller
  deletes its active pods; Volcano's controller made its PodGroup, owned by the Job); the idle
  nodes are then unneeded and go after the pool's scaleDownUnneededTime;
- a gang that ran and lost a member (its node lost or drained) has its survivors' nodes idle: they
  cannot train short of the gang. Once their pods are recreated, pending, it waits as above (a member
  being deleted, as the lost node's pod is until its Node object goes, is neither bound nor waiting);
  while some still run, Volcano calls the gang Unknown (`broken`), and the same clock and deadline
  apply, counted from the break;
- a job suspended by us longer than `retryAfterSeconds` is resumed (suspend: false, the annotation
  removed): its PodGroup is created Pending and queues again. A job someone else suspended
  (no annotation) is never resumed;
- a job its team paused (suspended, no `gave-back-at`) keeps its clock, so a pause does not restart it,
  until the pause has lasted as long as its pools keep an empty node and no idle node of its pools made
  between the job and its pause is still there: its pods are gone, the nodes they held have gone too, and the
  clock comes off (pause_actions); resumed, the gang starts a new one;
- a team that deletes its waiting job and submits it again (under any name) gets no new clock: per team
  namespace and pool, the CronJob keeps since when the team's gangs have waited there beside idle nodes,
  unbroken (TeamClock, in its own ConfigMap `gang-deadline-team-clocks`, which teams cannot write), and a gang
  of the team that starts waiting there while a gang of the team waited less than the pool's emptySeconds ago
  (the idle nodes may still be those bought for it) starts its clock at that start, even beside a gang of the
  team that still waits (docs/design/tenancy.md, "a team's second gang in a pool keeps its team's clock").
  Another team's gang starts its own. The team's clock stops once none of its gangs has waited there for
  emptySeconds, once a clocked gang of the team runs there (whole, on the nodes it waited for) while no idle node of
  the pool made since the clock started (less emptySeconds) is left (a decoy that runs on one of them leaves the
  others idle), and when the deadline queues one of its jobs again while no other gang of the team has kept it since
  the job was given back (a retry starts a new clock) (running_team_clocks, next_team_clocks).

The team policy keeps both annotations and the suspension ours (components/tenancy.py
suspension_validations). Standard library only; `decide` and the clocks' functions are pure and tested,
`run` (which reads and writes the team clocks) against the fake API server (tests/components/
test_gang_deadline*.py); `main` talks to the API with the pod's service account as health_gate.py does.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

GAVE_BACK = "higgsfield.io/gave-back-at"
WAITING_SINCE = "higgsfield.io/waiting-since"  # on a job: since when its gang has waited beside idle nodes
POOL_LABEL = "higgsfield.io/pool"
# The teams' CPU nodes' label (infra/core/names.py TEAM_CPU_LABEL): no GPU pool's node carries it, so a pod that
# selects it (an MPI job's launcher) lands on no GPU pool.
TEAM_CPU_LABEL = "higgsfield.io/team-cpu"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # Volcano's pod -> PodGroup link
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # a static pod's mirror (k8s.io/api/core/v1 MirrorPodAnnotationKey)
# Kubeflow v1 kinds and their resources (kubeflow/trainer:manifests/base/crds@v1.9.4)
# A plain gang's job: Volcano's controller owns a batch Job's PodGroup by the Job (newPGOwnerReferences,
# volcano-sh/volcano:pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1).
BATCH_JOB = "Job"
KINDS = {
    "PyTorchJob": "pytorchjobs",
    "MPIJob": "mpijobs",
    "TFJob": "tfjobs",
    "XGBoostJob": "xgboostjobs",
    "JAXJob": "jaxjobs",
    "PaddleJob": "paddlejobs",
}


@dataclass(frozen=True)
class Action:
    verb: str  # "suspend" or "resume" a job; "mark" or "unmark" its clock (clock_actions, pause_actions)
    namespace: str
    kind: str
    name: str
    reason: str
    at: datetime | None = None  # a mark's start, where it is not the pass's: its team's clock (clock_actions)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _stamp(text: Any) -> datetime | None:
    """One of our annotations' times; None where it is not a time with a zone (the team policy lets only the
    CronJob write them, but an object made before that rule could carry anything, and one such object must
    not stop the pass for every team)."""
    try:
        moment = _time(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None


def _job_of(ref: dict) -> tuple[str, str] | None:
    """(kind, name) of the job an owner reference names, when it is one the deadline suspends."""
    if ref.get("apiVersion", "").startswith("kubeflow.org/") and ref.get("kind") in KINDS:
        return ref["kind"], ref["name"]
    if ref.get("apiVersion") == "batch/v1" and ref.get("kind") == BATCH_JOB:
        return BATCH_JOB, ref["name"]
    return None


def _owner_job(podgroup: dict) -> tuple[str, str] | None:
    for ref in podgroup["metadata"].get("ownerReferences") or []:
        job = _job_of(ref)
        if job is not None:
            return job
    return None


def _suspended(job: dict) -> bool:
    spec = job.get("spec") or {}
    return (spec if job["kind"] == BATCH_JOB else spec.get("runPolicy") or {}).get("suspend") is True


# The condition a job's controller sets once it has acted on spec.suspend (asked for its pods' deletion; each may take
# the stack's grace to end, which each pool's emptySeconds adds): True with the time it
# turned so, False again on resume. The Training Operator's (ReconcileJobs, UpdateJobConditions JobSuspended,
# kubeflow/trainer:pkg/controller.v1/common/job.go and pkg/util/status.go@v1.9.4: every kind's Reconcile calls it;
# setCondition keeps lastTransitionTime while the status stays) and the Job controller's (syncJob,
# ensureJobConditionStatus JobSuspended, kubernetes/kubernetes:pkg/controller/job/job_controller.go, read through
# the code search). Status is the controllers' alone: a write of the job itself cannot set its status (a batch
# Job's PrepareForCreate/PrepareForUpdate, kubernetes/kubernetes:pkg/registry/batch/job/strategy.go; a custom
# resource with a status subresource, CustomResourceSubresourceStatus in kubernetes/apiextensions-apiserver:
# pkg/apis/apiextensions/v1/types.go; both read through the code search; every Kubeflow CRD has one,
# kubeflow/trainer:manifests/base/crds@v1.9.4), and the status subresource is a team's to get only (components/
# tenancy.py job_submitter_role; AmazonEKSEditPolicy writes jobs and only reads jobs/status: awsdocs/
# amazon-eks-user-guide:latest/ug/manage-access/k8s-access/access-policy-reference.adoc@145543a9).
SUSPENDED_CONDITION = "Suspended"


def _paused_at(job: dict) -> datetime | None:
    """When the job's controller acted on its team's suspension: a suspended job without GAVE_BACK (the
    deadline's own) whose condition says so. None while its controller has not acted (its pods may still be
    there) and for a job that is not paused by its team."""
    if not _suspended(job) or _annotation(job, GAVE_BACK) is not None:
        return None
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == SUSPENDED_CONDITION and condition.get("status") == "True":
            return _stamp(condition.get("lastTransitionTime"))
    return None


def _key(job: dict) -> tuple[str, str, str]:
    """A listed job's (namespace, kind, name): what a gang's `job` and an Action name it by."""
    return job["metadata"]["namespace"], job["kind"], job["metadata"]["name"]


def _on(job: dict, verb: str, reason: str) -> Action:
    """An action on a listed job (keep_job, with its kind)."""
    return Action(verb, *_key(job), reason)


def _finished(pod: dict) -> bool:
    """A Succeeded or Failed pod: it keeps its spec.nodeName but holds nothing (Volcano drops a terminated
    task from its node: addTask's `!isTerminated`, volcano-sh/volcano:pkg/scheduler/cache/event_handlers.go@
    v1.15.1; the autoscaler lists no pod in those phases)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _leaving(pod: dict) -> bool:
    """A pod being deleted. Volcano counts it Releasing, neither scheduled nor ready, so its gang is short of
    minMember without it (getTaskStatus, volcano-sh/volcano:pkg/scheduler/api/helpers.go; getPodGroupPhase,
    pkg/scheduler/framework/session.go@v1.15.1). On a node that no longer answers it stays so, phase Running,
    bound there, until its kubelet answers again or the Node object is deleted ("Delete Pods", kubernetes/
    website:content/en/docs/tasks/run-application/force-delete-stateful-set-pod.md, read through the code
    search) and the pod garbage collector removes it (gcOrphaned, kubernetes/kubernetes:pkg/controller/podgc/
    gc_controller.go, same); only then does the operator make its replica again."""
    return bool(pod["metadata"].get("deletionTimestamp"))


def _bound(pod: dict) -> bool:
    """A member placed on a node and still there for its gang: not finished, not being deleted."""
    return bool(pod["spec"].get("nodeName")) and not _finished(pod) and not _leaving(pod)


def _holds_its_node(pod: dict) -> bool:
    """A pod bound to a node that keeps it from being idle: any pod of any namespace that has not
    ended, GPU or not (a pod asking no GPU still holds the node's CPU, memory or EFA interfaces, and
    keeps the autoscaler from removing it), except a DaemonSet's that asks no GPU (the platform's
    agents, on every node) and a kubelet's mirror pod."""
    if not pod["spec"].get("nodeName") or _finished(pod):
        return False
    if MIRROR_ANNOTATION in (pod["metadata"].get("annotations") or {}):
        return False
    daemon = any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or [])
    return not daemon or _gpus(pod) > 0


def idle_nodes(nodes: list[dict], pods: list[dict], gpus_only: bool = False) -> list[dict]:
    """The pools' nodes no pod holds (`pods`: every pod of the cluster): capacity being paid for
    and not used. With `gpus_only`, the nodes on which no pod holds a GPU: whether a GPU node bought for a gang
    is used as it was bought, which a pod asking none (any team's, placed beside the gang's nodes for a pass)
    does not make so."""
    busy = {p["spec"]["nodeName"] for p in pods if _holds_its_node(p) and (not gpus_only or _gpus(p) > 0)}
    return [n for n in nodes if POOL_LABEL in (n["metadata"].get("labels") or {}) and n["metadata"]["name"] not in busy]


# Where a pod may be scheduled, as kube-scheduler's NodeAffinity filter decides (Volcano's predicates
# plugin runs that same filter, volcano-sh/volcano:pkg/scheduler/plugins/predicates/predicates.go@v1.15.1,
# and so does the Cluster Autoscaler when it packs pending pods onto nodes, kubernetes/autoscaler:
# cluster-autoscaler/simulator/clustersnapshot/predicate/plugin_runner.go@cluster-autoscaler-1.35.2):
# every nodeSelector label AND, when set, the required node affinity (GetRequiredNodeAffinity,
# kubernetes/component-helpers:scheduling/corev1/nodeaffinity/nodeaffinity.go@v0.35.3). Its
# nodeSelectorTerms are ORed, a term's requirements ANDed, and an empty term matches no node
# (kubernetes/api:core/v1/types.go@v0.35.0 NodeSelector, NodeSelectorTerm).


def _requirement_holds(req: dict, value: str | None) -> bool:
    """One label requirement against the node's value of its key (None: the node lacks the label);
    a label's absence satisfies NotIn and DoesNotExist only (Requirement.Matches, kubernetes/
    apimachinery:pkg/labels/selector.go@v0.35.3)."""
    op, values = req.get("operator"), req.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        have, bound = _integer(value), _integer(values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _integer(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): decimal digits with an optional sign, within 64 bits."""
    number = int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None
    return number if number is not None and -(2**63) <= number < 2**63 else None


def _field_holds(req: dict, name: str) -> bool:
    """One matchFields requirement: In or NotIn with one value, on the node's fields, of which
    there is only metadata.name (extractNodeFields, nodeaffinity.go@v0.35.3); a field the node
    lacks reads as ""."""
    values = req.get("values") or []
    if req.get("operator") not in ("In", "NotIn") or len(values) != 1:
        return False
    equal = (name if req.get("key") == "metadata.name" else "") == values[0]
    return equal if req["operator"] == "In" else not equal


def _pool_labels(pool: str) -> dict[str, str | None]:
    """What is known of a GPU pool's nodes before they exist: their pool, and that they are none of the teams' CPU
    nodes (a label known absent is None)."""
    return {POOL_LABEL: pool, TEAM_CPU_LABEL: None}


def _may_land(spec: dict, labels: dict[str, str | None], name: str | None) -> bool:
    """Whether the scheduler may put a pod with this spec on a node with these labels and name.
    `name` None: a node of which only `labels` are known (a pool's, for its deadline, before its
    nodes exist): requirements on other labels and on fields are taken to hold, so a pod is never
    given a pool's shorter deadline for what a node of another pool might have."""

    def label(key: str, want: Any) -> bool:  # want: a requirement (affinity) or a value (nodeSelector)
        if name is None and key not in labels:
            return True
        if isinstance(want, dict):
            return _requirement_holds(want, labels.get(key))
        return labels.get(key) == want

    if not all(label(k, v) for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return any(
        (term.get("matchExpressions") or term.get("matchFields"))
        and all(label(r["key"], r) for r in term.get("matchExpressions") or [])
        and (name is None or all(_field_holds(r, name) for r in term.get("matchFields") or []))
        for term in required.get("nodeSelectorTerms") or []
    )


def _gpus(pod: dict) -> int:
    total = 0
    for c in (pod["spec"].get("containers") or []) + (pod["spec"].get("initContainers") or []):
        res = c.get("resources") or {}
        total += int((res.get("requests") or res.get("limits") or {}).get("nvidia.com/gpu", 0))
    return total


def _members(podgroups: list[dict], pods: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Each PodGroup's pods (namespace, name), by the group annotation Volcano's pods carry."""
    teams = {pg["metadata"]["namespace"] for pg in podgroups}
    by_group: dict[tuple[str, str], list[dict]] = {}
    for pod in pods:
        if pod["metadata"]["namespace"] not in teams:
            continue
        group = (pod["metadata"].get("annotations") or {}).get(GROUP_ANNOTATION)
        if group:
            by_group.setdefault((pod["metadata"]["namespace"], group), []).append(pod)
    return by_group


# The phases in which a gang waits for nodes with pods: Inqueue (its queue admitted it; a Kubeflow job's pods
# are made only then: DelayPodCreationDueToPodGroup, kubeflow/trainer:pkg/controller.v1/control/
# podgroup_control.go@v1.9.4), and, for a batch Job's gang, Pending too: its pods exist before its queue
# admits it and are marked Unschedulable all the same (RecordJobStatusEvent, volcano-sh/volcano:pkg/
# scheduler/cache/cache.go@v1.15.1), so the autoscaler buys nodes for them.
WAITING_PHASES = {"Inqueue": (BATCH_JOB, *KINDS), "Pending": (BATCH_JOB,)}
RAN_PHASES = ("Running", "Completed")


@dataclass(frozen=True)
class Gang:
    """A gang waiting for nodes while a member may land on an idle one: what it holds and for how long it may."""

    podgroup: dict
    job: tuple[str, str, str]  # namespace, kind, name of the job that owns it
    pools: list[str]
    deadline: float
    # what the gang holds while it waits, and gives back: for the log lines of its mark and its suspension
    held: str = "beside idle nodes"
    gives_back: str = "the nodes that arrived"
    holds: tuple[str, ...] = ()  # the pools of the idle nodes it holds: where its team's clock runs (next_team_clocks)


def _job_key(namespace: str, owner: tuple[str, str]) -> tuple[str, str, str]:
    return namespace, owner[0], owner[1]


def _short_off_the_pools(pg: dict, members: list[dict], pool_of: dict[str, str | None]) -> bool:
    """A gang short of its minimum (BROKEN_PHASE) whose bound members ask no GPU and stand on no pool's node: an MPI
    job's launcher, on the teams' CPU nodes, whose workers were lost and are made again. It holds no GPU node by its
    running members (what `broken` times), so it waits for its GPU nodes as a gang none of whose members is bound."""
    bound = [p for p in members if p["spec"].get("nodeName")]
    return (
        (pg.get("status") or {}).get("phase") == BROKEN_PHASE
        and bool(bound)
        and len(bound) < len(members)
        and not any(_gpus(p) or pool_of.get(p["spec"]["nodeName"]) for p in bound)
    )


def holding(podgroups: list[dict], pods: list[dict], nodes: list[dict], deadlines: dict[str, float]) -> list[Gang]:
    """The gangs that wait for nodes (a waiting phase, members that have not finished, none bound, or bound only off
    the pools without GPUs) while one of their members may land on an idle node of the pools they may use, owned by
    a job the deadline can suspend."""
    idle = idle_nodes(nodes, pods)
    pool_of = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(POOL_LABEL) for n in nodes}
    by_group = _members(podgroups, pods)
    gangs = []
    for pg in podgroups:
        owner = _owner_job(pg)
        if owner is None:
            continue
        group = by_group.get((pg["metadata"]["namespace"], pg["metadata"]["name"]), [])
        members = [p for p in group if not _finished(p) and not _leaving(p)]  # those the gang still waits on
        if _short_off_the_pools(pg, members, pool_of):
            members = [p for p in members if not p["spec"].get("nodeName")]
        elif owner[0] not in WAITING_PHASES.get((pg.get("status") or {}).get("phase"), ()):
            continue
        if not members or any(p["spec"].get("nodeName") for p in members):
            continue
        # The pools any member may land on (a pod that names none may land on every pool): the gang
        # is whole only when each member is, so any member's pool may be the one it still waits for.
        pools = sorted(p for p in deadlines if any(_may_land(m["spec"], _pool_labels(p), None) for m in members))
        # Only a node a member may land on is held by the gang (the autoscaler packs a pending pod
        # only where the scheduler's filters pass). A gang that may land on no node at all never
        # runs but holds nothing and had nothing bought for it: it is left for its team to fix,
        # since suspending it gives back nothing and it would come back the same after the retry.
        holds = {
            n["metadata"]["labels"][POOL_LABEL]
            for n in idle
            if n["metadata"]["labels"][POOL_LABEL] in pools
            and any(_may_land(m["spec"], n["metadata"]["labels"], n["metadata"]["name"]) for m in members)
        }
        if holds:
            # the longest deadline: never cut short a gang that may still be served
            deadline = max(deadlines[p] for p in pools)
            job = _job_key(pg["metadata"]["namespace"], owner)
            gangs.append(Gang(pg, job, pools, deadline, holds=tuple(sorted(holds))))
    return gangs


# A gang that ran and fell short of its minimum while members still run: the gang plugin marks it unschedulable
# each session it is not ready (fewer than minMember bound, running or succeeded: OnSessionClose, volcano-sh/
# volcano:pkg/scheduler/plugins/gang/gang.go; ReadyTaskNum, pkg/scheduler/api/job_info.go@v1.15.1), and a group
# with running members that is unschedulable is Unknown (getPodGroupPhase, pkg/scheduler/framework/session.go,
# same ref). Its waiting member binds only once a node is there for it, and until then its running members do
# no work: a fixed gang's ranks cannot train without the lost one, nor an elastic one below its minimum.
BROKEN_PHASE = "Unknown"


def broken(podgroups: list[dict], pods: list[dict], nodes: list[dict], deadlines: dict[str, float]) -> list[Gang]:
    """The gangs short of their minimum (BROKEN_PHASE) with a member still bound to a node of a pool: what it holds
    is that node, doing nothing. The deadline is the longest of the pools it holds and its members may use."""
    pool_of = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(POOL_LABEL) for n in nodes}
    by_group = _members(podgroups, pods)
    gangs = []
    for pg in podgroups:
        owner = _owner_job(pg)
        if owner is None or (pg.get("status") or {}).get("phase") != BROKEN_PHASE:
            continue
        group = [p for p in by_group.get((pg["metadata"]["namespace"], pg["metadata"]["name"]), []) if not _finished(p)]
        held = {pool_of.get(p["spec"]["nodeName"]) for p in group if _bound(p)} & set(deadlines)
        if not held:
            continue
        usable = {p for p in deadlines if any(_may_land(m["spec"], _pool_labels(p), None) for m in group)}
        pools = sorted(held | usable)
        deadline = max(deadlines[p] for p in pools)
        job = _job_key(pg["metadata"]["namespace"], owner)
        gangs.append(
            Gang(pg, job, pools, deadline, "short of its minimum", "its running members' nodes", tuple(sorted(held)))
        )
    return gangs


def waiting(podgroups: list[dict], pods: list[dict], nodes: list[dict], deadlines: dict[str, float]) -> list[Gang]:
    """Every gang on the clock: those that wait beside idle nodes (`holding`) and those short of their minimum
    (`broken`); a PodGroup is in one phase, so in one of them at most."""
    return holding(podgroups, pods, nodes, deadlines) + broken(podgroups, pods, nodes, deadlines)


def _annotation(job: dict, key: str) -> Any:
    return (job["metadata"].get("annotations") or {}).get(key)


def _ran(podgroups: list[dict], pods: list[dict]) -> set[tuple[str, str, str]]:
    """The jobs whose gang runs or has run: its PodGroup is Running or Completed, or a member is bound."""
    by_group = _members(podgroups, pods)
    ran = set()
    for pg in podgroups:
        owner = _owner_job(pg)
        if owner is None:
            continue
        group = by_group.get((pg["metadata"]["namespace"], pg["metadata"]["name"]), [])
        phase = (pg.get("status") or {}).get("phase")
        if phase == BROKEN_PHASE:
            continue  # its members are bound, but the gang is short of them: it waits
        if phase in RAN_PHASES or any(_bound(p) for p in group):
            ran.add(_job_key(pg["metadata"]["namespace"], owner))
    return ran


# --- a team's clock ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TeamClock:
    """Since when a team's gangs have waited beside idle nodes of a pool, unbroken, and the last pass that saw one
    do so. A gang's clock is its job's, so a team that deletes its waiting job and submits it again (under any name)
    would start a new one each time and keep the idle nodes bought for its first gang as long as it likes; a gang of
    the team that starts waiting in the pool while this is live starts its clock at `since` (clock_actions)."""

    since: datetime
    seen: datetime


TeamClocks = dict[tuple[str, str], TeamClock]  # (team namespace, pool) -> its clock


def team_clocks_of(data: dict, namespaces: Collection[str], pools: Collection[str]) -> TeamClocks:
    """The team clocks as team_clocks_data stored them. Only the CronJob writes them (the ConfigMap is in its own
    namespace, where teams have no rights), but an entry that is not one, or is of a team or pool the CronJob no
    longer serves, is dropped rather than read: it must neither stop the pass nor give a gang a clock."""
    clocks: TeamClocks = {}
    for key, text in data.items():
        namespace, _, pool = str(key).partition(".")
        moments = re.fullmatch(r"([0-9]{1,11}) ([0-9]{1,11})", text) if isinstance(text, str) else None
        if namespace not in namespaces or pool not in pools or moments is None:
            continue
        since, seen = (datetime.fromtimestamp(int(m), timezone.utc) for m in moments.groups())
        if since <= seen:
            clocks[(namespace, pool)] = TeamClock(since, seen)
    return clocks


def team_clocks_data(clocks: TeamClocks) -> dict[str, str]:
    """The ConfigMap's data: "NAMESPACE.POOL" -> "SINCE SEEN" (Unix seconds). Both names are DNS labels of at most
    30 characters (infra/config/base.py DnsLabel; a namespace's name has no dot), so a key is unambiguous and at
    most 61 characters, an entry under 90 bytes: the 100 teams by 100 pools the settings allow (MAX_ITEMS) stay
    under a ConfigMap's 1 MiB ("The data stored in a ConfigMap cannot exceed 1 MiB", kubernetes/website:content/
    en/docs/concepts/configuration/configmap.md, read through the code search)."""
    return {
        f"{namespace}.{pool}": f"{int(c.since.timestamp())} {int(c.seen.timestamp())}"
        for (namespace, pool), c in sorted(clocks.items())
    }


def _ran_in(podgroups: list[dict], pods: list[dict], nodes: list[dict]) -> dict[tuple[str, str, str], set[str]]:
    """The pools of the nodes each gang that runs or has run (`_ran`) is or was placed on: its members' nodes (a
    finished member keeps its nodeName), as far as they are nodes of a pool still there."""
    pool_of = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(POOL_LABEL) for n in nodes}
    by_group = _members(podgroups, pods)
    ran = _ran(podgroups, pods)
    placed: dict[tuple[str, str, str], set[str]] = {}
    for pg in podgroups:
        owner = _owner_job(pg)
        job = None if owner is None else _job_key(pg["metadata"]["namespace"], owner)
        if job is None or job not in ran:
            continue
        group = by_group.get((pg["metadata"]["namespace"], pg["metadata"]["name"]), [])
        pools = {pool_of.get(p["spec"].get("nodeName") or "") for p in group}
        placed.setdefault(job, set()).update(p for p in pools if p is not None)
    return placed


def _idle_made_between(idle: list[dict], pools: Collection[str], start: datetime, end: datetime) -> str | None:
    """An `idle` node of `pools` made between `start` and `end`; None where no such node is (or its time is unknown)."""
    for node in idle:
        meta = node["metadata"]
        made = _stamp(meta.get("creationTimestamp"))
        if made and (meta.get("labels") or {}).get(POOL_LABEL) in pools and start <= made <= end:
            return str(meta["name"])
    return None


def _bought_for(job: dict, pools: Collection[str], idle: list[dict], paused: datetime) -> str | None:
    """An idle node of the job's pools made between the job and its pause: one that may have been bought for its
    gang, still there. None where no such node is (or a time is unknown)."""
    made = _stamp((job.get("metadata") or {}).get("creationTimestamp"))
    return None if made is None else _idle_made_between(idle, pools, made, paused)


def running_team_clocks(
    clocks: TeamClocks,
    podgroups: list[dict],
    pods: list[dict],
    nodes: list[dict],
    jobs: list[dict],
    empty_s: dict[str, float],
    resumed: Collection[tuple[str, str, str]],
    now: datetime,
) -> TeamClocks:
    """The team clocks that still run at `now`: a gang of the team waited in the pool less than the pool's
    emptySeconds ago, so the idle nodes there may still be those bought for it (as a pause that short keeps a job's
    clock, pause_actions); a pool of unknown emptiness keeps none, and a clock seen after `now` is no clock. A
    team's clocks stop too in the pools where a job's clocked gang runs now (it is whole, on the nodes it waited
    for: the team's next gang waits for nodes of its own; only there: its templates may name other pools, every pool
    for one that selects an instance type rather than a pool, where its team's other gangs still wait), unless an
    idle node of the pool made since the clock started is still there (idle of GPUs: a team's CPU pod placed there
    for a pass does not use what its gangs waited for) (from its start less the pool's emptySeconds:
    a node bought for a gang of the team that no pass saw wait beside it stays idle that long before its clock
    starts): the run did not use what the team's gangs waited beside, and a decoy that binds one such node would
    give the gang replacing theirs a fresh clock beside the others; and where
    the deadline queues a job again (`resumed`: a retry starts a new clock, as it always has) in the pools of its
    templates whose clock no gang of the team has kept since the job was given back: there the clock is the job's
    own. Where one has, the clock is that gang's, which its own mark would keep anyway (next_team_clocks), unless
    the team replaced it: ended there, a decoy's retry would give the replacement a fresh clock beside the same
    idle nodes."""
    live = {
        key: c
        for key, c in clocks.items()
        if key[1] in empty_s and timedelta(0) <= now - c.seen < timedelta(seconds=empty_s[key[1]])
    }
    ran_in, idle = _ran_in(podgroups, pods, nodes), idle_nodes(nodes, pods, gpus_only=True)
    for job in jobs:
        namespace, gave_back = job["metadata"]["namespace"], _stamp(_annotation(job, GAVE_BACK))
        retried = _key(job) in resumed and gave_back is not None
        ended = {
            pool
            for pool in job.get("pools") or []
            if retried and (c := live.get((namespace, pool))) and c.seen <= gave_back
        }
        if _annotation(job, WAITING_SINCE):
            ended |= {
                pool
                for pool in ran_in.get(_key(job), set())
                if (c := live.get((namespace, pool))) is None
                or _idle_made_between(idle, (pool,), c.since - timedelta(seconds=empty_s[pool]), now) is None
            }
        for pool in ended:
            live.pop((namespace, pool), None)
    return live


def _team_start(gang: Gang, live: TeamClocks) -> datetime | None:
    """The earliest live clock of the gang's team in a pool whose idle nodes it holds."""
    return min((c.since for pool in gang.holds if (c := live.get((gang.job[0], pool))) is not None), default=None)


def next_team_clocks(
    live: TeamClocks,
    podgroups: list[dict],
    pods: list[dict],
    nodes: list[dict],
    jobs: list[dict],
    deadlines: dict[str, float],
    now: datetime,
) -> TeamClocks:
    """The team clocks after this pass: those still running (`live`, running_team_clocks), each kept running by
    every gang of its team waiting now beside idle nodes of its pool, from the earliest of its start and the gang's
    clock (a gang marked this pass has its team's start, clock_actions, or now); a gang whose team has no clock
    running in such a pool starts one. So a team has one clock per pool at most, and none once its gangs stop
    waiting there."""
    after = dict(live)
    since = {_key(j): _stamp(_annotation(j, WAITING_SINCE)) for j in jobs}
    for gang in waiting(podgroups, pods, nodes, deadlines):
        start = since.get(gang.job) or _team_start(gang, live) or now
        for pool in gang.holds:
            key = (gang.job[0], pool)
            kept = after.get(key)
            after[key] = TeamClock(min(start, kept.since) if kept else start, now)
    return after


def clock_actions(
    podgroups: list[dict],
    pods: list[dict],
    nodes: list[dict],
    jobs: list[dict],
    deadlines: dict[str, float],
    team: TeamClocks | None = None,
) -> list[Action]:
    """A gang's clock is its job's annotation WAITING_SINCE: the pass that first saw the gang waiting while it
    held an idle node ("mark"), so its deadline counts paid idle time, not a capacity shortage during which it
    held nothing; or, where its team's clock runs in a pool whose idle nodes it holds (`team`: running_team_clocks),
    that clock's start, so a team that deletes its waiting job and submits it again gets no new clock. It stays
    while the team suspends, resumes or re-makes the job's pods (the operator deletes and re-makes a suspended
    job's PodGroup: CleanUpResources, kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4), and comes off once
    the gang runs ("unmark"), when the deadline suspends the job (patch_for), so that each retry starts a new clock
    (its resume stops its team's clock too), or once its team has paused it for as long as its pools keep an empty
    node (pause_actions). Only the CronJob writes it (the team policy)."""
    stamped = {_key(j) for j in jobs if _annotation(j, WAITING_SINCE)}
    actions = []
    for gang in waiting(podgroups, pods, nodes, deadlines):
        if gang.job in stamped:
            continue
        start = _team_start(gang, team or {})
        if start is None:
            actions.append(Action("mark", *gang.job, f"waiting {gang.held}"))
        else:
            reason = f"waiting {gang.held}, where its team's gangs have waited since {start:%Y-%m-%dT%H:%M:%SZ}"
            actions.append(Action("mark", *gang.job, reason, start))
    actions += [Action("unmark", *job, "its gang runs") for job in sorted(stamped & _ran(podgroups, pods))]
    return actions


def pause_actions(
    jobs: list[dict], empty_s: dict[str, float], now: datetime, idle: list[dict] | None = None
) -> list[Action]:
    """A clocked job its team paused: its clock stays while the pause is shorter than the longest time its pools
    keep an empty node (`empty_s`), since the nodes bought for its gang are idle and paid for all that time, and
    comes off ("unmark") once the pause has lasted that long: the pods went when its controller acted, the nodes
    they held went after, and the gang, resumed, waits for nodes like a new one. Unless they have not gone: emptySeconds
    is when an empty node may go, and the Cluster Autoscaler removes none while its scale-down is in cooldown,
    which every scale-up in the cluster restarts (isScaleDownInCooldown, kubernetes/autoscaler:cluster-autoscaler/
    core/static_autoscaler.go, read through the code search). So the clock stays while an `idle` node of its pools
    made between the job and its pause is still there (_bought_for). Each job's pools are those its pod templates
    may land on (keep_job); a job with a pool of unknown emptiness keeps its clock."""
    actions = []
    for job in jobs:
        paused = _paused_at(job)
        pools = job.get("pools") or []
        if paused is None or not _annotation(job, WAITING_SINCE) or not pools or any(p not in empty_s for p in pools):
            continue
        empty = max(empty_s[p] for p in pools)
        if (now - paused).total_seconds() >= empty and _bought_for(job, pools, idle or [], paused) is None:
            actions.append(
                _on(
                    job,
                    "unmark",
                    f"paused by its team since {paused:%Y-%m-%dT%H:%M:%SZ}, longer than "
                    f"{'pool' if len(pools) == 1 else 'pools'} {', '.join(pools)} "
                    f"{'keeps' if len(pools) == 1 else 'keep'} an empty node ({empty:.0f}s): the nodes its gang held "
                    "have gone, and resumed it starts a new clock",
                )
            )
    return actions


def fresh_pause_actions(jobs: list[dict], deadlines: dict[str, float], check_s: float, now: datetime) -> list[Action]:
    """A clocked job past its deadline that its team paused since the previous pass (`check_s` ago) is given back as
    if a pass had seen its gang: it ran or waited between two passes, its pods beside the nodes bought for them, and
    a team pausing just around each pass would otherwise never be seen. Its pods are gone already; the suspension
    is the deadline's from then on (GAVE_BACK), so the team resumes nothing before retryAfterSeconds, when the
    deadline resumes it as any gang it gave back. A job its team pauses by chance in the minute its clock passes
    its deadline is given back so too, as the pass would have done had it not paused."""
    actions = []
    for job in jobs:
        paused, started = _paused_at(job), _stamp(_annotation(job, WAITING_SINCE))
        pools = [p for p in job.get("pools") or [] if p in deadlines]
        if paused is None or started is None or not pools or (now - paused).total_seconds() >= check_s:
            continue
        deadline, waited = max(deadlines[p] for p in pools), (now - started).total_seconds()
        if waited > deadline:
            actions.append(
                _on(
                    job,
                    "suspend",
                    f"paused by its team at {paused:%Y-%m-%dT%H:%M:%SZ}, since the last pass, its gang's clock at "
                    f"{waited:.0f}s past its deadline {deadline:.0f}s; giving back the nodes it stood beside",
                )
            )
    return actions


def decide(
    podgroups: list[dict],
    pods: list[dict],
    nodes: list[dict],
    jobs: list[dict],
    deadlines: dict[str, float],
    retry_after_s: float,
    now: datetime,
) -> list[Action]:
    """What to suspend and what to resume, from the cluster's objects and each pool's deadline
    (`pods`: every pod of the cluster; only the teams' namespaces' PodGroups and jobs)."""
    actions: list[Action] = []
    since = {_key(j): _stamp(_annotation(j, WAITING_SINCE)) for j in jobs}
    for gang in waiting(podgroups, pods, nodes, deadlines):
        started = since.get(gang.job)
        if started is None:
            continue  # its clock starts this pass (clock_actions)
        waited = (now - started).total_seconds()
        if waited > gang.deadline:
            actions.append(
                Action(
                    "suspend",
                    *gang.job,
                    f"gang waited {waited:.0f}s {gang.held} ({'pool' if len(gang.pools) == 1 else 'pools'} "
                    f"{', '.join(gang.pools)}, deadline {gang.deadline:.0f}s); giving back {gang.gives_back}",
                )
            )
    # A job's pods still being deleted when its retry comes: one on a lost node stays so until its Node object goes
    # (_leaving), and the operator makes no replica whose old pod is still there, so the gang could not form and
    # would be bought its other nodes again for nothing. Pods of a healthy node are gone within the capped grace.
    leaving = {
        (p["metadata"]["namespace"], *owner)
        for p in pods
        if _leaving(p)
        for ref in p["metadata"].get("ownerReferences") or []
        if (owner := _job_of(ref)) is not None
    }
    for job in jobs:
        gave_back = _stamp(_annotation(job, GAVE_BACK))
        if (
            gave_back
            and _suspended(job)
            and (now - gave_back).total_seconds() > retry_after_s
            and _key(job) not in leaving
        ):
            actions.append(
                _on(
                    job,
                    "resume",
                    f"suspended by the gang deadline at {gave_back:%Y-%m-%dT%H:%M:%SZ}; queueing again",
                )
            )
    return actions


def patch_for(action: Action, now: datetime) -> dict:
    """The JSON merge patch of the job for an action: a clock's annotation alone, or the suspension (a batch
    Job's is spec's, a Kubeflow job's runPolicy's) with its annotation, the clock taken off with it."""
    if action.verb in ("mark", "unmark"):
        return {"metadata": {"annotations": {WAITING_SINCE: _iso(action.at or now) if action.verb == "mark" else None}}}
    suspend = action.verb == "suspend"
    flag = {"suspend": suspend} if action.kind == BATCH_JOB else {"runPolicy": {"suspend": suspend}}
    annotations = {GAVE_BACK: _iso(now), WAITING_SINCE: None} if suspend else {GAVE_BACK: None}
    return {"metadata": {"annotations": annotations}, "spec": flag}


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def job_path(action: Action) -> str:
    if action.kind == BATCH_JOB:
        return f"/apis/batch/v1/namespaces/{action.namespace}/jobs/{action.name}"
    return f"/apis/kubeflow.org/v1/namespaces/{action.namespace}/{KINDS[action.kind]}/{action.name}"


# --- the API (the pod's service account) ------------------------------------------------------------


SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Lists are read in pages, and each object cut down to what decide() reads, so a pass holds one page of
# whole objects at a time, however many jobs and pods the teams make. An object is at most etcd's request
# limit, 1.5 MiB (DefaultMaxRequestBytes, etcd-io/etcd:server/embed/config.go, read through the code
# search), but comes as up to six times that in JSON: the API server's encoder (Go's encoding/json,
# kubernetes/apimachinery:pkg/runtime/serializer/json/json.go) writes a string's control characters, and `<`,
# `>`, `&`, as `\u0001`-like escapes, and a team's strings may be all of them; one character above U+FFFF (written as
# UTF-8) makes Python hold the decoded page at four bytes a character. The CronJob's memory limit
# (components/gang_deadline.py) holds a page of those (tests/security/test_r8_attack7.py).
PAGE = 8
LIST_ATTEMPTS = 3


def _meta(obj: dict, annotations: tuple[str, ...] = (), labels: bool = False) -> dict:
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "creationTimestamp", "deletionTimestamp") if k in meta}
    kept["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if k in annotations}
    if labels:
        kept["labels"] = meta.get("labels") or {}
    return kept


def _owners(obj: dict, keep: Callable[[dict], bool]) -> list[dict]:
    """The first owner reference `keep` accepts, cut to what decide() reads: an object may carry any number of
    them (the API server validates each, counts none), and a pass holds every object it lists."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [{k: r.get(k) for k in ("apiVersion", "kind", "name")} for r in refs if keep(r)][:1]


def keep_pod(pod: dict) -> dict:
    spec = pod.get("spec") or {}
    containers = {
        key: [{"resources": c.get("resources") or {}} for c in spec.get(key) or []]
        for key in ("containers", "initContainers")
    }
    affinity = {"nodeAffinity": (spec.get("affinity") or {}).get("nodeAffinity") or {}}
    return {
        "metadata": {
            **_meta(pod, (GROUP_ANNOTATION, MIRROR_ANNOTATION)),
            # a DaemonSet's pod holds no node for a gang; a job's, being deleted, holds back its retry (decide)
            "ownerReferences": _owners(pod, lambda r: r.get("kind") == "DaemonSet" or _job_of(r) is not None),
        },
        "spec": {
            **{k: spec[k] for k in ("nodeName", "nodeSelector") if k in spec},
            "affinity": affinity,
            **containers,
        },
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def keep_podgroup(pg: dict) -> dict:
    owners = _owners(pg, lambda r: _job_of(r) is not None)
    return {
        "metadata": {**_meta(pg), "ownerReferences": owners},
        "status": {"phase": (pg.get("status") or {}).get("phase")},
    }


def _pod_specs(job: dict) -> list[dict]:
    """The pod specs of a job's templates: a batch Job's spec.template, a Kubeflow job's spec.<kind>ReplicaSpecs.
    <type>.template (kubeflow/trainer:manifests/base/crds@v1.9.4)."""
    spec = job.get("spec") or {}
    templates = [spec.get("template")] + [
        replica.get("template")
        for key, replicas in spec.items()
        if key.endswith("ReplicaSpecs") and isinstance(replicas, dict)
        for replica in replicas.values()
        if isinstance(replica, dict)
    ]
    return [t["spec"] for t in templates if isinstance(t, dict) and isinstance(t.get("spec"), dict)]


def _pools_of(job: dict, pools: Collection[str]) -> list[str]:
    """The pools a job's pods may land on: every pool when it has no template, or when one cannot be read."""
    specs = _pod_specs(job)
    try:
        return sorted(p for p in pools if not specs or any(_may_land(s, _pool_labels(p), None) for s in specs))
    except (AttributeError, KeyError, TypeError):  # a shape the API server's schema would refuse
        return sorted(pools)


def keep_job(job: dict, pools: Collection[str]) -> dict:
    """What the pass reads of a job; of its templates only the names of the `pools` they may land on."""
    spec = job.get("spec") or {}
    run_policy = spec.get("runPolicy") or {}
    conditions = (job.get("status") or {}).get("conditions") or []
    return {
        "metadata": _meta(job, (GAVE_BACK, WAITING_SINCE)),
        "spec": {
            **({"suspend": spec["suspend"]} if "suspend" in spec else {}),
            "runPolicy": {"suspend": run_policy["suspend"]} if "suspend" in run_policy else {},
        },
        "status": {
            "conditions": [
                {k: c.get(k) for k in ("type", "status", "lastTransitionTime")}
                for c in conditions
                if isinstance(c, dict) and c.get("type") == SUSPENDED_CONDITION
            ][:1]
        },
        "pools": _pools_of(job, pools),
    }


def keep_node(node: dict) -> dict:
    return {"metadata": _meta(node, labels=True)}


def keep_config_map(config_map: dict) -> dict:
    return {"data": config_map.get("data") or {}}


CONTENT_TYPES = {"PATCH": "application/merge-patch+json", "PUT": "application/json", "POST": "application/json"}


class Api:
    def __init__(self, base: str, token: str, context: ssl.SSLContext | None = None) -> None:
        self.base, self.token, self.context = base, token, context

    @classmethod
    def in_cluster(cls) -> Api:
        """The pod's service account, at the API server's in-cluster address."""
        with open(f"{SERVICE_ACCOUNT_DIR}/token") as token:
            return cls(
                f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}",
                token.read(),
                ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT_DIR}/ca.crt"),
            )

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "application/json",
                **({"Content-Type": CONTENT_TYPES[method]} if body is not None else {}),
            },
        )
        with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
            return json.load(response)

    def items(self, path: str, keep: Callable[[dict], dict]) -> list[dict]:
        """Every object of a list, read PAGE at a time, each cut down by `keep` before the next page is asked for.
        A continue token outlives no etcd compaction (410 Expired, every 5 minutes by default): the list is
        read again from its first page, as client-go's pager does (FullListIfExpired, kubernetes/client-go:
        tools/pager/pager.go, read through the code search), a few times before the pass gives up."""
        for attempt in range(LIST_ATTEMPTS):
            try:
                return self._pages(path, keep)
            except urllib.error.HTTPError as exc:
                if exc.code != 410 or attempt == LIST_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _pages(self, path: str, keep: Callable[[dict], dict]) -> list[dict]:
        kept: list[dict] = []
        token = ""
        while True:
            query = f"limit={PAGE}" + (f"&continue={urllib.parse.quote(token)}" if token else "")
            page = self.call("GET", f"{path}{'&' if '?' in path else '?'}{query}")
            kept += [keep(o) for o in page["items"]]
            token = (page.get("metadata") or {}).get("continue") or ""
            del page  # before the next page is read: one page at a time, not two
            if not token:
                return kept


def run(api: Api, settings: dict, own_namespace: str, now: datetime) -> int:
    """One pass: read the cluster, suspend and resume what decide() says. A job whose patch is refused
    (its team's admission policy, a job deleted meanwhile) is reported and the others still patched;
    the pass then fails, so the CronJob's failed runs show it."""
    maps = api.items(
        f"/api/v1/namespaces/{own_namespace}/configmaps?labelSelector={settings['deadlineLabel']}%3Dtrue",
        keep_config_map,
    )
    deadlines = {m["data"]["pool"]: float(m["data"]["deadlineSeconds"]) for m in maps}
    empty_s = {m["data"]["pool"]: float(m["data"]["emptySeconds"]) for m in maps if "emptySeconds" in m["data"]}

    def keep(job: dict) -> dict:
        return keep_job(job, deadlines)

    podgroups, jobs = [], []
    for ns in settings["namespaces"]:
        podgroups += api.items(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups", keep_podgroup)
        for kind, resource in KINDS.items():
            try:
                listed = api.items(f"/apis/kubeflow.org/v1/namespaces/{ns}/{resource}", keep)
                jobs += [{**j, "kind": kind} for j in listed]
            except urllib.error.HTTPError as exc:  # a kind the operator does not serve
                if exc.code != 404:
                    raise
        jobs += [{**j, "kind": BATCH_JOB} for j in api.items(f"/apis/batch/v1/namespaces/{ns}/jobs", keep)]
    # every namespace's pods: a node is idle only when no pod of any team (or of the platform) holds it
    pods = api.items("/api/v1/pods", keep_pod)
    nodes = api.items(f"/api/v1/nodes?labelSelector={POOL_LABEL}", keep_node)
    clocks_path = f"/api/v1/namespaces/{own_namespace}/configmaps/{settings['teamClocks']}"
    stored = _get(api, clocks_path)
    team = team_clocks_of((stored or {}).get("data") or {}, settings["namespaces"], deadlines)
    decided = decide(podgroups, pods, nodes, jobs, deadlines, settings["retryAfterSeconds"], now)
    resumed = {(a.namespace, a.kind, a.name) for a in decided if a.verb == "resume"}
    running = running_team_clocks(team, podgroups, pods, nodes, jobs, empty_s, resumed, now)
    actions = (
        clock_actions(podgroups, pods, nodes, jobs, deadlines, running)
        + pause_actions(jobs, empty_s, now, idle_nodes(nodes, pods, gpus_only=True))
        + fresh_pause_actions(jobs, deadlines, float(settings["checkSeconds"]), now)
        + decided
    )
    failed = False
    for action in actions:
        where = f"{action.namespace}/{action.kind}/{action.name}"
        try:
            api.call("PATCH", job_path(action), patch_for(action, now))
        except urllib.error.HTTPError as exc:
            failed = True
            print(f"could not {action.verb} {where}: HTTP {exc.code} {exc.read().decode(errors='replace')}", flush=True)
            continue
        print(f"{action.verb} {where}: {action.reason}", flush=True)
    data = team_clocks_data(next_team_clocks(running, podgroups, pods, nodes, jobs, deadlines, now))
    if data != ((stored or {}).get("data") or {}):
        failed = not _keep_team_clocks(api, clocks_path, stored, data) or failed
    return 1 if failed else 0


def _get(api: Api, path: str) -> dict | None:
    """An object, or None where there is none (404)."""
    try:
        found = api.call("GET", path)
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
        return None
    return found if isinstance(found, dict) else None


def _keep_team_clocks(api: Api, path: str, stored: dict | None, data: dict[str, str]) -> bool:
    """Writes the team clocks: the ConfigMap made on the first pass that has one (create cannot be limited to its
    name, components/gang_deadline.py), then updated at the version this pass read. Only one pass runs at a time
    (the CronJob's concurrencyPolicy Forbid), so a conflict is someone else's write (a person's edit): this pass's
    clocks are not written, the next pass reads that version, and this one fails so the CronJob's failed runs show
    it. A gang marked meanwhile keeps its own clock on its job, and the next pass keeps the team's from it."""
    meta = {"name": path.rsplit("/", 1)[1], "namespace": path.split("/")[4]}
    try:
        if stored is None:
            api.call(
                "POST",
                path.rsplit("/", 1)[0],
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data},
            )
        else:
            version = {"resourceVersion": stored["metadata"]["resourceVersion"]}
            api.call(
                "PUT", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, **version}, "data": data}
            )
    except urllib.error.HTTPError as exc:
        print(f"could not keep the team clocks: HTTP {exc.code} {exc.read().decode(errors='replace')}", flush=True)
        return False
    return True


def main() -> int:
    with open(f"{SERVICE_ACCOUNT_DIR}/namespace") as namespace:
        own = namespace.read().strip()
    return run(Api.in_cluster(), json.loads(os.environ["GANG_DEADLINE_SETTINGS"]), own, datetime.now(timezone.utc))


if __name__ == "__main__":
    sys.exit(main())

"""The job client: a team's job file run on a stack's cluster, from a notebook or `higgsfield jobs`.

    from infra.cli.client import Job

    job = Job.from_file("llama-ft.yaml", stack="prod")      # or Job("prod", name=..., team=..., ...)
    job.submit()                                            # server-side apply with your kubeconfig
    print(job.status())                                     # the gang: state, why it waits, its nodes
    job.suspend(); job.resume()                             # pause it (its nodes go back), queue it again
    for line in job.logs():                                 # every rank's lines, merged by time
        print(line)
    job.cancel()

It talks to the Kubernetes API with the maintained client (the `kubernetes` package, a dependency)
and the user's kubeconfig (its current context, or `context=`), as kubectl would: objects are applied
server-side (field manager `higgsfield`, `--dry-run` asks the server to check everything and store
nothing), failures are the API's own Status (404 NotFound, 409 Conflict, 422 Invalid, 403 Forbidden)
in one line. Upstream contracts, read at the pins:
- the Training Operator names a job's Volcano PodGroup after the job (VolcanoControl in
  kubeflow/trainer:pkg/controller.v1/control/podgroup_control.go@v1.9.4) and labels its pods with
  names.JOB_NAME_LABEL, REPLICA_TYPE_LABEL and REPLICA_INDEX_LABEL;
- a PodGroup's `status.phase` is Pending until Volcano admits the whole gang into its queue
  (the queue's capability: quota), then Inqueue until its pods are bound, then Running; an
  `Unschedulable` condition says why its pods do not fit (PodGroupPhase and PodGroupConditionType
  in volcano-sh/apis:pkg/apis/scheduling/v1beta1/types.go, Volcano v1.15.1).
"""

from __future__ import annotations

import functools
import json
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http import HTTPStatus
from typing import Any

from infra.config import JobFile, load_job
from infra.config.job import FRAMEWORKS, SERVING_KIND
from infra.core.names import (
    ENDED_POD_PHASES,
    GANG_RETRY_AFTER_S,
    GAVE_BACK_ANNOTATION,
    GROUP_NAME_ANNOTATION,
    JOB_FILE_LABEL,
    JOB_NAME_LABEL,
    KUBEFLOW_GROUP,
    POOL_LABEL,
    QUEUE_ANNOTATION,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    STARTUP_TAINT_KEY,
    VOLCANO_GROUP_PREFIX,
    WAITING_SINCE_ANNOTATION,
)
from infra.offline import goodput

FIELD_MANAGER = "higgsfield"
KUBEFLOW = (KUBEFLOW_GROUP, "v1")
APPS = ("apps", "v1")  # a serving job's Deployment (infra/offline/team_job.py render_serving)
BATCH_KIND = "Job"  # a plain gang's batch Job, which the gang deadline suspends too (images/training/gang_deadline.py)
BATCH = ("batch", "v1")
# A batch Job's DELETE without a propagation policy orphans its pods, which keep running and holding their GPUs:
# the API's default for batch/v1, for backwards compatibility (jobStrategy.DefaultGarbageCollectionPolicy,
# kubernetes/kubernetes:pkg/registry/batch/job/strategy.go@36f36813ae40015c94d2df1493447edaa145dd5a), and the
# client sends none unless asked (delete_namespaced_custom_object's propagation_policy, kubernetes-client/python:
# kubernetes/client/api/custom_objects_api.py@v37.0.3); the team's pod release guard refuses such a DELETE
# (components/tenancy.py pod_release_guard). So every cancel names kubectl's default, Background: the garbage
# collector deletes the dependents (as it does a Kubeflow job's and a Deployment's by their own default).
PROPAGATION = "Background"
PODGROUPS = ("scheduling.volcano.sh", "v1beta1", "podgroups")
# The training kinds a team's jobs run as (infra/config/job.py FRAMEWORKS), each listed for a team's goodput.
TRAINING_KINDS = tuple(kind for kind, *_ in FRAMEWORKS.values())
# Every kind `jobs status/logs/suspend/resume/cancel --kind` takes: what the platform renders a job as.
JOB_KINDS = (*TRAINING_KINDS, SERVING_KIND, BATCH_KIND)
# The head of a pod's log that goodput reads: the pre-flight's line comes before training's first; and its
# tail, where the newest checkpoint save's line says the run's total checkpoint stall.
LOG_HEAD_BYTES = 64 << 10
LOG_TAIL_LINES = 1000
# The most pods of a batch Job whose logs its goodput reads (two requests each, the head and the tail: `_log`), so that
# the status of a Job of hundreds of shards costs a few requests: those still running or failed first (the status's
# live account), then those that succeeded, each by name (`_logged`); the lines say how many were not read.
BATCH_LOGGED_PODS = 8
# The most pods `jobs status` lists a line each: beyond it, one line counts the pods by phase and nodes, and only those
# neither Running nor Succeeded (Pending, Failed, Terminating, Unknown: the ones to look at) are listed, at most this
# many; `--json` lists every pod. A Job of 512 shards was 512 lines, its few failed ones lost among them.
STATUS_LISTED_PODS = 16
# The most nodes goodput reads one by one (a get each: it needs their creation times); a job on more nodes of one pool
# has its pool's nodes listed once instead (_pool_listed).
NODE_GETS = 8
# The phases a summary counts and does not list, and the order it counts every phase in.
SETTLED_PHASES = ("Running", "Succeeded")
PHASE_ORDER = ("Running", "Succeeded", "Pending", "Terminating", "Failed", "Unknown")
INSTALL = "pip install higgsfield (the kubernetes package is one of its dependencies)"


class ApiError(Exception):
    """The API server refused: its Status in one line (`404 NotFound: pytorchjobs "x" not found`)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}" if code else message)  # 0: no answer from a server
        self.code, self.reason, self.message = code, reason, message


def _kubernetes() -> Any:
    try:
        import kubernetes
    except ImportError:
        raise ApiError(0, "NoClient", f"the Kubernetes client is not installed: {INSTALL}") from None
    return kubernetes


def _kubeconfig_hint(stack: str | None) -> str:
    """The command that writes a kubeconfig for `stack`'s cluster (its region and name), where the
    stack can be read; else the command's shape."""
    if stack is not None:
        try:
            from infra.offline.evaluate import load_stack

            cfg = load_stack(stack)
            return f"aws eks update-kubeconfig --region {cfg.region} --name {cfg.name}"
        except Exception:  # the stack's own problems are not this error's
            pass
    return "aws eks update-kubeconfig --region REGION --name CLUSTER"


def connect(kubeconfig: str | None = None, context: str | None = None, stack: str | None = None) -> Any:
    """An API client from the kubeconfig (default: $KUBECONFIG or ~/.kube/config) and context; no
    kubeconfig is refused with the command that writes one for `stack`'s cluster."""
    import os

    kubernetes = _kubernetes()
    # read now, not when the client was imported (its default is fixed at import time); a list of
    # files separated by ':' is merged, as kubectl merges them
    files = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    # `aws eks update-kubeconfig` writes the file --kubeconfig names, else the first of $KUBECONFIG, else
    # ~/.kube/config (docs.aws.amazon.com/cli/latest/reference/eks/update-kubeconfig.html): the one looked for here
    write = f"`{_kubeconfig_hint(stack)}{f' --kubeconfig {kubeconfig}' if kubeconfig else ''}` writes one"
    if not any(os.path.exists(f) for f in files.split(os.pathsep) if f):
        given = " (--kubeconfig)" if kubeconfig else " ($KUBECONFIG)" if os.environ.get("KUBECONFIG") else ""
        raise ApiError(0, "NoKubeconfig", f"no kubeconfig: {files}{given} does not exist ({write})")
    if context is not None:
        try:
            contexts = [c["name"] for c in kubernetes.config.list_kube_config_contexts(config_file=files)[0]]
        except kubernetes.config.ConfigException:
            contexts = None  # the file's own problem, said below
        if contexts is not None and context not in contexts:
            raise ApiError(
                0,
                "NoContext",
                f"--context {context}: {files} has no such context (its contexts: {', '.join(contexts)})",
            )
    try:
        return kubernetes.config.new_client_from_config(config_file=files, context=context)
    except kubernetes.config.ConfigException as exc:
        raise ApiError(0, "NoKubeconfig", f"{exc} ({write})") from None


def _refused(exc: Any) -> ApiError:
    """The API's Status body of a failed call as an ApiError."""
    try:
        status = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        status = {}
    return ApiError(
        int(status.get("code") or exc.status or 0),
        str(status.get("reason") or exc.reason or "Error"),
        str(status.get("message") or exc.body or exc.reason),
    )


def _call(function: Any, *args: Any, **kwargs: Any) -> Any:
    kubernetes = _kubernetes()
    try:
        return function(*args, **kwargs)
    except kubernetes.client.ApiException as exc:
        raise _refused(exc) from None


def _plural(kind: str) -> str:
    return kind.lower() + "s"


def apply(api: Any, objects: list[dict], dry_run: bool = False) -> list[dict]:
    """Server-side apply of each object (`kubectl apply --server-side --field-manager=higgsfield`),
    in order; with `dry_run` the server admits and validates each, and stores nothing. A field the object's schema (its
    CRD's) does not declare refuses the apply, whatever fieldValidation asks: the server cannot type the patch (500
    "failed to create typed patch object", FieldManager.Apply in kubernetes/kubernetes:staging/src/k8s.io/apimachinery/
    pkg/util/managedfields/internal/structuredmerge.go@6732d913), so none is pruned unseen, as a create's would be
    by default (infra/cli/verify/connect.py STRICT)."""
    kubernetes = _kubernetes()
    custom, done = kubernetes.client.CustomObjectsApi(api), []
    options = {"field_manager": FIELD_MANAGER, "force": True, "_content_type": "application/apply-patch+yaml"}
    if dry_run:
        options["dry_run"] = "All"
    for obj in objects:
        meta = obj["metadata"]
        if obj["apiVersion"] == "v1":
            core = kubernetes.client.CoreV1Api(api)
            patch = getattr(core, f"patch_namespaced_{_snake(obj['kind'])}")
            answer = _call(patch, meta["name"], meta["namespace"], obj, **options)
            done.append(api.sanitize_for_serialization(answer) if answer is not None else obj)
        else:
            group, version = obj["apiVersion"].split("/")
            plural = _plural(obj["kind"])
            answer = _call(
                custom.patch_namespaced_custom_object,
                group,
                version,
                meta["namespace"],
                plural,
                meta["name"],
                obj,
                **options,
            )
            # the API answers an apply that creates with 201 Created, whose body this client's
            # generated method does not read (its response types list 200 only: patch_namespaced_custom_object in
            # kubernetes-client/python:kubernetes/client/api/custom_objects_api.py@v37.0.2): the object sent then
            done.append(answer if answer is not None else obj)
    return done


def _snake(kind: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in kind).lstrip("_")


# --- status ------------------------------------------------------------------------------------


@dataclass
class Status:
    """What `jobs status` shows: the job's state, its gang, why it waits, its pods and nodes."""

    name: str
    namespace: str
    kind: str
    state: str  # the operator's newest true condition: Created, Running, Restarting, Succeeded, Failed
    gang: str  # the PodGroup's phase: Pending (waits for quota), Inqueue (for nodes), Running
    queue: str | None
    position: int | None  # among the queue's gangs that wait (oldest first), where the user may list them
    waiting: list[str] = field(default_factory=list)  # why, each "quota: ...", "capacity: ...", "gate: ..."
    pods: list[tuple[str, str, str]] = field(default_factory=list)  # (pod, phase, node)
    goodput: goodput.Goodput | None = None  # its GPU-hours so far by phase (infra/offline/goodput.py)
    logs_not_read: int = 0  # of a batch Job's pods with a log, those whose log its goodput did not read (_logged)

    @property
    def nodes(self) -> list[str]:
        return sorted({node for _, _, node in self.pods if node})

    def lines(self) -> list[str]:
        where = f"queue {self.queue}" + (f", position {self.position}" if self.position else "")
        out = [f"{self.kind} {self.namespace}/{self.name}: {self.state}; gang {self.gang} ({where})"]
        out += [f"  waits: {why}" for why in self.waiting]
        out += _pod_lines(self.pods)
        if self.goodput is not None:
            out.append(
                f"  {self.goodput.line()}{_uncounted_note(self.kind)}{_not_read_note(self.logs_not_read, self.pods)}"
            )
        return out

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "kind": self.kind,
            "state": self.state,
            "gang": self.gang,
            "queue": self.queue,
            "position": self.position,
            "waiting": self.waiting,
            "pods": [{"name": p, "phase": ph, "node": n} for p, ph, n in self.pods],
            "nodes": self.nodes,
            "goodput": _goodput_dict(self.goodput),
            "notCounted": [p for p, _ in _uncounted(self.kind)],
            "logsNotRead": self.logs_not_read,
        }


def _pod_lines(pods: list[tuple[str, str, str]]) -> list[str]:
    """A line a pod, or for more than STATUS_LISTED_PODS the pods' counts by phase on their nodes, then those of them
    to look at (not Running or Succeeded), the failed first, at most STATUS_LISTED_PODS, and how many of those are not
    listed."""

    def line(pod: str, phase: str, node: str) -> str:
        return f"  {pod}: {phase}" + (f" on {node}" if node else "")

    if len(pods) <= STATUS_LISTED_PODS:
        return [line(*row) for row in pods]
    counts = Counter(phase for _, phase, _ in pods)
    ordered = sorted(
        counts, key=lambda phase: (PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER), phase)
    )
    nodes = len({node for _, _, node in pods if node})
    out = [
        f"  pods: {', '.join(f'{counts[phase]} {phase}' for phase in ordered)}; on {nodes} node(s) (--json lists each)"
    ]
    # the failed first: a few failed shards are not cut off behind the many that wait for capacity
    shown = sorted((row for row in pods if row[1] not in SETTLED_PHASES), key=lambda row: row[1] != "Failed")
    out += [line(*row) for row in shown[:STATUS_LISTED_PODS]]
    if len(shown) > STATUS_LISTED_PODS:
        out.append(f"  ... and {len(shown) - STATUS_LISTED_PODS} more neither Running nor Succeeded")
    return out


def _goodput_dict(found: goodput.Goodput | None) -> dict | None:
    """`--json`'s goodput: training's share, the allocated GPU-hours, and each phase's GPU-hours."""
    if found is None:
        return None
    return {
        "share": None if found.share is None else round(found.share, 4),
        "allocatedGpuHours": round(found.allocated, 4),
        "gpuHours": {phase: round(hours, 4) for phase, hours in found.gpu_hours.items()},
    }


def _state(job: dict) -> str:
    true = [c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    return str(true[-1]["type"]) if true else "Submitted"


def _optional(function: Any, *args: Any, **kwargs: Any) -> Any:
    """A read the user's role may not allow (cluster-scoped nodes, other namespaces): None if forbidden."""
    try:
        return _call(function, *args, **kwargs)
    except ApiError as exc:
        if exc.code in (403, 404):
            return None
        raise


def _position(custom: Any, group: dict) -> int | None:
    """The gang's place among the PodGroups of its queue that wait to be admitted, oldest first."""
    name, queue_name = group["metadata"]["name"], (group.get("spec") or {}).get("queue")
    found = _optional(custom.list_cluster_custom_object, *PODGROUPS)
    if found is None or not queue_name:
        return None
    waiting = sorted(
        (
            g
            for g in found.get("items", [])
            if (g.get("spec") or {}).get("queue") == queue_name and (g.get("status") or {}).get("phase") == "Pending"
        ),
        key=lambda g: g["metadata"].get("creationTimestamp", ""),
    )
    keys = [(g["metadata"].get("namespace"), g["metadata"]["name"]) for g in waiting]
    here = (group["metadata"].get("namespace"), name)
    return keys.index(here) + 1 if here in keys else None


def _pod_phase(pod: dict) -> str:
    """A pod's phase as kubectl's STATUS says it: Terminating once it is being deleted, since its phase stays
    (Running, on a node that no longer answers, until its Node object goes)."""
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return str((pod.get("status") or {}).get("phase", "Pending"))


def _suspend_key(kind: str) -> tuple[str, ...]:
    """Where a job's suspend flag is under spec: a batch Job's `spec.suspend` (JobSpec.Suspend, kubernetes/api:
    batch/v1/types.go@v0.35.0, read through the code search: true deletes its active pods), a Kubeflow job's
    `spec.runPolicy.suspend` (RunPolicy.Suspend, kubeflow/trainer:pkg/apis/kubeflow.org/v1/common_types.go@v1.9.4:
    true deletes its pods and PodGroups, false lets the operator create them again)."""
    return ("suspend",) if kind == BATCH_KIND else ("runPolicy", "suspend")


def _is_suspended(job: dict) -> bool:
    *path, flag = _suspend_key(str(job.get("kind", "")))
    found = job.get("spec") or {}
    for key in path:
        found = found.get(key) or {}
    return found.get(flag) is True


def _suspension(job: dict) -> str | None:
    """Why a suspended job waits (its operator deleted its pods and PodGroup): the gang deadline gave its
    nodes back and resumes it GANG_RETRY_AFTER_S later, or its team paused it; None while not suspended."""
    if not _is_suspended(job):
        return None
    gave_back = ((job.get("metadata") or {}).get("annotations") or {}).get(GAVE_BACK_ANNOTATION)
    if gave_back:
        again = datetime.fromisoformat(gave_back.replace("Z", "+00:00")) + timedelta(seconds=GANG_RETRY_AFTER_S)
        return (
            f"suspended: the gang deadline gave its nodes back at {gave_back} (its gang waited beside idle nodes, "
            f"or lost a node none replaced); it queues again from {again:%Y-%m-%dT%H:%M:%SZ}, once none of its pods "
            "is still Terminating on a lost node, and resumes from its newest complete checkpoint (docs/capacity.md)"
        )
    flag = ".".join(_suspend_key(str(job.get("kind", ""))))
    return f"suspended: {flag} is true; it queues again once its team sets it to false"


def _clock(job: dict, pool: str | None) -> str | None:
    """The gang deadline's clock of a waiting gang (images/training/gang_deadline.py): since when it has waited
    beside idle nodes, a start it may share with the team's earlier gangs in that pool (docs/capacity.md)."""
    since = ((job.get("metadata") or {}).get("annotations") or {}).get(WAITING_SINCE_ANNOTATION)
    if not since:
        return None
    where = f"pool {pool}" if pool else "its pools"
    return (
        f"deadline: its gang has waited beside idle nodes since {since} (its team's earlier gangs there count: "
        f"docs/capacity.md); unless its nodes come, the gang deadline gives them back once that is older than the "
        f"deadline of {where} (`higgsfield timeline STACK --job {pool or 'POOL'}` prints it)"
    )


def _why(group: dict | None, pods: list[dict], nodes: list[dict] | None, pool: str | None) -> list[str]:
    """Why the gang waits: its queue has no room (quota), no nodes fit it (capacity), or nodes of
    its pool are still in their health check (gate)."""
    if group is None:
        return ["the operator has not created the job's PodGroup yet (is the Training Operator running?)"]
    status = group.get("status") or {}
    phase, reasons = status.get("phase", "Pending"), []
    unschedulable = [c for c in status.get("conditions") or [] if c.get("type") == "Unschedulable"]
    said = (unschedulable[-1].get("message") or unschedulable[-1].get("reason")) if unschedulable else None
    if phase == "Pending":
        reasons.append(
            f"quota: Volcano has not admitted the gang into queue {(group.get('spec') or {}).get('queue')}: "
            "the queue's "
            "capability (the team's gpuQuota) has no room for all of it yet" + (f" ({said})" if said else "")
        )
    pending = [p for p in pods if not (p.get("spec") or {}).get("nodeName")]
    if phase == "Inqueue" or (phase != "Pending" and pending):
        reasons.append(
            f"capacity: {len(pending) or 'its'} pod(s) wait for nodes"
            + (f" of pool {pool}" if pool else "")
            + " (the autoscaler adds them; a reservation or Capacity Block only in its window)"
            + (f": {said}" if said else "")
        )
    gated = [
        n["metadata"]["name"]
        for n in nodes or []
        if any(t.get("key") == STARTUP_TAINT_KEY for t in (n.get("spec") or {}).get("taints") or [])
    ]
    if gated and (phase != "Running" or pending):
        reasons.append(f"gate: {len(gated)} node(s) of pool {pool} are in their health check: {', '.join(gated)}")
    return reasons


def _pods(api: Any, namespace: str, selector: str) -> list[dict]:
    """The pods of `namespace` that `selector` selects, as plain dicts."""
    listed = _call(_kubernetes().client.CoreV1Api(api).list_namespaced_pod, namespace, label_selector=selector)
    return [api.sanitize_for_serialization(p) for p in listed.items]


def read_status(api: Any, name: str, namespace: str, kind: str = "PyTorchJob", now: float | None = None) -> Status:
    """The job's state, its gang's, why it waits, where its pods run, and its goodput so far (a
    serving job's: its Deployment's replicas, read_serving_status; a batch Job's: read_batch_status)."""
    if kind == SERVING_KIND:
        return read_serving_status(api, name, namespace)
    if kind == BATCH_KIND:
        return read_batch_status(api, name, namespace, now)
    custom = _kubernetes().client.CustomObjectsApi(api)
    job = _call(custom.get_namespaced_custom_object, *KUBEFLOW, namespace, _plural(kind), name)
    group = _optional(custom.get_namespaced_custom_object, PODGROUPS[0], PODGROUPS[1], namespace, PODGROUPS[2], name)
    pods = _pods(api, namespace, f"{JOB_NAME_LABEL}={name}")
    pool, listed = _pool_of(job), _pool_lister(api)
    phase = _gang_phase(group)
    waiting = _job_waits(job, pool, phase, pods, lambda: _why(group, pods, listed(pool), pool))
    return Status(
        name=name,
        namespace=namespace,
        kind=kind,
        state=_state(job),
        gang=phase,
        queue=_group_queue(group) or job["spec"].get("runPolicy", {}).get("schedulingPolicy", {}).get("queue"),
        position=_position(custom, group) if group and phase == "Pending" else None,
        waiting=waiting,
        pods=_pod_rows(pods),
        goodput=goodput.of_objects(observe(api, job, pods, _events(api, namespace), now, pool_nodes=listed)),
    )


@dataclass
class TeamGoodput:
    """What `jobs status -n TEAM` shows: the team's jobs that the API server holds, each job's goodput,
    and their sum, phase by phase (infra/offline/goodput.py)."""

    namespace: str
    jobs: list[tuple[str, str, goodput.Goodput]] = field(default_factory=list)  # (kind, name, its goodput)
    # (kind, name) of a batch Job: how many of its pods' logs its goodput did not read (_logged)
    logs_not_read: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def total(self) -> goodput.Goodput:
        summed = goodput.Goodput()
        for _, _, found in self.jobs:
            summed.add(found)
        return summed

    def lines(self) -> list[str]:
        out = [f"team {self.namespace}: {len(self.jobs)} job(s), {self.total.line()}"]
        total = self.total
        if total.allocated:
            out += [
                f"  {phase:<10} {hours:9.1f} GPU-hours {hours / total.allocated:4.0%}"
                for phase, hours in total.gpu_hours.items()
            ]
        out += [
            f"  {kind} {name}: {found.line()}{_uncounted_note(kind)}{_not_read_note(self._not_read(kind, name))}"
            for kind, name, found in self.jobs
        ]
        return out

    def as_dict(self) -> dict:
        return {
            "namespace": self.namespace,
            "goodput": _goodput_dict(self.total),
            "jobs": [
                {
                    "kind": k,
                    "name": n,
                    "goodput": _goodput_dict(g),
                    "notCounted": [p for p, _ in _uncounted(k)],
                    "logsNotRead": self._not_read(k, n),
                }
                for k, n, g in self.jobs
            ],
        }

    def _not_read(self, kind: str, name: str) -> int:
        return self.logs_not_read.get((kind, name), 0)


# The phases of a kind's goodput that cannot be read as a Kubeflow job's are, and why. A batch Job's hangs: `hung`
# and the restart after it are read from the watchdog's TrainingHung Events, and the watchdog reads the progress
# series of the scrape that keeps only pods with JOB_NAME_LABEL (components/observability.py), which a Job's pods
# lack; so a hung Job's GPU-hours count as training.
UNCOUNTED = {
    BATCH_KIND: (("hung", "the watchdog sees only Kubeflow jobs' progress; a hung Job's time is in training"),)
}


def _uncounted(kind: str) -> tuple[tuple[str, str], ...]:
    """The (phase, why) of `kind`'s goodput that is not counted."""
    return UNCOUNTED.get(kind, ())


def _uncounted_note(kind: str) -> str:
    """What a goodput line of `kind` adds about the phases it does not count: "; hung not counted (why)"."""
    return "".join(f"; {phase} not counted ({why})" for phase, why in _uncounted(kind))


def read_team_goodput(api: Any, namespace: str, now: float | None = None) -> TeamGoodput:
    """The goodput of every training job and batch Job of the team (its namespace) the API server holds, and their
    sum: each job's figure as `read_status` computes it, a batch Job's from the pods its selector selects (what
    of it is not counted: UNCOUNTED). A kind the cluster does not serve, or the user may
    not list, is left out; a job already deleted is no longer counted (the dashboard keeps the history)."""
    custom = _kubernetes().client.CustomObjectsApi(api)
    pods: dict[str, list[dict]] = {}
    for pod in _pods(api, namespace, JOB_NAME_LABEL):
        pods.setdefault(pod["metadata"]["labels"][JOB_NAME_LABEL], []).append(pod)
    events, team, listed = _events(api, namespace), TeamGoodput(namespace), _pool_lister(api)
    for kind in TRAINING_KINDS:
        found = _optional(custom.list_namespaced_custom_object, *KUBEFLOW, namespace, _plural(kind))
        for job in sorted((found or {}).get("items", []), key=lambda j: j["metadata"]["name"]):
            name = job["metadata"]["name"]
            mine = [p for p in pods.get(name, []) if _owned_by(p, job)]
            team.jobs.append((kind, name, goodput.of_objects(observe(api, job, mine, events, now, pool_nodes=listed))))
    found = _optional(custom.list_namespaced_custom_object, *BATCH, namespace, _plural(BATCH_KIND))
    for job in sorted((found or {}).get("items", []), key=lambda j: j["metadata"]["name"]):
        name, mine = job["metadata"]["name"], _batch_pods(api, job, namespace)
        account, team.logs_not_read[(BATCH_KIND, name)] = _batch_goodput(api, job, mine, events, now, listed)
        team.jobs.append((BATCH_KIND, name, account))
    return team


def _batch_goodput(
    api: Any, job: dict, pods: list[dict], events: list[dict], now: float | None, pool_nodes: PoolNodes
) -> tuple[goodput.Goodput, int]:
    """A batch Job's goodput from its pods (`_batch_pods`; what of it is not counted: UNCOUNTED) and the logs of a few
    of them (`_logged`), and how many of its pods with a log were not read."""
    logged = _logged(pods)
    found = goodput.of_objects(observe(api, job, pods, events, now, logged, pool_nodes))
    return found, len(_with_log(pods)) - len(logged)


def _with_log(pods: list[dict]) -> list[dict]:
    """The pods that have a log: one of whose containers has started (`_log` reads none of the others)."""
    return [p for p in pods if (p.get("status") or {}).get("containerStatuses")]


def _logged(pods: list[dict]) -> list[dict]:
    """The pods of a batch Job whose logs its goodput reads: of those with a log, the first BATCH_LOGGED_PODS, those
    running or failed before those that succeeded, each by name."""
    order = sorted(_with_log(pods), key=lambda p: (_pod_phase(p) == "Succeeded", p["metadata"]["name"]))
    return order[:BATCH_LOGGED_PODS]


def _not_read_note(unread: int, pods: list | None = None) -> str:
    """What a batch Job's goodput line adds about the pods whose logs it did not read (of `pods`, where given); those
    pods' pre-flight and checkpoint time is in training."""
    if not unread:
        return ""
    of = f" of {len(pods)}" if pods is not None else ""
    return (
        f"; logs of {unread}{of} pods not read (it reads {BATCH_LOGGED_PODS}, running or failed ones first): their "
        "pre-flight and checkpoint time counts as training"
    )


def _owned_by(pod: dict, job: dict) -> bool:
    """The pod is the job's as its controller has it: the pod's controller reference (its one ownerReference with
    `controller: true`, GetControllerOfNoCopy in kubernetes/apimachinery:pkg/apis/meta/v1/controller_ref.go@v0.35.1)
    names the job's UID, or it has none (an orphan its selector selects, which the controller adopts; one controlled
    by another, a sibling Job a manualSelector also selects, it leaves: "Owned by someone else. Ignore." in ClaimObject,
    kubernetes/kubernetes:pkg/controller/controller_ref_manager.go, which the Job controller's getPodsForJob calls
    through ClaimPods, pkg/controller/job/job_controller.go@6ae037f1db843e99547258d7dd292301a74ba0eb)."""
    controller = next((o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
    uid = job["metadata"].get("uid")
    return controller is None or uid is None or controller.get("uid") == uid


def _batch_pods(api: Any, job: dict, namespace: str) -> list[dict]:
    """The pods of a batch Job: those its selector selects that it controls (`_owned_by`)."""
    selected = _pods(api, namespace, _selector_of(job))
    return [p for p in selected if _owned_by(p, job)]


def _events(api: Any, namespace: str) -> list[dict]:
    """The namespace's Events (the watchdog's TrainingHung, the scheduler's Scheduled), if readable."""
    core = _kubernetes().client.CoreV1Api(api)
    found = _optional(core.list_namespaced_event, namespace)
    return [api.sanitize_for_serialization(e) for e in found.items] if found is not None else []


def _log(api: Any, pod: dict) -> list[tuple[float, str]]:
    """The start of a pod's log (where the pre-flight's line is) and its end (the newest checkpoint
    save's line), as (time, text); none before it runs."""
    core = _kubernetes().client.CoreV1Api(api)
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    if not (pod.get("status") or {}).get("containerStatuses"):
        return []
    lines: dict[tuple[float, str], None] = {}  # the head and the tail, a line in both once
    for part in ({"limit_bytes": LOG_HEAD_BYTES}, {"tail_lines": LOG_TAIL_LINES}):
        try:
            text = _call(
                core.read_namespaced_pod_log,
                pod["metadata"]["name"],
                pod["metadata"]["namespace"],
                container=containers[0].get("name"),
                timestamps=True,
                **part,
            )
        except ApiError:
            return []  # no log (yet, or any more): no pre-flight line to read
        for line in (text or "").splitlines():
            stamp, body = _split(line)
            at, nanos = _when(stamp)
            lines[(at.timestamp() + nanos / 1e9, body)] = None
    return list(lines)


def observe(
    api: Any,
    job: dict,
    pods: list[dict],
    events: list[dict],
    now: float | None = None,
    logged: list[dict] | None = None,
    pool_nodes: PoolNodes | None = None,
) -> goodput.Observed:
    """What goodput needs of one job: its pods' nodes (when the user may read them; a pool's through `pool_nodes`,
    the command's _pool_lister) and the heads and tails of the logs of `logged` (every pod by default)."""
    import time

    core = _kubernetes().client.CoreV1Api(api)
    wanted = sorted({str((p.get("spec") or {}).get("nodeName") or "") for p in pods} - {""})
    listed = _pool_listed(pods, wanted, pool_nodes or _pool_lister(api))
    nodes = listed or {}
    # a node the pool's list lacks is gone (a pool's nodes keep its label): read no node the list already answered
    for node in (n for n in wanted if n not in nodes and listed is None):
        try:
            nodes[node] = api.sanitize_for_serialization(_call(core.read_node, node))
        except ApiError as exc:
            if exc.code == 403:  # a role that reads no node (a team's): the rest would be refused, a request each
                break
            if exc.code != 404:  # a node gone since its pod ran
                raise
    return goodput.Observed(
        job=job,
        pods=pods,
        events=events,
        nodes=nodes,
        logs={p["metadata"]["name"]: _log(api, p) for p in (pods if logged is None else logged)},
        now=time.time() if now is None else now,
    )


def _pool_listed(pods: list[dict], wanted: list[str], pool_nodes: PoolNodes) -> dict[str, dict] | None:
    """The nodes of `wanted` that one list of the pods' pool holds, where the pods are on more than NODE_GETS nodes of
    one pool (their nodeSelector's POOL_LABEL) and the user may list nodes: a Job of 512 shards on 512 nodes made 512
    node reads for one status line, and a finished one, whose nodes are gone, 512 reads answered 404. None otherwise:
    the nodes are read one by one (a role that may get a node but not list them, a job of several pools)."""
    pools = {((p.get("spec") or {}).get("nodeSelector") or {}).get(POOL_LABEL) for p in pods}
    if len(wanted) <= NODE_GETS or len(pools) != 1 or None in pools:
        return None
    listed = pool_nodes(pools.pop())
    if listed is None:
        return None
    names = set(wanted)
    return {n["metadata"]["name"]: n for n in listed if n["metadata"]["name"] in names}


def _unplaced(pods: list[dict]) -> bool:
    return any(not (p.get("spec") or {}).get("nodeName") for p in pods)


def _pool_of(job: dict) -> str | None:
    """The pool the job's replicas select (higgsfield.io/pool), if any."""
    for key, replicas in (job.get("spec") or {}).items():
        if not key.endswith("ReplicaSpecs"):
            continue
        for replica in (replicas or {}).values():
            selector = ((replica.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
            if POOL_LABEL in selector:
                return str(selector[POOL_LABEL])
    return None


# --- a serving job: its Deployment and the Deployment's pods -----------------------------------

# The PodGroup Volcano's controller makes for the pods of a ReplicaSet it schedules, its name written on
# each pod (GROUP_NAME_ANNOTATION, by updatePodAnnotations in volcano-sh/volcano:pkg/controllers/podgroup/
# pg_controller_handler.go@v1.15.1); a Deployment's pods have no operator's PodGroup named after the job.


def _group_of(kind: str) -> tuple[str, str]:
    """The API group and version that serve `kind`: apps/v1 for a serving job's Deployment, batch/v1 for a
    batch Job, else Kubeflow's."""
    return {SERVING_KIND: APPS, BATCH_KIND: BATCH}.get(kind, KUBEFLOW)


# A LabelSelector's matchExpressions operators (kubernetes/apimachinery:pkg/apis/meta/v1/types.go@v0.35.3
# LabelSelectorOperator) as the string form writes them (Requirement.String, pkg/labels/selector.go@v0.35.3):
# `key in (a,b)`, `key notin (a,b)`, `key`, `!key`.
_SET_OPERATORS = {"In": "in", "NotIn": "notin"}


def _requirement(expression: dict) -> str:
    key, op = str(expression["key"]), expression.get("operator")
    if op in _SET_OPERATORS:
        return f"{key} {_SET_OPERATORS[op]} ({','.join(sorted(str(v) for v in expression.get('values') or []))})"
    if op in ("Exists", "DoesNotExist"):
        return key if op == "Exists" else f"!{key}"
    raise ApiError(0, "NoSelector", f"{key}: {op!r} is not a label selector operator")


def _selector_of(owner: dict) -> str:
    """A Deployment's or batch Job's pod selector as a label selector: its matchLabels (what team_job.render_serving
    renders; a Job's, the API server's, selecting its UID: generateSelector in kubernetes/kubernetes:pkg/registry/
    batch/job/strategy.go@36f36813ae40015c94d2df1493447edaa145dd5a labels its template with
    batch.kubernetes.io/controller-uid and job-name, legacy and prefixed, and selects the UID's; so no earlier Job of
    the same name whose pods were orphaned is read, as a job-name selector would) and its matchExpressions (a Job with
    manualSelector's own), every requirement ANDed and written as LabelSelectorAsSelector and Selector.String write
    them: sorted by key, commas between (kubernetes/apimachinery:pkg/apis/meta/v1/helpers.go and pkg/labels/
    selector.go@v0.35.3). An empty selector would select every pod of the namespace, so it is refused."""
    selector = (owner.get("spec") or {}).get("selector") or {}
    labels, expressions = selector.get("matchLabels") or {}, selector.get("matchExpressions") or []
    if not labels and not expressions:
        what = f"{str(owner.get('kind', 'Deployment')).lower()} {owner['metadata']['name']}"
        raise ApiError(0, "NoSelector", f"{what} selects its pods by no label; list them with kubectl")
    requirements = [(str(k), f"{k}={v}") for k, v in labels.items()]
    requirements += [(str(e["key"]), _requirement(e)) for e in expressions]
    return ",".join(text for _, text in sorted(requirements, key=lambda r: r[0]))


# The kinds whose pods are those their own selector selects, not the Training Operator's JOB_NAME_LABEL.
SELECTED_KINDS = (SERVING_KIND, BATCH_KIND)


def _kind_pods(api: Any, name: str, namespace: str, kind: str) -> list[dict]:
    """The job's pods: a Deployment's those its selector selects, a batch Job's those of them it controls
    (`_batch_pods`), else those with its JOB_NAME_LABEL."""
    if kind not in SELECTED_KINDS:
        return _pods(api, namespace, f"{JOB_NAME_LABEL}={name}")
    custom = _kubernetes().client.CustomObjectsApi(api)
    owner = _call(custom.get_namespaced_custom_object, *_group_of(kind), namespace, _plural(kind), name)
    return _batch_pods(api, owner, namespace) if kind == BATCH_KIND else _pods(api, namespace, _selector_of(owner))


def _deployment_waits(
    deployment: dict, group: dict | None, pods: list[dict], nodes: list[dict] | None, pool: str | None
) -> list[str]:
    """Why replicas are missing: the team's serving quota refused their pods (the Deployment's
    ReplicaFailure condition: a ResourceQuota's FailedCreate), Volcano has no PodGroup for them yet,
    or the gang's own reasons (quota, capacity, gate)."""
    conditions = (deployment.get("status") or {}).get("conditions") or []
    failed = [c for c in conditions if c.get("type") == "ReplicaFailure" and c.get("status") == "True"]
    reasons = (
        [f"quota: the replicas' pods were refused: {failed[-1].get('message') or failed[-1].get('reason')}"]
        if failed
        else []
    )
    return reasons + _owned_waits(SERVING_KIND, group, pods, nodes, pool, refused=bool(failed))


def _owned_waits(
    owner: str, group: dict | None, pods: list[dict], nodes: list[dict] | None, pool: str | None, refused: bool = False
) -> list[str]:
    """Why the pods of a Deployment or batch Job wait: its controller has created none yet (unless `refused`: the
    quota refused them, said before), Volcano has not grouped them, or their gang's reasons (quota, capacity, gate)."""
    if not pods:
        return [] if refused else [f"the {owner}'s controller has created no pod of it yet"]
    if group is None:
        return ["Volcano has not grouped the pods yet (no PodGroup: are they scheduled by volcano?)"]
    return _why(group, pods, nodes, pool)


def read_serving_status(api: Any, name: str, namespace: str) -> Status:
    """A serving job's Deployment: its replicas ready of those it asks for, their PodGroup, why
    some wait and where its pods run."""
    custom = _kubernetes().client.CustomObjectsApi(api)
    deployment = _call(custom.get_namespaced_custom_object, *APPS, namespace, "deployments", name)
    pods = _pods(api, namespace, _selector_of(deployment))
    # one PodGroup per ReplicaSet (two in a rolling update): the one of a pod that waits, else any
    groups = [
        str(g)
        for p in sorted(pods, key=lambda p: bool((p.get("spec") or {}).get("nodeName")))
        if (g := (p["metadata"].get("annotations") or {}).get(GROUP_NAME_ANNOTATION))
    ]
    group = (
        _optional(custom.get_namespaced_custom_object, PODGROUPS[0], PODGROUPS[1], namespace, PODGROUPS[2], groups[0])
        if groups
        else None
    )
    template = (deployment.get("spec") or {}).get("template") or {}
    pool = _template_pool(template)
    nodes = _pool_nodes(api, pool)
    wanted = int((deployment.get("spec") or {}).get("replicas", 1))
    ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
    phase = _gang_phase(group)
    return Status(
        name=name,
        namespace=namespace,
        kind=SERVING_KIND,
        state=f"{ready}/{wanted} replicas ready",
        gang=phase,
        queue=_group_queue(group) or _template_queue(template),
        position=_position(custom, group) if group and phase == "Pending" else None,
        waiting=_deployment_waits(deployment, group, pods, nodes, pool) if ready < wanted or _unplaced(pods) else [],
        pods=_pod_rows(pods),
    )


def _job_waits(
    job: dict, pool: str | None, phase: str, pods: list[dict], reasons: Callable[[], list[str]]
) -> list[str]:
    """Why a Kubeflow job or batch Job waits: its suspension alone, else `reasons()` (its gang's, asked only while the
    gang is not running or a pod is unplaced) and the gang deadline's clock on it."""
    suspended = _suspension(job)
    if suspended:
        return [suspended]
    waiting = reasons() if phase != "Running" or _unplaced(pods) else []
    clock = _clock(job, pool)
    return waiting + ([clock] if clock else [])


def _gang_phase(group: dict | None) -> str:
    """The gang's PodGroup phase; Pending for a group not yet given one, `none` where there is no group."""
    return ((group or {}).get("status") or {}).get("phase", "Pending" if group else "none")


def _group_queue(group: dict | None) -> str | None:
    return ((group or {}).get("spec") or {}).get("queue")


def _template_pool(template: dict) -> str | None:
    """The pool a workload's pod template selects (POOL_LABEL in its nodeSelector)."""
    return ((template.get("spec") or {}).get("nodeSelector") or {}).get(POOL_LABEL)


def _template_queue(template: dict) -> str | None:
    """The Volcano queue a workload's pod template names (QUEUE_ANNOTATION)."""
    return ((template.get("metadata") or {}).get("annotations") or {}).get(QUEUE_ANNOTATION)


def _pod_rows(pods: list[dict]) -> list[tuple[str, str, str]]:
    """Each pod's name, phase and node, by name."""
    return sorted((p["metadata"]["name"], _pod_phase(p), (p.get("spec") or {}).get("nodeName", "")) for p in pods)


def _pool_nodes(api: Any, pool: str | None) -> list[dict] | None:
    """The nodes of the pool, where the user may list nodes."""
    core = _kubernetes().client.CoreV1Api(api)
    listed = _optional(core.list_node, label_selector=f"{POOL_LABEL}={pool}") if pool else None
    return [api.sanitize_for_serialization(n) for n in listed.items] if listed is not None else None


# A pool's nodes (_pool_nodes) by its name, for one command.
PoolNodes = Callable[[str | None], list[dict] | None]


def _pool_lister(api: Any) -> PoolNodes:
    """_pool_nodes, each pool listed once however often one status asks (why its gang waits, its goodput; each job
    of a team's goodput)."""
    return functools.cache(functools.partial(_pool_nodes, api))


# A batch Job's conditions once it has ended (JobComplete, JobFailed in kubernetes/api:batch/v1/types.go@v0.35.0).
BATCH_ENDED = ("Complete", "Failed")


def _batch_state(job: dict, pods: list[dict]) -> str:
    """A batch Job's newest true condition (Suspended, FailureTarget, SuccessCriteriaMet, Complete, Failed), else
    Running while one of its pods runs, Pending while it has active pods none of which runs (JobStatus.active counts
    pending and running pods alike), and its pods' counts (JobStatus active, succeeded, failed in kubernetes/api:
    batch/v1/types.go@v0.35.0) of its completions."""
    status, spec = job.get("status") or {}, job.get("spec") or {}
    active = int(status.get("active") or 0)
    condition = _state(job)
    if condition == "Submitted" and active:
        condition = "Running" if any(_pod_phase(p) == "Running" for p in pods) else "Pending"
    counts = f"{active} active, {int(status.get('succeeded') or 0)} succeeded, {int(status.get('failed') or 0)} failed"
    completions = spec.get("completions")
    return f"{condition}, {counts}" + (f" of {completions}" if completions is not None else "")


def read_batch_status(api: Any, name: str, namespace: str, now: float | None = None) -> Status:
    """A batch Job: its state and its pods' counts, the Volcano PodGroup its pods share, why they wait, where they run,
    and its goodput so far as the team's counts it (read_team_goodput). Volcano names that group after the pods'
    controller, the Job (`podgroup-<the Job's UID>`: GeneratePodgroupName, volcano-sh/volcano:staging/src/volcano.sh/
    apis/pkg/apis/helpers/helpers.go@v1.15.1), as the Training Operator names a Kubeflow job's after the job; it makes
    it once the first pod exists (createNormalPodPGIfNotExist, volcano-sh/volcano:pkg/controllers/podgroup/
    pg_controller_handler.go@v1.15.1)."""
    custom = _kubernetes().client.CustomObjectsApi(api)
    job = _call(custom.get_namespaced_custom_object, *BATCH, namespace, _plural(BATCH_KIND), name)
    pods, listed = _batch_pods(api, job, namespace), _pool_lister(api)
    found, unread = _batch_goodput(api, job, pods, _events(api, namespace), now, listed)
    uid = job["metadata"].get("uid")
    group = (
        _optional(
            custom.get_namespaced_custom_object, *PODGROUPS[:2], namespace, PODGROUPS[2], f"{VOLCANO_GROUP_PREFIX}{uid}"
        )
        if uid
        else None
    )
    template = (job.get("spec") or {}).get("template") or {}
    pool = _template_pool(template)
    phase = _gang_phase(group)
    if _state(job) in BATCH_ENDED and not _suspension(job):
        waiting = []
    else:
        waiting = _job_waits(job, pool, phase, pods, lambda: _owned_waits(BATCH_KIND, group, pods, listed(pool), pool))
    return Status(
        name=name,
        namespace=namespace,
        kind=BATCH_KIND,
        state=_batch_state(job, pods),
        gang=phase,
        queue=_group_queue(group) or _template_queue(template),
        position=_position(custom, group) if group and phase == "Pending" else None,
        waiting=waiting,
        pods=_pod_rows(pods),
        goodput=found,
        logs_not_read=unread,
    )


# --- logs --------------------------------------------------------------------------------------


def _when(stamp: str) -> tuple[datetime, int]:
    """An RFC 3339 time as the kubelet writes it (RFC3339Nano: trailing zeros of the fraction
    dropped), sortable to the nanosecond."""
    whole, _, rest = stamp.partition(".")
    fraction = rest.rstrip("Z").split("+")[0] if rest else "0"
    base = datetime.fromisoformat(whole.rstrip("Z") + "+00:00")
    return base, int((fraction + "000000000")[:9])


@dataclass(frozen=True, order=True)
class LogLine:
    """One line of one rank's log: when, the pod's node and replica, the text."""

    at: tuple[datetime, int]
    stamp: str
    node: str
    replica: str
    text: str

    def __str__(self) -> str:
        return f"{self.node} {self.replica} {self.text}"


def _split(line: str) -> tuple[str, str]:
    stamp, _, text = line.partition(" ")
    return stamp, text


def _replica(pod: dict) -> str:
    labels = pod["metadata"].get("labels") or {}
    if REPLICA_TYPE_LABEL in labels:
        return f"{labels[REPLICA_TYPE_LABEL].lower()}-{labels.get(REPLICA_INDEX_LABEL, '0')}"
    return str(pod["metadata"]["name"])


def _job_pods(api: Any, name: str, namespace: str, kind: str) -> list[dict]:
    pods = _kind_pods(api, name, namespace, kind)
    if not pods:
        raise ApiError(404, "NotFound", f"no pods of job {name} in namespace {namespace} (yet: see jobs status)")
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def read_logs(
    api: Any, name: str, namespace: str, container: str | None = None, kind: str = "PyTorchJob"
) -> list[LogLine]:
    """Every pod's log of the job (a serving job: its Deployment's pods; a batch Job: its own), each line with its
    node and replica, merged by time."""
    core = _kubernetes().client.CoreV1Api(api)
    lines = []
    for pod in _job_pods(api, name, namespace, kind):
        text = _call(
            core.read_namespaced_pod_log, pod["metadata"]["name"], namespace, timestamps=True, container=container
        )
        for line in (text or "").splitlines():
            stamp, body = _split(line)
            lines.append(LogLine(_when(stamp), stamp, pod["spec"].get("nodeName") or "-", _replica(pod), body))
    return sorted(lines)


# Pod phases in which a pod's container has started, so the kubelet has a log to stream.
_STARTED = ("Running", *ENDED_POD_PHASES)
# A batch Job makes a new pod after one fails (backoffLimit; a pod its podFailurePolicy ignores, such as one Volcano
# took back), so its pods' ends are not its own: `logs --follow` of a Job ends once the Job has a Complete or Failed
# condition (or Suspended: its pods are gone until a resume), or it is gone, looked up this often; a job of another
# kind none of whose pods has come yet is looked up as often.
FOLLOW_RECHECK_S = 2


def _watch_pods(
    api: Any,
    core: Any,
    namespace: str,
    selector: str,
    watch_seconds: int | None,
    over: Callable[[], bool],
    streams: set[str],
    lines: queue.Queue,
    mine: Callable[[dict], bool],
    pods_end_it: bool,
) -> None:
    """Put ("start", pod) on `lines` once for each pod of `selector` that is `mine` (a batch Job's: those it controls)
    and starts, watching them in windows of FOLLOW_RECHECK_S, each from where the last one stopped; return once
    every pod seen (none, for a job over before any or whose pods were deleted) has ended and `over()` says the job
    has too (or after `watch_seconds`). With `pods_end_it` (a Kubeflow or serving job, whose pods' ends are its own),
    once pods were seen and every one has ended, `over()` asked only while none was seen: a gang that waits in its
    queue longer than the API server's watch lasts (its min-request-timeout, 30 to 60 minutes by default) is followed
    until its pods come or the job is over, not ended as if it had run. A window whose resourceVersion the API server
    no longer holds (410 Expired: a quiet pod makes no event to move it on, and the server keeps a bounded history)
    starts again from a fresh list, whose ADDED events say which pods are there."""
    phases: dict[str, str] = {}
    started, version = time.monotonic(), None

    def ended() -> bool:
        return all(p in (*ENDED_POD_PHASES, "Deleted") for p in phases.values())

    while True:
        seconds = min(watch_seconds or FOLLOW_RECHECK_S, FOLLOW_RECHECK_S)
        watcher = _kubernetes().watch.Watch()
        since: dict[str, str] = {"resource_version": version} if version else {}
        try:
            for event in watcher.stream(
                core.list_namespaced_pod, namespace, label_selector=selector, timeout_seconds=seconds, **since
            ):
                pod = api.sanitize_for_serialization(event["object"])
                if not mine(pod):
                    continue
                uid, phase = pod["metadata"].get("uid"), (pod.get("status") or {}).get("phase", "Pending")
                phases[uid] = "Deleted" if event["type"] == "DELETED" else phase
                if event["type"] != "DELETED" and phase in _STARTED and uid not in streams:
                    streams.add(uid)
                    lines.put(("start", pod))
                if pods_end_it and ended():
                    watcher.stop()
            version = watcher.resource_version or version
        except _kubernetes().client.ApiException as exc:
            if exc.status != HTTPStatus.GONE:
                raise
            phases.clear()
            version = None
        if watch_seconds and time.monotonic() - started >= watch_seconds:
            return
        if ended() and ((pods_end_it and phases) or over()):
            return


def _job_over(custom: Any, kind: str, name: str, namespace: str) -> bool:
    """Whether the job will make no more pods: it is gone, it has ended or is suspended (a batch Job's Complete or
    Failed, a Kubeflow job's Succeeded or Failed), or, a serving job, it is scaled to none."""
    job = _optional(custom.get_namespaced_custom_object, *_group_of(kind), namespace, _plural(kind), name)
    if job is None:
        return True
    if kind == SERVING_KIND:
        return not (job.get("spec") or {}).get("replicas", 1)
    return _state(job) in (*(BATCH_ENDED if kind == BATCH_KIND else ("Succeeded", "Failed")), "Suspended")


def follow_logs(
    api: Any,
    name: str,
    namespace: str,
    kind: str = "PyTorchJob",
    container: str | None = None,
    watch_seconds: int | None = None,
) -> Iterator[LogLine]:
    """Every pod's log as it is written (`follow=true`, one stream per pod), lines as they come. A
    watch on the job's pods starts a stream for each pod that starts later too: the gang's other
    replicas, and every pod the operator recreates after a restart. Ends once every pod it
    followed has ended and the watch has (`watch_seconds`, or when every pod of the job has), and a batch
    Job's once the Job itself has (FOLLOW_RECHECK_S). The job must exist (404 NotFound at once, not a
    wait for pods that never come)."""
    kubernetes = _kubernetes()
    core = kubernetes.client.CoreV1Api(api)
    lines: queue.Queue = queue.Queue()
    done, streams = object(), set[str]()
    custom = kubernetes.client.CustomObjectsApi(api)
    job = _call(custom.get_namespaced_custom_object, *_group_of(kind), namespace, _plural(kind), name)
    selector = _selector_of(job) if kind in SELECTED_KINDS else f"{JOB_NAME_LABEL}={name}"

    def read(pod: dict) -> None:
        try:
            stream = _call(
                core.read_namespaced_pod_log,
                pod["metadata"]["name"],
                namespace,
                timestamps=True,
                follow=True,
                container=container,
                _preload_content=False,
            )
            pending = b""
            for chunk in stream.stream():
                pending += chunk
                *whole, pending = pending.split(b"\n")
                for raw in whole:
                    stamp, body = _split(raw.decode(errors="replace"))
                    lines.put(LogLine(_when(stamp), stamp, pod["spec"].get("nodeName") or "-", _replica(pod), body))
        except ApiError as exc:
            lines.put(exc)
        finally:
            lines.put(done)

    def watch() -> None:
        try:
            batch = kind == BATCH_KIND
            mine = (lambda pod: _owned_by(pod, job)) if batch else (lambda pod: True)
            over = functools.partial(_job_over, custom, kind, name, namespace)
            _watch_pods(api, core, namespace, selector, watch_seconds, over, streams, lines, mine, not batch)
        except kubernetes.client.ApiException as exc:
            lines.put(_refused(exc))
        except ApiError as exc:
            lines.put(exc)
        except Exception as exc:  # noqa: BLE001 - a dropped connection must not end the follow as if the job had
            lines.put(
                ApiError(
                    0,
                    "WatchStopped",
                    f"the watch of {kind.lower()}/{name}'s pods in {namespace} stopped before the job ended "
                    f"({type(exc).__name__}: {exc}); its pods may still run: follow it again",
                )
            )
        finally:
            lines.put(done)

    threading.Thread(target=watch, daemon=True).start()
    running = 1  # the watch, and each stream it starts
    while running:
        item = lines.get()
        if item is done:
            running -= 1
        elif isinstance(item, ApiError):
            raise item
        elif isinstance(item, tuple):
            running += 1
            threading.Thread(target=read, args=(item[1],), daemon=True).start()
        else:
            yield item


def delete(api: Any, name: str, namespace: str, kind: str = "PyTorchJob", dry_run: bool = False) -> list[str]:
    """Delete the job, its dependents in the background (PROPAGATION): the operator's owner references take its
    pods, Service and PodGroup with it (a serving job's Deployment: its ReplicaSets and their pods, the API's
    default for apps/v1 being DeleteDependents too: DefaultGarbageCollectionPolicy in
    kubernetes/kubernetes:pkg/registry/apps/deployment/strategy.go@v1.35.0, and the Service a serving
    job file's `port` made; a batch Job: its pods and its Volcano PodGroup, which names the Job its owner:
    newPGOwnerReferences in volcano-sh/volcano:pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1). What was
    deleted, as `kind/name`."""
    custom = _kubernetes().client.CustomObjectsApi(api)
    options = {"dry_run": "All"} if dry_run else {}
    _call(
        custom.delete_namespaced_custom_object,
        *_group_of(kind),
        namespace,
        _plural(kind),
        name,
        propagation_policy=PROPAGATION,
        **options,
    )
    deleted = [f"{kind.lower()}/{name}"]
    if kind == SERVING_KIND and _delete_job_service(api, name, namespace, options):
        deleted.append(f"service/{name}")
    return deleted


def _delete_job_service(api: Any, name: str, namespace: str, options: dict) -> bool:
    """The Service of a serving job file (its name, rendered from a job file), if there is one."""
    core = _kubernetes().client.CoreV1Api(api)
    found = _optional(core.read_namespaced_service, name, namespace)
    service = api.sanitize_for_serialization(found) if found is not None else {}
    if ((service.get("metadata") or {}).get("labels") or {}).get(JOB_FILE_LABEL) != "true":
        return False  # none, or one the team made itself: not the job file's to delete
    # the answer unread: the deleted Service or a Status, whichever the server sends, is no V1Service to parse
    _call(core.delete_namespaced_service, name, namespace, _preload_content=False, **options)
    return True


# --- suspend and resume ------------------------------------------------------------------------


class StaysSuspended(Exception):
    """The job is the gang deadline's to resume (GAVE_BACK_ANNOTATION): the team admission policy refuses its
    team's resume (components/tenancy.py suspension_validations)."""


def set_suspended(api: Any, name: str, namespace: str, kind: str = "PyTorchJob", suspend: bool = True) -> bool:
    """Suspend the job (its controller deletes its pods, and a Kubeflow job's PodGroup, giving its nodes back) or
    resume it (its gang queues again). False, and no patch, when it already is so; a resume of a job the gang
    deadline suspended raises StaysSuspended, naming when it queues again, before any patch.

    A JSON merge patch of the flag alone, with the field manager `higgsfield`: an Update, which never conflicts
    with the flag's other writers (the gang deadline's own merge patches, another user's kubectl), where an apply
    fails on a field another manager owns unless forced; and an apply of the flag alone as `higgsfield` would
    drop every other field `jobs submit` applied under that name, since an apply states all a manager's fields
    ("Apply and Update" and the field removal rule in kubernetes/website:content/en/docs/reference/using-api/
    server-side-apply.md@83f226e4b7d0c3fdfeb4e1e54029313bf4324296). Nor does the next `jobs submit` reset the
    flag: its apply removes only fields it applied before, and a job file says nothing of suspend."""
    if kind == SERVING_KIND:
        raise ApiError(
            0, "NotSuspendable", f"a serving job's Deployment has no suspend: scale it to 0 or cancel {name}"
        )
    custom = _kubernetes().client.CustomObjectsApi(api)
    where = (*_group_of(kind), namespace, _plural(kind), name)
    job = _call(custom.get_namespaced_custom_object, *where)
    if _is_suspended(job) == suspend:
        return False
    if not suspend and ((job.get("metadata") or {}).get("annotations") or {}).get(GAVE_BACK_ANNOTATION):
        raise StaysSuspended(
            f"{kind.lower()}/{name} is the gang deadline's to resume, not its team's: {_suspension(job)}"
        )
    patch: dict = {"suspend": suspend}
    for key in reversed(_suspend_key(kind)[:-1]):
        patch = {key: patch}
    _call(
        custom.patch_namespaced_custom_object,
        *where,
        {"spec": patch},
        field_manager=FIELD_MANAGER,
        _content_type="application/merge-patch+json",
    )
    return True


# --- the Python API ------------------------------------------------------------------------------


class Job:
    """A team's job on a stack, for a notebook: `Job(stack="prod", name=..., team=..., command=[...],
    resources={...})` takes the job file's keys (docs/reference/job-file.md); `Job.from_file`
    reads one. `render()` gives the objects `submit()` applies."""

    def __init__(
        self,
        stack: str,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        spec: JobFile | None = None,
        **settings: Any,
    ) -> None:
        self.stack, self.kubeconfig, self.context = stack, kubeconfig, context
        self.spec: JobFile = spec if spec is not None else load_job(settings, "Job")
        self._api: Any = None

    @classmethod
    def from_file(cls, path: str, stack: str, kubeconfig: str | None = None, context: str | None = None) -> Job:
        from infra.offline.team_job import read_job_file

        return cls(stack, kubeconfig=kubeconfig, context=context, spec=read_job_file(path))

    @property
    def api(self) -> Any:
        if self._api is None:
            self._api = connect(self.kubeconfig, self.context, self.stack)
        return self._api

    def render(self) -> list[dict]:
        from infra.offline import team_job
        from infra.offline.evaluate import load_stack

        return team_job.render(self.spec, load_stack(self.stack))[0]

    def submit(self, dry_run: bool = False) -> list[dict]:
        return apply(self.api, self.render(), dry_run=dry_run)

    def status(self) -> Status:
        return read_status(self.api, self.spec.name, self.spec.team, self.spec.kind)

    def logs(self, follow: bool = False) -> Iterator[LogLine]:
        """Every rank's lines merged by time; with `follow`, as they are written, until every pod has ended."""
        if follow:
            return follow_logs(self.api, self.spec.name, self.spec.team, self.spec.kind)
        return iter(read_logs(self.api, self.spec.name, self.spec.team, kind=self.spec.kind))

    def cancel(self, dry_run: bool = False) -> None:
        delete(self.api, self.spec.name, self.spec.team, self.spec.kind, dry_run=dry_run)

    def suspend(self) -> bool:
        """Pause the job (its pods go, its nodes are given back); False if it already was."""
        return set_suspended(self.api, self.spec.name, self.spec.team, self.spec.kind, suspend=True)

    def resume(self) -> bool:
        """Let the paused job queue again; False if it was not suspended. StaysSuspended for a job the gang
        deadline suspended: it resumes that one itself."""
        return set_suspended(self.api, self.spec.name, self.spec.team, self.spec.kind, suspend=False)


# The same as functions of a Job, for those who prefer `submit(job)` to `job.submit()`.


def submit(job: Job, dry_run: bool = False) -> list[dict]:
    return job.submit(dry_run=dry_run)


def status(job: Job) -> Status:
    return job.status()


def logs(job: Job, follow: bool = False) -> Iterator[LogLine]:
    return job.logs(follow=follow)


def cancel(job: Job, dry_run: bool = False) -> None:
    job.cancel(dry_run=dry_run)

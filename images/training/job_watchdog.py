"""The job watchdog (components/job_watchdog.py runs it on the system nodes): no training job hangs
silently, no slow node drags a gang for ever, and a node the pre-flight named goes back to the gate.

Every CHECK_SECONDS it reads the ranks' progress from Prometheus (images/training/progress.py; the
scrape job `training-progress` labels each series with the job, its pod and pod uid, and the node)
and for each job:
- hung: its newest step is older than max(k x its normal step time, the floor) - k HANG_STEP_MULTIPLE,
  the normal step time the median of its ranks' last step times, the floor HANG_FLOOR_SECONDS (longer
  than a checkpoint save, so a save is never a hang) - it deletes the job's pods that published
  those series (by uid, so pods already recreated are never touched) and records an Event on the job
  (`TrainingHung`) saying why. The Training Operator recreates deleted pods (ReconcilePods creates a
  pod for every replica index that has none, kubeflow/trainer:pkg/controller.v1/common/pod.go@v1.9.4),
  and the ranks resume from the newest complete checkpoint (examples/checkpointing.py);
- straggler: a rank whose forward pass, averaged over the last 10 minutes, is slower than
  STRAGGLER_FACTOR x the median of the job's other ranks: its node is asked for a re-check;
- pre-flight suspects (higgsfield_preflight_suspect, served by preflight.py while it lingers): each
  named node is asked for a re-check - only a node one of the job's own pods ran on (the series'
  node label comes from Prometheus' service discovery, not from the pod), so a team can only send
  back nodes it was given. A suspect marked `recreate` (an MPIJob's launcher names its workers' nodes,
  preflight.py --mpi: the workers themselves never exit, their launcher alone restarts in place) is
  checked against the job's pods instead (one of them must run on the node), asked for a re-check,
  and once the gate has had RECREATE_AFTER_SECONDS to put its taint back, the job's pods on that node
  are deleted by uid: the MPI Operator recreates a missing worker under its name (getOrCreateWorker,
  kubeflow/trainer:pkg/controller.v1/mpi/mpijob_controller.go@v1.9.4), on another node, and the
  launcher's next try checks it.
- idle nodes (every IDLE_PASS_SECONDS): a GPU node whose GPUs no pod has held for the last
  IDLE_RECHECK_SECONDS (the DCGM exporter's series name the pod holding each GPU; the gate's own
  pod holds them while it checks, so a node just checked is not idle) is asked for a re-check, at
  most once per IDLE_RECHECK_SECONDS per node, so a node that sat unused does not meet its next gang
  unchecked.
A re-check request is an Event about the node, in `default` (where Events about nodes live), reason
NodeRecheckRequested; the health gate's per-node program (health_gate.py --after-reboot) acts on it
with its own RBAC: it puts the startup taint back and labels the node `recheck`, so the gate checks it
again and no gang is placed there meanwhile. A node is asked at most once per RECHECK_QUIET_SECONDS.
A re-check on a team's own signal (its straggler, its pre-flight's suspect) is asked only of a node where no
other team's pod holds a GPU (the DCGM exporter's series, holders_query): a team's progress series never cost
another team its placement. The watchdog never touches a node itself.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from health_gate import ApiError, KubernetesApi  # noqa: E402

RECHECK_REASON = "NodeRecheckRequested"
HUNG_REASON = "TrainingHung"
COMPONENT = "higgsfield-job-watchdog"
JOB_LABEL = "training.kubeflow.org/job-name"
# A job's pods are listed this many at a time: a page of the largest a team can make, as the API server writes them,
# fits the watchdog's memory limit (components/job_watchdog.py MEMORY_LIMIT;
# tests/security/test_r23_watchdog_memory.py).
PAGE = 3
# The series of the scrape job `training-progress` (components/observability.py), which labels them
# from the pod's own metadata; the same names from any other scrape job are never read.
QUERIES = {
    "at": 'higgsfield_training_progress_timestamp_seconds{job="training-progress"}',
    "step_s": 'higgsfield_training_step_seconds{job="training-progress"}',
    "compute_s": 'avg_over_time(higgsfield_training_compute_seconds{job="training-progress"}[10m])',
}
SUSPECTS = 'max_over_time(higgsfield_preflight_suspect{job="training-progress"}[10m])'
# GPU nodes the DCGM exporter saw `window` ago and sees now, on none of whose GPUs any pod (a team's,
# or the gate's while it checks) held a GPU in between: the exporter labels a GPU's series with the
# pod's namespace while a pod holds it (components/observability.py: honor_labels), else none.
GPU_UTIL, DCGM_JOB, HELD = "DCGM_FI_DEV_GPU_UTIL", 'job="dcgm-exporter"', 'namespace!=""'
DCGM_SERIES = f"{GPU_UTIL}{{{DCGM_JOB}}}"
HELD_SERIES = f"{GPU_UTIL}{{{DCGM_JOB},{HELD}}}"


# A node's name as Kubernetes writes one (a DNS subdomain), the only text put into a query below.
NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def holders_query(node: str) -> str:
    """The namespaces whose pods hold a GPU of `node` now, from the DCGM exporter's series."""
    return f'count by (namespace) ({GPU_UTIL}{{{DCGM_JOB},{HELD},Hostname="{node}"}})'


def idle_query(window_s: float) -> str:
    window = f"{int(window_s)}s"
    return (
        f"count by (Hostname) ({DCGM_SERIES} offset {window}) "
        f"unless on (Hostname) count by (Hostname) (max_over_time({HELD_SERIES}[{window}])) "
        f"and on (Hostname) count by (Hostname) ({DCGM_SERIES})"
    )


IDLE_PASS_SECONDS = 600.0
# How long after its re-check request a named MPI worker's pods are deleted: two of the health gate's
# polls for requests (health_gate.py RECHECK_POLL_SECONDS), so its taint is on the node before the
# recreated pod is scheduled, and the pod does not land where it was.
RECREATE_AFTER_SECONDS = 60.0


@dataclass(frozen=True)
class Settings:
    hang_multiple: float = 10.0
    hang_floor_s: float = 900.0
    straggler_factor: float = 1.5
    recheck_quiet_s: float = 3600.0
    idle_recheck_s: float = 0.0  # 0: idle nodes are not re-checked

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Settings:
        return cls(
            float(env.get("HANG_STEP_MULTIPLE") or 10),
            float(env.get("HANG_FLOOR_SECONDS") or 900),
            float(env.get("STRAGGLER_FACTOR") or 1.5),
            float(env.get("RECHECK_QUIET_SECONDS") or 3600),
            float(env.get("IDLE_RECHECK_SECONDS") or 0),
        )


@dataclass(frozen=True)
class Rank:
    """One rank's latest progress, as Prometheus has it."""

    namespace: str
    job: str
    pod: str
    pod_uid: str
    node: str
    rank: str
    at: float
    step_s: float
    compute_s: float | None = None


@dataclass(frozen=True)
class Action:
    kind: str  # "restart" | "recheck" | "recreate" (re-check the node, then move the job's pods off it)
    namespace: str
    job: str
    reason: str
    pods: tuple[str, ...] = ()  # uids of the pods to delete (restart)
    node: str = ""  # the node to re-check


def hung(ranks: list[Rank], now: float, settings: Settings) -> str | None:
    """Why the job counts as hung, or None: no rank has finished a step for longer than
    max(k x the median step time, the floor)."""
    last = max(r.at for r in ranks)
    normal = statistics.median(r.step_s for r in ranks)
    limit = max(settings.hang_multiple * normal, settings.hang_floor_s)
    if now - last <= limit:
        return None
    return (
        f"no training step for {now - last:.0f}s, over {limit:.0f}s (the larger of {settings.hang_multiple:g} x its "
        f"normal step time {normal:.2f}s and {settings.hang_floor_s:.0f}s); restarting the gang from its newest "
        "complete checkpoint"
    )


def stragglers(ranks: list[Rank], factor: float) -> list[tuple[Rank, str]]:
    """Ranks whose average forward pass is over `factor` x the median of the job's other ranks."""
    found = []
    for rank in ranks:
        others = [r.compute_s for r in ranks if r is not rank and r.compute_s]
        if rank.compute_s is None or not others:
            continue
        typical = statistics.median(others)
        if typical > 0 and rank.compute_s > factor * typical:
            found.append(
                (
                    rank,
                    f"rank {rank.rank} ({rank.pod}) of {rank.namespace}/{rank.job} computes in {rank.compute_s:.3f}s, "
                    f"{rank.compute_s / typical:.1f} x its peers' {typical:.3f}s over 10 minutes: a straggler",
                )
            )
    return found


def plan(ranks: list[Rank], suspects: list[dict], now: float, settings: Settings) -> list[Action]:
    """What to do: restart hung jobs; re-check stragglers' nodes and the pre-flight's suspects."""
    by_job: dict[tuple[str, str], list[Rank]] = {}
    for rank in ranks:
        by_job.setdefault((rank.namespace, rank.job), []).append(rank)
    actions = []
    for (namespace, job), members in sorted(by_job.items()):
        why = hung(members, now, settings)
        if why:
            actions.append(Action("restart", namespace, job, why, pods=tuple(sorted({r.pod_uid for r in members}))))
            continue
        for rank, reason in stragglers(members, settings.straggler_factor):
            actions.append(Action("recheck", namespace, job, reason, node=rank.node))
    for suspect in suspects:
        labels = suspect["metric"]
        namespace, job, node = labels.get("namespace", ""), labels.get("job_name", ""), labels.get("node", "")
        own_nodes = {
            s["metric"].get("Hostname")
            for s in suspects
            if (s["metric"].get("namespace"), s["metric"].get("job_name")) == (namespace, job)
        }
        if node and labels.get("recreate") == "true":  # its pods are checked against the API: recreate
            reason = f"the pre-flight of {namespace}/{job} named it: {namespace}/{job}'s pods there are recreated"
            actions.append(Action("recreate", namespace, job, reason, node=node))
        elif node and node in own_nodes:
            reason = f"the pre-flight of {namespace}/{job} named it: its all-reduce was slow or failed"
            actions.append(Action("recheck", namespace, job, reason, node=node))
    # One action per kind, node and job: a `recreate` node is a label the team's launcher serves, so keyed by node
    # alone, one team's suspect naming a node would take the place of the job whose pods run there.
    unique: dict[tuple[str, str, str, str], Action] = {}
    for action in actions:
        unique.setdefault((action.kind, action.node, action.namespace, action.job), action)
    return list(unique.values())


# --- Prometheus ------------------------------------------------------------------------------------


def query(base_url: str, expr: str) -> list[dict]:
    """An instant query's vector (Prometheus HTTP API /api/v1/query)."""
    url = f"{base_url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=30) as answer:
        body = json.loads(answer.read())
    return body["data"]["result"] if body.get("status") == "success" else []


def ranks_from(results: dict[str, list[dict]]) -> list[Rank]:
    """Join the queries' series by (namespace, pod uid, rank)."""
    values: dict[tuple[str, str, str], dict[str, Any]] = {}
    for name, vector in results.items():
        for series in vector:
            m = series["metric"]
            key = (m.get("namespace", ""), m.get("pod_uid", ""), m.get("rank", ""))
            entry = values.setdefault(key, {"metric": m})
            entry[name] = float(series["value"][1])
    return [
        Rank(
            e["metric"].get("namespace", ""),
            e["metric"].get("job_name", ""),
            e["metric"].get("pod", ""),
            e["metric"].get("pod_uid", ""),
            e["metric"].get("Hostname", ""),
            e["metric"].get("rank", ""),
            e["at"],
            e.get("step_s", 0.0),
            e.get("compute_s"),
        )
        for e in values.values()
        if "at" in e and e["metric"].get("job_name")
    ]


# --- Kubernetes ------------------------------------------------------------------------------------


class WatchdogApi(KubernetesApi):
    """The calls the watchdog makes (its RBAC: components/job_watchdog.py rules)."""

    def list_pods(self, namespace: str, selector: str) -> list[dict]:
        """The pods `selector` picks, PAGE at a time, each cut to the metadata restart() reads before the next page
        is asked for: a team writes its own pods, so one hung job's pods may each be as large as etcd stores and
        come as up to six times that in JSON (images/training/gang_deadline.py PAGE says why)."""
        kept: list[dict] = []
        token = ""
        while True:
            query = {"labelSelector": selector, "limit": PAGE, **({"continue": token} if token else {})}
            page = self._call("GET", f"/api/v1/namespaces/{namespace}/pods?{urllib.parse.urlencode(query)}")
            kept += [_kept(pod) for pod in page.get("items", [])]
            token = (page.get("metadata") or {}).get("continue") or ""
            del page  # one page at a time
            if not token:
                return kept

    def delete_pod(self, namespace: str, name: str, uid: str) -> dict:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}
        return self._call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)

    def list_events(self, namespace: str, field_selector: str) -> list[dict]:
        query_string = urllib.parse.urlencode({"fieldSelector": field_selector})
        return self._call("GET", f"/api/v1/namespaces/{namespace}/events?{query_string}").get("items", [])


def _kept(pod: dict) -> dict:
    """What the watchdog reads of a pod: its name, namespace, uid and controller references (whom to delete, whose
    job an Event is about), and its node."""
    meta = pod.get("metadata") or {}
    owners = [
        {k: ref.get(k, "") for k in ("apiVersion", "kind", "name", "uid", "controller")}
        for ref in meta.get("ownerReferences") or []
        if ref.get("controller")
    ]
    kept = {k: meta.get(k, "") for k in ("name", "namespace", "uid")} | {"ownerReferences": owners}
    return {"metadata": kept, "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")}}


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event(involved: dict, namespace: str, reason: str, message: str, now: float, kind: str = "Warning") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.watchdog-", "namespace": namespace},
        "involvedObject": involved,
        "type": kind,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "firstTimestamp": _stamp(now),
        "lastTimestamp": _stamp(now),
        "count": 1,
    }


def _owner(pod: dict) -> dict:
    """What the Event is about: the Kubeflow job that controls `pod` (any kind: its controller
    reference, which the operator sets, carries its kind, name and uid), or the pod itself."""
    meta = pod["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and str(ref.get("apiVersion", "")).startswith("kubeflow.org/"):
            return {k: ref.get(k, "") for k in ("apiVersion", "kind", "name", "uid")} | {"namespace": meta["namespace"]}
    return {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]}


def restart(api: WatchdogApi, action: Action, now: float) -> str:
    """Delete the hung pods (those whose series went quiet, by uid) and say why on their job."""
    deleted = []
    for pod in api.list_pods(action.namespace, f"{JOB_LABEL}={action.job}"):
        meta = pod["metadata"]
        if meta.get("uid") in action.pods:
            try:
                api.delete_pod(action.namespace, meta["name"], meta["uid"])
                deleted.append(pod)
            except ApiError as error:
                if error.status not in (404, 409):  # gone already, or already recreated
                    raise
    if not deleted:
        return f"{action.namespace}/{action.job}: its hung pods are gone already"
    names = ", ".join(p["metadata"]["name"] for p in deleted)
    message = f"{action.reason} (pods deleted: {names})"
    api.create_event(action.namespace, _event(_owner(deleted[0]), action.namespace, HUNG_REASON, message, now))
    return f"{action.namespace}/{action.job}: {message}"


def request_recheck(api: WatchdogApi, action: Action, now: float, settings: Settings) -> str:
    """An Event asking the health gate to check `action.node` again, unless one was asked recently."""
    recent = api.list_events("default", f"involvedObject.name={action.node},reason={RECHECK_REASON}")
    if any(_age(e, now) < settings.recheck_quiet_s for e in recent):
        return f"{action.node}: a re-check was asked within {settings.recheck_quiet_s:.0f}s"
    involved = {"apiVersion": "v1", "kind": "Node", "name": action.node}
    api.create_event("default", _event(involved, "default", RECHECK_REASON, action.reason, now))
    return f"{action.node}: re-check asked ({action.reason})"


def _on(pod: dict, node: str) -> bool:
    return (pod.get("spec") or {}).get("nodeName") == node


def recreate(api: WatchdogApi, action: Action, now: float, settings: Settings) -> str:
    """An MPI worker's node the launcher's pre-flight named: only where one of the job's pods runs
    (so a team sends back only nodes it was given), a re-check request, then - once that request is
    RECREATE_AFTER_SECONDS old - the job's pods on the node deleted by uid, for the operator to
    recreate them elsewhere."""
    there = [p for p in api.list_pods(action.namespace, f"{JOB_LABEL}={action.job}") if _on(p, action.node)]
    if not there:
        return f"{action.node}: no pod of {action.namespace}/{action.job} runs there; nothing asked"
    said = request_recheck(
        api, Action("recheck", action.namespace, action.job, action.reason, node=action.node), now, settings
    )
    asked = api.list_events("default", f"involvedObject.name={action.node},reason={RECHECK_REASON}")
    if not any(RECREATE_AFTER_SECONDS <= _age(e, now) < settings.recheck_quiet_s for e in asked):
        return f"{said}; its pods are deleted once the gate has had {RECREATE_AFTER_SECONDS:.0f}s to taint it"
    deleted = []
    for pod in there:
        meta = pod["metadata"]
        try:
            api.delete_pod(action.namespace, meta["name"], meta["uid"])
            deleted.append(meta["name"])
        except ApiError as error:
            if error.status not in (404, 409):
                raise
    where = f"{action.namespace}/{action.job}"
    return f"{said}; deleted {', '.join(deleted) or 'nothing'} of {where} on it, to be recreated elsewhere"


def _age(event: dict, now: float) -> float:
    stamp = event.get("lastTimestamp") or event.get("firstTimestamp") or ""
    try:
        return now - datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return float("inf")


def idle_nodes(
    prometheus: Callable[[str], list[dict]], now: float, settings: Settings, asked: dict[str, float]
) -> list[Action]:
    """Re-checks of the nodes idle for settings.idle_recheck_s, each at most once in that time
    (`asked`: node -> when, kept by the caller across passes)."""
    if settings.idle_recheck_s <= 0 or now - asked.get("", float("-inf")) < IDLE_PASS_SECONDS:
        return []
    asked[""] = now  # this pass's time: the query spans hours of series, so not every 30 seconds
    hours = settings.idle_recheck_s / 3600
    actions = []
    for series in prometheus(idle_query(settings.idle_recheck_s)):
        node = series["metric"].get("Hostname", "")
        if node and now - asked.get(node, float("-inf")) >= settings.idle_recheck_s:
            asked[node] = now
            reason = f"idle: no pod has held its GPUs for {hours:g}h; a periodic re-check before the next gang"
            actions.append(Action("recheck", "", "", reason, node=node))
    return actions


def _shared_with(prometheus: Callable[[str], list[dict]], action: Action) -> str | None:
    """Why a re-check a team's own signal asks for (its straggler, its pre-flight's suspect) is not asked: another
    team's pods hold GPUs on that node. The gate's startup taint would keep that team's pods off the node until the
    check, which needs every GPU free, could run, so one team's progress series would cost another its placement."""
    if action.kind == "restart" or not action.namespace:
        return None
    if not NODE_NAME.match(action.node):
        return f"{action.node!r}: not a node name; nothing asked"
    others = {s["metric"].get("namespace", "") for s in prometheus(holders_query(action.node))}
    others -= {action.namespace, ""}
    if not others:
        return None
    return (
        f"{action.node}: {', '.join(sorted(others))} hold GPUs there too: not re-checked on "
        f"{action.namespace}/{action.job}'s signal ({action.reason})"
    )


SHARED_REASON = "NodeRecheckDeclined"


def tell_the_team(
    api: WatchdogApi, action: Action, why: str, now: float, told: dict[tuple[str, str, str], float], settings: Settings
) -> str:
    """An Event on the job whose signal named a node shared with another team, where a pod of the job runs, saying
    that the node is neither re-checked nor emptied of its pods and why, at most once per RECHECK_QUIET_SECONDS for a
    job and node (`told`: when, kept by the caller across passes)."""
    for done in [k for k, at in told.items() if now - at >= settings.recheck_quiet_s]:
        del told[done]  # a telling past its quiet period is told again anyway: the dict stays as small as the hour's
    key = (action.namespace, action.job, action.node)
    if not NODE_NAME.match(action.node) or key in told:
        return why
    # Only a job with a pod on the node: a `recreate` suspect's node is the launcher's word, and an Event for a node the
    # job never had would tell it whether another team's pods hold GPUs there.
    pods = [p for p in api.list_pods(action.namespace, f"{JOB_LABEL}={action.job}") if _on(p, action.node)]
    if not pods:
        return why
    told[key] = now
    emptied = " nor emptied of this job's pods" if action.kind == "recreate" else ""
    message = (
        f"node {action.node} is not sent back to the health gate{emptied}: another team's pods hold GPUs there, and "
        f"the gate's taint would keep theirs off it ({action.reason}); the TrainingStraggler and PreflightNamedNode "
        "alerts name it to the cluster's administrators"
    )
    api.create_event(action.namespace, _event(_owner(pods[0]), action.namespace, SHARED_REASON, message, now))
    return f"{why}; told {action.namespace}/{action.job}"


def tick(
    api: WatchdogApi,
    prometheus: Callable[[str], list[dict]],
    now: float,
    settings: Settings,
    idle_asked: dict[str, float] | None = None,
    told: dict[tuple[str, str, str], float] | None = None,
) -> list[str]:
    """One pass: read progress, decide, act; returns what it did, one line each. `idle_asked` keeps
    the idle nodes' re-checks between passes, `told` the jobs told a node of theirs is shared (main keeps both)."""
    answers: dict[str, list[dict]] = {}

    def ask(expr: str) -> list[dict]:
        """Prometheus' answer, asked once a pass: the actions of several jobs on one node share its holders query."""
        if expr not in answers:
            answers[expr] = prometheus(expr)
        return answers[expr]

    ranks = ranks_from({name: ask(expr) for name, expr in QUERIES.items()})
    done = []
    idle = idle_nodes(ask, now, settings, idle_asked if idle_asked is not None else {})
    for action in [*plan(ranks, ask(SUSPECTS), now, settings), *idle]:
        shared = _shared_with(ask, action)
        if shared:
            done.append(tell_the_team(api, action, shared, now, told if told is not None else {}, settings))
        elif action.kind == "restart":
            done.append(restart(api, action, now))
        elif action.kind == "recreate":
            done.append(recreate(api, action, now, settings))
        else:
            done.append(request_recheck(api, action, now, settings))
    return done


def main() -> int:
    env = dict(os.environ)
    settings, url = Settings.from_env(env), env["PROMETHEUS_URL"]
    api = WatchdogApi.in_cluster()
    every = float(env.get("CHECK_SECONDS") or 30)
    idle_asked: dict[str, float] = {}
    told: dict[tuple[str, str, str], float] = {}
    while True:
        try:
            for line in tick(api, lambda expr: query(url, expr), time.time(), settings, idle_asked, told):
                print(line, flush=True)
        except (OSError, ApiError, ValueError, KeyError) as error:  # Prometheus or the API away: next pass
            print(f"watchdog pass failed: {error}", flush=True)
        time.sleep(every)


if __name__ == "__main__":
    sys.exit(main())

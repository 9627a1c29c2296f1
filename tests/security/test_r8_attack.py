"""Round 8's attacker, beside the defences that landed with the release rules (pods give their GPUs
back when their queue stops counting them) and the gang deadline that reads node affinity.

The attacker is a team member: AmazonEKSEditPolicy's `edit` in the team's namespace (pods,
workloads, delete with any DeleteOptions) and the Kubeflow jobs of tenancy.job_submitter_role
(create, update, patch, delete). Each test states what the platform should refuse or do, and fails
on today's code: the admission CEL through cel-expr-python (tests/admission_cel.py), the gang
deadline through its pure `decide`.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import timedelta

import gang_deadline
import pytest

from components import gang_deadline as component
from components import tenancy
from components.teams import rules_of
from infra.core.names import (
    GAVE_BACK_ANNOTATION,
    JOB_NAME_PREFIXES,
    KUBEFLOW_GROUP,
    KUBEFLOW_JOB_KINDS,
    KUBEFLOW_MANAGER,
)
from infra.offline import jobs
from tests.components.test_gang_deadline import DEADLINE, IDLE_NODE, NOW, _decide, _iso, _pod, _podgroup
from tests.conftest import STACKS, plan_of
from tests.security.test_tenancy import BINDING, VAP, VISION, _job, denied_by, verdicts

ATTACKER = "alice@vision"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def _as_kind(kind: str) -> dict:
    """tests/security/test_tenancy.py's compliant PyTorchJob as another Kubeflow kind (its replica
    specs moved to that kind's key, its name given that kind's prefix)."""
    job = _job()
    key = {
        "PyTorchJob": "pytorchReplicaSpecs",
        "MPIJob": "mpiReplicaSpecs",
        "JAXJob": "jaxReplicaSpecs",
    }[kind]
    job["kind"] = kind
    job["metadata"]["name"] = JOB_NAME_PREFIXES.get(kind, "") + "j"
    job["spec"][key] = job["spec"].pop("pytorchReplicaSpecs")
    if kind == "MPIJob":
        job["spec"][key] = {"Launcher": job["spec"][key]["Master"], "Worker": job["spec"][key]["Worker"]}
    return job


# --- 1. a job handed to "another controller" is a job nobody reconciles -----------------------------


@pytest.mark.parametrize("kind", ["PyTorchJob", "JAXJob", "MPIJob"])
def test_a_running_job_may_not_be_handed_to_another_controller(kind):
    """The operator skips every job whose spec.runPolicy.managedBy is not its own
    (`ManagedByExternalController`, first thing in Reconcile: kubeflow/trainer:pkg/controller.v1/
    pytorch/pytorchjob_controller.go and mpi/mpijob_controller.go@v1.9.4), and `kueue.x-k8s.io/multikueue`
    is a value its webhook accepts (ValidateRunPolicy, pkg/common/util/webhooks.go@v1.9.4). Its
    immutability check never holds on these kinds: the PyTorchJob webhook's ValidateUpdate compares the
    new job with itself (`oldJob := newObj.(...)`, pkg/webhooks/pytorch/pytorchjob_webhook.go@v1.9.4),
    the JAXJob's runs no run-policy check on UPDATE (pkg/webhooks/jax/jaxjob_webhook.go@v1.9.4), the
    MPIJob has no webhook (`scaffold`, pkg/webhooks/webhooks.go@v1.9.4), and the CRD has no rule on the
    field (manifests/base/crds/kubeflow.org_pytorchjobs.yaml@v1.9.4).

    So a team patches managedBy onto a job whose gang is Inqueue and waiting: the gang deadline's
    `runPolicy.suspend: true` is then read by nobody, its pending pods stay, and the nodes EC2 delivered
    for it sit idle for as long as the team likes (images/training/gang_deadline.py counts on the
    operator deleting the pods). A running job stops being finished too: activeDeadlineSeconds,
    backoffLimit, cleanPodPolicy and ttlSecondsAfterFinished are all the operator's to apply.
    """
    old = _as_kind(kind)
    job = copy.deepcopy(old)
    job["spec"]["runPolicy"]["managedBy"] = MULTIKUEUE
    assert denied_by(job, operation="UPDATE", old=old, user=ATTACKER) != []


# --- 2. the deadline's suspension, undone by the team -------------------------------------------------


@pytest.mark.parametrize("annotation", ["kept", "removed"])
def test_a_job_the_gang_deadline_suspended_is_not_resumed_by_its_team(annotation):
    """The gang deadline suspends a job whose gang waited past its pools' deadline while holding idle
    nodes, and resumes it itself after retryAfterSeconds (30 min, the autoscaler's longest node-group
    backoff: infra/core/names.py GANG_RETRY_AFTER_S), so that the idle nodes go after the pool's
    scaleDownUnneededTime. The team's own UPDATE of the job is admitted: it sets `suspend: false` a
    minute later; the operator makes a Pending PodGroup, Volcano admits it (its queue holds nothing for
    a suspended job), the operator creates the pods, and the autoscaler packs them onto the same idle
    nodes before it looks for unneeded ones (filterOutSchedulableByPacking, kubernetes/autoscaler:
    cluster-autoscaler/core/podlistprocessor/filter_out_schedulable.go@cluster-autoscaler-1.35.2). The
    deadline counts from the members' creationTimestamp (decide), so its clock starts again: the nodes
    EC2 half-delivered are held for as long as the team repeats it."""
    old = _job()
    old["metadata"]["annotations"] = {gang_deadline.GAVE_BACK: _iso(NOW)}
    old["spec"]["runPolicy"]["suspend"] = True
    job = copy.deepcopy(old)
    job["spec"]["runPolicy"]["suspend"] = False
    if annotation == "removed":
        del job["metadata"]["annotations"]
    assert denied_by(job, operation="UPDATE", old=old, user=ATTACKER) != []


# --- 3. a job deleted, its gang left behind -----------------------------------------------------------


def _matches(rule: dict, group: str, resource: str, operation: str) -> bool:
    return (
        any(g in ("*", group) for g in rule.get("apiGroups", []))
        and any(r in ("*", resource) for r in rule.get("resources", []))
        and any(o in ("*", operation) for o in rule.get("operations", []))
    )


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, and matchExpressions with In/NotIn/Exists/DoesNotExist)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        value, op = labels.get(e["key"]), e["operator"]
        ok = {
            "Exists": value is not None,
            "DoesNotExist": value is None,
            "In": value in e.get("values", []),
            "NotIn": value not in e.get("values", []),
        }[op]
        if not ok:
            return False
    return True


def _refused_in_team_namespace(group: str, resource: str, operation: str, options: dict) -> bool:
    """Whether any ValidatingAdmissionPolicy of the prod plan that is bound to team vision's namespace
    and matches the request refuses it (a DELETE: `object` null, `request.options` its DeleteOptions)."""
    plan = plan_of("prod")
    labels = tenancy.namespace(VISION, "1.35")["metadata"]["labels"] | {tenancy.NAMESPACE_NAME_LABEL: VISION.name}
    policies = {p.inputs["metadata"]["name"]: p.inputs for p in plan.of_type(VAP)}
    for binding in plan.of_type(BINDING):
        spec = binding.inputs["spec"]
        policy = policies.get(spec["policyName"])
        selector = spec.get("matchResources", {}).get("namespaceSelector", {})
        if policy is None or "Deny" not in spec.get("validationActions", []) or not _selects(selector, labels):
            continue
        if not any(
            _matches(r, group, resource, operation) for r in policy["spec"]["matchConstraints"]["resourceRules"]
        ):
            continue
        if any(
            not ok
            for _, ok in verdicts(
                policy, None, operation=operation, user=ATTACKER, options=options, resource=(group, resource)
            )
        ):
            return True
    return False


def test_a_kubeflow_job_may_not_be_deleted_leaving_its_gang_behind():
    """`kubectl delete pytorchjob train --cascade=orphan` (DeleteOptions propagationPolicy Orphan, which
    `delete` on the job allows): the garbage collector removes the job's ownerReference from its
    PodGroup and pods and deletes neither (orphanDependents patches the owner's reference out of each
    dependent: kubernetes/kubernetes:pkg/controller/garbagecollector/garbagecollector.go, read through
    the code search, its ref not pinned here), and no controller is left to end them: the operator
    ignores a job it cannot get (`client.IgnoreNotFound`, kubeflow/trainer:pkg/controller.v1/pytorch/
    pytorchjob_controller.go@v1.9.4 Reconcile). An Inqueue PodGroup keeps its phase (getPodGroupPhase,
    volcano-sh/volcano:pkg/scheduler/framework/session.go@v1.15.1), its pending pods keep the idle nodes
    EC2 half-delivered (the autoscaler packs them there), and the gang deadline passes over a PodGroup
    that no Kubeflow job owns (`_owner_job` None: images/training/gang_deadline.py decide) and has no job
    to suspend anyway: the nodes stay until the team deletes the pods. Running pods outlive the job's
    activeDeadlineSeconds and backoffLimit the same way."""
    resource = KUBEFLOW_JOB_KINDS["PyTorchJob"]
    assert _refused_in_team_namespace(KUBEFLOW_GROUP, resource, "DELETE", {"propagationPolicy": "Orphan"})


# --- 4. a gang with a finished member ------------------------------------------------------------------


def test_a_gang_with_a_finished_member_on_a_node_is_still_given_back():
    """decide() leaves alone every gang with a member that has a nodeName, finished or not. A finished
    pod (Succeeded, Failed) keeps spec.nodeName but holds nothing: Volcano drops a terminated task from
    its node (addTask's `!isTerminated`, volcano-sh/volcano:pkg/scheduler/cache/event_handlers.go@v1.15.1)
    and the autoscaler lists no pod in those phases. A team gets one into an Inqueue gang:

    - cleanPodPolicy Running keeps a finished job's Succeeded and Failed pods (DeletePodsAndServices,
      kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4); the job is deleted with
      propagationPolicy Orphan (test above) and a job of the same name submitted: its PodGroup has the
      old pods' group name (`scheduling.k8s.io/group-name` is the job's name, DecoratePodTemplateSpec,
      pkg/controller.v1/control/podgroup_control.go@v1.9.4) and the operator adopts them (GetPodsForJob
      claims orphans matching its labels), leaving that replica index Succeeded and never re-created
      (ReconcilePods, pkg/controller.v1/common/pod.go@v1.9.4);
    - or a finalizer the team puts on one of its pods (no rule refuses it on a pod UPDATE): the
      operator's delete of a Failed replica leaves it Terminating, and ReconcilePods sees the index
      taken and creates no replacement.

    Either way the gang waits for nodes that will not come with a finished, bound-looking member, and
    the nodes EC2 did deliver are never given back."""
    finished = _pod("train-worker-3", DEADLINE + 600, node="ip-10-0-0-7")
    finished["status"] = {"phase": "Succeeded"}
    waiting = [_pod("train-master-0", DEADLINE + 60), _pod("train-worker-0", DEADLINE + 60)]
    (action,) = _decide([*waiting, finished])
    assert (action.verb, action.name) == ("suspend", "train")


# --- 5. a gang of a plain workload ---------------------------------------------------------------------


def test_a_plain_jobs_gang_holding_idle_nodes_past_the_deadline_is_given_back():
    """A batch Job of `volcano` (the team policy admits one: a GPU pod of a serving or evaluation class,
    tenancy.plain_gpu_validations) with `scheduling.k8s.io/group-min-member` at its parallelism is a gang:
    Volcano's controller makes its PodGroup, owned by the Job (newPGOwnerReferences, volcano-sh/volcano:
    pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1). Its pods exist before Volcano admits
    anything, so the autoscaler buys nodes for all of them; when EC2 delivers part, the gang never binds
    and the delivered nodes idle. decide() only suspends a PodGroup a Kubeflow job owns (`_owner_job`),
    so these are held for as long as the Job exists, up to the team's plain-gpu quota (its whole GPU
    quota: components/teams.py plain_gpu_quota) in idle nodes. A batch Job has spec.suspend (syncJob's
    `jobSuspended` branch then deletes its active pods: kubernetes/kubernetes:pkg/controller/job/
    job_controller.go, read through the code search, its ref not pinned here)."""
    pg = _podgroup()
    pg["metadata"]["name"] = "podgroup-1f2e"
    pg["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "1f2e", "controller": True}
    ]
    pods = [_pod(f"train-{i}", DEADLINE + 60) for i in range(2)]
    for pod in pods:
        pod["metadata"]["annotations"] = {gang_deadline.GROUP_ANNOTATION: "podgroup-1f2e"}
    job = {"kind": "Job", "metadata": {"name": "train", "namespace": "llm"}, "spec": {}}
    job["metadata"]["annotations"] = {gang_deadline.WAITING_SINCE: _iso(NOW - timedelta(seconds=DEADLINE + 60))}
    actions = gang_deadline.decide([pg], pods, [IDLE_NODE], [job], {"h100": DEADLINE}, 1800, NOW)
    assert [(a.verb, a.kind, a.name) for a in actions] == [("suspend", "Job", "train")]


# --- beside each fix: what stays admitted, and the paths next to it -----------------------------------

SUSPENDED = "a job the gang deadline suspended"
ORPHAN_FINALIZER = "a Kubeflow job or Job gets no finalizer"
HANDED_AWAY = "spec.runPolicy.managedBy is unset"


def _refused_with(message: str, obj: dict, **request) -> bool:
    return any(m.startswith(message) for m in denied_by(obj, **request))


def _suspended_by_the_deadline(job: dict) -> dict:
    job = copy.deepcopy(job)
    job["metadata"]["annotations"] = {GAVE_BACK_ANNOTATION: _iso(NOW)}
    if job["kind"] == "Job":
        job["spec"]["suspend"] = True
    else:
        job["spec"]["runPolicy"]["suspend"] = True
    return job


def _batch_job() -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "eval", "namespace": "vision"},
        "spec": {
            "parallelism": 2,
            "template": {"spec": _job()["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]},
        },
    }


def test_a_job_created_with_the_operator_as_its_manager_is_admitted():
    job = _job()
    job["spec"]["runPolicy"]["managedBy"] = KUBEFLOW_MANAGER
    assert not _refused_with(HANDED_AWAY, job, user=ATTACKER)


def test_a_job_may_not_be_created_for_another_controller():
    job = _job()
    job["spec"]["runPolicy"]["managedBy"] = MULTIKUEUE
    assert _refused_with(HANDED_AWAY, job, user=ATTACKER)


def test_the_gang_deadline_resumes_the_job_it_suspended():
    old = _suspended_by_the_deadline(_job())
    job = copy.deepcopy(old)
    job["spec"]["runPolicy"]["suspend"] = False
    del job["metadata"]["annotations"]
    assert not _refused_with(SUSPENDED, job, operation="UPDATE", old=old, user=component.USER)


def test_a_team_resumes_a_job_it_suspended_itself():
    old = _job()
    old["spec"]["runPolicy"]["suspend"] = True
    job = copy.deepcopy(old)
    job["spec"]["runPolicy"]["suspend"] = False
    assert not _refused_with(SUSPENDED, job, operation="UPDATE", old=old, user=ATTACKER)


def test_a_team_changes_a_job_the_deadline_suspended_while_it_stays_suspended():
    old = _suspended_by_the_deadline(_job())
    job = copy.deepcopy(old)
    job["metadata"]["labels"] = {"experiment": "b"}
    assert not _refused_with(SUSPENDED, job, operation="UPDATE", old=old, user=ATTACKER)


def test_a_plain_job_the_gang_deadline_suspended_is_not_resumed_by_its_team():
    old = _suspended_by_the_deadline(_batch_job())
    job = copy.deepcopy(old)
    job["spec"]["suspend"] = False
    assert _refused_with(SUSPENDED, job, operation="UPDATE", old=old, user=ATTACKER)


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_kubeflow_job_may_not_carry_the_orphan_finalizer(operation):
    """A plain DELETE of an object with the `orphan` finalizer orphans its dependents as
    propagationPolicy Orphan does."""
    job = _job()
    job["metadata"]["finalizers"] = ["orphan"]
    assert _refused_with(ORPHAN_FINALIZER, job, operation=operation, old=_job(), user=ATTACKER)


@pytest.mark.parametrize(
    "options", [{}, {"propagationPolicy": "Background"}, {"propagationPolicy": "Foreground"}], ids=str
)
def test_a_kubeflow_job_deleted_with_its_pods_is_admitted(options):
    resource = KUBEFLOW_JOB_KINDS["PyTorchJob"]
    assert not _refused_in_team_namespace(KUBEFLOW_GROUP, resource, "DELETE", options)


def test_a_kubeflow_job_may_not_be_deleted_with_the_older_orphan_dependents():
    resource = KUBEFLOW_JOB_KINDS["TFJob"]
    assert _refused_in_team_namespace(KUBEFLOW_GROUP, resource, "DELETE", {"orphanDependents": True})


def test_a_plain_job_may_not_be_deleted_leaving_its_gang_behind():
    """A batch Job's gang is Volcano's PodGroup owned by the Job: orphaned with its pods, it is no job's
    the gang deadline can suspend."""
    assert _refused_in_team_namespace("batch", "jobs", "DELETE", {"propagationPolicy": "Orphan"})


@pytest.mark.parametrize("verb", ["suspend", "resume"])
@pytest.mark.parametrize("stack", STACKS)
def test_the_gang_deadlines_patch_of_every_rendered_job_is_admitted_by_its_team_policy(stack, verb):
    """The CronJob's merge patch applied to each example job as the API server would (an UPDATE of the
    whole object, by the CronJob's account): refused, the gang would keep its idle nodes."""
    cfg = plan_of(stack).config
    team = cfg.scheduler.teams[0]
    rules = rules_of(team, cfg.scheduler.priority_classes, pools=cfg.gpu_pools)
    for example in jobs.examples_for(cfg):
        job = jobs.workload_of(jobs.render(example, cfg, team=team.name))
        if job["kind"] == "Deployment":
            continue  # a Deployment's gang is at most one pod: nothing to give back
        action = gang_deadline.Action("suspend", team.name, job["kind"], job["metadata"]["name"], "")
        old = _merge(job, gang_deadline.patch_for(action, NOW)) if verb == "resume" else job
        new = _merge(old, gang_deadline.patch_for(dataclasses.replace(action, verb=verb), NOW))
        assert denied_by(new, rules, operation="UPDATE", old=old, user=component.USER) == [], example


def _merge(obj: dict, patch: dict) -> dict:
    """A JSON merge patch (RFC 7386): null removes a key."""
    merged = copy.deepcopy(obj)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged

"""Pods that hold GPUs outside every queue (red team, round 7's second attack).

Volcano counts a queue's share from its tasks that are Bound, Binding, Running or Allocated
(AllocatedStatus, volcano-sh/volcano:pkg/scheduler/api/helpers.go@v1.15.1). Three ways a team's pods
kept their GPUs while counting in no queue, so that the team's next gangs were admitted into GPUs it
already held:

- a finished job's pods: under `cleanPodPolicy: None`, every kind's default, the operator deletes the
  job's PodGroup and keeps its pods running (CleanUpResources, kubeflow/trainer:pkg/controller.v1/
  common/job.go@v1.9.4): a job ended by `activeDeadlineSeconds`, or by a Master that exits first;
- a pod being deleted: it is Releasing until its grace period ends, and the grace was the team's to
  choose, in the pod's spec or in the DELETE or eviction that ends it;
- gated pods: Volcano deducts a pod with schedulingGates from its gang's share (DeductSchGatedResources,
  pkg/scheduler/api/job_info.go@v1.15.1), so any number of gated gangs were Inqueue at once.

Each rule is evaluated through cel-expr-python on the object the API server would hand it.
"""

from __future__ import annotations

import copy

import pytest

from components import tenancy
from components.tenancy import OPERATOR_USER
from tests.security.test_tenancy import VISION, _job, _pod, denied_by, verdicts

GRACE = VISION.grace_seconds  # higgsfield:checkpoints.terminationGracePeriod's default: 720 s


def _deployment(**spec_changes) -> dict:
    pod = _pod(**spec_changes)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "vision"},
        "spec": {"replicas": 1, "template": {"metadata": {}, "spec": pod["spec"]}},
    }


def _guard_refuses(obj: dict | None, operation: str, options: dict | None = None) -> bool:
    guard = tenancy.pod_release_guard(GRACE)
    return any(not ok for _, ok in verdicts(guard, obj, operation=operation, options=options))


# --- a finished job's pods --------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [None, "None"], ids=["unset", "None"])
def test_a_job_that_would_keep_its_pods_once_finished_is_refused(policy):
    job = _job()
    if policy is None:
        del job["spec"]["runPolicy"]["cleanPodPolicy"]
    else:
        job["spec"]["runPolicy"]["cleanPodPolicy"] = policy
    assert any("cleanPodPolicy" in m for m in denied_by(job))


@pytest.mark.parametrize("policy", ["Running", "All"])
def test_a_job_whose_pods_end_with_it_is_admitted(policy):
    job = _job()
    job["spec"]["runPolicy"]["cleanPodPolicy"] = policy
    assert denied_by(job) == []


def test_a_running_job_may_not_be_changed_to_keep_its_pods():
    old = _job()
    job = copy.deepcopy(old)
    job["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    assert any("cleanPodPolicy" in m for m in denied_by(job, operation="UPDATE", old=old))


def test_an_mpijob_is_judged_by_its_run_policy_which_wins_over_its_older_field():
    job = _job()
    job["kind"] = "MPIJob"
    job["metadata"]["name"] = "mpi-j"
    job["spec"]["mpiReplicaSpecs"] = job["spec"].pop("pytorchReplicaSpecs")
    del job["spec"]["runPolicy"]["cleanPodPolicy"]
    job["spec"]["cleanPodPolicy"] = "Running"
    assert any("cleanPodPolicy" in m for m in denied_by(job))


def test_the_operators_own_update_of_an_older_job_is_not_refused():
    old = _job()
    del old["spec"]["runPolicy"]["cleanPodPolicy"]
    assert not any(
        "cleanPodPolicy" in m for m in denied_by(copy.deepcopy(old), operation="UPDATE", old=old, user=OPERATOR_USER)
    )


# --- the grace of a pod that is stopping -------------------------------------------------------------


@pytest.mark.parametrize("make", [_pod, _job, _deployment], ids=["pod", "kubeflow-job", "deployment"])
def test_a_grace_period_past_the_checkpoint_grace_is_refused(make):
    assert any("terminationGracePeriodSeconds" in m for m in denied_by(make(terminationGracePeriodSeconds=GRACE + 1)))


@pytest.mark.parametrize("make", [_pod, _job, _deployment], ids=["pod", "kubeflow-job", "deployment"])
def test_the_checkpoint_grace_itself_is_admitted(make):
    assert denied_by(make(terminationGracePeriodSeconds=GRACE)) == []


def test_the_cap_is_the_stacks_checkpoint_grace():
    team = tenancy.TeamRules(**{**VISION.__dict__, "grace_seconds": 1800})
    assert denied_by(_pod(terminationGracePeriodSeconds=1800), team) == []
    assert denied_by(_pod(terminationGracePeriodSeconds=1801), team) != []


def test_a_delete_with_a_longer_grace_than_the_checkpoint_grace_is_refused():
    assert _guard_refuses(None, "DELETE", {"gracePeriodSeconds": 86400})


@pytest.mark.parametrize("options", [{}, {"gracePeriodSeconds": 0}, {"gracePeriodSeconds": GRACE}])
def test_a_delete_within_the_grace_is_admitted(options):
    assert not _guard_refuses(None, "DELETE", options)


def test_an_eviction_with_a_longer_grace_than_the_checkpoint_grace_is_refused():
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "vision"},
        "deleteOptions": {"gracePeriodSeconds": 86400},
    }
    assert _guard_refuses(eviction, "CREATE")


def test_an_eviction_without_its_own_grace_is_admitted():
    assert not _guard_refuses({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}}, "CREATE")


def test_the_guard_is_bound_to_every_team_namespace_and_deletes_and_evictions_of_pods_and_jobs():
    guard = tenancy.pod_release_guard(GRACE)
    rules = guard["spec"]["matchConstraints"]["resourceRules"]
    matched = {(resource, r["operations"][0]) for r in rules for resource in r["resources"]}
    assert {("pods", "DELETE"), ("pods/eviction", "CREATE"), ("pytorchjobs", "DELETE")} <= matched
    binding = tenancy.in_every_team_namespace(tenancy.POD_RELEASE_GUARD)["spec"]
    assert binding["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": tenancy.TEAM_LABEL, "operator": "Exists"}
    ]


# --- scheduling gates ----------------------------------------------------------------------------


GATES = [{"name": "example.com/hold"}]


@pytest.mark.parametrize("make", [_pod, _job, _deployment], ids=["pod", "kubeflow-job", "deployment"])
def test_a_gated_pod_or_template_is_refused(make):
    assert any("schedulingGates" in m for m in denied_by(make(schedulingGates=GATES)))


def test_lifting_a_pods_gates_is_not_refused_by_this_rule():
    old = _pod(schedulingGates=GATES)
    assert not any("schedulingGates" in m for m in denied_by(_pod(), operation="UPDATE", old=old))


# --- replicas that would be refused as pods, and resources the gang does not count -----------------


def test_a_job_whose_replicas_name_another_scheduler_is_refused():
    assert any("remove schedulerName" in m for m in denied_by(_job(schedulerName="default-scheduler")))


def test_a_job_whose_replicas_name_volcano_is_admitted():
    assert denied_by(_job(schedulerName="volcano")) == []


def _with_init(job: dict, container: dict) -> dict:
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        resources = spec["containers"][0]["resources"]
        resources["requests"] = {**resources["limits"], "cpu": "8", "memory": "64Gi"}
        spec["initContainers"] = [copy.deepcopy(container)]
    return job


INIT = {"name": "fetch", "image": "x", "securityContext": {"allowPrivilegeEscalation": False}}
COUNTED = "ask for resources in their containers"


def test_a_jobs_sidecar_is_refused():
    sidecar = {**INIT, "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    assert any(COUNTED in m for m in denied_by(_with_init(_job(), sidecar)))


def test_a_jobs_init_container_asking_more_than_its_containers_is_refused():
    init = {**INIT, "resources": {"requests": {"cpu": "1", "memory": "512Gi"}}}
    assert any(COUNTED in m for m in denied_by(_with_init(_job(), init)))


def test_a_jobs_init_container_within_its_containers_is_admitted():
    init = {**INIT, "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}
    assert denied_by(_with_init(_job(), init)) == []


def test_a_jobs_pod_level_resources_are_refused():
    assert any(COUNTED in m for m in denied_by(_job(resources={"requests": {"cpu": "96", "memory": "1Ti"}})))


# --- finalizers -------------------------------------------------------------------------------------

FINALIZER = "example.com/keep"


def _with_template_finalizer(job: dict) -> dict:
    job = copy.deepcopy(job)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"].setdefault("metadata", {})["finalizers"] = [FINALIZER]
    return job


def test_a_finalizer_in_a_jobs_templates_is_refused():
    """The operator (and the Job controller) copy a template's finalizers onto the pods: deleted, suspended or given
    back, such a pod would stay Terminating, counted on its node in no queue, for as long as the finalizer stays."""
    assert any("finalizers" in m for m in denied_by(_with_template_finalizer(_job())))


def test_a_team_adding_a_finalizer_to_its_pod_is_refused():
    pod = _pod()
    held = copy.deepcopy(pod)
    held["metadata"]["finalizers"] = [FINALIZER]
    assert any("finalizers" in m for m in denied_by(held, operation="UPDATE", old=pod))


def test_a_team_creating_a_pod_with_the_job_controllers_finalizer_is_refused():
    """No controller would count such a pod, so none would remove its finalizer."""
    pod = _pod()
    pod["metadata"]["finalizers"] = [tenancy.JOB_TRACKING_FINALIZER]
    assert any("finalizers" in m for m in denied_by(pod))


@pytest.mark.parametrize("user", tenancy.JOB_CONTROLLER_USERS)
def test_the_job_controller_makes_its_pods_with_its_tracking_finalizer(user):
    pod = _pod()
    pod["metadata"]["finalizers"] = [tenancy.JOB_TRACKING_FINALIZER]
    assert not any("finalizers" in m for m in denied_by(pod, user=user))


def test_removing_a_pods_finalizer_is_admitted():
    pod = _pod()
    pod["metadata"]["finalizers"] = [tenancy.JOB_TRACKING_FINALIZER]
    done = copy.deepcopy(pod)
    done["metadata"]["finalizers"] = []
    assert not any("finalizers" in m for m in denied_by(done, operation="UPDATE", old=pod))

"""What a team could keep counted on the GPU nodes, or keep from the autoscaler, once the platform refused its
finalizers (red team, round 9, after "no finalizers on a team's pods").

- A DaemonSet object alone: the Cluster Autoscaler puts a pod of every DaemonSet that should run on a node into
  the template node of a group it scales up from zero (podsExpectedOnFreshNode with forceDaemonSets, simulator/
  node_info_utils.go, and NodeShouldRunDaemonPod, utils/daemonset/daemonset.go: taints and node affinity, never
  room; kubernetes/autoscaler@cluster-autoscaler-1.35.2), and Karpenter counts the requests of every DaemonSet
  compatible with a NodePool, from its template where it has no pod, as overhead on each node it plans
  (getDaemonSetPods, pkg/controllers/provisioning/provisioner.go; getDaemonOverhead, pkg/controllers/
  provisioning/scheduling/scheduler.go; kubernetes-sigs/karpenter, read through the code search). A team's
  DaemonSet that tolerates the GPU taint and asks for GPUs made every new GPU node look taken: no gang asking a
  node's GPUs fit one, so no pool at zero was scaled up for any team, though the DaemonSet's own pods are refused
  (the DaemonSet controller pins each to its node by a matchFields affinity, which the packing rule refuses).
- A pod held by its dependents: a pod deleted with propagationPolicy Foreground gets the `foregroundDeletion`
  finalizer, which the garbage collector removes only once no dependent with blockOwnerDeletion is left
  (processDeletingDependentsItem, kubernetes/kubernetes:pkg/controller/garbagecollector/garbagecollector.go, read
  through the code search); a pod with such dependents is itself deleted in Foreground when its job is
  (attemptToDeleteItem, same file). A ConfigMap of the team's, with a finalizer of its own and an owner reference
  blocking the pod's deletion, kept the pod, a finalizer on it that no controller removes, past the refused
  finalizers. EKS enables no OwnerReferencesPermissionEnforcement (the user guide's platform-versions page), so
  anyone who may create a ConfigMap may set blockOwnerDeletion.
- A pod out of its controller's sight: the Training Operator lists a job's pods by their labels and deletes only
  those when the job is suspended or ends, deleting its PodGroup; the Job, ReplicaSet and StatefulSet controllers
  release a pod whose labels stop matching. A team relabelling its running pod kept it, GPUs and node, after the gang
  deadline suspended its job, in no queue, or bare, a pod the Cluster Autoscaler never moves off its node.
- A workload deleted without its pods: a ReplicaSet, StatefulSet, DaemonSet or ReplicationController deleted with
  propagationPolicy Orphan (a ReplicationController without any policy) left its pods bare, as above.

Each rule is evaluated through cel-expr-python on the object the API server would hand it.
"""

from __future__ import annotations

import copy

import pytest

from components import tenancy
from components.tenancy import OPERATOR_USER, VOLCANO_CONTROLLER_USER
from tests.conftest import plan_of
from tests.security.test_tenancy import VISION, _pod, denied_by, verdicts
from tests.security.test_tenant_attacks import GPU_TOLERATION, edit_allows

# --- a DaemonSet counted on every GPU node the autoscalers plan ------------------------------------


def _daemonset(pod: dict) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "d", "namespace": "vision"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": pod["spec"]},
        },
    }


def _on_gpu_nodes(pod: dict) -> dict:
    pod["spec"]["tolerations"] = [GPU_TOLERATION]
    pod["spec"]["nodeSelector"] = {"higgsfield.io/pool": "h100"}
    return pod


def _without_gpus(pod: dict) -> dict:
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    return pod


def _taking_gpu_nodes(messages: list[str]) -> bool:
    return any("DaemonSet" in m and "GPU node" in m for m in messages)


def test_a_daemonset_asking_for_a_nodes_gpus_on_the_gpu_nodes_is_refused():
    """Every node the autoscalers would plan for the pool would hold its 8 GPUs already: no gang fits one."""
    assert _taking_gpu_nodes(denied_by(_daemonset(_on_gpu_nodes(_pod()))))


def test_a_daemonset_tolerating_the_gpu_taint_without_gpus_is_refused():
    """Its CPU and memory sit on every planned GPU node too, up to a GPU's share of each."""
    assert _taking_gpu_nodes(denied_by(_daemonset(_on_gpu_nodes(_without_gpus(_pod())))))


def test_a_daemonset_asking_efa_without_the_gpu_toleration_is_refused():
    pod = _without_gpus(_pod())
    pod["spec"]["containers"][0]["resources"]["limits"] = {"vpc.amazonaws.com/efa": 32}
    assert _taking_gpu_nodes(denied_by(_daemonset(pod)))


# --- a pod kept by a dependent that blocks its deletion -------------------------------------------

POD_REF = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-pod", "blockOwnerDeletion": True}


def _configmap(ref: dict | None = None) -> dict:
    meta: dict = {"name": "hold", "namespace": "vision", "finalizers": ["example.com/keep"]}
    if ref is not None:
        meta["ownerReferences"] = [ref]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


def _refused(obj: dict, operation: str = "CREATE", old: dict | None = None, user: str | None = None) -> bool:
    return any(
        not ok for _, ok in verdicts(tenancy.pod_dependents_guard(), obj, operation=operation, old=old, user=user)
    )


def test_a_team_object_blocking_the_deletion_of_a_pod_is_refused():
    """The rest of the route is the team's: AmazonEKSEditPolicy creates ConfigMaps, and the pod-release guard
    admits a pod's DELETE in the Foreground."""
    assert edit_allows("", "configmaps", "vision", "create")
    release = tenancy.pod_release_guard(VISION.grace_seconds)
    assert all(ok for _, ok in verdicts(release, None, operation="DELETE", options={"propagationPolicy": "Foreground"}))
    assert _refused(_configmap(POD_REF))


@pytest.mark.parametrize("kind", ["pod", "POD"])
def test_a_blocking_reference_to_a_pod_is_refused_whatever_the_case_of_its_kind(kind):
    assert _refused(_configmap({**POD_REF, "kind": kind}))


def test_an_update_that_makes_an_object_block_a_pods_deletion_is_refused():
    old = _configmap({**POD_REF, "blockOwnerDeletion": False})
    assert _refused(_configmap(POD_REF), operation="UPDATE", old=old)


def test_a_reference_to_a_pod_that_does_not_block_its_deletion_is_admitted():
    """The garbage collector still deletes such a dependent after its pod; it holds the pod nowhere."""
    assert not _refused(_configmap({**POD_REF, "blockOwnerDeletion": False}))


def test_a_job_made_from_a_cronjob_with_kubectl_still_blocks_its_cronjob():
    """`kubectl create job --from=cronjob/...` makes the Job with a controller reference that blocks its CronJob's
    deletion (NewControllerRef): only a pod's blocking dependents are refused."""
    ref = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "c", "uid": "u-c", "blockOwnerDeletion": True}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "vision"}}
    job["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
    assert not _refused(job)


@pytest.mark.parametrize(
    "user",
    [VOLCANO_CONTROLLER_USER, OPERATOR_USER, f"{tenancy.CONTROLLER_USERS}generic-garbage-collector"],
    ids=["volcano", "operator", "kube-controller-manager"],
)
def test_the_platforms_controllers_may_make_a_pods_dependents(user):
    """Volcano's controller makes the PodGroup of a pod no controller owns with a controller reference to the
    pod (NewControllerRef blocks the owner's deletion: buildPodGroupFromPod, volcano-sh/volcano:pkg/controllers/
    podgroup/pg_controller_handler.go@v1.15.1); it sets no finalizer on it, and no team may write PodGroups."""
    group = copy.deepcopy(_configmap({**POD_REF, "controller": True}))
    group.update(apiVersion="scheduling.volcano.sh/v1beta1", kind="PodGroup")
    del group["metadata"]["finalizers"]
    assert not _refused(group, user=user)


def test_every_stack_with_teams_binds_the_dependents_guard_to_every_team_namespace():
    plan = plan_of("prod")
    names = {
        r.inputs["metadata"]["name"]
        for t in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        for r in plan.of_type(f"kubernetes:admissionregistration.k8s.io/v1:{t}")
    }
    assert tenancy.POD_DEPENDENTS_GUARD in names
    rules = tenancy.pod_dependents_guard()["spec"]["matchConstraints"]["resourceRules"]
    assert any(r["resources"] == ["*"] and set(r["operations"]) == {"CREATE", "UPDATE"} for r in rules)


# --- a pod taken out of its controller's sight ----------------------------------------------------

OWNERS = {
    "PyTorchJob": ("kubeflow.org/v1", {"training.kubeflow.org/job-name": "j"}),
    "Job": ("batch/v1", {"batch.kubernetes.io/controller-uid": "u-owner"}),
    "ReplicaSet": ("apps/v1", {"app": "w"}),
}


def _owned_pod(kind: str) -> dict:
    api_version, labels = OWNERS[kind]
    pod = _pod()
    pod["metadata"]["labels"] = dict(labels)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "w", "uid": "u-owner", "controller": True}
    ]
    return pod


@pytest.mark.parametrize("kind", sorted(OWNERS))
def test_a_team_relabelling_a_pod_its_controller_owns_is_refused(kind):
    """The operator would no longer list it (neither deleted on suspension nor at the end, its PodGroup deleted);
    the Job and ReplicaSet controllers would release it, a pod of no controller on its node for good."""
    old = _owned_pod(kind)
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"kept": "mine"}
    assert any("keeps its labels" in m for m in denied_by(relabelled, operation="UPDATE", old=old, user="alice@vision"))


# --- a workload deleted without its pods ----------------------------------------------------------

BARE_MAKERS = [
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("", "replicationcontrollers"),
]


def _release_guard_refuses(resource: tuple[str, str], options: dict) -> bool:
    guard = tenancy.pod_release_guard(VISION.grace_seconds)
    group, plural = resource
    matched = any(
        group in r["apiGroups"] and plural in r["resources"] and "DELETE" in r["operations"]
        for r in guard["spec"]["matchConstraints"]["resourceRules"]
    )
    verdict = verdicts(guard, None, operation="DELETE", options=options, resource=resource)
    return matched and any(not ok for _, ok in verdict)


@pytest.mark.parametrize("resource", BARE_MAKERS, ids=[r for _, r in BARE_MAKERS])
def test_a_workload_deleted_leaving_its_pods_is_refused(resource):
    """The garbage collector takes the controller reference off each orphaned pod, and the autoscaler never removes
    the node of a pod with no controller."""
    assert _release_guard_refuses(resource, {"propagationPolicy": "Orphan"})


def test_a_replication_controller_deleted_without_a_propagation_policy_is_refused():
    """A core/v1 ReplicationController orphans its pods unless the DELETE names a policy
    (rcStrategy.DefaultGarbageCollectionPolicy, kubernetes/kubernetes:pkg/registry/core/replicationcontroller/
    strategy.go, read through the code search)."""
    assert _release_guard_refuses(("", "replicationcontrollers"), {})

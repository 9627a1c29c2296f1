"""What a deploy that deletes a Karpenter pool's NodePool does to the pool's nodes and the jobs on them.

`higgsfield diff` prints these lines under the removed NodePool (a pool taken out of the stack file, or moved to
a node group), so that a team reads what happens to its running gangs before anything is deleted. What they
rest on, read at the pinned refs (docs/karpenter.md, "Removing a pool", says it for people); for Pulumi at the
newest tags the mirrors hold, v4.32.0 and v3.259.0 (4.34.2 and the CLI 3.272.0 are pinned: not read):

- pulumi-kubernetes deletes an object with foreground propagation unless the object's
  `pulumi.com/deletionPropagationPolicy` says otherwise, then waits for it to be gone, 10 minutes unless a custom
  timeout or `pulumi.com/timeoutSeconds` says otherwise; `pulumi.com/skipAwait` does not skip that wait for a
  custom resource (Deletion, pulumi/pulumi-kubernetes:provider/pkg/await/await.go@v4.32.0; DeletionPropagation,
  TimeoutDuration, DeletedCondition, provider/pkg/metadata/overrides.go). Past the timeout the delete fails, the
  object stays in the state, and the warning says "finalizers might be preventing deletion"
  (provider/pkg/await/condition/deleted.go). components/karpenter.py sets none of these on its objects.
- The engine deletes a resource only after everything that depends on it is gone (ScheduleDeletes,
  pulumi/pulumi:pkg/resource/deploy/step_generator.go@v3.259.0): the NodePool and the EC2NodeClass depend on
  neither each other, so they go together; an EFA pool's security group and placement group are inputs of the
  EC2NodeClass, so they go after it, and not at all in a deploy whose EC2NodeClass delete failed.
- Every NodeClaim is owned by its NodePool with blockOwnerDeletion (nodeclaimtemplate.go, kubernetes-sigs/
  karpenter:pkg/controllers/provisioning/scheduling@6e7eab7a0f48, the core v1.14.1 vendors), so a foreground
  delete of the NodePool lasts until its NodeClaims are gone (kubernetes.io/docs/concepts/architecture/
  garbage-collection, "Foreground cascading deletion"). A deleted NodeClaim keeps its `karpenter.sh/termination`
  finalizer until its node is drained and its instance terminated (pkg/controllers/nodeclaim/lifecycle/
  controller.go, pkg/controllers/node/termination/controller.go).
- The drain taints the node `karpenter.sh/disrupted:NoSchedule`, evicts what it may, and waits for a pod with
  `karpenter.sh/do-not-disrupt` until it ends (IsDrainable, IsEvictable, pkg/utils/pod/scheduling.go); with no
  `terminationGracePeriod` on the NodeClaim (ours have none: components/karpenter.py node_pool) nothing deletes
  such a pod (DeleteExpiringPods, pkg/controllers/node/termination/terminator/terminator.go).
- Karpenter launches nothing for a NodePool being deleted (pkg/controllers/provisioning/provisioner.go).
- The EC2NodeClass's `karpenter.k8s.aws/termination` finalizer waits while any NodeClaim refers to it, then
  deletes its instance profiles and launch templates (finalize, aws/karpenter-provider-aws:pkg/controllers/
  nodeclass/controller.go@v1.14.1).
- A rendered training job's failed rank is deleted and made again by the Training Operator (restartPolicy
  ExitCode, kubeflow/trainer:pkg/controller.v1/common/pod.go@v1.9.4).
"""

from __future__ import annotations

from infra.core.names import DO_NOT_DISRUPT, POOL_LABEL
from infra.offline.rolls import NODE_GROUP

NODEPOOL = "kubernetes:karpenter.sh/v1:NodePool"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
# pulumi-kubernetes' wait for a deleted object to go, with no custom timeout (Deletion, provider/pkg/await/
# await.go@v4.32.0: `timeout := 10 * time.Minute`)
DELETE_WAIT_MIN = 10
DISRUPTED_TAINT = "karpenter.sh/disrupted:NoSchedule"  # DisruptedNoScheduleTaint, pkg/apis/v1/taints.go@6e7eab7a0f48
NODEPOOL_LABEL = "karpenter.sh/nodepool"  # NodePoolLabelKey on every NodeClaim, pkg/apis/v1/labels.go@6e7eab7a0f48


def pool_of(resource: dict) -> str | None:
    """The pool of a NodePool (its template's labels) or of a node group (its labels)."""
    inputs = resource["inputs"]
    if resource["type"] == NODEPOOL:
        inputs = ((inputs.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return (inputs.get("labels") or {}).get(POOL_LABEL)


def template_spec(nodepool: dict) -> dict:
    """The spec of the nodes a NodePool launches (its `spec.template.spec`)."""
    return ((nodepool["inputs"].get("spec") or {}).get("template") or {}).get("spec") or {}


def node_class_of(nodepool: dict) -> str | None:
    """The name of the EC2NodeClass a NodePool launches its nodes from (its template's nodeClassRef)."""
    return (template_spec(nodepool).get("nodeClassRef") or {}).get("name")


def _node_class_uses_a_placement_group(before: dict[str, dict], nodepool: dict) -> bool:
    """Whether the NodePool's EC2NodeClass depends on a placement group (an EFA pool's fabric)."""
    return any(
        r["type"] == NODE_CLASS
        and (r["inputs"].get("metadata") or {}).get("name") == node_class_of(nodepool)
        and any(before.get(urn, {}).get("type") == PLACEMENT_GROUP for urn in r["dependencies"])
        for r in before.values()
    )


def consequences(before: dict[str, dict], after: dict[str, dict], nodepool: dict) -> list[str]:
    """What deleting `nodepool` (a resource of the base plan; both plans' resources by URN) does, one line each."""
    pool = pool_of(nodepool) or "?"
    name = (nodepool["inputs"].get("metadata") or {}).get("name", "?")
    moved = any(r["type"] == NODE_GROUP and pool_of(r) == pool for r in after.values())
    if moved:
        again = "a rank made again (a retried failure, a lost node) and new jobs go to the pool's node group"
    else:
        again = (
            f"a rank made again (a retried failure, a lost node) finds no node: the pool's nodes are tainted "
            f"{DISRUPTED_TAINT} and none is launched, so its gang cannot be whole again; jobs queued for {pool} "
            "never start"
        )
    fabric = (
        "; that deploy deletes the pool's EFA security group and placement group too, which wait for the EC2NodeClass"
        if _node_class_uses_a_placement_group(before, nodepool)
        else ""
    )
    return [
        f"pool {pool} (Karpenter NodePool {name}): the deploy deletes the NodePool and its EC2NodeClass; Karpenter "
        "launches no node for the pool from then on and drains each of its nodes: an idle one goes at once, serving "
        f"and evaluation pods are evicted, and a node running a training pod ({DO_NOT_DISRUPT}, no "
        "terminationGracePeriod) stays until that pod ends, however long",
        f"running work on {pool}: training jobs run on to their end on their nodes; {again}",
        f"`pulumi up` waits {DELETE_WAIT_MIN} min for the NodePool and the EC2NodeClass to go, then fails while a "
        "training pod still holds a node ('finalizers might be preventing deletion'); the drain goes on in the "
        f"cluster: run `pulumi up` again once the pool's jobs have ended{fabric}",
        f"to deploy without waiting: let the pool's training jobs end (or suspend them) first, or start the same "
        f"drain with `kubectl delete nodepool {name} --wait=false` and deploy once "
        f"`kubectl get nodeclaims -l {NODEPOOL_LABEL}={name}` lists none; "
        "`kubectl get pods -A --field-selector spec.nodeName=NODE` shows what still runs on a node",
    ]

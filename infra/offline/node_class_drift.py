"""What a change of a Karpenter pool's EC2NodeClass or NodePool does to the pool's nodes: `higgsfield diff` says it in
one line under the change, as it says what rolling a node group does (infra/offline/rolls.py).

Read at aws/karpenter-provider-aws@v1.14.1 and the core it vendors, kubernetes-sigs/karpenter@6e7eab7a0f48:
- Static drift: the nodeclass.hash controller writes the hash of the class's spec on it as
  `karpenter.k8s.aws/ec2nodeclass-hash` (pkg/controllers/nodeclass/hash/controller.go, EC2NodeClass.Hash in
  pkg/apis/v1/ec2nodeclass.go), every NodeClaim carries the hash of the class it was launched from, and one whose hash
  differs is drifted (NodeClassDrift: areStaticFieldsDrifted, pkg/cloudprovider/drift.go). Every spec field is
  hashed but those tagged `hash:"ignore"` (UNHASHED): user data, tags, block devices, the role, metadata options,
  network interfaces, the placement group, the instance store policy all drift every node (pkg/cloudprovider/
  suite_test.go, "should return drifted if a statically drifted EC2NodeClass.Spec field is updated": UserData,
  Tags, ...).
- Dynamic drift (RESOLVED): for those ignored fields Karpenter compares what the terms resolve to (the class's
  status) with each node: its AMI (isAMIDrifted), subnet (isSubnetDrifted), security groups
  (areSecurityGroupsDrifted) and capacity reservation (isCapacityReservationDrifted), in pkg/cloudprovider/drift.go.
  `ipPrefixCount` is neither: no node drifts; the class's metadata is not its spec.
- The NodePool (pkg/controllers/nodeclaim/disruption/drift.go, isDrifted): the nodepool.hash controller writes the
  hash of the NodePool's `spec.template` on it as `karpenter.sh/nodepool-hash` (pkg/controllers/nodepool/hash/
  controller.go, NodePool.Hash in pkg/apis/v1/nodepool.go) and every NodeClaim carries the hash of the template it was
  launched from; one whose hash differs is drifted (NodePoolDrifted, areStaticFieldsDrifted). The template's labels,
  annotations, taints, startupTaints, nodeClassRef, terminationGracePeriod and expireAfter are hashed (drift_test.go,
  "should detect drift on changes to the static fields"); its requirements are not (`hash:"ignore"`): a NodeClaim
  whose labels the NodePool's requirements no longer admit is drifted (RequirementsDrifted, areRequirementsDrifted:
  Requirements.Compatible in pkg/scheduling/requirements.go, each requirement's key on the labels and intersecting
  them; drift_test.go: a reduced or added requirement drifts, an expanded one does not). The rest of the spec
  (disruption, limits, weight, replicas) is outside the hash and checked against no node.
- A Drifted NodeClaim is disrupted by the core's Drift method (pkg/controllers/disruption/drift.go): the oldest
  first, one per command, within the NodePool's budgets for Drifted (GetAllowedDisruptionsByReason, pkg/apis/v1/
  nodepool.go: the least of the budgets that list Drifted or no reason; none such: no limit; the default budget of
  10% is there only when `budgets` is left out); a replacement is launched for the node's pods first and the node
  deleted once it is initialized (pkg/controllers/disruption/queue.go). A node with an active
  `karpenter.sh/do-not-disrupt` pod is no candidate unless its NodeClaim has a terminationGracePeriod (NewCandidate,
  pkg/controllers/disruption/types.go; ValidatePodsDisruptable, pkg/controllers/state/statenode.go); ours have none
  (components/karpenter.py node_pool), and rendered training pods carry the annotation.
"""

from __future__ import annotations

import json
from typing import Any

from infra.core.names import DO_NOT_DISRUPT
from infra.offline.crd_schemas import defaulted
from infra.offline.pool_removal import NODEPOOL, node_class_of, pool_of, template_spec

# What NodePool.Hash hashes (kubernetes-sigs/karpenter:pkg/apis/v1/nodepool.go@6e7eab7a0f48:
# `hashstructure.Hash(in.Spec.Template, ...)`) but the requirements it leaves out (`Requirements ... hash:"ignore"`),
# which areRequirementsDrifted compares with each NodeClaim's labels.
TEMPLATE = "spec.template"
REQUIREMENTS = "spec.template.spec.requirements"
# The spec fields EC2NodeClass.Hash leaves out (`hash:"ignore"` in pkg/apis/v1/ec2nodeclass.go@v1.14.1; amiFamily
# is hashed as the family its AMI alias resolves to, so with an alias, as components/karpenter.py writes, it is not)
# and, for those Karpenter checks against each node, what it compares.
UNHASHED = (
    "spec.subnetSelectorTerms",
    "spec.securityGroupSelectorTerms",
    "spec.capacityReservationSelectorTerms",
    "spec.ipPrefixCount",
    "spec.amiSelectorTerms",
    "spec.amiFamily",
)
RESOLVED = {
    "spec.amiSelectorTerms": "AMI",
    "spec.amiFamily": "AMI",
    "spec.subnetSelectorTerms": "subnet",
    "spec.securityGroupSelectorTerms": "security groups",
    "spec.capacityReservationSelectorTerms": "capacity reservation",
}
# Both hashes are hashstructure.Hash(..., FormatV2, &HashOptions{SlicesAsSets: true, IgnoreZeroValue: true,
# ZeroNil: true}) (NodePool.Hash, kubernetes-sigs/karpenter:pkg/apis/v1/nodepool.go@6e7eab7a0f48; EC2NodeClass.Hash,
# aws/karpenter-provider-aws:pkg/apis/v1/ec2nodeclass.go@v1.14.1) of the object the API server's JSON decodes to (its
# CRD's schema defaults filled in where the plan leaves a field out: _stored), and
# hashstructure (mitchellh/hashstructure:hashstructure.go@v2.0.2, the version karpenter's go.mod pins) hashes each
# slice's elements unordered (SlicesAsSets: XOR), skips a struct field whose reflect.Value.IsZero() (IgnoreZeroValue;
# a nil slice, map or pointer is zero, an empty one or a pointer to "" is not) and a map's entries unordered. So the
# hash does not see: a list's order; a null (it decodes as none); "", 0 or false of a field that is a Go string,
# integer or bool, no pointer, where they decode as none does (HASHED_SCALARS). It does see `[]` or `{}` against none,
# and "" against none where the field is a pointer (most of the EC2NodeClass's): those still drift.
# The fields of Go maps (HASHED_MAPS): their entries are data, so a null value is kept (it decodes as "").
HASHED_SCALARS = frozenset(
    # corev1.Taint's Key, Value, Effect (kubernetes/api:core/v1/types.go@v0.35.1, the version karpenter's go.mod
    # pins) and NodeClassReference's Kind, Name, Group (kubernetes-sigs/karpenter:pkg/apis/v1/nodeclaim.go@6e7eab7a0f48)
    [f"{TEMPLATE}.spec.{taints}.{key}" for taints in ("taints", "startupTaints") for key in ("key", "value", "effect")]
    + [f"{TEMPLATE}.spec.nodeClassRef.{key}" for key in ("group", "kind", "name")]
    # EC2NodeClassSpec.Role, BlockDeviceMapping.RootVolume, NetworkInterface's NetworkCardIndex, DeviceIndex and
    # InterfaceType (aws/karpenter-provider-aws:pkg/apis/v1/ec2nodeclass.go@v1.14.1); every other field it hashes is
    # a pointer, slice or map
    + ["spec.role", "spec.blockDeviceMappings.rootVolume"]
    + [f"spec.networkInterfaces.{key}" for key in ("networkCardIndex", "deviceIndex", "interfaceType")]
)
HASHED_MAPS = frozenset(
    [f"{TEMPLATE}.metadata.labels", f"{TEMPLATE}.metadata.annotations", "spec.tags"]
    + [f"spec.kubelet.{key}" for key in ("systemReserved", "kubeReserved", "evictionHard", "evictionSoft")]
    + ["spec.kubelet.evictionSoftGracePeriod"]
)
SAME_HASH = (
    "Karpenter's hash of it is the same: it hashes the object with the CRD's defaults filled in, takes each list as "
    "a set, and a null, or the empty value of a field that is no pointer, as none"
)
DRIFTED = "Drifted"  # the disruption reason a budget lists (DisruptionReasonDrifted, pkg/apis/v1/nodepool.go)
NO_DRIFT = "neither hashed nor checked against the nodes"  # why a changed field drifts no node


def _field(path: str) -> str | None:
    """The spec field a changed input path is under (`spec.tags.team` -> `spec.tags`), None outside the spec."""
    if not path.startswith("spec."):
        return None
    return "spec." + path.removeprefix("spec.").split(".")[0].split("[")[0]


def _template_field(path: str) -> str | None:
    """The NodePool template field a changed input path is under (`spec.template.spec.taints[0].key` ->
    `spec.template.spec.taints`), None outside the template."""
    if not path.startswith(TEMPLATE + "."):
        return None
    part, field = (path.removeprefix(TEMPLATE + ".").split(".") + [""])[:2]
    return f"{TEMPLATE}.{part}.{field.split('[')[0]}"


def _as_hashed(value: Any, path: str) -> str:
    """`value` at input path `path` as Karpenter's hash sees it (HASHED_SCALARS, HASHED_MAPS), as text: two values
    whose texts are equal hash alike. A list is the sorted texts of its elements (equal as multisets, so equal as the
    XOR of their hashes)."""
    if isinstance(value, dict):
        kept = {
            key: _as_hashed(item, f"{path}.{key}")
            for key, item in value.items()
            if path in HASHED_MAPS
            or not (item is None or (f"{path}.{key}" in HASHED_SCALARS and item in ("", 0, False)))
        }
        return json.dumps(kept, sort_keys=True)
    if isinstance(value, list):
        return json.dumps(sorted(_as_hashed(item, path) for item in value))
    return json.dumps(value)


def _at(inputs: dict, path: str) -> Any:
    value: Any = inputs
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _stored(resource: dict) -> dict:
    """A planned EC2NodeClass's or NodePool's inputs as the API server holds them, its CRD's defaults filled in:
    what Karpenter reads and hashes."""
    return defaulted(resource["inputs"])


def _hash_changes(before: dict, after: dict, field: str) -> bool:
    """Whether field `field` (`spec.tags`, `spec.template.spec.taints`) hashes differently in two objects as stored
    (_stored)."""
    return _as_hashed(_at(before, field), field) != _as_hashed(_at(after, field), field)


def _requirements(nodepool: dict) -> list[dict]:
    return template_spec(nodepool).get("requirements") or []


def _admits_every_node(old: list[dict], new: list[dict]) -> bool:
    """Whether requirements `new` admit the labels of every node `old` admitted: each new one is an In or Exists on a
    key an old In bounds to values the new In lists too (so the node has the label and its value intersects). Any
    other shape is taken to drift some node."""
    for requirement in new:
        bounds = [
            set(o.get("values") or [])
            for o in old
            if o.get("key") == requirement.get("key") and o.get("operator") == "In"
        ]
        if not bounds:
            return False
        if requirement.get("operator") == "Exists":
            continue
        if requirement.get("operator") != "In" or not any(b <= set(requirement.get("values") or []) for b in bounds):
            return False
    return True


def _budget(nodepool: dict) -> str:
    """How many of the pool's drifted nodes Karpenter replaces at a time, by the NodePool's budgets."""
    budgets = ((_stored(nodepool).get("spec") or {}).get("disruption") or {}).get("budgets") or []
    limits = [str(b.get("nodes")) for b in budgets if not b.get("reasons") or DRIFTED in b["reasons"]]
    if not limits:
        return f"any number at a time (no disruption budget of the NodePool limits {DRIFTED})"
    return f"at most {' and '.join(limits)} of its nodes at a time (the NodePool's disruption budgets for {DRIFTED})"


def _lines(
    nodepool: dict, hashed: list[str], hash_of: str, compared: list[str], whose: str, fields: list[str], why: str
) -> tuple[bool, list[str]]:
    """Whether the change drifts any node of the pool of `nodepool`, and the one line under it: `hashed` fields change
    `hash_of` and drift every node; else `compared` fields drift the nodes `whose` says; else `fields` drift none,
    `why` says why."""
    who = f"pool {pool_of(nodepool)} (Karpenter NodePool {(nodepool['inputs'].get('metadata') or {}).get('name')})"
    how = (
        f"{_budget(nodepool)}, a replacement launched for its pods before it is drained; serving and evaluation pods "
        f"are evicted, and a node running a training pod ({DO_NOT_DISRUPT}, no terminationGracePeriod) is replaced "
        "only once that pod ends"
    )
    if hashed:
        return True, [
            f"{who}: {', '.join(hashed)} changes {hash_of}: Karpenter marks every node of the pool {DRIFTED} and "
            f"replaces it, {how}"
        ]
    if compared:
        return True, [f"{who}: {', '.join(compared)} is compared with {whose} is {DRIFTED} and replaced, {how}"]
    return False, [f"{who}: {', '.join(fields)} drifts no node ({why}): none is replaced"]


def consequences(after: dict[str, dict], before: dict, node_class: dict, paths: list[str]) -> tuple[bool, list[str]]:
    """Whether changing `paths` of `node_class` (`before` in the base plan; a resource of the head plan, whose resources
    by URN are `after`) drifts any of its pool's nodes, and what it does to them, one line; none for a class no GPU
    pool's NodePool launches from."""
    name = (node_class["inputs"].get("metadata") or {}).get("name")
    nodepool = next(
        (r for r in after.values() if r["type"] == NODEPOOL and node_class_of(r) == name and pool_of(r)), None
    )
    if nodepool is None:
        return False, []
    fields = sorted({f for p in paths if (f := _field(p))})
    resolved = [f for f in fields if f in RESOLVED]
    compared = " or ".join(sorted({RESOLVED[f] for f in resolved}))
    old, new = _stored(before), _stored(node_class)
    same = [f for f in fields if f not in UNHASHED and not _hash_changes(old, new, f)]
    return _lines(
        nodepool,
        [f for f in fields if f not in UNHASHED and f not in same],
        "the EC2NodeClass's hash (karpenter.k8s.aws/ec2nodeclass-hash)",
        resolved,
        f"each node: a node whose {compared} it no longer selects",
        fields or paths,
        _why_no_drift(same, None, len(same) < len(fields or paths)),
    )


def nodepool_consequences(before: dict, nodepool: dict, paths: list[str]) -> tuple[bool, list[str]]:
    """Whether changing `paths` of a NodePool (`before` in the base plan, `nodepool` in the head's) drifts any of its
    pool's nodes, and what it does to them, one line; none for a NodePool of no GPU pool."""
    if not pool_of(nodepool):
        return False, []
    template = sorted({f for p in paths if (f := _template_field(p))})
    expanded = REQUIREMENTS in template and _admits_every_node(_requirements(before), _requirements(nodepool))
    old, new = _stored(before), _stored(nodepool)
    same = [f for f in template if f != REQUIREMENTS and not _hash_changes(old, new, f)]
    fields = sorted({_template_field(p) or _field(p) or p for p in paths})
    return _lines(
        nodepool,
        [f for f in template if f != REQUIREMENTS and f not in same],
        "the NodePool's hash (karpenter.sh/nodepool-hash)",
        [f for f in template if f == REQUIREMENTS and not expanded],
        "each node's labels: a node whose labels they no longer admit",
        fields,
        _why_no_drift(
            same,
            "not hashed, and the requirements still admit every node's labels" if expanded else None,
            len(same) + expanded < len(fields),
        ),
    )


def _why_no_drift(same: list[str], expanded: str | None, rest: bool) -> str:
    """Why the fields of a change that drifts no node drift none: the hash of those `same` is the same, the NodePool's
    requirements still admit every node (`expanded`), the `rest` are NO_DRIFT; with more than one reason, the first
    names its fields."""
    reasons = ([expanded] if expanded else []) + ([NO_DRIFT] if rest else [])
    if not same:
        return "; ".join(reasons)
    return "; ".join([f"{', '.join(same)}: {SAME_HASH}" if reasons else SAME_HASH, *reasons])

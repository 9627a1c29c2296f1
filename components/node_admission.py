"""What the node-updating agents (the health gate, the FSx CSI node plugin) never change on their own
node: its finalizers, owner references, provider id, pod CIDRs and config source. One CEL expression
for both own-node ValidatingAdmissionPolicies (components/healthgate.py, components/storage.py)."""

from __future__ import annotations

# Node fields no agent of ours writes (core/v1 ObjectMeta and NodeSpec). A Node is a typed object to
# the API server's CEL, so each field is named: no macro runs over an object's keys.
FIXED_NODE_FIELDS = (
    "metadata.finalizers",
    "metadata.ownerReferences",
    "spec.providerID",
    "spec.podCIDR",
    "spec.podCIDRs",
    "spec.configSource",
    "spec.externalID",
)
FIXED_NODE_FIELDS_MESSAGE = "finalizers, owner references, providerID, pod CIDRs or config source"


def unchanged(field: str) -> str:
    """`field` present in both objects or neither, and equal."""
    new, old = f"object.{field}", f"oldObject.{field}"
    return f"(has({new}) == has({old}) && (!has({new}) || {new} == {old}))"


def fixed_node_fields_unchanged() -> str:
    return " && ".join(unchanged(f) for f in FIXED_NODE_FIELDS)

"""Kubernetes' own matching rules, written out so tests can run them on what we render.

- `tolerates`: a toleration matches a taint as kubernetes/kubernetes:staging/src/k8s.io/api/core/v1/
  toleration.go (Toleration.ToleratesTaint) says: an empty effect matches every effect; an empty
  key with operator Exists matches every taint; Exists ignores the value, Equal (the default)
  compares it.
- `ingress_allowed`: NetworkPolicy ingress semantics (kubernetes.io/docs/concepts/services-networking/
  network-policies/, the networking.k8s.io/v1 API): a pod selected by no Ingress policy accepts
  everything; a selected pod accepts a connection only if some rule of some selecting policy
  admits both the peer (podSelector alone: the policy's own namespace; namespaceSelector alone:
  every pod of the matching namespaces; both: the pods matching in those namespaces; ipBlock: the
  peer's IP) and the port (no `ports`: every port). Checked case by case against IBM's
  network-config-analyzer 2.1.0 (`nca --forbids`), which is not a dev dependency: it pins
  networkx==3.2.1, below mermaid-parser-py's >=3.5.
- `egress_allowed`: the same rules for Egress policies, with the destination as the VPC CNI's
  policy agent sees it: the address the pod dialled, before kube-proxy translates a Service's
  ClusterIP (components/tenancy.py network_policies cites the agent's hook).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


def tolerates(tolerations: Iterable[Mapping], taint: Mapping) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        operator = t.get("operator", "Equal")
        if not t.get("key"):
            if operator == "Exists":
                return True
            continue
        if t["key"] != taint["key"]:
            continue
        if operator == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _selects(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions); {} selects everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


@dataclass(frozen=True)
class Endpoint:
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ip: str = "10.40.9.9"
    namespace_labels: Mapping[str, str] | None = None  # default: kubernetes.io/metadata.name only

    @property
    def ns_labels(self) -> Mapping[str, str]:
        return (
            self.namespace_labels
            if self.namespace_labels is not None
            else {"kubernetes.io/metadata.name": self.namespace}
        )


def _peer_matches(peer: Mapping, policy_namespace: str, source: Endpoint) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        ip = ipaddress.ip_address(source.ip)
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(c) for c in block.get("except", [])
        )
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], source.ns_labels):
            return False
    elif source.namespace != policy_namespace:
        return False
    return _selects(peer.get("podSelector"), source.labels)


def _port_matches(ports: list[Mapping] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        if p["port"] == port or (p.get("endPort") and p["port"] <= port <= p["endPort"]):
            return True
    return False


def ingress_allowed(
    policies: Iterable[Mapping], source: Endpoint, target: Endpoint, port: int, protocol: str = "TCP"
) -> bool:
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == target.namespace
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and _selects(p["spec"].get("podSelector"), target.labels)
    ]
    if not selecting:
        return True
    return any(
        any(
            _peer_matches(peer, p["metadata"]["namespace"], source)
            for peer in rule.get("from") or [{"namespaceSelector": {}}]
        )
        and _port_matches(rule.get("ports"), port, protocol)
        for p in selecting
        for rule in p["spec"].get("ingress") or []
    )


def egress_allowed(
    policies: Iterable[Mapping], source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP"
) -> bool:
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == source.namespace
        and "Egress" in p["spec"].get("policyTypes", [])
        and _selects(p["spec"].get("podSelector"), source.labels)
    ]
    if not selecting:
        return True
    return any(
        any(
            _peer_matches(peer, p["metadata"]["namespace"], destination)
            for peer in rule.get("to") or [{"namespaceSelector": {}}]
        )
        and _port_matches(rule.get("ports"), port, protocol)
        for p in selecting
        for rule in p["spec"].get("egress") or []
    )

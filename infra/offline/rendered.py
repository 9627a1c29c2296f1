"""Checks of what helm and kustomize really render, for the online contract workflow.

The offline suite can only read the charts' templates (tests/components/test_controller_rbac.py,
tests/core/test_image_pins.py); .github/workflows/contracts.yml renders every chart with the plan's
values and the operator overlay, then runs `python -m infra.offline.rendered rendered/`: every image
in the rendered objects is pinned (a digest, or a tag that is neither empty nor `latest`), and the
RBAC the controllers' flags need is there, evaluated as the RBAC authorizer does.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
POD_TEMPLATES = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"}


def pinned(image: str) -> bool:
    """A digest, or a tag that is neither empty nor `latest` (nor a placeholder)."""
    if DIGEST.search(image):
        return True
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return False
    tag = last.rsplit(":", 1)[1]
    return tag not in ("", "latest") and not tag.startswith("<")


def _pod_spec(obj: dict) -> dict | None:
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        return (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    if kind in POD_TEMPLATES:
        return (spec.get("template") or {}).get("spec")
    return None


def images_of(objects: Iterable[dict]) -> Iterator[tuple[str, str]]:
    """(kind/namespace/name, image) of every container, init and ephemeral container."""
    for obj in objects:
        spec = _pod_spec(obj) or {}
        meta = obj.get("metadata") or {}
        for key in ("initContainers", "containers", "ephemeralContainers"):
            for c in spec.get(key) or []:
                yield f"{obj['kind']}/{meta.get('namespace', '')}/{meta.get('name')}", c.get("image", "")


# --- RBAC, as the authorizer evaluates it (k8s.io/apiserver plugin/pkg/authorizer rbac) ---------------


@dataclass(frozen=True)
class Call:
    """One API request: verb on group/resource in `namespace` ("" cluster-scoped) on `name`
    (None: a request that names no object, such as create or list)."""

    verb: str
    group: str
    resource: str
    namespace: str
    name: str | None = None


@dataclass(frozen=True)
class Scoped:
    """A rule in effect for a subject: `namespace` None = everywhere (a ClusterRoleBinding)."""

    namespace: str | None
    rule: dict


def rule_allows(rule: dict, call: Call) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    # A rule's `*/SUBRESOURCE` is that subresource of every resource (`*/exec`: pods/exec); `RESOURCE/*` is no
    # wildcard (kubernetes/kubernetes:pkg/apis/rbac/v1/evaluation_helpers.go@03bf11a3 ResourceMatches).
    _, slash, subresource = call.resource.partition("/")
    names = rule.get("resourceNames") or []
    return (
        has("apiGroups", call.group)
        and (has("resources", call.resource) or (bool(slash) and f"*/{subresource}" in (rule.get("resources") or [])))
        and has("verbs", call.verb)
        and (not names or (call.name is not None and call.name in names))
    )


def allows(rules: Iterable[Scoped], call: Call) -> bool:
    return any((s.namespace is None or s.namespace == call.namespace) and rule_allows(s.rule, call) for s in rules)


def rules_bound(objects: Sequence[dict], subject: Callable[[dict], bool]) -> list[Scoped]:
    """The rules the RBAC objects among `objects` bind to a binding subject for which `subject` holds
    (a RoleBinding to a ClusterRole applies in the binding's namespace only)."""
    roles = {
        (
            o["kind"],
            (o.get("metadata") or {}).get("namespace", "") if o["kind"] == "Role" else "",
            o["metadata"]["name"],
        ): o.get("rules") or []
        for o in objects
        if o.get("kind") in ("Role", "ClusterRole")
    }
    found = []
    for binding in (o for o in objects if o.get("kind") in ("RoleBinding", "ClusterRoleBinding")):
        if not any(subject(s) for s in binding.get("subjects") or []):
            continue
        ref, where = binding["roleRef"], (binding.get("metadata") or {}).get("namespace", "")
        rules = roles.get((ref["kind"], where if ref["kind"] == "Role" else "", ref["name"]), [])
        found += [Scoped(None if binding["kind"] == "ClusterRoleBinding" else where, r) for r in rules]
    return found


def rules_for(objects: Sequence[dict], namespace: str, account: str) -> list[Scoped]:
    """The rules bound to ServiceAccount namespace/account."""
    return rules_bound(
        objects,
        lambda s: s.get("kind") == "ServiceAccount" and s.get("name") == account and s.get("namespace") == namespace,
    )


def rules_for_group(objects: Sequence[dict], group: str) -> list[Scoped]:
    """The rules bound to the Kubernetes group `group` (an EKS access entry's group)."""
    return rules_bound(objects, lambda s: s.get("kind") == "Group" and s.get("name") == group)


# The calls whose absence would stop a controller, by the ServiceAccount the chart/overlay renders
# (cited in docs/controllers.md and tests/components/test_controller_rbac.py). Namespaces and names as we install them.
PROBES: dict[tuple[str, str], list[Call]] = {
    ("kubeflow", "training-operator"): [
        Call("get", "coordination.k8s.io", "leases", "kubeflow", "1ca428e5.training-operator.kubeflow.org"),
        Call("update", "coordination.k8s.io", "leases", "kubeflow", "1ca428e5.training-operator.kubeflow.org"),
        Call("create", "coordination.k8s.io", "leases", "kubeflow"),
    ],
    ("volcano-system", "volcano-admission"): [Call("get", "", "namespaces", "", "any-team")],
    ("volcano-system", "volcano-scheduler"): [
        Call("create", "coordination.k8s.io", "leases", "volcano-system"),
        Call("create", "scheduling.volcano.sh", "queues", ""),
    ],
    ("kube-system", "cluster-autoscaler"): [
        Call("update", "coordination.k8s.io", "leases", "kube-system", "cluster-autoscaler"),
        Call("update", "", "configmaps", "kube-system", "cluster-autoscaler-status"),
    ],
}


def load(folder: Path) -> list[dict]:
    return [
        o
        for path in sorted(folder.glob("*.yaml"))
        for o in yaml.safe_load_all(path.read_text())
        if isinstance(o, dict) and "kind" in o
    ]


def problems(objects: Sequence[dict]) -> list[str]:
    found = [
        f"{where}: image {image!r} is not pinned (digest, or a tag other than latest)"
        for where, image in images_of(objects)
        if not pinned(image)
    ]
    accounts = {
        o["metadata"]["name"]: (o.get("metadata") or {}).get("namespace", "")
        for o in objects
        if o.get("kind") == "ServiceAccount"
    }
    for (namespace, account), calls in PROBES.items():
        if account not in accounts:
            continue  # that release is not in this stack
        if accounts[account] != namespace:
            found.append(
                f"ServiceAccount {account} is rendered in namespace {accounts[account]!r}, the probes expect "
                f"{namespace!r}"
            )
            continue
        rules = rules_for(objects, namespace, account)
        found += [
            f"ServiceAccount {namespace}/{account} may not {c.verb} {c.group or 'core'}/{c.resource} {c.name or ''} "
            f"in {c.namespace or 'the cluster'}"
            for c in calls
            if not allows(rules, c)
        ]
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m infra.offline.rendered RENDERED_DIR", file=sys.stderr)
        return 2
    found = problems(load(Path(argv[0])))
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

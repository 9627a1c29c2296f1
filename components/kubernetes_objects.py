"""Kubernetes objects the program builds itself, declared as plain manifests.

`KubernetesObject` registers a manifest under the same type token and with the same inputs as
pulumi_kubernetes' generated class for its kind (`kubernetes:core/v1:Namespace`,
`kubernetes:scheduling.volcano.sh/v1beta1:Queue`, ...), so the Kubernetes provider treats it the
same. Why not the generated classes: importing `pulumi_kubernetes.core.v1` alone costs 0.7 s,
a quarter of `higgsfield plan` (measured with `python -X importtime`), and a manifest is exactly
what `higgsfield plan --manifests` renders and the tests validate against the schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

import pulumi
from pulumi_kubernetes import _utilities

from infra.core.names import PREVIEW_GROUP


def type_token(api_version: str, kind: str) -> str:
    """`v1` + `Namespace` -> `kubernetes:core/v1:Namespace`; `apps/v1` + `Deployment` ->
    `kubernetes:apps/v1:Deployment` (the core group is spelled `core` in Pulumi tokens)."""
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{kind}"


# The namespaced kinds the program keeps in team namespaces, where a team makes its own too (a
# ServiceAccount's annotations, a claim's name and size, its Roles), by (API group, kind): a preview
# reads the program's objects of these kinds by name alone, in every namespace (preview_gets).
NAMED_READS: dict[tuple[str, str], str] = {
    # and ConfigMaps: a team's may hold anything, and a platform namespace's hold what the platform's programs write
    # beside the program's own (the gang deadline CronJob's team clocks: since when each team's gangs have waited)
    ("", "ConfigMap"): "configmaps",
    ("", "LimitRange"): "limitranges",
    ("", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("", "ResourceQuota"): "resourcequotas",
    ("", "ServiceAccount"): "serviceaccounts",
    ("networking.k8s.io", "NetworkPolicy"): "networkpolicies",
    ("rbac.authorization.k8s.io", "Role"): "roles",
    ("rbac.authorization.k8s.io", "RoleBinding"): "rolebindings",
}
# The cluster-scoped kinds the program keeps where the cluster makes its own from a team's activity, by (API group,
# kind): a PersistentVolume the EBS CSI provisioner binds to a team's claim of the gp3 StorageClass names the claim
# and its namespace (spec.claimRef) and its size. A preview gets the program's by name alone, cluster-wide
# (components/delivery.py preview_cluster_role); they are kept under the namespace "".
CLUSTER_NAMED_READS: dict[tuple[str, str], str] = {("", "PersistentVolume"): "persistentvolumes"}
# The objects of NAMED_READS' and CLUSTER_NAMED_READS' kinds this evaluation of the program made so far (each plan
# is recorded in a context of its own: infra/offline/evaluate.py record), as (API group, resource, name, object) by
# namespace.
_NAMED: ContextVar[dict[str, list[tuple[str, str, str, pulumi.Resource]]]] = ContextVar("named_objects")


def _named() -> dict[str, list[tuple[str, str, str, pulumi.Resource]]]:
    try:
        return _NAMED.get()
    except LookupError:
        _NAMED.set({})
        return _NAMED.get()


def _keep_named(manifest: dict[str, Any], made: pulumi.Resource) -> None:
    group, kind, metadata = manifest["apiVersion"].rpartition("/")[0], manifest["kind"], manifest["metadata"]
    if (resource := NAMED_READS.get((group, kind))) is not None:
        _named().setdefault(metadata.get("namespace") or "default", []).append(
            (group, resource, metadata["name"], made)
        )
    elif (resource := CLUSTER_NAMED_READS.get((group, kind))) is not None:
        _named().setdefault("", []).append((group, resource, metadata["name"], made))


def named_objects() -> dict[str, list[tuple[str, str, str, pulumi.Resource]]]:
    """The program's objects of NAMED_READS' kinds made so far, as (API group, resource, name,
    object) by namespace, and of CLUSTER_NAMED_READS' under "": what the preview may get there (preview_gets,
    components/delivery.py preview_cluster_role)."""
    return {namespace: list(made) for namespace, made in _named().items()}


class KubernetesObject(pulumi.CustomResource):
    """One Kubernetes object from its manifest (apiVersion, kind, metadata, and the rest)."""

    def __init__(self, name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        # Pin the provider plugin to the SDK's version, as the generated classes do.
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=_utilities.get_version()))
        super().__init__(type_token(manifest["apiVersion"], manifest["kind"]), name, dict(manifest), opts)
        _keep_named(manifest, self)


# The annotation with which a Patch takes over fields another field manager set first (the controller
# that created the object): "Conflicts will result in an error by default, but can be forced using the
# `pulumi.com/patchForce` annotation" (pulumi_kubernetes 4.34.2, core/v1/ServiceAccountPatch.py, the
# docstring of every generated `...Patch` class; pulumi.com/registry/packages/kubernetes/how-to-guides/
# managing-resources-with-server-side-apply).
PATCH_FORCE = "pulumi.com/patchForce"


def deny_binding(policy: str, *, labels: dict[str, str] | None = None, match_resources: dict | None = None) -> dict:
    """The ValidatingAdmissionPolicyBinding of `policy`, named as it is, that refuses what the policy refuses: in the
    objects `match_resources` selects, or cluster-wide without it."""
    metadata: dict[str, Any] = {"name": policy, **({"labels": labels} if labels else {})}
    spec: dict[str, Any] = {"policyName": policy, "validationActions": ["Deny"]}
    if match_resources is not None:
        spec["matchResources"] = match_resources
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": metadata,
        "spec": spec,
    }


def patch_type_token(api_version: str, kind: str) -> str:
    """The Server-Side Apply patch of a kind: `kubernetes:core/v1:ServiceAccountPatch`, and for a
    custom resource `kubernetes:scheduling.volcano.sh/v1beta1:QueuePatch` (the token
    pulumi_kubernetes' apiextensions.CustomResourcePatch registers: f"kubernetes:{api_version}:{kind}Patch")."""
    return type_token(api_version, kind) + "Patch"


class KubernetesPatch(pulumi.CustomResource):
    """A Server-Side Apply patch of an object that exists before the program runs, because the
    cluster (the API server, a controller, EKS) creates it itself: the provider applies only the
    fields in `manifest` under its own field manager and never creates or deletes the object
    (deleting the patch gives its fields back). `force` takes over fields the creator set first,
    with the `pulumi.com/patchForce` annotation. components/cluster_created.py lists which objects
    these are and who creates them."""

    def __init__(
        self, name: str, manifest: dict[str, Any], force: bool = False, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=_utilities.get_version()))
        manifest = dict(manifest)
        if force:
            metadata = dict(manifest.get("metadata") or {})
            metadata["annotations"] = {**(metadata.get("annotations") or {}), PATCH_FORCE: "true"}
            manifest["metadata"] = metadata
        super().__init__(patch_type_token(manifest["apiVersion"], manifest["kind"]), name, manifest, opts)
        _keep_named(manifest, self)


# The pod-level security context of the platform's own programs in a restricted namespace: not root
# (a fixed UID, no passwd entry needed) and the runtime's default seccomp profile.
RESTRICTED_POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}


def restricted_namespace(name: str, namespace: str, opts: pulumi.ResourceOptions) -> KubernetesObject:
    """A namespace of the platform's own whose pods must meet Pod Security's `restricted` level
    (enforced, and warned at `kubectl apply`)."""
    levels = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"}
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": levels}}
    return KubernetesObject(name, manifest, opts=opts)


def role_and_binding(role: str, rules: list[dict], subjects: list[dict], namespace: str | None = None) -> list[dict]:
    """A Role `role` of `rules` in `namespace` (a ClusterRole without one) and its RoleBinding (ClusterRoleBinding) of
    the same name to `subjects`."""
    rbac = "rbac.authorization.k8s.io"
    kind = "Role" if namespace else "ClusterRole"
    metadata = {"name": role, **({"namespace": namespace} if namespace else {})}
    return [
        {"apiVersion": f"{rbac}/v1", "kind": kind, "metadata": metadata, "rules": rules},
        {
            "apiVersion": f"{rbac}/v1",
            "kind": f"{kind}Binding",
            "metadata": dict(metadata),
            "roleRef": {"apiGroup": rbac, "kind": kind, "name": role},
            "subjects": subjects,
        },
    ]


def service_account_subject(name: str, namespace: str) -> list[dict]:
    """The subjects of a binding to one ServiceAccount."""
    return [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]


def _preview_role(
    names: tuple[str, str], role_name: str, namespace: str, rules: list[dict], opts: pulumi.ResourceOptions
) -> list[KubernetesObject]:
    """A Role `role_name` of `rules` in `namespace` and its RoleBinding to the CI preview group (PREVIEW_GROUP), the
    two resources named `names`."""
    group = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": PREVIEW_GROUP}]
    role, binding = role_and_binding(role_name, rules, group, namespace)
    return [KubernetesObject(names[0], role, opts=opts), KubernetesObject(names[1], binding, opts=opts)]


def preview_reads(
    name: str, namespace: str, resources: dict[str, list[str]], opts: pulumi.ResourceOptions
) -> list[KubernetesObject]:
    """A Role and its RoleBinding letting the CI preview group (PREVIEW_GROUP) read (get, list, watch)
    `resources` ({API group: resources}) in one of the platform's namespaces: the namespaced kinds the
    program keeps there that the preview's ClusterRole leaves out (components/delivery.py
    PREVIEW_READS), so a pull request's preview diffs them without reading any team's. One call per
    namespace: the Role is named after the group."""
    rules = [
        {"apiGroups": [group], "resources": kinds, "verbs": ["get", "list", "watch"]}
        for group, kinds in resources.items()
    ]
    return _preview_role((f"{name}-preview-role", f"{name}-preview-binding"), PREVIEW_GROUP, namespace, rules, opts)


# The Role and RoleBinding, in each namespace the program keeps objects of NAMED_READS' kinds in, that let
# the preview group get those objects by name (preview_gets).
PREVIEW_GETS = f"{PREVIEW_GROUP}:by-name"


def preview_gets(
    name: str, namespace: str, objects: list[tuple[str, str, str]], opts: pulumi.ResourceOptions
) -> list[KubernetesObject]:
    """A Role and its RoleBinding letting the CI preview group (PREVIEW_GROUP) get `objects` ((API group,
    resource, name) in `namespace`) and themselves by name, nothing else: all a preview reads of an
    object in the state is a get by its name (components/delivery.py PREVIEW_READS), and a team
    namespace holds the team's own objects of these kinds beside the program's."""
    rbac = "rbac.authorization.k8s.io"
    objects = [*objects, (rbac, "roles", PREVIEW_GETS), (rbac, "rolebindings", PREVIEW_GETS)]
    base = f"{name}-preview-gets-{namespace}"
    return _preview_role((base, f"{base}-binding"), PREVIEW_GETS, namespace, gets_by_name(objects), opts)


def gets_by_name(objects: Sequence[tuple[str, str, str]]) -> list[dict]:
    """RBAC rules that get `objects` ((API group, resource, name)) by name alone, one rule per kind."""
    named: dict[tuple[str, str], set[str]] = {}
    for group, resource, object_name in objects:
        named.setdefault((group, resource), set()).add(object_name)
    return [
        {"apiGroups": [group], "resources": [resource], "resourceNames": sorted(these), "verbs": ["get"]}
        for (group, resource), these in sorted(named.items())
    ]

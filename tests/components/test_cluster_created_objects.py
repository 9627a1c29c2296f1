"""Objects the cluster makes itself are patched with Server-Side Apply, never created.

pulumi-kubernetes >= 4.29 refuses to create an object that already exists (docs/design/cluster-created-objects.md),
so a plain create of one of them fails the first `pulumi up` whenever the cluster got there
first. components/cluster_created.py lists who creates what, with the upstream code.
"""

from __future__ import annotations

import pytest

from components.cluster_created import CLUSTER_CREATED, creator_of
from components.kubernetes_objects import PATCH_FORCE, patch_type_token, type_token
from infra.offline.evaluate import Plan

_NOT_OBJECTS = ("kubernetes:helm.sh/", "kubernetes:kustomize", "kubernetes:yaml", "pulumi:providers:")


def _objects(plan: Plan):
    for r in plan.resources:
        if r.custom and r.type.startswith("kubernetes:") and not r.type.startswith(_NOT_OBJECTS):
            meta = r.inputs.get("metadata") or {}
            yield r, r.inputs["apiVersion"], r.inputs["kind"], meta.get("namespace", ""), meta["name"]


def cluster_created_in(plan: Plan) -> list[tuple[str, str, str]]:
    """Every object in the plan that the cluster also creates: (resource name, who, where in upstream code)."""
    return [(r.name, c.creator, c.source) for r, *key in _objects(plan) if (c := creator_of(*key))]


def test_plan_lists_the_objects_the_cluster_creates_with_their_creator(plan):
    found = cluster_created_in(plan)
    names = {n for n, _, _ in found}
    # Volcano's default queue and one default ServiceAccount per team, in every stack.
    assert "volcano-queue-default" in names
    assert {f"teams-{t.name}-default-sa" for t in plan.config.scheduler.teams} <= names
    assert all(where and "@" in where or where.startswith("docs.") or "#" in where for _, _, where in found)


def test_no_object_the_cluster_creates_is_a_plain_create(plan):
    created = [r.name for r, *key in _objects(plan) if creator_of(*key) and not r.type.endswith("Patch")]
    assert not created, f"created, but the cluster creates them itself: {created}"


def test_every_patch_in_the_plan_is_of_an_object_the_cluster_creates(plan):
    # A Patch of an object nobody else creates would silently create it by Server-Side Apply
    # (pulumi/pulumi-kubernetes#2194) with none of the guarantees of a create.
    stray = [r.name for r, *key in _objects(plan) if r.type.endswith("Patch") and not creator_of(*key)]
    assert not stray


def test_patches_use_the_patch_token_of_their_kind(plan):
    for r, api_version, kind, _, _ in _objects(plan):
        if r.type.endswith("Patch"):
            assert r.type == patch_type_token(api_version, kind) == type_token(api_version, kind) + "Patch"


def test_patches_that_take_fields_the_creator_set_force_them(plan):
    # Volcano creates `default` with reclaimable: true and weight 1 (cache.go@v1.15.1:479-486); our
    # patch sets reclaimable: false, a field the scheduler's manager owns: without force, a conflict.
    (queue,) = [r for r in plan.resources if r.name == "volcano-queue-default"]
    assert queue.inputs["metadata"]["annotations"][PATCH_FORCE] == "true"
    assert queue.inputs["spec"]["reclaimable"] is False


@pytest.mark.parametrize(
    "key",
    [
        ("v1", "ServiceAccount", "any-team", "default"),
        ("v1", "ConfigMap", "any-team", "kube-root-ca.crt"),
        ("v1", "Namespace", "", "kube-system"),
        ("scheduling.k8s.io/v1", "PriorityClass", "", "system-node-critical"),
        ("scheduling.volcano.sh/v1beta1", "Queue", "", "default"),
        ("scheduling.volcano.sh/v1beta1", "Queue", "", "root"),
    ],
)
def test_the_table_knows_the_objects_the_issue_names(key):
    assert creator_of(*key) is not None


def test_every_table_entry_names_its_upstream_source():
    for entry in CLUSTER_CREATED:
        assert entry.source and entry.creator, entry

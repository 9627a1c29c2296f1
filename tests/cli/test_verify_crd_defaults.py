"""`kube.node-pools` and `kube.node-classes` compare each live Karpenter object with the planned one as the API server
holds it: the plan with its CRD's schema defaults filled in (infra/offline/crd_schemas.py defaulted). A field the plan
leaves out and the API server defaults is no drift; a live value other than the plan's, or other than the default
where the plan leaves the field out, still is; a field the plan sets and live lacks still is, even where the plan's
value is the default. The clusters are the fake API server holding the prod plan's objects (`classes_ctx`), which
does not default: each test writes the live object as a real API server would hold it."""

from __future__ import annotations

import copy

import pytest

from tests.cli.test_verify_checks import (  # noqa: F401 (fixtures)
    _node_class,
    _node_pool,
    classes_ctx,
    karpenter_plan,
    one,
)

# The NodePool spec defaults of karpenter.sh_nodepools.yaml@v1.14.1 (aws/karpenter-provider-aws:pkg/apis/crds/
# karpenter.sh_nodepools.yaml@v1.14.1, kept in infra/offline/data/crds/NodePool.karpenter.sh.v1.json): `disruption`
# defaults to {consolidateAfter: 0s}, and in it consolidationPolicy to WhenEmptyOrUnderutilized and budgets to
# [{nodes: 10%}]; the template's expireAfter to 720h.
DEFAULT_DISRUPTION = {
    "consolidateAfter": "0s",
    "consolidationPolicy": "WhenEmptyOrUnderutilized",
    "budgets": [{"nodes": "10%"}],
}
DEFAULT_EXPIRY = "720h"


def _planned(ctx, kind: str) -> dict:
    (found,) = [r.inputs for r in ctx.plan.resources if r.inputs.get("kind") == kind]
    return found


def _named(outcome) -> set[str]:
    """The spec paths a failed check names as not as planned for gpu-h100."""
    said = outcome.evidence.split("gpu-h100: ", 1)[1].split(" not as planned", 1)[0]
    return set(said.split(", "))


def _planned_pool_without(monkeypatch, ctx, *fields: str) -> dict:
    """The planned NodePool's inputs with `fields` (of its spec, or `expireAfter` of its template's spec) left out
    for this test."""
    spec = _planned(ctx, "NodePool")["spec"]
    for field in fields:
        monkeypatch.delitem(spec["template"]["spec"] if field == "expireAfter" else spec, field)
    return spec


def test_a_pool_planned_without_the_defaulted_fields_passes_as_the_api_server_fills_them_in(classes_ctx, monkeypatch):
    """The first `verify` after a clean `pulumi up` of a NodePool that leaves its disruption and expiry to Karpenter's
    CRD: the API server holds the defaults, and they are no drift."""
    fake, ctx = classes_ctx
    _planned_pool_without(monkeypatch, ctx, "disruption", "expireAfter")
    pool = _node_pool(fake)
    pool["spec"]["disruption"] = copy.deepcopy(DEFAULT_DISRUPTION)
    pool["spec"]["template"]["spec"]["expireAfter"] = DEFAULT_EXPIRY
    fake.put(pool)
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "PASS" and "1 NodePool(s) as planned" in outcome.evidence, outcome


def test_a_class_planned_without_metadata_options_passes_as_the_api_server_fills_them_in(classes_ctx, monkeypatch):
    fake, ctx = classes_ctx
    planned = _planned(ctx, "EC2NodeClass")["spec"]
    monkeypatch.delitem(planned, "metadataOptions")
    outcome = one("kube.node-classes", ctx)  # live holds the plan's metadataOptions, which are the CRD's defaults
    assert outcome.status == "PASS" and "1 EC2NodeClass(es) as planned" in outcome.evidence, outcome


@pytest.mark.parametrize(
    ("field", "live", "path"),
    [
        ("expireAfter", "Never", "template.spec.expireAfter"),
        ("disruption", {**DEFAULT_DISRUPTION, "budgets": [{"nodes": "100%"}]}, "disruption.budgets"),
        ("disruption", {**DEFAULT_DISRUPTION, "consolidationPolicy": "WhenEmpty"}, "disruption.consolidationPolicy"),
    ],
    ids=["expireAfter", "budgets", "consolidationPolicy"],
)
def test_a_live_value_other_than_the_default_where_the_plan_sets_none_fails(
    classes_ctx, monkeypatch, field, live, path
):
    fake, ctx = classes_ctx
    _planned_pool_without(monkeypatch, ctx, "disruption", "expireAfter")
    pool = _node_pool(fake)
    pool["spec"]["disruption"] = copy.deepcopy(DEFAULT_DISRUPTION)
    pool["spec"]["template"]["spec"]["expireAfter"] = DEFAULT_EXPIRY
    (pool["spec"]["template"]["spec"] if field == "expireAfter" else pool["spec"])[field] = live
    fake.put(pool)
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "FAIL" and f"gpu-h100: {path} not as planned" in outcome.evidence, outcome


def _as_the_api_server_returns(pool: dict) -> dict:
    """A NodePool as `kubectl get nodepool -o json` shows it after `pulumi up` and Karpenter's first reconcile: the
    spec as applied (the program writes every default of the CRD itself), with the metadata the API server adds,
    Karpenter's hash annotations and its status (their values made up; the check reads neither)."""
    live = copy.deepcopy(pool)
    live["metadata"] |= {
        "annotations": {
            "karpenter.sh/nodepool-hash": "4012521145698401472",
            "karpenter.sh/nodepool-hash-version": "v3",
        },
        "creationTimestamp": "2026-12-05T08:12:03Z",
        "generation": 1,
        "resourceVersion": "48211",
        "uid": "0b6a2f7e-3c1d-4f4e-9a57-1d2e3f4a5b6c",
        "managedFields": [
            {"manager": "pulumi-kubernetes-1a2b3c4d", "operation": "Apply", "apiVersion": "karpenter.sh/v1"},
            {"manager": "karpenter", "operation": "Update", "apiVersion": "karpenter.sh/v1", "subresource": "status"},
        ],
    }
    live["status"] = {
        "conditions": [
            {"type": t, "status": "True", "reason": t, "lastTransitionTime": "2026-12-05T08:12:04Z", "message": ""}
            for t in ("ValidationSucceeded", "NodeClassReady", "Ready")
        ],
        "resources": {"cpu": "0", "memory": "0", "nodes": "0", "pods": "0"},
    }
    return live


def test_a_pool_as_the_api_server_returns_it_after_pulumi_up_passes(classes_ctx):
    fake, ctx = classes_ctx
    fake.put(_as_the_api_server_returns(_planned(ctx, "NodePool")))
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "PASS" and "1 NodePool(s) as planned" in outcome.evidence, outcome


# --- attacks: can the defaults hide a real drift? -----------------------------------------------------


def test_a_live_value_equal_to_the_default_where_the_plan_sets_another_fails(classes_ctx):
    """The plan's `expireAfter: Never` keeps training nodes; set back to the CRD's 720h they expire under running
    jobs. The default fills in only what the plan leaves out."""
    fake, ctx = classes_ctx
    pool = _node_pool(fake)
    pool["spec"]["template"]["spec"]["expireAfter"] = DEFAULT_EXPIRY
    pool["spec"]["disruption"] = copy.deepcopy(DEFAULT_DISRUPTION)
    fake.put(pool)
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "FAIL", outcome
    assert {"template.spec.expireAfter", "disruption.budgets", "disruption.consolidationPolicy"} <= _named(outcome)


@pytest.mark.parametrize(
    ("path", "where"),
    [
        (("template", "spec", "expireAfter"), "template.spec.expireAfter"),
        (("disruption", "budgets"), "disruption.budgets"),
        (("disruption",), "disruption"),
    ],
    ids=["expireAfter", "budgets", "disruption"],
)
def test_a_field_the_plan_sets_missing_from_live_fails(classes_ctx, path, where):
    fake, ctx = classes_ctx
    pool = _node_pool(fake)
    parent = pool["spec"]
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    fake.put(pool)
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "FAIL" and f"gpu-h100: {where}" in outcome.evidence, outcome


def test_a_field_the_plan_sets_to_its_default_missing_from_live_still_fails(classes_ctx):
    """The plan's metadataOptions are the CRD's defaults; a live class without httpTokens is not filled in here: a real
    API server never returns it so, and what it returns is compared, not what it would default."""
    fake, ctx = classes_ctx
    node_class = _node_class(fake)
    del node_class["spec"]["metadataOptions"]["httpTokens"]
    fake.put(node_class)
    outcome = one("kube.node-classes", ctx)
    assert outcome.status == "FAIL" and "gpu-h100: metadataOptions.httpTokens not as planned" in outcome.evidence


def test_a_budget_the_plan_writes_without_nodes_is_the_defaults_ten_percent_not_any(classes_ctx, monkeypatch):
    """A default inside a list item: a planned budget without `nodes` is 10% (the items' default); live 100% is
    drift."""
    fake, ctx = classes_ctx
    planned = _planned(ctx, "NodePool")["spec"]["disruption"]
    monkeypatch.setitem(planned, "budgets", [{"reasons": ["Drifted"]}])
    pool = _node_pool(fake)
    pool["spec"]["disruption"]["budgets"] = [{"nodes": "10%", "reasons": ["Drifted"]}]
    fake.put(pool)
    assert one("kube.node-pools", ctx).status == "PASS"
    pool["spec"]["disruption"]["budgets"] = [{"nodes": "100%", "reasons": ["Drifted"]}]
    fake.put(pool)
    outcome = one("kube.node-pools", ctx)
    assert outcome.status == "FAIL" and "gpu-h100: disruption.budgets not as planned" in outcome.evidence, outcome

"""The fake API server answers as kube-apiserver does on the wire: Status bodies with the real
reasons and codes, server-side apply needing a field manager, dry runs that store nothing, watch
streams and followed logs (tests/fake_kube_api.py cites the handlers it follows)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.fake_kube_api import FakeKubernetesApi

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "team"},
    "spec": {"containers": [{"name": "c", "image": "i"}]},
}


@pytest.fixture
def api():
    fake = FakeKubernetesApi()
    yield fake
    fake.close()


def call(api, method, path, body=None, content_type="application/json"):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(api.url + path, data=data, method=method, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_missing_object_is_a_not_found_status():
    fake = FakeKubernetesApi()
    try:
        code, body = call(fake, "GET", "/api/v1/namespaces/team/pods/nope")
        status = json.loads(body)
        assert code == 404 and (status["kind"], status["reason"], status["code"]) == ("Status", "NotFound", 404)
        assert status["message"] == 'pods "nope" not found'
    finally:
        fake.close()


def test_creating_twice_is_already_exists(api):
    assert call(api, "POST", "/api/v1/namespaces/team/pods", POD)[0] == 201
    code, body = call(api, "POST", "/api/v1/namespaces/team/pods", POD)
    assert code == 409 and json.loads(body)["reason"] == "AlreadyExists"


def test_a_dry_run_stores_nothing(api):
    assert call(api, "POST", "/api/v1/namespaces/team/pods?dryRun=All", POD)[0] == 201
    assert not api.objects


def test_server_side_apply_needs_a_field_manager_and_records_it(api):
    path = "/apis/kubeflow.org/v1/namespaces/team/pytorchjobs/j"
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}}
    assert call(api, "PATCH", path, job, "application/apply-patch+yaml")[0] == 400
    assert call(api, "PATCH", path + "?fieldManager=me", job, "application/apply-patch+yaml")[0] == 201
    assert api.get(path)["metadata"]["managedFields"][0]["manager"] == "me"


def test_a_stale_resource_version_is_a_conflict(api):
    api.put(POD)
    stale = {"metadata": {"resourceVersion": "0", "labels": {"a": "b"}}}
    code, body = call(api, "PATCH", "/api/v1/namespaces/team/pods/p", stale, "application/merge-patch+json")
    assert code == 409 and json.loads(body)["reason"] == "Conflict"


def test_a_watch_streams_changes_as_json_lines(api):
    threading.Timer(0.1, lambda: api.put(POD)).start()
    with urllib.request.urlopen(api.url + "/api/v1/namespaces/team/pods?watch=true&timeoutSeconds=1", timeout=5) as s:
        events = [json.loads(line) for line in s.read().decode().splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "p")]


def test_a_followed_log_streams_lines_appended_later_with_timestamps(api):
    api.put(POD)
    api.log("team", "p", "one", at="2026-12-04T10:00:00.000000000Z")
    threading.Timer(0.1, lambda: api.log("team", "p", "two", at="2026-12-04T10:00:01.000000000Z")).start()
    began = time.monotonic()
    with urllib.request.urlopen(
        api.url + "/api/v1/namespaces/team/pods/p/log?follow=true&timestamps=true&timeoutSeconds=0.5", timeout=5
    ) as s:
        text = s.read().decode()
    assert text.splitlines() == ["2026-12-04T10:00:00.000000000Z one", "2026-12-04T10:00:01.000000000Z two"]
    assert time.monotonic() - began < 3


def test_a_request_the_authorizer_refuses_is_a_forbidden_status_naming_verb_resource_and_scope():
    fake = FakeKubernetesApi(allow=lambda verb, group, resource, namespace: namespace is not None)
    try:
        code, body = call(fake, "GET", "/api/v1/nodes")
        status = json.loads(body)
        assert (code, status["reason"]) == (403, "Forbidden")
        assert status["message"] == (
            'nodes is forbidden: User "me" cannot list resource "nodes" in API group "" at the cluster scope'
        )
        assert call(fake, "GET", "/api/v1/namespaces/team/pods")[0] == 200
    finally:
        fake.close()


def test_version_answers_the_version_info(api):
    code, body = call(api, "GET", "/version/")
    assert code == 200 and json.loads(body)["gitVersion"].startswith("v1.35.")


def test_a_forbidden_request_is_rbacs_403_status(api):
    api.allow = lambda verb, group, resource, namespace: resource != "leases"
    code, body = call(api, "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cluster-autoscaler")
    status = json.loads(body)
    assert code == 403 and (status["reason"], status["code"]) == ("Forbidden", 403)
    assert status["message"].startswith('leases.coordination.k8s.io "cluster-autoscaler" is forbidden: User "')
    assert (
        'cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"'
        in (status["message"])
    )


def test_deleting_a_namespace_deletes_what_it_holds(api):
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    assert call(api, "POST", "/api/v1/namespaces/team/pods", POD)[0] == 201
    assert call(api, "DELETE", "/api/v1/namespaces/team")[0] == 200
    assert api.get("/api/v1/namespaces/team/pods/p") is None


def _owned_pod(owner_uid: str) -> dict:
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "eval", "uid": owner_uid, "controller": True}
    return {**POD, "metadata": {**POD["metadata"], "ownerReferences": [ref]}}


def test_deleting_a_batch_job_with_no_propagation_policy_orphans_its_pods(api):
    api.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "eval", "namespace": "team", "uid": "u1"}})
    api.put(_owned_pod("u1"))
    assert call(api, "DELETE", "/apis/batch/v1/namespaces/team/jobs/eval")[0] == 200
    left = api.get("/api/v1/namespaces/team/pods/p")
    assert left is not None and not left["metadata"].get("ownerReferences")


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
def test_deleting_an_owner_with_a_cascading_propagation_policy_deletes_its_dependents(api, policy):
    api.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "eval", "namespace": "team", "uid": "u1"}})
    api.put(_owned_pod("u1"))
    assert call(api, "DELETE", f"/apis/batch/v1/namespaces/team/jobs/eval?propagationPolicy={policy}")[0] == 200
    assert api.get("/api/v1/namespaces/team/pods/p") is None


def test_deleting_a_custom_resource_with_no_propagation_policy_deletes_its_dependents(api):
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "eval", "namespace": "team"}}
    api.put({**job, "metadata": {**job["metadata"], "uid": "u1"}})
    api.put(_owned_pod("u1"))
    assert call(api, "DELETE", "/apis/kubeflow.org/v1/namespaces/team/pytorchjobs/eval")[0] == 200
    assert api.get("/api/v1/namespaces/team/pods/p") is None


def test_a_list_selects_by_set_based_label_requirements_as_the_api_server_parses_them(api):
    """`in`, `notin`, bare key (exists) and `!key`, commas inside a value list not splitting requirements."""
    from urllib.parse import quote

    for name, labels in {
        "a": {"app": "eval", "shard": "a"},
        "b": {"app": "eval", "shard": "b"},
        "c": {"app": "eval", "shard": "c"},  # shard not in (a,b)
        "canary": {"app": "eval", "shard": "a", "tier": "canary"},  # tier in (canary)
        "retired": {"app": "eval", "shard": "b", "retired": "yes"},  # has retired
        "other": {"shard": "a"},  # no app
    }.items():
        api.put({**POD, "metadata": {"name": name, "namespace": "team", "labels": labels}})
    selector = quote("app,shard in (a, b),tier notin (canary,x),!retired")
    code, body = call(api, "GET", f"/api/v1/namespaces/team/pods?labelSelector={selector}")
    assert code == 200 and [p["metadata"]["name"] for p in json.loads(body)["items"]] == ["a", "b"]


def _unknown_owner(obj):
    return [("spec", "owner")] if "owner" in obj.get("spec", {}) else []


def test_an_undeclared_field_is_pruned_from_a_create_without_strict_field_validation(api):
    api.undeclared = _unknown_owner
    pod = {**POD, "spec": {**POD["spec"], "owner": "x"}}
    assert call(api, "POST", "/api/v1/namespaces/team/pods", pod)[0] == 201
    assert api.get("/api/v1/namespaces/team/pods/p")["spec"] == POD["spec"]


def test_an_undeclared_field_refuses_a_strict_create_naming_it(api):
    api.undeclared = _unknown_owner
    pod = {**POD, "spec": {**POD["spec"], "owner": "x"}}
    code, body = call(api, "POST", "/api/v1/namespaces/team/pods?fieldValidation=Strict", pod)
    assert (code, json.loads(body)["message"]) == (400, 'strict decoding error: unknown field "spec.owner"')
    assert not api.objects


def test_an_undeclared_field_refuses_a_server_side_apply_whatever_it_asks(api):
    api.undeclared = _unknown_owner
    pod = {**POD, "spec": {**POD["spec"], "owner": "x"}}
    code, body = call(
        api, "PATCH", "/api/v1/namespaces/team/pods/p?fieldManager=me", pod, "application/apply-patch+yaml"
    )
    assert code == 500 and json.loads(body)["message"].endswith(".spec.owner: field not declared in schema")
    assert not api.objects

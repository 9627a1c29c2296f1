"""A fake Kubernetes API server over HTTP, for clients that speak the real wire protocol (the
maintained `kubernetes` client, our own small clients).

What it serves, as kube-apiserver does (kubernetes/kubernetes staging/src/k8s.io/apiserver
pkg/endpoints/handlers and apimachinery pkg/api/errors at v1.35.0):
- REST paths `/api/v1/...` and `/apis/GROUP/VERSION/...`, namespaced (`namespaces/NS/PLURAL/NAME`)
  and cluster-scoped (`PLURAL/NAME`), with the `status` and `log` subresources;
- GET, LIST (`KindList` with `metadata.resourceVersion`; equality and set-based `labelSelector`
  requirements (_label_requirements), equality `fieldSelector` terms; `limit` and `continue` pages),
  POST, PUT, PATCH (merge, strategic-merge as merge, and server-side apply
  `application/apply-patch+yaml`, which needs `fieldManager`), DELETE; `dryRun=All` persists
  nothing; a DELETE's `propagationPolicy` (query or DeleteOptions body) is the garbage collector's,
  done at once: Orphan drops the dependents' owner reference, Background and
  Foreground delete them, and a batch/v1 Job's default is Orphan (_default_propagation);
- WATCH (`?watch=true`): a chunked stream of `{"type": ..., "object": ...}` lines from the given
  resourceVersion, ended by `timeoutSeconds` (each of its seconds `watch_second` long: a test that only waits
  out a client's watch windows shortens them, the client still asking in whole seconds); from a resourceVersion
  older than the last `compact()`, one `ERROR` event with the 410 Expired Status the watch cache answers
  ("too old resource version": staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go,
  errors.NewResourceExpired); with `drop_watches`, a chunk cut short and the connection closed;
- pod logs (`.../pods/NAME/log`): text, `timestamps=true` prefixes RFC 3339 times, `follow=true`
  streams lines appended while the request is open and ends once the pod has ended (Succeeded,
  Failed or deleted), as the kubelet ends the stream when the container exits; `tailLines=N` the last N;
- failures as `Status` objects with the real reasons and codes: 404 NotFound, 409 AlreadyExists
  and Conflict (stale resourceVersion), 403 Forbidden, 422 Invalid, 400 BadRequest, 415.

Admission is pluggable: `admit(verb, obj, old) -> (code, reason, message) | None` runs on every write
(dry runs included), as a ValidatingAdmissionPolicy or webhook would, `old` being the stored object an
UPDATE replaces (None on CREATE: a policy's `oldObject`). So is authorization:
`allow(verb, group, resource, namespace) -> bool` (the Kubernetes verbs get, list, watch, create,
patch, update, delete; namespace None at the cluster scope) runs first on every request, a refusal
being the 403 Forbidden Status the authorization filter answers with (the negotiated Forbidden and
forbiddenMessage in staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go).
Schemas are pluggable too: `undeclared(obj) -> [path]` names the fields of an object that its schema does not
declare (each path a tuple of keys and list indexes). A create, update or merge patch asking `fieldValidation=Strict`
is refused for them with the 400 BadRequest "strict decoding error" naming each; without it (Warn, the default since
v1.23, or Ignore) they are pruned and the rest stored (the API server's Warning header is not sent). A server-side
apply is refused for them whatever it asks, as the API server refuses a patch it cannot type (500 "failed to create
typed patch object", FieldManager.Apply in kubernetes/kubernetes:staging/src/k8s.io/apimachinery/pkg/util/
managedfields/internal/structuredmerge.go@6732d913; fieldValidation=Strict adds only duplicate fields there).
A SubjectAccessReview (`POST /apis/authorization.k8s.io/v1/subjectaccessreviews`) is answered by the RBAC
objects stored here, as the RBAC authorizer matches them (infra/offline/rendered.py), for the review's user and
groups: `status.allowed`, nothing stored.
`GET /version` answers `version` (the version.Info JSON). Deleting a namespace deletes what it
holds (the namespace controller's work, done at once here).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

Admit = Callable[[str, dict, "dict | None"], "tuple[int, str, str] | None"]
Undeclared = Callable[[dict], "list[tuple[str | int, ...]]"]
Allow = Callable[[str, str, str, "str | None"], bool]

# The kinds the fake knows by their plural (others are taken from the stored objects).
KINDS = {
    "pods": "Pod",
    "nodes": "Node",
    "namespaces": "Namespace",
    "events": "Event",
    "configmaps": "ConfigMap",
    "services": "Service",
    "serviceaccounts": "ServiceAccount",
    "secrets": "Secret",
    "deployments": "Deployment",
    "daemonsets": "DaemonSet",
    "jobs": "Job",
    "leases": "Lease",
    "queues": "Queue",
    "podgroups": "PodGroup",
    "pytorchjobs": "PyTorchJob",
    "mpijobs": "MPIJob",
    "tfjobs": "TFJob",
    "xgboostjobs": "XGBoostJob",
    "jaxjobs": "JAXJob",
    "paddlejobs": "PaddleJob",
    "validatingadmissionpolicies": "ValidatingAdmissionPolicy",
    "validatingadmissionpolicybindings": "ValidatingAdmissionPolicyBinding",
    "resourcequotas": "ResourceQuota",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "ec2nodeclasses": "EC2NodeClass",
    "nodepools": "NodePool",
    "nodeclaims": "NodeClaim",
}


def copied(value: Any) -> Any:
    """A deep copy of a JSON value (what the server stores and answers: mappings, lists, strings, numbers, booleans,
    null), made directly rather than through copy.deepcopy's dispatch and memo: a third of deepcopy's CPU on the
    dev plan's resource inputs as JSON. The server copies an object three times a write; anything not JSON is
    deep-copied."""
    kind = type(value)
    if kind is dict:
        return {key: copied(item) for key, item in value.items()}
    if kind is list:
        return [copied(item) for item in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


def merge(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: a null deletes, a mapping merges, anything else replaces."""
    if not isinstance(patch, dict):
        return copied(patch)
    out = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


@dataclass(frozen=True)
class Ref:
    """Where a request points: API prefix, namespace (or None), plural, name, subresource."""

    prefix: str
    namespace: str | None
    plural: str
    name: str | None = None
    sub: str | None = None

    @classmethod
    def parse(cls, path: str) -> Ref:
        parts = [p for p in path.split("/") if p]
        take = 2 if parts[0] == "api" else 3
        prefix, rest = "/".join(parts[:take]), parts[take:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        elif len(rest) == 2 and rest[0] == "namespaces":  # a namespace itself
            return cls(prefix, None, "namespaces", rest[1])
        return cls(prefix, namespace, rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)

    @property
    def api_version(self) -> str:
        return self.prefix.split("/", 1)[1]


@dataclass
class Watcher:
    ref: Ref
    events: list[dict] = field(default_factory=list)
    wake: threading.Condition = field(default_factory=threading.Condition)


class FakeKubernetesApi:
    """An in-memory API server. `url` is its address; `put(obj)` seeds an object; `logs` holds each
    pod's log lines as (timestamp, text) per container."""

    def __init__(self, admit: Admit | None = None, allow: Allow | None = None) -> None:
        self.version = {"major": "1", "minor": "35", "gitVersion": "v1.35.0-eks-4096722", "platform": "linux/amd64"}
        self.objects: dict[tuple[str, str | None, str, str], dict] = {}
        self.logs: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
        self.requests: list[tuple[str, str]] = []
        self.pages: list[tuple[str, int]] = []  # (plural, items) of each list answered
        self.admit = admit
        self.allow = allow
        self.undeclared: Undeclared | None = None
        self._version = 0
        self._compacted = 0  # the resourceVersion of the last compact()
        self.watch_second = 1.0  # how long a second of a watch's timeoutSeconds lasts
        self.drop_watches = False  # a watch's connection closes mid-chunk, as a proxy or a restarted server does
        self._history: list[tuple[int, Ref, str, dict]] = []
        self._bound_rules: tuple[Any, list] = (None, [])  # (RBAC state and subject, the rules bound): _review
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY, as Go's net package sets on every TCP connection the API server accepts
            # (golang/go:src/net/tcpsock.go@go1.24.0, TCPConn.SetNoDelay: "The default is true"). With
            # Nagle's algorithm on, a body written after its headers waited for the client's delayed
            # ACK: 40 ms a request.
            disable_nagle_algorithm = True
            # a response's headers and body leave in one write, one wake-up of the client's thread, not two (the
            # handler flushes after each request; a stream flushes its headers and each chunk itself)
            wbufsize = 64 * 1024

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._serve(self, "GET")

            def do_POST(self) -> None:
                fake._serve(self, "POST")

            def do_PUT(self) -> None:
                fake._serve(self, "PUT")

            def do_PATCH(self) -> None:
                fake._serve(self, "PATCH")

            def do_DELETE(self) -> None:
                fake._serve(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- seeding and inspection -------------------------------------------------------------

    @staticmethod
    def path_of(obj: dict) -> str:
        group_version = obj["apiVersion"]
        prefix = "api/v1" if group_version == "v1" else f"apis/{group_version}"
        plural = next((p for p, k in KINDS.items() if k == obj["kind"]), obj["kind"].lower() + "s")
        namespace = obj["metadata"].get("namespace")
        return f"/{prefix}" + (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}/{obj['metadata']['name']}"

    def put(self, obj: dict) -> dict:
        """Store `obj` as if created (a seed: no admission)."""
        ref = Ref.parse(self.path_of(obj))
        with self._lock:
            return self._store(ref, copied(obj), "ADDED")

    def get(self, obj_path: str) -> dict | None:
        ref = Ref.parse(obj_path)
        return copied(self.objects.get(self._key(ref)))

    def delete_now(self, obj_path: str) -> None:
        ref = Ref.parse(obj_path)
        with self._lock:
            found = self.objects.pop(self._key(ref), None)
            if found:
                self._record(ref, "DELETED", found)

    def log(self, namespace: str, pod: str, text: str, container: str = "", at: str | None = None) -> None:
        """Append a line to a pod's log (`at`: its RFC 3339 time, default now)."""
        stamp = at or time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
        with self._lock:
            self.logs.setdefault((namespace, pod, container), []).append((stamp, text))
            self._changed.notify_all()

    # --- storage ----------------------------------------------------------------------------

    def compact(self) -> None:
        """Forget the history so far, as etcd's compaction and the watch cache's window do: a watch from an older
        resourceVersion is answered 410."""
        with self._lock:
            self._compacted = self._version

    @staticmethod
    def _key(ref: Ref) -> tuple[str, str | None, str, str]:
        return (ref.prefix, ref.namespace, ref.plural, ref.name or "")

    def _record(self, ref: Ref, kind: str, obj: dict) -> None:
        self._history.append((self._version, ref, kind, copied(obj)))
        self._changed.notify_all()

    def _store(self, ref: Ref, obj: dict, event: str) -> dict:
        self._version += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self._version)
        meta.setdefault("uid", f"uid-{self._version}")
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if ref.namespace:
            meta["namespace"] = ref.namespace
        self.objects[self._key(ref)] = obj
        self._record(ref, event, obj)
        return copied(obj)

    # --- HTTP -------------------------------------------------------------------------------

    def _serve(self, h: BaseHTTPRequestHandler, verb: str) -> None:
        url = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        self.requests.append((verb, h.path))
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        if url.path.rstrip("/") == "/version":
            return _send(h, 200, self.version)
        try:
            ref = Ref.parse(url.path)
        except (IndexError, ValueError):
            return _status(h, 404, "NotFound", "the server could not find the requested resource")
        if self._forbidden(h, verb, ref, query):
            return None
        if ref.sub == "log":
            return self._serve_log(h, ref, query)
        if verb == "GET" and ref.name is None:
            try:
                _label_requirements(query.get("labelSelector", ""))
            except ValueError as exc:
                return _status(h, 400, "BadRequest", str(exc))
            if _true(query.get("watch")):
                return self._serve_watch(h, ref, query)
            return self._serve_list(h, ref, query)
        if verb == "GET":
            found = self.objects.get(self._key(ref))
            return _send(h, 200, found) if found else _not_found(h, ref)
        if verb == "DELETE":
            options = _decode_quietly(body)
            return self._serve_delete(h, ref, {**query, **{k: v for k, v in options.items() if k in _DELETE_OPTIONS}})
        try:
            incoming = _decode(body, h.headers.get("Content-Type", ""))
        except ValueError as exc:
            return _status(h, 400, "BadRequest", str(exc))
        with self._lock:
            if verb == "POST":
                return self._create(h, ref, incoming, query)
            return self._update(h, ref, verb, incoming, query)

    def _forbidden(self, h: BaseHTTPRequestHandler, verb: str, ref: Ref, query: dict) -> bool:
        if self.allow is None:
            return False
        action = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(verb, "get")
        if verb == "GET" and ref.name is None:
            action = "watch" if _true(query.get("watch")) else "list"
        group = "" if ref.prefix == "api/v1" else ref.prefix.split("/")[1]
        resource = f"{ref.plural}/{ref.sub}" if ref.sub else ref.plural
        if self.allow(action, group, resource, ref.namespace):
            return False
        # apimachinery's NewForbidden(GroupResource, name, forbiddenMessage): `pytorchjobs.kubeflow.org "x" is
        # forbidden: User "me" cannot delete resource "pytorchjobs" in API group "kubeflow.org" in the namespace "t"`
        where = f'in the namespace "{ref.namespace}"' if ref.namespace else "at the cluster scope"
        qualified = f"{ref.plural}.{group}" if group else ref.plural
        named = f'"{ref.name}" ' if ref.name else ""
        _status(
            h,
            403,
            "Forbidden",
            f'{qualified} {named}is forbidden: User "me" cannot {action} resource "{resource}" in API group '
            f'"{group}" {where}',
            details={"name": ref.name, "group": group, "kind": ref.plural},
        )
        return True

    def _strictly_refused(self, h: BaseHTTPRequestHandler, obj: dict, query: dict) -> bool:
        """Refuse `obj`'s undeclared fields if the request asks fieldValidation=Strict, else prune them (in place)."""
        undeclared = self.undeclared(obj) if self.undeclared else []
        if undeclared and query.get("fieldValidation") == "Strict":
            fields = ", ".join(f'unknown field "{_field(path)}"' for path in undeclared)
            _status(h, 400, "BadRequest", f"strict decoding error: {fields}")
            return True
        for path in undeclared:
            parent = obj
            for key in path[:-1]:
                parent = parent[key]
            del parent[path[-1]]
        return False

    def _denied(self, h: BaseHTTPRequestHandler, verb: str, obj: dict, old: dict | None = None) -> bool:
        answer = self.admit(verb, obj, copied(old)) if self.admit else None
        if answer:
            _status(h, *answer)
        return bool(answer)

    def _review(self, h: BaseHTTPRequestHandler, review: dict) -> None:
        """A SubjectAccessReview's answer from the stored Roles, ClusterRoles and their bindings."""
        from infra.offline.rendered import Call, allows, rules_bound

        spec = review.get("spec") or {}
        who, groups = spec.get("user"), set(spec.get("groups") or [])
        attributes = spec.get("resourceAttributes") or {}
        rbac = [o for (prefix, _, _, _), o in self.objects.items() if prefix == "apis/rbac.authorization.k8s.io/v1"]
        # the rules bound to the subject, found again once the RBAC objects change (each write bumps the version, each
        # delete drops an object): a check asks hundreds of reviews of one subject in a row
        key = (self._version, tuple(map(id, rbac)), who, frozenset(groups))
        if self._bound_rules[0] != key:
            rules = rules_bound(
                rbac,
                lambda s: (
                    (s.get("kind") == "Group" and s.get("name") in groups)
                    or (s.get("kind") == "User" and s.get("name") == who)
                ),
            )
            self._bound_rules = (key, rules)
        rules = self._bound_rules[1]
        resource = attributes.get("resource", "")
        if attributes.get("subresource"):
            resource = f"{resource}/{attributes['subresource']}"
        call = Call(
            attributes.get("verb", ""),
            attributes.get("group", ""),
            resource,
            attributes.get("namespace", ""),
            attributes.get("name") or None,
        )
        return _send(h, 201, {**review, "status": {"allowed": allows(rules, call)}})

    def _create(self, h: BaseHTTPRequestHandler, ref: Ref, obj: dict, query: dict) -> None:
        if ref.plural == "subjectaccessreviews":
            return self._review(h, obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + f"{self._version + 1:05d}"
        target = Ref(ref.prefix, ref.namespace, ref.plural, meta.get("name"))
        if not target.name:
            return _status(
                h,
                422,
                "Invalid",
                f'{ref.plural} "" is invalid: metadata.name: Required value: name or generateName is required',
            )
        if self._key(target) in self.objects:
            return _status(
                h,
                409,
                "AlreadyExists",
                f'{ref.plural} "{target.name}" already exists',
                details={"name": target.name, "kind": ref.plural},
            )
        if self._strictly_refused(h, obj, query):
            return None
        if self._denied(h, "CREATE", obj):
            return None
        if query.get("dryRun") == "All":
            return _send(h, 201, obj)
        return _send(h, 201, self._store(target, obj, "ADDED"))

    def _update(self, h: BaseHTTPRequestHandler, ref: Ref, verb: str, patch: dict, query: dict) -> None:
        key, kind = self._key(ref), h.headers.get("Content-Type", "").split(";")[0]
        current = self.objects.get(key)
        if kind == "application/apply-patch+yaml":
            if not query.get("fieldManager"):
                return _status(
                    h,
                    400,
                    "BadRequest",
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
                )
            undeclared = self.undeclared(patch) if self.undeclared else []
            if undeclared:
                meta = patch.get("metadata") or {}
                return _status(
                    h,
                    500,
                    "InternalError",
                    f"failed to create typed patch object ({meta.get('namespace', '')}/{meta.get('name')}; "
                    f"{patch.get('apiVersion')}, Kind={patch.get('kind')}): {_field(undeclared[0], '.')}: "
                    "field not declared in schema",
                )
            merged = merge(current or {}, patch)
            merged.setdefault("metadata", {})["managedFields"] = [
                {"manager": query["fieldManager"], "operation": "Apply", "apiVersion": patch.get("apiVersion", "")}
            ]
        elif current is None:
            return _not_found(h, ref)
        elif verb == "PUT" or ref.sub == "status" and verb == "PUT":
            merged = patch
        elif kind in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            merged = merge(current, patch)
        else:
            return _status(
                h,
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - "
                "accepted media types include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml",
            )
        if kind != "application/apply-patch+yaml" and self._strictly_refused(h, merged, query):
            return None
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if current and wanted and wanted != current["metadata"]["resourceVersion"]:
            return _status(
                h,
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {ref.plural} "{ref.name}": the object '
                "has been modified; please apply your changes to the latest version and try again",
            )
        if self._denied(h, "UPDATE" if current else "CREATE", merged, current):
            return None
        if query.get("dryRun") == "All":
            return _send(h, 200, merged)
        return _send(h, 200 if current else 201, self._store(ref, merged, "MODIFIED" if current else "ADDED"))

    def _serve_delete(self, h: BaseHTTPRequestHandler, ref: Ref, query: dict) -> None:
        with self._lock:
            found = self.objects.get(self._key(ref))
            if found is None:
                return _not_found(h, ref)
            if query.get("dryRun") != "All":
                del self.objects[self._key(ref)]
                self._version += 1
                self._record(ref, "DELETED", found)
                self._collect(ref, found, query.get("propagationPolicy") or _default_propagation(ref))
                if ref.plural == "namespaces" and ref.namespace is None:
                    for key in [k for k in self.objects if k[1] == ref.name]:
                        self._record(Ref(key[0], key[1], key[2], key[3]), "DELETED", self.objects.pop(key))
        _send(
            h,
            200,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": ref.name, "kind": ref.plural, "uid": found["metadata"].get("uid")},
            },
        )

    def _collect(self, ref: Ref, owner: dict, policy: str) -> None:
        """The garbage collector's work on the deleted owner's dependents in its namespace, done at once: Orphan
        removes their owner reference to it, Background and Foreground delete them (and theirs)."""
        uid = owner["metadata"].get("uid")
        if not uid:
            return
        for key, obj in list(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if key[1] != ref.namespace or not any(r.get("uid") == uid for r in refs):
                continue
            dependent = Ref(key[0], key[1], key[2], key[3])
            if policy == "Orphan":
                obj["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                self._version += 1
                self._record(dependent, "MODIFIED", obj)
            else:
                del self.objects[key]
                self._version += 1
                self._record(dependent, "DELETED", obj)
                self._collect(dependent, obj, policy)

    def _matching(self, ref: Ref, obj_ref: Ref, obj: dict, query: dict) -> bool:
        if (obj_ref.prefix, obj_ref.plural) != (ref.prefix, ref.plural):
            return False
        if ref.namespace and obj_ref.namespace != ref.namespace:
            return False
        return _selects(query.get("labelSelector", ""), obj["metadata"].get("labels") or {}) and _fields_select(
            query.get("fieldSelector", ""), obj
        )

    def _serve_list(self, h: BaseHTTPRequestHandler, ref: Ref, query: dict) -> None:
        # Pages: `limit` items from the `continue` token's offset, and a token while more remain (the real
        # token is opaque; this one is the offset). Only the page is copied.
        start = int(query.get("continue") or 0)
        with self._lock:
            items = [
                o
                for (prefix, ns, plural, name), o in sorted(self.objects.items(), key=lambda item: str(item[0]))
                if self._matching(ref, Ref(prefix, ns, plural, name), o, query)
            ]
            limit = int(query.get("limit") or 0) or len(items)
            page, more = copied(items[start : start + limit]), start + limit < len(items)
            version = str(self._version)
        kind = KINDS.get(ref.plural) or (page[0]["kind"] if page else ref.plural.capitalize())
        self.pages.append((ref.plural, len(page)))
        _send(
            h,
            200,
            {
                "kind": f"{kind}List",
                "apiVersion": ref.api_version,
                "metadata": {"resourceVersion": version, **({"continue": str(start + limit)} if more else {})},
                "items": page,
            },
        )

    def _serve_watch(self, h: BaseHTTPRequestHandler, ref: Ref, query: dict) -> None:
        since = int(query.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 5) * self.watch_second
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.flush()
        sent = 0
        if self.drop_watches:
            h.wfile.write(b'40\r\n{"type": "ADD')  # a chunk cut short, then the connection closes
            h.close_connection = True
            return
        try:
            if 0 < since < self._compacted:
                expired = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 410}
                expired |= {"reason": "Expired", "message": f"too old resource version: {since} ({self._compacted})"}
                _chunk(h, json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
                _chunk(h, b"")
                return
            while time.monotonic() < deadline:
                with self._lock:
                    pending = [(v, r, k, o) for v, r, k, o in self._history[sent:]]
                    sent = len(self._history)
                    if not pending:
                        self._changed.wait(timeout=min(0.05, max(0.0, deadline - time.monotonic())))
                        continue
                for version, obj_ref, kind, obj in pending:
                    if version >= since and self._matching(ref, obj_ref, obj, query):
                        _chunk(h, json.dumps({"type": kind, "object": obj}).encode() + b"\n")
            _chunk(h, b"")
        except (BrokenPipeError, ConnectionResetError):
            return

    def _serve_log(self, h: BaseHTTPRequestHandler, ref: Ref, query: dict) -> None:
        pod = self.objects.get(self._key(Ref(ref.prefix, ref.namespace, "pods", ref.name)))
        if pod is None:
            return _not_found(h, Ref(ref.prefix, ref.namespace, "pods", ref.name))
        containers = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        container = query.get("container") or (containers[0] if len(containers) == 1 else "")
        if not container and len(containers) > 1:
            return _status(
                h,
                400,
                "BadRequest",
                f"a container name must be specified for pod {ref.name}, choose one of: [{' '.join(containers)}]",
            )
        stamps, follow = _true(query.get("timestamps")), _true(query.get("follow"))
        lines_key = (
            ref.namespace or "",
            ref.name or "",
            container if (ref.namespace, ref.name, container) in {k for k in self.logs} else "",
        )
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.flush()
        sent, deadline = 0, time.monotonic() + float(query.get("timeoutSeconds") or 2)
        if query.get("tailLines"):  # the last N lines only (the kubelet's tailLines)
            with self._lock:
                sent = max(0, len(self.logs.get(lines_key, [])) - int(query["tailLines"]))
        pod_key = self._key(Ref(ref.prefix, ref.namespace, "pods", ref.name))
        try:
            while True:
                with self._lock:
                    lines = self.logs.get(lines_key, [])[sent:]
                    sent += len(lines)
                    # the kubelet ends a followed stream when the container has exited: the pod ended or gone
                    now = self.objects.get(pod_key)
                    exited = now is None or (now.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                    if not lines and follow and not exited and time.monotonic() < deadline:
                        self._changed.wait(timeout=0.05)
                        continue
                for stamp, text in lines:
                    _chunk(h, (f"{stamp} {text}\n" if stamps else f"{text}\n").encode())
                if not follow or exited or time.monotonic() >= deadline:
                    break
            _chunk(h, b"")
        except (BrokenPipeError, ConnectionResetError):
            return


# The DeleteOptions a DELETE's body may carry that the fake reads, as it reads its query's.
_DELETE_OPTIONS = ("propagationPolicy",)


# The resources whose DELETE orphans their dependents when it names no propagation policy, for backwards
# compatibility: a batch/v1 Job (jobStrategy.DefaultGarbageCollectionPolicy, kubernetes/kubernetes:pkg/registry/
# batch/job/strategy.go@36f36813ae40015c94d2df1493447edaa145dd5a) and a core/v1 ReplicationController
# (rcStrategy's, pkg/registry/core/replicationcontroller/strategy.go@5a98d4dbb4ac460d6ae8219336c5951b45dae1e8).
SELF_ORPHANING = (("apis/batch/v1", "jobs"), ("api/v1", "replicationcontrollers"))


def _default_propagation(ref: Ref) -> str:
    """A DELETE's propagation policy when it names none: Orphan for SELF_ORPHANING, else Background (every other
    resource here, custom resources included)."""
    return "Orphan" if (ref.prefix, ref.plural) in SELF_ORPHANING else "Background"


def _field(path: tuple[str | int, ...], lead: str = "") -> str:
    """A field's path as the API server writes it: spec.containers[0].name (lead "."'s: .spec.containers[0].name)."""
    return lead + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")


def _decode_quietly(body: bytes) -> dict:
    try:
        return _decode(body, "application/json")
    except ValueError:
        return {}


def _true(value: str | None) -> bool:
    """A boolean query parameter as the API server parses it (Go's strconv.ParseBool)."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def _decode(body: bytes, content_type: str) -> dict:
    if not body:
        return {}
    try:
        loaded = yaml.safe_load(body) if "yaml" in content_type else json.loads(body)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body of the request could not be decoded: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ValueError("the body of the request is not an object")
    return loaded


# A labelSelector as the API server parses it (a list's `labelSelector` goes through labels.Parse:
# Convert_string_To_labels_Selector, kubernetes/apimachinery:pkg/apis/meta/v1/conversion.go@v0.35.3): requirements
# joined by commas, each `key=v`, `key==v`, `key!=v`, `key in (v1,v2)`, `key notin (v1,v2)`, `key` (exists) or `!key`;
# its lexer's tokens are the special symbols `= ! ( ) , > <` (`!=` and `==` as one) and runs of anything else, blanks
# between them ignored (Lexer, Parser.parse and parseRequirement in pkg/labels/selector.go@v0.35.3). `>`/`<` are not
# served here.
_LABEL_TOKEN = re.compile(r"\s*(!=|==|[=!(),<>]|[^\s=!(),<>]+)")
_LABEL_SYMBOLS = {"", "=", "==", "!=", "!", "(", ")", ",", ">", "<"}  # "": the end of the string


def _label_requirements(selector: str) -> list[tuple[str, str, frozenset[str]]]:
    """(key, operator, values) per requirement, the operator one of in, notin, exists, !; ValueError when the API
    server would refuse the selector."""
    tokens, at, found = [*_LABEL_TOKEN.findall(selector), ""], 0, []
    while tokens[at]:
        absent = tokens[at] == "!"
        key, at = tokens[at + absent], at + 1 + absent
        if key in _LABEL_SYMBOLS:
            raise ValueError(f"unable to parse requirement: found '{key}', expected: identifier")
        if absent or tokens[at] in (",", ""):
            op, values = ("!" if absent else "exists"), frozenset[str]()
        elif tokens[at] in ("in", "notin") and tokens[at + 1] == "(" and ")" in tokens[at:]:
            close = tokens.index(")", at)
            op, values = tokens[at], frozenset(t for t in tokens[at + 2 : close] if t != ",")
            at = close + 1
        elif tokens[at] in ("=", "==", "!="):
            value = tokens[at + 1] if tokens[at + 1] not in (",", "") else ""
            op, values = ("notin" if tokens[at] == "!=" else "in"), frozenset([value])
            at += 2 if value else 1
        else:
            raise ValueError(f"unable to parse requirement: found '{tokens[at]}' after '{key}'")
        found.append((key, op, values))
        if tokens[at] == "," and tokens[at + 1]:
            at += 1
        elif tokens[at]:
            raise ValueError(f"found '{tokens[at]}', expected: ',' or 'end of string'")
    return found


def _selects(selector: str, labels: dict) -> bool:
    """Every requirement holds (Requirement.Matches, pkg/labels/selector.go@v0.35.3): a label's absence satisfies
    notin (and !=) and ! only."""
    for key, op, values in _label_requirements(selector):
        if op == "in" and labels.get(key) not in values:
            return False
        if op == "notin" and key in labels and labels[key] in values:
            return False
        if (op == "exists" and key not in labels) or (op == "!" and key in labels):
            return False
    return True


def _fields_select(selector: str, obj: dict) -> bool:
    for term in filter(None, selector.split(",")):
        key, value = term.split("=", 1)
        found: Any = obj
        for part in key.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        if str(found) != value:
            return False
    return True


def _send(h: BaseHTTPRequestHandler, code: int, body: dict) -> None:
    data = json.dumps(body).encode()
    h.send_response(code)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def _chunk(h: BaseHTTPRequestHandler, data: bytes) -> None:
    h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    h.wfile.flush()


def _status(h: BaseHTTPRequestHandler, code: int, reason: str, message: str, details: dict | None = None) -> None:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    _send(h, code, body)


def _not_found(h: BaseHTTPRequestHandler, ref: Ref) -> None:
    _status(h, 404, "NotFound", f'{ref.plural} "{ref.name}" not found', details={"name": ref.name, "kind": ref.plural})

"""The schemas of the custom resources the program declares itself, for `higgsfield check`.

kubernetes-validate bundles the built-in kinds only. For Karpenter's NodePool and EC2NodeClass the
schema is the CRD's own `openAPIV3Schema` (the served, stored version), kept as data in
infra/offline/data/crds/ with the tag it was read at: the `spec` only, without descriptions, written by
this module's `extract` from the CRD file (refresh on a pin bump, from a mirror of the repository):

    git show v1.14.1:pkg/apis/crds/karpenter.sh_nodepools.yaml | python -m infra.offline.crd_schemas \
        aws/karpenter-provider-aws:pkg/apis/crds/karpenter.sh_nodepools.yaml@v1.14.1 \
        > infra/offline/data/crds/NodePool.karpenter.sh.v1.json

(and the same for karpenter.k8s.aws_ec2nodeclasses.yaml into EC2NodeClass.karpenter.k8s.aws.v1.json).

Validation is as strict as the API server with `--validate=strict` on the structural part: types,
enums, patterns, bounds, required fields, and no field the schema does not declare. The CRD's CEL
rules (x-kubernetes-validations) are checked on a real cluster only: `kubectl apply --dry-run=server`
of `higgsfield plan STACK --manifests` (docs/karpenter.md).

The schema's `default`s are what the API server fills in where an object leaves a field out (`defaulted`): validation
sees the object with them, as the API server's does, and `higgsfield verify` (kube.node-classes, kube.node-pools) and
`higgsfield diff` (infra/offline/node_class_drift.py) compare the planned object with them, as the API server holds it.
The other custom resources the plan makes are Volcano's Queues, whose CRD defaults `weight` to 1 and
`dequeueStrategy` to traverse (volcano-sh/volcano:installer/helm/chart/volcano/crd/bases/
scheduling.volcano.sh_queues.yaml@v1.15.1); their schema is not kept: no check compares a queue's spec with the plan
(kube.queues reads its state, kube.cluster-made the default queue's `reclaimable`, which has no default there).
"""

from __future__ import annotations

import copy
import functools
import json
import sys
from importlib import resources
from typing import Any

import jsonschema
import yaml

FOLDER = "data/crds"
# The apiVersion/kind pairs with a kept schema: file name KIND.GROUP.VERSION.json
KINDS = {("karpenter.sh/v1", "NodePool"), ("karpenter.k8s.aws/v1", "EC2NodeClass")}


def _prune(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _prune(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_prune(v) for v in schema]
    return schema


def extract(crd: dict, source: str) -> dict:
    """The kept part of a CRD: its served and stored version's openAPIV3Schema, spec only, without
    descriptions, with where it was read."""
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served") and v.get("storage")]
    schema = version["schema"]["openAPIV3Schema"]
    spec = _prune(schema["properties"]["spec"])
    return {
        "source": source,
        "group": crd["spec"]["group"],
        "version": version["name"],
        "kind": crd["spec"]["names"]["kind"],
        "required": schema.get("required", []),
        "spec": spec,
    }


def _json_schema(node: Any) -> Any:
    """An OpenAPI v3 structural schema as JSON Schema: int-or-string made explicit, objects with
    declared properties closed to others (the API server prunes or, strict, refuses them)."""
    if isinstance(node, list):
        return [_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if (
        node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _file(api_version: str, kind: str) -> str:
    group, version = api_version.split("/")
    return f"{kind}.{group}.{version}.json"


@functools.cache
def kept(api_version: str, kind: str) -> dict:
    return json.loads(resources.files("infra.offline").joinpath(FOLDER, _file(api_version, kind)).read_text())


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    data = kept(api_version, kind)
    schema = {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", *data["required"]],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": {"type": "object"},
            "spec": _json_schema(data["spec"]),
        },
        "additionalProperties": False,
    }
    return jsonschema.validators.Draft7Validator(schema)


def _default(value: Any, schema: Any) -> None:
    """Fill in `value`'s defaults in place as the API server does by a CRD's structural schema (Default,
    kubernetes/apiextensions-apiserver:pkg/apiserver/schema/defaulting/algorithm.go@v0.35.0): a property that is
    absent, or null where the schema does not allow null, takes a copy of its default; then each property present,
    the defaulted ones included, is defaulted by its own schema, each list item by the items' schema, each value of a
    map by its values' schema. So a default applies where its parent object is in the value or is itself a default,
    never to a value the object sets, and never to a list item's field inside a list that is absent. (The algorithm
    also gives a null map value or list item its schema's default; no kept schema has such a default.)"""
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, prop in properties.items():
            if "default" in prop and (value.get(key) is None and not (key in value and prop.get("nullable"))):
                value[key] = copy.deepcopy(prop["default"])
        for key, item in value.items():
            _default(item, properties[key] if key in properties else schema.get("additionalProperties"))
    elif isinstance(value, list):
        for item in value:
            _default(item, schema.get("items"))


def defaulted(obj: dict) -> dict:
    """`obj` as the API server holds it once written: a copy, its spec's CRD schema defaults filled in where it leaves
    a field out (the only part of a kept CRD's schema with defaults is its spec); a kind without a kept schema is
    copied unchanged. What the API server returns is compared with this, never itself defaulted: a real one has
    already filled in every default, so a default it lacks was taken out after."""
    out = copy.deepcopy(obj)
    if has_schema(out) and isinstance(out.get("spec"), dict):
        _default(out["spec"], kept(out["apiVersion"], out["kind"])["spec"])
    return out


def has_schema(obj: dict) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in KINDS


def validate(obj: dict) -> None:
    """Raise jsonschema.ValidationError if `obj` does not fit its CRD's schema once its defaults are filled in (the
    API server defaults a request before it validates it: a required field with a default may be left out). A value
    the offline plan cannot know yet (an ID from AWS) is no error: the deploy fills it in."""
    from infra.offline.evaluate import COMPUTED

    validator = _validator(obj["apiVersion"], obj["kind"])
    errors = [e for e in validator.iter_errors(defaulted(obj)) if e.instance != COMPUTED]
    if errors:
        raise jsonschema.exceptions.best_match(errors)


if __name__ == "__main__":  # the CRD YAML on stdin, its source (owner/repo:path@tag) as the argument
    json.dump(extract(yaml.safe_load(sys.stdin), sys.argv[1]), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")

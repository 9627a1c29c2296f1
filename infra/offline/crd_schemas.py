"""The schemas of the custom resources the program and its example and team jobs create, for `higgsfield check`.

kubernetes-validate bundles the built-in kinds only. For a custom resource the schema is its CRD's own
`openAPIV3Schema` (the served, stored version), kept as data in infra/offline/data/crds/ with the tag it was read at:
the `spec` only, without descriptions, written by this module's `extract` from the CRD file (refresh on a pin bump,
from a mirror of the repository):

    git show v1.14.1:pkg/apis/crds/karpenter.sh_nodepools.yaml | python -m infra.offline.crd_schemas \
        aws/karpenter-provider-aws:pkg/apis/crds/karpenter.sh_nodepools.yaml@v1.14.1 \
        > infra/offline/data/crds/NodePool.karpenter.sh.v1.json

(and the same for karpenter.k8s.aws_ec2nodeclasses.yaml into EC2NodeClass.karpenter.k8s.aws.v1.json, and for
Volcano's scheduling.volcano.sh_queues.yaml, installer/helm/chart/volcano/crd/bases/ at v1.15.1, into
Queue.scheduling.volcano.sh.v1beta1.json). The Training Operator's six job CRDs (kubeflow/trainer:manifests/base/
crds/kubeflow.org_*jobs.yaml@v1.9.4) embed one PodTemplateSpec schema each, the same in all six (generated from the
k8s.io/api of its go.mod, v0.36.3): it is kept once, as a part the kinds name by `$ref`:

    git show v1.9.4:manifests/base/crds/kubeflow.org_pytorchjobs.yaml | python -m infra.offline.crd_schemas \
        --part spec.pytorchReplicaSpecs.additionalProperties.template \
        kubeflow/trainer:manifests/base/crds/kubeflow.org_pytorchjobs.yaml@v1.9.4 \
        > infra/offline/data/crds/PodTemplateSpec.kubeflow.org.v1.json
    git show v1.9.4:manifests/base/crds/kubeflow.org_pytorchjobs.yaml | python -m infra.offline.crd_schemas \
        kubeflow/trainer:manifests/base/crds/kubeflow.org_pytorchjobs.yaml@v1.9.4 \
        infra/offline/data/crds/PodTemplateSpec.kubeflow.org.v1.json \
        > infra/offline/data/crds/PyTorchJob.kubeflow.org.v1.json

(and the same for mpijobs, tfjobs, xgboostjobs, jaxjobs and paddlejobs). `extract` replaces only a subtree equal to
the part, so a kind whose template differs keeps its own.

Validation is as strict as the API server with `--validate=strict` on the structural part: types, enums, patterns,
bounds, required fields, list-type sets' and maps' uniqueness, and no field the schema does not declare (one the API
server would prune from the object it stores, or refuse with fieldValidation=Strict). The CRD's CEL rules
(x-kubernetes-validations) are checked on a real cluster only: `kubectl apply --dry-run=server` of `higgsfield plan
STACK --manifests` (docs/karpenter.md).

The schema's `default`s are what the API server fills in where an object leaves a field out (`defaulted`): validation
sees the object with them, as the API server's does, and `higgsfield verify` (kube.node-classes, kube.node-pools) and
`higgsfield diff` (infra/offline/node_class_drift.py) compare the planned object with them, as the API server holds it.
A Volcano Queue's CRD defaults `weight` to 1 and `dequeueStrategy` to traverse; no check compares a queue's spec with
the plan (kube.queues reads its state, kube.cluster-made the default queue's `reclaimable`, which has no default there).
"""

from __future__ import annotations

import copy
import functools
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from infra.core.names import KUBEFLOW_JOB_KINDS

FOLDER = "data/crds"
# The apiVersion/kind pairs with a kept schema: file name KIND.GROUP.VERSION.json
KINDS = {
    ("karpenter.sh/v1", "NodePool"),
    ("karpenter.k8s.aws/v1", "EC2NodeClass"),
    ("scheduling.volcano.sh/v1beta1", "Queue"),
    *(("kubeflow.org/v1", kind) for kind in KUBEFLOW_JOB_KINDS),
}
REF = "$ref"  # a kept schema's reference to a part, by the part's file name


def _prune(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _prune(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_prune(v) for v in schema]
    return schema


def _served(crd: dict) -> tuple[dict, dict]:
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served") and v.get("storage")]
    return version, version["schema"]["openAPIV3Schema"]


def _with_refs(schema: Any, parts: dict[str, Any]) -> Any:
    """`schema` with each subtree equal to a part's schema replaced by a reference to the part."""
    for name, part in parts.items():
        if schema == part:
            return {REF: name}
    if isinstance(schema, dict):
        return {k: _with_refs(v, parts) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_with_refs(v, parts) for v in schema]
    return schema


def extract(crd: dict, source: str, parts: dict[str, Any] | None = None) -> dict:
    """The kept part of a CRD: its served and stored version's openAPIV3Schema, spec only, without
    descriptions, with where it was read; a subtree equal to one of `parts` (file name -> schema) as its `$ref`."""
    version, schema = _served(crd)
    spec = _with_refs(_prune(schema["properties"]["spec"]), parts or {})
    return {
        "source": source,
        "group": crd["spec"]["group"],
        "version": version["name"],
        "kind": crd["spec"]["names"]["kind"],
        "required": schema.get("required", []),
        "spec": spec,
    }


def extract_part(crd: dict, source: str, path: str) -> dict:
    """A subtree of a CRD's schema that several kept kinds share, without descriptions: `path` names its properties
    from the openAPIV3Schema's (spec.pytorchReplicaSpecs.additionalProperties.template)."""
    _, node = _served(crd)
    for key in path.split("."):
        node = node[key] if key == "additionalProperties" else node["properties"][key]
    return {"source": f"{source} ({path})", "schema": _prune(node)}


# A list-type map's keys (x-kubernetes-list-map-keys) in the JSON Schema `_json_schema` makes, read by `_unique_keys`.
LIST_MAP_KEYS = "listMapKeys"


def _unique_keys(validator: Any, keys: list[str], instance: Any, schema: dict) -> Any:
    """Two entries of a list-type map with one key (the key fields each has, compared as values) are refused as the
    API server refuses them ("Duplicate value": validateListMap, kubernetes/kubernetes:staging/src/k8s.io/
    apiextensions-apiserver/pkg/apiserver/schema/listtype/validation.go@95f08499)."""
    if not validator.is_type(instance, "array"):
        return
    seen: set[str] = set()
    for i, item in enumerate(instance):
        key = {k: item[k] for k in keys if k in item} if isinstance(item, dict) else {}
        text = json.dumps(key, sort_keys=True)
        if text in seen:
            yield jsonschema.ValidationError(f"Duplicate value: {key} (a list keyed by {', '.join(keys)})", path=[i])
        seen.add(text)


def _json_schema(node: Any) -> Any:
    """An OpenAPI v3 structural schema as JSON Schema: int-or-string made explicit, objects with
    declared properties closed to others (the API server prunes or, strict, refuses them), a list-type set's items
    unique and a list-type map's keys (validateListSetsAndMaps, in the file `_unique_keys` names)."""
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
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if node.get("x-kubernetes-list-type") == "map":
        out[LIST_MAP_KEYS] = node["x-kubernetes-list-map-keys"]
    return out


def _file(api_version: str, kind: str) -> str:
    group, version = api_version.split("/")
    return f"{kind}.{group}.{version}.json"


def _read(name: str) -> dict:
    return json.loads(resources.files("infra.offline").joinpath(FOLDER, name).read_text())


@functools.cache
def _part(name: str) -> Any:
    return _read(name)["schema"]


def _inline(schema: Any) -> Any:
    if isinstance(schema, dict):
        return _part(schema[REF]) if REF in schema else {k: _inline(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline(v) for v in schema]
    return schema


@functools.cache
def kept(api_version: str, kind: str) -> dict:
    """The kept schema of a kind, its parts in place (shared, not copied: read it, never change it)."""
    data = _read(_file(api_version, kind))
    return {**data, "spec": _inline(data["spec"])}


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
    return jsonschema.validators.extend(jsonschema.validators.Draft7Validator, {LIST_MAP_KEYS: _unique_keys})(schema)


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


def undeclared(obj: dict) -> list[tuple[str | int, ...]]:
    """The paths of the fields of `obj` (a kind with a kept schema) that its CRD's schema does not declare: those the
    API server prunes from what it stores, or refuses with fieldValidation=Strict."""
    errors = _validator(obj["apiVersion"], obj["kind"]).iter_errors(obj)
    return [
        (*e.absolute_path, key)
        for e in errors
        if e.validator == "additionalProperties" and e.validator_value is False
        for key in sorted(set(e.instance) - set(e.schema.get("properties", {})))
    ]


def validate(obj: dict) -> None:
    """Raise jsonschema.ValidationError if `obj` does not fit its CRD's schema once its defaults are filled in (the
    API server defaults a request before it validates it: a required field with a default may be left out). A value
    the offline plan cannot know yet (an ID from AWS) is no error: the deploy fills it in."""
    from infra.offline.evaluate import COMPUTED

    validator = _validator(obj["apiVersion"], obj["kind"])
    errors = [e for e in validator.iter_errors(defaulted(obj)) if e.instance != COMPUTED]
    if errors:
        raise jsonschema.exceptions.best_match(errors)


def main(argv: list[str]) -> None:
    """The CRD YAML on stdin; its source (owner/repo:path@tag), then the part files it may refer to; or `--part PATH`
    and the source: the part at PATH."""
    crd = yaml.safe_load(sys.stdin)
    if argv[0] == "--part":
        out = extract_part(crd, argv[2], argv[1])
    else:
        parts = {Path(f).name: json.loads(Path(f).read_text())["schema"] for f in argv[1:]}
        out = extract(crd, argv[0], parts)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])

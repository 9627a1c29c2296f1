"""Kubernetes objects against the JSON schemas that kubernetes-validate bundles (1.25-1.37).

`kubernetes_validate.validate(obj, version, strict=True)` opens and parses the kind's schema and the
whole `_definitions.json` (some 10 ms) for every object and builds a new validator each time
(kubernetes_validate/utils.py, validate(), at 1.37.0); `check` validates a few hundred objects per
stack. `validate` here is that validation with one validator per schema file, built once: the
same choice of schema folder (the newest bundled Kubernetes version not newer than the stack's, the
`-strict` schemas that refuse unknown fields), the same file names, the same Draft 2020-12
validator and registry, and the library's own exceptions (`ValidationError` with the version,
`SchemaNotFoundError` for a kind it has no schema for, such as a CRD's).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate import utils
from packaging.version import Version
from referencing import Registry, Resource


@functools.cache
def _folder(version: str) -> tuple[str, str]:
    """(schema folder, its major.minor) for a cluster of Kubernetes `version`."""
    minor = utils.major_minor(version.removeprefix("v"))
    bundled = [v for v in utils.all_versions() if Version(utils.major_minor(v)) <= Version(minor)]
    if not bundled or Version(minor) > Version(utils.major_minor(utils.latest_version())):
        raise utils.VersionNotSupportedError(version=minor)
    return f"v{bundled[-1]}-local-strict", utils.major_minor(bundled[-1])


@functools.cache
def _definitions(folder: str, version: str) -> Resource:
    return Resource.from_contents(utils.schema_contents(f"kubernetes-json-schema/{folder}/_definitions.json", version))


@functools.cache
def _validator(version: str, kind: str, api_version: str) -> jsonschema.protocols.Validator:
    folder, _ = _folder(version)
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)  # rbac.authorization.k8s.io/v1 -> rbac-v1
    try:
        schema = utils.schema_contents(f"kubernetes-json-schema/{folder}/{kind.lower()}-{group}.json", version)
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(
            version=utils.major_minor(version.removeprefix("v")), kind=kind, api_version=api_version
        ) from None
    registry = _definitions(folder, version) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def validate(obj: dict[str, Any], version: str) -> None:
    """Raise kubernetes_validate.ValidationError if `obj` is not a valid object of its kind for a
    cluster of Kubernetes `version` (unknown fields included), SchemaNotFoundError for a kind
    without a bundled schema. A custom resource whose CRD schema the project keeps (Karpenter's:
    infra/offline/crd_schemas.py) is validated against that schema instead."""
    from infra.offline import crd_schemas

    if crd_schemas.has_schema(obj):
        try:
            crd_schemas.validate(obj)
        except jsonschema.ValidationError as exc:
            source = crd_schemas.kept(obj["apiVersion"], obj["kind"])["source"]
            raise kubernetes_validate.ValidationError(exc, version=source) from None
        return
    validator = _validator(version, obj["kind"], obj["apiVersion"])
    try:
        validator.validate(obj)
    except jsonschema.ValidationError as exc:
        raise kubernetes_validate.ValidationError(exc, version=_folder(version)[1]) from None


def problem(obj: dict[str, Any], version: str) -> str | None:
    """Why `obj` is not valid for a cluster of Kubernetes `version` (`validate`), naming the field; None: valid. A
    field a custom resource's CRD does not declare is one the API server prunes from what it stores, or refuses."""
    try:
        validate(obj, version)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path)
        against = f" (the CRD schema of {exc.version}: what it does not declare is pruned or refused)"
        return f"{where + ': ' if where else ''}{exc.message}{against if '@' in exc.version else ''}"
    return None

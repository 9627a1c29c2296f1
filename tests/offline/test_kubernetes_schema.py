"""`check` validates Kubernetes objects with one validator per schema (infra/offline/kubernetes_schema.py):
it must answer exactly what kubernetes-validate's own validate(strict=True) answers."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from infra.core.versions import KUBERNETES_SUPPORTED
from infra.offline import crd_schemas, kubernetes_schema
from infra.offline.check import schema_objects
from infra.offline.manifests import manifests
from tests.conftest import STACKS, plan_of

SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "s", "namespace": "n"},
    "spec": {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": "a"}},
}


def _answer(validate, obj: dict, version: str):
    try:
        validate(obj, version)
        return "valid"
    except kubernetes_validate.ValidationError as exc:
        return ("invalid", exc.message, exc.version)
    except kubernetes_validate.SchemaNotFoundError as exc:
        return ("no schema", exc.message)


def _variants(obj: dict) -> list[dict]:
    unknown_field, wrong_type = copy.deepcopy(obj), copy.deepcopy(obj)
    unknown_field.setdefault("metadata", {})["owner"] = "someone"
    wrong_type["spec"] = 7
    return [obj, unknown_field, wrong_type]


@pytest.mark.parametrize("version", ["1.33", "1.35.2", "v1.37"])
def test_a_service_and_its_broken_copies_get_the_librarys_answers(version):
    for obj in [
        *_variants(SERVICE),
        {**SERVICE, "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy"},
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"}},
    ]:
        assert _answer(kubernetes_schema.validate, obj, version) == _answer(
            lambda o, v: kubernetes_validate.validate(o, v, strict=True), obj, version
        )


def test_every_object_of_the_dev_plan_and_its_broken_copies_get_the_librarys_answers():
    version = plan_of("dev").config.kubernetes_version
    # the custom resources with a kept CRD schema (Volcano's Queues) are validated against it: not the library's
    for obj in [o for o in manifests(plan_of("dev")) if not crd_schemas.has_schema(o)][::3]:
        for variant in _variants(obj):
            assert _answer(kubernetes_schema.validate, variant, version) == _answer(
                lambda o, v: kubernetes_validate.validate(o, v, strict=True), variant, version
            ), variant["kind"]


def test_a_version_newer_than_any_bundled_schema_is_not_supported():
    with pytest.raises(kubernetes_validate.utils.VersionNotSupportedError):
        kubernetes_schema.validate(SERVICE, "1.99")


@pytest.mark.parametrize("stack", STACKS)
def test_every_object_of_a_shipped_stack_is_valid_at_every_kubernetes_version_a_stack_may_name(stack):
    """A stack may name any of KUBERNETES_SUPPORTED (an existing cluster upgraded in place one minor at a time), and
    `check` validates the program's objects and the example jobs against that version's schema: what is valid at the
    default version must be at the older ones too, or a stack on 1.34 fails `check` before its upgrade."""
    objects, _ = schema_objects(plan_of(stack))
    invalid = []
    for version in KUBERNETES_SUPPORTED:
        for obj in objects:
            answer = _answer(kubernetes_schema.validate, obj, version)
            if answer != "valid":
                invalid.append(f"{version} {obj['kind']} {obj['metadata'].get('name')}: {answer[1]}")
    assert not invalid, invalid

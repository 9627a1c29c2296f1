"""`check` validates Kubernetes objects with one validator per schema (infra/offline/kubernetes_schema.py):
it must answer exactly what kubernetes-validate's own validate(strict=True) answers."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from infra.offline import kubernetes_schema
from infra.offline.manifests import manifests
from tests.conftest import plan_of

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
    for obj in manifests(plan_of("dev"))[::3]:
        for variant in _variants(obj):
            assert _answer(kubernetes_schema.validate, variant, version) == _answer(
                lambda o, v: kubernetes_validate.validate(o, v, strict=True), variant, version
            ), variant["kind"]


def test_a_version_newer_than_any_bundled_schema_is_not_supported():
    with pytest.raises(kubernetes_validate.utils.VersionNotSupportedError):
        kubernetes_schema.validate(SERVICE, "1.99")

"""What `higgsfield verify` creates (a trial job, a dry run the admission policies must refuse) asks the API server for
fieldValidation=Strict: a field the object's CRD does not declare refuses the create, naming it, where the server's
default (Warn) would store the job without it (infra/cli/verify/connect.py STRICT)."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes.client.exceptions import ApiException

from infra.cli.verify.connect import Kube
from infra.offline import crd_schemas, jobs
from tests.cli.test_verify_checks import kubeconfig
from tests.conftest import plan_of
from tests.fake_kube_api import FakeKubernetesApi


@pytest.fixture
def kube(tmp_path):
    from kubernetes import config

    fake = FakeKubernetesApi()
    fake.undeclared = lambda obj: crd_schemas.undeclared(obj) if crd_schemas.has_schema(obj) else []
    yield fake, Kube(config.new_client_from_config(config_file=kubeconfig(tmp_path / "kubeconfig", fake.url)))
    fake.close()


def _job_with_a_field_its_crd_lacks() -> dict:
    job = copy.deepcopy(jobs.workload_of(jobs.render_examples(plan_of("prod").config)["pytorch-ddp"]))
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["workloadRef"] = {"name": "w", "podGroup": "g"}
    return job


def test_a_created_job_with_a_field_its_crd_lacks_is_refused_naming_it_not_stored_without_it(kube):
    fake, client = kube
    with pytest.raises(ApiException) as refused:
        client.create(_job_with_a_field_its_crd_lacks())
    assert refused.value.status == 400
    assert (
        'unknown field "spec.pytorchReplicaSpecs.Worker.template.spec.workloadRef"'
        in (json.loads(refused.value.body)["message"])
    )
    assert not [k for k in fake.objects if k[2] == "pytorchjobs"]


def test_a_dry_run_create_with_a_field_its_crd_lacks_is_refused_too(kube):
    _, client = kube
    job = _job_with_a_field_its_crd_lacks()
    with pytest.raises(ApiException) as refused:
        client.create_namespaced("kubeflow.org", "v1", job["metadata"]["namespace"], "pytorchjobs", job, dry_run=True)
    assert refused.value.status == 400

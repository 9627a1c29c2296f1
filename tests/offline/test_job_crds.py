"""The API server takes a rendered job as written: `check` validates the example jobs' custom resources and the
plan's Volcano Queues against their pinned CRDs' schemas (infra/offline/crd_schemas.py), so a field the CRD does not
declare, which the API server would prune from the job it stores (or refuse), is a finding naming it."""

from __future__ import annotations

import copy

import pytest

from infra.core import versions
from infra.core.names import KUBEFLOW_JOB_KINDS
from infra.offline import crd_schemas, jobs, kubernetes_schema
from infra.offline.check import schema_objects, validate_manifests
from tests.conftest import ROOT, STACKS, plan_of
from tests.offline.test_team_job import _render


def _examples_with(change) -> dict:
    examples = copy.deepcopy(jobs.render_examples(plan_of("prod").config))
    change(examples)
    return examples


def _worker_spec(examples: dict) -> dict:
    return jobs.workload_of(examples["pytorch-ddp"])["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]


def test_a_pod_field_of_the_clusters_kubernetes_that_the_operators_crd_lacks_is_a_finding_naming_it():
    # Kubernetes 1.35's PodSpec has workloadRef; the Training Operator's CRDs at v1.9.4 embed the PodSpec of
    # k8s.io/api v0.36.3 (kubeflow/trainer:go.mod@v1.9.4), which has none: the API server would drop it from the job.
    plan = plan_of("prod")
    examples = _examples_with(lambda e: _worker_spec(e).update(workloadRef={"name": "w", "podGroup": "g"}))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": _worker_spec(examples)}
    assert kubernetes_schema.problem(pod, plan.config.kubernetes_version) is None  # the Pod check alone lets it through
    (finding,) = [f for f in validate_manifests(plan, examples) if f.policy == "kubernetes-schema"]
    assert finding.level == "mandatory"
    assert finding.message.startswith("PyTorchJob pytorch-ddp-")
    assert "spec.pytorchReplicaSpecs.Worker.template.spec: " in finding.message and "'workloadRef'" in finding.message
    assert f"kubeflow/trainer:manifests/base/crds/kubeflow.org_pytorchjobs.yaml@{versions.TRAINING_OPERATOR_REF}" in (
        finding.message
    )


def test_a_pod_template_metadata_field_the_crd_does_not_keep_is_a_finding():
    # controller-gen's embedded ObjectMeta keeps labels, annotations, finalizers, name and namespace only
    examples = _examples_with(
        lambda e: jobs.workload_of(e["tf-mnist"])["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"].update(
            generateName="w-"
        )
    )
    messages = [f.message for f in validate_manifests(plan_of("prod"), examples) if f.policy == "kubernetes-schema"]
    assert len(messages) == 1 and "spec.tfReplicaSpecs.Worker.template.metadata: " in messages[0], messages
    assert "'generateName'" in messages[0]


@pytest.mark.parametrize("stack", STACKS)
def test_every_example_job_and_queue_of_a_shipped_stack_is_validated_against_its_crd_and_fits(stack):
    objects, _ = schema_objects(plan_of(stack))
    kinds = {o["kind"] for o in objects if crd_schemas.has_schema(o)}
    assert {"Queue", "PyTorchJob", "TFJob", "XGBoostJob"} <= kinds
    assert not [f.message for f in validate_manifests(plan_of(stack)) if f.policy == "kubernetes-schema"]


@pytest.mark.parametrize(
    ("framework", "changes"),
    [(f, {}) for f in ("pytorch", "mpi", "tensorflow", "xgboost", "jax", "paddle")]
    + [("pytorch", {"elastic": {"minGpus": 8}})],
)
def test_a_teams_job_of_each_kind_fits_its_pinned_crd(framework, changes):
    _, objects, _ = _render(framework=framework, **changes)
    job = jobs.workload_of(objects)
    assert crd_schemas.has_schema(job)
    assert kubernetes_schema.problem(job, "1.35") is None


def test_each_kept_crd_schema_is_read_at_the_pinned_ref():
    queues = "installer/helm/chart/volcano/crd/bases/scheduling.volcano.sh_queues.yaml"
    volcano = f"volcano-sh/volcano:{queues}@v{versions.VOLCANO.version}"
    assert crd_schemas.kept("scheduling.volcano.sh/v1beta1", "Queue")["source"] == volcano
    for kind, plural in KUBEFLOW_JOB_KINDS.items():
        source = crd_schemas.kept("kubeflow.org/v1", kind)["source"]
        assert (
            source
            == f"kubeflow/trainer:manifests/base/crds/kubeflow.org_{plural}.yaml@{versions.TRAINING_OPERATOR_REF}"
        )


def test_extract_keeps_a_subtree_the_kinds_share_as_a_reference_to_one_part():
    template = {"type": "object", "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}}
    crd = {
        "spec": {
            "group": "g.io",
            "names": {"kind": "K"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"t": {**template, "description": "d"}, "n": {"type": "integer"}},
                                }
                            }
                        }
                    },
                }
            ],
        }
    }
    part = crd_schemas.extract_part(crd, "o/r:crd.yaml@v1", "spec.t")
    assert part == {"source": "o/r:crd.yaml@v1 (spec.t)", "schema": template}
    kept = crd_schemas.extract(crd, "o/r:crd.yaml@v1", {"P.json": part["schema"]})
    assert kept["spec"]["properties"] == {"t": {"$ref": "P.json"}, "n": {"type": "integer"}}


def test_a_kept_kind_holds_the_shared_pod_template_in_place_of_its_reference():
    spec = crd_schemas.kept("kubeflow.org/v1", "MPIJob")["spec"]
    template = spec["properties"]["mpiReplicaSpecs"]["additionalProperties"]["properties"]["template"]
    assert "containers" in template["properties"]["spec"]["properties"]


def test_jobs_render_refuses_a_teams_job_rendered_with_a_field_its_crd_would_prune(monkeypatch, capsys):
    from infra.cli.main import main
    from infra.offline import team_job

    render = team_job.render

    def with_a_pruned_field(job, cfg):
        objects, placed = render(job, cfg)
        worker = jobs.workload_of(objects)["spec"]["pytorchReplicaSpecs"]["Worker"]
        worker["template"]["spec"]["workloadRef"] = {"name": "w", "podGroup": "g"}
        return objects, placed

    monkeypatch.setattr(team_job, "render", with_a_pruned_field)
    assert main(["jobs", "render", "prod", "-f", str(ROOT / "examples" / "llama-ft.job.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: PyTorchJob llama-ft: spec.pytorchReplicaSpecs.Worker.template.spec: ")
    assert "'workloadRef'" in err and "report it" in err


@pytest.mark.parametrize(
    "duplicate",
    [
        lambda c: c.setdefault("env", []).extend([{"name": "SEED", "value": "1"}, {"name": "SEED", "value": "2"}]),
        lambda c: c.setdefault("volumeMounts", []).append(dict(c["volumeMounts"][0], name="again")),
    ],
    ids=["env by name", "volumeMounts by mountPath"],
)
def test_two_entries_of_a_keyed_list_with_one_key_are_a_finding(duplicate):
    # The CRD's PodTemplateSpec keeps the Pod's list types: env is a list-type map keyed by name, volumeMounts by
    # mountPath (x-kubernetes-list-map-keys), and the API server refuses two entries of one key ("Duplicate value":
    # validateListMap, kubernetes/kubernetes:staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype/
    # validation.go@95f08499); JSON Schema has no such keyword, so the kept schema must say it.
    examples = _examples_with(lambda e: duplicate(_worker_spec(e)["containers"][0]))
    messages = [f.message for f in validate_manifests(plan_of("prod"), examples) if f.policy == "kubernetes-schema"]
    assert len(messages) == 1 and "spec.pytorchReplicaSpecs.Worker.template.spec.containers.0." in messages[0], messages
    assert "Duplicate value" in messages[0], messages

"""The examples of every class of work run as written: the Kubeflow jobs use only what the
v1.9.4 CRDs and webhooks accept, the built-in kinds validate against the Kubernetes schema, the
serving and evaluation examples carry the marks Volcano reads, the metrics their autoscalers ask
for are the ones prometheus-adapter serves, and the scripts do what they say (serve.py's queue and
metrics, eval_sweep's resume) without a GPU. Bad class settings are refused naming the key."""

from __future__ import annotations

import json
import py_compile
import threading

import pytest

from components import workloads
from components.observability import prometheus_adapter_rules
from infra.offline import jobs, kubernetes_schema
from tests.conftest import STACKS, assert_plan_rejects, config_of, plan_of, set_field

RENDERED = [(s, e) for s in STACKS for e in jobs.examples_for(config_of(s))]

# What the kubeflow.org/v1 CRDs declare (kubeflow/trainer:manifests/base/crds/kubeflow.org_{pytorch,tf,
# xgboost,mpi}jobs.yaml@v1.9.4: spec properties, each replica spec's properties, runPolicy and
# schedulingPolicy properties) and what the webhooks accept (pkg/webhooks/{pytorch,tensorflow,xgboost}/
# *_webhook.go@v1.9.4: replica types, a container with the default name, XGBoost's Master: exactly 1).
CRD = {
    "PyTorchJob": (
        "pytorchReplicaSpecs",
        {"elasticPolicy", "nprocPerNode", "pytorchReplicaSpecs", "runPolicy"},
        {"Master", "Worker"},
        "pytorch",
    ),
    "TFJob": (
        "tfReplicaSpecs",
        {"enableDynamicWorker", "runPolicy", "successPolicy", "tfReplicaSpecs"},
        {"Chief", "Master", "PS", "Worker", "Evaluator"},
        "tensorflow",
    ),
    "XGBoostJob": ("xgbReplicaSpecs", {"runPolicy", "xgbReplicaSpecs"}, {"Master", "Worker"}, "xgboost"),
    "MPIJob": (
        "mpiReplicaSpecs",
        {"cleanPodPolicy", "mainContainer", "mpiReplicaSpecs", "runPolicy", "slotsPerWorker"},
        {"Launcher", "Worker"},
        None,
    ),
}
RUN_POLICY = {
    "activeDeadlineSeconds",
    "backoffLimit",
    "cleanPodPolicy",
    "managedBy",
    "schedulingPolicy",
    "suspend",
    "ttlSecondsAfterFinished",
}
SCHEDULING_POLICY = {"minAvailable", "minResources", "priorityClass", "queue", "scheduleTimeoutSeconds"}
ELASTIC_POLICY = {
    "maxReplicas",
    "maxRestarts",
    "metrics",
    "minReplicas",
    "nProcPerNode",
    "rdzvBackend",
    "rdzvConf",
    "rdzvHost",
    "rdzvId",
    "rdzvPort",
    "standalone",
}


def _objects(stack: str, example: str) -> list[dict]:
    return json.loads(json.dumps(jobs.render(example, plan_of(stack).config)))


@pytest.mark.parametrize(("stack", "example"), RENDERED, ids=["-".join(r) for r in RENDERED])
def test_kubeflow_examples_use_only_what_the_pinned_crds_and_webhooks_accept(stack, example):
    job = _objects(stack, example)[-1]
    if job["kind"] not in CRD:
        pytest.skip("not a Kubeflow job")
    key, spec_fields, replica_types, container = CRD[job["kind"]]
    assert set(job["spec"]) <= spec_fields
    assert (
        set(job["spec"]["runPolicy"]) <= RUN_POLICY
        and set(job["spec"]["runPolicy"]["schedulingPolicy"]) <= SCHEDULING_POLICY
    )
    assert set(job["spec"].get("elasticPolicy", {})) <= ELASTIC_POLICY
    for replica, spec in job["spec"][key].items():
        assert replica in replica_types and set(spec) <= {"replicas", "restartPolicy", "template"}
        if container:
            assert container in [c["name"] for c in spec["template"]["spec"]["containers"]], replica
    if job["kind"] == "XGBoostJob":
        assert job["spec"][key]["Master"]["replicas"] == 1


@pytest.mark.parametrize(("stack", "example"), RENDERED, ids=["-".join(r) for r in RENDERED])
def test_the_built_in_objects_of_each_example_validate_against_the_kubernetes_schema(stack, example):
    version = plan_of(stack).config.kubernetes_version
    for obj in _objects(stack, example):
        if obj["apiVersion"] != "kubeflow.org/v1":
            kubernetes_schema.validate(obj, version)


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_renders_an_example_of_each_class_of_work(stack):
    assert {jobs.WORKLOAD[e] for e in jobs.examples_for(plan_of(stack).config)} == {"training", "serving", "evaluation"}
    assert {"tf-mnist", "xgboost-iris", "pytorch-elastic"} <= set(jobs.examples_for(plan_of(stack).config))


def _serving(stack: str) -> tuple[dict, dict, dict]:
    objects = _objects(stack, "serving-classifier")
    (hpa,) = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    (service,) = [o for o in objects if o["kind"] == "Service"]
    return hpa, service, objects[-1]


def test_serving_scales_on_the_queue_depth_prometheus_adapter_serves(stack):
    hpa, _, deployment = _serving(stack)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == workloads.SERVING_METRIC
    assert any(r["name"]["as"] == workloads.SERVING_METRIC for r in prometheus_adapter_rules()["custom"])
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }


def test_the_serving_scrape_job_keeps_the_serving_examples_pods(stack):
    _, service, deployment = _serving(stack)
    template = deployment["spec"]["template"]
    key, value = workloads.SERVING_LABEL
    assert template["metadata"]["labels"][key] == value
    assert workloads.SERVING_PORT in [p["name"] for p in template["spec"]["containers"][0]["ports"]]
    job = workloads.serving_scrape_job()
    assert {
        "source_labels": ["__meta_kubernetes_pod_label_higgsfield_io_workload"],
        "regex": value,
        "action": "keep",
    } in job["relabel_configs"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()


def test_the_serving_floor_is_its_podgroups_minimum_and_its_hpas(stack):
    hpa, _, deployment = _serving(stack)
    floor = hpa["spec"]["minReplicas"]
    assert floor == jobs.SERVING_FLOOR == deployment["spec"]["replicas"]
    assert deployment["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"] == str(floor)
    assert deployment["spec"]["template"]["spec"]["schedulerName"] == "volcano"


def test_the_elastic_jobs_hpa_asks_for_the_room_metric_the_adapter_serves(stack):
    job = _objects(stack, "pytorch-elastic")[-1]
    (metric,) = job["spec"]["elasticPolicy"]["metrics"]
    assert metric["type"] == "External" and metric["external"]["metric"]["name"] == workloads.ELASTIC_ROOM_METRIC
    pool = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]["higgsfield.io/pool"]
    assert metric["external"]["metric"]["selector"] == {
        "matchLabels": {"queue_name": job["spec"]["runPolicy"]["schedulingPolicy"]["queue"], "pool": pool}
    }
    assert metric["external"]["target"] == {"type": "Value", "value": "1"}
    (rule,) = prometheus_adapter_rules()["external"]
    assert rule["name"]["as"] == workloads.ELASTIC_ROOM_METRIC and rule["resources"] == {"namespaced": False}


def test_room_to_grow_is_never_below_one_so_the_hpa_never_shrinks_a_job():
    query = workloads.ELASTIC_ROOM_QUERY
    assert query.startswith("clamp_min(") and query.endswith(", 1)")
    assert "volcano_queue_request_scalar_resources" in query  # waiting work counts against the room
    assert "utilization" not in query.lower() and "DCGM" not in query


def test_room_counts_only_the_jobs_pool_whose_label_kube_state_metrics_exports(plan):
    query = workloads.ELASTIC_ROOM_QUERY
    assert (
        'kube_node_labels{job="kube-state-metrics",label_higgsfield_io_pool="<<index .LabelValuesByName "pool">>"}'
        in query
    )
    assert "<<.LabelMatchers>>" not in query  # the selector's pool label is not on Volcano's series
    (release,) = [
        r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "kube-prometheus-stack"
    ]
    assert release.inputs["values"]["kube-state-metrics"]["metricLabelsAllowlist"] == ["nodes=[higgsfield.io/pool]"]


def test_the_scavenger_gives_back_every_pod_and_does_not_count_a_taken_pod_as_failed(stack):
    job = _objects(stack, "eval-sweep")[-1]
    template = job["spec"]["template"]
    assert job["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"] == "0"
    assert template["metadata"]["annotations"]["volcano.sh/preemptable"] == "true"
    assert template["spec"]["restartPolicy"] == "Never"
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]} in job["spec"][
        "podFailurePolicy"
    ]["rules"]
    cfg = plan_of(stack).config
    team = next(t for t in cfg.scheduler.teams if t.name == job["metadata"]["namespace"])
    assert template["spec"]["priorityClassName"] in cfg.scheduler.classes_of(team, "evaluation")


@pytest.mark.parametrize("script", sorted({s for scripts in jobs.SCRIPTS.values() for s in scripts}))
def test_example_scripts_compile(script):
    py_compile.compile(str(jobs.EXAMPLES_DIR / script), doraise=True)


# --- the scripts, without a GPU ---------------------------------------------------------------


def _serve():
    import importlib.util

    spec = importlib.util.spec_from_file_location("serve", jobs.EXAMPLES_DIR / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_model_server_answers_in_batches_and_counts_what_waits():
    serve = _serve()
    calls: list[int] = []
    batcher = serve.Batcher(lambda rows: (calls.append(len(rows)), [sum(r) for r in rows])[1], max_batch=4)
    answers: dict[int, list] = {}
    threads = [
        threading.Thread(target=lambda i=i: answers.__setitem__(i, batcher.submit([[i, i], [i, 1]]))) for i in range(3)
    ]
    for t in threads:
        t.start()
    while batcher.queue.qsize() < 3:
        pass
    assert f"{serve.WAITING} 3" in batcher.metrics()  # queued, before the model ran
    while any(t.is_alive() for t in threads):
        batcher.run_once(block=False)
    assert answers == {i: [2 * i, i + 1] for i in range(3)}
    assert max(calls) <= 4 and sum(calls) == 6
    assert f"{serve.WAITING} 0" in batcher.metrics() and f"{serve.TOTAL} 3" in batcher.metrics()


def test_the_model_server_hands_a_model_error_to_every_waiting_request():
    serve = _serve()
    batcher = serve.Batcher(lambda rows: 1 / 0)
    errors: list[Exception] = []

    def ask():
        try:
            batcher.submit([[1.0]])
        except ZeroDivisionError as exc:
            errors.append(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    while thread.is_alive():
        batcher.run_once(block=False)
    assert len(errors) == 1


def test_an_evaluation_shard_already_done_is_not_run_again(tmp_path, monkeypatch, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("eval_sweep", jobs.EXAMPLES_DIR / "eval_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    sweep.shard_result(tmp_path, 3).write_text("{}")
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    monkeypatch.setenv("RESULTS_DIR", str(tmp_path))
    assert sweep.main() == 0  # returns before importing torch
    assert "done before" in capsys.readouterr().out


# --- bad class settings --------------------------------------------------------------------------

S = "higgsfield:scheduler"


def _classes(*extra):
    base = [{"name": "batch-low", "value": 1000}, {"name": "batch-high", "value": 100000}]
    return set_field(S, "priorityClasses", base + list(extra))


BAD = {
    "serving_below_training": (
        _classes({"name": "serving", "value": 500, "workload": "serving"}),
        f"{S}.priorityClasses[2].value",
        "must be above every training class",
    ),
    "evaluation_above_training": (
        _classes({"name": "evaluation", "value": 5000, "workload": "evaluation"}),
        f"{S}.priorityClasses[0].value",
        "must be above every evaluation class",
    ),
    "unknown_workload": (
        _classes({"name": "x", "value": 5, "workload": "batch"}),
        f"{S}.priorityClasses[2].workload",
        "training",
    ),
    "platform_prefix": (
        _classes({"name": "higgsfield-default", "value": 5}),
        f"{S}.priorityClasses[2].name",
        "platform's",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_class_settings_are_refused_naming_the_key(case, project_copy, capsys):
    change, key, says = BAD[case]
    assert_plan_rejects(project_copy, capsys, "staging", change, key, says)


def test_a_team_given_a_serving_class_needs_its_serving_quota(project_copy, capsys):
    def no_quota(config):
        teams = config[S]["teams"]
        teams[0] = {k: v for k, v in teams[0].items() if k != "servingGpuQuota"}

    assert_plan_rejects(
        project_copy, capsys, "staging", no_quota, f"{S}.teams[0].servingGpuQuota", "given a serving class"
    )


def test_a_serving_quota_above_the_teams_quota_is_refused(project_copy, capsys):
    def too_much(config):
        config[S]["teams"][0]["servingGpuQuota"] = 17

    assert_plan_rejects(
        project_copy, capsys, "staging", too_much, f"{S}.teams[0].servingGpuQuota", "above the team's gpuQuota of 16"
    )

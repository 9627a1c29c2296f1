"""The training controller and the batch scheduler keep the promises: gang (all or nothing),
differential (never preempt running jobs, queued jobs by priority), scale from zero (pods of a
pending gang exist), quotas per team, controllers on CPU nodes, and example jobs that fit."""

from __future__ import annotations

import py_compile
import re
from pathlib import Path

import pytest
import yaml

from components.teams import PLAIN_GPU_QUOTA
from components.tenancy import CPU_SERVICE_QUOTA
from components.training import KUSTOMIZATION
from infra.config import CPU_SERVICE_PRIORITY_CLASS, DEFAULT_PRIORITY_CLASS
from infra.core import versions
from infra.offline import jobs, kubernetes_schema
from infra.offline.evaluate import Plan
from tests.conftest import ROOT, STACKS, assert_plan_rejects, config_of, plan_of, set_field

RELEASE = "kubernetes:helm.sh/v3:Release"
SYSTEM = {"higgsfield.io/role": "system"}


def _release(plan: Plan, chart: str):
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs["chart"] == chart]
    return release


def _scheduler_config(plan: Plan) -> dict:
    return yaml.safe_load(_release(plan, "volcano").inputs["values"]["custom"]["scheduler_config_override"])


def _kustomization() -> dict:
    return yaml.safe_load((KUSTOMIZATION / "kustomization.yaml").read_text())


def test_operator_kustomization_pins_the_upstream_overlay_at_the_versioned_ref():
    remote = [r for r in _kustomization()["resources"] if "://" in r]
    assert remote == [f"{versions.TRAINING_OPERATOR_OVERLAY}?ref={versions.TRAINING_OPERATOR_REF}"]
    assert versions.TRAINING_OPERATOR_REF == "v1.9.4"


def test_operator_runs_with_volcano_as_gang_scheduler_and_leader_election():
    (patch,) = _kustomization()["patches"]
    deployment = yaml.safe_load(patch["patch"])
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--gang-scheduler-name=volcano" in container["args"]
    assert "--leader-elect" in container["args"]


def test_operator_controller_runs_on_system_nodes():
    (patch,) = _kustomization()["patches"]
    assert yaml.safe_load(patch["patch"])["spec"]["template"]["spec"]["nodeSelector"] == SYSTEM


def test_every_stack_installs_the_operator_from_our_kustomization_after_volcano(plan):
    (directory,) = plan.of_type("kubernetes:kustomize/v2:Directory")
    assert Path(directory.inputs["directory"]) == KUSTOMIZATION
    assert _release(plan, "volcano").urn in directory.dependencies  # it needs the PodGroup CRD


def test_volcano_chart_is_pinned(plan):
    release = _release(plan, "volcano")
    assert release.inputs["version"] == versions.VOLCANO.version
    assert release.inputs["repositoryOpts"]["repo"] == versions.VOLCANO.repo


def test_scheduler_never_reclaims_and_preempts_only_after_allocating(plan):
    actions = [a.strip() for a in _scheduler_config(plan)["actions"].split(",")]
    assert "reclaim" not in actions and not {"gangpreempt", "gangreclaim", "shuffle"} & set(actions)
    assert actions.index("allocate") < actions.index("preempt")  # serving takes back only what allocate could not place


def test_gang_decides_what_preempt_may_take_and_drf_does_not(plan):
    tiers = _scheduler_config(plan)["tiers"]
    plugins = {p["name"]: p for tier in tiers for p in tier["plugins"]}
    assert "gang" in plugins and "priority" in plugins
    assert plugins["gang"]["enablePreemptable"] is True and plugins["gang"]["enableReclaimable"] is False
    assert [p["name"] for p in tiers[0]["plugins"]][
        -1
    ] == "gang"  # last in its tier: infra/offline/preemption.py rule 3
    assert plugins["drf"]["enablePreemptable"] is False
    assert plugins["proportion"].get("enableReclaimable") is False


def test_every_queue_is_not_reclaimable_and_capped_as_configured(plan, stack_settings):
    wanted = {q["name"]: q for q in stack_settings["higgsfield:scheduler"]["queues"]}
    queues = {
        q.inputs["metadata"]["name"]: q.inputs for q in plan.of_type("kubernetes:scheduling.volcano.sh/v1beta1:Queue")
    }
    assert "default" not in queues  # Volcano's own, patched: test_volcanos_default_queue_is_taken_over_with_no_gpus
    assert set(queues) == set(wanted)
    for name, queue in queues.items():
        assert queue["spec"]["reclaimable"] is False
        assert queue["spec"]["capability"]["nvidia.com/gpu"] == str(wanted[name]["gpuCapability"])
        assert queue["spec"]["weight"] == wanted[name]["weight"]


def test_volcanos_default_queue_is_taken_over_with_no_gpus_and_never_reclaimable(plan):
    (queue,) = [
        q.inputs
        for q in plan.of_type("kubernetes:scheduling.volcano.sh/v1beta1:QueuePatch")
        if q.inputs["metadata"]["name"] == "default"
    ]
    assert queue["spec"]["reclaimable"] is False
    assert queue["spec"]["capability"] == {"nvidia.com/gpu": "0"}
    assert queue["metadata"]["annotations"] == {"pulumi.com/patchForce": "true"}  # the scheduler created it first


def test_only_serving_priority_classes_preempt(plan):
    classes = {
        c.inputs["metadata"]["name"]: c.inputs for c in plan.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")
    }
    kinds = {c.name: c.workload for c in plan.config.scheduler.priority_classes}
    assert set(classes) == {*kinds, DEFAULT_PRIORITY_CLASS, CPU_SERVICE_PRIORITY_CLASS}
    for name, workload in kinds.items():
        assert classes[name]["preemptionPolicy"] == ("PreemptLowerPriority" if workload == "serving" else "Never"), name
        assert classes[name]["globalDefault"] is False
        assert classes[name]["metadata"]["labels"]["higgsfield.io/workload"] == workload


def test_pods_naming_no_class_get_a_default_that_never_preempts(plan):
    (default,) = [
        c.inputs for c in plan.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass") if c.inputs["globalDefault"]
    ]
    assert default["metadata"]["name"] == "higgsfield-default"
    assert default["preemptionPolicy"] == "Never" and default["value"] == 0  # Kubernetes' own default priority


def test_each_teams_gpu_quota_is_its_own_queues_capability_not_a_resource_quota(plan, stack_settings):
    """A ResourceQuota admits pods one by one (part of a gang); the queue admits whole gangs
    (components/demand.py, tests/components/test_autoscaler_demand.py)."""
    # serving's own quota (scoped to its classes: serving is no gang) is
    # test_serving_has_its_own_gpu_quota_within_the_teams; the plain workloads' (every class but training)
    # tests/security/test_plain_gpu_demand.py
    hard = [
        q.inputs["spec"]["hard"]
        for q in plan.of_type("kubernetes:core/v1:ResourceQuota")
        if q.inputs["metadata"]["name"] not in ("serving-gpu", PLAIN_GPU_QUOTA)
    ]
    assert not [h for h in hard if any("nvidia.com/gpu" in key for key in h)]
    queues = {
        q.inputs["metadata"]["name"]: q.inputs["spec"]
        for q in plan.of_type("kubernetes:scheduling.volcano.sh/v1beta1:Queue")
    }
    for team in stack_settings["higgsfield:scheduler"]["teams"]:
        assert queues[team["queue"]]["capability"]["nvidia.com/gpu"] == str(team["gpuQuota"])


def test_each_team_can_only_use_the_priority_classes_it_is_given(plan, stack_settings):
    scheduler = stack_settings["higgsfield:scheduler"]
    denied = {}
    for q in plan.of_type("kubernetes:core/v1:ResourceQuota"):
        scope = q.inputs["spec"].get("scopeSelector")
        # serving's own quota: test_serving_has_its_own_gpu_quota; plain-gpu: test_plain_gpu_demand.py; the services
        # without GPUs': tests/security/test_cpu_services.py
        if scope and q.inputs["metadata"]["name"] not in ("serving-gpu", PLAIN_GPU_QUOTA, CPU_SERVICE_QUOTA):
            (expr,) = scope["matchExpressions"]
            assert expr["scopeName"] == "PriorityClass" and expr["operator"] == "In"
            assert q.inputs["spec"]["hard"] == {"pods": "0"}
            denied.setdefault(q.inputs["metadata"]["namespace"], set()).update(expr["values"])
    every = {c["name"] for c in scheduler["priorityClasses"]}
    for team in scheduler["teams"]:
        assert denied.get(team["name"], set()) == every - set(team["priorityClasses"])


def test_serving_has_its_own_gpu_quota_within_the_teams(plan):
    quotas = {
        q.inputs["metadata"]["namespace"]: q.inputs
        for q in plan.of_type("kubernetes:core/v1:ResourceQuota")
        if q.inputs["metadata"]["name"] == "serving-gpu"
    }
    for team in plan.config.scheduler.teams:
        serving = plan.config.scheduler.classes_of(team, "serving")
        if not serving:
            assert team.name not in quotas
            continue
        spec = quotas[team.name]["spec"]
        assert (
            spec["hard"] == {"requests.nvidia.com/gpu": str(team.serving_gpu_quota)}
            and team.serving_gpu_quota <= team.gpu_quota
        )
        assert spec["scopeSelector"]["matchExpressions"] == [
            {"scopeName": "PriorityClass", "operator": "In", "values": list(serving)}
        ]


@pytest.mark.parametrize("chart", ["volcano", "metrics-server", "cluster-autoscaler"])
def test_platform_controllers_run_on_system_nodes(plan, chart):
    values = _release(plan, chart).inputs["values"]
    selector = values["custom"]["default_ns"] if chart == "volcano" else values["nodeSelector"]
    assert selector == SYSTEM


def test_metrics_server_is_pinned_for_elastic_job_autoscaling(plan):
    assert _release(plan, "metrics-server").inputs["version"] == versions.METRICS_SERVER.version


# --- example jobs --------------------------------------------------------------------------

RENDERED = [(s, e) for s in STACKS for e in jobs.examples_for(config_of(s))]


@pytest.fixture(params=RENDERED, ids=lambda p: f"{p[0]}-{p[1]}")
def rendered(request):
    stack, example = request.param
    cfg = plan_of(stack).config
    return cfg, example, jobs.render(example, cfg)


def _job(objects: list[dict]) -> dict:
    return jobs.workload_of(objects)  # the Kubeflow job, or the serving Deployment, or the evaluation Job


def job_team(cfg, objects: list[dict]):
    (team,) = [t for t in cfg.scheduler.teams if t.name == _job(objects)["metadata"]["namespace"]]
    return team


def _replica_specs(job: dict) -> dict:
    return next(
        job["spec"][k]
        for k in ("pytorchReplicaSpecs", "mpiReplicaSpecs", "tfReplicaSpecs", "xgbReplicaSpecs")
        if k in job["spec"]
    )


def test_example_pod_templates_validate_against_the_kubernetes_schema(rendered):
    cfg, _, objects = rendered
    for template in jobs.pod_templates(_job(objects)):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": template["spec"]}
        kubernetes_schema.validate(pod, cfg.kubernetes_version)
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            kubernetes_schema.validate(obj, cfg.kubernetes_version)


def test_example_names_a_queue_and_priority_class_of_its_class_of_work_its_team_may_use(rendered):
    cfg, example, objects = rendered
    job = _job(objects)
    (team,) = [t for t in cfg.scheduler.teams if t.name == job["metadata"]["namespace"]]
    allowed = cfg.scheduler.classes_of(team, jobs.WORKLOAD[example])
    for template in jobs.pod_templates(job):
        assert template["spec"]["priorityClassName"] in allowed
    if job["apiVersion"] == "kubeflow.org/v1":
        policy = job["spec"]["runPolicy"]["schedulingPolicy"]
        assert policy["queue"] == team.queue and policy["priorityClass"] in allowed
    else:  # Volcano puts the pods' PodGroup in the queue the namespace names
        assert all(t["spec"]["schedulerName"] == "volcano" for t in jobs.pod_templates(job))


def test_example_gang_size_matches_its_replicas(rendered):
    _, example, objects = rendered
    job = _job(objects)
    if job["kind"] in ("Deployment", "Job"):  # the PodGroup's minMember, from the owner's annotation
        floor = int(job["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"])
        if job["kind"] == "Deployment":
            (hpa,) = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
            assert floor == hpa["spec"]["minReplicas"] == job["spec"]["replicas"] >= 1  # the serving floor
        else:
            assert floor == 0  # every scavenger pod may be taken back
        return
    specs = _replica_specs(job)
    min_available = job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"]
    if example == "pytorch-elastic":
        master = specs.get("Master", {}).get("replicas", 0)
        assert min_available == master + job["spec"]["elasticPolicy"]["minReplicas"]
    else:
        assert min_available == sum(s["replicas"] for s in specs.values())


def test_elastic_example_uses_c10d_rendezvous_within_bounds_and_an_hpa_metric(stack):
    policy = _job(jobs.render("pytorch-elastic", plan_of(stack).config))["spec"]["elasticPolicy"]
    assert policy["rdzvBackend"] == "c10d"
    assert 1 <= policy["minReplicas"] <= policy["maxReplicas"]
    assert policy["metrics"]  # the operator creates an HPA only with metrics


def test_example_gpu_pods_select_their_pool_zone_and_tolerate_the_taint(rendered):
    cfg, example, objects = rendered
    pools = {p.name: p for p in cfg.gpu_pools}
    gpu_templates = [t for t in jobs.pod_templates(_job(objects)) if "higgsfield.io/pool" in t["spec"]["nodeSelector"]]
    assert gpu_templates
    for template in gpu_templates:
        spec = template["spec"]
        pool = pools[spec["nodeSelector"]["higgsfield.io/pool"]]
        assert spec["nodeSelector"]["topology.kubernetes.io/zone"] == pool.availability_zone
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        limits = spec["containers"][0]["resources"].get("limits", {})
        assert "nvidia.com/gpu" in limits  # a pod without GPUs (the MPI launcher) runs on the teams' CPU nodes
        if example in jobs.ONE_GPU_PODS:
            assert limits["nvidia.com/gpu"] == 1
            continue
        assert limits["nvidia.com/gpu"] == pool.gpus_per_node
        if pool.efa and example not in jobs.WITHOUT_EFA:
            assert limits["vpc.amazonaws.com/efa"] == pool.instance.efa_max_interfaces


def test_example_mounts_the_team_volume_when_the_stack_has_fsx(rendered):
    cfg, example, objects = rendered
    for template in jobs.pod_templates(_job(objects)):
        if "higgsfield.io/pool" not in template["spec"]["nodeSelector"] or example == "mpi-nccl-tests":
            continue
        claims = [
            v["persistentVolumeClaim"]["claimName"] for v in template["spec"]["volumes"] if "persistentVolumeClaim" in v
        ]
        team = job_team(cfg, objects)
        datasets = [f"dataset-{d.name}" for d in cfg.fsx.datasets if team.name == d.owner or team.name in d.readers]
        assert claims == (["shared-data", *datasets] if cfg.fsx.enabled else [])


@pytest.mark.parametrize("example", ["pytorch-ddp", "pytorch-elastic"])
def test_pytorch_examples_run_in_the_container_the_operator_expects(stack, example):
    for spec in _replica_specs(_job(jobs.render(example, plan_of(stack).config))).values():
        assert spec["template"]["spec"]["containers"][0]["name"] == "pytorch"
        assert spec["restartPolicy"] in ("Always", "OnFailure", "Never", "ExitCode")


def test_training_script_compiles():
    py_compile.compile(str(jobs.EXAMPLES_DIR / jobs.TRAIN_SCRIPT), doraise=True)


def test_jobs_render_prints_yaml_for_kubectl(capsys, monkeypatch):
    from infra.cli.main import main

    monkeypatch.chdir(ROOT)
    assert main(["jobs", "render", "staging", "pytorch-elastic", "--pool", "h100", "--team", "vision"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    job = docs[-1]
    assert job["kind"] == "PyTorchJob" and job["metadata"]["namespace"] == "vision"
    assert (
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]["higgsfield.io/pool"] == "h100"
    )


def test_jobs_render_rejects_an_unknown_pool_naming_the_option(capsys, monkeypatch):
    from infra.cli.main import main

    monkeypatch.chdir(ROOT)
    assert main(["jobs", "render", "dev", "pytorch-ddp", "--pool", "h100"]) == 2
    assert re.match(r"error: --pool: no pool 'h100' in stack dev", capsys.readouterr().err)


# --- bad scheduler settings -------------------------------------------------------------------

S = "higgsfield:scheduler"
QUEUES = [
    {"name": "research", "weight": 2, "gpuCapability": 16},
    {"name": "experiments", "weight": 1, "gpuCapability": 8},
]
CLASSES = [{"name": "batch-low", "value": 1000}, {"name": "batch-high", "value": 100000}]


def _teams(*teams):
    return set_field(S, "teams", list(teams))


BAD = {
    "team_with_unknown_queue": (
        "staging",
        _teams({"name": "llm", "queue": "nope", "gpuQuota": 1, "priorityClasses": ["batch-low"], "uid": 20010}),
        f"{S}.teams[0].queue",
        "unknown queue 'nope'",
    ),
    "team_with_unknown_class": (
        "staging",
        _teams({"name": "llm", "queue": "research", "gpuQuota": 1, "priorityClasses": ["urgent"], "uid": 20010}),
        f"{S}.teams[0].priorityClasses[0]",
        "unknown priority class 'urgent'",
    ),
    "quota_above_queue_capability": (
        "staging",
        _teams({"name": "llm", "queue": "experiments", "gpuQuota": 9, "priorityClasses": ["batch-low"], "uid": 20010}),
        f"{S}.teams[0].gpuQuota",
        "above queue experiments's capability",
    ),
    "duplicate_team": (
        "staging",
        _teams(
            *[{"name": "llm", "queue": "research", "gpuQuota": 1, "priorityClasses": ["batch-low"], "uid": 20010}] * 2
        ),
        f"{S}.teams[1]",
        "duplicate name 'llm'",
    ),
    "duplicate_queue": (
        "staging",
        set_field(S, "queues", [QUEUES[0], QUEUES[0]]),
        f"{S}.queues[1]",
        "duplicate name 'research'",
    ),
    "duplicate_class": (
        "staging",
        set_field(S, "priorityClasses", [CLASSES[0], CLASSES[0]]),
        f"{S}.priorityClasses[1]",
        "duplicate name 'batch-low'",
    ),
    "capability_beyond_pools": (
        "staging",
        lambda c: [
            set_field(S, "queues", [{"name": "research", "gpuCapability": 64}, QUEUES[1]])(c),
            set_field(S, "teams", [{**c[S]["teams"][0], "gpuQuota": 64}, c[S]["teams"][1]])(c),
        ],
        f"{S}.queues[0].gpuCapability",
        "more than the GPU pools can ever provide (32",
    ),
    "quota_below_queue_capability": (
        "staging",
        set_field(
            S,
            "teams",
            [{"name": "llm", "queue": "research", "gpuQuota": 8, "priorityClasses": ["batch-low"], "uid": 20010}],
        ),
        f"{S}.teams[0].gpuQuota",
        "is below queue research's capability of 16",
    ),
    "two_teams_share_a_queue": (
        "staging",
        set_field(
            S,
            "teams",
            [
                {"name": "llm", "queue": "research", "gpuQuota": 16, "priorityClasses": ["batch-low"], "uid": 20010},
                {"name": "vision", "queue": "research", "gpuQuota": 16, "priorityClasses": ["batch-low"], "uid": 20011},
            ],
        ),
        f"{S}.teams[1].queue",
        "queue 'research' is team 'llm''s",
    ),
    "team_named_like_kube_system": (
        "staging",
        _teams(
            {"name": "kube-system", "queue": "research", "gpuQuota": 1, "priorityClasses": ["batch-low"], "uid": 20010}
        ),
        f"{S}.teams[0].name",
        "namespace Kubernetes or the platform owns",
    ),
    "team_named_monitoring": (
        "staging",
        _teams(
            {"name": "monitoring", "queue": "research", "gpuQuota": 1, "priorityClasses": ["batch-low"], "uid": 20010}
        ),
        f"{S}.teams[0].name",
        "namespace Kubernetes or the platform owns",
    ),
    "team_named_volcano_system": (
        "staging",
        _teams(
            {
                "name": "volcano-system",
                "queue": "research",
                "gpuQuota": 1,
                "priorityClasses": ["batch-low"],
                "uid": 20010,
            }
        ),
        f"{S}.teams[0].name",
        "namespace Kubernetes or the platform owns",
    ),
    "team_named_like_a_platform_namespace": (
        "staging",
        _teams(
            {
                "name": "higgsfield-storage",
                "queue": "research",
                "gpuQuota": 1,
                "priorityClasses": ["batch-low"],
                "uid": 20010,
            }
        ),
        f"{S}.teams[0].name",
        "namespace Kubernetes or the platform owns",
    ),
    "team_named_default": (
        "staging",
        _teams({"name": "default", "queue": "research", "gpuQuota": 1, "priorityClasses": ["batch-low"], "uid": 20010}),
        f"{S}.teams[0].name",
        "namespace Kubernetes or the platform owns",
    ),
    "team_with_another_teams_uid": (
        "staging",
        _teams(
            {"name": "llm", "queue": "research", "gpuQuota": 1, "priorityClasses": ["batch-low"], "uid": 20010},
            {"name": "vision", "queue": "experiments", "gpuQuota": 1, "priorityClasses": ["batch-low"], "uid": 20010},
        ),
        f"{S}.teams[1].uid",
        "20010 is team 'llm'",
    ),
    "team_with_a_system_uid": (
        "staging",
        _teams({"name": "llm", "queue": "research", "gpuQuota": 1, "priorityClasses": ["batch-low"], "uid": 0}),
        f"{S}.teams[0].uid",
        "at least 1000",
    ),
    "team_without_a_uid": (
        "staging",
        _teams({"name": "llm", "queue": "research", "gpuQuota": 1, "priorityClasses": ["batch-low"]}),
        f"{S}.teams[0].uid",
        "is required",
    ),
    "class_with_the_system_prefix": (
        "staging",
        set_field(S, "priorityClasses", [{"name": "system-urgent", "value": 1000}, CLASSES[1]]),
        f"{S}.priorityClasses[0].name",
        "reserves the system- prefix",
    ),
    "queue_named_default": (
        "staging",
        set_field(S, "queues", [{"name": "default", "gpuCapability": 8}, QUEUES[1]]),
        f"{S}.queues[0].name",
        "a queue Volcano creates",
    ),
    "queue_named_root": (
        "staging",
        set_field(S, "queues", [{"name": "root", "gpuCapability": 8}, QUEUES[1]]),
        f"{S}.queues[0].name",
        "a queue Volcano creates",
    ),
    "class_in_system_range": (
        "staging",
        set_field(S, "priorityClasses", [{"name": "batch-low", "value": 2000000000}, CLASSES[1]]),
        f"{S}.priorityClasses[0].value",
        "reserves for system classes",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_scheduler_setting_exits_2_and_names_the_key(case, project_copy, capsys):
    assert_plan_rejects(project_copy, capsys, *BAD[case])

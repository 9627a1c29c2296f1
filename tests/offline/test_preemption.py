"""Nothing can preempt a training gang's minimum: the proof of infra/offline/preemption.py holds for every
shipped stack, and fails - naming the setting - for each way the scheduler configuration, a queue or
a PriorityClass could open the minimum to eviction. The team policy keeps the one preempting class
(serving) on Volcano and off training jobs; the rendered jobs carry the marks Volcano reads."""

from __future__ import annotations

import copy

import pytest

from components import training
from components.teams import rules_of
from components.tenancy import OPERATOR_USER
from infra.cli.main import main
from infra.config import PriorityClassSpec
from infra.offline import jobs, preemption
from tests.conftest import config_of, plan_of
from tests.security.test_tenancy import _job, _pod, denied_by


def _config() -> dict:
    return copy.deepcopy(training.SCHEDULER_CONFIG)


def _classes() -> list[dict]:
    return training.priority_classes(
        [
            PriorityClassSpec(name="batch-low", value=1000),
            PriorityClassSpec(name="serving", value=2_000_000, workload="serving"),
            PriorityClassSpec(name="evaluation", value=100, workload="evaluation"),
        ]
    )


QUEUE = {"metadata": {"name": "research"}, "spec": {"reclaimable": False}}


def _settings(config=None, queues=None, classes=None) -> list[str]:
    return [h.setting for h in preemption.holes(config or _config(), queues or [QUEUE], classes or _classes())]


def test_every_shipped_stack_proves_that_nothing_preempts_a_training_minimum(plan):
    assert preemption.holes_in_plan(plan) == []


def test_the_proof_reads_volcanos_own_default_queue_too(plan):
    queues = {h.setting for h in preemption.holes_in_plan(plan)}
    assert queues == set()
    patched = [r for r in plan.of_type("kubernetes:scheduling.volcano.sh/v1beta1:QueuePatch")]
    assert [r.inputs["metadata"]["name"] for r in patched] == ["default"]
    assert preemption.queue_holes([{**patched[0].inputs, "spec": {**patched[0].inputs["spec"], "reclaimable": True}}])


def test_the_platforms_own_configuration_has_no_hole():
    assert _settings() == []


def _plugin(config: dict, name: str) -> dict:
    return next(p for tier in config["tiers"] for p in tier["plugins"] if p["name"] == name)


def _with_actions(actions: str):
    def change(config):
        config["actions"] = actions

    return change


def _set(name: str, **flags):
    def change(config):
        _plugin(config, name).update(flags)

    return change


def _drop(key: str):
    def change(config):
        _plugin(config, "drf").pop(key)

    return change


def _gang_first(config):
    config["tiers"][0]["plugins"].sort(key=lambda p: p["name"] != "gang")


def _preemptable_in_tier_two(config):
    config["tiers"][1]["plugins"].append({"name": "pdb"})  # enablePreemptable defaults to true


def _without_gang(config):
    for tier in config["tiers"]:
        tier["plugins"] = [p for p in tier["plugins"] if p["name"] != "gang"]


SCHEDULER_MUTATIONS = {
    "reclaim_added": (_with_actions("allocate, preempt, reclaim, backfill"), "actions: reclaim"),
    "gangpreempt_added": (_with_actions("allocate, gangpreempt, backfill"), "actions: gangpreempt"),
    "gangreclaim_added": (_with_actions("allocate, gangreclaim, backfill"), "actions: gangreclaim"),
    "shuffle_added": (_with_actions("allocate, preempt, backfill, shuffle"), "actions: shuffle"),
    "unknown_action": (_with_actions("allocate, evict-everything"), "actions: evict-everything"),
    "gang_not_preemptable": (_set("gang", enablePreemptable=False), "tiers[0].plugins[2].enablePreemptable"),
    "gang_removed": (_without_gang, "tiers: gang"),
    "drf_preemptable": (_set("drf", enablePreemptable=True), "tiers[1].plugins[0].enablePreemptable"),
    "drf_preemptable_by_default": (_drop("enablePreemptable"), "tiers[1].plugins[0].enablePreemptable"),
    "a_preemptable_plugin_after_gangs_tier": (
        _preemptable_in_tier_two,
        f"tiers[1].plugins[{len(training.SCHEDULER_CONFIG['tiers'][1]['plugins'])}].enablePreemptable",
    ),
    "a_preemptable_plugin_after_gang_in_its_tier": (_gang_first, "tiers[0].plugins[2]"),
}


@pytest.mark.parametrize("mutation", sorted(SCHEDULER_MUTATIONS))
def test_a_scheduler_setting_that_opens_the_minimum_fails_the_proof_naming_it(mutation):
    change, setting = SCHEDULER_MUTATIONS[mutation]
    config = _config()
    change(config)
    assert setting in _settings(config=config)


def test_an_unknown_plugin_fails_the_proof_naming_it():
    config = _config()
    config["tiers"][1]["plugins"].append({"name": "evictor-3000", "enablePreemptable": False})
    appended = len(config["tiers"][1]["plugins"]) - 1
    assert f"tiers[1].plugins[{appended}]: evictor-3000" in _settings(config=config)


@pytest.mark.parametrize("spec", [{"reclaimable": True}, {}], ids=["reclaimable", "reclaimable_unset"])
def test_a_reclaimable_queue_fails_the_proof_naming_it(spec):
    assert "Queue research: spec.reclaimable" in _settings(queues=[{"metadata": {"name": "research"}, "spec": spec}])


@pytest.mark.parametrize("name", ["batch-low", "evaluation"])
def test_a_training_or_evaluation_class_that_preempts_fails_the_proof_naming_it(name):
    classes = _classes()
    next(c for c in classes if c["metadata"]["name"] == name)["preemptionPolicy"] = "PreemptLowerPriority"
    assert f"PriorityClass {name}: preemptionPolicy" in _settings(classes=classes)


def test_a_class_without_a_preemption_policy_preempts_and_fails_the_proof():
    classes = _classes()
    del next(c for c in classes if c["metadata"]["name"] == "batch-low")[
        "preemptionPolicy"
    ]  # the API default: PreemptLowerPriority
    assert "PriorityClass batch-low: preemptionPolicy" in _settings(classes=classes)


def test_without_a_never_preempting_default_class_operator_pods_could_preempt():
    classes = [c for c in _classes() if not c["globalDefault"]]
    assert "PriorityClass: globalDefault" in _settings(classes=classes)
    preempting_default = _classes()
    preempting_default[0]["preemptionPolicy"] = "PreemptLowerPriority"
    assert "PriorityClass higgsfield-default: preemptionPolicy" in _settings(classes=preempting_default)


def test_check_refuses_a_stack_whose_scheduler_could_preempt_a_training_minimum(project_copy, capsys, monkeypatch):
    config = _config()
    config["actions"] = "allocate, preempt, reclaim, backfill"
    monkeypatch.setattr(training, "SCHEDULER_CONFIG", config)
    project_copy("dev", lambda c: None)
    assert main(["check", "bad"]) == 1
    finding = " ".join(
        capsys.readouterr().out.split("training-minimum-never-preempted", 1)[1].split()
    )  # wrapped below its policy line
    assert "actions: reclaim" in finding


# --- the team policy: who may carry the preempting class -------------------------------------

SERVING = rules_of(config_of("staging").scheduler.teams[0], config_of("staging").scheduler.priority_classes)


def test_a_serving_pod_left_to_kube_scheduler_is_denied():
    pod = _pod(uid=SERVING.uid, priorityClassName="serving")
    pod["metadata"]["namespace"] = SERVING.name
    pod["spec"]["schedulerName"] = "default-scheduler"
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1"}
    }  # not even a GPU: kube-scheduler would still preempt for it
    assert any("scheduled by volcano" in m for m in denied_by(pod, SERVING))
    pod["spec"]["schedulerName"] = "volcano"
    assert denied_by(pod, SERVING) == []


@pytest.mark.parametrize("where", ["schedulingPolicy", "template"])
def test_a_training_job_may_not_carry_the_serving_class(where):
    job = _job(queue="research", priority="batch-low", uid=SERVING.uid)
    job["metadata"]["namespace"] = SERVING.name
    if where == "schedulingPolicy":
        job["spec"]["runPolicy"]["schedulingPolicy"]["priorityClass"] = "serving"
    else:
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "serving"
    assert any("training jobs never preempt" in m for m in denied_by(job, SERVING))


def test_a_pod_given_the_platforms_default_class_is_admitted():
    """The API server writes higgsfield-default into a pod naming no class, before the policy runs (a
    Kubeflow job's pod, the operator's, whose template names none: a plain GPU pod must name a class the
    plain-gpu quota counts, tests/security/test_plain_gpu_demand.py)."""
    pod = _pod(uid=SERVING.uid, priorityClassName="higgsfield-default")
    pod["metadata"]["namespace"] = SERVING.name
    assert denied_by(pod, SERVING, user=OPERATOR_USER) == []


# --- the rendered elastic job ----------------------------------------------------------------


def test_the_elastic_jobs_minimum_is_its_gang_and_only_its_workers_above_it_may_be_taken(stack):
    cfg = plan_of(stack).config
    job = jobs.render("pytorch-elastic", cfg)[-1]
    elastic, worker = job["spec"]["elasticPolicy"], job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == elastic["minReplicas"] == worker["replicas"]
    # Volcano reads the pod's mark (api/pod_info.go GetPodPreemptable); gang keeps minAvailable of them
    assert worker["template"]["metadata"]["annotations"]["volcano.sh/preemptable"] == "true"
    assert worker["template"]["spec"]["priorityClassName"] in cfg.scheduler.classes_of(
        next(t for t in cfg.scheduler.teams if t.name == job["metadata"]["namespace"]), "training"
    )


@pytest.mark.parametrize("example", ["pytorch-ddp", "mpi-nccl-tests", "tf-mnist", "xgboost-iris"])
def test_gang_jobs_without_elasticity_mark_every_pod_not_preemptable(stack, example):
    cfg = plan_of(stack).config
    if example not in jobs.examples_for(cfg):
        pytest.skip(f"{example} does not run on {stack}")
    job = jobs.render(example, cfg)[-1]
    for template in jobs.pod_templates(job):
        assert template["metadata"]["annotations"]["volcano.sh/preemptable"] == "false"

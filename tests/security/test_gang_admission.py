"""The platform, not the tenant, decides a gang (issue 34, point 2): the team admission policy
refuses a Kubeflow job whose schedulingPolicy.minResources is set, whose minAvailable disagrees
with its replicas, an elastic job created above its minimum or grown by hand, and an HPA metric
other than the platform's room. cel-expr-python, as tests/security/test_tenancy.py evaluates the policy."""

from __future__ import annotations

import copy

import pytest

from components.workloads import ELASTIC_ROOM_METRIC
from tests.security.test_tenancy import _job, denied_by

MIN_RESOURCES = "a gang's minResources is the platform's"
MIN_AVAILABLE = "spec.runPolicy.schedulingPolicy.minAvailable is every replica"
GROWS = "an elastic PyTorchJob starts with its Worker replicas"
METRIC = "an elastic job scales on the platform's metric only"


def _gang(workers: int, min_available: int | None) -> dict:
    job = _job()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
    policy = job["spec"]["runPolicy"]["schedulingPolicy"]
    policy.pop("minAvailable")
    if min_available is not None:
        policy["minAvailable"] = min_available
    return job


def _room(queue: str = "experiments", pool: str = "h100", value: str = "1") -> dict:
    return {
        "type": "External",
        "external": {
            "metric": {"name": ELASTIC_ROOM_METRIC, "selector": {"matchLabels": {"queue_name": queue, "pool": pool}}},
            "target": {"type": "Value", "value": value},
        },
    }


def _elastic(workers: int = 2, min_replicas: int = 2, metrics: list | None = None) -> dict:
    job = _gang(workers, None)
    del job["spec"]["pytorchReplicaSpecs"]["Master"]
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {"higgsfield.io/pool": "h100"}
    job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = min_replicas
    job["spec"]["elasticPolicy"] = {
        "rdzvBackend": "c10d",
        "minReplicas": min_replicas,
        "maxReplicas": 16,
        "metrics": [_room()] if metrics is None else metrics,
    }
    return job


def _denied(obj: dict, prefix: str, **request) -> bool:
    return any(m.startswith(prefix) for m in denied_by(obj, **request))


def test_a_job_declaring_its_own_min_resources_is_denied():
    job = _gang(16, None)
    job["spec"]["runPolicy"]["schedulingPolicy"]["minResources"] = {"cpu": "1"}
    assert _denied(job, MIN_RESOURCES)


def test_a_128_gpu_gang_declaring_min_available_1_is_denied():
    assert _denied(_gang(15, 1), MIN_AVAILABLE)


@pytest.mark.parametrize("min_available", [None, 16])
def test_a_gang_of_all_its_replicas_or_the_operators_default_is_admitted(min_available):
    assert denied_by(_gang(15, min_available)) == []


def test_an_mpijob_gang_counts_its_launcher():
    job = _gang(4, 5)
    specs = job["spec"].pop("pytorchReplicaSpecs")
    job.update(kind="MPIJob", metadata={**job["metadata"], "name": "mpi-j"})
    job["spec"]["mpiReplicaSpecs"] = {"Launcher": specs["Master"], "Worker": specs["Worker"]}
    assert denied_by(job) == []
    job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = 4
    assert _denied(job, MIN_AVAILABLE)


def test_an_elastic_job_at_its_minimum_with_the_platforms_room_is_admitted():
    assert denied_by(_elastic()) == []


def test_an_elastic_job_created_above_its_minimum_is_denied():
    """minReplicas 1 with 16 Worker replicas: the gang is 1 pod, and 15 pods wait for nodes the
    autoscaler buys."""
    job = _elastic(workers=16, min_replicas=1)
    assert _denied(job, GROWS)


def test_an_elastic_job_grown_by_its_hpa_may_still_be_updated_but_not_grown_by_hand():
    old = _elastic()
    scaled = copy.deepcopy(old)
    scaled["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 6
    assert denied_by(scaled, operation="UPDATE", old=copy.deepcopy(scaled)) == []  # the HPA grew it (/scale)
    assert _denied(scaled, GROWS, operation="UPDATE", old=old)  # a tenant's own edit


METRICS = {
    "utilisation": [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 1}}}
    ],
    "another_queues_room": [_room(queue="production")],
    "another_pools_room": [_room(pool="b200")],
    "a_lower_target": [_room(value="0.01")],
    "a_second_metric": [_room(), _room()],
    "a_widened_selector": [
        {
            **_room(),
            "external": {
                **_room()["external"],
                "metric": {
                    "name": ELASTIC_ROOM_METRIC,
                    "selector": {
                        "matchLabels": {"queue_name": "experiments", "pool": "h100"},
                        "matchExpressions": [{"key": "queue_name", "operator": "Exists"}],
                    },
                },
            },
        }
    ],
    "a_tenants_own_series": [
        {
            **_room(),
            "external": {
                **_room()["external"],
                "metric": {
                    "name": "my_room",
                    "selector": {"matchLabels": {"queue_name": "experiments", "pool": "h100"}},
                },
            },
        }
    ],
}


@pytest.mark.parametrize("metrics", sorted(METRICS))
def test_an_elastic_job_scaling_on_anything_but_the_platforms_room_is_denied(metrics):
    assert _denied(_elastic(metrics=METRICS[metrics]), METRIC)


def _hpa(kind: str = "PyTorchJob") -> dict:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "grow", "namespace": "vision"},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "kubeflow.org/v1" if kind != "Deployment" else "apps/v1",
                "kind": kind,
                "name": "j",
            },
            "minReplicas": 1,
            "maxReplicas": 64,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 1}},
                }
            ],
        },
    }


HPA = "a Kubeflow job's HorizontalPodAutoscaler is the Training Operator's"


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_team_hpa_on_its_elastic_job_is_denied(operation):
    """Beside the elasticPolicy: an HPA of the team's own on the job's /scale subresource, which the HPA
    controller may scale, would grow it on any metric."""
    assert _denied(_hpa(), HPA, operation=operation, old=_hpa() if operation == "UPDATE" else None)


def test_the_operators_hpa_and_a_teams_serving_hpa_are_admitted():
    from components.tenancy import OPERATOR_USER

    assert not _denied(_hpa(), HPA, user=OPERATOR_USER)
    assert denied_by(_hpa("Deployment")) == []


SIZE = "a Kubeflow job keeps its size"


def test_a_running_gang_grown_by_an_update_of_its_replicas_is_denied():
    """1 worker to 40 by a PUT: once the gang is Running the operator creates the 39 pods at once."""
    old = _gang(1, None)
    grown = copy.deepcopy(old)
    grown["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 40
    assert _denied(grown, SIZE, operation="UPDATE", old=old)


def test_a_replica_type_added_by_an_update_is_denied():
    old = _gang(4, None)
    added = copy.deepcopy(old)
    added["spec"]["pytorchReplicaSpecs"]["Evaluator"] = copy.deepcopy(added["spec"]["pytorchReplicaSpecs"]["Worker"])
    assert _denied(added, SIZE, operation="UPDATE", old=old)


def test_an_elastic_job_that_drops_its_elastic_policy_on_update_is_denied():
    old = _elastic(workers=2, min_replicas=2)
    plain = copy.deepcopy(old)
    del plain["spec"]["elasticPolicy"]
    plain["spec"]["runPolicy"]["schedulingPolicy"].pop("minAvailable")
    plain["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 40
    assert _denied(plain, SIZE, operation="UPDATE", old=old)


def test_an_elastic_job_that_raises_its_minimum_on_update_is_denied():
    old = _elastic(workers=2, min_replicas=2)
    raised = copy.deepcopy(old)
    raised["spec"]["elasticPolicy"].update(minReplicas=40, maxReplicas=40)
    raised["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = 40
    raised["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 40
    assert _denied(raised, SIZE, operation="UPDATE", old=old)


def test_an_update_that_keeps_the_jobs_size_is_admitted_and_the_operator_may_change_it():
    from components.tenancy import OPERATOR_USER

    old = _gang(4, None)
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"experiment": "b"}
    assert denied_by(relabelled, operation="UPDATE", old=old) == []
    grown = copy.deepcopy(old)
    grown["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 8
    assert not _denied(grown, SIZE, operation="UPDATE", old=old, user=OPERATOR_USER)


TEMPLATES = "a Kubeflow job keeps its pod templates while it runs"


def _cpu_only(job: dict) -> dict:
    job = copy.deepcopy(job)
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    return job


def test_a_running_gangs_pods_grown_to_gpus_by_an_update_of_its_template_are_denied():
    """40 CPU workers (a gang that forms at once) given 8 GPUs each by a PUT, replicas unchanged: each pod the
    member then deletes is re-created from the new template at once under the Running PodGroup."""
    new = _gang(40, None)
    assert _denied(new, TEMPLATES, operation="UPDATE", old=_cpu_only(new))


def test_a_suspended_jobs_templates_may_change_and_the_operator_may_write_them():
    """Suspended, a job has no pods and no PodGroup: resuming makes a Pending PodGroup that waits for enqueue."""
    from components.tenancy import OPERATOR_USER

    new = _gang(40, None)
    new["spec"]["runPolicy"]["suspend"] = True
    old = _cpu_only(new)
    assert not _denied(new, TEMPLATES, operation="UPDATE", old=old)
    new["spec"]["runPolicy"]["suspend"] = False  # resumed in the same UPDATE: the template must be the old one
    assert _denied(new, TEMPLATES, operation="UPDATE", old=old)
    assert not _denied(new, TEMPLATES, operation="UPDATE", old=old, user=OPERATOR_USER)


PODGROUP = "a PodGroup keeps its minMember and minResources"


def _podgroup(min_member: int, gpus: int, owner: str = "PyTorchJob") -> dict:
    """The PodGroup `j` the operator made for its job `j`, Running."""
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "j",
            "namespace": "vision",
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": owner, "name": "j", "uid": "u-1", "controller": True}
            ],
        },
        "spec": {
            "minMember": min_member,
            "queue": "experiments",
            "priorityClassName": "batch-low",
            "minResources": {"nvidia.com/gpu": str(gpus)},
        },
        "status": {"phase": "Running", "running": min_member},
    }


def test_a_running_podgroup_resized_by_another_job_of_the_same_name_is_denied_even_to_the_operator():
    """A TFJob `j` beside a running PyTorchJob `j` (or `j` orphan-deleted and made again larger): the operator's
    SyncPodGroup rewrites PodGroup `j` by name alone; refused, it fails, and no pod of the newcomer is made."""
    from components.tenancy import OPERATOR_USER

    assert _denied(_podgroup(40, 320), PODGROUP, operation="UPDATE", old=_podgroup(2, 16), user=OPERATOR_USER)


def test_the_operators_unchanged_podgroup_update_is_admitted():
    from components.tenancy import OPERATOR_USER

    assert not _denied(_podgroup(2, 16), PODGROUP, operation="UPDATE", old=_podgroup(2, 16), user=OPERATOR_USER)


def test_an_elastic_job_without_min_available_is_denied():
    """Unset, the operator's minMember is every replica, which its HPA grows: its PodGroup would change size."""
    job = _elastic()
    job["spec"]["runPolicy"]["schedulingPolicy"].pop("minAvailable")
    assert _denied(job, "an elastic PyTorchJob sets spec.runPolicy.schedulingPolicy.minAvailable")


def test_an_elastic_jobs_hpa_still_scales_it_through_scale_which_no_team_may_call():
    """The operator's HPA writes the job's /scale subresource: the team policy does not match it (a rule
    naming `pytorchjobs` matches no subresource), so the grown job's later UPDATEs keep the grown size, and
    no team's Role grants /scale."""
    from components.tenancy import admission_policy, job_submitter_role
    from tests.security.test_tenancy import VISION

    rules = admission_policy(VISION)["spec"]["matchConstraints"]["resourceRules"]
    assert not any(r.endswith("/scale") for rule in rules for r in rule["resources"])
    assert not any(r.endswith("/scale") for rule in job_submitter_role("vision")["rules"] for r in rule["resources"])
    scaled = _elastic()
    scaled["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 6
    relabelled = copy.deepcopy(scaled)
    relabelled["metadata"]["labels"] = {"experiment": "b"}
    assert denied_by(relabelled, operation="UPDATE", old=scaled) == []


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [("kubeflow.org/v1", "pytorchjob"), ("kubeflow.org/v1", "PYTORCHJOB"), ("Kubeflow.org/v1", "PyTorchJob")],
)
def test_a_team_hpa_on_a_kubeflow_job_is_denied_whatever_the_spelling(api_version, kind):
    """The HPA controller's REST mapper knows every kind lower-cased too: `kind: pytorchjob` reaches
    pytorchjobs/scale, and minReplicas 40 would set 40 workers without reading a metric."""
    hpa = _hpa(kind)
    hpa["spec"]["scaleTargetRef"]["apiVersion"] = api_version
    hpa["spec"].update(minReplicas=40, maxReplicas=40)
    assert _denied(hpa, HPA)


def test_an_elastic_job_with_a_master_is_denied_for_its_gang_would_be_counted_differently_each_pass():
    """Grown past minMember, the operator counts the first minMember pods of its replica types after an
    unstable sort (CalcPGMinResources, kubeflow/trainer:pkg/controller.v1/common/util.go@v1.9.4)."""
    job = _elastic()
    assert denied_by(job) == []
    job["spec"]["pytorchReplicaSpecs"]["Master"] = copy.deepcopy(job["spec"]["pytorchReplicaSpecs"]["Worker"])
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 1
    job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = 3
    assert _denied(job, "an elastic PyTorchJob has Worker replicas only")


# --- a gang larger than the namespace's pods quota ---------------------------------------------------


def _prod_team():
    from components.teams import compute_quota, rules_of
    from tests.conftest import config_of

    cfg = config_of("prod")
    team = cfg.scheduler.teams[0]
    return rules_of(team, cfg.scheduler.priority_classes, pools=cfg.gpu_pools), int(
        compute_quota(team, cfg.gpu_pools)["spec"]["hard"]["pods"]
    )


def test_a_gang_of_more_pods_than_the_teams_pods_quota_is_refused():
    """The quota admits the operator's pods one at a time: such a gang is Inqueue and never whole."""
    rules, pods = _prod_team()
    job = _gang(workers=pods, min_available=pods + 1)
    job["metadata"]["namespace"] = rules.name
    assert any("pods quota" in m for m in denied_by(job, rules))


def test_a_gang_of_the_teams_whole_pods_quota_is_not_refused_for_its_size():
    rules, pods = _prod_team()
    job = _gang(workers=pods - 1, min_available=pods)
    assert not any("pods quota" in m for m in denied_by(job, rules))

"""`kube.cpu-only-quota` reads each team namespace's `cpu-only` ResourceQuota from the API server: as planned
(components/teams.py cpu_only_quota), counting (status.used, the quota controller's figures) exactly what the
namespace's pods with a deadline, not ended, request; and no pod without GPUs on the GPU nodes runs to no deadline.
`kube.tenant-attacks` dry-runs a Job of pods without GPUs on the GPU nodes and no deadline, which the team policy
must refuse for that. The cluster is the fake API server seeded as a healthy prod cluster (tests/cli/
test_verify_checks.py seed: each team's quota as planned, nothing counted), whose admission is the team policies'
CEL; each test writes the pods and the quota's figures as the API server and its quota controller would hold them."""

from __future__ import annotations

import copy

import pytest

from components.cpu_nodes import ON_TEAM_CPU_NODES
from components.teams import rules_of
from infra.cli.verify import checks
from infra.config import CPU_SERVICE_PRIORITY_CLASS
from infra.core import names
from infra.core.names import LONGEST_POD_DEADLINE
from tests.cli.test_verify_checks import (  # noqa: F401 (fixtures)
    _vap_denial,
    cluster,
    ctx,
    one,
    plan,
    team_admission,
)
from tests.security.test_r20_operator_pods import _job_file, _owned_by
from tests.security.test_team_cpu_nodes_policy import _an_mpijob_from_before_the_rule

GPU_TOLERATION = [{"key": names.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]


def _pod(name: str, team: str = "vision", gpus: int = 0, phase: str = "Running", **spec) -> dict:
    """A pod on the GPU nodes as the API server stores it: its requests, GPUs requested as limited."""
    resources: dict = {"requests": {"cpu": "1500m", "memory": "3Gi"}}
    if gpus:
        resources = {"requests": {**resources["requests"], names.GPU_RESOURCE: str(gpus)}}
        resources["limits"] = {names.GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": team},
        "spec": {
            "tolerations": copy.deepcopy(GPU_TOLERATION),
            "containers": [{"name": "main", "image": "x", "resources": resources}],
            **spec,
        },
        "status": {"phase": phase},
    }


def _launcher(name: str = "mpi-nccl-launcher", team: str = "vision") -> dict:
    """An MPI launcher as the platform renders it (infra/offline/team_job.py): no GPU, the longest deadline, and a
    sidecar beside its container, which the quota charges too."""
    pod = _pod(name, team, activeDeadlineSeconds=LONGEST_POD_DEADLINE)
    sidecar = {"name": "log", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}
    pod["spec"]["initContainers"] = [sidecar]
    return pod


def _counted(cluster, team: str, cpu: str, memory: str) -> None:
    """The quota controller's figures for the team's cpu-only quota."""
    path = f"/api/v1/namespaces/{team}/resourcequotas/cpu-only"
    quota = cluster.get(path)
    quota["status"]["used"] = {"requests.cpu": cpu, "requests.memory": memory}
    cluster.put(quota)


def test_quotas_as_planned_counting_a_launcher_pass(ctx, cluster):
    cluster.put(_launcher())
    cluster.put(_pod("train-worker-0", gpus=8))  # no deadline: the compute quota's, not this one's
    cluster.put(_pod("prep", phase="Succeeded", activeDeadlineSeconds=600))  # ended: no quota charges it
    _counted(cluster, "vision", "2", "3Gi")  # the launcher's 1500m and its sidecar's 500m
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "PASS", outcome
    assert "vision: cpu-only as planned (12 vCPUs, 48Gi), counting 1 pod(s) with a deadline (2 vCPUs, 3Gi)" in (
        outcome.evidence
    )
    assert "foundation: cpu-only as planned" in outcome.evidence


def _service(name: str = "router", team: str = "vision", **spec) -> dict:
    """A pod of a team's service without GPUs, as its Deployment's ReplicaSet makes it on the teams' CPU nodes."""
    pod = _pod(name, team, priorityClassName=CPU_SERVICE_PRIORITY_CLASS, **copy.deepcopy(ON_TEAM_CPU_NODES), **spec)
    return pod


def test_the_services_quota_counting_a_service_passes(ctx, cluster):
    cluster.put(_launcher())
    cluster.put(_service())
    _counted(cluster, "vision", "2", "3Gi")
    quota = cluster.get("/api/v1/namespaces/vision/resourcequotas/cpu-services")
    quota["status"]["used"] = {"requests.cpu": "1500m", "requests.memory": "3Gi"}
    cluster.put(quota)
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "PASS", outcome
    assert f"vision: cpu-services as planned (4 vCPUs, 16Gi), counting 1 pod(s) of {CPU_SERVICE_PRIORITY_CLASS}" in (
        outcome.evidence
    )


def test_a_services_quota_not_counting_its_service_fails_naming_it(ctx, cluster):
    """The API server putting the class's pods in no quota: its figures and the pods' sum differ."""
    cluster.put(_service())
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL" and "vision: cpu-services counts requests.cpu 0" in outcome.evidence, outcome
    assert "router" in outcome.evidence


def test_a_services_quota_whose_room_was_raised_fails_naming_it(ctx, cluster):
    quota = cluster.get("/api/v1/namespaces/llm/resourcequotas/cpu-services")
    quota["spec"]["hard"]["pods"] = "400"
    cluster.put(quota)
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL" and "llm: cpu-services hard.pods not as planned" in outcome.evidence, outcome


def test_a_missing_quota_fails_naming_it(ctx, cluster):
    cluster.delete_now("/api/v1/namespaces/llm/resourcequotas/cpu-only")
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL" and "llm: no ResourceQuota cpu-only" in outcome.evidence, outcome
    assert "pulumi up" in outcome.fix


def test_a_quota_whose_scope_was_changed_fails_naming_it(ctx, cluster):
    quota = cluster.get("/api/v1/namespaces/llm/resourcequotas/cpu-only")
    quota["spec"]["scopes"] = ["NotBestEffort"]  # it would count the GPU pods too, and nothing of its room
    cluster.put(quota)
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL" and "llm: cpu-only scopes not as planned" in outcome.evidence, outcome


def test_a_quota_whose_room_was_raised_fails_naming_it(ctx, cluster):
    quota = cluster.get("/api/v1/namespaces/llm/resourcequotas/cpu-only")
    quota["spec"]["hard"]["requests.cpu"] = "192"
    cluster.put(quota)
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL" and "llm: cpu-only hard.requests.cpu not as planned" in outcome.evidence


def test_a_room_written_in_other_units_is_the_same_quantity_and_passes(ctx, cluster):
    quota = cluster.get("/api/v1/namespaces/llm/resourcequotas/cpu-only")
    quota["spec"]["hard"] = {"requests.cpu": "12000m", "requests.memory": "49152Mi", "pods": "12"}
    cluster.put(quota)
    assert one("kube.cpu-only-quota", ctx).status == "PASS"


def test_figures_other_than_the_pods_with_a_deadline_ask_fail_naming_both_and_the_pods(ctx, cluster):
    """The API server counting a pod the policy did not mark (or missing one the policy marked): the quota's
    figures and the pods' sum differ."""
    cluster.put(_launcher())
    _counted(cluster, "vision", "3500m", "3Gi")  # as if it charged a GPU pod's CPU too
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL", outcome
    assert (
        "vision: cpu-only counts requests.cpu 3500m, its pods' 2 (pod(s) with a deadline, not ended: mpi-nccl-launcher)"
        in outcome.evidence
    )
    assert "requests.memory" not in outcome.evidence  # that figure agrees
    assert "the quota controller recounts within seconds" in outcome.fix


def test_a_pod_without_gpus_and_without_a_deadline_on_the_gpu_nodes_fails_naming_it(ctx, cluster):
    cluster.put(_pod("old-router-7c9d-x2v"))  # made before the rule
    cluster.put(_pod("train-worker-0", gpus=8))
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL", outcome
    assert "vision/old-router-7c9d-x2v: on the GPU nodes without GPUs and without a deadline" in outcome.evidence
    assert "train-worker-0" not in outcome.evidence
    assert "docs/upgrading.md" in outcome.fix and "3733dc2" in outcome.fix


def _of_job(pod: dict, kind: str, name: str) -> dict:
    pod["metadata"]["ownerReferences"] = _owned_by("kubeflow.org/v1", kind, name)
    pod["spec"]["nodeName"] = "ip-10-40-1-11.ec2.internal"
    return pod


def test_a_kubeflow_jobs_pod_without_gpus_beside_its_jobs_gpu_pods_passes(ctx, cluster):
    """An MPI launcher with its workers (the platform's): its node is its gang's."""
    cluster.put(_of_job(_launcher("mpi-nccl-launcher"), "MPIJob", "mpi-nccl"))
    cluster.put(_of_job(_pod("mpi-nccl-worker-0", gpus=8), "MPIJob", "mpi-nccl"))
    _counted(cluster, "vision", "2", "3Gi")
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "PASS", outcome


def test_a_kubeflow_jobs_pod_without_gpus_outliving_its_jobs_gpu_pods_fails_naming_it_and_its_node(ctx, cluster):
    """The attack of tests/security/test_r21_attack.py seen after the fact: an XGBoostJob's Master without GPUs,
    sleeping to its deadline after its GPU Workers ended, keeps its GPU node from the Cluster Autoscaler's
    scale-down."""
    cluster.put(_of_job(_launcher("xgboost-pin-master-0"), "XGBoostJob", "xgboost-pin"))
    cluster.put(_of_job(_pod("xgboost-pin-worker-0", gpus=8, phase="Succeeded"), "XGBoostJob", "xgboost-pin"))
    _counted(cluster, "vision", "2", "3Gi")
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL", outcome
    assert (
        "vision/xgboost-pin-master-0 (XGBoostJob xgboost-pin, on ip-10-40-1-11.ec2.internal): without GPUs while none "
        "of its job's GPU pods runs" in outcome.evidence
    )
    assert "kubectl -n TEAM delete KIND NAME" in outcome.fix


def test_a_kubeflow_jobs_pod_without_gpus_beside_only_a_pending_gpu_pod_fails(ctx, cluster):
    """A retried GPU worker left Pending (its queue full) holds no node: the Master's node is kept for it alone."""
    cluster.put(_of_job(_launcher("xgboost-pin-master-0"), "XGBoostJob", "xgboost-pin"))
    retried = _of_job(_pod("xgboost-pin-worker-0", gpus=8, phase="Pending"), "XGBoostJob", "xgboost-pin")
    del retried["spec"]["nodeName"]
    cluster.put(retried)
    _counted(cluster, "vision", "2", "3Gi")
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL" and "vision/xgboost-pin-master-0 (XGBoostJob xgboost-pin" in outcome.evidence


def test_a_kubeflow_jobs_pod_without_gpus_not_yet_bound_or_being_deleted_is_not_named(ctx, cluster):
    """Neither holds a node past its job: a PS pod cleaned up after its workers ended, a pod not placed yet."""
    deleting = _of_job(_launcher("tf-pin-ps-0"), "TFJob", "tf-pin")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    cluster.put(deleting)
    pending = _of_job(_launcher("tf-wait-ps-0"), "TFJob", "tf-wait")
    del pending["spec"]["nodeName"]
    cluster.put(pending)
    _counted(cluster, "vision", "4", "6Gi")  # both still charged by the quota
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "PASS", outcome
    assert "tf-pin-ps-0" not in outcome.evidence and "tf-wait-ps-0" not in outcome.evidence, outcome


def test_the_cpu_only_job_is_refused_by_the_team_policy_for_its_deadline_alone(plan):
    """So the dry run is refused for what it lacks, and nothing else: with a deadline, every team policy admits it."""
    from tests.security.test_tenancy import denied_by

    for team in plan.config.scheduler.teams:
        rules = rules_of(team, plan.config.scheduler.priority_classes, pools=plan.config.gpu_pools)
        job = checks.cpu_only_job(team, checks.plain_class(plan.config, team))
        refused = denied_by(job, rules)
        assert len(refused) == 1 and checks.DEADLINE_FIELD in refused[0], refused
        job["spec"]["template"]["spec"]["activeDeadlineSeconds"] = LONGEST_POD_DEADLINE
        assert denied_by(job, rules) == []


@pytest.mark.parametrize("fault", sorted(set(checks.CPU_ONLY_FAULTS) - {"deadline"}))
def test_each_job_without_gpus_the_tenant_attacks_try_is_refused_by_the_team_policy_for_its_fault_alone(plan, fault):
    """So each dry run is refused for what it does wrong (on the GPU nodes, for kube-scheduler on the teams' CPU nodes,
    tolerating their taint without selecting them), and nothing else."""
    from tests.security.test_tenancy import denied_by

    mark = checks.CPU_ONLY_FAULTS[fault][2]
    for team in plan.config.scheduler.teams:
        rules = rules_of(team, plan.config.scheduler.priority_classes, pools=plan.config.gpu_pools)
        refused = denied_by(checks.cpu_only_job(team, checks.plain_class(plan.config, team), fault), rules)
        assert len(refused) == 1 and refused[0].startswith(mark), refused


def test_the_tenant_attacks_see_the_cpu_only_job_refused_for_its_deadline(ctx, cluster):
    outcome = one("kube.tenant-attacks", ctx)
    assert outcome.status == "PASS", outcome
    assert "vision: a Job without GPUs on the teams' CPU nodes and no deadline refused (403) for its deadline" in (
        outcome.evidence
    )
    assert "vision: a Job without GPUs on the GPU nodes refused (403) for asking no GPU there" in outcome.evidence
    assert "vision: a Job without GPUs on the teams' CPU nodes for kube-scheduler refused (403) for its scheduler" in (
        outcome.evidence
    )
    assert (
        "vision: a Job without GPUs tolerating the teams' CPU nodes without selecting them refused (403) for its "
        "selector" in outcome.evidence
    )
    assert (
        "vision: a Job without GPUs on the teams' CPU nodes in higgsfield-cpu-service refused (403) for its class"
        in outcome.evidence
    )
    assert ("POST", "/apis/batch/v1/namespaces/vision/jobs?dryRun=All&fieldValidation=Strict") in cluster.requests
    assert not [k for k in cluster.objects if k[2] == "jobs"]


def _admitting_jobs(plan, refusal=None):
    """The team policies, but for batch Jobs: admitted, or refused with `refusal`'s message."""
    policies = team_admission(plan.config)

    def admit(verb, obj, old):
        if obj.get("kind") == "Job":
            return refusal and _vap_denial(obj["metadata"]["namespace"], obj, refusal)
        return policies(verb, obj, old)

    return admit


def test_a_cpu_only_job_admitted_fails_the_tenant_attacks(ctx, cluster, plan):
    cluster.admit = _admitting_jobs(plan)  # a team policy without the deadline rule
    outcome = one("kube.tenant-attacks", ctx)
    assert outcome.status == "FAIL", outcome
    assert (
        "vision: a Job without GPUs on the teams' CPU nodes and no deadline was admitted (dry run)" in outcome.evidence
    )
    assert "vision: a Job without GPUs on the GPU nodes was admitted (dry run)" in outcome.evidence
    assert "DaemonSet" not in outcome.evidence and "TFJob" not in outcome.evidence  # the rest still refused
    assert not [k for k in cluster.objects if k[2] == "jobs"]  # a dry run even when admitted


def test_a_cpu_only_job_refused_for_something_else_fails_the_tenant_attacks(ctx, cluster, plan):
    cluster.admit = _admitting_jobs(plan, refusal="a GPU pod outside a Kubeflow job names a serving class")
    outcome = one("kube.tenant-attacks", ctx)
    assert outcome.status == "FAIL", outcome
    assert (
        "vision: a Job without GPUs on the teams' CPU nodes and no deadline was refused (403), not for its deadline"
        in (outcome.evidence)
    )
    assert (
        "vision: a Job without GPUs on the GPU nodes was refused (403), not for asking no GPU there" in outcome.evidence
    )


def test_kubeflow_jobs_as_the_platform_renders_them_pass_the_placement_check(ctx, cluster):
    for framework in ("mpi", "pytorch"):
        cluster.put(_job_file(framework))
    outcome = one("kube.job-placement", ctx)
    assert outcome.status == "PASS" and "2 Kubeflow jobs" in outcome.evidence, outcome


def test_a_job_whose_launcher_takes_a_gpu_node_without_gpus_fails_naming_it(ctx, cluster):
    """Made before the rule, its launcher still runs there (the policy lets the Training Operator make it): the one
    thing the exemption lets through, named until none is left."""
    job = _an_mpijob_from_before_the_rule()
    cluster.put(job)
    outcome = one("kube.job-placement", ctx)
    where = f"{job['metadata']['namespace']}/MPIJob {job['metadata']['name']}"
    assert outcome.status == "FAIL" and f"{where}: its Launcher on the GPU nodes without GPUs" in outcome.evidence
    assert "docs/upgrading.md" in outcome.fix


def test_a_finished_job_whose_launcher_took_a_gpu_node_passes_the_placement_check(ctx, cluster):
    """Succeeded, the operator makes no pod of it again: nothing relies on the exemption."""
    job = _an_mpijob_from_before_the_rule()
    job["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    cluster.put(job)
    assert one("kube.job-placement", ctx).status == "PASS"


def test_a_quota_counting_other_pods_than_its_own_fails_naming_its_pods_figure(ctx, cluster):
    """Pods that ask no CPU or memory (a service's, admitted with nothing requested) show in the quota's pods alone:
    the quota controller counting one the policy did not mark leaves the CPU and memory figures agreeing."""
    cluster.put(_launcher())
    _counted(cluster, "vision", "2", "3Gi")
    quota = cluster.get("/api/v1/namespaces/vision/resourcequotas/cpu-only")
    quota["status"]["used"]["pods"] = "2"
    cluster.put(quota)
    outcome = one("kube.cpu-only-quota", ctx)
    assert outcome.status == "FAIL" and "vision: cpu-only counts pods 2, its pods' 1" in outcome.evidence, outcome

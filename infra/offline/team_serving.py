"""A team's job file of `class: serving`, rendered as the platform serves: a Deployment shaped like
examples/serving-classifier.yaml (`higgsfield jobs render STACK -f JOB.yaml`).

The team's admission policy refuses a Kubeflow job of a serving class (training never preempts:
components/tenancy.py), so a serving job is no Kubeflow job. It is placed by the same constraints as
a training job (infra/offline/team_job.py `place`: gpus, gpuType, gpuMemoryGiB, cudaDriver, the
team's quota and its queue's capability) and by the team's serving quota; `resources.gpus` becomes
replicas, each one pod: one of a node's share, or one whole node each. Each replica gets what the
serving example gets: the team's serving priority class and queue, scheduled by Volcano (its
PodGroup's floor), the pool's taints tolerated, its share of the node's memory and /dev/shm, the
driver affinity, the team's FSx directory and datasets, its UID/GID; and not what only training
has: no checkpoints, no do-not-disrupt, not preemptable by evaluation (docs/workload-classes.md).
"""

from __future__ import annotations

from typing import Any

from components.tenancy import SCHEDULER
from components.workloads import SERVING_LABEL, SERVING_PORT
from infra.config import ConfigError, JobFile, StackConfig, Team
from infra.core.names import GPU_RESOURCE, JOB_FILE_LABEL, POOL_LABEL, QUEUE_ANNOTATION
from infra.offline import jobs
from infra.offline.pods import check_image, default_image, run_as_team
from infra.offline.team_job import Placement, _driver_affinity, _share_of_node, _shown, _team, place

CONTAINER = "server"  # the serving example's container name
APP_LABEL = "app"  # the Deployment's selector, as the serving example's (its Service selects it too)
# The serving floor: Volcano makes room for this many replicas of the Deployment's ReplicaSet (its
# PodGroup's minMember, from the annotation the Volcano controller reads off the ReplicaSet,
# volcano-sh/volcano:pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1 getMinMemberFromUpperRes);
# the other replicas take free GPUs. One, as the example: a floor above one would hold a rolling
# update's new ReplicaSet, which starts at one replica, below its minimum forever.
FLOOR = jobs.SERVING_FLOOR
MIN_MEMBER = "scheduling.volcano.sh/group-min-member"


def _serving_quota(job: JobFile, cfg: StackConfig, team: Team) -> None:
    """The team's serving quota (a ResourceQuota on its serving classes' pods) holds every replica."""
    gpus, t = int(job.resources.gpus), cfg.scheduler.teams.index(team)
    if team.serving_gpu_quota is not None and gpus > team.serving_gpu_quota:
        raise ConfigError(
            "resources.gpus",
            f"{gpus} GPUs is more than team {team.name}'s serving quota of {team.serving_gpu_quota} GPUs "
            f"(higgsfield:scheduler.teams[{t}].servingGpuQuota)",
        )


def _template(job: JobFile, cfg: StackConfig, placed: Placement, team: Team, priority: str, image: str) -> dict:
    """One replica's pod template, every platform rule of the serving example applied."""
    pool = placed.pool
    spec: dict[str, Any] = {
        # the team policy requires Volcano of a serving class (it preempts only what a gang can spare)
        "schedulerName": SCHEDULER,
        "priorityClassName": priority,
        "automountServiceAccountToken": False,  # serving needs no Kubernetes API
        "nodeSelector": {POOL_LABEL: pool.name, "topology.kubernetes.io/zone": pool.availability_zone},
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "command": list(job.command),
                "env": [{"name": k, "value": v} for k, v in job.env.items()],
                "resources": {"limits": {GPU_RESOURCE: placed.gpus_per_pod}},
                "volumeMounts": [{"name": "local", "mountPath": "/local"}],
            }
        ],
        "volumes": [{"name": "local", "emptyDir": {}}],  # the node's RAID0 NVMe
    }
    affinity = _driver_affinity(job)
    if affinity:
        spec["affinity"] = affinity
    if job.port is not None:
        spec["containers"][0]["ports"] = [{"name": SERVING_PORT, "containerPort": int(job.port), "protocol": "TCP"}]
    key, value = SERVING_LABEL
    template = {
        "metadata": {
            "labels": {APP_LABEL: job.name, key: value},  # the serving scrape job keeps these pods
            # the queue of the replicas' PodGroup (buildPodGroupFromPod in the file cited at FLOOR);
            # never taken back by evaluation or an elastic job (docs/workload-classes.md)
            "annotations": {QUEUE_ANNOTATION: team.queue, "volcano.sh/preemptable": "false"},
        },
        "spec": spec,
    }
    _share_of_node(template, pool, image, placed.gpus_per_pod)  # the pool's taints, memory, /dev/shm; no EFA
    if cfg.fsx.enabled:
        jobs._attach_lustre(template)
        jobs._attach_datasets(template, cfg, team, only=tuple(d.dataset for d in job.data) or None)
    run_as_team(template, team)
    return template


def render(job: JobFile, cfg: StackConfig) -> tuple[list[dict], Placement]:
    """The Deployment of the team's serving job on stack `cfg`, and where it was placed. Refusals
    are ConfigErrors naming the job-file key."""
    team, priority = _team(cfg, job)
    placed = place(job, cfg, team)
    _serving_quota(job, cfg, team)
    if job.image is not None:
        # an image reference, from any registry: a serving replica is one pod and uses no EFA, so the
        # EFA-ready image an EFA pool asks of a training job (pods.check_image) is not asked of it
        check_image(cfg, placed.pool.model_copy(update={"efa": False}), job.image, key="image")
    image = job.image or default_image(cfg)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": job.name,
            "namespace": team.name,
            "labels": {JOB_FILE_LABEL: "true"},
            # copied to the ReplicaSet, read into its PodGroup's minMember (FLOOR)
            "annotations": {MIN_MEMBER: str(min(FLOOR, placed.pods))},
        },
        "spec": {
            "replicas": placed.pods,
            "selector": {"matchLabels": {APP_LABEL: job.name}},
            "template": _template(job, cfg, placed, team, priority, image),
        },
    }
    return [*_service(job, team), deployment], placed


def _service(job: JobFile, team: Team) -> list[dict]:
    """With a `port`: the Service in front of the replicas, as the serving example's (port 80 to the
    replicas' `http` port, inside the cluster: ClusterIP, what the team's policy allows by default)."""
    if job.port is None:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": job.name, "namespace": team.name, "labels": {JOB_FILE_LABEL: "true"}},
            "spec": {
                "selector": {APP_LABEL: job.name},
                "ports": [{"name": SERVING_PORT, "port": 80, "targetPort": SERVING_PORT, "protocol": "TCP"}],
            },
        }
    ]


def header(job: JobFile, cfg: StackConfig, placed: Placement, objects: list[dict]) -> str:
    """The YAML comment on top of a rendered serving job: where it was placed and why."""
    deployment = objects[-1]
    pod, floor = deployment["spec"]["template"], deployment["metadata"]["annotations"][MIN_MEMBER]
    lines = [
        f"# {job.name} (Deployment, serving) for stack {cfg.stack}, rendered from a job file by higgsfield jobs render",
        f"# Placed on pool {_shown(placed.pool)}: {placed.pods} replica(s) x {placed.gpus_per_pod} GPUs, "
        f"{placed.pool.capacity_type}; Volcano makes room for {floor} (the floor), "
        "the others take free GPUs.",
        f"# Team {job.team}: queue {pod['metadata']['annotations'][QUEUE_ANNOTATION]}, priority class "
        f"{pod['spec']['priorityClassName']}, UID/GID {pod['spec']['securityContext']['runAsUser']}.",
    ]
    if placed.others:
        lines.append(f"# Also fitted: {', '.join(placed.others)} (on-demand pools first, then the stack file's order).")
    if job.port is not None:
        lines.append(f"# Reached inside the cluster at http://{job.name}.{job.team} (Service {job.name}, port 80).")
    return "\n".join([*lines, jobs.image_comment(cfg, pod["spec"]["containers"][0]["image"]), ""])

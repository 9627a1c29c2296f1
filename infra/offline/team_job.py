"""A team's own job file (infra/config/job.py) placed on a stack and rendered:
`higgsfield jobs render STACK -f JOB.yaml`.

What the job needs chooses among the stack's GPU pools (`place`): the GPU model and memory per GPU,
EFA, whole nodes of GPUs within the pool's maxSize, the team's quota and its queue's capability;
each refusal names the job-file key no pool can satisfy. The CUDA driver it asks for is checked
against the EKS AMI's driver branch, and required of the nodes through the label GPU feature
discovery publishes (names.DRIVER_MAJOR_LABEL). Then every rule the examples follow is applied by
the same builders (infra/offline/jobs.py and pods.py): the team's queue and priority class, the
pool's taints, EFA interfaces, huge pages and environment, memory and /dev/shm, the checkpoint
settings and grace period, the team's FSx directory and datasets, do-not-disrupt on training pods,
and the team's UID/GID. The team writes none of it (docs/design/job-files.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from components.tenancy import SCHEDULER
from components.workloads import ELASTIC_ROOM_METRIC, SERVING_LABEL, SERVING_PORT
from infra.config import FRAMEWORKS, ConfigError, GpuPool, JobFile, StackConfig, Team, file_error
from infra.core import versions
from infra.core.assets import shipped
from infra.core.names import (
    CLEAN_POD_POLICY,
    DO_NOT_DISRUPT,
    DRIVER_MAJOR_LABEL,
    GPU_RESOURCE,
    JOB_FILE_LABEL,
    KUBEFLOW_GROUP,
    LONGEST_POD_DEADLINE,
    MIN_MEMBER_ANNOTATION,
    POOL_LABEL,
    PREFLIGHT_SWITCH,
    QUEUE_ANNOTATION,
)
from infra.offline import jobs
from infra.offline.pods import (
    NODE_MEMORY_SHARE,
    SHM_SHARE,
    check_image,
    default_image,
    merge_env,
    on_team_cpu_nodes,
    prepare_gpu_pod,
    request_in_full,
    request_the_operators_inits,
    run_as_team,
    tolerate_pool,
)

LAUNCHER = "checkpointing.py"  # examples/checkpointing.py: SIGTERM to the workers, rank-prefixed lines
CODE_MOUNT = "/code"
# A lost node's pods are evicted after 60 s instead of Kubernetes' default 300 s (examples/pytorch-ddp.yaml).
TOLERATIONS: list[dict[str, Any]] = [
    {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
]


@dataclass(frozen=True)
class Placement:
    """Where a job runs: `pods` pods of `gpus_per_pod` GPUs on `pool` (an elastic job: from
    `min_pods`), and the other pools that would have fitted."""

    pool: GpuPool
    pods: int
    gpus_per_pod: int
    min_pods: int
    others: tuple[str, ...]

    @property
    def whole_nodes(self) -> bool:
        return self.gpus_per_pod == self.pool.gpus_per_node


def _gib_per_gpu(pool: GpuPool) -> int:
    return pool.instance.gpu_memory_mib // max(1, pool.gpus_per_node) // 1024


def _shown(pool: GpuPool) -> str:
    efa = ", EFA" if pool.efa else ""
    return f"{pool.name} ({pool.gpus_per_node} x {pool.instance.gpu_model} {_gib_per_gpu(pool)} GiB{efa})"


def _narrow(
    pools: list[GpuPool], cfg: StackConfig, key: str, wanted: str, keep: Any, had: list[GpuPool]
) -> list[GpuPool]:
    """The pools `keep` accepts, or a refusal naming `key` and what the stack's pools offer."""
    kept = [p for p in pools if keep(p)]
    if not kept:
        offered = "; ".join(_shown(p) for p in had)
        raise ConfigError(key, f"{wanted}: no GPU pool of stack {cfg.stack} has it (its pools: {offered})")
    return kept


def check_driver(job: JobFile) -> None:
    """cudaDriver against the driver branch of the EKS AL2023 NVIDIA AMI every GPU pool runs
    (versions.EKS_NVIDIA_DRIVER_BRANCH), offline: a job that needs another never starts."""
    wanted = job.resources.driver_wanted()
    if wanted is None:
        return
    operator, branch = wanted
    have = versions.EKS_NVIDIA_DRIVER_BRANCH
    if (operator == ">=" and have < branch) or (operator == "==" and have != branch):
        fits = (
            f'">={branch}" (that branch or newer) or "{have}" (exactly)'
            if operator == "==" and branch < have
            else f'">={have}" or a lower branch, or "{have}" (exactly)'
        )
        raise ConfigError(
            "resources.cudaDriver",
            f"{job.resources.cuda_driver!r}: the GPU nodes run the EKS AL2023 NVIDIA AMI, whose NVIDIA driver is "
            f"branch {have} (infra/core/versions.py EKS_NVIDIA_DRIVER_BRANCH); ask for {fits}",
        )


def _shape(job: JobFile, pool: GpuPool) -> tuple[int, int] | None:
    """(pods, GPUs per pod) of `gpus` on `pool`: one pod of fewer GPUs than a node, or whole nodes."""
    gpus, per_node = int(job.resources.gpus), pool.gpus_per_node
    if gpus <= per_node:
        return 1, gpus
    if gpus % per_node or gpus // per_node > pool.max_size:
        return None
    return gpus // per_node, per_node


def _limits(job: JobFile, cfg: StackConfig, team: Team) -> None:
    """The team's quota and its queue's capability hold the whole job (at its largest)."""
    gpus, t = int(job.resources.gpus), cfg.scheduler.teams.index(team)
    q, queue = next((i, x) for i, x in enumerate(cfg.scheduler.queues) if x.name == team.queue)
    limits = [
        (
            team.gpu_quota,
            f"team {team.name}'s quota of {team.gpu_quota} GPUs (higgsfield:scheduler.teams[{t}].gpuQuota)",
        ),
        (
            queue.gpu_capability,
            f"queue {queue.name}'s capability of {queue.gpu_capability} GPUs "
            f"(higgsfield:scheduler.queues[{q}].gpuCapability)",
        ),
    ]
    over = [text for limit, text in limits if gpus > limit]
    if over:
        raise ConfigError("resources.gpus", f"{gpus} GPUs is more than {'; '.join(over)}")


def place(job: JobFile, cfg: StackConfig, team: Team) -> Placement:
    """The pool the job runs on: of the pools with its GPU model, memory and interconnect, those
    where its GPUs are one pod or whole nodes within maxSize; on-demand pools first, then the
    stack file's order (a reservation or Capacity Block only when nothing else fits)."""
    if not cfg.gpu_pools:
        raise ConfigError("higgsfield:gpuPools", f"stack {cfg.stack} has no GPU pool to run a job on")
    res, every = job.resources, list(cfg.gpu_pools)
    pools = every
    if res.gpu_type:
        wanted = {str(t).lower() for t in res.gpu_type}
        pools = _narrow(
            pools,
            cfg,
            "resources.gpuType",
            " or ".join(res.gpu_type),
            lambda p: (p.instance.gpu_model or "").lower() in wanted,
            every,
        )
    if res.gpu_memory_gib is not None:
        memory = int(res.gpu_memory_gib)
        pools = _narrow(
            pools,
            cfg,
            "resources.gpuMemoryGiB",
            f"{memory} GiB per GPU",
            lambda p: _gib_per_gpu(p) >= memory,
            pools,
        )
    if res.interconnect == "efa":
        pools = _narrow(pools, cfg, "resources.interconnect", "efa", lambda p: p.efa, pools)
    check_driver(job)
    _limits(job, cfg, team)
    shaped = [(p, s) for p in pools if (s := _shape(job, p)) is not None]
    if not shaped:
        sizes = "; ".join(f"{p.name}: {p.gpus_per_node} per node, at most {p.max_size} nodes" for p in pools)
        raise ConfigError(
            "resources.gpus",
            f"{res.gpus} GPUs is neither one node's share nor whole nodes within maxSize of any pool that fits "
            f"({sizes})",
        )
    # a pool where the job spans nodes keeps no shared checkpoint on a stack without FSx (render refuses it): such a
    # pool is neither chosen nor named while another would do, and is chosen alone for render to say why
    shaped.sort(key=lambda ps: ps[0].capacity.reserved)
    resumable = [ps for ps in shaped if _resumes_on(job, cfg, ps[1][0])] or shaped[:1]
    (pool, (pods, per_pod)), others = resumable[0], tuple(p.name for p, _ in resumable[1:])
    min_pods = pods
    if job.elastic is not None:
        least = int(job.elastic.min_gpus)
        if per_pod != pool.gpus_per_node or least % per_pod:
            raise ConfigError(
                "elastic.minGpus",
                f"{least} is not whole nodes of pool {pool.name} ({pool.gpus_per_node} GPUs each); "
                "an elastic job grows and shrinks by nodes",
            )
        min_pods = least // per_pod
    return Placement(pool, pods, per_pod, min_pods, others)


def _resumes_on(job: JobFile, cfg: StackConfig, pods: int) -> bool:
    """Whether a job of `pods` pods keeps its checkpoints where each of them reads them (render's checkpoints rule)."""
    return job.class_ == "serving" or job.checkpoints != "shared" or pods == 1 or cfg.fsx.enabled


def team_of(cfg: StackConfig, job: JobFile) -> Team:
    """The job's team on the stack, or a ConfigError naming `team` and the stack's teams."""
    found = [t for t in cfg.scheduler.teams if t.name == job.team]
    if not found:
        teams = ", ".join(t.name for t in cfg.scheduler.teams) or "none"
        raise ConfigError("team", f"no team {job.team!r} in stack {cfg.stack} (higgsfield:scheduler.teams: {teams})")
    return found[0]


def _team(cfg: StackConfig, job: JobFile) -> tuple[Team, str]:
    """The job's team and priority class (the first of the team's classes of the job's class)."""
    team = team_of(cfg, job)
    if job.data and not cfg.fsx.enabled:
        # the datasets are mounted from FSx (jobs._attach_datasets): without it nothing would be, and
        # the job would fail on the cluster reading /datasets/NAME
        raise ConfigError(
            "data[0].dataset",
            f"stack {cfg.stack} has no shared storage (higgsfield:fsx.enabled is false), so no dataset "
            f"{job.data[0].dataset!r} to mount; leave data out, or enable higgsfield:fsx with its datasets",
        )
    classes = cfg.scheduler.classes_of(team, job.class_)
    if not classes:
        raise ConfigError("class", f"team {job.team} is given no {job.class_} priority class in stack {cfg.stack}")
    if job.priority is not None and job.priority not in classes:
        raise ConfigError(
            "priority", f"{job.priority!r} is not one of team {job.team}'s {job.class_} classes: {', '.join(classes)}"
        )
    return team, job.priority or classes[0]


def command_of(job: JobFile) -> list[str]:
    """What the main container runs: the launcher (examples/checkpointing.py: SIGTERM to the
    workers, each line prefixed with its rank) in front of the team's command; a PyTorch job's
    `python SCRIPT ARGS` under torchrun (one process per GPU, from the PET_* settings the operator
    injects), every worker through the launcher's line prefixer."""
    launcher = ["python", f"{CODE_MOUNT}/{LAUNCHER}"]
    command = list(job.command)
    if job.framework == "pytorch" and command[0] in ("python", "python3"):
        return [*launcher, "torchrun", "--no-python", *launcher, "--rank-prefix", *command]
    return [*launcher, *command]


def _driver_affinity(job: JobFile) -> dict | None:
    """Node affinity on the driver branch GPU feature discovery labels the node with (which a pool at
    zero offers too: the autoscaler's node-template tag, the Karpenter NodePool's label)."""
    wanted = job.resources.driver_wanted()
    if wanted is None:
        return None
    operator, branch = wanted
    term = (
        {"key": DRIVER_MAJOR_LABEL, "operator": "Gt", "values": [str(branch - 1)]}
        if operator == ">="
        else {"key": DRIVER_MAJOR_LABEL, "operator": "In", "values": [str(branch)]}
    )
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
        }
    }


def _pod(job: JobFile, cfg: StackConfig, placed: Placement, priority: str, image: str, gpus: int) -> dict:
    pool, container = placed.pool, FRAMEWORKS[job.framework][3]
    spec: dict[str, Any] = {
        "priorityClassName": priority,
        "automountServiceAccountToken": False,  # training needs no Kubernetes API
        "nodeSelector": {POOL_LABEL: pool.name, "topology.kubernetes.io/zone": pool.availability_zone},
        "tolerations": [dict(t) for t in TOLERATIONS],
        "containers": [
            {
                "name": container,
                "image": image,
                "command": command_of(job),
                "env": [{"name": k, "value": v} for k, v in job.env.items()],
                "resources": {"limits": {GPU_RESOURCE: gpus}} if gpus else {},
                "volumeMounts": [
                    {"name": "code", "mountPath": CODE_MOUNT},
                    {"name": "local", "mountPath": "/local"},
                ],
            }
        ],
        "volumes": [
            {"name": "code", "configMap": {"name": f"{job.name}-launcher"}},
            {"name": "local", "emptyDir": {}},  # the node's RAID0 NVMe
        ],
    }
    affinity = _driver_affinity(job)
    if affinity and gpus:
        spec["affinity"] = affinity
    # What Volcano may take back (docs/design/workload-classes.md): an elastic job's workers above its
    # minimum and evaluation, the scavenger; never a training gang nor serving. Volcano's gang plugin
    # still takes no pod of a job at its minAvailable.
    preemptable = job.elastic is not None or job.class_ == "evaluation"
    return {"metadata": {"annotations": {"volcano.sh/preemptable": str(preemptable).lower()}}, "spec": spec}


def _share_of_node(template: dict, pool: GpuPool, image: str, gpus: int) -> None:
    """A pod of fewer GPUs than its node: the pool's taints tolerated, its share of the node's
    memory, half of it as /dev/shm; no EFA (one node needs no network between its GPUs)."""
    spec, main = template["spec"], template["spec"]["containers"][0]
    main["image"] = image
    tolerate_pool(spec, pool)
    node_mib = pool.instance.memory_mib or 64 * 1024
    memory = node_mib * NODE_MEMORY_SHARE * gpus / pool.gpus_per_node
    main["resources"]["limits"]["memory"] = f"{int(memory // 1024)}Gi"
    spec["volumes"].append(
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{int(memory * SHM_SHARE // 1024)}Gi"}}
    )
    main["volumeMounts"].append({"name": "shm", "mountPath": "/dev/shm"})


def _replicas(job: JobFile, placed: Placement) -> list[tuple[str, int, bool]]:
    """(replica type, replicas, holds GPUs) of the job: a leader and the workers as the framework
    has them; an elastic PyTorch job only workers (the c10d rendezvous needs no master)."""
    types = FRAMEWORKS[job.framework][2]
    if job.elastic is not None:
        return [("Worker", placed.min_pods, True)]
    if job.framework == "mpi":  # the launcher runs mpirun: on the teams' CPU nodes, without GPUs
        return [("Launcher", 1, False), ("Worker", placed.pods, True)]
    if len(types) == 1:
        return [(types[0], placed.pods, True)]
    return [(types[0], 1, True)] + ([("Worker", placed.pods - 1, True)] if placed.pods > 1 else [])


def _mpi_replica(template: dict, replica: str, job: JobFile) -> None:
    """An MPIJob's replicas (examples/mpi-nccl-tests.yaml): the launcher runs the team's command
    (mpirun ...) itself and keeps its service-account token (the operator's launcher reaches the
    workers with kubectl exec: kubeflow/trainer:pkg/controller.v1/mpi/mpijob_controller.go@v1.9.4);
    a worker runs no command of its own (the operator makes it wait for the launcher's ranks)."""
    spec, main = template["spec"], template["spec"]["containers"][0]
    if replica == "Launcher":
        main["command"] = list(job.command)
        spec.pop("automountServiceAccountToken", None)
    else:
        main.pop("command", None)


def _keep_teams_env(template: dict, job: JobFile) -> None:
    """The job's pre-flight switch over the platform's `run` (a team may skip the check for one job); any
    other env setting the platform replaced (EFA, checkpoints, the launcher's PYTHONPATH, the pre-flight's)
    refused naming it."""
    main = template["spec"]["containers"][0]
    if PREFLIGHT_SWITCH in job.env and any(e["name"] == PREFLIGHT_SWITCH for e in main.get("env", [])):
        merge_env(main, {PREFLIGHT_SWITCH: job.env[PREFLIGHT_SWITCH]})
    final = {e["name"]: e.get("value") for e in main.get("env", [])}
    clash = sorted(k for k, v in job.env.items() if final.get(k) != v)
    if clash:
        raise ConfigError(f"env.{clash[0]}", "is set by the platform for this job; leave it out of env")


def _replica_template(
    job: JobFile, cfg: StackConfig, placed: Placement, team: Team, priority: str, image: str, replica: str, gpus: bool
) -> dict:
    """One replica's pod template: on its pool, with every platform rule, the pre-flight and progress
    for a PyTorch training job; an env key the platform sets is refused."""
    pool, checkpoints = placed.pool, job.checkpoints == "shared"
    template = _pod(job, cfg, placed, priority, image, placed.gpus_per_pod if gpus else 0)
    merge_env(template["spec"]["containers"][0], {"PYTHONPATH": CODE_MOUNT})  # the job may import checkpointing
    if not gpus:
        on_team_cpu_nodes(template["spec"])  # never on a GPU node
        template["spec"]["containers"][0].pop("resources")
        template["spec"]["activeDeadlineSeconds"] = LONGEST_POD_DEADLINE  # in the team's CPU-only quota
    elif placed.whole_nodes:
        prepare_gpu_pod(template["spec"], pool, image, f"{FRAMEWORKS[job.framework][0]} {replica}", efa=True)
    else:
        _share_of_node(template, pool, image, placed.gpus_per_pod)
    if gpus and job.class_ == "training":
        # Karpenter never voluntarily disrupts the node of a training pod (components/karpenter.py)
        template["metadata"]["annotations"][DO_NOT_DISRUPT] = "true"
    if gpus and cfg.fsx.enabled:
        jobs._attach_lustre(template)
        jobs._attach_datasets(template, cfg, team, only=tuple(d.dataset for d in job.data) or None)
    if gpus:
        jobs._checkpoint(template, cfg, pool, team, job.name, enabled=checkpoints)
    if gpus and job.framework == "pytorch" and job.class_ == "training":
        # the pre-flight gang check before the team's command, and the ranks' progress for the job
        # watchdog, as the PyTorch examples have them (infra/offline/jobs.py add_preflight)
        jobs.add_preflight(template, cfg, pool, checkpoints)
        jobs.add_progress(template)
    elif gpus and job.framework in jobs.NODE_PREFLIGHT_FRAMEWORKS and job.class_ == "training":
        jobs.add_node_preflight(template, cfg, pool, checkpoints)  # no PyTorch there: each node alone
    run_as_team(template, team)
    request_in_full(template, team)
    _keep_teams_env(template, job)
    if job.framework == "mpi":
        _mpi_replica(template, replica, job)
    return template


def render(job: JobFile, cfg: StackConfig) -> tuple[list[dict], Placement]:
    """The Kubernetes objects of the team's job on stack `cfg`: the launcher's ConfigMap and the
    Kubeflow job (last), and where it was placed. Refusals are ConfigErrors naming the job-file key."""
    if job.class_ == "serving":
        # the team's admission policy refuses a Kubeflow job of a serving class (training never preempts:
        # components/tenancy.py): serving runs as a Deployment, as examples/serving-classifier.yaml does
        return render_serving(job, cfg)
    team, priority = _team(cfg, job)
    placed = place(job, cfg, team)
    pool = placed.pool
    if job.image is not None:
        check_image(cfg, pool, job.image, key="image")
    image = job.image or default_image(cfg)
    checkpoints = job.checkpoints == "shared"
    if checkpoints and placed.pods > 1 and not cfg.fsx.enabled:
        default = "" if "checkpoints" in job.model_fields_set else " (the default)"
        raise ConfigError(
            "checkpoints",
            f"shared{default} needs shared storage, and stack {cfg.stack} has no FSx (higgsfield:fsx.enabled is "
            f"false): its {placed.pods} nodes would keep their checkpoints on their own disks, so the job could never "
            f"resume after a lost node; write checkpoints: off to run without resuming, ask for one node's GPUs "
            f"(resources.gpus: {placed.gpus_per_pod}), or enable higgsfield:fsx",
        )
    kind, key, _, _ = FRAMEWORKS[job.framework]
    specs = {}
    for replica, count, gpus in _replicas(job, placed):
        template = _replica_template(job, cfg, placed, team, priority, image, replica, gpus)
        mpi = job.framework == "mpi"
        # ExitCode: 143 (a drain) and 150 (a lost peer) from the launcher retry, a bug's 1 fails
        # (examples/pytorch-ddp.yaml); mpirun's codes are its own, so MPI restarts on failure as the NCCL test does
        specs[replica] = {"replicas": count, "restartPolicy": "OnFailure" if mpi else "ExitCode", "template": template}
    workload: dict[str, Any] = {
        "apiVersion": f"{KUBEFLOW_GROUP}/v1",
        "kind": kind,
        "metadata": {"name": job.name, "namespace": team.name, "labels": {"higgsfield.io/job-file": "true"}},
        "spec": {
            "runPolicy": {
                "cleanPodPolicy": CLEAN_POD_POLICY,
                # counts restarts in place only, which ExitCode pods never have (examples/pytorch-ddp.yaml)
                "backoffLimit": 3 * max(placed.pods, pool.max_size) + 1,
                "schedulingPolicy": {
                    "queue": team.queue,
                    "priorityClass": priority,
                    "minAvailable": sum(c for _, c, _ in _replicas(job, placed)),
                },
            },
            key: specs,
        },
    }
    if job.framework == "pytorch":
        workload["spec"]["nprocPerNode"] = str(placed.gpus_per_pod)
    if job.framework == "mpi":
        workload["spec"]["slotsPerWorker"] = placed.gpus_per_pod  # mpirun's ranks per worker: one per GPU
        if job.class_ == "training" and "Worker" in specs:  # the launcher checks its workers' nodes first
            jobs.add_mpi_preflight(workload, cfg, pool, checkpoints)
            for replica in specs:
                _keep_teams_env(workload["spec"][key][replica]["template"], job)
    if job.elastic is not None:
        workload["spec"]["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            "minReplicas": placed.min_pods,
            "maxReplicas": placed.pods,
            "maxRestarts": 10,
            # grows into GPUs nobody waits for, as examples/pytorch-elastic.yaml does (docs/design/elastic.md):
            # the operator's HPA on the room of the job's queue on its pool, never on utilisation
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": ELASTIC_ROOM_METRIC,
                            "selector": {"matchLabels": {"queue_name": team.queue, "pool": pool.name}},
                        },
                        "target": {"type": "Value", "value": "1"},
                    },
                }
            ],
        }
    request_the_operators_inits(workload)
    code = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{job.name}-launcher", "namespace": team.name},
        "data": {
            LAUNCHER: (shipped("examples") / LAUNCHER).read_text(),
            **(
                {f: shipped(f"images/training/{f}").read_text() for f in jobs.PREFLIGHT_FILES}
                if job.framework in ("pytorch", "mpi", *jobs.NODE_PREFLIGHT_FRAMEWORKS) and job.class_ == "training"
                else {}
            ),
        },
    }
    return [code, workload], placed


def header(job: JobFile, cfg: StackConfig, placed: Placement, objects: list[dict]) -> str:
    """The YAML comment on top of a rendered job file: where it was placed and why."""
    if job.class_ == "serving":
        return serving_header(job, cfg, placed, objects)
    pool, workload = placed.pool, objects[-1]
    policy = workload["spec"]["runPolicy"]["schedulingPolicy"]
    size = (
        f"{placed.pods} node(s) x {placed.gpus_per_pod} GPUs" if placed.whole_nodes else f"{placed.gpus_per_pod} GPUs"
    )
    if job.elastic is not None:
        size = f"{placed.min_pods} to {placed.pods} node(s) x {placed.gpus_per_pod} GPUs"
    lines = [
        f"# {job.name} ({workload['kind']}) for stack {cfg.stack}, rendered from a job file by higgsfield jobs render",
        f"# Placed on pool {_shown(pool)}: {size}, {pool.capacity_type}.",
        f"# Team {job.team}: queue {policy['queue']}, priority class {policy['priorityClass']}, "
        f"UID/GID {workload_uid(workload)}.",
    ]
    if placed.others:
        lines.append(f"# Also fitted: {', '.join(placed.others)} (on-demand pools first, then the stack file's order).")
    if job.resources.cuda_driver:
        branch = versions.EKS_NVIDIA_DRIVER_BRANCH
        lines.append(
            f"# cudaDriver {job.resources.cuda_driver}: the AMI's driver branch is {branch}; required of the nodes "
            f"by {DRIVER_MAJOR_LABEL}."
        )
    return "\n".join([*lines, jobs.image_comment(cfg, workload_image(workload)), ""])


def _main_containers(workload: dict) -> list[dict]:
    return [t["spec"]["containers"][0] for t in jobs.pod_templates(workload)]


def workload_image(workload: dict) -> str:
    return str(_main_containers(workload)[0]["image"])


def workload_uid(workload: dict) -> int:
    return int(next(iter(jobs.pod_templates(workload)))["spec"]["securityContext"]["runAsUser"])


def to_yaml(job: JobFile, cfg: StackConfig, objects: list[dict], placed: Placement) -> str:
    """The rendered job for `kubectl apply -f -`, its header comment first."""
    return header(job, cfg, placed, objects) + jobs.to_yaml(objects)


MAX_JOB_FILE = 1 << 20  # a job file is a screenful; a megabyte is a mistake
# What else a newcomer gives -f: Kubernetes objects (an example's template, what `jobs render` printed) and stack files.
_MANIFEST_KINDS = re.compile(r"^kind:[ \t]*([A-Za-z]+)[ \t]*$", re.M)
_TEMPLATE_FIELD = re.compile(r"\$\{[a-z_]+\}")
_STACK_CONFIG = re.compile(r"^config:[ \t]*(?:#.*)?$", re.M)
_STACK_SETTING = re.compile(r"^[ \t]+['\"]?higgsfield:", re.M)
_STACK_FILE_NAME = re.compile(r"Pulumi\.([a-z0-9-]+)\.yaml")


def _another_file(path: str, text: str) -> str | None:
    """What the file at `path` is instead of a job file (its refusal), judged by its text (a template is not
    YAML until filled in); None for what may be a job file."""
    from pathlib import Path

    from infra.config.job import REFERENCE

    kinds = _MANIFEST_KINDS.findall(text)
    if kinds and re.search(r"^apiVersion:", text, re.M):
        if _TEMPLATE_FIELD.search(text):
            example = Path(path).stem if Path(path).stem in jobs.EXAMPLES else "EXAMPLE"
            return (
                f"is the template of the example {example}, not a job file: higgsfield jobs render STACK {example} "
                f"renders it; a job file of your own starts as a copy of examples/llama-ft.job.yaml ({REFERENCE})"
            )
        return (
            f"is Kubernetes objects ({', '.join(dict.fromkeys(kinds))}), not a job file: kubectl apply -f applies them "
            f"as they are; jobs submit takes the job file they were rendered from ({REFERENCE})"
        )
    if _STACK_CONFIG.search(text) and _STACK_SETTING.search(text):
        named = _STACK_FILE_NAME.fullmatch(Path(path).name)
        stack = named[1] if named else "STACK"
        return (
            f"is a stack file{f' (stack {stack})' if named else ''}, not a job file: a stack is named, as STACK "
            f"(higgsfield jobs render {stack} -f JOB.yaml); a job file says name, team, command and resources "
            f"({REFERENCE})"
        )
    return None


# A key whose unquoted value starts with YAML's folded (>) or literal (|) block marker: `cudaDriver: >=570`.
BLOCK_SCALAR = re.compile(r"^\s*(?:-\s+)?([A-Za-z][A-Za-z0-9_]*):\s+([>|][^#]*?)\s*(?:#.*)?$")


def _written_twice(
    node: Any, loc: tuple[str | int, ...] = (), walked: set[int] | None = None
) -> tuple[tuple[str | int, ...], int, int] | None:
    """The first key written twice in one mapping of the composed YAML `node`: (its loc, its line, the
    first one's line). A YAML reader keeps the last without a word (infra/offline/stack_file.py refuses
    it in a stack file the same way). A node an alias repeats is walked once (aliases within aliases
    would otherwise be walked exponentially often)."""
    import yaml

    walked = set() if walked is None else walked
    if id(node) in walked:
        return None
    walked.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        return next((t for i, item in enumerate(node.value) if (t := _written_twice(item, (*loc, i), walked))), None)
    if not isinstance(node, yaml.MappingNode):
        return None
    first: dict[str, int] = {}
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode):
            line = key.start_mark.line + 1
            if key.value in first:
                return (*loc, key.value), line, first[key.value]
            first[key.value] = line
        found = _written_twice(value, (*loc, key.value if isinstance(key, yaml.ScalarNode) else "?"), walked)
        if found:
            return found
    return None


def read_job_file(path: str) -> JobFile:
    """The job file at `path` (`-`: standard input), validated; errors name the file and the key."""
    import sys
    from pathlib import Path

    import yaml

    from infra.config import load_job

    shown = "<stdin>" if path == "-" else path
    try:
        text = sys.stdin.read(MAX_JOB_FILE + 1) if path == "-" else Path(path).read_text()[: MAX_JOB_FILE + 1]
        text.encode()  # standard input outside a UTF-8 locale decodes a bad byte as a lone surrogate
    except OSError as exc:
        raise file_error(shown, f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeError:
        raise file_error(shown, "is not UTF-8 text, so not a job file (save it as UTF-8)") from None
    if len(text) > MAX_JOB_FILE:
        raise file_error(shown, f"is larger than {MAX_JOB_FILE:,} characters: not a job file")
    instead = _another_file(path, text)
    if instead:
        raise file_error(shown, instead)
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # reads the text at once: a control character is refused here
        root = loader.get_single_node()
        twice = _written_twice(root)
        if twice:
            loc, again, first = twice
            raise file_error(shown, f"is set twice (line {again}, first at line {first}); remove one", loc)
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        if getattr(exc, "context", None) == "expected a single document in the stream" and mark is not None:
            raise file_error(
                shown,
                f"holds more than one YAML document (a second begins with --- at line {mark.line + 1}): a job file "
                "is one job; give each job a file of its own",
            ) from None
        lines = text.splitlines()
        line = lines[mark.line] if mark is not None and mark.line < len(lines) else ""
        block = BLOCK_SCALAR.match(line)  # `cudaDriver: >=570`: YAML's > and | start a block of text
        said = " ".join(str(getattr(exc, "problem", None) or exc).split())  # a reader error's is several lines
        hint = (
            f'; YAML reads a value starting with {block[2][0]} as a block of text: quote it: {block[1]}: "{block[2]}"'
            if block
            else "; YAML indents with spaces, never tabs: replace the tabs with spaces"
            if "'\\t'" in said
            else ""
        )
        raise file_error(shown, f"is not YAML{where}: {said}{hint}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return load_job(data, shown)


def read_job_file_of(path: str, cfg: StackConfig) -> JobFile:
    """`read_job_file`, its team one of the stack's (what `jobs status/logs/suspend/resume/cancel -f` need of it:
    a job of a team the stack lacks has no namespace there), a refusal naming the file's key."""
    job = read_job_file(path)
    try:
        team_of(cfg, job)
    except ConfigError as exc:
        raise file_error("<stdin>" if path == "-" else path, exc.problems[0].message, exc.problems[0].loc) from None
    return job


def render_file(path: str, cfg: StackConfig) -> tuple[JobFile, list[dict], Placement]:
    """`read_job_file` then `render`, a refusal's key prefixed with the file (`llama.yaml: resources.gpus`)."""
    job = read_job_file(path)
    try:
        objects, placed = render(job, cfg)
        _fits_etcd(job, objects)
    except ConfigError as exc:
        if exc.key.startswith(("higgsfield:", "images/")):
            raise ConfigError(exc.key, exc.problems[0].message) from None
        raise file_error("<stdin>" if path == "-" else path, exc.problems[0].message, exc.problems[0].loc) from None
    _fits_its_crd(objects, cfg)
    return job, objects, placed


# The most etcd stores in one request by default (etcd-io/website:content/en/docs/v3.5/dev-guide/limit.md,
# `--max-request-bytes`), so the most one object may be: a Kubeflow job, a custom resource, is stored as its JSON.
ETCD_REQUEST_BYTES = 3 << 19  # 1.5 MiB


def _fits_etcd(job: JobFile, objects: list[dict]) -> None:
    """Refuse a job whose rendered object etcd would not store: its env and command are written into each of its
    pod templates, so a job file under its own limit may render one too large, and the API server would refuse it
    at submission. The setting named is the larger of the two."""
    for obj in objects:
        size = len(json.dumps(obj, separators=(",", ":")))
        # the stored object also carries the server-side apply's managedFields (a path per field it sets): a tenth
        if size * 11 // 10 > ETCD_REQUEST_BYTES:
            env = sum(len(k) + len(v) for k, v in job.env.items())
            key = "env" if env >= sum(len(c) for c in job.command) else "command"
            raise ConfigError(
                key,
                f"makes {obj['kind']} {obj['metadata']['name']} {size / 2**20:.2f} MiB, above the "
                f"{ETCD_REQUEST_BYTES / 2**20:g} MiB etcd stores in one object (each pod template holds the job's env "
                "and command): keep large values in a ConfigMap or a file on shared storage and pass its path",
            )


def _fits_its_crd(objects: list[dict], cfg: StackConfig) -> None:
    """Refuse a rendered custom resource that its pinned CRD's schema does not take: the API server would prune the
    field from the job it stores, or refuse the job. No job file can cause it (its keys are typed): the renderer did."""
    from infra.offline import crd_schemas, kubernetes_schema

    for obj in objects:
        problem = crd_schemas.has_schema(obj) and kubernetes_schema.problem(obj, cfg.kubernetes_version)
        if problem:
            raise ConfigError(
                f"{obj['kind']} {obj['metadata']['name']}",
                f"{problem}; rendered by this higgsfield, not written in the job file: report it",
            )


# --- a job file of class serving: a Deployment ---------------------------------------------------
# A team's job file of `class: serving`, rendered as the platform serves: a Deployment shaped like
# examples/serving-classifier.yaml (`higgsfield jobs render STACK -f JOB.yaml`).
#
# The team's admission policy refuses a Kubeflow job of a serving class (training never preempts:
# components/tenancy.py), so a serving job is no Kubeflow job. It is placed by the same constraints as
# a training job (`place` above: gpus, gpuType, gpuMemoryGiB, cudaDriver, the
# team's quota and its queue's capability) and by the team's serving quota; `resources.gpus` becomes
# replicas, each one pod: one of a node's share, or one whole node each. Each replica gets what the
# serving example gets: the team's serving priority class and queue, scheduled by Volcano (its
# PodGroup's floor), the pool's taints tolerated, its share of the node's memory and /dev/shm, the
# driver affinity, the team's FSx directory and datasets, its UID/GID; and not what only training
# has: no checkpoints, no do-not-disrupt, not preemptable by evaluation (docs/workload-classes.md).

SERVING_CONTAINER = "server"  # the serving example's container name
SERVING_APP_LABEL = "app"  # the Deployment's selector, as the serving example's (its Service selects it too)
# A serving job's floor: Volcano makes room for this many replicas of the Deployment's ReplicaSet (its
# PodGroup's minMember, from the annotation the Volcano controller reads off the ReplicaSet,
# volcano-sh/volcano:pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1 getMinMemberFromUpperRes);
# the other replicas take free GPUs. One, as the example: a floor above one would hold a rolling
# update's new ReplicaSet, which starts at one replica, below its minimum forever.
SERVING_MIN_MEMBER = jobs.SERVING_FLOOR


def _serving_quota(job: JobFile, cfg: StackConfig, team: Team) -> None:
    """The team's serving quota (a ResourceQuota on its serving classes' pods) holds every replica."""
    gpus, t = int(job.resources.gpus), cfg.scheduler.teams.index(team)
    if team.serving_gpu_quota is not None and gpus > team.serving_gpu_quota:
        raise ConfigError(
            "resources.gpus",
            f"{gpus} GPUs is more than team {team.name}'s serving quota of {team.serving_gpu_quota} GPUs "
            f"(higgsfield:scheduler.teams[{t}].servingGpuQuota)",
        )


def _serving_template(job: JobFile, cfg: StackConfig, placed: Placement, team: Team, priority: str, image: str) -> dict:
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
                "name": SERVING_CONTAINER,
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
    if job.ready_path is not None:
        # ready on a status from 200 to 399 (DoHTTPProbe, kubernetes/kubernetes:pkg/probe/http/http.go@03aacded1e0e);
        # out of the Service after 3 failures 10 s apart; a server under load gets 5 s to answer, not the default 1 s
        probe = {"path": job.ready_path, "port": SERVING_PORT}
        spec["containers"][0]["readinessProbe"] = {
            "httpGet": probe,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        }
    key, value = SERVING_LABEL
    template = {
        "metadata": {
            "labels": {SERVING_APP_LABEL: job.name, key: value},  # the serving scrape job keeps these pods
            # the queue of the replicas' PodGroup (buildPodGroupFromPod in the file cited at SERVING_MIN_MEMBER);
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


def render_serving(job: JobFile, cfg: StackConfig) -> tuple[list[dict], Placement]:
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
            # copied to the ReplicaSet, read into its PodGroup's minMember (SERVING_MIN_MEMBER)
            "annotations": {MIN_MEMBER_ANNOTATION: str(min(SERVING_MIN_MEMBER, placed.pods))},
        },
        "spec": {
            "replicas": placed.pods,
            "selector": {"matchLabels": {SERVING_APP_LABEL: job.name}},
            "template": _serving_template(job, cfg, placed, team, priority, image),
        },
    }
    return [*_serving_service(job, team), deployment], placed


def _serving_service(job: JobFile, team: Team) -> list[dict]:
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
                "selector": {SERVING_APP_LABEL: job.name},
                "ports": [{"name": SERVING_PORT, "port": 80, "targetPort": SERVING_PORT, "protocol": "TCP"}],
            },
        }
    ]


def serving_header(job: JobFile, cfg: StackConfig, placed: Placement, objects: list[dict]) -> str:
    """The YAML comment on top of a rendered serving job: where it was placed and why."""
    deployment = objects[-1]
    pod, floor = deployment["spec"]["template"], deployment["metadata"]["annotations"][MIN_MEMBER_ANNOTATION]
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

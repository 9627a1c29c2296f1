"""Example training jobs filled in for a stack: its pool, zone, queue, priority class, volume.

The templates in examples/ are plain YAML with ${placeholders}; what depends on the stack
(the training image, EFA interfaces, huge pages and environment, memory and /dev/shm - see
infra/offline/pods.py -, the Lustre volume, and the checkpoint settings and grace period of
examples/checkpointing.py) is added here, so the templates stay readable. `higgsfield jobs
render STACK NAME` prints the result for `kubectl apply -f -` (the template's comments kept,
scripts as block scalars); `higgsfield plan --manifests` writes them too. A job is sized to fit:
its GPUs within the pool at maxSize, the team's quota and its queue's capability (`fit`).
"""

from __future__ import annotations

import copy
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from string import Template
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, LiteralScalarString

from components.storage import DATASET_CHECKPOINTS, DATASET_CLAIM, DATASET_MOUNT, MOUNT_PATH, PVC_NAME
from infra.config import ConfigError, GpuPool, StackConfig, Team
from infra.core import versions
from infra.core.assets import shipped
from infra.core.names import (
    DO_NOT_DISRUPT,
    KUBEFLOW_JOB_KINDS,
    PREFLIGHT_SWITCH,
    PROGRESS_PORT,
    PROGRESS_PORT_NAME,
    job_name_problem,
)
from infra.offline.pods import (
    bus_bandwidth_threshold,
    check_image,
    default_image,
    merge_env,
    prepare_gpu_pod,
    request_in_full,
    request_the_operators_inits,
    run_as_team,
    stack_image,
    tolerate_pool,
)

EXAMPLES_DIR = shipped("examples")
# Each example, its class of work (docs/workload-classes.md) and the scripts its ConfigMap carries.
WORKLOAD = {
    "pytorch-ddp": "training",
    "pytorch-elastic": "training",
    "mpi-nccl-tests": "training",
    "tf-mnist": "training",
    "xgboost-iris": "training",
    "serving-classifier": "serving",
    "eval-sweep": "evaluation",
}
EXAMPLES = tuple(WORKLOAD)
SCRIPTS = {
    "pytorch-ddp": ("train_ddp.py", "checkpointing.py"),
    "pytorch-elastic": ("train_ddp.py", "checkpointing.py"),
    "mpi-nccl-tests": (),  # the pre-flight's files only
    "tf-mnist": ("tf_mnist.py",),
    "xgboost-iris": ("xgboost_iris.py",),
    "serving-classifier": ("serve.py", "checkpointing.py"),
    "eval-sweep": ("eval_sweep.py", "serve.py", "checkpointing.py"),
}
# Examples whose pods take one GPU each (the others: one pod per node, every GPU of it).
ONE_GPU_PODS = ("xgboost-iris", "serving-classifier", "eval-sweep")
# The TensorFlow example runs TensorFlow's own image, not the training image (so no EFA).
OWN_IMAGE = {"tf-mnist": lambda: versions.TENSORFLOW_IMAGE.version}
SERVING_FLOOR = 1  # replicas the serving example always keeps (its SLO floor)
# Examples whose pods use no EFA interface even on an EFA pool (one GPU each, or an image without EFA).
WITHOUT_EFA = (*ONE_GPU_PODS, *OWN_IMAGE)
TRAIN_SCRIPT = "train_ddp.py"
CHECKPOINT_MODULE = "checkpointing.py"  # ships next to the script in its ConfigMap
LOCAL_CHECKPOINTS = "/local/checkpoints"  # the emptyDir on the node's RAID0 NVMe
# The Capacity Block notice comes this much before the flush must start (the drain's SIGTERM):
# a checkpoint while the block still runs, so the drain's final one has little left to do.
NOTICE_MARGIN_S = 5 * 60


def _pick_pool(cfg: StackConfig, name: str | None, example: str, team: Team | None = None) -> GpuPool:
    """The pool `--pool` names, else the one the example fits best (`pool_for`)."""
    if not cfg.gpu_pools:
        raise ConfigError("higgsfield:gpuPools", f"stack {cfg.stack} has no GPU pool to run a job on")
    if name is not None:
        found = [p for p in cfg.gpu_pools if p.name == name]
        if not found:
            raise ConfigError(
                "--pool", f"no pool {name!r} in stack {cfg.stack}; pools: {', '.join(p.name for p in cfg.gpu_pools)}"
            )
        return found[0]
    return pool_for(example, cfg, team)[0]


def _ranked(example: str, cfg: StackConfig) -> list[GpuPool]:
    """The pools in the order an example prefers them. The NCCL test: EFA pools only. Serving and
    evaluation (one GPU a pod): the pool with the fewest GPUs a node, without EFA, on demand (a
    serving pool, not the 8-GPU training nodes), a reservation or Capacity Block last. Training:
    on demand first, a reservation or Capacity Block last, then the stack file's order."""
    pools = [p for p in cfg.gpu_pools if p.efa] if example == "mpi-nccl-tests" else list(cfg.gpu_pools)
    order = {p.name: i for i, p in enumerate(cfg.gpu_pools)}
    if WORKLOAD[example] != "training":
        return sorted(
            pools,
            key=lambda p: (
                p.capacity.reserved,
                p.gpus_per_node,
                p.efa,
                p.capacity_type != "on-demand",
                order[p.name],
            ),
        )
    return sorted(pools, key=lambda p: (p.capacity_type != "on-demand", p.capacity.reserved, order[p.name]))


def _fitting(example: str, cfg: StackConfig, team: Team) -> list[GpuPool]:
    """The pools some size of `example` fits for `team`, in the order the example prefers them."""
    return [p for p in _ranked(example, cfg) if fit(example, cfg, p, team).most_workers >= 1]


def pool_for(example: str, cfg: StackConfig, team: Team | None = None) -> tuple[GpuPool, tuple[str, ...]]:
    """The pool `example` renders on without --pool, and the other pools some size of it fits
    (for `team`, default the first given the example's class of work): of the pools it prefers
    (`_ranked`), the first one some size fits, else the first (whose refusal then names the limits)."""
    ranked = _ranked(example, cfg) or list(cfg.gpu_pools)
    try:
        member = team or _pick_team(cfg, None, WORKLOAD[example])
    except ConfigError:  # no team does this kind of work: the preference alone
        return ranked[0], ()
    fitting = _fitting(example, cfg, member)
    chosen = fitting[0] if fitting else ranked[0]
    return chosen, tuple(p.name for p in fitting if p is not chosen)


def placement_comment(example: str, cfg: StackConfig, *, pool: str | None = None, team: str | None = None) -> str:
    """The line on top of a rendered example: the pool it was placed on, why, and the other pools
    it fits (what `render` with the same arguments chose)."""
    member = _pick_team(cfg, team, WORKLOAD[example])
    if pool is None:
        chosen, others = pool_for(example, cfg, member)
    else:
        chosen = _pick_pool(cfg, pool, example, member)
        others = tuple(p.name for p in _fitting(example, cfg, member) if p is not chosen)
    facts = f"{'/'.join(chosen.instance_types)}, {chosen.gpus_per_node} GPUs a node, {chosen.capacity_type}"
    if pool is not None:
        why = "as --pool asked"
    elif WORKLOAD[example] != "training":
        why = "of the pools it fits, the one with the fewest GPUs a node (one GPU a pod)"
    elif example == "mpi-nccl-tests":
        why = "the first EFA pool it fits"
    else:
        why = "the first pool it fits, on-demand pools first, then the stack file's order"
    also = f"; also fits: {', '.join(others)} (--pool NAME)" if others else ""
    return f"# Placed on pool {chosen.name} ({facts}): {why}{also}.\n"


def _pick_team(cfg: StackConfig, name: str | None, workload: str = "training") -> Team:
    """The team `name`, or the first team given a class of `workload`; it must have one."""
    teams = cfg.scheduler.teams
    if not teams:
        raise ConfigError("higgsfield:scheduler.teams", f"stack {cfg.stack} has no team namespace to submit to")
    if name is None:
        given = [t for t in teams if cfg.scheduler.classes_of(t, workload)]
        if not given:
            raise ConfigError(
                "higgsfield:scheduler.teams", f"no team of stack {cfg.stack} is given a {workload} priority class"
            )
        return given[0]
    found = [t for t in teams if t.name == name]
    if not found:
        raise ConfigError("--team", f"no team {name!r} in stack {cfg.stack}; teams: {', '.join(t.name for t in teams)}")
    if not cfg.scheduler.classes_of(found[0], workload):
        raise ConfigError(
            "--team", f"team {name} is given no {workload} priority class (higgsfield:scheduler.teams priorityClasses)"
        )
    return found[0]


def examples_for(cfg: StackConfig) -> list[str]:
    """The examples a stack can run: none without GPU pools or teams, the NCCL test only with EFA,
    serving and evaluation only where a team is given such a class."""
    if not (cfg.gpu_pools and cfg.scheduler.teams):
        return []
    given = {
        WORKLOAD[e] for e in EXAMPLES if any(cfg.scheduler.classes_of(t, WORKLOAD[e]) for t in cfg.scheduler.teams)
    }
    return [
        e for e in EXAMPLES if (e != "mpi-nccl-tests" or any(p.efa for p in cfg.gpu_pools)) and WORKLOAD[e] in given
    ]


def render_examples(cfg: StackConfig) -> dict[str, list | ConfigError]:
    """Each example the stack can run, rendered as `jobs render STACK EXAMPLE` renders it by
    default, or the refusal that rendering gives (the example does not fit the stack)."""
    rendered: dict[str, list | ConfigError] = {}
    for example in examples_for(cfg):
        try:
            rendered[example] = render(example, cfg)
        except ConfigError as exc:
            rendered[example] = exc
    return rendered


def teams_it_does_not_fit(example: str, cfg: StackConfig) -> list[tuple[Team, ConfigError]]:
    """The teams besides the default one (the first given a class of the example's work, which
    `render` without --team takes) that are given such a class but no size of the example fits
    on any pool, each with the refusal `jobs render --team` gives."""
    given = [t for t in cfg.scheduler.teams if cfg.scheduler.classes_of(t, WORKLOAD[example])]
    misfits = []
    for team in given[1:]:
        try:
            _fit_or_other_pools(example, cfg, pool_for(example, cfg, team)[0], team, None)
        except ConfigError as exc:
            misfits.append((team, exc))
    return misfits


_MORE_SPECS = ("jaxReplicaSpecs", "paddleReplicaSpecs")  # no example, but a team's job file may be either


def pod_templates(job: dict, named: bool = False) -> Iterator:
    """Every pod template of a Kubeflow job's replicas, or of a Deployment or Job (with `named`:
    (where, template))."""
    if job.get("kind") in ("Deployment", "Job"):
        yield ("spec.template.spec", job["spec"]["template"]) if named else job["spec"]["template"]
        return
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs", "tfReplicaSpecs", "xgbReplicaSpecs", *_MORE_SPECS):
        for replica, spec in (job.get("spec", {}).get(key) or {}).items():
            yield (f"spec.{key}.{replica}.template.spec", spec["template"]) if named else spec["template"]


def workload_of(objects: list[dict]) -> dict:
    """The object of a rendered example that runs the pods: the job, Deployment or Job (the last)."""
    return objects[-1]


def gpus_at_most(objects: list[dict]) -> int:
    """The most GPUs the rendered example's pods hold at once: an elastic job's workers at
    maxReplicas, a Deployment at its HPA's maxReplicas, a Job at its parallelism."""
    job, total = workload_of(objects), 0
    hpa = next((o for o in objects if o["kind"] == "HorizontalPodAutoscaler"), None)
    for where, template in pod_templates(job, named=True):
        gpus = int(template["spec"]["containers"][0].get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
        if job["kind"] == "Deployment":
            count = hpa["spec"]["maxReplicas"] if hpa else job["spec"]["replicas"]
        elif job["kind"] == "Job":
            count = job["spec"]["parallelism"]
        else:
            replica = where.split(".")[2]
            key = where.split(".")[1]
            elastic = job["spec"].get("elasticPolicy")
            count = elastic["maxReplicas"] if elastic and replica == "Worker" else job["spec"][key][replica]["replicas"]
        total += count * gpus
    return total


def _on_gpu_pool(template: dict) -> bool:
    """A GPU pod: on a pool and holding GPUs (the MPI launcher, with none, runs on the teams' CPU nodes)."""
    limits = (template["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
    return "higgsfield.io/pool" in (template["spec"].get("nodeSelector") or {}) and "nvidia.com/gpu" in limits


def _attach_lustre(template: dict) -> None:
    """Mount the team's `shared-data` claim at /fsx (its /teams/TEAM directory)."""
    spec = template["spec"]
    spec["volumes"].append({"name": "shared", "persistentVolumeClaim": {"claimName": PVC_NAME}})
    spec["containers"][0]["volumeMounts"].append({"name": "shared", "mountPath": MOUNT_PATH})


def checkpoint_path(cfg: StackConfig, team: Team, job_name: str) -> str:
    """Where a job's checkpoints are published: the team's FSx directory, or with
    checkpoints.exportToS3 the directory the S3 data repository association exports (the S3 link's
    dataset, which only its owner team can write); without FSx the node's disk (no resume on
    another node)."""
    if not cfg.fsx.enabled:
        return f"{LOCAL_CHECKPOINTS}-published/{job_name}"
    if cfg.checkpoints.export_to_s3 and cfg.fsx.s3 is not None and cfg.fsx.s3.dataset is not None:
        dataset = next(d for d in cfg.fsx.datasets if d.name == cfg.fsx.s3.dataset)
        if dataset.owner != team.name:
            raise ConfigError(
                "--team",
                f"team {team.name} cannot write dataset {dataset.name} (owner {dataset.owner}), the directory "
                "higgsfield:fsx.s3 exports; "
                "submit as its owner or turn off higgsfield:checkpoints.exportToS3",
            )
        # the dataset's owner-only directory (components/storage.py DATASET_CHECKPOINTS): its readers mount the
        # dataset, never this
        return f"{DATASET_MOUNT.format(name=dataset.name)}/{DATASET_CHECKPOINTS}/{team.name}/{job_name}"
    return f"{MOUNT_PATH}/checkpoints/{job_name}"


def checkpoint_env(cfg: StackConfig, pool: GpuPool, team: Team, job_name: str) -> dict[str, str]:
    """What examples/checkpointing.py reads (its `settings`), from higgsfield:checkpoints and, on a
    Capacity Block pool, the block's drain time."""
    values = {
        "CHECKPOINT_DIR": LOCAL_CHECKPOINTS,
        "CHECKPOINT_SHARED_DIR": checkpoint_path(cfg, team, job_name),
        "CHECKPOINT_KEEP_LAST": str(cfg.checkpoints.keep_last),
        "CHECKPOINT_FLUSH_SECONDS": str(cfg.checkpoints.flush_seconds),
    }
    drain = pool.capacity.drain_at
    if drain is not None:
        notice = drain - timedelta(seconds=cfg.checkpoints.flush_seconds + NOTICE_MARGIN_S)
        values["CHECKPOINT_NOTICE_AT"] = notice.strftime("%Y-%m-%dT%H:%M:%SZ")
    return values


def _checkpoint(
    template: dict, cfg: StackConfig, pool: GpuPool, team: Team, job_name: str, enabled: bool = True
) -> None:
    """The checkpoint settings, and a grace period long enough for the final flush on SIGTERM
    (Kubernetes' default of 30 s is not: higgsfield:checkpoints.terminationGracePeriod). Not
    `enabled`: CHECKPOINT_EVERY_STEPS=0 (examples/train_ddp.py saves and loads nothing) and no
    shared directory."""
    spec, main = template["spec"], template["spec"]["containers"][0]
    spec["terminationGracePeriodSeconds"] = cfg.checkpoints.grace_seconds
    values = checkpoint_env(cfg, pool, team, job_name)
    if not enabled:
        del values["CHECKPOINT_SHARED_DIR"]
        values["CHECKPOINT_EVERY_STEPS"] = "0"
    merge_env(main, values)


# The pre-flight gang check (images/training/preflight.py) before the training command of the
# PyTorch examples: shipped in their ConfigMap with node_check.py and progress.py, which it and the
# training script import, so it runs in any image with PyTorch (a team's own too). A team skips it
# for one job with HIGGSFIELD_PREFLIGHT=skip (names.PREFLIGHT_SWITCH; a job file's env keeps it).
PREFLIGHT_FILES = ("preflight.py", "node_check.py", "progress.py")
PREFLIGHT_TIMEOUT_S = 300
# What one node writes to the checkpoint directory before training: a shard of this size (a team
# sets PREFLIGHT_CHECKPOINT_BYTES to its own shard's size; the example's model is far smaller).
PREFLIGHT_CHECKPOINT_BYTES = 1 << 30


def preflight_env(cfg: StackConfig, pool: GpuPool, checkpoints: bool) -> dict[str, str]:
    """What preflight.py compares against. Its all-reduce runs one process, so one GPU, per node:
    the floor is the pool's node-to-node figure (pods.bus_bandwidth_threshold, all GPUs) over the
    GPUs of a node, the share of the fabric one GPU drives (aws-ofi-nccl gives each GPU its nearest
    EFA cards); an estimate, measured by `python3 -m tests.gpu.preflight_here` on a GPU box."""
    return {
        PREFLIGHT_SWITCH: "run",
        "PREFLIGHT_TIMEOUT_SECONDS": str(PREFLIGHT_TIMEOUT_S),
        "PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS": f"{bus_bandwidth_threshold(cfg, pool) / pool.gpus_per_node:.1f}",
        "PREFLIGHT_NCCL_NETWORK": "efa" if pool.efa else "any",
        "PREFLIGHT_CHECKPOINT_BYTES": str(PREFLIGHT_CHECKPOINT_BYTES if checkpoints else 0),
    }


def add_preflight(template: dict, cfg: StackConfig, pool: GpuPool, checkpoints: bool) -> None:
    """Run the pre-flight before the container's command (`python /code/preflight.py -- COMMAND`),
    with its settings and the node's name (the downward API): the verdict names nodes."""
    main = template["spec"]["containers"][0]
    wrapper = ["python", "/code/preflight.py", "--"]
    if main["command"][: len(wrapper)] != wrapper:  # Master and Worker may share one template (a YAML alias)
        main["command"] = [*wrapper, *main["command"]]
    merge_env(main, preflight_env(cfg, pool, checkpoints))
    main["env"] = [e for e in main["env"] if e["name"] != "NODE_NAME"]
    main["env"].append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})


# The frameworks whose images have no PyTorch (TensorFlow's own image; XGBoost's pods, one GPU each;
# JAX's and Paddle's, which bring collectives of their own) check each pod's node alone before their
# command (preflight.py --node, Python's standard library only): no gang all-reduce, which would need
# a collective library the image may lack; the node's locked memory, GPU memory left by
# another process (nvidia-smi), the checkpoint write. Exit 151 on a bad node, retried by ExitCode.
NODE_PREFLIGHT_EXAMPLES = ("tf-mnist", "xgboost-iris")
NODE_PREFLIGHT_FRAMEWORKS = ("tensorflow", "xgboost", "jax", "paddle")


def add_node_preflight(template: dict, cfg: StackConfig, pool: GpuPool, checkpoints: bool) -> None:
    """`python /code/preflight.py --node -- COMMAND` in front of the container's command."""
    main = template["spec"]["containers"][0]
    wrapper = ["python", "/code/preflight.py", "--node", "--"]
    if main["command"][: len(wrapper)] != wrapper:
        main["command"] = [*wrapper, *main["command"]]
    merge_env(main, {k: v for k, v in preflight_env(cfg, pool, checkpoints).items() if k != "PREFLIGHT_NCCL_NETWORK"})
    main["env"] = [e for e in main["env"] if e["name"] != "NODE_NAME"]
    main["env"].append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    # a failing node is served on the progress port while the check lingers (preflight.py linger), so
    # the watchdog asks the health gate to re-check it, as for a PyTorch job's named node
    add_progress_port(main)


# An MPIJob's workers run no command of ours (the operator's ranks arrive through the launcher's
# mpirun), so its launcher checks them: `preflight.py --mpi -- MPIRUN...` runs every worker's node
# check through mpirun, one rank per worker (the workers' own locked memory, GPU memory, checkpoint
# write), then becomes the team's mpirun; a bad or silent worker's node is named and served for the
# watchdog, which asks the gate to re-check it and then deletes the job's pods there (the operator
# recreates them elsewhere), and the launcher exits 151. The launcher stays OnFailure: its container
# restarts in place and tries again; under ExitCode (restartPolicy Never) a failed launcher fails the
# whole job and is never recreated (ReconcilePods creates a launcher only while none has finished:
# kubeflow/trainer:pkg/controller.v1/mpi/mpijob_controller.go@v1.9.4). Its time box is the workers'
# own plus a minute, so a worker's check ends before the launcher stops waiting for it.
MPI_PREFLIGHT = ["python", "/code/preflight.py", "--mpi", "--"]


def _mount_code(template: dict, configmap: str) -> None:
    spec, main = template["spec"], template["spec"]["containers"][0]
    spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] != "code"]
    spec["volumes"].append({"name": "code", "configMap": {"name": configmap}})
    main["volumeMounts"] = [m for m in main.get("volumeMounts", []) if m["name"] != "code"]
    main["volumeMounts"].append({"name": "code", "mountPath": "/code"})


def add_mpi_preflight(
    job: dict, cfg: StackConfig, pool: GpuPool, checkpoints: bool, code_configmap: str | None = None
) -> None:
    """The launcher's pre-flight of an MPIJob's workers; `code_configmap`: the ConfigMap of
    PREFLIGHT_FILES to mount at /code in both (None: the job mounts one there already)."""
    specs = job["spec"]["mpiReplicaSpecs"]
    launcher, worker = specs["Launcher"]["template"], specs["Worker"]["template"]
    if code_configmap:
        _mount_code(launcher, code_configmap)
        _mount_code(worker, code_configmap)
    main = launcher["spec"]["containers"][0]
    if main["command"][: len(MPI_PREFLIGHT)] != MPI_PREFLIGHT:
        main["command"] = [*MPI_PREFLIGHT, *main["command"]]
    merge_env(main, {PREFLIGHT_SWITCH: "run", "PREFLIGHT_TIMEOUT_SECONDS": str(PREFLIGHT_TIMEOUT_S + 60)})
    add_progress_port(main)  # the named nodes are served here while the launcher lingers
    ranks = worker["spec"]["containers"][0]
    merge_env(ranks, {k: v for k, v in preflight_env(cfg, pool, checkpoints).items() if k != "PREFLIGHT_NCCL_NETWORK"})
    ranks["env"] = [e for e in ranks["env"] if e["name"] != "NODE_NAME"]
    ranks["env"].append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})


# PyTorch's own NCCL watchdog, tuned (the variables of torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp
# at the image's PyTorch, pytorch/pytorch@v2.7.1): a collective that waits past its timeout tears the
# process down instead of hanging, so the pod exits (150 from train_ddp.py, or 134 from the abort: both
# retried by ExitCode). TORCH_NCCL_ASYNC_ERROR_HANDLING is 3, SkipCleanUp: down without calling
# ncclCommAbort, which can itself hang on a broken fabric (the ErrorHandlingMode comment there; 3 is the
# default the header's TODO names, written out so the rendered job says it). The timeout is
# COLLECTIVE_TIMEOUT_S, which train_ddp.py passes to init_process_group, half of PyTorch's 10 minutes
# (kProcessGroupNCCLDefaultTimeout, same file): a gang restarts sooner. The heartbeat monitor
# (TORCH_NCCL_ENABLE_MONITORING) aborts a process whose NCCL watchdog thread has stopped looping (stuck
# in a CUDA or NCCL call that never returns) for TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC; the thread loops
# while collectives wait, so that clock is not the collective's: a minute past the collective timeout
# keeps a stuck process's end within the same order as a timed-out collective's.
COLLECTIVE_TIMEOUT_S = 300
NCCL_WATCHDOG_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(COLLECTIVE_TIMEOUT_S + 60),
    "HIGGSFIELD_COLLECTIVE_TIMEOUT_SECONDS": str(COLLECTIVE_TIMEOUT_S),
}


def add_progress(template: dict) -> None:
    """Publish the ranks' progress on the `progress` port (images/training/progress.py, served by
    examples/checkpointing.py), which Prometheus scrapes and the job watchdog reads; and the NCCL
    watchdog settings above."""
    main = template["spec"]["containers"][0]
    merge_env(main, NCCL_WATCHDOG_ENV)
    add_progress_port(main)


def add_progress_port(container: dict) -> None:
    """The `progress` port, which the scrape job `training-progress` finds (components/observability.py),
    and the variable that tells the pod's programs to serve on it (images/training/progress.py)."""
    merge_env(container, {"HIGGSFIELD_PROGRESS_PORT": str(PROGRESS_PORT)})
    ports = [p for p in container.get("ports", []) if p.get("name") != PROGRESS_PORT_NAME]
    container["ports"] = [*ports, {"name": PROGRESS_PORT_NAME, "containerPort": PROGRESS_PORT, "protocol": "TCP"}]


def _attach_datasets(template: dict, cfg: StackConfig, team: Team, only: tuple[str, ...] | None = None) -> None:
    """The shared datasets the team may use (of them, those named in `only`), read-only unless it owns them;
    a dataset in `only` the team may not use, or the stack does not have, is refused (the job file's `data`)."""
    spec, main = template["spec"], template["spec"]["containers"][0]
    known = {d.name: d for d in cfg.fsx.datasets}
    for i, name in enumerate(only or ()):
        if name not in known:
            raise ConfigError(
                f"data[{i}].dataset",
                f"stack {cfg.stack} has no dataset {name!r} (higgsfield:fsx.datasets: {', '.join(known) or 'none'})",
            )
        if team.name != known[name].owner and team.name not in known[name].readers:
            raise ConfigError(
                f"data[{i}].dataset", f"team {team.name} may not read dataset {name} (owner {known[name].owner})"
            )
    for dataset in cfg.fsx.datasets:
        if team.name != dataset.owner and team.name not in dataset.readers:
            continue
        if only is not None and dataset.name not in only:
            continue
        volume = f"dataset-{dataset.name}"
        spec["volumes"].append(
            {
                "name": volume,
                "persistentVolumeClaim": {
                    "claimName": DATASET_CLAIM.format(name=dataset.name),
                    "readOnly": team.name != dataset.owner,
                },
            }
        )
        main["volumeMounts"].append(
            {
                "name": volume,
                "mountPath": DATASET_MOUNT.format(name=dataset.name),
                "readOnly": team.name != dataset.owner,
            }
        )


# GPU pods per job of `workers` workers: DDP and XGBoost add a master on the pool; the MPI launcher
# runs on the pool too but holds no GPU (the system nodes are tainted); an elastic job's `workers`
# is the most it grows to, the serving example's its HPA's maxReplicas, the sweep's its parallelism.
_GPU_PODS = {
    "pytorch-ddp": lambda w: w + 1,
    "pytorch-elastic": lambda w: w,
    "mpi-nccl-tests": lambda w: w,
    "tf-mnist": lambda w: w,
    "xgboost-iris": lambda w: w + 1,
    "serving-classifier": lambda w: w,
    "eval-sweep": lambda w: w,
}
DEFAULT_WORKERS = 2


@dataclass(frozen=True)
class Fit:
    """How large a job of one example may be on a pool for a team: within the pool at maxSize,
    the team's GPU quota and its queue's capability (each named by its setting's full key)."""

    example: str
    gpus_per_node: int
    limits: tuple[tuple[int, str], ...]  # (GPUs, the limit in words)

    def pods(self, workers: int) -> int:
        return _GPU_PODS[self.example](workers)

    def gpus(self, workers: int) -> int:
        return self.pods(workers) * self.gpus_per_node

    @property
    def most_workers(self) -> int:
        limit, most = min(g for g, _ in self.limits), 0
        while self.gpus(most + 1) <= limit:
            most += 1
        return most

    @property
    def default_workers(self) -> int:
        grows = self.example in ("pytorch-elastic", "serving-classifier")  # to the most that fits
        return self.most_workers if grows else min(DEFAULT_WORKERS, self.most_workers)

    def _exceeded(self, workers: int) -> str:
        return "; ".join(text for gpus, text in self.limits if self.gpus(workers) > gpus)

    def check(self, workers: int | None) -> int:
        """`workers`, or the default, if the job fits; else a ConfigError naming the limits."""
        if self.most_workers < 1:
            raise ConfigError(
                "--workers" if workers is not None else "EXAMPLE",
                f"{self.example} needs at least {self.gpus(1)} GPUs ({self.pods(1)} pods x {self.gpus_per_node}), "
                f"more than {self._exceeded(1)}: no size of it fits",
            )
        if workers is None:
            return self.default_workers
        if workers < 1:
            raise ConfigError("--workers", f"must be at least 1, got {workers}")
        if workers > self.most_workers:
            raise ConfigError(
                "--workers",
                f"{workers} needs {self.gpus(workers)} GPUs ({self.pods(workers)} pods x {self.gpus_per_node}), "
                f"more than {self._exceeded(workers)}; at most --workers {self.most_workers} fits",
            )
        return workers


def fit(example: str, cfg: StackConfig, pool: GpuPool, team: Team) -> Fit:
    """The size limits of `example` on `pool` for `team` (a serving example: its serving quota too)."""
    p, t = cfg.gpu_pools.index(pool), cfg.scheduler.teams.index(team)
    q, queue = next((i, x) for i, x in enumerate(cfg.scheduler.queues) if x.name == team.queue)
    limits = [
        (
            pool.max_size * pool.gpus_per_node,
            f"pool {pool.name}'s {pool.max_size} nodes x {pool.gpus_per_node} GPUs (higgsfield:gpuPools[{p}].maxSize)",
        ),
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
    if WORKLOAD[example] == "serving" and team.serving_gpu_quota is not None:
        limits.append(
            (
                team.serving_gpu_quota,
                f"team {team.name}'s serving quota of {team.serving_gpu_quota} GPUs "
                f"(higgsfield:scheduler.teams[{t}].servingGpuQuota)",
            )
        )
    return Fit(example, 1 if example in ONE_GPU_PODS else pool.gpus_per_node, tuple(limits))


def _fit_or_other_pools(example: str, cfg: StackConfig, pool: GpuPool, team: Team, workers: int | None) -> Fit:
    """`fit` on `pool`; where no size fits there, the refusal says which other pools it fits
    (`--pool NAME`), or that it fits no pool of the stack."""
    sizes = fit(example, cfg, pool, team)
    if sizes.most_workers >= 1:
        return sizes
    others = [p.name for p in _fitting(example, cfg, team) if p is not pool]
    where = (
        f"on pool {pool.name}; it fits pool {' or '.join(others)} (--pool {others[0]})"
        if others
        else "on any pool of the stack"
    )
    try:
        sizes.check(workers)
    except ConfigError as exc:
        raise ConfigError(exc.problems[0].key, f"{exc.problems[0].message} {where}") from None
    return sizes


def fits(example: str, cfg: StackConfig, *, pool: str | None = None, team: str | None = None) -> bool:
    """Whether some size of `example` fits the pool (default pool) for the team (default team)."""
    try:
        member = _pick_team(cfg, team, WORKLOAD[example])
    except ConfigError:  # the team is given no class of this kind of work
        return False
    chosen = _pick_pool(cfg, pool, example, member)
    return fit(example, cfg, chosen, member).most_workers >= 1


def _load_all(text: str) -> list:
    """Every document of a template (see `_load`)."""
    return [_own_templates(d) for d in round_trip_yaml().load_all(text)]


def _load(text: str) -> Any:
    """The template as a round-trip YAML document (comments kept). Replicas that share a pod
    template through a YAML alias get their own copy, so each can be filled in alone."""
    return _own_templates(round_trip_yaml().load(text))


def _own_templates(job: Any) -> Any:
    seen: set[int] = set()
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs", "tfReplicaSpecs", "xgbReplicaSpecs"):
        for spec in ((job.get("spec") or {}).get(key) or {}).values():
            if id(spec["template"]) in seen:
                spec["template"] = copy.deepcopy(spec["template"])
            seen.add(id(spec["template"]))
    return job


def _built_from() -> str:
    """Where the stack's image is built from: the project's images/training, or (a project `init` made,
    which has none) the installed package's."""
    from infra.core.assets import IMAGE_SOURCES, image_sources
    from infra.core.project import project_root

    root = project_root()
    own = image_sources(root) == root / IMAGE_SOURCES
    return f"{IMAGE_SOURCES} of this project" if own else f"the installed package's {IMAGE_SOURCES}"


def image_comment(cfg: StackConfig, image: str) -> str:
    """The YAML comment that says which image a rendered job needs and how to get it."""
    import textwrap

    from infra.offline import image as image_cli

    def comment(text: str) -> list[str]:
        return textwrap.wrap(text, 98, initial_indent="#   ", subsequent_indent="#   ", break_on_hyphens=False)

    if image == stack_image(cfg) and not cfg.training_image:
        tag = image.rsplit(":", 1)[1]
        repository = image.split("/", 1)[1].rsplit(":", 1)[0]
        return "\n".join(
            [
                f"# Image: {image}",
                f"#   built from {_built_from()}. Not in the registry yet? Build and push it (Docker):",
                f"#     higgsfield image push {cfg.stack}",
                f"#   or, where the project has .github/workflows/image.yml, let it push on main ({image_cli.DOCS}).",
                "#   Is it there:",
                f"#     aws ecr describe-images --region {cfg.region} --repository-name {repository} \\",
                f"#       --image-ids imageTag={tag}",
            ]
        )
    if image in {own() for own in OWN_IMAGE.values()}:  # an upstream image, pulled from its registry
        return "\n".join(
            [
                f"# Image: {image}",
                *comment(
                    "the upstream image itself, pulled from its registry (pinned in infra/core/versions.py); "
                    f"nothing to build ({image_cli.DOCS} for the training image)."
                ),
            ]
        )
    origin = "higgsfield:trainingImage" if image == cfg.training_image else "--image"
    return "\n".join(
        [
            f"# Image: {image}",
            *comment(
                f"({origin}) yours to build and push before applying this job; on EFA pools it needs libfabric's efa "
                "provider and "
                f"aws-ofi-nccl, as images/training/Dockerfile builds them ({image_cli.DOCS})."
            ),
        ]
    )


class ResumeRefused(ConfigError):
    """A multi-node job with checkpoints on a stack without shared storage: it could never resume."""


def _storage(cfg: StackConfig) -> str | None:
    """Where checkpoints outlive a node, if anywhere: the stack's FSx (with exportToS3, its S3 link)."""
    if not cfg.fsx.enabled:
        return None
    return "FSx, exported to S3" if cfg.checkpoints.export_to_s3 else "FSx"


def resume_text(cfg: StackConfig, checkpoints: bool) -> str:
    """What the job's header comment may promise about resuming."""
    storage = _storage(cfg)
    if not checkpoints:
        return (
            "starts again at step 0: checkpoints are off\n# (CHECKPOINT_EVERY_STEPS=0): this stack has no shared "
            "storage "
            "for a multi-node job's checkpoints\n# (higgsfield:fsx.enabled is false)"
        )
    if storage:
        return f"resumes from the newest complete checkpoint on {storage}"
    return (
        "resumes from its newest checkpoint only while its node lives\n# (one pod on its node's disk: "
        "higgsfield:fsx.enabled is false, no shared storage)"
    )


def checkpoints_for(example: str, cfg: StackConfig, pods: int, asked: bool | None) -> bool:
    """Whether the job checkpoints. A job on more than one node would write each pod's checkpoint
    to that pod's own disk without shared storage: no checkpoint is ever complete (rank 0 waits for
    every rank's shard, examples/checkpointing.py), so it could never resume. By default such a job
    runs without checkpoints (and says so); asked for them explicitly, it is refused."""
    if not example.startswith("pytorch"):
        return False
    resumable = pods <= 1 or _storage(cfg) is not None
    if asked and not resumable:
        raise ResumeRefused(
            "higgsfield:fsx.enabled",
            f"{example} runs on {pods} nodes and its checkpoints would stay on each pod's local disk, so it could "
            "never resume "
            "after a lost node: enable higgsfield:fsx (shared storage for checkpoints), run it on one node "
            "(pytorch-elastic --workers 1), "
            "or render it without --checkpoints (a restart starts at step 0)",
        )
    return resumable if asked is None else asked


def resume_promise(job: dict, cfg: StackConfig) -> str | None:
    """What a rendered job promises that the stack cannot keep: checkpoints of a multi-pod job that
    are not on a PersistentVolumeClaim (shared storage), while the job says it resumes."""
    gpu_pods = 0
    for key, spec in (job.get("spec", {}).get("pytorchReplicaSpecs") or {}).items():
        gpu_pods += int(
            job["spec"].get("elasticPolicy", {}).get("maxReplicas", spec.get("replicas", 1))
            if key == "Worker"
            else spec.get("replicas", 1)
        )
    for replica, template in pod_templates(job, named=True):
        spec, main = template["spec"], template["spec"]["containers"][0]
        shared = {e["name"]: e.get("value") for e in main.get("env", [])}.get("CHECKPOINT_SHARED_DIR")
        claims = {v["name"] for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}
        mounts = [m["mountPath"] for m in main.get("volumeMounts", []) if m["name"] in claims]
        if shared and gpu_pods > 1 and not any(shared == m or shared.startswith(m.rstrip("/") + "/") for m in mounts):
            return (
                f"{job['metadata']['name']} ({replica}): {gpu_pods} pods keep checkpoints at {shared}, not on shared "
                "storage, "
                "so a restarted gang cannot resume (higgsfield:fsx.enabled)"
            )
    return None


def fill_template(text: str, values: dict[str, Any], where: str) -> list:
    """The template's documents with their ${placeholders} filled in, the values as data, never as YAML text.

    The document is read twice: once with the values in the text (which keeps the template's
    layout and comment columns), once with a plain token in each placeholder's place and the
    values put into the parsed scalars afterwards (`_filled_as_data`: a placeholder that is a whole
    plain scalar takes the value's own type, one inside a string its text), which no value can
    turn into structure. The two must be the same document; if a value would change the structure
    (`--image 'x\n  evil: 1'`, refused before as no image reference), rendering is refused."""
    as_data = _filled_as_data(text, values)
    try:
        as_text = _load_all(Template(text).substitute(values))
    except Exception:  # noqa: BLE001 - ruamel's parser errors: the values broke the YAML
        as_text = None
    if as_text is None or _plain(as_text) != _plain(as_data):
        changed = [
            k for k, v in values.items() if isinstance(v, str) and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*", v)
        ]
        raise ConfigError(
            f"--{changed[0].replace('_', '-')}" if changed else where,
            f"{_show_value(values[changed[0]]) if changed else 'a value'} would change the structure of {where}, not "
            "fill in a value",
        )
    return as_text


def _plain(document: Any) -> str:
    import json

    return json.dumps(document, sort_keys=True, default=str)


def _show_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def _comment_block(line: str, values: dict[str, Any]) -> bool:
    """`line` is a single placeholder (`${image_comment}`) whose value is only YAML comment lines."""
    match = re.fullmatch(r"\$\{(\w+)\}\n?", line)
    value = values.get(match[1]) if match else None
    return isinstance(value, str) and all(part.lstrip().startswith("#") for part in value.splitlines())


def _filled_as_data(text: str, values: dict[str, Any]) -> Any:
    tokens = {key: f"hfvalue{i}x" for i, key in enumerate(values)}
    lines = []
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("#"):  # the template's comments: text for a reader
            lines.append(Template(line).safe_substitute({k: " ".join(str(v).split()) for k, v in values.items()}))
        elif _comment_block(
            line, values
        ):  # a line that is one placeholder whose value is comment lines (image_comment)
            lines.append(Template(line).substitute(values))
        else:
            lines.append(Template(line).substitute(tokens))
    by_token = {token: values[key] for key, token in tokens.items()}
    found = re.compile("|".join(map(re.escape, by_token)))

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            for key in list(node):
                assert not (isinstance(key, str) and found.search(key)), (
                    f"a template placeholder in a key: {key}"
                )  # values only
                node[key] = fill(node[key])
        elif isinstance(node, list):
            for i, item in enumerate(node):
                node[i] = fill(item)
        elif isinstance(node, str) and found.search(node):
            if node in by_token and type(node) is str:  # a whole plain scalar: the value itself
                return by_token[node]
            text = found.sub(lambda m: str(by_token[m.group(0)]), str(node))
            return type(node)(text) if type(node) is not str else text  # keeps the template's quoting
        return node

    return fill(_load_all("".join(lines)))


def _model_dir(cfg: StackConfig, team: Team, pool: GpuPool) -> str:
    """Where the serving and evaluation examples find weights: the DDP example's checkpoints on
    FSx (none without FSx, or where the team cannot read them: random weights, said on start)."""
    if not cfg.fsx.enabled:
        return ""
    try:
        return checkpoint_path(cfg, team, f"pytorch-ddp-{pool.name}")
    except ConfigError:
        return ""


def _tolerate_pool(template: dict, pool: GpuPool, image: str) -> None:
    """A one-GPU pod on `pool`: its image and the pool's own taints tolerated (prepare_gpu_pod
    does this, and more, for pods that take a whole node)."""
    template["spec"]["containers"][0]["image"] = image
    tolerate_pool(template["spec"], pool)


def render(
    example: str,
    cfg: StackConfig,
    *,
    pool: str | None = None,
    team: str | None = None,
    workers: int | None = None,
    image: str | None = None,
    checkpoints: bool | None = None,
    name: str | None = None,
) -> list[dict]:
    """The Kubernetes objects of `example` for stack `cfg`: its scripts' ConfigMap, what goes with
    it (a Service, an HPA), and the workload last. Every pod runs `image` (default: the stack's
    training image, or the example's own); `workers` defaults to what fits. `checkpoints` (PyTorch
    examples) None: on where they can resume (`checkpoints_for`); True on a stack where a multi-node
    job cannot resume: refused (ResumeRefused). `name` (default EXAMPLE-POOL) names the job, its
    ConfigMap and its checkpoint directory: a second copy beside a team's own needs another."""
    if example not in EXAMPLES:
        raise ConfigError("EXAMPLE", f"unknown example {example!r}; examples: {', '.join(EXAMPLES)}")
    workload = WORKLOAD[example]
    member = _pick_team(cfg, team, workload)
    chosen = _pick_pool(cfg, pool, example, member)
    if example == "mpi-nccl-tests" and not chosen.efa:
        if pool is None:  # no pool of the stack has EFA: no --pool was given to blame
            raise ConfigError(
                "higgsfield:gpuPools",
                f"stack {cfg.stack} has no EFA pool (pools: {', '.join(p.name for p in cfg.gpu_pools)}); the NCCL "
                "test is for EFA pools",
            )
        raise ConfigError("--pool", f"pool {chosen.name} has no EFA; the NCCL test is for EFA pools")
    sizes = _fit_or_other_pools(example, cfg, chosen, member, workers)
    workers = sizes.check(workers)
    checkpoints = checkpoints_for(example, cfg, sizes.pods(workers), checkpoints)
    if image is not None:
        check_image(cfg, chosen, image)
    image = image or (OWN_IMAGE[example]() if example in OWN_IMAGE else default_image(cfg))
    name = name or f"{example}-{chosen.name}"
    shared = MOUNT_PATH if cfg.fsx.enabled else LOCAL_CHECKPOINTS.rsplit("/", 1)[0]
    values = {
        "name": name,
        "namespace": member.name,
        "queue": member.queue,
        "priority_class": cfg.scheduler.classes_of(member, workload)[0],
        "pool": chosen.name,
        "zone": chosen.availability_zone,
        "gpus": chosen.gpus_per_node,
        "workers": workers,
        "replicas": workers + 1,
        "backoff_limit": 3 * max(workers + 1, chosen.max_size) + 1,
        "total_gpus": workers * chosen.gpus_per_node,
        "min_replicas": 1,  # elastic: starts with one worker, grows to `workers`
        "max_replicas": workers,
        "floor": min(SERVING_FLOOR, workers),
        "image": image,
        "image_comment": image_comment(cfg, image),
        "resume": resume_text(cfg, checkpoints),
        "checkpoint_dir": checkpoint_path(cfg, member, name)
        if workload == "training" and example not in ("pytorch-ddp", "pytorch-elastic", "mpi-nccl-tests")
        else "",
        # what the serving and evaluation examples load: the newest checkpoint of the DDP example, on FSx
        "model_dir": _model_dir(cfg, member, chosen) if workload != "training" else "",
        "results_dir": f"{shared}/eval/{name}",
    }
    documents = fill_template((EXAMPLES_DIR / f"{example}.yaml").read_text(), values, f"examples/{example}.yaml")
    job = documents[-1]
    problem = job_name_problem(name, job["kind"])
    if problem:
        raise ConfigError("name", f"{name}: {problem}; example {example} is a {job['kind']}")
    for replica, template in pod_templates(job, named=True):
        if not _on_gpu_pool(template):
            continue
        if example in ONE_GPU_PODS:
            _tolerate_pool(template, chosen, image)
        else:
            # TensorFlow's image has no EFA provider nor aws-ofi-nccl: its pods use the node, not EFA
            prepare_gpu_pod(
                template["spec"], chosen, image, f"examples/{example}.yaml {replica}", efa=example not in OWN_IMAGE
            )
        if workload == "training":
            # Karpenter never voluntarily disrupts the node of a pod with this annotation (consolidation,
            # drift, expiry); harmless on node-group pools (components/karpenter.py, docs/karpenter.md).
            # Not on serving or evaluation pods: those may move, the scavenger first.
            template.setdefault("metadata", {}).setdefault("annotations", {})[DO_NOT_DISRUPT] = "true"
        if cfg.fsx.enabled and example != "mpi-nccl-tests":
            _attach_lustre(template)
            _attach_datasets(template, cfg, member)
        _checks_before_training(example, template, cfg, chosen, member, name, checkpoints)
    if example == "mpi-nccl-tests":
        add_mpi_preflight(job, cfg, chosen, checkpoints=False, code_configmap=f"{name}-code")
    _as_team(job, member)
    promise = resume_promise(job, cfg)
    if promise:  # the renderer's own guarantee: never print a resume the stack cannot give
        raise ResumeRefused("higgsfield:fsx.enabled", promise)
    objects: list[dict[str, Any]] = list(documents)
    if example in SCRIPTS:
        objects.insert(0, _code(example, name, member.name))
    return objects


def _as_team(job: dict, team: Team) -> None:
    """Each pod template of `job` as the team's admission policy requires it: the team's identity and, in a
    Kubeflow job, each container's requests in full, at least what the operator's init containers ask (the gang
    its queue admits counts what its pods ask)."""
    for template in pod_templates(job):
        run_as_team(template, team)
        if job["kind"] in KUBEFLOW_JOB_KINDS:
            request_in_full(template, team)
    request_the_operators_inits(job)


def _checks_before_training(
    example: str, template: dict, cfg: StackConfig, pool: GpuPool, team: Team, name: str, checkpoints: bool
) -> None:
    """A GPU pod's checkpoint settings, pre-flight and progress, as its framework allows."""
    if example.startswith("pytorch"):
        _checkpoint(template, cfg, pool, team, name, checkpoints)
        add_preflight(template, cfg, pool, checkpoints)
        add_progress(template)
    elif example in NODE_PREFLIGHT_EXAMPLES:
        add_node_preflight(template, cfg, pool, checkpoints=False)


def _code(example: str, name: str, namespace: str) -> dict:
    """The example's ConfigMap: its scripts, and the pre-flight's files where it runs one."""
    preflight = example.startswith("pytorch") or example in (*NODE_PREFLIGHT_EXAMPLES, "mpi-nccl-tests")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-code", "namespace": namespace},
        "data": {
            **{f: (EXAMPLES_DIR / f).read_text() for f in SCRIPTS[example]},
            **({f: shipped(f"images/training/{f}").read_text() for f in PREFLIGHT_FILES} if preflight else {}),
        },
    }


def round_trip_yaml() -> YAML:
    """YAML that keeps comments, key order, flow style and quotes (ruamel's round-trip mode)."""
    y = YAML()
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    return y


# Plain words YAML 1.1 reads as booleans (kubectl's parser does): quoted when written.
_YAML11_BOOL = re.compile(r"^(y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$")


def _for_editing(value: Any) -> Any:
    """Multi-line strings (scripts) as block scalars; words a YAML 1.1 reader takes for booleans quoted."""
    if isinstance(value, dict):
        for k, v in value.items():
            value[k] = _for_editing(v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            value[i] = _for_editing(v)
    elif type(value) is str and "\n" in value:
        return LiteralScalarString(value)
    elif type(value) is str and _YAML11_BOOL.match(value):
        return DoubleQuotedScalarString(value)
    return value


def to_yaml(objects: list[dict]) -> str:
    """Documents for `kubectl apply -f -`, pleasant to edit: the template's comments kept,
    scripts as `|` block scalars."""
    out = io.StringIO()
    round_trip_yaml().dump_all([_for_editing(o) for o in objects], out)
    return out.getvalue()

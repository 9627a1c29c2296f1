"""`higgsfield healthcheck render STACK POOL`: the post-deploy health check of a GPU pool
as Kubernetes objects for `kubectl apply -f -`: a Job with one pod per node running
images/training/node_check.py (shipped in a ConfigMap) and, for two or more nodes, a PyTorchJob that measures NCCL
all-reduce bus bandwidth across them. On EFA pools
the all-reduce fails unless NCCL's INFO log shows it picked aws-ofi-nccl's efa provider (a TCP
fallback never passes), and its threshold is the instance type's (components/efa.py).

It runs in a team namespace with no Kubernetes API access (no token): it reports, and only the
health gate (components/healthgate.py), from its own namespace, labels and untaints nodes. No
team service account is bound to a role that can patch nodes."""

from __future__ import annotations

import re

from components.device_plugins import GPU_TOLERATION
from components.efa import EFA_LOCKED_MEMORY_BYTES, efa_count, efa_interfaces_for
from components.storage import MOUNT_PATH, PVC_NAME
from infra.config import ConfigError, GpuPool, StackConfig
from infra.core import versions
from infra.core.assets import shipped
from infra.core.names import CLEAN_POD_POLICY, KUBEFLOW_GROUP
from infra.offline.pods import (
    bus_bandwidth_threshold,
    check_image,
    default_image,
    prepare_gpu_pod,
    request_in_full,
    run_as_team,
    stack_repository,
)

PROGRAM = shipped("images/training/node_check.py")
CODE = "higgsfield-healthcheck"  # the ConfigMap holding node_check.py
# Where NCCL writes its INFO log in the all-reduce pods (one file per process, read back by
# node_check.py --allreduce).
NCCL_LOG = "/tmp/nccl-%h-%p.log"


def _env(cfg: StackConfig, pool: GpuPool, image: str) -> list[dict]:
    health = cfg.observability.health
    values = {
        "EXPECTED_GPUS": pool.gpus_per_node,
        "EXPECTED_GPU_MODEL": pool.instance.gpu_model or "",
        "MIN_DRIVER_BRANCH": versions.CUDA_MIN_DRIVER_BRANCH[cfg.cuda_version or versions.TRAINING_IMAGE_CUDA],
        "EXPECTED_DRIVER_VERSION": versions.nvidia_driver_of_release(cfg.node_release_version) or "",
        "EXPECTED_EFA_DEVICES": efa_count(efa_interfaces_for(pool.instance)) if pool.efa else 0,
        "MIN_LOCKED_MEMORY_BYTES": EFA_LOCKED_MEMORY_BYTES if pool.efa else 0,
        "MIN_MATMUL_FRACTION": health.min_matmul_fraction,
        "MIN_MEMORY_BANDWIDTH_FRACTION": health.min_memory_bandwidth_fraction,
        "MIN_LUSTRE_MBPS": health.min_lustre_mb_s,
        "MIN_BUS_BANDWIDTH_GBPS": bus_bandwidth_threshold(cfg, pool),
        "LUSTRE_PATH": MOUNT_PATH if cfg.fsx.enabled else "",
        "EXPECTED_NCCL_NETWORK": "efa" if pool.efa else "any",
        # the plugin version is known only for the image built from images/training/Dockerfile
        "EXPECTED_OFI_NCCL_VERSION": versions.AWS_OFI_NCCL.version
        if pool.efa and image.startswith(stack_repository(cfg) + ":")
        else "",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": NCCL_LOG,
    }
    return [{"name": k, "value": str(v)} for k, v in values.items()] + [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    ]


def _pod_spec(cfg: StackConfig, pool: GpuPool, app: str, command: list[str], container: str, image: str) -> dict:
    limits: dict = {"nvidia.com/gpu": pool.gpus_per_node}
    mounts = [{"name": "code", "mountPath": "/code"}]
    volumes: list[dict] = [{"name": "code", "configMap": {"name": CODE}}]
    if cfg.fsx.enabled:
        mounts.append({"name": "shared", "mountPath": MOUNT_PATH})
        volumes.append({"name": "shared", "persistentVolumeClaim": {"claimName": PVC_NAME}})
    spec = {
        "automountServiceAccountToken": False,  # reports only; the health gate labels nodes
        "restartPolicy": "Never",
        "nodeSelector": {"higgsfield.io/pool": pool.name},
        "tolerations": [GPU_TOLERATION],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        },
        "containers": [
            {
                "name": container,
                "image": image,
                "command": command,
                "env": _env(cfg, pool, image),
                "resources": {"limits": limits},
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    prepare_gpu_pod(spec, pool, image, f"healthcheck {app}")
    return spec


def _with_image_comment(obj: dict, cfg: StackConfig, image: str) -> dict:
    """`obj` with the comment that says which image it needs and how to get it (jobs.image_comment)."""
    from ruamel.yaml.comments import CommentedMap

    from infra.offline.jobs import image_comment

    commented = CommentedMap(obj)
    commented.yaml_set_start_comment(
        "\n".join(
            line[2:] if line.startswith("# ") else line.lstrip("#") for line in image_comment(cfg, image).splitlines()
        )
    )
    return commented


def _pool_and_image(cfg: StackConfig, pool_name: str, image: str | None) -> tuple[GpuPool, str]:
    """The named pool of the stack and the image its check runs (a given image checked against the pool)."""
    pools = {p.name: p for p in cfg.gpu_pools}
    if pool_name not in pools:
        raise ConfigError("POOL", f"no pool {pool_name!r} in stack {cfg.stack}; pools: {', '.join(pools) or 'none'}")
    pool = pools[pool_name]
    if image is not None:
        check_image(cfg, pool, image)
    return pool, image or default_image(cfg)


def render(
    cfg: StackConfig, pool_name: str, *, team: str | None = None, nodes: int | None = None, image: str | None = None
) -> list[dict]:
    pool, image = _pool_and_image(cfg, pool_name, image)
    teams = {t.name: t for t in cfg.scheduler.teams}
    namespace = team if team is not None else next(iter(teams), None)  # --team '' is a (wrong) value, not "unset"
    if namespace not in teams:
        raise ConfigError("--team", f"no team {namespace!r} in stack {cfg.stack}; teams: {', '.join(teams) or 'none'}")
    count = nodes if nodes is not None else max(1, min(pool.max_size, 2))  # --nodes 0 is a value: refused below
    if not 1 <= count <= pool.max_size:
        raise ConfigError("--nodes", f"{count} is outside 1..{pool.max_size} (the pool's maxSize)")
    app = f"healthcheck-{pool.name}"
    objects: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CODE, "namespace": namespace},
            "data": {"node_check.py": PROGRAM.read_text()},
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": app, "namespace": namespace},
            "spec": {
                "completions": count,
                "parallelism": count,
                "backoffLimit": 0,
                "ttlSecondsAfterFinished": 86400,
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": _pod_spec(cfg, pool, app, ["python", "/code/node_check.py"], "check", image),
                },
            },
        },
    ]
    team_spec = teams[namespace]
    check_pods = objects[1]["spec"]["template"]
    # A GPU pod in a team namespace is Volcano's: its podgroup controller gives each such pod a
    # PodGroup of its own (volcano-sh/volcano:pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1
    # createNormalPodPGIfNotExist), in the team's queue by the namespace's annotation (components/tenancy.py).
    check_pods["spec"]["schedulerName"] = "volcano"
    # A plain Job's GPU pods carry a class the namespace's plain-gpu quota counts (components/teams.py
    # plain_gpu_quota): the team's evaluation class (the scavenger: a check waits for idle nodes), else serving.
    counted = [*cfg.scheduler.classes_of(team_spec, "evaluation"), *cfg.scheduler.classes_of(team_spec, "serving")]
    if not counted:
        t = cfg.scheduler.teams.index(team_spec)
        raise ConfigError(
            f"higgsfield:scheduler.teams[{t}].priorityClasses",
            f"team {namespace} is given no evaluation or serving class: the check's Job is no Kubeflow job, and its "
            "GPU pods need a class the team's plain-gpu quota counts",
        )
    check_pods["spec"]["priorityClassName"] = counted[0]
    run_as_team(check_pods, team_spec)  # the team's UID and Pod Security restricted, as its admission policy requires
    objects[1] = _with_image_comment(objects[1], cfg, image)
    if count >= 2:
        worker = {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"labels": {"app": f"{app}-nccl"}},
                "spec": _pod_spec(
                    cfg, pool, f"{app}-nccl", ["torchrun", "/code/node_check.py", "--allreduce"], "pytorch", image
                ),
            },
        }
        run_as_team(worker["template"], team_spec)
        request_in_full(worker["template"], team_spec)
        objects.append(
            {
                "apiVersion": f"{KUBEFLOW_GROUP}/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": f"{app}-nccl", "namespace": namespace},
                "spec": {
                    "nprocPerNode": str(pool.gpus_per_node),
                    "runPolicy": {
                        "cleanPodPolicy": CLEAN_POD_POLICY,
                        "schedulingPolicy": {
                            "queue": team_spec.queue,
                            "priorityClass": cfg.scheduler.classes_of(team_spec, "training")[0],
                            "minAvailable": count,
                        },
                    },
                    "pytorchReplicaSpecs": {"Worker": worker},
                },
            }
        )
    return objects


# DCGM's deeper diagnostics on demand (components/healthgate.py: the gate asks level 1 at join, 2 on
# a re-check): a Job pinned to one node, in the gate's namespace (Pod Security privileged: the DCGM
# container is), taking every GPU of the node (so no job shares them while they are stressed), with
# the gate's DCGM container as a native sidecar (an init container that restarts Always: it ends
# with the check, Kubernetes 1.29+) answering the check's request, node_check.py --dcgm LEVEL.
DCGM_LEVELS = (1, 2, 3)
# node_check.py DCGM_TIMEOUT_S[3] (an hour: four times dcgmi's "~ 15 minutes") and the pod's start
DCGM_JOB_DEADLINE_S = {1: 900, 2: 1800, 3: 4200}
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def render_dcgm(cfg: StackConfig, pool_name: str, node: str, *, level: int = 3, image: str | None = None) -> list[dict]:
    """The one-off Job that runs `dcgmi diag -r LEVEL` on `node` (of pool `pool_name`) and prints
    node_check's verdict; it fails (exit 1) when DCGM finds a fault."""
    from components.device_plugins import EVERY_TAINT
    from components.healthgate import DCGM_EXCHANGE, NAMESPACE, dcgm_container

    if not _NODE_NAME.match(node):
        raise ConfigError("NODE", f"{node!r} is not a node name (kubectl get nodes)")
    if level not in DCGM_LEVELS:
        raise ConfigError("--level", f"{level} is not a DCGM diagnostic level here; levels: 1, 2, 3")
    pool, image = _pool_and_image(cfg, pool_name, image)
    name = f"dcgm-r{level}-{node.split('.')[0]}"[:63].rstrip("-")
    sidecar = {**dcgm_container(), "restartPolicy": "Always"}
    check = {
        "name": "check",
        "image": image,
        "command": ["python", "/opt/higgsfield/node_check.py", "--dcgm", str(level)],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "DCGM_EXCHANGE_DIR", "value": DCGM_EXCHANGE},
        ],
        "resources": {"limits": {"nvidia.com/gpu": pool.gpus_per_node}},
        "volumeMounts": [{"name": "dcgm", "mountPath": DCGM_EXCHANGE}],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/name": "dcgm-diag"}},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": DCGM_JOB_DEADLINE_S[level],
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "dcgm-diag"}},
                "spec": {
                    "automountServiceAccountToken": False,  # reports only: the gate alone writes nodes
                    "restartPolicy": "Never",
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "tolerations": [EVERY_TAINT],  # a node under the gate's taint, or the GPU taint
                    "initContainers": [sidecar],
                    "containers": [check],
                    "volumes": [{"name": "dcgm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}],
                },
            },
        },
    }
    return [_with_image_comment(job, cfg, image)]

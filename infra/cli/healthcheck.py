"""`higgsfield healthcheck render POOL --stack STACK`: the post-deploy health check of a GPU pool
as Kubernetes objects for `kubectl apply -f -`: a Job with one pod per node running
images/training/node_check.py (shipped in a ConfigMap), the RBAC it needs to label nodes, and, for two or
more nodes, a PyTorchJob that measures NCCL all-reduce bus bandwidth across them."""

from __future__ import annotations

from pathlib import Path

from components.device_plugins import GPU_TOLERATION
from components.efa import efa_count, efa_interfaces_for, efa_resources
from components.storage import MOUNT_PATH, PVC_NAME
from infra import versions
from infra.config import ConfigError, GpuPool, StackConfig

PROGRAM = Path(__file__).resolve().parents[2] / "images" / "training" / "node_check.py"
ACCOUNT = "higgsfield-healthcheck"


def _env(cfg: StackConfig, pool: GpuPool) -> list[dict]:
    health = cfg.observability.health
    values = {
        "EXPECTED_GPUS": pool.gpus_per_node,
        "EXPECTED_GPU_MODEL": pool.instance.gpu_model or "",
        "EXPECTED_DRIVER_BRANCH": versions.EKS_NVIDIA_DRIVER_BRANCH,
        "EXPECTED_EFA_DEVICES": efa_count(efa_interfaces_for(pool.instance)) if pool.efa else 0,
        "MIN_MATMUL_FRACTION": health.min_matmul_fraction,
        "MIN_MEMORY_BANDWIDTH_FRACTION": health.min_memory_bandwidth_fraction,
        "MIN_LUSTRE_MBPS": health.min_lustre_mb_s,
        "MIN_BUS_BANDWIDTH_GBPS": health.min_bus_bandwidth_gb_s,
        "LUSTRE_PATH": MOUNT_PATH if cfg.fsx.enabled else "",
    }
    return [{"name": k, "value": str(v)} for k, v in values.items()] + [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]


def _pod_spec(cfg: StackConfig, pool: GpuPool, app: str, command: list[str], container: str) -> dict:
    limits: dict = {"nvidia.com/gpu": pool.gpus_per_node, "memory": "32Gi"}
    if pool.efa:
        limits.update(efa_resources(pool.instance))
    mounts = [{"name": "code", "mountPath": "/code"}]
    volumes: list[dict] = [{"name": "code", "configMap": {"name": ACCOUNT}}]
    if cfg.fsx.enabled:
        mounts.append({"name": "shared", "mountPath": MOUNT_PATH})
        volumes.append({"name": "shared", "persistentVolumeClaim": {"claimName": PVC_NAME}})
    return {
        "serviceAccountName": ACCOUNT,
        "restartPolicy": "Never",
        "nodeSelector": {"higgsfield.io/pool": pool.name},
        "tolerations": [GPU_TOLERATION],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}},
        "containers": [{
            "name": container,
            "image": versions.EXAMPLE_PYTORCH_IMAGE,
            "command": command,
            "env": _env(cfg, pool),
            "resources": {"limits": limits},
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    }


def render(cfg: StackConfig, pool_name: str, *, team: str | None = None, nodes: int | None = None) -> list[dict]:
    pools = {p.name: p for p in cfg.gpu_pools}
    if pool_name not in pools:
        raise ConfigError("POOL", f"no pool {pool_name!r} in stack {cfg.stack}; pools: {', '.join(pools) or 'none'}")
    pool = pools[pool_name]
    teams = {t.name: t for t in cfg.scheduler.teams}
    namespace = team or next(iter(teams), None)
    if namespace not in teams:
        raise ConfigError("--team", f"no team {namespace!r} in stack {cfg.stack}; teams: {', '.join(teams) or 'none'}")
    count = nodes or max(1, min(pool.max_size, 2))
    if not 1 <= count <= pool.max_size:
        raise ConfigError("--nodes", f"{count} is outside 1..{pool.max_size} (the pool's maxSize)")
    app = f"healthcheck-{pool.name}"
    objects: list[dict] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ACCOUNT},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": f"{ACCOUNT}-{namespace}"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACCOUNT},
         "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ACCOUNT, "namespace": namespace}, "data": {"node_check.py": PROGRAM.read_text()}},
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": app, "namespace": namespace},
            "spec": {
                "completions": count,
                "parallelism": count,
                "backoffLimit": 0,
                "ttlSecondsAfterFinished": 86400,
                "template": {"metadata": {"labels": {"app": app}}, "spec": _pod_spec(cfg, pool, app, ["python", "/code/node_check.py", "--label"], "check")},
            },
        },
    ]
    if count >= 2:
        team_spec = teams[namespace]
        worker = {"replicas": count, "restartPolicy": "Never", "template": {"metadata": {"labels": {"app": f"{app}-nccl"}},
                  "spec": _pod_spec(cfg, pool, f"{app}-nccl", ["torchrun", "/code/node_check.py", "--allreduce"], "pytorch")}}
        objects.append({
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": f"{app}-nccl", "namespace": namespace},
            "spec": {
                "nprocPerNode": str(pool.gpus_per_node),
                "runPolicy": {"schedulingPolicy": {"queue": team_spec.queue, "priorityClass": team_spec.priority_classes[0], "minAvailable": count}},
                "pytorchReplicaSpecs": {"Worker": worker},
            },
        })
    return objects

"""Example training jobs filled in for a stack: its pool, zone, queue, priority class, volume.

The templates in examples/ are plain YAML with ${placeholders}; what depends on the stack
(the training image, EFA interfaces, huge pages and environment, memory and /dev/shm - see
infra/cli/pods.py -, the Lustre volume and the checkpoint sync sidecar) is added here, so the
templates stay readable. `higgsfield jobs render NAME --stack STACK` prints the
result for `kubectl apply -f -`; `higgsfield plan --manifests` writes them too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from string import Template
from typing import Any

import yaml

from components.storage import DATASET_CLAIM, DATASET_MOUNT, MOUNT_PATH, PVC_NAME
from infra import versions
from infra.cli.pods import check_image, prepare_gpu_pod, stack_image
from infra.config import ConfigError, GpuPool, StackConfig, Team

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLES = ("pytorch-ddp", "pytorch-elastic", "mpi-nccl-tests")
TRAIN_SCRIPT = "train_ddp.py"


def _pick_pool(cfg: StackConfig, name: str | None, efa_first: bool) -> GpuPool:
    if not cfg.gpu_pools:
        raise ConfigError("higgsfield:gpuPools", f"stack {cfg.stack} has no GPU pool to run a job on")
    if name is not None:
        found = [p for p in cfg.gpu_pools if p.name == name]
        if not found:
            raise ConfigError("--pool", f"no pool {name!r} in stack {cfg.stack}; pools: {', '.join(p.name for p in cfg.gpu_pools)}")
        return found[0]
    ranked = sorted(cfg.gpu_pools, key=lambda p: (not p.efa if efa_first else False, p.capacity_type != "on-demand"))
    return ranked[0]


def _pick_team(cfg: StackConfig, name: str | None) -> Team:
    teams = cfg.scheduler.teams
    if not teams:
        raise ConfigError("higgsfield:scheduler.teams", f"stack {cfg.stack} has no team namespace to submit to")
    if name is None:
        return teams[0]
    found = [t for t in teams if t.name == name]
    if not found:
        raise ConfigError("--team", f"no team {name!r} in stack {cfg.stack}; teams: {', '.join(t.name for t in teams)}")
    return found[0]


def examples_for(cfg: StackConfig) -> list[str]:
    """The examples a stack can run: none without GPU pools or teams, the NCCL test only with EFA."""
    if not (cfg.gpu_pools and cfg.scheduler.teams):
        return []
    return [e for e in EXAMPLES if e != "mpi-nccl-tests" or any(p.efa for p in cfg.gpu_pools)]


def pod_templates(job: dict, named: bool = False) -> Iterator:
    """Every replica's pod template of a Kubeflow job (with `named`: (replica key, template))."""
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs", "tfReplicaSpecs", "xgbReplicaSpecs"):
        for replica, spec in (job.get("spec", {}).get(key) or {}).items():
            yield (f"spec.{key}.{replica}.template.spec", spec["template"]) if named else spec["template"]


def _on_gpu_pool(template: dict) -> bool:
    return "higgsfield.io/pool" in (template["spec"].get("nodeSelector") or {})


def _attach_lustre(template: dict, job_name: str) -> None:
    """Mount the team's `shared-data` claim at /fsx and copy checkpoints there from local NVMe
    with a native sidecar (an init container that keeps running and stops with the pod)."""
    spec = template["spec"]
    spec["volumes"].append({"name": "shared", "persistentVolumeClaim": {"claimName": PVC_NAME}})
    main = spec["containers"][0]
    main["volumeMounts"].append({"name": "shared", "mountPath": MOUNT_PATH})
    main["env"].append({"name": "CHECKPOINT_SYNC_DIR", "value": f"{MOUNT_PATH}/checkpoints/{job_name}"})
    target = f"{MOUNT_PATH}/checkpoints/{job_name}"
    spec.setdefault("initContainers", []).append(
        {
            "name": "checkpoint-sync",
            "image": versions.EXAMPLE_SYNC_IMAGE,
            "restartPolicy": "Always",
            "command": ["sh", "-c", f"mkdir -p {target}; while true; do cp -u /local/checkpoints/*.pt {target}/ 2>/dev/null; sleep 60; done"],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            "volumeMounts": [{"name": "local", "mountPath": "/local"}, {"name": "shared", "mountPath": MOUNT_PATH}],
        }
    )


def run_as_team(template: dict, team: Team) -> None:
    """The identity the team's admission policy requires (its UID/GID on every pod, files on
    Lustre owned by it) and, per container, what Pod Security `restricted` asks. Every pod
    template rendered into a team namespace needs it (the health check's too)."""
    spec = template["spec"]
    spec["securityContext"] = {
        "runAsUser": team.uid, "runAsGroup": team.uid, "fsGroup": team.uid, "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _attach_datasets(template: dict, cfg: StackConfig, team: Team) -> None:
    """The shared datasets the team may use, read-only unless it owns them."""
    spec, main = template["spec"], template["spec"]["containers"][0]
    for dataset in cfg.fsx.datasets:
        if team.name != dataset.owner and team.name not in dataset.readers:
            continue
        volume = f"dataset-{dataset.name}"
        spec["volumes"].append({"name": volume, "persistentVolumeClaim": {"claimName": DATASET_CLAIM.format(name=dataset.name), "readOnly": team.name != dataset.owner}})
        main["volumeMounts"].append({"name": volume, "mountPath": DATASET_MOUNT.format(name=dataset.name), "readOnly": team.name != dataset.owner})


def render(example: str, cfg: StackConfig, *, pool: str | None = None, team: str | None = None, workers: int = 2,
           image: str | None = None) -> list[dict]:
    """The Kubernetes objects of `example` for stack `cfg`: the job, and the script's ConfigMap.
    Every pod runs `image` (default: the stack's training image)."""
    if example not in EXAMPLES:
        raise ConfigError("EXAMPLE", f"unknown example {example!r}; examples: {', '.join(EXAMPLES)}")
    chosen = _pick_pool(cfg, pool, efa_first=example == "mpi-nccl-tests")
    member = _pick_team(cfg, team)
    if example == "mpi-nccl-tests" and not chosen.efa:
        raise ConfigError("--pool", f"pool {chosen.name} has no EFA; the NCCL test is for EFA pools")
    if image is not None:
        check_image(cfg, chosen, image)
    image = image or stack_image(cfg)
    name = f"{example}-{chosen.name}"
    values = {
        "name": name,
        "namespace": member.name,
        "queue": member.queue,
        "priority_class": member.priority_classes[0],
        "pool": chosen.name,
        "zone": chosen.availability_zone,
        "gpus": chosen.gpus_per_node,
        "workers": workers,
        "replicas": workers + 1,
        "total_gpus": workers * chosen.gpus_per_node,
        "min_replicas": max(1, workers // 2),
        "max_replicas": max(workers, chosen.max_size),
        "image": image,
    }
    text = Template((EXAMPLES_DIR / f"{example}.yaml").read_text()).substitute(values)
    job = json.loads(json.dumps(yaml.safe_load(text)))  # one independent copy per replica (YAML anchors share)
    for replica, template in pod_templates(job, named=True):
        if not _on_gpu_pool(template):
            continue
        prepare_gpu_pod(template["spec"], chosen, image, f"examples/{example}.yaml {replica}")
        if cfg.fsx.enabled and example != "mpi-nccl-tests":
            _attach_lustre(template, name)
            _attach_datasets(template, cfg, member)
    for template in pod_templates(job):
        run_as_team(template, member)
    objects: list[dict[str, Any]] = [job]
    if example.startswith("pytorch"):
        objects.insert(0, {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-code", "namespace": member.name},
            "data": {TRAIN_SCRIPT: (EXAMPLES_DIR / TRAIN_SCRIPT).read_text()},
        })
    return objects


def to_yaml(objects: list[dict]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)

"""Example training jobs filled in for a stack: its pool, zone, queue, priority class, volume.

The templates in examples/ are plain YAML with ${placeholders}; what depends on the stack
(the training image, EFA interfaces, huge pages and environment, memory and /dev/shm - see
infra/cli/pods.py -, the Lustre volume, and the checkpoint settings and grace period of
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
from datetime import timedelta
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, LiteralScalarString

from components.karpenter import DO_NOT_DISRUPT
from components.storage import DATASET_CLAIM, DATASET_MOUNT, MOUNT_PATH, PVC_NAME
from infra.cli.pods import check_image, prepare_gpu_pod, stack_image
from infra.config import ConfigError, GpuPool, StackConfig, Team

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLES = ("pytorch-ddp", "pytorch-elastic", "mpi-nccl-tests")
TRAIN_SCRIPT = "train_ddp.py"
CHECKPOINT_MODULE = "checkpointing.py"  # ships next to the script in its ConfigMap
LOCAL_CHECKPOINTS = "/local/checkpoints"  # the emptyDir on the node's RAID0 NVMe
# The Capacity Block notice comes this much before the flush must start (the drain's SIGTERM):
# a checkpoint while the block still runs, so the drain's final one has little left to do.
NOTICE_MARGIN_S = 5 * 60


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
            raise ConfigError("--team", f"team {team.name} cannot write dataset {dataset.name} (owner {dataset.owner}), the directory higgsfield:fsx.s3 exports; "
                              "submit as its owner or turn off higgsfield:checkpoints.exportToS3")
        return f"{DATASET_MOUNT.format(name=dataset.name)}/checkpoints/{team.name}/{job_name}"
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


def _checkpoint(template: dict, cfg: StackConfig, pool: GpuPool, team: Team, job_name: str) -> None:
    """The checkpoint settings, and a grace period long enough for the final flush on SIGTERM
    (Kubernetes' default of 30 s is not: higgsfield:checkpoints.terminationGracePeriod)."""
    spec, main = template["spec"], template["spec"]["containers"][0]
    spec["terminationGracePeriodSeconds"] = cfg.checkpoints.grace_seconds
    values = checkpoint_env(cfg, pool, team, job_name)
    main["env"] = [e for e in main.get("env", []) if e["name"] not in values] + [{"name": k, "value": v} for k, v in values.items()]


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


# GPU pods per job of `workers` workers: DDP adds a master on the pool; the MPI launcher runs on
# the system nodes; an elastic job's `workers` is the most it grows to.
_GPU_PODS = {"pytorch-ddp": lambda w: w + 1, "pytorch-elastic": lambda w: w, "mpi-nccl-tests": lambda w: w}
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
        return self.most_workers if self.example == "pytorch-elastic" else min(DEFAULT_WORKERS, self.most_workers)

    def _exceeded(self, workers: int) -> str:
        return "; ".join(text for gpus, text in self.limits if self.gpus(workers) > gpus)

    def check(self, workers: int | None) -> int:
        """`workers`, or the default, if the job fits; else a ConfigError naming the limits."""
        if self.most_workers < 1:
            raise ConfigError("--workers" if workers is not None else "EXAMPLE", f"{self.example} needs at least {self.gpus(1)} GPUs ({self.pods(1)} pods x {self.gpus_per_node}), "
                              f"more than {self._exceeded(1)}: no size of it fits")
        if workers is None:
            return self.default_workers
        if workers < 1:
            raise ConfigError("--workers", f"must be at least 1, got {workers}")
        if workers > self.most_workers:
            raise ConfigError("--workers", f"{workers} needs {self.gpus(workers)} GPUs ({self.pods(workers)} pods x {self.gpus_per_node}), "
                              f"more than {self._exceeded(workers)}; at most --workers {self.most_workers} fits")
        return workers


def fit(example: str, cfg: StackConfig, pool: GpuPool, team: Team) -> Fit:
    """The size limits of `example` on `pool` for `team`."""
    p, t = cfg.gpu_pools.index(pool), cfg.scheduler.teams.index(team)
    q, queue = next((i, x) for i, x in enumerate(cfg.scheduler.queues) if x.name == team.queue)
    return Fit(example, pool.gpus_per_node, (
        (pool.max_size * pool.gpus_per_node, f"pool {pool.name}'s {pool.max_size} nodes x {pool.gpus_per_node} GPUs (higgsfield:gpuPools[{p}].maxSize)"),
        (team.gpu_quota, f"team {team.name}'s quota of {team.gpu_quota} GPUs (higgsfield:scheduler.teams[{t}].gpuQuota)"),
        (queue.gpu_capability, f"queue {queue.name}'s capability of {queue.gpu_capability} GPUs (higgsfield:scheduler.queues[{q}].gpuCapability)"),
    ))


def fits(example: str, cfg: StackConfig, *, pool: str | None = None, team: str | None = None) -> bool:
    """Whether some size of `example` fits the pool (default pool) for the team (default team)."""
    chosen = _pick_pool(cfg, pool, efa_first=example == "mpi-nccl-tests")
    return fit(example, cfg, chosen, _pick_team(cfg, team)).most_workers >= 1


def _load(text: str) -> Any:
    """The template as a round-trip YAML document (comments kept). Replicas that share a pod
    template through a YAML alias get their own copy, so each can be filled in alone."""
    job = round_trip_yaml().load(text)
    seen: set[int] = set()
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs", "tfReplicaSpecs", "xgbReplicaSpecs"):
        for spec in (job.get("spec", {}).get(key) or {}).values():
            if id(spec["template"]) in seen:
                spec["template"] = copy.deepcopy(spec["template"])
            seen.add(id(spec["template"]))
    return job


def render(example: str, cfg: StackConfig, *, pool: str | None = None, team: str | None = None, workers: int | None = None,
           image: str | None = None) -> list[dict]:
    """The Kubernetes objects of `example` for stack `cfg`: the job, and the script's ConfigMap.
    Every pod runs `image` (default: the stack's training image); `workers` defaults to what fits."""
    if example not in EXAMPLES:
        raise ConfigError("EXAMPLE", f"unknown example {example!r}; examples: {', '.join(EXAMPLES)}")
    chosen = _pick_pool(cfg, pool, efa_first=example == "mpi-nccl-tests")
    member = _pick_team(cfg, team)
    if example == "mpi-nccl-tests" and not chosen.efa:
        raise ConfigError("--pool", f"pool {chosen.name} has no EFA; the NCCL test is for EFA pools")
    workers = fit(example, cfg, chosen, member).check(workers)
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
        "backoff_limit": 3 * max(workers + 1, chosen.max_size) + 1,
        "total_gpus": workers * chosen.gpus_per_node,
        "min_replicas": 1,  # elastic: starts with one worker, grows to `workers`
        "max_replicas": workers,
        "image": image,
    }
    job = _load(Template((EXAMPLES_DIR / f"{example}.yaml").read_text()).substitute(values))
    for replica, template in pod_templates(job, named=True):
        if not _on_gpu_pool(template):
            continue
        prepare_gpu_pod(template["spec"], chosen, image, f"examples/{example}.yaml {replica}")
        # Karpenter never voluntarily disrupts the node of a pod with this annotation (consolidation,
        # drift, expiry); harmless on node-group pools (components/karpenter.py, docs/karpenter.md)
        template.setdefault("metadata", {}).setdefault("annotations", {})[DO_NOT_DISRUPT] = "true"
        if cfg.fsx.enabled and example != "mpi-nccl-tests":
            _attach_lustre(template)
            _attach_datasets(template, cfg, member)
        if example.startswith("pytorch"):
            _checkpoint(template, cfg, chosen, member, name)
    for template in pod_templates(job):
        run_as_team(template, member)
    objects: list[dict[str, Any]] = [job]
    if example.startswith("pytorch"):
        objects.insert(0, {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-code", "namespace": member.name},
            "data": {f: (EXAMPLES_DIR / f).read_text() for f in (TRAIN_SCRIPT, CHECKPOINT_MODULE)},
        })
    return objects


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

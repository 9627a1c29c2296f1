"""What a pod on a GPU pool needs, for every rendered job (examples and health check): the stack's
training image, and on EFA pools every EFA interface, the anchors' huge pages (none on a Karpenter
pool, where libfabric is told not to use them) and the EFA environment; a memory limit the node can
hold and a /dev/shm within it. Bad combinations are rejected here, naming the setting or template
key, before anything is printed."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

from components.cpu_nodes import ON_TEAM_CPU_NODES
from components.efa import (
    EFA_LOCKED_MEMORY_BYTES,
    EFA_WITHOUT_HUGE_PAGES_ENV,
    efa_environment,
    efa_pod_resources,
    efa_resources,
    expected_bus_bandwidth_gb_s,
)
from components.registry import UNKNOWN_TAG, image_tag, repository_name
from components.tenancy import OPERATOR_INITS
from infra.config import IMAGE_REFERENCE, NAMESPACE, ConfigError, GpuPool, StackConfig, Team
from infra.core.names import EFA_RESOURCE as EFA
from infra.core.names import GPU_RESOURCE
from infra.core.names import HUGEPAGES_RESOURCE as HUGEPAGES

# A pod that has a node to itself may take this share of the node's memory: the rest is the
# kubelet's reservation, eviction threshold and the node-level daemons.
NODE_MEMORY_SHARE = 0.75
SHM_SHARE = 0.5  # /dev/shm (memory-backed, counted against the limit) gets half the memory limit


def mebibytes(quantity: str | int) -> float:
    """A Kubernetes memory quantity (`5120Mi`, `64Gi`, `1G`, bytes) in MiB (binary and decimal
    suffixes of k8s.io/apimachinery resource.Quantity; the Kubernetes Python client that parses
    them would be a large dependency for these lines)."""
    text = str(quantity)
    units = {
        "Ki": 1 / 1024,
        "Mi": 1,
        "Gi": 1024,
        "Ti": 1024**2,
        "k": 1000 / 2**20,
        "M": 1e6 / 2**20,
        "G": 1e9 / 2**20,
        "T": 1e12 / 2**20,
    }
    for suffix, factor in units.items():
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).isdigit():
            return float(text[: -len(suffix)]) * factor
    return float(text) / 2**20


UNKNOWN_ACCOUNT = "<account>"


def stack_account(cfg: StackConfig) -> str | None:
    """The stack's AWS account, offline: higgsfield:delivery.accountId, else the one account its
    admins' ARNs name; None when neither says (no delivery, no admins, or admins of several accounts)."""
    if cfg.delivery is not None:
        return cfg.delivery.account_id
    accounts = {arn.split(":")[4] for arn in cfg.admins if arn.count(":") >= 5}
    return accounts.pop() if len(accounts) == 1 else None


def stack_repository(cfg: StackConfig) -> str:
    """The stack's ECR repository (`pulumi stack output trainingImage` after deploy), offline:
    account from stack_account (`<account>` when unknown), region from the stack file."""
    return f"{stack_account(cfg) or UNKNOWN_ACCOUNT}.dkr.ecr.{cfg.region}.amazonaws.com/{repository_name(cfg.name)}"


def stack_image(cfg: StackConfig, tag: str | None = None) -> str:
    """The image jobs of the stack run: the stack's `trainingImage` setting (a team's own
    EFA-ready image), else the image the workflow built from the project's image sources."""
    return cfg.training_image or f"{stack_repository(cfg)}:{tag or image_tag()}"


def default_image(cfg: StackConfig) -> str:
    """stack_image for a pod a user applies: refused when the stack names no account, since
    `<account>.dkr.ecr...` is no registry a node can pull from."""
    if cfg.training_image:
        return cfg.training_image
    if stack_account(cfg) is None:
        raise ConfigError(
            f"{NAMESPACE}:admins",
            "names no AWS account (none set, or ARNs of several accounts; nor is higgsfield:delivery.accountId set), "
            "so the training image's "
            f"registry ({UNKNOWN_ACCOUNT}.dkr.ecr.{cfg.region}.amazonaws.com) is unknown: add the cluster admins' ARNs "
            "(higgsfield init --admin ARN), or set higgsfield:trainingImage, or pass --image",
        )
    tag = image_tag()
    if tag == UNKNOWN_TAG:
        raise ConfigError(
            "images/training",
            "not found (neither the project's nor the installed package's), and the training image's tag is their "
            "content hash: restore them, or set higgsfield:trainingImage, or pass --image",
        )
    return stack_image(cfg, tag)


def _repository_of(image: str) -> str:
    name = image.split("@", 1)[0]
    return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name


def check_image(cfg: StackConfig, pool: GpuPool, image: str, key: str = "--image") -> None:
    """On an EFA pool only an EFA-ready image may run: one from the stack's repository, or the
    stack's own `trainingImage`. Stock PyTorch images have no EFA provider and no aws-ofi-nccl,
    and NCCL silently falls back to TCP with them."""
    if not image.strip():
        raise ConfigError(key, "is empty")
    if len(image) > 512 or not re.fullmatch(IMAGE_REFERENCE, image):  # a value, never YAML structure
        shown = repr(image) if len(image) <= 80 else f"{image[:80]!r}... ({len(image):,} characters)"
        raise ConfigError(
            key,
            f"{shown} is not an image reference with a tag or digest (registry/repository:tag or "
            "registry/repository@sha256:..., "
            "e.g. docker.io/library/busybox:1.36)",
        )
    if not pool.efa:
        return
    allowed = {stack_repository(cfg)}
    if cfg.training_image:
        allowed.add(_repository_of(cfg.training_image))
    if _repository_of(image) not in allowed:
        raise ConfigError(
            key,
            f"{image!r} is not an EFA-ready image for EFA pool {pool.name}: use an image of "
            f"{' or '.join(sorted(allowed))} "
            "(built from images/training/Dockerfile), or declare your own EFA-ready image as higgsfield:trainingImage",
        )


def run_as_team(template: dict, team: Team) -> None:
    """The identity the team's admission policy requires (its UID/GID on every pod, files on
    Lustre owned by it) and, per container, what Pod Security `restricted` asks. Every pod
    template rendered into a team namespace needs it (the health check's too)."""
    spec = template["spec"]
    spec["securityContext"] = {
        "runAsUser": team.uid,
        "runAsGroup": team.uid,
        "fsGroup": team.uid,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def request_in_full(template: dict, team: Team) -> None:
    """Each container of a Kubeflow job's pod template requests what its pod will ask, so the gang its queue
    admits counts it: the operator sizes the PodGroup's minResources from the containers' requests, or a
    container's limits where it has no requests, and counts a container naming no CPU at nothing
    (CalcPGMinResources, AddResourceList, kubeflow/trainer:pkg/controller.v1/common/util.go@v1.9.4); the team
    policy refuses such a container (components/tenancy.py gang_validations). The values keep the pod as it is
    scheduled without them: every limit (the API server would request it: SetDefaults_Pod, kubernetes/kubernetes:
    pkg/apis/core/v1/defaults.go@v1.35.0; extended resources must request their limit), and the CPU and memory the
    namespace's LimitRange gives a container naming none (components/teams.py container_defaults), where the
    template names neither. No CPU limit: it would throttle the ranks."""
    for container in template["spec"]["containers"]:
        resources = container.setdefault("resources", {})
        requests = resources.setdefault("requests", {})
        for name, amount in (resources.get("limits") or {}).items():
            requests.setdefault(name, amount)
        requests.setdefault("cpu", f"{team.default_cpu_request_millicores}m")
        requests.setdefault("memory", f"{team.default_memory_request_mib}Mi")


def cores(quantity: str | int | float) -> float:
    """A Kubernetes CPU quantity (`500m`, `2`, `1.5`) in cores."""
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def gpus_of(pod: dict) -> int:
    """The GPUs a pod holds while it runs: what its containers and its sidecars (init containers that restart
    always) ask, each its limit or, where it states only that, its request (the API server fills a GPU's request
    from its limit, and the two are equal)."""
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    total = 0.0
    for container in [*(spec.get("containers") or []), *sidecars]:
        resources = container.get("resources") or {}
        wanted = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(
            GPU_RESOURCE
        )
        total += cores(wanted or 0)
    return int(total)


def request_the_operators_inits(job: dict) -> None:
    """Each replica of a Kubeflow job whose pod the operator gives an init container (components/tenancy.py
    OPERATOR_INITS: an MPIJob's Launcher, a PyTorchJob's Workers beside a Master) asks, in its first container, its
    requests named (request_in_full), at least what that init container asks, which the team policy requires: the
    pod asks that much whatever its containers do, and the gang counts the containers alone."""
    for init in OPERATOR_INITS:
        specs = (job.get("spec") or {}).get(init.replicas) or {}
        if job.get("kind") != init.kind or any(r not in specs for r in (*init.beside, init.replica)):
            continue
        requests = specs[init.replica]["template"]["spec"]["containers"][0]["resources"]["requests"]
        floor = init.requests
        if cores(requests["cpu"]) < floor["cpu"]:
            requests["cpu"] = f"{math.ceil(floor['cpu'] * 1000)}m"
        if mebibytes(requests["memory"]) * 2**20 < floor["memory"]:
            requests["memory"] = f"{math.ceil(floor['memory'] / 2**20)}Mi"


def merge_env(container: dict, values: dict[str, str]) -> None:
    """Set `values` in the container's env, replacing entries of the same names."""
    env = [e for e in container.get("env", []) if e["name"] not in values]
    container["env"] = env + [{"name": k, "value": v} for k, v in values.items()]


def _gi(mib: float) -> str:
    return f"{int(mib // 1024)}Gi"


def _check_fits(container: dict, pool: GpuPool, where: str) -> None:
    limits = (container.get("resources") or {}).get("limits") or {}
    if not pool.efa:
        for name in (EFA, HUGEPAGES):
            if name in limits:
                raise ConfigError(
                    f"{where}.resources.limits.{name}",
                    f"pool {pool.name} has no EFA (its setting efa is false), so its nodes offer no {name}",
                )
        return
    offer = efa_resources(pool.instance)
    if HUGEPAGES in limits and pool.provisioner == "karpenter":
        raise ConfigError(
            f"{where}.resources.limits.{HUGEPAGES}",
            f"pool {pool.name} is provisioned by Karpenter, which launches no node for a pod that "
            "asks for huge pages (its instance types offer none: aws/karpenter-provider-aws:"
            "pkg/providers/instancetype/types.go@v1.14.1 computeCapacity); remove the request (jobs "
            "there run with FI_EFA_USE_HUGE_PAGE=0)",
        )
    if EFA in limits and int(limits[EFA]) > int(offer[EFA]):
        raise ConfigError(
            f"{where}.resources.limits.{EFA}",
            f"{limits[EFA]} is more than the {offer[EFA]} EFA interfaces a {pool.instance.name} node offers",
        )
    if HUGEPAGES in limits and mebibytes(limits[HUGEPAGES]) > mebibytes(offer[HUGEPAGES]):
        raise ConfigError(
            f"{where}.resources.limits.{HUGEPAGES}",
            f"{limits[HUGEPAGES]} is more than the {offer[HUGEPAGES]} of huge pages a {pool.instance.name} node "
            "reserves",
        )


def tolerate_pool(spec: dict, pool: GpuPool) -> None:
    """Tolerate the pool's own taints (dedicated=research:NoSchedule, ...): the pod is for this pool."""
    tolerations = list(spec.get("tolerations") or [])
    for taint in pool.taints:
        toleration = {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
        if toleration not in tolerations:
            tolerations.append(toleration)
    spec["tolerations"] = tolerations


def on_team_cpu_nodes(spec: dict) -> None:
    """Place a pod without GPUs (an MPI job's launcher) on the teams' CPU nodes, the one place the team policy lets
    it run (components/tenancy.py): their label and taint in place of any pool's or GPU's; its other tolerations
    (a lost node's NoExecute taints) kept."""
    spec["nodeSelector"] = dict(ON_TEAM_CPU_NODES["nodeSelector"])
    kept = [t for t in spec.get("tolerations") or [] if t.get("effect") == "NoExecute"]
    spec["tolerations"] = [*ON_TEAM_CPU_NODES["tolerations"], *kept]


def prepare_gpu_pod(spec: dict, pool: GpuPool, image: str, where: str, efa: bool = True) -> None:
    """Fill in the pod spec of a one-pod-per-node job on `pool` (its main container is the
    first): the image, tolerations of the pool's own taints, EFA resources and environment on
    EFA pools (unless `efa` is false: an image without the EFA provider), memory and /dev/shm.
    Idempotent (replicas may share one template)."""
    containers = spec["containers"]
    for i, container in enumerate(containers):
        _check_fits(container, pool, f"{where}.containers[{i}]")
    main = containers[0]
    main["image"] = image
    tolerate_pool(spec, pool)
    limits = main.setdefault("resources", {}).setdefault("limits", {})
    if pool.efa and efa:
        karpenter = pool.provisioner == "karpenter"  # no huge pages there (EFA_WITHOUT_HUGE_PAGES_ENV)
        for name, amount in efa_pod_resources(pool.instance).items():
            if not (karpenter and name == HUGEPAGES):
                limits.setdefault(name, amount)
        # the locked memory the node gives containers, which the launcher checks (examples/checkpointing.py)
        merge_env(
            main,
            {
                **efa_environment(pool.instance),
                **(EFA_WITHOUT_HUGE_PAGES_ENV if karpenter else {}),
                "MIN_LOCKED_MEMORY_BYTES": str(EFA_LOCKED_MEMORY_BYTES),
            },
        )
    node_mib = pool.instance.memory_mib or 64 * 1024
    memory = mebibytes(limits.setdefault("memory", _gi(node_mib * NODE_MEMORY_SHARE)))
    if memory > node_mib:
        raise ConfigError(
            f"{where}.containers[0].resources.limits.memory",
            f"{limits['memory']} is more than a {pool.instance.name} node's {_gi(node_mib)}",
        )
    shm = {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": _gi(memory * SHM_SHARE)}}
    spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] != "shm"] + [shm]
    mounts = [m for m in main.get("volumeMounts", []) if m["mountPath"] != "/dev/shm"]
    main["volumeMounts"] = mounts + [{"name": "shm", "mountPath": "/dev/shm"}]


def efa_containers(objects: list[dict]) -> Iterator[tuple[dict, dict]]:
    """(pod spec, container) of every container in `objects` that requests EFA interfaces."""
    for obj in objects:
        for spec in _pod_specs(obj):
            for container in spec.get("containers", []):
                if EFA in ((container.get("resources") or {}).get("limits") or {}):
                    yield spec, container


def _pod_specs(obj: dict) -> Iterator[dict]:
    spec = obj.get("spec") or {}
    if "template" in spec:
        yield spec["template"]["spec"]
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs", "tfReplicaSpecs", "xgbReplicaSpecs"):
        for replica in (spec.get(key) or {}).values():
            yield replica["template"]["spec"]


def bus_bandwidth_threshold(cfg: StackConfig, pool: GpuPool) -> float:
    """EFA pools: the instance type's expected all-reduce bus bandwidth (cited table or a
    fraction of line rate); other pools: the stack's observability.healthcheck threshold."""
    return (
        expected_bus_bandwidth_gb_s(pool.instance)[0] if pool.efa else cfg.observability.health.min_bus_bandwidth_gb_s
    )

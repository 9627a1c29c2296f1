"""What `check` refuses because the first real day would fail, not because a policy says so:
a health gate whose image cannot exist at deploy, autoscaler limits that freeze the cluster on its
largest gang, and example jobs that promise a resume the stack cannot give. Each finding is
(policy, message), the message starting with the setting to change.
"""

from __future__ import annotations

import math

from components.autoscaler import unready_limits
from infra.config import StackConfig

# Images that exist but hold no health gate (images/training/health_gate.py): the stock framework
# images (infra/config/stack.py NOT_EFA_READY and NVIDIA's NGC PyTorch).
NOT_GATE_IMAGES = (
    "pytorch/pytorch",
    "docker.io/pytorch/pytorch",
    "index.docker.io/pytorch/pytorch",
    "nvcr.io/nvidia/pytorch",
)


def gate_image_findings(cfg: StackConfig) -> list[tuple[str, str]]:
    """The health gate of a gated pool must run an image that exists when the first GPU node joins."""
    from infra.offline import image
    from infra.offline.pods import _repository_of

    if not any(p.health_gate.enabled for p in cfg.gpu_pools):
        return []
    gate, _ = image.gate_image(cfg)
    key = "higgsfield:healthGateImage"
    if cfg.health_gate_image is None and gate.endswith(":" + image.UNKNOWN_TAG):
        return [
            (
                "gate-image-exists",
                f"{key}: unset, and no images/training is found (neither the project's nor the installed "
                "package's), "
                f"so the gate's image {gate} names no image and every GPU node would keep its startup taint; set "
                f"{key} to an image built "
                f"from images/training (`higgsfield image push {cfg.stack}` prints its digest), or restore the "
                "image sources",
            )
        ]
    if _repository_of(gate) in NOT_GATE_IMAGES:
        return [
            (
                "gate-image-exists",
                f"{key}: {gate} has no health gate in it (images/training/health_gate.py); use an image built from "
                "images/training",
            )
        ]
    return []


def autoscaler_findings(cfg: StackConfig) -> list[tuple[str, str]]:
    """The autoscaler's unready limits against the stack's pools (components/autoscaler.py)."""
    settings = cfg.autoscaler
    limits = unready_limits(settings, cfg.gpu_pools, cfg.scheduler.queues)
    found = []
    if settings.max_node_startup_time is not None and limits.max_node_startup_s < limits.slowest_s:
        found.append(
            (
                "autoscaler-unready-limits",
                f"higgsfield:autoscaler.maxNodeStartupTime: {settings.max_node_startup_time} is shorter than pool "
                f"{limits.slowest_pool}'s bootTime + healthGate.timeout ({math.ceil(limits.slowest_s / 60)}m): its "
                "nodes would count as unready "
                "while still in the gate; unset it (computed) or raise it",
            )
        )
    if limits.halts_with_gang_unready(cfg.cpu_nodes.min_size):
        gang = limits.gang
        key = "okTotalUnreadyCount" if settings.ok_total_unready_count is not None else "maxTotalUnreadyPercentage"
        found.append(
            (
                "autoscaler-unready-limits",
                f"higgsfield:autoscaler.{key}: the largest gang ({gang.nodes} nodes, {gang.why}) unready at once is "
                "more than "
                f"--ok-total-unready-count {limits.ok_total_unready_count} and "
                f"{limits.max_total_unready_percentage:g}% of the "
                f"{gang.nodes + cfg.cpu_nodes.min_size} nodes: the autoscaler would stop scaling the whole cluster "
                "(IsClusterHealthy); "
                f"use at least {gang.nodes} or unset it (computed)",
            )
        )
    return found


def resume_findings(cfg: StackConfig, examples: dict | None = None) -> list[tuple[str, str]]:
    """No shipped example, rendered as `jobs render` renders it by default, promises a resume the
    stack cannot give; one the renderer refuses is reported by validate_manifests (example-jobs-fit).
    `examples`: jobs.render_examples(cfg), when the caller has it already."""
    from infra.offline import jobs

    found = []
    for example, rendered in (jobs.render_examples(cfg) if examples is None else examples).items():
        for obj in [] if isinstance(rendered, Exception) else rendered:
            promise = jobs.resume_promise(obj, cfg) if obj.get("kind") != "ConfigMap" else None
            if promise:
                found.append(("jobs-resume-real", f"higgsfield:fsx.enabled: examples/{example}.yaml: {promise}"))
    return found


def driver_findings(cfg: StackConfig) -> list[tuple[str, str]]:
    """A pinned AMI release whose driver (where infra/core/versions.py knows it) is older than the
    image's CUDA needs: every node of every pool would fail the gate's driver check."""
    from infra.core import versions

    driver = versions.nvidia_driver_of_release(cfg.node_release_version)
    cuda = cfg.cuda_version or versions.TRAINING_IMAGE_CUDA
    needed = versions.CUDA_MIN_DRIVER_BRANCH[cuda]
    if driver and int(driver.split(".")[0]) < needed:
        return [
            (
                "driver-fits-cuda",
                f"higgsfield:nodeReleaseVersion: {cfg.node_release_version} ships NVIDIA driver {driver}, older than "
                f"the {needed} "
                f"CUDA {cuda} needs (higgsfield:cudaVersion / the training image): every GPU node would fail its "
                "health gate; pin a newer release",
            )
        ]
    return []


def findings(cfg: StackConfig, examples: dict | None = None) -> list[tuple[str, str]]:
    """`examples`: jobs.render_examples(cfg), when the caller has it already."""
    return gate_image_findings(cfg) + autoscaler_findings(cfg) + resume_findings(cfg, examples) + driver_findings(cfg)

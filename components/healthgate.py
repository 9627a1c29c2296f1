"""The health gate on node join: no job lands on a GPU node before the node has passed its checks.

Every GPU node of a gated pool joins with STARTUP_TAINT (components/gpu_pools.py puts it on the
node group and into the autoscaler's node template). The Cluster Autoscaler drops taints with the
prefix `startup-taint.cluster-autoscaler.kubernetes.io/` from the template node it plans a scale-up
with (SanitizeTaints, kubernetes/autoscaler:cluster-autoscaler/utils/taints/taints.go and its
caller createSanitizedNode in simulator/node_info_utils.go@cluster-autoscaler-1.35.0), so a pending
job that does not tolerate the gate still scales a pool up from zero; and it counts a node that
still has the taint as not ready yet (FilterOutNodesWithStartupTaints, same file; called from
core/static_autoscaler.go), so it does not add more nodes for pods that are waiting for the gate.

The gate itself is a DaemonSet per gated pool, on its nodes until they pass, tolerating every taint
and requesting every GPU of the node from the device plugin (none on Karpenter pools: gate_gpus;
docs/design/health-gate.md), running images/training/health_gate.py in an image built from images/training (higgsfield:
healthGateImage, else the stack's ECR image at the project's source tag, which `higgsfield
bootstrap` has pushed before the first GPU node joins: docs/training-image.md): it runs images/training/node_check.py
and on a pass removes the taint and labels the node `higgsfield.io/health=healthy`; on a fail it
keeps the taint, labels it `unhealthy` with the failed check, records an Event, and for pools
with `healthGate.onFailure: replace` marks the instance Unhealthy in its Auto Scaling group. The
driver rule: at least the driver the image's CUDA needs, the same as the pool's healthy nodes on the
same AMI, exactly the pinned AMI release's where known (node_check.report_driver). How long a node may
stay in the gate before the autoscaler counts it unready: components/autoscaler.py unready_limits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi

from components.device_plugins import EVERY_TAINT, GPU_NODES
from components.efa import EFA_LOCKED_MEMORY_BYTES, efa_count, efa_interfaces_for
from components.gpu_pools import GATED_LABEL, HEALTH_LABEL, POOL_LABEL
from components.identity import pod_identity
from components.kubernetes_objects import (
    KubernetesObject,
    deny_binding,
    preview_reads,
    role_and_binding,
    service_account_subject,
)
from components.node_admission import FIXED_NODE_FIELDS_MESSAGE, fixed_node_fields_unchanged
from components.storage import HEALTH_CLAIM, MOUNT_PATH
from infra.config import STARTUP_TAINT_KEY, GpuPool, HealthThresholds, seconds_of
from infra.core import versions
from infra.core.names import HEALTH_LABEL as HEALTH_LABEL_PREFIX
from infra.core.names import HEALTH_NAMESPACE as NAMESPACE
from infra.core.names import NODE_NAME_EXTRA

SERVICE_ACCOUNT = "health-gate"
GATE_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
# GATED_LABEL is on every node of a gated pool (components/gpu_pools.py): the DaemonSet selects on
# it, so adding a pool adds its ConfigMap and changes nothing else.


def expectations_name(pool: str) -> str:
    """The ConfigMap with a pool's expectations, read by the gate through the API."""
    return f"health-gate-{pool}"


# The node a pod-bound service account token was issued for, in the user's extra info: the key is
# serviceaccount.NodeNameKey (kubernetes/kubernetes: staging/src/k8s.io/apiserver/pkg/authentication/
# serviceaccount/util.go); the kubelet-issued token carries it with ServiceAccountTokenPodNodeInfo,
# beta and on by default in 1.30, GA and locked on in 1.32 (pkg/features/versioned_kube_features.go;
# KEP-4193 "bound service account token improvements") - every Kubernetes version this project
# supports (infra/core/versions.py KUBERNETES_SUPPORTED starts at 1.32).
# An Event about a Node (cluster-scoped: no involvedObject.namespace) must live in `default`
# (legacyValidateEvent, kubernetes/kubernetes: pkg/apis/core/validation/events.go): the gate may
# create Events there and nowhere else.
EVENTS_NAMESPACE = "default"


@dataclass(frozen=True, kw_only=True)
class HealthGateArgs:
    cluster_name: str
    region: str
    pools: Sequence[GpuPool]  # the gated pools (healthGate.enabled)
    thresholds: HealthThresholds
    lustre: bool  # the stack has FSx: the gate checks it through HEALTH_CLAIM
    image: pulumi.Input[str]
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]
    tags: Mapping[str, str]
    cuda: str = versions.TRAINING_IMAGE_CUDA  # what the image's CUDA needs of the driver (higgsfield:cudaVersion)
    node_release: str | None = None  # higgsfield:nodeReleaseVersion: its driver, where known
    prepull_image: str | None = None  # higgsfield:trainingImage: pulled by an init container during the gate


# DCGM's diagnostics (`dcgmi diag -r LEVEL`), run by the gate pod's DCGM container (dcgm_container):
# at a node's join level 1 (deployment checks, seconds: fits the gate's timeout); on a re-check the
# watchdog or the pre-flight asked for (the node labelled `recheck`, images/training/health_gate.py)
# level 2, which adds the short hardware plugins (PCIe, memory, about two minutes). Level 3 (the
# hardware stress tests, "~ 15 minutes" by dcgmi's own help for -r, NVIDIA/DCGM:dcgmi/
# CommandLineParser.cpp@v4.5.3, longer on eight GPUs) would hold every new node out of service that
# long, so the gate never asks for it: an operator runs it on demand on a named node, a one-off Job
# beside the same DCGM container (`higgsfield healthcheck dcgm`, infra/offline/healthcheck.py).
DCGM_DIAG_LEVEL_AT_JOIN = 1
DCGM_DIAG_LEVEL_RECHECK = 2
# The directory the gate's check and its DCGM container share (node_check.py dcgm_by_container).
DCGM_EXCHANGE = "/run/higgsfield-dcgm"


def expectations(
    pool: GpuPool,
    thresholds: HealthThresholds,
    lustre: bool,
    cuda: str = versions.TRAINING_IMAGE_CUDA,
    release: str | None = None,
) -> dict[str, str]:
    """What node_check.py expects of a node of `pool` (its environment variables), and how the
    gate reacts to a failure there. The driver: at least the branch CUDA `cuda` needs, and exactly
    the driver of the AMI `release` where the stack pins one we know (infra/core/versions.py)."""
    return {
        "EXPECTED_GPUS": str(pool.gpus_per_node),
        "EXPECTED_GPU_MODEL": pool.instance.gpu_model or "",
        "MIN_DRIVER_BRANCH": str(versions.CUDA_MIN_DRIVER_BRANCH[cuda]),
        "EXPECTED_DRIVER_VERSION": versions.nvidia_driver_of_release(release) or "",
        "EXPECTED_EFA_DEVICES": str(efa_count(efa_interfaces_for(pool.instance)) if pool.efa else 0),
        "MIN_LOCKED_MEMORY_BYTES": str(EFA_LOCKED_MEMORY_BYTES if pool.efa else 0),
        "MIN_MATMUL_FRACTION": str(thresholds.min_matmul_fraction),
        "MIN_MEMORY_BANDWIDTH_FRACTION": str(thresholds.min_memory_bandwidth_fraction),
        "MIN_LUSTRE_MBPS": str(thresholds.min_lustre_mb_s),
        "MIN_BUS_BANDWIDTH_GBPS": str(thresholds.min_bus_bandwidth_gb_s),
        "LUSTRE_PATH": MOUNT_PATH if lustre else "",
        "ON_FAILURE": on_failure(pool),
        "CHECK_TIMEOUT_SECONDS": str(seconds_of(pool.health_gate.timeout)),
        # the gate runs privileged: the kernel log's XIDs must be readable (node_check.py report_xids)
        "REQUIRE_KERNEL_LOG": "1",
        # DCGM diagnostics by the gate pod's DCGM container, deeper on a re-check (docs/design/health-gate.md)
        "DCGM_DIAG_LEVEL": str(DCGM_DIAG_LEVEL_AT_JOIN),
        "DCGM_DIAG_LEVEL_RECHECK": str(DCGM_DIAG_LEVEL_RECHECK),
    }


def on_failure(pool: GpuPool) -> str:
    """What the gate does with a node of `pool` that fails: the pool's healthGate.onFailure; on a
    Karpenter pool always `replace`, which there deletes the node's NodeClaim (images/training/
    health_gate.py nodeclaim_of says why a kept node would hold the gang and be billed for ever;
    the config refuses `keep` there)."""
    return "replace" if pool.provisioner == "karpenter" else pool.health_gate.on_failure


def gate_role_rules(karpenter: bool = False) -> list[dict]:
    """Read and patch nodes (its own only: the admission policy), list them (its pool's healthy
    nodes' drivers, by label selector); with Karpenter pools also delete NodeClaims (its own node's
    only: own_nodeclaim_policy). Nothing else cluster-wide."""
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]
    if karpenter:
        rules.append({"apiGroups": [NODECLAIM_GROUP], "resources": ["nodeclaims"], "verbs": ["delete"]})
    return rules


# Karpenter's NodeClaim API group (the v1 CRD karpenter.sh_nodeclaims.yaml, aws/karpenter-provider-aws
# @v1.14.1); status.nodeName is the node it launched.
NODECLAIM_GROUP = "karpenter.sh"


def own_nodeclaim_policy() -> dict:
    """A ValidatingAdmissionPolicy: the gate's account may delete only the NodeClaim of the node its
    pod runs on (the request's oldObject is the NodeClaim being deleted)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "higgsfield-health-gate-own-nodeclaim"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [NODECLAIM_GROUP],
                        "apiVersions": ["v1"],
                        "operations": ["DELETE"],
                        "resources": ["nodeclaims"],
                    }
                ]
            },
            "matchConditions": [
                {"name": "health-gate-only", "expression": f"request.userInfo.username == '{GATE_USER}'"}
            ],
            "validations": [
                {
                    "expression": f"has(request.userInfo.extra) && '{NODE_NAME_EXTRA}' in request.userInfo.extra && "
                    "has(oldObject.status) && has(oldObject.status.nodeName) && "
                    f"request.userInfo.extra['{NODE_NAME_EXTRA}'] == [oldObject.status.nodeName]",
                    "message": "the health gate may delete only the NodeClaim of the node its pod runs on",
                    "reason": "Forbidden",
                }
            ],
        },
    }


def own_node_policy() -> dict:
    """A ValidatingAdmissionPolicy: the gate's account may change only the node its pod runs on,
    and there only the startup taint and the `higgsfield.io/health*` labels."""
    old_taints = "(has(oldObject.spec.taints) ? oldObject.spec.taints : [])"
    new_taints = "(has(object.spec.taints) ? object.spec.taints : [])"
    old_labels = "(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})"
    new_labels = "(has(object.metadata.labels) ? object.metadata.labels : {})"
    others = f"!k.startsWith('{HEALTH_LABEL_PREFIX}')"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "higgsfield-health-gate-own-node"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
                ]
            },
            "matchConditions": [
                {"name": "health-gate-only", "expression": f"request.userInfo.username == '{GATE_USER}'"}
            ],
            "validations": [
                {
                    "expression": f"has(request.userInfo.extra) && '{NODE_NAME_EXTRA}' in request.userInfo.extra && "
                    f"request.userInfo.extra['{NODE_NAME_EXTRA}'] == [object.metadata.name]",
                    "message": "the health gate may change only the node its pod runs on",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"{new_taints}.filter(t, t.key != '{STARTUP_TAINT_KEY}') == {old_taints}.filter(t, "
                    f"t.key != '{STARTUP_TAINT_KEY}')",
                    "message": f"the health gate may add or remove only the taint {STARTUP_TAINT_KEY}",
                    "reason": "Forbidden",
                },
                {
                    # it removes the taint on a pass and puts it back, NoSchedule, on a failure or after a
                    # reboot (images/training/health_gate.py); NoExecute would evict every pod of the node
                    "expression": f"{new_taints}.filter(t, t.key == '{STARTUP_TAINT_KEY}').all(t, has(t.effect) && "
                    "t.effect == 'NoSchedule')",
                    "message": f"the health gate's taint {STARTUP_TAINT_KEY} is NoSchedule (never NoExecute)",
                    "reason": "Forbidden",
                },
                {
                    "expression": fixed_node_fields_unchanged(),
                    "message": "the health gate may change only its taint and health labels: not a node's "
                    f"{FIXED_NODE_FIELDS_MESSAGE}",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"{new_labels}.filter(k, {others}).all(k, k in {old_labels} && {old_labels}[k] == "
                    f"{new_labels}[k]) && "
                    f"{old_labels}.filter(k, {others}).all(k, k in {new_labels})",
                    "message": f"the health gate may change only the {HEALTH_LABEL_PREFIX}* labels",
                    "reason": "Forbidden",
                },
                {
                    "expression": "(has(object.metadata.annotations) ? object.metadata.annotations : {}) == "
                    "(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}) && "
                    "(has(object.spec.unschedulable) && object.spec.unschedulable) == "
                    "(has(oldObject.spec.unschedulable) && oldObject.spec.unschedulable)",
                    "message": "the health gate may not change a node's annotations or cordon it",
                    "reason": "Forbidden",
                },
            ],
        },
    }


def replacement_policy(cluster_name: str, pools: Sequence[str]) -> str:
    """Mark an instance Unhealthy, only in this cluster's Auto Scaling groups of the pools that ask
    for it: SetInstanceHealth is authorized on the group, with aws:ResourceTag conditions (service
    authorization reference for EC2 Auto Scaling); the groups carry `higgsfield.io/pool` and the
    autoscaler's ownership tag (components/gpu_pools.py writes both)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": ["autoscaling:SetInstanceHealth"],
                    "Resource": "*",
                    "Condition": {
                        "StringEquals": {
                            f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned",
                            f"aws:ResourceTag/{POOL_LABEL}": sorted(pools),
                        }
                    },
                }
            ],
        }
    )


def prepull_container(image: str) -> dict:
    """An init container that only makes the kubelet pull `image` (a team's higgsfield:trainingImage)
    while the node is still in its gate, so the first job finds it on the node (IfNotPresent); it
    runs `sh -c true` and holds nothing."""
    return {
        "name": "pull-training-image",
        "image": image,
        "command": ["sh", "-c", "true"],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
    }


def dcgm_container() -> dict:
    """DCGM's host engine and `dcgmi diag` beside the gate (versions.DCGM_IMAGE: the exporter's image has
    no dcgmi): it starts nv-hostengine in the pod (localhost only; `-n` stays in the foreground, `-b`
    the address, as the image's own CMD runs it, NVIDIA/DCGM:docker/Dockerfile.ubuntu22.04@v4.5.3),
    then answers each level the check writes to DCGM_EXCHANGE/request with dcgmi's JSON in result.json.
    Privileged with no GPU request, so the NVIDIA toolkit honours the image's NVIDIA_VISIBLE_DEVICES=all
    (as for the gate on Karpenter pools, gate_gpus): it sees the GPUs the gate container holds."""
    script = (
        "nv-hostengine -n -b 127.0.0.1 --log-level NONE -f - & "
        f"cd {DCGM_EXCHANGE} || exit 1; "
        "while true; do "
        "if [ -f request ]; then level=$(cat request); rm -f request; "
        'dcgmi diag -r "$level" -j > result.tmp 2>/dev/null; mv result.tmp result.json; fi; '
        "sleep 2; done"
    )
    return {
        "name": "dcgm",
        "image": versions.DCGM_IMAGE,
        "command": ["sh", "-c", script],
        "securityContext": {"privileged": True},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "4Gi"}},
        "volumeMounts": [{"name": "dcgm", "mountPath": DCGM_EXCHANGE}],
    }


def gate_gpus(pool: GpuPool) -> int:
    """The GPUs the gate requests on a node of `pool`: all of them on managed node groups. On a
    Karpenter pool none: Karpenter adds every DaemonSet pod compatible with a NodePool to the node
    it plans, and the NodePool's labels are the real node's, so no template label can keep the
    gate off a planned node as the autoscaler's node-template tag does; a gate requesting every GPU
    would leave no room for a job, and no node would be launched. There the privileged gate names
    the GPUs with NVIDIA_VISIBLE_DEVICES, which the toolkit honours in privileged containers only
    (CUDA.VisibleDevices, NVIDIA/nvidia-container-toolkit:internal/config/image/cuda_image.go@v1.20.0)."""
    return 0 if getattr(pool, "provisioner", "node-group") == "karpenter" else pool.gpus_per_node


# A rebooted node keeps its Node object: its `healthy` label stays and the kubelet does not put the
# startup taint back (images/training/health_gate.py REBOOT). This DaemonSet runs on every gated
# node that has passed, starts again after each boot, and compares the boot the gate passed with the
# running one (health_gate.py after_reboot); after a reboot it puts the startup taint back and
# labels the node `rebooted`, which the gate's DaemonSets select again. Tiny, no GPU: the
# autoscaler's template node (labelled healthy) counts its requests, which leave a job room.
REBOOT_DAEMONSET = "health-reboot-check"
REBOOT_REQUESTS = {"cpu": "10m", "memory": "64Mi"}


def reboot_daemonset(image: pulumi.Input[str]) -> dict:
    """The after-reboot check on every gated node that has passed, every taint tolerated."""
    labels = {"app.kubernetes.io/name": REBOOT_DAEMONSET, "app.kubernetes.io/part-of": "higgsfield"}
    healthy = {"key": HEALTH_LABEL, "operator": "In", "values": ["healthy"]}
    passed = {"nodeSelectorTerms": [{"matchExpressions": [healthy]}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": REBOOT_DAEMONSET, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": {**GPU_NODES, GATED_LABEL: "true"},
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": passed}},
                    "tolerations": [EVERY_TAINT],
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "after-reboot",
                            "image": image,
                            "command": ["python", "/opt/higgsfield/health_gate.py", "--after-reboot"],
                            "env": [
                                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                                {"name": "EVENTS_NAMESPACE", "value": EVENTS_NAMESPACE},
                                {"name": "STARTUP_TAINT", "value": STARTUP_TAINT_KEY},
                            ],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                                "readOnlyRootFilesystem": True,
                            },
                            "resources": {"requests": REBOOT_REQUESTS, "limits": {"memory": "128Mi"}},
                        }
                    ],
                },
            },
        },
    }


def daemonset_name(pool: str) -> str:
    return f"health-gate-{pool}"


def daemonset(
    image: pulumi.Input[str], lustre: bool = False, pool: str = "", gpus: int = 0, prepull: str | None = None
) -> dict:
    """The gate's pods for one pool: its gated GPU nodes that have not passed yet, every taint
    tolerated, every GPU of the node requested from the device plugin, privileged.

    GPUs the legitimate way: the pod requests the pool's `nvidia.com/gpu` count, so the
    device plugin allocates them (its volume mounts tell the NVIDIA runtime which: no
    NVIDIA_VISIBLE_DEVICES), the scheduler and Volcano see them taken (Volcano tracks bound pods of
    other schedulers too: the pod informer's FilterFunc in volcano-sh/volcano:pkg/scheduler/cache/
    cache.go@v1.15.1), and nothing else lands on the GPUs while they are checked. The device plugin
    tolerates every taint, so it advertises the GPUs on the tainted node before the gate's pod is
    scheduled. The pod runs only while the node is not `higgsfield.io/health=healthy` (required
    node affinity): the gate labels a passing node healthy in the same patch that removes the
    startup taint, and the DaemonSet controller then deletes the pod (NodeShouldRunDaemonPod
    returns shouldContinueRunning false when the node affinity no longer matches, kubernetes/
    kubernetes:pkg/controller/daemon/daemon_controller.go@v1.35.0), which frees the GPUs for jobs.
    The autoscaler's template node of a gated pool carries the healthy label (components/
    gpu_pools.py autoscaler_template_tags), so it never counts the gate's GPUs on a new node. A
    failed node keeps the pod and so its GPUs - it is tainted anyway. A node whose device plugin
    advertises fewer GPUs than the pool's count cannot run the pod (Insufficient nvidia.com/gpu):
    it stays tainted, unlabelled (docs/security-tenancy.md says how to find it).
    Privileged for the rest of the checks (EFA devices, the fabric); the namespace is the platform's."""
    labels = {
        "app.kubernetes.io/name": "health-gate",
        "app.kubernetes.io/part-of": "higgsfield",
        **({POOL_LABEL: pool} if pool else {}),
    }
    env = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "EVENTS_NAMESPACE", "value": EVENTS_NAMESPACE},
        {"name": "STARTUP_TAINT", "value": STARTUP_TAINT_KEY},
        {"name": "EXPECTATIONS_NAMESPACE", "value": NAMESPACE},
        {"name": "DCGM_EXCHANGE_DIR", "value": DCGM_EXCHANGE},
    ]
    if not gpus:  # a Karpenter pool (gate_gpus): privileged, so the toolkit honours the variable
        env += [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
        ]
    gpu = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    not_passed = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": HEALTH_LABEL, "operator": "NotIn", "values": ["healthy"]}]}]
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": daemonset_name(pool) if pool else "health-gate", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": {**GPU_NODES, GATED_LABEL: "true", **({POOL_LABEL: pool} if pool else {})},
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": not_passed}},
                    "tolerations": [EVERY_TAINT],
                    "terminationGracePeriodSeconds": 30,
                    **({"initContainers": [prepull_container(prepull)]} if prepull else {}),
                    "containers": [
                        {
                            "name": "gate",
                            "image": image,
                            "command": ["python", "/opt/higgsfield/health_gate.py"],
                            "env": env,
                            "securityContext": {"privileged": True},
                            "resources": {
                                "requests": {"cpu": "500m", "memory": "2Gi", **gpu},
                                "limits": {"memory": "16Gi", **gpu},
                            },
                            "volumeMounts": [
                                {"name": "dcgm", "mountPath": DCGM_EXCHANGE},
                                *([{"name": "lustre", "mountPath": MOUNT_PATH}] if lustre else []),
                            ],
                        },
                        dcgm_container(),
                    ],
                    "volumes": [
                        {"name": "dcgm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                        *([{"name": "lustre", "persistentVolumeClaim": {"claimName": HEALTH_CLAIM}}] if lustre else []),
                    ],
                },
            },
        },
    }


class HealthGate(pulumi.ComponentResource):
    """The health gate: checks every new node of the gated GPU pools before jobs may use it.

    Creates: the `higgsfield-health` namespace (Pod Security privileged: the checks need the
    devices), the gate's ServiceAccount, a ClusterRole with `get`/`list`/`patch` on nodes (and, with
    Karpenter pools, `delete` on NodeClaims, limited to its own node's by a second
    ValidatingAdmissionPolicy + binding) and its binding,
    a Role to create and list Events in `default` (where Events about nodes live: the gate's own, and
    the job watchdog's re-check requests, which the reboot check acts on) and its binding, a
    ValidatingAdmissionPolicy (+ binding) that limits the account to its own node's startup taint and health labels, one
    ConfigMap of expectations per gated pool (and a Role to read them), one DaemonSet per gated pool
    requesting the pool's GPUs (none on a Karpenter pool: gate_gpus), DCGM's container beside each
    check (dcgm_container: `dcgmi diag`), the health-reboot-check DaemonSet
    that sends a rebooted node back through the gate (reboot_daemonset), pre-pulling
    `higgsfield:trainingImage` when set (with the stack's FSx, it mounts the `lustre-health` claim the
    storage component makes in its namespace); for pools with `onFailure: replace`, an IAM
    role for EKS Pod Identity allowed `autoscaling:SetInstanceHealth` on those pools' Auto Scaling
    groups, and its association. Replaced when: never by config (objects are updated in place).
    """

    def __init__(self, name: str, args: HealthGateArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:health:HealthGate", name, None, opts)
        k8s = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        ns = KubernetesObject(
            f"{name}-namespace",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": NAMESPACE,
                    "labels": {
                        "pod-security.kubernetes.io/enforce": "privileged",
                        "app.kubernetes.io/part-of": "higgsfield",
                    },
                },
            },
            opts=k8s,
        )
        in_ns = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns])
        # its DaemonSets (the gate's code and settings, ConfigMaps, by name: NAMED_READS)
        preview_reads(name, NAMESPACE, {"apps": ["daemonsets"]}, in_ns)

        def obj(suffix: str, manifest: dict, opts: pulumi.ResourceOptions = in_ns) -> KubernetesObject:
            return KubernetesObject(f"{name}-{suffix}", manifest, opts=opts)

        account = obj(
            "account",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE},
            },
        )
        subject = service_account_subject(SERVICE_ACCOUNT, NAMESPACE)
        karpenter = any(p.provisioner == "karpenter" for p in args.pools)
        role, binding = role_and_binding("higgsfield-health-gate", gate_role_rules(karpenter), subject)
        obj("nodes-role", role, k8s)
        obj("nodes-binding", binding)
        read_expectations = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]
        role, binding = role_and_binding("health-gate-expectations", read_expectations, subject, NAMESPACE)
        obj("expectations-role", role)
        obj("expectations-binding", binding)
        # list: the re-check requests about its node (images/training/health_gate.py recheck)
        events = [{"apiGroups": [""], "resources": ["events"], "verbs": ["create", "list"]}]
        role, binding = role_and_binding("higgsfield-health-gate-events", events, subject, EVENTS_NAMESPACE)
        obj("events-role", role)
        obj("events-binding", binding)
        policy = obj("own-node", own_node_policy(), k8s)
        obj(
            "own-node-binding",
            deny_binding("higgsfield-health-gate-own-node"),
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[policy]),
        )
        ready: list[pulumi.Resource] = [account, policy]
        if karpenter:
            claims = obj("own-nodeclaim", own_nodeclaim_policy(), k8s)
            ready.append(
                obj(
                    "own-nodeclaim-binding",
                    deny_binding("higgsfield-health-gate-own-nodeclaim"),
                    pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[claims]),
                )
            )
        for (
            pool
        ) in args.pools:  # not awaited by the DaemonSet (adding a pool changes nothing else); the gate waits for it
            obj(
                f"expectations-{pool.name}",
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": expectations_name(pool.name), "namespace": NAMESPACE},
                    "data": {
                        "expectations.json": json.dumps(
                            expectations(pool, args.thresholds, args.lustre, args.cuda, args.node_release),
                            indent=1,
                            sort_keys=True,
                        )
                    },
                },
            )
        # Auto Scaling replacement for node-group pools only (a Karpenter node's NodeClaim is deleted)
        replacing = [
            p.name for p in args.pools if p.health_gate.on_failure == "replace" and p.provisioner != "karpenter"
        ]
        if replacing:
            _, credentials = pod_identity(
                f"{name}-replace",
                f"{name}-identity",
                args.tags,
                self,
                cluster=args.cluster_name,
                namespace=NAMESPACE,
                service_account=SERVICE_ACCOUNT,
                inline_policy=replacement_policy(args.cluster_name, replacing),
                depends_on=args.depends_on,
            )
            ready += credentials
        # One DaemonSet per gated pool: each requests its pool's GPU count (daemonset()), except on
        # Karpenter pools (gate_gpus).
        self.daemonsets = {
            pool.name: KubernetesObject(
                f"{name}-daemonset-{pool.name}",
                daemonset(args.image, args.lustre, pool.name, gate_gpus(pool), args.prepull_image),
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, *ready]),
            )
            for pool in args.pools
        }
        if args.pools:
            KubernetesObject(
                f"{name}-reboot-check",
                reboot_daemonset(args.image),
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, *ready]),
            )
        self.namespace = (NAMESPACE, ns)  # where the storage component puts the gate's Lustre claim
        self.register_outputs({"namespace": NAMESPACE})
